"""gemm-audit from Python: read, write, diff, check and compare GEMM traces;
record a PyTorch step's GEMMs with :mod:`gemm_audit.torch`.

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
from typing import Dict, Iterable, Optional, Union

from . import _native
from ._native import GemmAuditError

__all__ = [
    "GemmAuditError",
    "read_trace",
    "diff",
    "check",
    "compare",
    "assert_matches_golden",
    "write",
    "import_profile",
    "census",
    "__version__",
]
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


def import_profile(
    profile: PathLike,
    out: Optional[PathLike] = None,
    workload: Optional[str] = None,
    libraries: Optional[Dict[str, str]] = None,
    torch_version: Optional[str] = None,
    overwrite: bool = False,
) -> dict:
    """Imports a PyTorch profiler trace (``export_chrome_trace`` or
    ``tensorboard_trace_handler`` output, ``.json`` or ``.json.gz``) as
    ``gemm-audit import`` does, and returns the trace's ``show`` document;
    with ``out`` the trace is also written there (an existing file is
    refused unless ``overwrite``). ``doc["trace"]["observation"]`` counts
    what was bound. ``libraries`` (``{"cublas": "13.1.0"}``) and
    ``torch_version`` name what the profile does not record. A profile
    holds no output bits: ``diff``, ``check`` and ``compare`` of such
    traces say numeric "not observed"."""
    return json.loads(
        _native.import_profile(
            os.fspath(profile),
            None if out is None else os.fspath(out),
            workload,
            dict(libraries or {}),
            torch_version,
            overwrite,
        )
    )


def census(inputs: Iterable[PathLike]) -> dict:
    """The batch-variance census (``gemm-audit census --format json``) of
    profiles and traces: per GEMM family (op, layout, dtype, k, n), which
    kernels served which m, with the families whose kernel changes with m
    or that split k flagged (``verdict`` is ``"fail"`` when one is)."""
    return json.loads(_native.census([os.fspath(p) for p in inputs]))


def write(step: Union[str, dict], outputs: Iterable[bytes], path: PathLike, overwrite: bool = False) -> dict:
    """Writes the trace of an observed step to ``path`` and returns its
    ``show`` document. ``step`` is the step's JSON (or dict): ``workload``,
    ``framework`` (name, version, libraries, state), ``device`` and
    ``gemms``, as ``gemm_audit.torch`` records them (docs/python.md);
    ``outputs[i]`` is GEMM ``i``'s output in storage bytes. The trace is
    built by the Rust library (``gemm_audit::observed``); an existing file
    is refused unless ``overwrite``."""
    if not isinstance(step, str):
        step = json.dumps(step)
    return json.loads(_native.write_observed(step, [bytes(o) for o in outputs], os.fspath(path), overwrite))


def assert_matches_golden(
    trace: PathLike, golden_dir: PathLike = "traces", allow: Iterable[str] = ()
) -> dict:
    """A pytest-friendly gate: passes (returning the ``diff`` document) when
    ``trace`` matches its golden under ``golden_dir`` (differences of a
    class or field in ``allow`` pass), and settles a candidate left by an
    earlier run. Otherwise it keeps ``trace`` as the candidate beside the
    golden (``<workload>.gat.pending``, as ``gemm-audit audit`` does) and
    raises ``AssertionError`` with the differences and the commands that
    settle it (``gemm-audit review|accept|reject --golden-dir DIR``)."""
    trace, golden_dir = os.fspath(trace), os.fspath(golden_dir)
    golden = _native.golden_path(trace, golden_dir)
    settle = f"review it with `gemm-audit review --golden-dir {golden_dir}`, then `accept` or `reject`"
    if not os.path.exists(golden):
        pending = _native.keep_candidate(trace, golden_dir)
        raise AssertionError(
            f"no golden at {golden}: candidate kept as {pending}; {settle} (accepting creates the golden)"
        )
    doc = diff(golden, trace, allow)
    if doc["verdict"] == "pass":
        _native.remove_stale_candidate(trace, golden_dir)
        return doc
    pending = _native.keep_candidate(trace, golden_dir)
    raise AssertionError(
        f"{trace} differs from its golden {golden} "
        f"({len(doc['differences'])} differences):\n{_native.diff_text(golden, trace)}"
        f"candidate kept as {pending}; {settle}"
    )
