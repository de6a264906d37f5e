#!/usr/bin/env python3
"""Builds of crates/cuda/kernels/wgmma.cu compared bit for bit and timed
against each other and cuBLAS in one interleaved run (device only; nothing
here is used by the crate; docs/gpu-validation.md, step 3).

BASE.cu is the reference build (e.g. the committed file, from
`git show REV:crates/cuda/kernels/wgmma.cu`); each NEW.cu is a variant
(default: the working tree's wgmma.cu). Every kernel family (wgmma 256,
192 and 128, the ladder's five rungs) runs every build on NaN-filled outputs:
dense C, C 4 bytes off a 16-byte boundary, and C with a padded even ldc;
an element that differs from BASE's, or is left unwritten, fails. Then
each is timed (CUDA graphs of launches, hot L2, best of 7 interleaved
rounds).

    LD_LIBRARY_PATH=/usr/local/cuda/lib64 python3 scripts/compare_builds.py BASE.cu [NEW.cu ...]
    COMPARE_CASES=ladder ...   # time the ladder's rungs at decode and mid sizes instead
    COMPARE_CASES=none ...     # bits only
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wgmma_probe as wp  # noqa: E402

# family: (rows, cols, how), how = wgmma | split | fold
FAMILIES = {"w256": (128, 256, "wgmma"), "w192": (128, 192, "wgmma"), "w128": (128, 128, "wgmma"),
            "decode": (64, 64, "split"),
            "mid": (128, 128, "split"), "wide": (128, 128, "fold"), "band": (64, 128, "fold"),
            "narrow": (64, 32, "fold")}
KEEP = []


def chunks(k, n):
    """docs/design.md: 1 where n has 128 tiles of 32 columns; else 128 / ceil(n / 64)
    blocks, 1..4, each chunk >= 8 blocks of 64 k."""
    if -(-n // 32) >= 128:
        return 1
    tiles = max(1, -(-n // 64))
    by_k = max(1, (-(-k // 64)) // 8)
    return min(max(1, min(4, 128 // tiles)), by_k)


def graph_time(fn, reps=20):
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
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        return a.elapsed_time(b) * 1e3 / reps  # us

    sample.graph = (g, s, fn)
    return sample


def best_of(samplers, rounds=7):
    """The fastest of `rounds` interleaved samples of each sampler (us):
    every route sees the same clocks and the same L2."""
    best = {key: float("inf") for key in samplers}
    for _ in range(rounds):
        for key, smp in samplers.items():
            best[key] = min(best[key], smp())
    return best


def launcher(mod, fam, op, dtype, a_st, b_st, m, k, n, c, ldc, lda=None):
    """A launch of family `fam` writing C (`c`'s storage, rows ldc apart)."""
    bm, bn, how = FAMILIES[fam]
    return wp.kernel_launch(mod, (bm, bn), how, op, dtype, a_st, b_st, m, k, n, c, ldc=ldc,
                            chunks=chunks(k, n), lda=lda)


def outputs(mods, fam, op, dtype, a_st, b_st, m, k, n, layout):
    """Each build's C for one problem, C laid out as `layout`: dense,
    offset (4 bytes past a 16-byte boundary) or padded (ldc = n + 2)."""
    ldc = n + 2 if layout == "padded" else n
    off = 2 if layout == "offset" else 0
    res = {}
    for name, mod in mods.items():
        buf = torch.full((off + m * ldc + 8,), float("nan"), device="cuda", dtype=dtype)
        launcher(mod, fam, op, dtype, a_st, b_st, m, k, n, buf[off:], ldc)()
        torch.cuda.synchronize()
        res[name] = buf[off:off + m * ldc].view(m, ldc)[:, :n]
    return res


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    torch.zeros(1, device="cuda")
    print(torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    news = sys.argv[2:] or [os.path.join(wp.ROOT, "crates/cuda/kernels/wgmma.cu")]
    # The narrowest TN A box each build reads (wgmma_probe.kernel_launch):
    # COMPARE_TN_BOXES="64,16,8" for a base from before narrow boxes
    # (3d45631 and older) and two variants; default 8 for every build.
    boxes = [int(b) for b in os.environ.get("COMPARE_TN_BOXES", "").split(",") if b]
    mods = {"base": wp.Module(wp.compile_cubin(sys.argv[1], "sm_90a", []))}
    for i, path in enumerate(news):
        name = os.path.splitext(os.path.basename(path))[0]
        mods[name if name not in mods else f"{name}{i}"] = wp.Module(wp.compile_cubin(path, "sm_90a", []))
    for mod, box in zip(mods.values(), boxes):
        mod.tn_min_box = box
    print("builds:", ", ".join(f"{k}" for k in mods), flush=True)
    r = wp.Runner.__new__(wp.Runner)
    ok = True
    for dtype in (torch.bfloat16, torch.float16):
        for op in ("nn", "tn", "nt"):
            for (m, k, n) in ((200, 1024, 264), (8, 4096, 4096), (1000, 512, 3072), (72, 4096, 1024),
                              (64, 4104, 4096), (40, 4288, 1024), (24, 4096, 1024), (16, 4096, 4096),
                              (2056, 1000, 5000)):
                if op == "tn" and m % 8:
                    continue
                _, _, a_st, b_st = r.operands(op, m, k, n, dtype, 5)
                for fam in FAMILIES:
                    for layout in ("dense", "offset", "padded"):
                        o = outputs(mods, fam, op, dtype, a_st, b_st, m, k, n, layout)
                        for name in list(mods)[1:]:
                            diff = (wp.bits(o[name]) != wp.bits(o["base"])).sum().item()
                            nan = torch.isnan(o[name].float()).sum().item()
                            good = diff == 0 and nan == 0
                            ok &= good
                            if not good or layout == "dense":
                                print(f"{'OK ' if good else 'BAD'} {name} {op} {str(dtype)[6:]:8} {fam:6} {m}x{k}x{n} "
                                      f"{layout}: {diff} differ, {nan} unwritten", flush=True)
    print("BUILDS BITS", "PASS" if ok else "FAIL", flush=True)
    if not ok:
        return 1
    dt = torch.bfloat16
    if os.environ.get("COMPARE_CASES") == "none":
        return 0
    if os.environ.get("COMPARE_CASES") == "ladder":
        # The ladder's rungs where they serve (decode and mid sizes), two wgmma controls.
        cases = [("narrow", op, m, 4096, 4096) for op in ("nn", "nt", "tn") for m in (1, 8, 16, 32, 64)
                 if not (op == "tn" and m < 8)]
        cases += [(fam, "tn", m, 4096, 4096) for fam in ("decode", "band") for m in (8, 16, 24, 32)]
        cases += [(fam, "tn", m, 4096, 4096) for fam in ("narrow", "decode", "band") for m in (1, 2, 4)]
        cases += [("narrow", "nn", 64, 14336, 4096), ("band", "nn", 128, 4096, 4096), ("band", "nn", 256, 4096, 4096),
                  ("band", "tn", 256, 4096, 4096), ("band", "nn", 64, 4096, 14336), ("band", "nn", 256, 4096, 6144),
                  ("decode", "nn", 1, 4096, 1024), ("decode", "nn", 16, 4096, 1024), ("mid", "nn", 128, 4096, 1024),
                  ("decode", "tn", 16, 4096, 4096), ("decode", "tn", 32, 4096, 4096), ("decode", "nn", 128, 4096, 4096),
                  ("decode", "nn", 8, 4096, 6144),
                  ("wide", "nn", 256, 4096, 1024), ("w128", "nn", 1024, 4096, 6144), ("w256", "nn", 4096, 4096, 4096)]
        return time_cases(mods, r, dt, cases)
    cases = [("w256", op, m, 4096, 4096) for op in ("nn", "tn", "nt") for m in (1024, 4096, 8192)]
    cases += [("w256", op, m, k, n) for op in ("nn", "tn", "nt")
              for (m, k, n) in ((1024, 4096, 6144), (8192, 4096, 6144), (1024, 4096, 14336), (2048, 4096, 14336),
                                (4096, 4096, 14336), (8192, 8192, 8192))]
    cases += [("w256", "nn", m, k, n) for (m, k, n) in ((4096, 14336, 4096), (4096, 1024, 4096))]
    cases += [("w192", "nn", m, k, n) for (m, k, n) in ((1024, 4096, 14336), (4096, 4096, 14336), (8192, 4096, 6144))]
    cases += [("w128", "nn", m, 4096, n) for (m, n) in ((1024, 6144), (4096, 4096))]
    cases += [("wide", "nn", 1024, 4096, 1024), ("mid", "nn", 1024, 4096, 1024)]
    cases += [("band", op, m, 4096, n) for op in ("nn", "tn") for (m, n) in ((256, 4096), (64, 14336))]
    cases += [("narrow", op, m, 4096, 4096) for op in ("nn", "tn") for m in (8, 64)]
    cases += [("decode", "nn", 16, 4096, 1024)]
    return time_cases(mods, r, dt, cases)


def time_cases(mods, r, dt, cases):
    print("family op m x k x n   cuBLAS us, then each build's us; (cuBLAS time / build time) in build order",
          flush=True)
    for (fam, op, m, k, n) in cases:
        _, _, a_st, b_st = r.operands(op, m, k, n, dt, 3)
        a_l = a_st.t() if op == "tn" else a_st
        b_l = b_st.t() if op == "nt" else b_st
        c = torch.empty(m, n, device="cuda", dtype=dt)
        reps = max(3, min(20, int(4e12 / (2.0 * m * k * n))))
        samplers = {"cublas": graph_time(lambda: torch.matmul(a_l, b_l, out=c), reps)}
        lda = None
        if op == "tn" and m % 8:
            # TMA cannot read A rows of m < 8 elements: the builds read A
            # stored with lda = 8 (cuBLAS the dense A).
            lda, padded = 8, torch.zeros(k, 8, device="cuda", dtype=dt)
            padded[:, :m] = a_st
            a_st = padded
        for name, mod in mods.items():
            samplers[name] = graph_time(launcher(mod, fam, op, dt, a_st, b_st, m, k, n, c, n, lda), reps)
        KEEP.append(samplers)
        best = best_of(samplers)
        base = best["cublas"]
        us = " ".join(f"{best[name]:8.1f}" for name in mods)
        ratios = ", ".join(f"{base / best[name]:.3f}" for name in mods)
        print(f"{fam:6} {op} {m}x{k}x{n} {base:9.1f} {us}  ({ratios})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
