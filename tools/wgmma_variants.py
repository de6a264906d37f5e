#!/usr/bin/env python3
"""Checks and times unshipped variants of wgmma_gemm against the one-CTA
kernels and cuBLAS, on the device, without touching the crate.

Each variant is a patch of the one-CTA crates/cuda/kernels/wgmma.cu (the
file before the persistent kernels shipped: wgmma_probe.one_cta_source)
kept beside this file, applied to a temporary copy (with `patch`) and
compiled with its define, which adds gemm_wgmma_<bn><suffix>_<op>_<dtype>
beside the one-CTA kernels ("shipped" below: shipped when measured):

- pair (wgmma_pair.patch, WGMMA_PAIR_ENTRIES, suffix x2): clusters of two
  CTAs of one tile column sharing each stage's B' through TMA multicast
  (__cluster_dims__(2, 1, 1); tile rows counted up to an even number;
  tiles 256, 192 and 128 wide);
- persist (wgmma_persist.patch, WGMMA_PERSIST_ENTRIES, suffix p): one
  block per SM walking tiles b, b + grid, ... with the stage ring running
  on across tiles, so the next tile's loads overlap this tile's store;
- persist-store (wgmma_persist_store.patch, WGMMA_PERSIST2_ENTRIES,
  suffix q, tiles 256, 192 and 128 wide): persistent as persist, and the
  consumers stage each finished tile in a buffer of its own (beside the
  shipped ring; half a 128x256 tile at a time) and go on to the next tile
  while warps 1-3 of the producer warpgroup copy it to C, so the store
  overlaps the k loop;
- wide320 (wgmma_320.patch, WGMMA_320_ENTRIES, gemm_wgmma_320_<op>_<dt>):
  128x320 tiles (an m64n256k16 and an m64n64k16 wgmma per k16 step, three
  56 KiB stages), the tile cuBLAS picks for the MLP up projection
  (tools/cublas_kernels.py), checked bit for bit against the 128x256
  kernel and timed beside it;
- ladder-pair (ladder_pair.patch, LADDER_PAIR_ENTRIES, the ladder's
  narrow and band rungs as gemm_ladder_<bm>x<bn>_foldx2_<op>_<dtype>):
  clusters of two CTAs of one tile row (adjacent tile columns) sharing
  each stage's A' through TMA multicast, against the shipped rungs;
- tail (wgmma_tail.patch, WGMMA_TAIL_ENTRIES, suffix t, tiles 256, 192
  and 128 wide): persistent (one block per SM, at most one per tile), and
  the k blocks of the last, partial wave's tiles cut into one equal
  contiguous segment per block; a tile cut into pieces is summed in
  series, each piece starting from the f32 partial the piece before it
  left in a workspace, so every output keeps the one-CTA kernel's k16
  sequence. Timed with the split (t) and without it (p: persistent only);
- ladder-pair-m (ladder_pair_m.patch, LADDER_PAIR_M_ENTRIES, the decode,
  narrow, band and wide rungs as gemm_ladder_<bm>x<bn>_<how>x2_<op>_<dt>):
  clusters of two CTAs of one tile column (row tiles 2i and 2i + 1, so
  only where the row tiles are even) sharing each stage's B' (the
  weights) through TMA multicast, k block j's B' issued by rank j % 2.

Only the split tail shipped (with a rule for when to cut, 4q: faster
under sustained load, slower in short bursts); the others were no faster
on the H200 (docs/benchmarks.md, sections 4g-4p). Every output is compared bit for bit with the one-CTA
kernel of the same tile (whose bits tools/wgmma_probe.py ties to mma_large
and a float64 reference); timing is CUDA events around CUDA graphs of
launches, interleaved, hot L2.

    LD_LIBRARY_PATH=/usr/local/cuda/lib64 python3 tools/wgmma_variants.py pair
    LD_LIBRARY_PATH=/usr/local/cuda/lib64 python3 tools/wgmma_variants.py persist
"""

import ctypes
import os
import subprocess
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ladder_probe as lp  # noqa: E402
import wgmma_probe as wp  # noqa: E402
from ladder_tune import best_of, graph_time as graph  # noqa: E402

BM = 128
# variant: (patch, define, symbol suffix)
VARIANTS = {
    "pair": ("wgmma_pair.patch", "WGMMA_PAIR_ENTRIES", "x2"),
    "persist": ("wgmma_persist.patch", "WGMMA_PERSIST_ENTRIES", "p"),
    "ladder-pair": ("ladder_pair.patch", "LADDER_PAIR_ENTRIES", "x2"),
    "persist-store": ("wgmma_persist_store.patch", "WGMMA_PERSIST2_ENTRIES", "q"),
    "wide320": ("wgmma_320.patch", "WGMMA_320_ENTRIES", ""),
    "ladder-pair-m": ("ladder_pair_m.patch", "LADDER_PAIR_M_ENTRIES", "x2"),
    "tail": ("wgmma_tail.patch", "WGMMA_TAIL_ENTRIES", "t"),
}
VARIANT = sys.argv[1] if len(sys.argv) > 1 else "pair"
# The tile widths a variant is built for.
BNS = (256, 192, 128) if VARIANT in ("persist-store", "pair") else (256, 128)
SMS = None


def p2_smem(bn):
    """persist-store's dynamic shared memory (P2Ring in the patch): the
    shipped ring's stages, the staging buffer (128 rows of 128 columns for
    128x256 tiles, of the whole tile for the others), alignment slack and
    barriers."""
    stage = (BM + bn) * 64 * 2
    stages = (192 * 1024) // stage
    staging = 128 * (128 if bn == 256 else bn) * 2
    return 1024 + stages * stage + staging + 16 * stages + 16


def wgmma(mod, bn, var, op, dtype, a_st, b_st, m, k, n, c):
    """The shipped kernel of tile 128 x bn, or (var) its variant."""
    if var and VARIANT == "persist-store":
        dt = "bf16" if dtype == torch.bfloat16 else "f16"
        mod.func(f"gemm_wgmma_{bn}q_{op}_{dt}", p2_smem(bn))  # before kernel_launch asks with less
    run = wp.kernel_launch(mod, (BM, bn), "wgmma", op, dtype, a_st, b_st, m, k, n, c,
                           suffix=VARIANTS[VARIANT][2] if var else "")
    if var and VARIANT == "pair":
        # Clusters of two tile rows: count the tile rows up to an even number.
        tiles_m = -(-m // BM)
        run.grid = ((tiles_m + tiles_m % 2) * (-(-n // bn)), 1, 1)
    if var and VARIANT in ("persist", "persist-store"):
        run.grid = (min(run.grid[0], SMS), 1, 1)
    if var and VARIANT == "persist-store":
        run.smem = p2_smem(bn)
    return run


def same_bits(make, m, n, dtype):
    """Runs the shipped kernel once and the variant twice (`make(variant)`
    returns a launcher writing into its argument) on NaN-filled outputs:
    (elements the variant differs in, run-to-run differences, unwritten)."""
    outs = []
    for var in (False, True, True):
        c = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
        make(var)(c)
        outs.append(c)
    torch.cuda.synchronize()
    diff = (wp.bits(outs[1]) != wp.bits(outs[0])).sum().item()
    rr = (wp.bits(outs[1]) != wp.bits(outs[2])).sum().item()
    nan = torch.isnan(outs[1].float()).sum().item()
    return diff, rr, nan


KEEP = []


def bits_row(label, make, m, n, dtype):
    """same_bits, printed as one OK/BAD line after `label`; True when OK."""
    diff, rr, nan = same_bits(make, m, n, dtype)
    good = diff == 0 and rr == 0 and nan == 0
    print(f"{'OK ' if good else 'BAD'} {label} {diff} differ, run to run {rr}, unwritten {nan}", flush=True)
    return good


def problems(r, shapes):
    """The bit checks' problems: every dtype and op of each (m, k, n) in
    `shapes` (TN only where m is a multiple of 8), with seeded operands as
    stored: (dtype, op, m, k, n, a_st, b_st)."""
    for dtype in (torch.bfloat16, torch.float16):
        for op in ("nn", "tn", "nt"):
            for (m, k, n) in shapes:
                if op == "tn" and m % 8:
                    continue
                _, _, a_st, b_st = r.operands(op, m, k, n, dtype, 5)
                yield dtype, op, m, k, n, a_st, b_st


def timed_row(r, op, m, k, n, launches, reps=None):
    """cuBLAS and each of `launches(a_st, b_st, c)` (key -> launcher) on one
    bf16 problem, timed interleaved (best of 7, hot L2): cuBLAS's us and
    each key's cuBLAS time / its time. `reps` launches a graph (default:
    about 4 TFLOP of work, 3 to 50)."""
    dtype = torch.bfloat16
    _, _, a_st, b_st = r.operands(op, m, k, n, dtype, 3)
    a_l = a_st.t() if op == "tn" else a_st
    b_l = b_st.t() if op == "nt" else b_st
    c = torch.empty(m, n, device="cuda", dtype=dtype)
    reps = reps or max(3, min(50, int(4e12 / (2.0 * m * k * n))))
    samplers = {"cublas": graph(lambda: torch.matmul(a_l, b_l, out=c), reps)}
    for key, run in launches(a_st, b_st, c).items():
        samplers[key] = graph(run, reps)
    KEEP.append(samplers)
    best = best_of(samplers)
    base = best["cublas"]
    return base, {key: base / t for key, t in best.items() if key != "cublas"}


def ladder(mod, rung, pair, op, dtype, a_st, b_st, m, k, n, c):
    """The ladder's folding rung `rung` = (bm, bn), shipped or paired."""
    bm, bn = rung
    run = wp.kernel_launch(mod, rung, "fold", op, dtype, a_st, b_st, m, k, n, c, chunks=lp.chunks(k, n),
                           suffix="x2" if pair else "")
    if pair:
        # Clusters of two tile columns: count them up to an even number.
        tiles_n = -(-n // bn)
        run.grid = ((-(-m // bm)) * (tiles_n + tiles_n % 2), 1, 1)
    return run


def main_ladder(mod):
    ok = True
    r = wp.Runner.__new__(wp.Runner)
    rungs = ((64, 32), (64, 128))
    shapes = ((8, 4096, 4096), (64, 4096, 4096), (200, 1024, 3072), (48, 512, 8192 + 96), (256, 4096, 1024))
    for dtype, op, m, k, n, a_st, b_st in problems(r, shapes):
        for rung in rungs:
            ok &= bits_row(
                f"{op} {str(dtype)[6:]:8} {rung[0]}x{rung[1]} {m}x{k}x{n} ({lp.chunks(k, n)} chunks): "
                "pair vs shipped",
                lambda pair: lambda c: ladder(mod, rung, pair, op, dtype, a_st, b_st, m, k, n, c)(),
                m, n, dtype)
    print("LADDER-PAIR BITS", "PASS" if ok else "FAIL", flush=True)
    if not ok:
        return 1
    dtype = torch.bfloat16
    cases = [(op, m, 4096, 4096) for op in ("nn", "nt", "tn") for m in (1, 8, 16, 32, 64, 128, 256)]
    cases += [("nn", m, k, n) for (k, n, ms) in ((4096, 6144, (16, 64, 256)), (4096, 14336, (16, 64, 256)),
                                                 (14336, 4096, (16, 64, 128)), (4096, 1024, (16, 64, 256)))
              for m in ms]
    print(f"{'op':3} {'m x k x n':>18} {'cuBLAS us':>10} {'narrow':>7} {'narrowx2':>8} {'band':>6} {'bandx2':>7}"
          "  (cuBLAS time / kernel time)", flush=True)
    for (op, m, k, n) in cases:
        if op == "tn" and m % 8:
            continue
        base, ratio = timed_row(r, op, m, k, n, lambda a_st, b_st, c: {
            (rung, pair): ladder(mod, rung, pair, op, dtype, a_st, b_st, m, k, n, c)
            for rung in rungs for pair in (False, True)}, reps=20)
        cols = "  ".join(f"{ratio[(rung, pair)]:6.3f}" for rung in rungs for pair in (False, True))
        print(f"{op:3} {m:>6}x{k}x{n} {base:10.1f}  {cols}", flush=True)
    return 0


# The rungs ladder-pair-m pairs: name -> (rows, columns, how).
PAIR_M_RUNGS = {"decode": (64, 64, "split"), "narrow": (64, 32, "fold"), "band": (64, 128, "fold"),
                 "wide": (128, 128, "fold")}


def pairs_fit(rung, m):
    """Whether `rung`'s row tiles at m pair up (the patch's clusters need an
    even count)."""
    return (-(-m // PAIR_M_RUNGS[rung][0])) % 2 == 0


def pair_m(mod, rung, pair, op, dtype, a_st, b_st, m, k, n, c):
    """A ladder rung (PAIR_M_RUNGS), shipped or in clusters of two row tiles
    (None where its row tiles do not pair up)."""
    bm, bn, how = PAIR_M_RUNGS[rung]
    if pair and not pairs_fit(rung, m):
        return None
    return wp.kernel_launch(mod, (bm, bn), how, op, dtype, a_st, b_st, m, k, n, c, chunks=lp.chunks(k, n),
                            suffix="x2" if pair else "")


def main_ladder_m(mod):
    """ladder-pair-m: bits against the shipped rungs, then timed beside them."""
    ok = True
    r = wp.Runner.__new__(wp.Runner)
    shapes = ((128, 4096, 4096), (96, 4096, 4096), (256, 4096, 6144), (256, 1024, 3072), (200, 4096, 1024),
              (512, 14336, 4096), (136, 520, 328))
    for dtype, op, m, k, n, a_st, b_st in problems(r, shapes):
        for rung in PAIR_M_RUNGS:
            if not pairs_fit(rung, m):
                continue
            ok &= bits_row(
                f"{op} {str(dtype)[6:]:8} {rung:6} {m}x{k}x{n} ({lp.chunks(k, n)} chunks): pair vs shipped",
                lambda pair: lambda c: pair_m(mod, rung, pair, op, dtype, a_st, b_st, m, k, n, c)(),
                m, n, dtype)
    print("LADDER-PAIR-M BITS", "PASS" if ok else "FAIL", flush=True)
    if not ok:
        return 1
    cases = [(op, m, 4096, 4096) for op in ("nn", "tn", "nt") for m in (96, 128, 256, 1024)]
    cases += [("nn", m, k, n) for (k, n) in ((4096, 6144), (4096, 14336), (14336, 4096), (4096, 1024),
                                             (4096, 2048)) for m in (128, 256)]
    cases += [("nn", m, 4096, n) for n in (1024, 2048) for m in (1024, 4096)]
    heads = " ".join(f"{name:>6} {name + 'x2':>8}" for name in PAIR_M_RUNGS)
    print(f"{'op':3} {'m x k x n':>18} {'cuBLAS us':>10} {heads}  (cuBLAS time / kernel time; - odd row tiles)",
          flush=True)
    for (op, m, k, n) in cases:
        def launches(a_st, b_st, c):
            runs = {(rung, pair): pair_m(mod, rung, pair, op, torch.bfloat16, a_st, b_st, m, k, n, c)
                    for rung in PAIR_M_RUNGS for pair in (False, True)}
            return {key: run for key, run in runs.items() if run is not None}
        base, ratio = timed_row(r, op, m, k, n, launches, reps=20)
        cols = " ".join(f"{ratio[(rung, pair)]:{8 if pair else 6}.3f}" if (rung, pair) in ratio
                        else f"{'-':>{8 if pair else 6}}" for rung in PAIR_M_RUNGS for pair in (False, True))
        print(f"{op:3} {m:>6}x{k}x{n} {base:10.1f} {cols}", flush=True)
    return 0


def main_wide(mod):
    """wide320: 128x320 tiles against the 128x256 kernel (bits) and beside
    the shipped 128x256 and 128x192 tiles and cuBLAS (time)."""
    ok = True
    r = wp.Runner.__new__(wp.Runner)
    def tile(bn, op, dtype, a_st, b_st, m, k, n, c):
        return wp.kernel_launch(mod, (BM, bn), "wgmma", op, dtype, a_st, b_st, m, k, n, c)

    shapes = ((200, 136, 264), (384, 1024, 648), (8, 4096, 4096), (1000, 4096, 4096), (1024, 4096, 14336),
              (1024, 14336, 4096), (136, 520, 328))
    for dtype, op, m, k, n, a_st, b_st in problems(r, shapes):
        ok &= bits_row(
            f"{op} {str(dtype)[6:]:8} {m}x{k}x{n}: 128x320 vs 128x256",
            lambda var: lambda c: tile(320 if var else 256, op, dtype, a_st, b_st, m, k, n, c)(),
            m, n, dtype)
    print("WIDE320 BITS", "PASS" if ok else "FAIL", flush=True)
    if not ok:
        return 1
    shapes = [(m, 4096, 4096) for m in (1024, 4096, 8192)]
    shapes += [(m, 4096, 6144) for m in (1024, 4096, 8192)] + [(m, 4096, 14336) for m in (1024, 2048, 4096)]
    shapes += [(1024, 14336, 4096), (4096, 14336, 4096), (4096, 4096, 4096 + 256), (8192, 8192, 8192)]
    print(f"{'op':3} {'m x k x n':>18} {'cuBLAS us':>10} {'w256':>6} {'w192':>6} {'w320':>6}"
          "  (cuBLAS time / kernel time)", flush=True)
    for op in ("nn", "nt", "tn"):
        for (m, k, n) in shapes:
            base, ratio = timed_row(r, op, m, k, n, lambda a_st, b_st, c: {
                bn: tile(bn, op, torch.bfloat16, a_st, b_st, m, k, n, c) for bn in (256, 192, 320)})
            cols = " ".join(f"{ratio[bn]:6.3f}" for bn in (256, 192, 320))
            print(f"{op:3} {m:>6}x{k}x{n} {base:10.1f} {cols}", flush=True)
    return 0


def tail_launch(mod, bn, split, op, dtype, a_st, b_st, m, k, n, c):
    """tail's 128 x bn kernel: min(tiles, SMs) blocks; split 0 walks whole
    tiles only (persistent), 1 also cuts the last partial wave's tiles
    along k. wgmma_probe.kernel_launch takes it for a persistent build (it
    has more than seven parameters) and sizes its workspace (one f32
    partial and one u32 flag per tail tile) and grid; its parameters are
    (maps, C, m, k, n, ldc, workspace, flags, split)."""
    run = wp.kernel_launch(mod, (BM, bn), "wgmma", op, dtype, a_st, b_st, m, k, n, c, suffix="t")
    ta, tb, cp, ws, flags, *dims = run.args
    run.args = [ta, tb, cp, *dims, ws, flags, ctypes.c_uint32(split)]
    return run


def tail_shape(bn, m, n):
    """Tiles, whole waves and tiles left over of 128 x bn tiles on SMS SMs."""
    tiles = -(-m // BM) * -(-n // bn)
    return f"{tiles}={tiles // SMS}x{SMS}+{tiles % SMS}"


def main_tail(mod):
    """tail: split (and persistent alone) against the one-CTA kernel of
    each tile, bit for bit, run to run (the flags back at zero) and with
    every output written; then timed beside it and cuBLAS."""
    ok = True
    r = wp.Runner.__new__(wp.Runner)
    bns = (256, 192, 128)
    # Leftover tiles with long and short segments (k = 1000: three blocks a
    # segment, so chains of middle pieces), m and n tails, k tails.
    shapes = ((4096, 4096, 14336), (4096, 4096, 4096), (1000, 1000, 9000), (2056, 328, 5000),
              (8, 4096, 4096), (3000, 14336, 4096))
    for dtype, op, m, k, n, a_st, b_st in problems(r, shapes):
        for bn in bns:
            for split in (0, 1):
                ok &= bits_row(
                    f"{op} {str(dtype)[6:]:8} bn={bn} {m}x{k}x{n} ({tail_shape(bn, m, n)}) split={split}: vs one CTA",
                    lambda var: lambda c: (tail_launch(mod, bn, split, op, dtype, a_st, b_st, m, k, n, c) if var
                                           else wgmma(mod, bn, False, op, dtype, a_st, b_st, m, k, n, c))(),
                    m, n, dtype)
    print("TAIL BITS", "PASS" if ok else "FAIL", flush=True)
    if not ok:
        return 1
    shapes = [(m, 4096, 4096) for m in (1024, 2048, 4096, 8192)]
    shapes += [(m, 4096, 6144) for m in (1024, 4096, 8192)] + [(m, 4096, 14336) for m in (1024, 2048, 4096, 8192)]
    shapes += [(1024, 14336, 4096), (4096, 14336, 4096), (8192, 8192, 8192)]
    bns = (256, 192)
    heads = " ".join(f"{'w' + str(bn):>6} {'p':>6} {'t':>6}" for bn in bns)
    print(f"{'op':3} {'m x k x n':>18} {'tiles (256)':>14} {'cuBLAS us':>10} {heads}"
          "  (cuBLAS time / kernel time; p persistent, t split tail)", flush=True)
    for op in ("nn", "nt", "tn"):
        for (m, k, n) in shapes:
            def launches(a_st, b_st, c):
                out = {}
                for bn in bns:
                    out[(bn, "")] = wgmma(mod, bn, False, op, torch.bfloat16, a_st, b_st, m, k, n, c)
                    for split in (0, 1):
                        out[(bn, split)] = tail_launch(mod, bn, split, op, torch.bfloat16, a_st, b_st, m, k, n, c)
                return out
            base, ratio = timed_row(r, op, m, k, n, launches)
            cols = " ".join(f"{ratio[(bn, v)]:6.3f}" for bn in bns for v in ("", 0, 1))
            print(f"{op:3} {m:>6}x{k}x{n} {tail_shape(256, m, n):>14} {base:10.1f} {cols}", flush=True)
    return 0


def main():
    global SMS
    if VARIANT not in VARIANTS:
        sys.exit(f"variant {VARIANT!r}: one of {', '.join(VARIANTS)}")
    patch, define, suffix = VARIANTS[VARIANT]
    torch.zeros(1, device="cuda")
    SMS = torch.cuda.get_device_properties(0).multi_processor_count
    print(torch.cuda.get_device_name(), SMS, "SMs, torch", torch.__version__, "variant", VARIANT, flush=True)
    t0 = time.time()
    tmp = tempfile.mkdtemp()
    patched = os.path.join(tmp, f"wgmma_{VARIANT}.cu")
    subprocess.run(["patch", "-o", patched, wp.one_cta_source(tmp), os.path.join(wp.ROOT, "tools", patch)],
                   check=True)
    mod = wp.Module(wp.compile_cubin(patched, "sm_90a", [define]))
    print(f"compiled in {time.time() - t0:.1f} s", flush=True)
    if VARIANT == "ladder-pair":
        return main_ladder(mod)
    if VARIANT == "wide320":
        return main_wide(mod)
    if VARIANT == "ladder-pair-m":
        return main_ladder_m(mod)
    if VARIANT == "tail":
        return main_tail(mod)
    ok = True
    r = wp.Runner.__new__(wp.Runner)  # operands only: no second module
    # Bits: the variant == one CTA, every op and dtype, odd and even tile rows, m
    # and n tails; and run to run.
    shapes = ((200, 136, 264), (384, 1024, 512), (8, 4096, 4096), (1000, 4096, 4096), (4096, 4096, 4096),
              (1024, 14336, 4096))
    for dtype, op, m, k, n, a_st, b_st in problems(r, shapes):
        for bn in BNS:
            ok &= bits_row(
                f"{op} {str(dtype)[6:]:8} bn={bn} {m}x{k}x{n}: {VARIANT} vs one CTA",
                lambda var: lambda c: wgmma(mod, bn, var, op, dtype, a_st, b_st, m, k, n, c)(),
                m, n, dtype)
    print(f"{VARIANT.upper()} BITS", "PASS" if ok else "FAIL", flush=True)
    if not ok:
        return 1
    shapes = [(m, 4096, 4096) for m in (512, 1024, 2048, 4096, 8192)]
    shapes += [(1024, 4096, 6144), (4096, 4096, 6144), (8192, 4096, 6144), (1024, 4096, 14336),
               (4096, 4096, 14336), (1024, 14336, 4096), (4096, 14336, 4096), (8192, 8192, 8192)]
    heads = " ".join(f"{'w' + str(bn):>6} {'w' + str(bn) + suffix:>7}" for bn in BNS)
    print(f"{'op':3} {'m x k x n':>18} {'cuBLAS us':>10} {heads}  (cuBLAS time / kernel time)", flush=True)
    for op in ("nn", "nt", "tn"):
        for (m, k, n) in shapes:
            base, ratio = timed_row(r, op, m, k, n, lambda a_st, b_st, c: {
                (bn, var): wgmma(mod, bn, var, op, torch.bfloat16, a_st, b_st, m, k, n, c)
                for bn in BNS for var in (False, True)})
            cols = " ".join(f"{ratio[(bn, var)]:{7 if var else 6}.3f}" for bn in BNS for var in (False, True))
            print(f"{op:3} {m:>6}x{k}x{n} {base:10.1f} {cols}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
