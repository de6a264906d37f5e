"""The Python API over committed fixture traces: no GPU, no torch."""

import pathlib
import shutil

import pytest

import gemm_audit

ROOT = pathlib.Path(__file__).resolve().parents[2]
CPU = ROOT / "traces" / "cpu-x86_64"
H200 = ROOT / "traces" / "nvidia-h200"


def envelope(doc, kind):
    assert doc["kind"] == kind
    assert doc["schema_version"] == 1
    assert doc["tool_version"] == gemm_audit.__version__
    assert doc["verdict"] in ("pass", "fail")


def test_read_trace_is_the_show_document():
    doc = gemm_audit.read_trace(CPU / "m-sweep.gat")
    envelope(doc, "show")
    trace = doc["trace"]
    assert trace["workload"] == "m-sweep"
    assert len(trace["routes"]) == len(trace["fingerprints"]) > 0


def test_diff_of_a_golden_with_itself_passes_with_no_differences():
    doc = gemm_audit.diff(CPU / "m-sweep.gat", CPU / "m-sweep.gat")
    envelope(doc, "diff")
    assert doc["verdict"] == "pass"
    assert doc["differences"] == []
    assert doc["cross_device"] is False


def test_diff_across_devices_names_the_classes_and_allow_passes_them():
    doc = gemm_audit.diff(CPU / "transformer-block.gat", H200 / "transformer-block.gat")
    envelope(doc, "diff")
    assert doc["verdict"] == "fail"
    assert doc["cross_device"] is True
    classes = {d["class"] for d in doc["differences"]}
    assert "identity" in classes
    everything = gemm_audit.diff(
        CPU / "transformer-block.gat",
        H200 / "transformer-block.gat",
        allow=sorted(classes),
    )
    assert everything["verdict"] == "pass"


def test_check_against_the_golden_dir_on_the_cpu():
    doc = gemm_audit.check(CPU / "m-sweep.gat", golden_dir=ROOT / "traces")
    envelope(doc, "check")
    assert doc["verdict"] == "pass", doc
    assert doc["golden"]["status"] == "ok"


def test_check_of_a_gpu_trace_on_the_cpu_is_refused_not_passed():
    doc = gemm_audit.check(H200 / "m-sweep.gat")
    envelope(doc, "check")
    assert doc["verdict"] == "fail"
    assert doc["validation"]["status"] == "refused"


def test_compare_needs_two_traces_per_group_unless_told(tmp_path):
    one = gemm_audit.compare([CPU / "m-sweep.gat"])
    envelope(one, "compare")
    assert one["verdict"] == "fail"
    assert gemm_audit.compare([CPU / "m-sweep.gat"], allow_single=True)["verdict"] == "pass"


def test_errors_are_gemm_audit_errors_naming_the_problem(tmp_path):
    bad = tmp_path / "bad.gat"
    bad.write_bytes(b"not a trace")
    with pytest.raises(gemm_audit.GemmAuditError) as e:
        gemm_audit.read_trace(bad)
    assert "bad.gat" in str(e.value)
    with pytest.raises(gemm_audit.GemmAuditError):
        gemm_audit.read_trace(tmp_path / "missing.gat")
    with pytest.raises(gemm_audit.GemmAuditError) as e:
        gemm_audit.diff(CPU / "m-sweep.gat", CPU / "m-sweep.gat", allow=["no-such-class"])
    assert "no-such-class" in str(e.value)
    with pytest.raises(gemm_audit.GemmAuditError) as e:
        gemm_audit.check(CPU / "m-sweep.gat", backend="tpu")
    assert "tpu" in str(e.value)
    empty = tmp_path / "goldens"
    empty.mkdir()
    with pytest.raises(gemm_audit.GemmAuditError):
        gemm_audit.check(CPU / "m-sweep.gat", golden_dir=empty)


def test_the_documents_equal_the_command_line_s():
    """The same documents as the CLI: $GEMM_AUDIT_BIN, else the release
    build in target/, else gemm-audit on PATH (a missing binary fails)."""
    import json
    import os
    import subprocess

    exe = os.environ.get("GEMM_AUDIT_BIN")
    if exe is None:
        built = ROOT / "target" / "release" / "gemm-audit"
        exe = str(built) if built.exists() else shutil.which("gemm-audit")
    assert exe and pathlib.Path(exe).exists(), (
        "no gemm-audit binary: build it (cargo build --release) or set GEMM_AUDIT_BIN"
    )

    out = subprocess.run(
        [str(exe), "diff", str(CPU / "m-sweep.gat"), str(H200 / "m-sweep.gat"), "--format", "json"],
        capture_output=True,
        text=True,
    ).stdout
    assert json.loads(out) == gemm_audit.diff(CPU / "m-sweep.gat", H200 / "m-sweep.gat")
    out = subprocess.run(
        [str(exe), "show", str(CPU / "m-sweep.gat"), "--format", "json"],
        capture_output=True,
        text=True,
    ).stdout
    assert json.loads(out) == gemm_audit.read_trace(CPU / "m-sweep.gat")


def test_assert_matches_golden_keeps_candidates_like_the_audit(tmp_path):
    trace = CPU / "m-sweep.gat"
    goldens = tmp_path / "goldens"
    # No golden: fails, keeps the candidate where `accept` finds it.
    with pytest.raises(AssertionError) as e:
        gemm_audit.assert_matches_golden(trace, goldens)
    pending = goldens / "cpu-x86_64" / "m-sweep.gat.pending"
    assert pending.is_file()
    assert "no golden at" in str(e.value) and "gemm-audit review" in str(e.value)
    # Installed as the golden (what `accept` does): passes, and a stale
    # candidate is settled.
    shutil.copy(trace, goldens / "cpu-x86_64" / "m-sweep.gat")
    doc = gemm_audit.assert_matches_golden(trace, goldens)
    assert doc["verdict"] == "pass" and not pending.exists()
    # A golden that differs (an older recording of the same workload):
    # fails with the differences, keeps the candidate; an allowance of
    # every differing class lets it pass.
    shutil.copy(ROOT / "tests" / "data" / "v1" / "cpu-m-sweep.gat", goldens / "cpu-x86_64" / "m-sweep.gat")
    with pytest.raises(AssertionError) as e:
        gemm_audit.assert_matches_golden(trace, goldens)
    assert "differences" in str(e.value) and "candidate kept as" in str(e.value)
    assert pending.is_file()
    classes = {d["class"] for d in gemm_audit.diff(goldens / "cpu-x86_64" / "m-sweep.gat", trace)["differences"]}
    assert classes
    assert gemm_audit.assert_matches_golden(trace, goldens, allow=sorted(classes))["verdict"] == "pass"


def test_check_on_cuda_without_a_gpu_raises_naming_what_is_missing():
    import os

    if os.path.exists("/dev/nvidiactl"):
        pytest.skip("a GPU is present: the GPU runs check this")
    with pytest.raises(gemm_audit.GemmAuditError, match="CUDA|cuda"):
        gemm_audit.check(H200 / "m-sweep.gat", backend="cuda")


def test_profiles_hold_no_bits_so_python_claims_none(tmp_path):
    """Two imported profiles (no output bits) of one step with another
    library version: the diff's summary names the library once, says the
    kernels are unchanged and the bits not observed, and no portability
    entry counts a GEMM equal."""
    profile = ROOT / "tests" / "data" / "profiles" / "cpu-block.json.gz"
    a, b = tmp_path / "a.gat", tmp_path / "b.gat"
    gemm_audit.import_profile(profile, a, libraries={"cublas": "13.0.2"})
    gemm_audit.import_profile(profile, b, libraries={"cublas": "13.1.0"})
    doc = gemm_audit.diff(a, b)
    assert doc["verdict"] == "fail"
    summary = doc["summary"]
    assert summary["outputs"] == {"bits": "not-observed"}
    assert summary["kernels"]["gemms"] == 0
    [lib] = summary["libraries"]
    assert (lib["expected"], lib["found"]) == ("cublas 13.0.2", "cublas 13.1.0")
    assert all(p["equal"] is None for p in doc["portability"])
    golden = gemm_audit.bless(a, tmp_path / "traces")
    assert golden["verdict"] == "pass", golden
    with pytest.raises(AssertionError) as e:
        gemm_audit.assert_matches_golden(b, tmp_path / "traces")
    second = str(e.value).splitlines()[1]
    assert second.startswith("libraries changed: ") and "output bits not observed" in second
