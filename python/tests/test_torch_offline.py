"""gemm_audit.torch without torch or a GPU: the kernel binder on a real H200
profiler trace, the layout rules, and traces of observed steps (written
here, and recorded on the H200 by the recorder) through the gate."""

import json
import pathlib
import shutil

import pytest

import gemm_audit
import gemm_audit.torch as gat
from gemm_audit import _native

FIX = pathlib.Path(__file__).resolve().parent / "fixtures"


def test_kernels_are_bound_to_the_range_that_launched_them():
    trace = json.loads((FIX / "torch-profile-h200.json").read_text())
    bound, other = gat.bind_kernels(trace)
    # Range 0: one bf16 mm, launched through cuLaunchKernelEx.
    k0 = bound[0]["kernels"]
    assert [k["name"] for k in k0] == ["nvjet_sm90_tst_64x8_64x16_4x1_v_bz_NNT"]
    assert k0[0]["grid"] == [4, 1, 1] and k0[0]["block"] == [384, 1, 1]
    assert k0[0]["shared_memory"] == 164308 and k0[0]["kind"] == "kernel"
    # Range 1: two conversions, then an f32 split-K GEMM and its reduce, in
    # launch order (this trimmed profile holds no op ranges, so all four
    # came from the range itself).
    names = [k["name"] for k in bound[1]["kernels"]]
    assert len(names) == 4
    assert "sgemm" in names[2] and "splitKreduce" in names[3]
    # The relu after the ranges belongs to no GEMM.
    assert len(other) == 1 and "vectorized_elementwise_kernel" in other[0]
    # The file's path binds the same.
    assert gat.bind_kernels(FIX / "torch-profile-h200.json") == (bound, other)


def test_a_copy_from_a_child_op_stays_beside_the_gemm():
    """An addmm with a full C copies it in aten::copy_: the copy is beside
    the GEMM, never its launch (it would give the route a zero grid)."""
    ev = [
        {"ph": "X", "cat": "user_annotation", "name": "gemm_audit:0", "pid": 1, "tid": 1, "ts": 0.0, "dur": 100.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": 1.0, "dur": 90.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "pid": 1, "tid": 1, "ts": 2.0, "dur": 10.0},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1, "ts": 3.0, "dur": 2.0, "args": {"correlation": 1}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "pid": 0, "tid": 7, "ts": 50.0, "dur": 1.0, "args": {"correlation": 1, "device": 0}},
        {"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernelEx", "pid": 1, "tid": 1, "ts": 20.0, "dur": 2.0, "args": {"correlation": 2}},
        {"ph": "X", "cat": "kernel", "name": "nvjet_badd_TNT", "pid": 0, "tid": 7, "ts": 60.0, "dur": 1.0, "args": {"correlation": 2, "device": 0, "grid": [4, 1, 1], "block": [384, 1, 1]}},
    ]
    bound, other = gat.bind_kernels({"traceEvents": ev})
    assert [k["name"] for k in bound[0]["kernels"]] == ["nvjet_badd_TNT"]
    assert [(k["kind"], k["name"]) for k in bound[0]["beside"]] == [("memcpy", "Memcpy DtoD (Device -> Device)")]
    assert bound[0]["device"] == 0 and other == []


def test_a_profile_imports_and_its_census_flags_nothing_on_the_cpu(tmp_path):
    """A real CPU profile (torch, record_shapes=True) imported from Python."""
    profiles = pathlib.Path(__file__).resolve().parents[2] / "tests" / "data" / "profiles"
    doc = gemm_audit.import_profile(profiles / "cpu-sweep.json.gz", tmp_path / "s.gat")
    routes = doc["trace"]["routes"]
    assert [r["shape"]["m"] for r in routes] == [1, 2, 4, 8, 16, 32, 64]
    assert doc["trace"]["fingerprint_mode"] == "not-observed"
    assert doc["trace"]["observation"]["source"] == "pytorch-profiler"
    assert gemm_audit.read_trace(tmp_path / "s.gat")["trace"] == doc["trace"]
    with pytest.raises(gemm_audit.GemmAuditError, match="exists"):
        gemm_audit.import_profile(profiles / "cpu-sweep.json.gz", tmp_path / "s.gat")
    c = gemm_audit.census([tmp_path / "s.gat"])
    assert c["kind"] == "census" and c["verdict"] == "pass"
    assert [r["m"] for r in c["families"][0]["rows"]] == [1, 2, 4, 8, 16, 32, 64]
    d = gemm_audit.diff(tmp_path / "s.gat", tmp_path / "s.gat")
    assert d["verdict"] == "pass" and d["numeric"] == "not-observed"
    with pytest.raises(gemm_audit.GemmAuditError, match="not valid JSON"):
        bad = tmp_path / "bad.json"
        bad.write_text("{")
        gemm_audit.import_profile(bad)


def test_layouts_follow_the_strides():
    nt = gat.gemm_layout((8, 4096), (4096, 1), (4096, 6144), (1, 4096), "torch.bfloat16")
    assert (nt["op"], nt["m"], nt["k"], nt["n"], nt["lda"], nt["ldb"]) == ("nt", 8, 4096, 6144, 4096, 4096)
    tn = gat.gemm_layout((8, 4096), (1, 8), (4096, 4096), (4096, 1), "torch.float16")
    assert (tn["op"], tn["dtype"], tn["lda"]) == ("tn", "f16", 8)
    bmm = gat.gemm_layout((32, 8, 64), (512, 64, 1), (32, 64, 8), (512, 8, 1), "torch.float32")
    assert (bmm["batch"], bmm["m"], bmm["n"]) == (32, 8, 8)
    mv = gat.gemm_layout((16, 64), (64, 1), (64,), (1,), "torch.float32")
    assert (mv["op"], mv["n"]) == ("nn", 1)
    # Both operands transposed and fp8 are recorded (a trace names them).
    tt = gat.gemm_layout((8, 16), (1, 8), (16, 4), (1, 16), "torch.float32")
    assert (tt["op"], tt["lda"], tt["ldb"]) == ("tt", 8, 16)
    f8 = gat.gemm_layout((8, 16), (16, 1), (16, 4), (4, 1), "torch.float8_e4m3fn")
    assert f8["dtype"] == "f8e4m3"
    with pytest.raises(ValueError, match="is not one a trace names"):
        gat.gemm_layout((8, 16), (16, 1), (16, 4), (4, 1), "torch.complex64")
    with pytest.raises(ValueError, match="inner extents differ"):
        gat.gemm_layout((8, 16), (16, 1), (15, 4), (4, 1), "torch.float32")


FRAMEWORK = {
    "name": "torch",
    "version": "2.11.0+cu130",
    "libraries": {"cuda": "13.0", "cublas": "13.1.0"},
    "state": {"allow_tf32": "False", "CUBLAS_WORKSPACE_CONFIG": "unset"},
}
DEVICE = {"class": "NVIDIA H200", "compute_capability": [9, 0], "multiprocessors": 132, "driver": "580.159.04"}


def gemm(name, kernels):
    g = gat.gemm_layout((8, 512), (512, 1), (512, 256), (1, 512), "torch.bfloat16")
    op = name.split("#")[0]
    return dict(name=name, op_name=op, kernels=[{"name": k, "grid": [4, 1, 1], "block": [384, 1, 1]} for k in kernels], **g)


def write(path, gemms, framework=FRAMEWORK, overwrite=False):
    step = {"workload": "step@b8", "framework": framework, "device": DEVICE, "gemms": gemms}
    outs = [bytes([i]) * (g["m"] * g["n"] * 2) for i, g in enumerate(gemms)]
    return gemm_audit.write(step, outs, path, overwrite)


def test_an_observed_step_is_written_and_gated_like_any_trace(tmp_path):
    gemms = [gemm("aten::mm#0", ["nvjet_a"]), gemm("aten::addmm#1", ["nvjet_b_splitK", "splitKreduce"])]
    doc = write(tmp_path / "g.gat", gemms)
    routes = doc["trace"]["routes"]
    assert [r["gemm"] for r in routes] == ["aten::mm#0", "aten::addmm#1"]
    assert routes[1]["vendor"]["physical_kernels"] == ["nvjet_b_splitK", "splitKreduce"]
    assert gemm_audit.read_trace(tmp_path / "g.gat")["trace"] == doc["trace"]
    with pytest.raises(gemm_audit.GemmAuditError, match="exists"):
        write(tmp_path / "g.gat", gemms)
    moved = [gemms[0], gemm("aten::addmm#1", ["nvjet_c"])]
    write(tmp_path / "c.gat", moved)
    d = gemm_audit.diff(tmp_path / "g.gat", tmp_path / "c.gat")
    assert d["verdict"] == "fail"
    fields = {(x["gemm"], x["field"]) for x in d["differences"] if x["gemm"]}
    assert ("aten::addmm#1", "vendor.physical_kernels") in fields
    assert all(g != "aten::mm#0" for g, _ in fields)
    tf32 = dict(FRAMEWORK, state=dict(FRAMEWORK["state"], allow_tf32="True"))
    write(tmp_path / "t.gat", gemms, tf32)
    text = _native.diff_text(str(tmp_path / "g.gat"), str(tmp_path / "t.gat"))
    assert "allow_tf32=False" in text and "allow_tf32=True" in text


def test_precomputed_fingerprints_give_the_same_trace(tmp_path):
    """The recorder's device path (fingerprints computed where the outputs
    live) writes the trace the host path writes from the bytes."""
    gemms = [gemm("aten::mm#0", ["nvjet_a"]), gemm("aten::addmm#1", ["nvjet_b"])]
    step = gat.step_document("step@b8", FRAMEWORK, DEVICE, gemms)
    outs = [bytes([i]) * (g["m"] * g["n"] * 2) for i, g in enumerate(gemms)]
    host = json.loads(_native.write_observed(step, outs, str(tmp_path / "h.gat")))
    fps = [_native.fingerprint_bytes(o) for o in outs]
    pre = json.loads(_native.write_observed_fingerprinted(step, fps, str(tmp_path / "d.gat")))
    assert pre["trace"] == host["trace"]
    with pytest.raises(gemm_audit.GemmAuditError, match="input seed 7, not 0"):
        bad = json.loads(fps[0])
        bad["input_seed"] = 7
        _native.write_observed_fingerprinted(step, [json.dumps(bad), fps[1]], str(tmp_path / "x.gat"))


def test_device_fingerprints_refuse_without_a_device():
    if not hasattr(_native, "DeviceFingerprints"):
        pytest.skip("built without the cuda feature")
    with pytest.raises(gemm_audit.GemmAuditError):
        _native.DeviceFingerprints(0)


def test_bad_steps_raise_naming_the_problem(tmp_path):
    with pytest.raises(gemm_audit.GemmAuditError, match="observed step"):
        _native.write_observed("{}", [], str(tmp_path / "x.gat"))
    step = gat.step_document("s", FRAMEWORK, DEVICE, [gemm("aten::mm#0", ["k"])])
    with pytest.raises(gemm_audit.GemmAuditError, match="0 outputs for 1 GEMMs"):
        _native.write_observed(step, [], str(tmp_path / "x.gat"))
    assert not (tmp_path / "x.gat").exists()


def test_h200_recordings_gate_bit_for_bit_and_catch_a_planted_tf32(tmp_path):
    """Traces the recorder wrote on the H200 (docs/gpu-validation.md): a
    re-recording in a new process matches its golden; one with TF32 on
    fails it, naming the f32 GEMM and its new kernel."""
    golden = pathlib.Path(_native.golden_path(str(FIX / "torch-block-b8-h200.gat"), str(tmp_path)))
    golden.parent.mkdir(parents=True)
    shutil.copy(FIX / "torch-block-b8-h200.gat", golden)
    doc = gemm_audit.assert_matches_golden(FIX / "torch-block-b8-rerun-h200.gat", tmp_path)
    assert doc["differences"] == []
    planted = tmp_path / "planted.gat"
    shutil.copy(FIX / "torch-block-b8-tf32-h200.gat", planted)
    with pytest.raises(AssertionError) as e:
        gat.assert_matches_golden(planted, tmp_path)
    msg = str(e.value)
    assert "aten::mm#4" in msg and "vendor.physical_kernels" in msg and "tensorop" in msg
    assert "allow_tf32=False" in msg and "allow_tf32=True" in msg, "the knob that moved is named"
    assert pathlib.Path(str(golden) + ".pending").exists()


def test_binding_follows_the_launching_thread_and_range():
    def x(cat, name, tid, ts, dur=1.0, **args):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}

    trace = {
        "traceEvents": [
            x("user_annotation", "gemm_audit:0", 10, 100.0, 50.0),
            x("user_annotation", "gemm_audit:1", 10, 200.0, 50.0),
            x("cuda_runtime", "cudaLaunchKernel", 10, 120.0, correlation=1),
            x("cuda_driver", "cuLaunchKernelEx", 10, 250.0, correlation=2),  # at range 1's end
            x("cuda_runtime", "cudaLaunchKernel", 11, 210.0, correlation=3),  # another thread
            x("cuda_runtime", "cudaLaunchKernel", 10, 170.0, correlation=4),  # between ranges
            x("kernel", "gemm_a", 7, 130.0, correlation=1, grid=[2, 1, 1], block=[128, 1, 1]),
            x("kernel", "gemm_b", 7, 260.0, correlation=2),
            x("kernel", "other_thread", 7, 215.0, correlation=3),
            x("kernel", "between", 7, 175.0, correlation=4),
        ]
    }
    bound, other = gat.bind_kernels(trace)
    assert [k["name"] for k in bound[0]["kernels"]] == ["gemm_a"]
    assert bound[0]["kernels"][0]["grid"] == [2, 1, 1] and bound[0]["kernels"][0]["shared_memory"] == 0
    assert [k["name"] for k in bound[1]["kernels"]] == ["gemm_b"]
    assert sorted(other) == ["between", "other_thread"]


def test_graph_replay_and_compiled_region_gemms_are_bound_to_their_regions():
    def x(cat, name, ts, dur=1.0, tid=10, **args):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}

    trace = {
        "traceEvents": [
            x("user_annotation", "gemm_audit:0", 100.0, 20.0),
            x("cuda_runtime", "cudaLaunchKernel", 105.0, correlation=1),
            x("kernel", "nvjet_eager", 150.0, tid=7, correlation=1, device=0),
            x("cpu_op", "CompiledFunction", 200.0, 50.0),
            x("cuda_runtime", "cudaGraphLaunch", 210.0, correlation=2),
            x("kernel", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", 300.0, tid=7, correlation=2, device=0),
            x("kernel", "triton_poi_fused_gelu_0", 303.0, tid=7, correlation=2, device=0),
        ]
    }
    doc = gat.bind_profile(trace)
    assert [k["name"] for k in doc["gemms"][0]["kernels"]] == ["nvjet_eager"]
    assert [(r["label"], [k["name"] for k in r["kernels"]], r["device"]) for r in doc["regions"]] == [
        ("cudaGraphLaunch in CompiledFunction", ["sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n"], 0)
    ]
    assert doc["other_kernels"] == ["triton_poi_fused_gelu_0"]
    # bind_kernels keeps its shape: region kernels are among the others.
    bound, other = gat.bind_kernels(trace)
    assert list(bound) == [0]
    assert sorted(other) == ["sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", "triton_poi_fused_gelu_0"]


def test_convolution_kernels_follow_the_one_kernel_rule():
    """cuDNN's convolution kernels are convolutions whether or not their
    name says splitK (a V100 training step has both): never a
    GEMM of a region, never an other kernel. The rule is the Rust one."""
    train = "cudnn_train_volta_scudnn_128x128_stridedB_splitK_medium_nn_v1"
    infer = "cudnn_infer_volta_scudnn_128x64_relu_medium_nn_v1"
    assert gat.kernel_class(train) == gat.kernel_class(infer) == "convolution"
    assert gat.kernel_class("volta_sgemm_128x64_nn") == "gemm"
    assert gat.kernel_class("void cublasLt::splitKreduce_kernel<32, 16, int>(int)") == "gemm-reduce"
    assert gat.kernel_class("triton_poi_fused_gelu_0") == "other"

    def x(cat, name, ts, dur=1.0, tid=10, **args):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}

    trace = {
        "traceEvents": [
            x("cpu_op", "aten::cudnn_convolution", 100.0, 50.0),
            x("cuda_runtime", "cudaLaunchKernel", 105.0, correlation=1),
            x("cuda_runtime", "cudaLaunchKernel", 110.0, correlation=2),
            x("kernel", train, 150.0, tid=7, correlation=1, device=0),
            x("kernel", infer, 160.0, tid=7, correlation=2, device=0),
        ]
    }
    doc = gat.bind_profile(trace)
    assert doc["regions"] == [] and doc["other_kernels"] == []
    assert doc["convolution_kernels"] == [train, infer]
    bound, other = gat.bind_kernels(trace)
    assert bound == {} and other == [train, infer]
