"""gemm-audit from Python: read, write, diff, check and compare GEMM traces;
import PyTorch profiles; create, review, accept and reject goldens; record a
PyTorch step's GEMMs with :mod:`gemm_audit.torch`; gate them in pytest with
:mod:`gemm_audit.pytest`. The package also installs the ``gemm-audit``
command (the same Rust command line; ``python -m gemm_audit`` runs it too).

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
    "review",
    "accept",
    "reject",
    "bless",
    "__version__",
]
__version__ = _native.__version__

PathLike = Union[str, "os.PathLike[str]"]


def _names(allow: Union[str, Iterable[str]]) -> list:
    """``allow`` as a list of names: one string is one class or field
    (``allow="identity"``), never its characters."""
    if isinstance(allow, (str, os.PathLike)):
        return [os.fspath(allow)]
    return [os.fspath(a) for a in allow]


def read_trace(path: PathLike) -> dict:
    """The ``show`` document of a trace file (``doc["trace"]`` is the trace)."""
    return json.loads(_native.read_trace(os.fspath(path)))


def diff(golden: PathLike, candidate: PathLike, allow: Union[str, Iterable[str]] = ()) -> dict:
    """The ``diff`` document of ``candidate`` against ``golden``.

    ``allow`` names classes or fields (``"identity"``, ``"device.driver"``)
    whose differences pass, as ``gemm-audit diff --allow`` does.
    """
    return json.loads(_native.diff(os.fspath(golden), os.fspath(candidate), _names(allow)))


def check(
    trace: PathLike,
    golden: Optional[PathLike] = None,
    golden_dir: Optional[PathLike] = None,
    allow: Union[str, Iterable[str]] = (),
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
            _names(allow),
            backend,
        )
    )


def compare(traces: Union[PathLike, Iterable[PathLike]], allow_single: bool = False) -> dict:
    """The ``compare`` document of trace files, or of the ``*.gat`` files
    under folders (one group per workload and device class, each device one
    vote); ``allow_single`` lets a one-trace group pass. A route served
    another way fails, and so do output bits off the majority or a tie
    (every side listed) where the contract promises the same bits on one
    class (docs/fleet.md). A trace left out as another's device is named
    in ``doc["warnings"]``; launches whose outputs were not observed
    (imported profiles) say ``"outputs": "not-observed"``. Finding no
    trace raises :class:`GemmAuditError`: a comparison of nothing is not a
    pass."""
    if isinstance(traces, (str, os.PathLike)):
        traces = [traces]
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
    trace: PathLike, golden_dir: PathLike = "traces", allow: Union[str, Iterable[str]] = ()
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


def review(golden_dir: PathLike = "traces", workloads: Union[str, Iterable[str]] = ()) -> dict:
    """The candidates kept beside drifted or missing goldens under
    ``golden_dir`` (``gemm-audit review --format json``): per candidate its
    workload, device, paths, ``digest`` (what :func:`accept` takes as
    ``expect``), ``new_golden`` and its ``differences`` from the golden.
    ``verdict`` is ``"fail"`` while any is pending. Changes nothing."""
    return _settle(golden_dir, "review", workloads, ())


def accept(
    golden_dir: PathLike = "traces",
    workloads: Union[str, Iterable[str]] = (),
    expect: Union[str, Iterable[str]] = (),
) -> dict:
    """Makes the pending candidates the goldens (``gemm-audit accept``).
    With ``expect`` (digests :func:`review` returned), a candidate is
    installed only when its file is still the one reviewed; one a later
    run replaced is refused (its ``outcome`` says why, ``verdict`` fails)."""
    return _settle(golden_dir, "accept", workloads, expect)


def reject(golden_dir: PathLike = "traces", workloads: Union[str, Iterable[str]] = ()) -> dict:
    """Drops the pending candidates; the goldens stay (``gemm-audit
    reject``)."""
    return _settle(golden_dir, "reject", workloads, ())


def _settle(golden_dir, action, workloads, expect) -> dict:
    return json.loads(
        _native.settle(os.fspath(golden_dir), action, _names(workloads), _names(expect))
    )


def bless(
    traces: Union[PathLike, Iterable[PathLike]], golden_dir: PathLike = "traces", force: bool = False
) -> dict:
    """Makes traces the goldens under ``golden_dir``
    (``DIR/<device>/<workload>.gat``), as ``gemm-audit bless --from``
    does: an existing golden is replaced only with ``force``, and its
    differences are reported either way (``verdict`` fails when one was
    not replaced)."""
    if isinstance(traces, (str, os.PathLike)):
        traces = [traces]
    return json.loads(
        _native.bless_from([os.fspath(t) for t in traces], os.fspath(golden_dir), force)
    )
