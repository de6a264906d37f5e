"""``gemm_audit.compare`` says only what was seen: a tie between two devices
fails with every side listed, a trace that names another's device is a
warning and is still held to the bits, and profiles (whose outputs were not
observed) never have their outputs called equal. No torch, no GPU: the
traces are written by the same path the torch recorder uses
(``gemm_audit.write``) and imported from real CPU profiles."""

import pathlib

import gemm_audit

ROOT = pathlib.Path(__file__).resolve().parents[2]
RANKS = ROOT / "tests" / "data" / "profiles" / "cpu-ranks"

FRAMEWORK = {
    "name": "torch",
    "version": "2.11.0+cu130",
    "libraries": {"cuda": "13.0", "cublas": "13.1.0"},
    "state": {"allow_tf32": "False", "CUBLAS_WORKSPACE_CONFIG": "unset"},
}
DEVICE = {"class": "NVIDIA H200", "compute_capability": [9, 0], "multiprocessors": 132, "driver": "580.159.04"}
GEMMS = [
    {
        "name": f"aten::mm#{i}",
        "op_name": "aten::mm",
        "op": "nt",
        "dtype": "bf16",
        "m": 8,
        "k": 64,
        "n": 32,
        "lda": 64,
        "ldb": 64,
        "ldc": 32,
        "kernels": [{"name": "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT", "grid": [4, 1, 1], "block": [384, 1, 1]}],
    }
    for i in range(3)
]


def node(path, uuid, changed=None):
    """The step as one node's recorder writes it, on the card ``uuid``;
    GEMM ``changed`` (if any) gave other bits there."""
    outs = [bytearray([i + 1]) * (g["m"] * g["n"] * 2) for i, g in enumerate(GEMMS)]
    if changed is not None:
        outs[changed][0] ^= 1
    step = {
        "workload": "step@b8",
        "framework": FRAMEWORK,
        "device": DEVICE,
        "gemms": GEMMS,
        "volatile": {"cuda.device.uuid": uuid},
    }
    gemm_audit.write(step, [bytes(o) for o in outs], path)
    return str(path)


def labels(launch):
    return [o["label"] for o in launch["outliers"]]


def test_a_tie_left_by_a_duplicate_identity_fails_with_every_side_and_a_warning(tmp_path):
    a = node(tmp_path / "a.gat", "GPU-aaaa")
    b = node(tmp_path / "b.gat", "GPU-aaaa")  # carries a's device identity
    c = node(tmp_path / "c.gat", "GPU-cccc", changed=1)
    doc = gemm_audit.compare(tmp_path)
    assert doc["verdict"] == "fail", doc
    g = doc["groups"][0]
    assert g["duplicates"] == [b]
    launch = g["launches"][1]
    assert launch["contract"] == "vendor-fast" and launch["deterministic"] is True
    assert launch["outputs"] == "tie" and launch["majority"] is None
    # Every side: a and b (left out of the vote) on one, c on the other.
    sides = {}
    for o in launch["outliers"]:
        sides.setdefault(o["fingerprint"], []).append(o["label"])
    assert sorted(sides.values()) == [[a, b], [c]]
    for warnings in (g["warnings"], doc["warnings"]):
        assert any(b in w and a in w and "GPU-aaaa" in w for w in warnings), warnings
    assert [l["outputs"] for l in g["launches"]] == ["identical", "tie", "identical"]
    # A third device breaks the tie and names c alone.
    node(tmp_path / "d.gat", "GPU-dddd")
    doc = gemm_audit.compare(tmp_path)
    assert doc["verdict"] == "fail"
    launch = doc["groups"][0]["launches"][1]
    assert (launch["outputs"], launch["agree"], labels(launch)) == ("outliers", 2, [c])


def test_a_left_out_trace_that_disagrees_fails(tmp_path):
    a = node(tmp_path / "a.gat", "GPU-aaaa")
    b = node(tmp_path / "b.gat", "GPU-aaaa", changed=0)
    node(tmp_path / "c.gat", "GPU-cccc")
    doc = gemm_audit.compare(tmp_path)
    assert doc["verdict"] == "fail", doc
    assert labels(doc["groups"][0]["launches"][0]) == [b]
    # Alone with its disagreeing twin, a trace does not pass even where one
    # trace per class is allowed.
    one = gemm_audit.compare([a, b], allow_single=True)
    assert one["verdict"] == "fail", one


def test_profiles_never_have_their_outputs_called_equal(tmp_path):
    for i, p in enumerate(sorted(RANKS.iterdir())):
        gemm_audit.import_profile(p, tmp_path / f"r{i}.gat")
    doc = gemm_audit.compare(tmp_path)
    assert doc["verdict"] == "pass", "the routes agree"
    launches = doc["groups"][0]["launches"]
    assert launches
    for launch in launches:
        assert launch["outputs"] == "not-observed", launch
        assert launch["observed"] is False
        assert launch["agree"] is None and launch["majority"] is None
        assert launch["outliers"] == []
