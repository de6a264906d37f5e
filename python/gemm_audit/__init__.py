"""gemm-audit from Python: read, diff, check and compare GEMM traces.

Every function runs gemm-audit's Rust library (no second implementation of
the trace format, digests, diff or guard) and returns the JSON document the
command line prints for the same command, as a dict: ``schema_version``,
``tool_version``, ``kind``, ``verdict`` (``"pass"`` or ``"fail"``) and the
document's own fields (see ``docs/schema/`` in the repository).
Errors (an unreadable or corrupt trace, a missing golden, a bad argument)
raise :class:`GemmAuditError`.
"""

import json
import os
from typing import Iterable, Optional, Union

from . import _native
from ._native import GemmAuditError

__all__ = ["GemmAuditError", "read_trace", "diff", "check", "compare", "__version__"]
__version__ = _native.__version__

PathLike = Union[str, "os.PathLike[str]"]


def read_trace(path: PathLike) -> dict:
    """The ``show`` document of a trace file (``doc["trace"]`` is the trace)."""
    return json.loads(_native.read_trace(os.fspath(path)))


def diff(golden: PathLike, candidate: PathLike, allow: Iterable[str] = ()) -> dict:
    """The ``diff`` document of ``candidate`` against ``golden``.

    ``allow`` names classes or fields (``"identity"``, ``"device.driver"``)
    whose differences pass, as ``gemm-audit diff --allow`` does.
    """
    return json.loads(_native.diff(os.fspath(golden), os.fspath(candidate), list(allow)))


def check(
    trace: PathLike,
    golden: Optional[PathLike] = None,
    golden_dir: Optional[PathLike] = None,
    allow: Iterable[str] = (),
    backend: str = "cpu",
) -> dict:
    """The ``check`` document of a trace: plan, validation against the live
    context of ``backend`` (``"cpu"``, ``"cuda"`` or ``"auto"``) and the
    comparison with ``golden`` or with its golden under ``golden_dir``."""
    return json.loads(
        _native.check(
            os.fspath(trace),
            None if golden is None else os.fspath(golden),
            None if golden_dir is None else os.fspath(golden_dir),
            list(allow),
            backend,
        )
    )


def compare(traces: Iterable[PathLike], allow_single: bool = False) -> dict:
    """The ``compare`` document of trace files (one group per workload,
    each device one vote); ``allow_single`` lets a one-trace group pass."""
    return json.loads(_native.compare([os.fspath(t) for t in traces], allow_single))
