#!/usr/bin/env python3
"""Explores launch configurations of the invariant ladder's splitting rungs
against cuBLAS (torch.matmul) on the device, without touching the crate.

The kernel source is read from crates/cuda/kernels/wgmma.cu and, for a
ring-size variant, patched in memory (the ladder's stage ring, which sets
how many blocks share an SM); the chunk count is a launch argument. Each
configuration is timed as CUDA events around a CUDA graph of 20 launches,
interleaved with cuBLAS in rounds, hot L2. Outputs of every variant are
compared bit for bit with the baseline's at the same chunk count.

    python3 tools/ladder_tune.py
"""

import ctypes
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wgmma_probe as wp  # noqa: E402

SRC = os.path.join(wp.ROOT, "crates/cuda/kernels/wgmma.cu")
LADDER_RING = "    static constexpr u32 STAGES = RING_BYTES / STAGE_BYTES;\n};\n\ntemplate <int OP, int DT, int TBM, int BN, bool GRID_CHUNKS>"


def module(ring):
    src = open(SRC).read()
    assert LADDER_RING in src
    if ring:
        src = src.replace(LADDER_RING, LADDER_RING.replace("RING_BYTES /", f"{ring} /"))
    path = f"/tmp/wgmma_ring{ring}.cu"
    open(path, "w").write(src)
    return wp.Module(wp.compile_cubin(path, "sm_90a", []))


def launcher(mod, ring, rung, op, a_st, b_st, m, k, n, chunks):
    bm, bn = (64, 64) if rung == "64x64_split" else (128, 128)
    stage = (bm + bn) * 64 * 2
    stages = (ring or 192 * 1024) // stage
    smem = stages * stage + 1024 + 16 * stages
    f = mod.func(f"gemm_ladder_{rung}_{op}_bf16", smem)
    dt = torch.bfloat16
    rows = bm if m >= bm else -(-m // 8) * 8
    ta = wp.tensor_map(a_st, (k, m, k), (64, rows), dt)
    tb = wp.tensor_map(b_st, (n, k, n), (64, 64), dt)
    c = torch.empty(m, n, device="cuda", dtype=dt)
    tiles = (-(-m // bm)) * (-(-n // bn))
    ws = torch.zeros(chunks * m * n, device="cuda", dtype=torch.float32)
    counters = torch.zeros(tiles, device="cuda", dtype=torch.int32)
    args = [ta, tb, ctypes.c_void_p(c.data_ptr()), ctypes.c_void_p(ws.data_ptr()),
            ctypes.c_void_p(counters.data_ptr()), ctypes.c_uint32(m), ctypes.c_uint32(k),
            ctypes.c_uint32(n), ctypes.c_uint32(n), ctypes.c_uint32(chunks)]  # ldc = n
    keep = (ws, counters)

    def run():
        wp.launch(f, (tiles, 1, chunks), (128 * (1 + bm // 64), 1, 1), smem, args)
        return keep

    return run, c


def graph_time(fn, reps=20, rounds=5):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    torch.cuda.synchronize()
    g.replay()
    torch.cuda.synchronize()
    def sample():
        # The graph reads the buffers fn holds: keep them alive with it.
        sample.keep = fn
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        return a.elapsed_time(b) * 1e3 / reps  # us

    sample.graph = (g, s, fn)
    return sample


KEEP = []


def main():
    torch.zeros(1, device="cuda")
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    mods = {ring: module(ring) for ring in (0, 96 * 1024, 64 * 1024)}
    dt = torch.bfloat16
    cases = [(m, 4096, 4096) for m in (1, 8, 32, 64, 128, 256)] + [(64, 14336, 4096), (64, 4096, 6144), (256, 4096, 6144)]
    configs = [("64x64_split", ring, ch) for ring in (0, 96 * 1024, 64 * 1024) for ch in (1, 2, 4, 8)]
    configs += [("128x128_split", 0, ch) for ch in (1, 2, 4)]
    for (m, k, n) in cases:
        g = torch.Generator(device="cuda").manual_seed(3)
        a = torch.randn(m, k, device="cuda", generator=g).to(dt)
        b = torch.randn(k, n, device="cuda", generator=g).to(dt)
        c = torch.empty(m, n, device="cuda", dtype=dt)
        samplers = {"cublas": graph_time(lambda: torch.matmul(a, b, out=c))}
        # A graph destroyed while another is being captured invalidates the
        # capture: keep every graph until the end.
        KEEP.append(samplers)
        outs = {}
        for (rung, ring, ch) in configs:
            if (-(-k // 64)) // ch < 8:
                continue
            run, out = launcher(mods[ring], ring, rung, "nn", a, b, m, k, n, ch)
            samplers[(rung, ring, ch)] = graph_time(run)
            outs[(rung, ring, ch)] = out
        best = {key: 1e9 for key in samplers}
        for _ in range(5):
            for key, smp in samplers.items():
                best[key] = min(best[key], smp())
        base = best["cublas"]
        line = [f"m={m} k={k} n={n}: cuBLAS {base:.1f} us"]
        for key in samplers:
            if key == "cublas":
                continue
            rung, ring, ch = key
            ref = outs.get(("64x64_split", 0, ch))
            same = "" if ref is None or torch.equal(outs[key].view(torch.int16), ref.view(torch.int16)) else " BITS DIFFER"
            line.append(f"  {rung} ring={ring // 1024 or 192}K chunks={ch}: {best[key]:.1f} us = {base / best[key]:.2f}x{same}")
        print("\n".join(line), flush=True)


if __name__ == "__main__":
    sys.exit(main())
