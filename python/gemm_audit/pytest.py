"""gemm-audit's pytest plugin: gate a test's GEMMs on their golden.

Installed with the package (pytest finds it through its ``pytest11`` entry
point)::

    def test_block_gemms(gemm_audit_golden):
        with gemm_audit_golden.record("block@b8") as rec:
            model(x)
        gemm_audit_golden.check(rec)

Options: ``--gemm-audit-golden-dir DIR`` (or the ``gemm_audit_golden_dir``
ini option; default ``traces``, relative to pytest's root directory) and
``--gemm-audit-accept`` (make every candidate a failing check keeps the
golden, and pass: as ``cargo insta test --accept``). A check that fails
keeps its candidate beside the golden (``<workload>.gat.pending``) and
says how to settle it; the summary lists the candidates kept.
"""

import os
import pathlib
from typing import List, Optional

import pytest

import gemm_audit

_KEPT = pytest.StashKey[List[str]]() if hasattr(pytest, "StashKey") else None


def pytest_addoption(parser):
    group = parser.getgroup("gemm-audit", "gemm-audit: GEMM goldens")
    group.addoption(
        "--gemm-audit-golden-dir",
        action="store",
        default=None,
        metavar="DIR",
        help="folder of the GEMM goldens (DIR/<device>/<workload>.gat); default: the "
        "gemm_audit_golden_dir ini option, else 'traces' under the root directory",
    )
    group.addoption(
        "--gemm-audit-accept",
        action="store_true",
        default=False,
        help="accept the candidate of every GEMM golden check that fails (create or replace "
        "the golden) instead of failing",
    )
    parser.addini("gemm_audit_golden_dir", "folder of the GEMM goldens", default="traces")


class Golden:
    """What the ``gemm_audit_golden`` fixture gives a test: record a step
    (:meth:`record`, :mod:`gemm_audit.torch`'s recorder) and check a
    recording or a trace against its golden (:meth:`check`)."""

    def __init__(self, golden_dir: pathlib.Path, accept: bool, scratch: pathlib.Path, kept: List[str]):
        #: The golden folder.
        self.golden_dir = golden_dir
        self._accept = accept
        self._scratch = scratch
        self._kept = kept

    def record(self, workload: str, **options):
        """``gemm_audit.torch.record(workload, **options)``."""
        import gemm_audit.torch as gat

        return gat.record(workload, **options)

    def check(self, recording_or_trace, allow=()) -> dict:
        """Writes a recording's trace (a trace file is taken as it is) and
        asserts it matches its golden: the ``diff`` document on a pass. On a
        drift or a missing golden the candidate is kept for review and the
        test fails naming the GEMMs and fields that moved; with
        ``--gemm-audit-accept`` the candidate becomes the golden instead."""
        trace = self._trace_of(recording_or_trace)
        try:
            return gemm_audit.assert_matches_golden(trace, self.golden_dir, allow)
        except AssertionError:
            doc = gemm_audit.read_trace(trace)["trace"]
            workload = doc["workload"]
            if self._accept:
                settled = gemm_audit.accept(self.golden_dir, [workload])
                refused = [c for c in settled["candidates"] if c["outcome"] != "accepted"]
                if refused:
                    raise
                return gemm_audit.diff(trace, trace)
            self._kept.append(workload)
            raise

    def _trace_of(self, x) -> str:
        if isinstance(x, (str, os.PathLike)):
            return os.fspath(x)
        path = self._scratch / (x.workload.replace("/", "_") + ".gat")
        x.write(path, overwrite=True)
        return os.fspath(path)


def _golden_dir(config) -> pathlib.Path:
    opt: Optional[str] = config.getoption("--gemm-audit-golden-dir")
    d = pathlib.Path(opt if opt is not None else config.getini("gemm_audit_golden_dir"))
    return d if d.is_absolute() else pathlib.Path(config.rootpath) / d


@pytest.fixture
def gemm_audit_golden(request, tmp_path) -> Golden:
    """Records a step's GEMMs and checks them against their golden (see
    :class:`Golden`)."""
    config = request.config
    kept = config.stash.setdefault(_KEPT, []) if _KEPT is not None else []
    return Golden(_golden_dir(config), config.getoption("--gemm-audit-accept"), tmp_path, kept)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    kept = config.stash.get(_KEPT, []) if _KEPT is not None else []
    if not kept:
        return
    d = _golden_dir(config)
    terminalreporter.section("gemm-audit")
    terminalreporter.write_line(
        f"{len(kept)} GEMM golden candidate(s) kept under {d}: {', '.join(sorted(set(kept)))}"
    )
    terminalreporter.write_line(
        f"review them with `gemm-audit review --golden-dir {d}`, then accept "
        "(`gemm-audit accept --expect DIGEST` or `pytest --gemm-audit-accept`) or reject"
    )
