#!/usr/bin/env python3
"""Why TN is slower than NN on the decode rung (64x64 tiles) at m = 65-128:
the rung against cuBLAS by op and m (bf16 and f16, k = n = 4096, hot L2),
beside two variants built in memory from crates/cuda/kernels/wgmma.cu:

- k1: the decode rung with stages of one k block (the shipped one has two);
- g1: tiles in row-major order (GROUP_M = 1: every tile column of row tile
  0, then of row tile 1), where the shipped order interleaves the two row
  tiles of a column.

Each variant's output is compared bit for bit with the shipped rung's (only
the stage size or the order blocks run in differ). Timing: CUDA events
around CUDA graphs of 20 launches, interleaved with cuBLAS, best of 7.

    LD_LIBRARY_PATH=/usr/local/cuda/lib64 python3 tools/tn_decode_probe.py
    ncu --cache-control none --clock-control none --kernel-name regex:'ladder|nvjet|gemv|cutlass|sm90' \\
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \\
        python3 tools/tn_decode_probe.py --ncu

`--stages` times instead the decode (64x64) and narrow (64x32) rungs
beside themselves with the other stage size: the decode rung's two k
blocks a stage against four (`gemm_ladder_64x64_splitk4_*`), the narrow
rung's four against two (`gemm_ladder_64x32_foldk2_*`), at m = 1-128,
after the same bit check. (docs/benchmarks.md 4o's run, `--kps4` at
d1d0954, timed four blocks on both rungs against the two both shipped
then.)

`--ncu` runs the decode rung (TN, NN) and cuBLAS (TN, NN) at m = 128,
bf16, three launches each (the later ones L2-hot under
`--cache-control none`).
"""

import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wgmma_probe as wp  # noqa: E402
from ladder_tune import best_of, graph_time  # noqa: E402

SRC = os.path.join(wp.ROOT, "crates/cuda/kernels/wgmma.cu")
K = N = 4096


def module(group_m1):
    """The shipped module plus the decode rung with one and with four k
    blocks a stage (`gemm_ladder_64x64_splitk1_*`, `..._splitk4_*`) and the
    narrow rung with two (`gemm_ladder_64x32_foldk2_*`); with `group_m1`,
    every kernel runs its tiles in row-major order."""
    src = open(SRC).read()
    decode = "LADDER_OPS(64, 64, split, true, 2, bf16, DT_BF16)\n"
    narrow = "LADDER_OPS(64, 32, fold, false, 4, bf16, DT_BF16)\n"
    assert decode in src and narrow in src and "#define GROUP_M 16\n" in src
    src = src.replace(narrow, narrow + "".join(
        f"LADDER_OPS({tile}, {how}, {gc}, {k}, {dt})\n"
        for (tile, how, gc, k) in (("64, 64", "splitk1", "true", 1), ("64, 64", "splitk4", "true", 4),
                                   ("64, 32", "foldk2", "false", 2))
        for dt in ("f16, DT_F16", "bf16, DT_BF16")))
    if group_m1:
        src = src.replace("#define GROUP_M 16\n", "#define GROUP_M 1\n")
    path = os.path.join(tempfile.mkdtemp(), "wgmma_tn_decode.cu")
    with open(path, "w") as f:
        f.write(src)
    return wp.Module(wp.compile_cubin(path, "sm_90a", []))


def decode(mod, op, dtype, a_st, b_st, m, c, k1=False, tile=(64, 64), kps=""):
    """The decode rung (or `tile`'s rung) as shipped, or with stages of one
    (`k1`) or `kps` = "k4" or "k2" k blocks (see `module`)."""
    how = "split" if tile == (64, 64) else "fold"
    run = wp.kernel_launch(mod, tile, how, op, dtype, a_st, b_st, m, K, N, c)
    if k1 or kps:
        dt = "bf16" if dtype == torch.bfloat16 else "f16"
        run.f = mod.func(f"gemm_ladder_{tile[0]}x{tile[1]}_{how}{'k1' if k1 else kps}_{op}_{dt}", run.smem)
    return run


KEEP = []


def row(r, op, m, dtype, names, make):
    """One problem: `make(a_st, b_st, outs)` returns a launcher per name
    (the first the shipped kernel) writing into `outs[name]`; each runs
    once on a NaN-filled output and must give the first's bits, then all
    are timed interleaved with cuBLAS. (bits equal, cuBLAS us, {name:
    cuBLAS time / its time})."""
    a, b, a_st, b_st = r.operands(op, m, K, N, dtype, 3)
    a_l = a_st.t() if op == "tn" else a_st
    b_l = b_st.t() if op == "nt" else b_st
    outs = {key: torch.full((m, N), float("nan"), device="cuda", dtype=dtype) for key in ("cublas",) + names}
    runs = make(a_st, b_st, outs)
    for run in runs.values():
        run()
    torch.cuda.synchronize()
    ok = True
    ref = wp.bits(outs[names[0]])
    for key in names[1:]:
        if (wp.bits(outs[key]) != ref).sum().item() or torch.isnan(outs[key].float()).any():
            print(f"BAD {op} m={m} {key}: bits differ from {names[0]}", flush=True)
            ok = False
    samplers = {"cublas": graph_time(lambda: torch.matmul(a_l, b_l, out=outs["cublas"]))}
    samplers.update({key: graph_time(run) for key, run in runs.items()})
    KEEP.append((samplers, runs, outs))
    best = best_of(samplers)
    base = best["cublas"]
    return ok, base, {key: base / best[key] for key in names}


def main_stages(r):
    """Each of the decode and narrow rungs beside its other stage size."""
    ok = True
    dtype = torch.bfloat16
    names = ("decode", "decodek4", "narrow", "narrowk2")
    print(f"{'op':3} {'m':>4} {'cuBLAS':>7} " + " ".join(f"{x:>8}" for x in names), flush=True)
    for op in ("nn", "tn", "nt"):
        for m in (1, 8, 32, 64, 96, 128):
            if op == "tn" and m % 8:
                continue
            good, base, ratio = row(r, op, m, dtype, names, lambda a_st, b_st, outs: {
                name: decode(r.wg, op, dtype, a_st, b_st, m, outs[name],
                             tile=(64, 64) if name.startswith("decode") else (64, 32),
                             kps=name[-2:] if name[-2:] in ("k4", "k2") else "")
                for name in names})
            ok &= good
            print(f"{op:3} {m:>4} {base:7.2f} " + " ".join(f"{ratio[key]:8.3f}" for key in names), flush=True)
    print("STAGES BITS", "PASS" if ok else "FAIL", flush=True)
    return 0 if ok else 1


def main_ncu(r):
    dt = torch.bfloat16
    for op in ("tn", "nn"):
        a, b, a_st, b_st = r.operands(op, 128, K, N, dt, 3)
        a_l = a_st.t() if op == "tn" else a_st
        c = torch.empty(128, N, device="cuda", dtype=dt)
        run = decode(r.wg, op, dt, a_st, b_st, 128, c)
        for _ in range(3):
            run()
        for _ in range(3):
            torch.matmul(a_l, b, out=c)
    torch.cuda.synchronize()
    print("done", flush=True)
    return 0


def main():
    torch.zeros(1, device="cuda")
    print(torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    r = wp.Runner.__new__(wp.Runner)
    r.wg = module(False)
    if "--ncu" in sys.argv:
        return main_ncu(r)
    if "--stages" in sys.argv:
        return main_stages(r)
    g1 = module(True)
    ok = True
    names = ("decode", "k1", "g1")
    for dtype in (torch.bfloat16, torch.float16):
        print(f"{str(dtype)[6:]}: cuBLAS us, then cuBLAS time / kernel time", flush=True)
        print(f"{'op':3} {'m':>4} {'cuBLAS':>7} {'decode':>7} {'k1':>7} {'g1':>7}", flush=True)
        for op in ("nn", "tn", "nt"):
            for m in (64, 96, 128, 192, 256):
                good, base, ratio = row(r, op, m, dtype, names, lambda a_st, b_st, outs: {
                    "decode": decode(r.wg, op, dtype, a_st, b_st, m, outs["decode"]),
                    "k1": decode(r.wg, op, dtype, a_st, b_st, m, outs["k1"], k1=True),
                    "g1": decode(g1, op, dtype, a_st, b_st, m, outs["g1"]),
                })
                ok &= good
                print(f"{op:3} {m:>4} {base:7.2f} " + " ".join(f"{ratio[key]:7.3f}" for key in names), flush=True)
    print("VARIANT BITS", "PASS" if ok else "FAIL", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
