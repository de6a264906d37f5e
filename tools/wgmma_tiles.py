#!/usr/bin/env python3
"""The wgmma family's 128-row tiles at large m: 128x256 (`wgmma-large`),
128x128 (`wgmma-small`) and 128x192 against each other and cuBLAS (device
only; nothing here is used by the crate; docs/benchmarks.md, section 4l).

The question: where 128x256 tiles quantize badly on 132 SMs (the QKV
projection at m = 1024: 192 tiles, 1.45 waves) and 128x128 tiles run
slower per tile, does a 128x192 tile (256 tiles, 1.94 waves) get nearer
cuBLAS? First every tile gives the 128x256 kernel's bits (NN/TN/NT x
bf16/f16, m, n and k tails), then each is timed interleaved with cuBLAS
(CUDA graphs of launches, hot L2, best of 7 rounds).

    LD_LIBRARY_PATH=/usr/local/cuda/lib64 python3 tools/wgmma_tiles.py
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wgmma_probe as wp  # noqa: E402
from ladder_tune import best_of, graph_time as graph  # noqa: E402

TILES = (256, 128, 192)


def main():
    torch.zeros(1, device="cuda")
    print(torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    mod = wp.Module(wp.compile_cubin(os.path.join(wp.ROOT, "crates/cuda/kernels/wgmma.cu"), "sm_90a", []))
    r = wp.Runner.__new__(wp.Runner)
    ok = True
    for dtype in (torch.bfloat16, torch.float16):
        for op in ("nn", "tn", "nt"):
            for (m, k, n) in ((200, 1024, 264), (1000, 520, 3072), (1024, 4096, 6144), (136, 4096, 4104)):
                _, _, a_st, b_st = r.operands(op, m, k, n, dtype, 7)
                outs = {}
                for bn in TILES:
                    c = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
                    wp.kernel_launch(mod, (128, bn), "wgmma", op, dtype, a_st, b_st, m, k, n, c)()
                    torch.cuda.synchronize()
                    outs[bn] = c
                for bn in TILES[1:]:
                    diff = (wp.bits(outs[bn]) != wp.bits(outs[256])).sum().item()
                    nan = torch.isnan(outs[bn].float()).sum().item()
                    good = diff == 0 and nan == 0
                    ok &= good
                    print(f"{'OK ' if good else 'BAD'} {op} {str(dtype)[6:]:8} 128x{bn} vs 128x256 {m}x{k}x{n}: "
                          f"{diff} differ, {nan} unwritten", flush=True)
    print("TILE BITS", "PASS" if ok else "FAIL", flush=True)
    if not ok:
        return 1
    dt = torch.bfloat16
    cases = [("nn", m, 4096, 4096) for m in (520, 640, 1024, 4096, 8192)]
    cases += [("tn", 1024, 4096, 4096), ("nt", 1024, 4096, 4096)]
    cases += [("nn", m, 4096, 6144) for m in (1024, 2048, 4096, 8192)]
    cases += [("nn", m, 4096, 14336) for m in (1024, 4096)]
    cases += [("nn", m, 14336, 4096) for m in (1024, 4096)]
    cases += [("nn", 8192, 8192, 8192), ("tn", 1024, 4096, 6144), ("nt", 1024, 4096, 6144)]
    keep = []
    print("op m x k x n   cuBLAS us, then 128x256 128x128 128x192 us; (cuBLAS time / tile time)", flush=True)
    for (op, m, k, n) in cases:
        _, _, a_st, b_st = r.operands(op, m, k, n, dt, 3)
        a_l = a_st.t() if op == "tn" else a_st
        b_l = b_st.t() if op == "nt" else b_st
        c = torch.empty(m, n, device="cuda", dtype=dt)
        reps = max(3, min(20, int(4e12 / (2.0 * m * k * n))))
        samplers = {"cublas": graph(lambda: torch.matmul(a_l, b_l, out=c), reps)}
        for bn in TILES:
            samplers[bn] = graph(wp.kernel_launch(mod, (128, bn), "wgmma", op, dt, a_st, b_st, m, k, n, c), reps)
        keep.append(samplers)
        best = best_of(samplers)
        base = best["cublas"]
        us = " ".join(f"{best[bn]:8.1f}" for bn in TILES)
        ratios = ", ".join(f"{base / best[bn]:.3f}" for bn in TILES)
        print(f"{op} {m}x{k}x{n} {base:9.1f} {us}  ({ratios})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
