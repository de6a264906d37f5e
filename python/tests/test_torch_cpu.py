"""The recorder on the CPU with real torch: a model recorded, its golden
created and accepted through the Python API and the packaged command,
re-recorded bit for bit, a planted change caught naming the GEMM, and the
batch and thread-count probes on real CPU GEMMs.

torch is required where ``GEMM_AUDIT_REQUIRE_TORCH`` is set (``.ci/run``
sets it): a missing torch is then a failure, never a skip."""

import os
import subprocess
import sys
import warnings

import pytest

if os.environ.get("GEMM_AUDIT_REQUIRE_TORCH"):
    import torch
else:
    torch = pytest.importorskip("torch")

import gemm_audit
import gemm_audit.torch as gat


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64)
    ).eval()


def step(m, x, path, workload="mlp@b8"):
    with torch.no_grad(), gat.record(workload) as rec:
        m(x)
        torch.bmm(x.view(2, 4, 64), m[0].weight[:32].t().expand(2, 64, 32).contiguous())
    rec.write(path, overwrite=True)
    return rec


def test_a_cpu_step_is_recorded_gated_and_a_change_is_named(tmp_path):
    m, x = model(), torch.randn(8, 64)
    golden_dir = tmp_path / "traces"
    rec = step(m, x, tmp_path / "run1.gat")
    assert [(g["op_name"], g["device"], g["op"], g["m"], g["k"], g["n"]) for g in rec.gemms] == [
        ("aten::addmm", "cpu", "nt", 8, 64, 256),
        ("aten::addmm", "cpu", "nt", 8, 256, 64),
        ("aten::bmm", "cpu", "nn", 4, 64, 32),
    ]
    assert rec.gemms[2]["batch"] == 2
    assert rec.skipped == [] and rec.fingerprinted_on == "host"
    assert rec.device["class"].startswith("cpu/")
    libs, state = rec.framework["libraries"], rec.framework["state"]
    assert libs["cpu-blas"] and state["cpu_threads"] == str(torch.get_num_threads())
    assert "cublas" not in libs, "a CPU step names no GPU library"
    # First gate: no golden, a candidate kept; the packaged command accepts it.
    with pytest.raises(AssertionError, match="no golden at"):
        gemm_audit.assert_matches_golden(tmp_path / "run1.gat", golden_dir)
    digest = gemm_audit.review(golden_dir)["candidates"][0]["digest"]
    r = subprocess.run(
        [sys.executable, "-m", "gemm_audit", "accept", "--golden-dir", str(golden_dir), "--expect", digest],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    # The same step again, in this process: bit for bit.
    step(m, x, tmp_path / "run2.gat")
    assert gemm_audit.assert_matches_golden(tmp_path / "run2.gat", golden_dir)["differences"] == []
    # A planted change (one weight nudged) is caught, naming the GEMMs.
    with torch.no_grad():
        m[2].weight[0, 0] += 1e-3
    step(m, x, tmp_path / "run3.gat")
    with pytest.raises(AssertionError) as e:
        gemm_audit.assert_matches_golden(tmp_path / "run3.gat", golden_dir)
    msg = str(e.value)
    assert "aten::addmm#1" in msg and "output_fingerprint" in msg
    assert "aten::addmm#0" not in msg, "the GEMM that did not change is not named"
    # The summary comes first: no library or kernel changed, one GEMM's bits did.
    headline = msg.splitlines()[1]
    assert headline == "no library changed; kernels unchanged; output bits differ in 1 GEMMs", msg
    summary = gemm_audit.diff(tmp_path / "run2.gat", tmp_path / "run3.gat")["summary"]
    assert summary["outputs"] == {"bits": "differ", "gemms": 1, "first": ["aten::addmm#1"]}
    assert summary["libraries"] == [] and summary["kernels"]["gemms"] == 0


def test_a_new_process_reproduces_the_golden(tmp_path):
    """The golden made here matches a recording made in another process."""
    m, x = model(), torch.randn(8, 64, generator=torch.Generator().manual_seed(1))
    golden_dir = tmp_path / "traces"
    step(m, x, tmp_path / "a.gat")
    gemm_audit.bless(tmp_path / "a.gat", golden_dir)
    script = f"""
import torch, gemm_audit, gemm_audit.torch as gat
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64)).eval()
x = torch.randn(8, 64, generator=torch.Generator().manual_seed(1))
with torch.no_grad(), gat.record("mlp@b8") as rec:
    m(x)
    torch.bmm(x.view(2, 4, 64), m[0].weight[:32].t().expand(2, 64, 32).contiguous())
rec.write({str(tmp_path / 'b.gat')!r})
print(gemm_audit.assert_matches_golden({str(tmp_path / 'b.gat')!r}, {str(golden_dir)!r})["verdict"])
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip().endswith("pass"), r.stderr[-2000:]


def test_the_probes_run_on_real_cpu_gemms():
    m, x = model(), torch.randn(64, 64)
    with torch.no_grad(), gat.record("probe") as rec:
        m(x)
        torch.mm(torch.randn(8, 8192, dtype=torch.float64), torch.randn(8192, 64, dtype=torch.float64))
    threads = rec.probe_thread_invariance([1, 2, 4])
    assert [t["gemm"] for t in threads] == ["aten::addmm#0", "aten::addmm#1", "aten::mm#2"]
    for t in threads:
        assert t["threads"] == [1, 2, 4] and set(t["identical"]) == {1, 2, 4}
        assert t["identical"][1] is True, "the first count is the reference"
        assert t["invariant"] == all(t["identical"].values())
    assert torch.get_num_threads() >= 1
    batch = rec.probe_batch_invariance(ms=[1, 4, 64])
    assert [b["gemm"] for b in batch] == ["aten::addmm#0", "aten::addmm#1", "aten::mm#2"]
    for b in batch:
        assert b["ms"] == [1, 4, 64] and b["identical"][1] is True
        assert b["kernels"] == {1: [], 4: [], 64: []}, "no GPU kernel on the CPU"
    with pytest.raises(gemm_audit.GemmAuditError, match="at least one"):
        rec.probe_thread_invariance([])


def test_gpu_features_on_a_cpu_machine_are_clear_errors():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the device runs cover the CUDA path")
    with pytest.raises(gemm_audit.GemmAuditError, match="torch sees no CUDA device"):
        with gat.record("x", device="cuda"):
            pass
    with pytest.raises(gemm_audit.GemmAuditError):
        gemm_audit._native.DeviceFingerprints(0)


def counting_backend():
    """A torch.compile backend that runs the compiled graph and counts
    its calls: (backend, calls)."""
    calls = []

    def counting(gm, inputs):
        def run(*args):
            calls.append(1)
            return gm(*args)

        return run

    return counting, calls


def test_a_compiled_step_runs_its_compiled_code_under_the_recorder():
    """torch.compile skips compiled code under a dispatch mode unless the
    mode ignores compile internals: the recorder's does, so what runs
    inside record() is the compiled step, not its eager twin."""
    counting, calls = counting_backend()

    m, x = model(), torch.randn(8, 64)
    compiled = torch.compile(m, backend=counting)
    with torch.no_grad():
        compiled(x)
        before = len(calls)
        with gat.record("compiled@b8") as rec:
            y = compiled(x)
    assert len(calls) - before == 1, "the compiled function ran eagerly inside record()"
    assert [g["op_name"] for g in rec.gemms] == ["aten::addmm", "aten::addmm"], rec.gemms
    assert [(g["m"], g["k"], g["n"]) for g in rec.gemms] == [(8, 64, 256), (8, 256, 64)]
    assert torch.equal(y, m(x))


def test_another_dispatch_mode_that_makes_compiled_code_eager_is_named():
    """Under a user's dispatch mode that does not ignore compile internals
    torch runs compiled code eagerly: a recording started under it says
    so, naming the mode, and what it records is indeed the eager ops."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class UserTagging(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    counting, calls = counting_backend()

    w = torch.randn(64, 32)

    def step(x):  # its own code object: torch remembers a skipped one
        return torch.mm(x, w)

    compiled, x = torch.compile(step, backend=counting), torch.randn(8, 64)
    compiled(x)
    before = len(calls)
    with UserTagging():
        with pytest.warns(UserWarning, match="dispatch mode UserTagging is active") as caught:
            with gat.record("eager-under-a-mode") as rec:
                compiled(x)
    assert "recorded as its eager ops" in str(caught[0].message)
    assert len(calls) == before, "the compiled function ran: the warning would be false"
    assert [g["op_name"] for g in rec.gemms] == ["aten::mm"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with gat.record("no-other-mode"):
            torch.mm(x, w)


def opens_of(path, monkeypatch) -> list:
    """The list each later ``open(path)`` appends ``path`` to."""
    opened = []
    real_open = open

    def counting_open(p, *args, **kwargs):
        if p == path:
            opened.append(p)
        return real_open(p, *args, **kwargs)

    monkeypatch.setattr("builtins.open", counting_open)
    return opened


def test_a_loaded_library_is_found_once_per_process(monkeypatch):
    """Finding a loaded library scans /proc/self/maps (thousands of lines
    in a CUDA process, every recording): a library found once is not
    looked for again, and one not loaded is looked for each time."""
    from gemm_audit import _environment as recorder

    monkeypatch.setattr(recorder, "_PROCESS_FACTS", {})
    libc = recorder._loaded_library("libc")
    assert libc and "libc.so" in libc
    scans = opens_of("/proc/self/maps", monkeypatch)
    assert recorder._loaded_library("libc") == libc
    assert scans == []
    assert recorder._loaded_library("libgemm_audit_not_loaded") is None
    assert recorder._loaded_library("libgemm_audit_not_loaded") is None
    assert len(scans) == 2


def test_the_cpu_model_is_read_once_per_process(monkeypatch):
    """The CPU model a trace keeps (never compared) comes from
    /proc/cpuinfo once per process, not at every recording."""
    from gemm_audit import _environment as recorder

    monkeypatch.setattr(recorder, "_PROCESS_FACTS", {})
    first = recorder._volatile(None)
    reads = opens_of("/proc/cpuinfo", monkeypatch)
    assert recorder._volatile(None) == first
    assert reads == []
    monkeypatch.setattr(recorder, "_PROCESS_FACTS", {})
    assert recorder._volatile(None) == first
    assert reads == ["/proc/cpuinfo"]
