"""Ranks of a live job agree through torch.distributed
(gemm_audit.distributed): a real job of 4 processes under torchrun, Gloo on
the CPU, each recording a tiny model with gemm_audit.torch and calling
agree (python/tests/rank_job.py). All agree; a rank with a nudged weight,
another CPU thread count or one more GEMM is named on every rank and in
rank 0's compare document; a rank that leaves before agreeing makes every
other rank raise naming it.

torch is required where ``GEMM_AUDIT_REQUIRE_TORCH`` is set (``.ci/run``
sets it): a missing torch is then a failure, never a skip."""

import json
import os
import pathlib
import socket
import subprocess
import sys

import pytest

if os.environ.get("GEMM_AUDIT_REQUIRE_TORCH"):
    import torch
else:
    torch = pytest.importorskip("torch")

import gemm_audit
import gemm_audit.distributed as gad
import gemm_audit.torch as gat
from gemm_audit import _rank_digests as rd

JOB = pathlib.Path(__file__).with_name("rank_job.py")
RANKS = 4


def run_job(scenario, tmp_path, ranks=RANKS):
    """Runs the job; returns {rank: what it wrote} and the output."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks),
         str(JOB), scenario, str(tmp_path)],
        capture_output=True, text=True, timeout=180, cwd=tmp_path, env=env,
    )
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    found = {}
    for rank in range(ranks):
        p = tmp_path / f"verdict-rank{rank}.json"
        if p.exists():
            found[rank] = json.loads(p.read_text())
    return found, out


def verdicts(found):
    for rank, d in found.items():
        assert "error" not in d, f"rank {rank}: {d['error']}"
    return {rank: d["verdict"] for rank, d in found.items()}


def test_ranks_that_computed_the_same_agree_every_round(tmp_path):
    found, out = run_job("agree", tmp_path)
    v = verdicts(found)
    assert sorted(v) == list(range(RANKS)), out[-4000:]
    for rank, d in v.items():
        assert d["agree"] is True, d["describe"]
        assert (d["rank"], d["ranks"], d["gemms"], d["same_outputs"]) == (rank, RANKS, 2, True)
        assert d["odd_ranks"] == [] and d["disagreements"] == []
        # Digests only: a 4-int64 count check and [h, ~h] of 3 entries
        # (context + 2 GEMMs) for routes and outputs, plus the store gate.
        assert d["collectives"] == 2
        assert 32 + 2 * 2 * 3 * 8 < d["bytes_sent"] < 512, d["bytes_sent"]
        assert d["describe"].startswith("gemm-audit agree: PASS: 4 ranks agree on the routes and outputs of 2 GEMMs")
    assert not (tmp_path / "report").exists(), "no traces are gathered where the ranks agree"
    # Three rounds ran: round 0's keys are gone, round 2's are still there.
    for d in found.values():
        assert d["keys_left"] == [] and d["keys_kept"] is True, d


def compare_names_rank2(tmp_path, found):
    """Rank 0's compare document (its file and its verdict's copy) fails
    and its outliers are rank 2's trace alone."""
    doc = json.loads((tmp_path / "report" / "compare.json").read_text())
    assert doc == found[0]["compare"]
    assert doc["kind"] == "compare" and doc["verdict"] == "fail"
    assert sorted(p.name for p in (tmp_path / "report").glob("*.gat")) == ["rank0.gat", "rank1.gat", "rank2.gat"]
    labels = set()
    for g in doc["groups"]:
        labels.update(m if isinstance(m, str) else json.dumps(m) for m in g.get("mismatched", []))
        for launch in g["launches"]:
            for o in launch["outliers"] + launch["route_outliers"]:
                labels.add(json.dumps(o))
    assert labels, doc
    assert all("rank2.gat" in x for x in labels), labels
    return doc


def odd_rank2_everywhere(found, gemms=2):
    v = verdicts(found)
    assert sorted(v) == list(range(RANKS))
    descriptions = set()
    for d in v.values():
        assert d["agree"] is False
        assert d["odd_ranks"] == [2] and d["majority"] == [0, 1, 3], d["describe"]
        assert d["named"]["2"]["rank"] == 2 and d["named"]["2"]["host"] == socket.gethostname()
        assert d["named"]["2"]["cpu_model"], "a CPU rank is named by its CPU model"
        assert d["sides"][0]["ranks"] == [0, 1, 3] and d["sides"][1]["ranks"] == [2]
        descriptions.add(d["describe"].split("\n  compare document")[0])
    assert len(descriptions) == 1, "every rank gets the same verdict"
    assert "rank 2 (host" in descriptions.pop()
    assert v[0]["report"].endswith("compare.json")
    return v


def test_a_rank_with_other_output_bits_is_named_on_every_rank(tmp_path):
    found, _ = run_job("weight", tmp_path)
    v = odd_rank2_everywhere(found)
    for d in v.values():
        # Only the GEMM after the nudged weight differs, and only its bits.
        assert [(x["gemm"], x["what"]) for x in d["disagreements"]] == [("aten::addmm#1", "output")]
        (field,) = d["disagreements"][0]["fields"]
        assert field["field"] == "output" and field["values"][0] != field["values"][1]
        assert field["values"][1].startswith("sha256 ")
    doc = compare_names_rank2(tmp_path, found)
    (launch,) = [x for g in doc["groups"] for x in g["launches"] if x["outliers"]]
    assert launch["gemm"] == "aten::addmm#1" and launch["tie"] is False
    assert "profile.rank=2" in launch["outliers"][0]["device"]


def test_a_rank_with_another_knob_is_named_on_every_rank(tmp_path):
    found, _ = run_job("knob", tmp_path)
    v = odd_rank2_everywhere(found)
    for d in v.values():
        assert d["same_outputs"] is False
        (x,) = d["disagreements"]
        assert (x["gemm"], x["what"]) == ("context", "route")
        assert {"field": "framework.state.cpu_threads", "values": ['"1"', '"2"']} in x["fields"], x["fields"]
        assert "framework.state.cpu_threads" in d["describe"]
    compare_names_rank2(tmp_path, found)


def test_a_rank_that_ran_another_gemm_count_is_named(tmp_path):
    found, _ = run_job("extra", tmp_path)
    v = odd_rank2_everywhere(found)
    for d in v.values():
        assert d["count_differs"] is True
        assert [s["gemms"] for s in d["sides"]] == [2, 3]
        assert "GEMM counts differ" in d["describe"]
    assert (tmp_path / "report" / "rank2.gat").exists()
    doc = json.loads((tmp_path / "report" / "compare.json").read_text())
    assert doc["verdict"] == "fail"


def test_two_ranks_that_differ_are_a_tie_with_both_sides_named(tmp_path):
    found, _ = run_job("tie", tmp_path, ranks=2)
    v = verdicts(found)
    assert sorted(v) == [0, 1]
    for d in v.values():
        assert d["agree"] is False and d["majority"] is None
        assert d["odd_ranks"] == [0, 1] and [s["ranks"] for s in d["sides"]] == [[0], [1]]
        assert sorted(d["named"]) == ["0", "1"]
        assert [(x["gemm"], x["what"]) for x in d["disagreements"]] == [("aten::addmm#1", "output")]
        assert "no majority (a tie): ranks [0] (rank 0 (host" in d["describe"], d["describe"]
    doc = json.loads((tmp_path / "report" / "compare.json").read_text())
    (launch,) = [x for g in doc["groups"] for x in g["launches"] if x["outliers"]]
    assert launch["tie"] is True and len(launch["outliers"]) == 2


def test_a_rank_that_never_arrives_is_an_error_naming_it(tmp_path):
    found, _ = run_job("dead", tmp_path)
    assert sorted(found) == [0, 1, 3], "rank 2 left before agreeing"
    for rank, d in found.items():
        assert "verdict" not in d, f"rank {rank} passed without rank 2: {d}"
        assert "ranks [2] of 4 did not arrive at agree() within 4 s" in d["error"], d["error"]
        assert d["error"].startswith(f"rank {rank}:")


def recorded():
    torch.manual_seed(0)
    with torch.no_grad(), gat.record("one") as rec:
        torch.nn.Linear(8, 4)(torch.randn(2, 8))
    return rec


def test_bad_input_is_an_error_never_a_pass():
    with pytest.raises(gemm_audit.GemmAuditError, match="holds no GEMM"):
        gad.agree(gat.Recording("empty"))
    with pytest.raises(gemm_audit.GemmAuditError, match="takes a gemm_audit.torch.Recording"):
        gad.agree({"gemms": []})
    assert not torch.distributed.is_initialized()
    with pytest.raises(gemm_audit.GemmAuditError, match="no torch.distributed process group is initialized"):
        gad.agree(recorded())


def test_route_digests_see_routes_not_machines():
    rec = recorded()
    (g,) = rec.gemms
    # Rank 3 on cuda:3 runs the GEMM the way rank 0 does on cuda:0.
    assert rd.gemm_digest(dict(g, device="cuda:3")) == rd.gemm_digest(dict(g, device="cuda:0"))
    assert rd.gemm_fields(dict(g, device="cuda:3")) == rd.gemm_fields(dict(g, device="cuda:0"))
    kernel = {"name": "sm90_xmma_gemm", "kind": "gemm", "grid": [4, 1, 1], "block": [128, 1, 1], "shared_memory": 0}
    variants = [
        g,
        dict(g, kernels=[kernel]),
        dict(g, kernels=[dict(kernel, grid=[8, 1, 1])]),
        dict(g, kernels=[dict(kernel, shared_memory=1024)]),
        dict(g, kernels=[kernel, dict(kernel, name="splitKreduce_kernel")]),
        dict(g, beside=[dict(kernel, name="copy")]),
        dict(g, ldb=g["ldb"] + 1),
        dict(g, op="tn"),
        dict(g, dtype="bf16"),
        dict(g, device="cuda:0"),
    ]
    # Every route change moves the digest, and the flat fields name it.
    assert len({rd.gemm_digest(x) for x in variants}) == len(variants)
    assert len({rd.fields_digest(rd.gemm_fields(x)) for x in variants}) == len(variants)
    # The context: knobs and libraries count, the per-machine facts do not.
    ctx = rd.context_fields(rec.framework, rec.device)
    tf32 = dict(rec.framework, state=dict(rec.framework["state"], allow_tf32="True"))
    assert rd.context_fields(tf32, rec.device) != ctx
    rec.volatile = {"cpu.model": "another CPU", "cuda.device.uuid": "GPU-1"}
    assert rd.entries(rec)[0] == ctx
    # Outputs: the device's fingerprints where the recorder took them,
    # else the same fingerprint of the host bytes.
    (fp,) = rd.output_fingerprints(rec)
    assert json.loads(fp)["bytes"] == 2 * 4 * 4
    rec._fingerprints = [fp]
    assert rd.output_fingerprints(rec) == [fp]
