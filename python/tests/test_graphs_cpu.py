"""The per-GEMM comparisons of recordings (eager against replay, several
batch sizes) on real CPU recordings, checked against torch itself, and
the graph recorder's refusal where there is no CUDA device. The CUDA-graph
path itself is tested on a GPU (test_torch_gpu.py)."""

import os

import pytest

if os.environ.get("GEMM_AUDIT_REQUIRE_TORCH"):
    import torch
else:
    torch = pytest.importorskip("torch")

import gemm_audit.torch as gat
from gemm_audit import GemmAuditError


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU(), torch.nn.Linear(96, 32)).eval()


def leading_rows(b):
    g = torch.Generator().manual_seed(3)
    return torch.randn(64, 64, generator=g)[:b].clone()


def recorded(m, x, workload="mlp"):
    with torch.no_grad(), gat.record(workload) as rec:
        m(x)
    return rec


def test_compare_recordings_names_the_gemm_and_the_first_differing_element():
    m, x = model(), leading_rows(8)
    a = recorded(m, x)
    same = gat.compare_recordings(a, recorded(m, x))
    assert [r["identical"] for r in same] == [True, True]
    assert all(r["first_difference"] is None for r in same)
    with torch.no_grad():
        m[2].weight[5, 7] += 1e-3  # column 5 of the second GEMM's output
    b = recorded(m, x)
    found = gat.compare_recordings(a, b)
    assert found[0]["identical"]
    second = found[1]
    assert second["gemm"] == "aten::addmm#1" and not second["identical"]
    # torch says where the outputs first differ.
    out_a = torch.frombuffer(bytearray(a.output_bytes()[1]), dtype=torch.float32).view(8, 32)
    out_b = torch.frombuffer(bytearray(b.output_bytes()[1]), dtype=torch.float32).view(8, 32)
    differs = (out_a.view(torch.int32) != out_b.view(torch.int32)).flatten().nonzero()
    first = int(differs[0])
    assert second["first_difference"] == {"element": first, "row": first // 32, "column": first % 32}
    assert second["first_difference"]["column"] == 5


def test_compare_recordings_refuses_two_different_steps():
    m = model()
    a = recorded(m, leading_rows(8))
    with torch.no_grad(), gat.record("one") as one:
        m[0](leading_rows(8))
    with pytest.raises(GemmAuditError, match="hold 2 and 1 GEMMs"):
        gat.compare_recordings(a, one)
    with pytest.raises(GemmAuditError, match="not one GEMM: m 8 / 4"):
        gat.compare_recordings(a, recorded(m, leading_rows(4)))


def test_batch_invariance_agrees_with_torch_on_the_shared_rows():
    m = model()
    recs = {b: recorded(m, leading_rows(b), f"mlp@b{b}") for b in (1, 8, 64)}
    matrix = gat.batch_invariance(recs)
    assert [r["gemm"] for r in matrix] == ["aten::addmm#0", "aten::addmm#1"]
    for r in matrix:
        assert r["rows_compared"] == 1 and r["ms"] == {1: 1, 8: 8, 64: 64}
        assert r["identical"][1] is True
    # The first GEMM's shared row at each size, compared by torch.
    with torch.no_grad():
        rows = {b: torch.addmm(m[0].bias, leading_rows(b), m[0].weight.t())[:1] for b in (1, 8, 64)}
    first = matrix[0]
    for b in (8, 64):
        assert first["identical"][b] == torch.equal(rows[b].view(torch.int32), rows[1].view(torch.int32))
        assert (first["first_difference"][b] is None) == first["identical"][b]
    assert first["invariant"] == all(first["identical"].values())


def test_batch_invariance_needs_two_sizes_of_one_step():
    m = model()
    with pytest.raises(GemmAuditError, match="two batch sizes"):
        gat.batch_invariance({1: recorded(m, leading_rows(1))})
    with torch.no_grad(), gat.record("one") as one:
        m[0](leading_rows(8))
    with pytest.raises(GemmAuditError, match="different numbers of GEMMs"):
        gat.batch_invariance({1: recorded(m, leading_rows(1)), 8: one})


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for a host without CUDA")
def test_capture_without_cuda_is_refused():
    with pytest.raises(GemmAuditError, match="no CUDA device"):
        with gat.capture():
            pass


def test_record_without_the_profiler_needs_graphs():
    m, x = model(), leading_rows(8)
    with pytest.raises(GemmAuditError, match="profile=False"):
        with torch.no_grad(), gat.record("mlp", profile=False):
            m(x)
