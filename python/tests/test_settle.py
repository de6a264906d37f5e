"""Creating, reviewing, accepting and rejecting goldens from Python and
with the packaged ``gemm-audit`` command: no Rust toolchain, no GPU."""

import json
import pathlib
import shutil
import subprocess
import sys

import pytest

import gemm_audit
from gemm_audit.__main__ import main as cli

ROOT = pathlib.Path(__file__).resolve().parents[2]
CPU = ROOT / "traces" / "cpu-x86_64"
OLD = ROOT / "tests" / "data" / "v1" / "cpu-m-sweep.gat"


def gemm_audit_cmd(*args, cwd=None):
    """The packaged command, as a user runs it (``python -m gemm_audit``,
    which is what the ``gemm-audit`` console script runs)."""
    return subprocess.run(
        [sys.executable, "-m", "gemm_audit", *map(str, args)], capture_output=True, text=True, cwd=cwd
    )


def test_the_package_runs_the_command_line():
    r = gemm_audit_cmd("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"gemm-audit {gemm_audit.__version__}"
    r = gemm_audit_cmd("diff", "--help")
    assert r.returncode == 0 and "Exit codes" in r.stdout
    r = gemm_audit_cmd("no-such-command")
    assert r.returncode == 2 and "unrecognized subcommand" in r.stderr
    r = gemm_audit_cmd("show", CPU / "m-sweep.gat", "--format", "json")
    assert r.returncode == 0 and json.loads(r.stdout) == gemm_audit.read_trace(CPU / "m-sweep.gat")
    # In-process too, with the documented exit codes.
    assert cli(["show", str(ROOT / "nonexistent.gat")]) == 3


def test_a_golden_is_created_reviewed_and_accepted_from_python(tmp_path):
    golden_dir = tmp_path / "traces"
    # First run: no golden, the candidate is kept.
    with pytest.raises(AssertionError, match="no golden at"):
        gemm_audit.assert_matches_golden(CPU / "m-sweep.gat", golden_dir)
    review = gemm_audit.review(golden_dir)
    assert review["kind"] == "settle" and review["verdict"] == "fail", "pending is a finding"
    [c] = review["candidates"]
    assert c["workload"] == "m-sweep" and c["new_golden"] and c["outcome"] == "pending"
    assert len(c["digest"]) == 64
    # A wrong digest installs nothing.
    refused = gemm_audit.accept(golden_dir, expect="0" * 16)
    assert refused["verdict"] == "fail"
    assert "not the one reviewed" in refused["candidates"][0]["outcome"]["refused"]
    assert not (golden_dir / "cpu-x86_64" / "m-sweep.gat").exists()
    # The reviewed digest installs it; the gate passes after.
    accepted = gemm_audit.accept(golden_dir, expect=c["digest"][:16])
    assert accepted["verdict"] == "pass" and accepted["candidates"][0]["outcome"] == "accepted"
    assert gemm_audit.assert_matches_golden(CPU / "m-sweep.gat", golden_dir)["verdict"] == "pass"
    # A drift is kept again, and rejected.
    with pytest.raises(AssertionError, match="differs from its golden"):
        gemm_audit.assert_matches_golden(OLD, golden_dir)
    assert gemm_audit.reject(golden_dir, "m-sweep")["candidates"][0]["outcome"] == "rejected"
    assert gemm_audit.review(golden_dir)["candidates"] == []
    with pytest.raises(gemm_audit.GemmAuditError, match="no pending candidate"):
        gemm_audit.accept(golden_dir, ["m-sweep"])
    with pytest.raises(gemm_audit.GemmAuditError, match="12 to 64 hex digits"):
        gemm_audit.accept(golden_dir, expect="abc")


def test_the_packaged_command_settles_what_python_kept(tmp_path):
    golden_dir = tmp_path / "traces"
    with pytest.raises(AssertionError):
        gemm_audit.assert_matches_golden(CPU / "transformer-block.gat", golden_dir)
    r = gemm_audit_cmd("review", "--golden-dir", golden_dir)
    assert r.returncode == 1, r.stderr
    assert "no golden yet: accepting creates it with:" in r.stdout and "digest" in r.stdout
    digest = gemm_audit.review(golden_dir)["candidates"][0]["digest"]
    r = gemm_audit_cmd("accept", "--golden-dir", golden_dir, "--expect", digest[:12])
    assert r.returncode == 0, r.stderr
    assert (golden_dir / "cpu-x86_64" / "transformer-block.gat").is_file()
    assert gemm_audit.assert_matches_golden(CPU / "transformer-block.gat", golden_dir)["verdict"] == "pass"


def test_bless_from_traces(tmp_path):
    golden_dir = tmp_path / "g"
    doc = gemm_audit.bless(CPU / "m-sweep.gat", golden_dir)
    assert doc["kind"] == "bless" and doc["verdict"] == "pass"
    assert pathlib.Path(doc["goldens"][0]["golden"]).is_file()
    again = gemm_audit.bless([OLD], golden_dir)
    assert again["verdict"] == "fail" and not again["goldens"][0]["written"]
    assert again["goldens"][0]["differences"], "the difference is said either way"
    forced = gemm_audit.bless([OLD], golden_dir, force=True)
    assert forced["verdict"] == "pass" and forced["goldens"][0]["replaced"]


def test_arguments_are_taken_as_a_user_passes_them(tmp_path):
    """One string is one class or field (not its characters); a
    pathlib.Path works wherever a path does; a comparison of nothing is an
    error, not a pass."""
    d = gemm_audit.diff(OLD, CPU / "m-sweep.gat")
    classes = sorted({x["class"] for x in d["differences"]})
    assert "identity" in classes
    only_identity = gemm_audit.diff(OLD, CPU / "m-sweep.gat", allow="identity")
    assert only_identity["verdict"] == ("pass" if classes == ["identity"] else "fail")
    everything = gemm_audit.diff(OLD, CPU / "m-sweep.gat", allow=classes)
    assert everything["verdict"] == "pass"
    with pytest.raises(gemm_audit.GemmAuditError, match="neither a difference class"):
        gemm_audit.diff(OLD, CPU / "m-sweep.gat", allow="i")
    empty = tmp_path / "artifacts"
    empty.mkdir()
    with pytest.raises(gemm_audit.GemmAuditError, match="nothing to compare"):
        gemm_audit.compare(empty)
    with pytest.raises(gemm_audit.GemmAuditError, match="nothing to compare"):
        gemm_audit.compare([])
    shutil.copy(CPU / "m-sweep.gat", empty / "a.gat")
    assert gemm_audit.compare(empty, allow_single=True)["verdict"] == "pass"
