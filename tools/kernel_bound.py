#!/usr/bin/env python3
"""What bounds the shipped wgmma kernels: loads or the wgmma loop (device
only; nothing here is used by the crate; docs/benchmarks.md, section 4i).

tools/wgmma_latency.py shows a chain of dependent m64n32k16 wgmma takes
24 cycles a k16 step, where the narrow rung (64x32) takes about 85 at
every m from 1 to 64. This times five builds of crates/cuda/kernels/wgmma.cu
(patched in memory) against cuBLAS and each other, in one interleaved run:

- shipped;
- no-mma: the consumers wait for each stage and release it but issue no
  wgmma (the load pipeline alone: TMA, mbarriers, the stage ring);
- no-load: the producer completes each stage's barrier without loading
  (the wgmma loop and its barriers alone, on whatever the ring holds);
- no-store: no epilogue store (one sum of the accumulators instead, so
  that ptxas keeps the wgmma);
- skeleton: none of the three (launch, barriers, the block's life).

Outputs of the variants are meaningless; only their time is.

    LD_LIBRARY_PATH=/usr/local/cuda/lib64 python3 tools/kernel_bound.py     # k = n = 4096
    LD_LIBRARY_PATH=/usr/local/cuda/lib64 python3 tools/kernel_bound.py k   # k = 256 .. 16384
"""

import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_builds as cb  # noqa: E402
import wgmma_probe as wp  # noqa: E402
from ladder_tune import best_of, graph_time as graph  # noqa: E402

MMA_LOOP = """            wgmma_tile<BN, DT, TA, TB>(d, da + block + ((ks * a_k16_bytes<OP>()) >> 4),
                                       db + block + ((ks * b_k16_bytes<OP, BN>()) >> 4));
"""
EXPECT = ("mbar_expect_tx(full, R::STAGE_BYTES);", "mbar_expect_tx(full, blocks * block_bytes);")
LOAD_CALLS = ("load_stage<OP, BM, BN>(", "load_stage<OP, TBM, BN>(")
STORE = "store_tile<DT, BN>(C, d, "
# build: defines
BUILDS = {"shipped": [], "no-mma": ["XP_NO_MMA"], "no-load": ["XP_NO_LOAD"], "no-store": ["XP_NO_STORE"],
          "skeleton": ["XP_NO_MMA", "XP_NO_LOAD", "XP_NO_STORE"]}


def patched_source():
    src = open(os.path.join(wp.ROOT, "crates/cuda/kernels/wgmma.cu")).read()
    assert src.count(MMA_LOOP) == 1
    src = src.replace(MMA_LOOP, "#ifndef XP_NO_MMA\n" + MMA_LOOP + "#endif\n")
    for e in EXPECT:
        assert src.count(e) == 1, e
        src = src.replace(e, f"\n#ifdef XP_NO_LOAD\n mbar_arrive(full);\n#else\n {e}\n#endif\n")
    for call in LOAD_CALLS:
        assert src.count(call) == 1, call
        src = src.replace(call, f"\n#ifndef XP_NO_LOAD\n if (1) \n#else\n if (0) \n#endif\n {call}")
    assert src.count(STORE) == 2
    # No store, but the accumulators stay live (ptxas drops a wgmma whose
    # results are never read): one sum, stored only if it is 1234.5.
    src = src.replace(STORE, "\n#ifdef XP_NO_STORE\n { float s_ = 0.0f; for (int q_ = 0; q_ < BN / 2; ++q_) "
                      "s_ += d[q_]; if (s_ == 1234.5f) C[0] = 1; } if (0)\n#else\n if (1)\n#endif\n " + STORE)
    path = os.path.join(tempfile.mkdtemp(), "wgmma_bound.cu")
    open(path, "w").write(src)
    return path


def main():
    torch.zeros(1, device="cuda")
    print(torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    path = patched_source()
    mods = {name: wp.Module(wp.compile_cubin(path, "sm_90a", d)) for name, d in BUILDS.items()}
    r = wp.Runner.__new__(wp.Runner)  # operands only
    dt = torch.bfloat16
    if sys.argv[1:] == ["k"]:
        # The per-stage cost: the same problems at k = 256 .. 16384.
        cases = [(kern, "nn", m, k) for (kern, m) in (("narrow", 64), ("band", 256), ("w256", 4096))
                 for k in (256, 1024, 4096, 16384)]
    else:
        cases = [("narrow", op, m, 4096) for op in ("nn", "tn") for m in (1, 8, 64) if not (op == "tn" and m < 8)]
        cases += [("band", "nn", m, 4096) for m in (64, 256)]
        cases += [("w256", op, m, 4096) for op in ("nn", "tn") for m in (1024, 4096, 8192)]
        cases += [("w128", "nn", m, 4096) for m in (1024, 4096)]
    keep = []
    print("kernel op m k (n = 4096, bf16): microseconds, cuBLAS then " + ", ".join(BUILDS)
          + "; cuBLAS time / shipped time", flush=True)
    for (kern, op, m, k) in cases:
        n = 4096
        _, _, a_st, b_st = r.operands(op, m, k, n, dt, 3)
        a_l = a_st.t() if op == "tn" else a_st
        c = torch.empty(m, n, device="cuda", dtype=dt)
        samplers = {"cublas": graph(lambda: torch.matmul(a_l, b_st, out=c), 20)}
        for name, mod in mods.items():
            run = cb.launcher(mod, kern, op, dt, a_st, b_st, m, k, n, c, n)
            samplers[name] = graph(run, 20 if m <= 1024 else 5)
        keep.append(samplers)
        best = best_of(samplers)
        cols = " ".join(f"{best[nm]:8.1f}" for nm in ["cublas", *BUILDS])
        print(f"{kern:6} {op} {m:5} {k:5} {cols}   {best['cublas'] / best['shipped']:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
