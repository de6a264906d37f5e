"""CUDA graphs recorded live, on a real GPU with real torch: eager against
replay per GEMM, graphs captured at batch 1, 8 and 64, a divergence
planted only while capturing, make_graphed_callables, a reduce-overhead
compiled step, and the refusals.

These need a CUDA device: they are skipped where torch sees none (the CI
box) and run on the GPU machine (docs/gpu-validation.md says how and
what ran there)."""

import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

import gemm_audit.torch as gat
from gemm_audit import GemmAuditError


class Step(torch.nn.Module):
    """A bf16 MLP (256 -> 512 -> 256) and an f32 head (256 -> 128)."""

    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(256, 512).to(torch.bfloat16)
        self.down = torch.nn.Linear(512, 256).to(torch.bfloat16)
        self.head = torch.nn.Linear(256, 128)

    def forward(self, x):
        h = self.down(torch.relu(self.up(x)))
        return self.head(h.float())


def model():
    torch.manual_seed(0)
    return Step().cuda().eval()


def rows(b):
    """b rows of input whose leading rows are the same at every b."""
    g = torch.Generator(device="cuda").manual_seed(1)
    return torch.randn(64, 256, device="cuda", generator=g).to(torch.bfloat16)[:b].clone()


def captured(m, x, label="step"):
    """The step captured in a CUDA graph (after a warm-up on a side
    stream, as torch's docs do), under gat.capture."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.no_grad():
        for _ in range(2):
            m(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with gat.capture(label) as cap:
        with torch.cuda.graph(g), torch.no_grad():
            y = m(x)
    return g, y, cap


def eager(m, x, workload="step@b8"):
    with torch.no_grad(), gat.record(workload, device="cuda") as rec:
        m(x)
    return rec


def replayed(g, cap, workload="step@b8", times=1):
    with gat.record(workload, device="cuda", graphs=cap) as rec:
        for _ in range(times):
            g.replay()
    return rec


def diff(tmp_path, a, b):
    """`gemm-audit diff` of two recordings, written as traces first."""
    a.write(tmp_path / "a.gat", overwrite=True)
    b.write(tmp_path / "b.gat", overwrite=True)
    return subprocess.run(
        [sys.executable, "-m", "gemm_audit", "diff", str(tmp_path / "a.gat"), str(tmp_path / "b.gat")],
        capture_output=True,
        text=True,
    )


def test_a_replay_is_bound_to_its_captured_gemms_and_matches_eager(tmp_path):
    m, x = model(), rows(8)
    ref = eager(m, x)
    g, y, cap = captured(m, x)
    assert [gm["op_name"] for gm in cap.graphs[0].gemms] == ["aten::addmm"] * 3
    rec = replayed(g, cap)
    assert [gm["name"] for gm in rec.gemms] == [gm["name"] for gm in ref.gemms]
    assert all(gm["graph"] == "step#0, replay 0" for gm in rec.gemms)
    assert all(gm["kernels"] for gm in rec.gemms), rec.gemms
    assert rec.fingerprinted_on == "device"
    found = gat.compare_recordings(ref, rec)
    assert [r["same_kernels"] for r in found] == [True] * 3, found
    assert [r["identical"] for r in found] == [True] * 3, found
    # The replay wrote the head's output into the graph's static output:
    # the recorded copy is those bits.
    assert rec.output_bytes()[2] == gat._storage_bytes(y)
    # The replay's trace gates against the eager one: same routes.
    out = diff(tmp_path, ref, rec)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "replayed from a CUDA graph" in out.stdout, out.stdout


def test_device_fingerprints_of_many_outputs_are_the_hosts():
    """The recorder hashes every output in one launch: each fingerprint is
    the host's of the same bytes, whatever the size (under a chunk, not a
    multiple of one, empty), a view at an unaligned offset or strided."""
    from gemm_audit import _native

    g = torch.Generator(device="cuda").manual_seed(3)
    base = torch.randn(300, 257, device="cuda", generator=g)
    tensors = [
        base,
        base.to(torch.bfloat16),
        base[:1, :3],
        base.to(torch.bfloat16).reshape(-1)[1:2051],  # 2-byte offset: not 4-byte aligned
        base[:, :100],  # strided: hashed dense
        base[:0],
        torch.randn(8, 4096, device="cuda", generator=g).to(torch.bfloat16),
    ]
    device, why = gat._device_fingerprints(tensors)
    assert why is None, why
    host = [_native.fingerprint_bytes(gat._storage_bytes(t)) for t in tensors]
    assert device == host
    with pytest.raises(GemmAuditError, match="range 0"):
        gat._FINGERPRINTERS[torch.cuda.current_device()].fingerprint_many([(base.data_ptr(), 1 << 40)])


def test_three_replays_are_three_steps_of_gemms():
    m, x = model(), rows(8)
    g, _, cap = captured(m, x)
    rec = replayed(g, cap, times=3)
    assert len(rec.gemms) == 9
    assert [gm["graph"] for gm in rec.gemms[::3]] == [f"step#0, replay {r}" for r in range(3)]
    kernels = [[k["name"] for k in gm["kernels"]] for gm in rec.gemms]
    assert kernels[:3] == kernels[3:6] == kernels[6:]


def test_bound_replays_record_without_the_profiler(tmp_path):
    """After one profiled replay, profile=False records replays with the
    kernels that replay ran and their own output bits: the same trace."""
    m, x = model(), rows(8)
    g, _, cap = captured(m, x)
    with pytest.raises(GemmAuditError, match="no replay of it has been recorded with the profiler"):
        with gat.record("step@b8", device="cuda", graphs=cap, profile=False):
            g.replay()
    profiled = replayed(g, cap)
    with gat.record("step@b8", device="cuda", graphs=cap, profile=False) as fast:
        g.replay()
    assert not fast.profiled and profiled.profiled
    assert [gm["kernels"] for gm in fast.gemms] == [gm["kernels"] for gm in profiled.gemms]
    assert all(gm["graph"] == "step#0, replay 1 (kernels as its profiled replay 0 ran them)" for gm in fast.gemms)
    assert fast.fingerprinted_on == "device"
    assert fast.output_bytes() == profiled.output_bytes()
    out = diff(tmp_path, profiled, fast)
    assert out.returncode == 0, out.stdout + out.stderr
    # An eager GEMM cannot be bound without the profiler.
    with pytest.raises(GemmAuditError, match="ran eagerly inside record"):
        with torch.no_grad(), gat.record("step@b8", device="cuda", graphs=cap, profile=False):
            m(x)


def test_graphs_at_batch_1_8_64_give_the_batch_matrix():
    m = model()
    recs, outs = {}, {}
    for b in (1, 8, 64):
        g, y, cap = captured(m, rows(b), label=f"b{b}")
        recs[b] = replayed(g, cap, workload=f"step@b{b}")
        outs[b] = y.clone()
    matrix = gat.batch_invariance(recs)
    assert [r["gemm"] for r in matrix] == [gm["name"] for gm in recs[1].gemms]
    assert all(r["rows_compared"] == 1 for r in matrix)
    assert all(all(r["kernels"][b] for b in (1, 8, 64)) for r in matrix)
    # The head's shared row, compared by torch itself, says the same.
    head = matrix[-1]
    for b in (8, 64):
        same = torch.equal(outs[b][:1].view(torch.int32), outs[1][:1].view(torch.int32))
        assert head["identical"][b] == same, head


def test_tf32_while_capturing_is_caught_naming_the_gemm(tmp_path):
    m, x = model(), rows(8)
    torch.backends.cuda.matmul.allow_tf32 = False
    ref = eager(m, x)
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        g, _, cap = captured(m, x)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False
    rec = replayed(g, cap)
    found = gat.compare_recordings(ref, rec)
    assert [r["same_kernels"] for r in found[:2]] == [True, True], found
    head = found[2]
    assert head["gemm"] == "aten::addmm#2"
    assert not head["same_kernels"], head
    assert head["kernels"][0] != head["kernels"][1]
    if not head["identical"]:
        assert head["first_difference"]["element"] is not None
    out = diff(tmp_path, ref, rec)
    assert out.returncode != 0
    assert "aten::addmm#2" in out.stdout, out.stdout


def test_make_graphed_callables_replays_are_recorded():
    m, x = model(), rows(8)
    ref = eager(m, x)
    with gat.capture("graphed") as cap:
        graphed = torch.cuda.make_graphed_callables(m, (x,))
    assert len(cap.graphs) >= 1 and len(cap.graphs[0].gemms) == 3
    with gat.record("step@b8", device="cuda", graphs=cap) as rec:
        graphed(x)
    assert len(rec.gemms) == 3
    found = gat.compare_recordings(ref, rec)
    assert all(r["same_kernels"] for r in found), found


def test_a_reduce_overhead_step_says_what_it_cannot_see():
    m, x = model(), rows(8)
    c = torch.compile(m, mode="reduce-overhead")
    with gat.capture("compiled") as cap, torch.no_grad():
        for _ in range(3):
            c(x)
    graphs = [g for g in cap.graphs if g.gemms]
    assert graphs and all(g.managed for g in graphs), cap.graphs
    assert all(gm["op_name"] in ("aten::mm", "aten::addmm") for g in graphs for gm in g.gemms), graphs
    with pytest.raises(GemmAuditError, match="CUDA-graph trees"):
        with gat.record("compiled@b8", device="cuda", graphs=cap), torch.no_grad():
            c(x)


def test_a_gemm_on_another_stream_is_refused_naming_it():
    m, x = model(), rows(8)
    g = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    with pytest.raises(GemmAuditError, match=r"aten::addmm#1 was dispatched on stream"):
        with gat.capture("forked"):
            with torch.cuda.graph(g), torch.no_grad():
                h = m.up(x)
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    h2 = m.down(h)
                torch.cuda.current_stream().wait_stream(side)
                del h2


def test_a_replay_with_no_capture_recorded_is_refused():
    m, x = model(), rows(8)
    g, _, cap = captured(m, x)
    other = torch.cuda.CUDAGraph()
    with torch.cuda.graph(other), torch.no_grad():
        m(x)
    with pytest.raises(GemmAuditError, match="not captured under gemm_audit.torch.capture"):
        with gat.record("step@b8", device="cuda", graphs=cap):
            other.replay()
    with gat.record("step@b8", device="cuda") as rec:
        other.replay()
    assert rec.unseen_graphs and rec.regions
    with pytest.raises(GemmAuditError, match="capture the graph inside gemm_audit.torch.capture"):
        rec.write(os.devnull + ".gat")


def test_a_capture_with_no_gemm_is_refused():
    x = rows(8)
    g = torch.cuda.CUDAGraph()
    with pytest.raises(GemmAuditError, match="captured no GEMM-family op"):
        with gat.capture("relu"):
            with torch.cuda.graph(g):
                torch.relu(x)
