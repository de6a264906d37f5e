#!/usr/bin/env python3
"""The split tail's schedule (tail_plan and tail_walk of
crates/cuda/kernels/wgmma.cu, whose pieces run late, and of
tools/wgmma_tail.patch, whose begin pieces run first), checked on the CPU: every tile's pieces cover its k blocks
once, in order; the pieces never wait on one another in a cycle (each
block runs its items in order and a piece waits for the one before it);
and a timeline in k-block units against whole tiles only (the timeline leaves out
L2: blocks whose k walks drift apart stop sharing A' and B' there, which is
why the kernel cuts only where its rule says; that rule is printed).

The kernel derives the schedule from (tiles, k blocks, grid) alone; the
bits do not depend on it (each piece continues the partial of the one
before), only the time does. `--spill B` is the cost of storing or loading
a partial, in k blocks (default 2: 128 KiB per 128x256 tile).

    python3 tools/tail_schedule.py            # goal shapes, then random ones
"""

import argparse
import os
import random
import re

# The longest segment over 3/5 of a tile the kernel cuts, in k blocks (its
# TAIL_DRIFT_MAX_KBLOCKS, read from the kernel so it is written once).
_KERNEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates/cuda/kernels/wgmma.cu")
DRIFT_MAX_KBLOCKS = int(re.search(r"#define TAIL_DRIFT_MAX_KBLOCKS (\d+)", open(_KERNEL).read()).group(1))


def segments_of(r, grid):
    """Segments the r tail tiles' k blocks are cut into: one a block, or
    two a tail tile where that is fewer."""
    return grid if 2 * r >= grid else 2 * r


def splits(tiles, kb, grid):
    """(tail tiles, segments, by clock) of the schedule: the kernel's rule
    (cut the last wave only where it is cut by at least 1/40 of the
    whole-tile time, into segments of at most 4/5 of a tile, 15/16 where
    every block has three whole tiles or more, and of at most
    DRIFT_MAX_KBLOCKS k blocks where they are over 3/5 of a tile; those are
    cut or not by the launch's SM clock where every block has three whole
    tiles), or (0, 0, False)."""
    r = tiles % grid
    segments = segments_of(r, grid)
    if r:
        seg = -(-r * kb // segments)
        three, long_seg = tiles // grid >= 3, 5 * seg > 3 * kb
        fits = (16 * seg <= 15 * kb if three else 5 * seg <= 4 * kb) and (not long_seg or seg <= DRIFT_MAX_KBLOCKS)
        if fits and 40 * (kb - seg) >= (tiles // grid + 1) * kb:
            return r, segments, three and long_seg
    return 0, 0, False


def plan(tiles, kb, grid, b, split=True, late=True):
    """Block b's items (tile, lo, hi) in the order tail_walk runs them;
    split: True (always cut a partial last wave), "rule" (the kernel's
    rule) or False (whole tiles only); late: the shipped kernel's order
    (a piece that begins a tile before the block's last two whole tiles,
    a middle piece before its last one, an end piece last), or not:
    wgmma_tail.patch's (begin first, middle after half, end last)."""
    if split == "rule":
        r, segments, _ = splits(tiles, kb, grid)
    else:
        r = tiles % grid if split else 0
        segments = segments_of(r, grid)
    first = tiles - r
    whole = -(-(first - b) // grid) if first > b else 0
    pieces = {}
    if r and b < segments:
        total = r * kb
        lo, hi = b * total // segments, (b + 1) * total // segments
        if lo != hi:
            for j in range(lo // kb, (hi - 1) // kb + 1):
                t0 = j * kb
                p = (first + j, max(lo, t0) - t0, min(hi, t0 + kb) - t0)
                kind = "end" if p[2] == kb else "begin" if p[1] == 0 else "middle"
                pieces[kind] = p
    if late:
        at_begin, at_middle = max(whole - 2, 0), max(whole - 1, 0)
    else:
        at_begin, at_middle = 0, whole // 2
    items = [(b + i * grid, 0, kb) for i in range(at_begin)]
    items += [pieces["begin"]] if "begin" in pieces else []
    items += [(b + i * grid, 0, kb) for i in range(at_begin, at_middle)]
    items += [pieces["middle"]] if "middle" in pieces else []
    items += [(b + i * grid, 0, kb) for i in range(at_middle, whole)]
    items += [pieces["end"]] if "end" in pieces else []
    return items


def check(tiles, kb, sms, split=True, spill=2.0, late=True):
    """Asserts coverage, order and progress; returns (timeline, whole-tile
    time) in k blocks."""
    grid = min(tiles, sms)
    blocks = [plan(tiles, kb, grid, b, split, late) for b in range(grid)]
    cover = {}
    for b, items in enumerate(blocks):
        for (t, lo, hi) in items:
            assert 0 <= lo < hi <= kb, (t, lo, hi)
            cover.setdefault(t, []).append((lo, hi))
    assert sorted(cover) == list(range(tiles)), "every tile once"
    for t, ps in cover.items():
        ps.sort()
        assert ps[0][0] == 0 and ps[-1][1] == kb, (t, ps)
        assert all(a[1] == c[0] for a, c in zip(ps, ps[1:])), (t, ps)
    done, pos, clock = {}, [0] * grid, [0.0] * grid
    moved = True
    while moved:
        moved = False
        for b in range(grid):
            while pos[b] < len(blocks[b]):
                t, lo, hi = blocks[b][pos[b]]
                start = clock[b]
                if lo > 0:
                    if (t, lo) not in done:
                        break  # waits for the piece before
                    start = max(start, done[(t, lo)])
                clock[b] = start + (hi - lo) + spill * ((lo > 0) + (hi < kb))
                done[(t, hi)] = clock[b]
                pos[b] += 1
                moved = True
    assert all(pos[b] == len(blocks[b]) for b in range(grid)), "a cycle of waits"
    return max(clock), -(-tiles // grid) * kb


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--spill", type=float, default=2.0)
    ap.add_argument("--random", type=int, default=3000, help="random (tiles, k blocks, grid) to check")
    a = ap.parse_args()
    print(f"{'m x k x n':>20} {'tile':>7} {'tiles':>14} {'whole':>6} {'split':>7} {'gain':>6} {'early':>7}  kernel's rule"
          "  (split: the shipped order's timeline; early: wgmma_tail.patch's)")
    for (m, k, n) in [(1024, 4096, 6144), (1024, 4096, 14336), (2048, 4096, 4096), (4096, 4096, 4096),
                      (8192, 4096, 4096), (4096, 4096, 6144), (8192, 4096, 6144), (2048, 4096, 14336),
                      (4096, 4096, 14336), (8192, 4096, 14336), (4096, 14336, 4096), (8192, 8192, 8192)]:
        for bn in (256, 192):
            tiles, kb = -(-m // 128) * -(-n // bn), -(-k // 64)
            t, whole = check(tiles, kb, a.sms, spill=a.spill)
            early, _ = check(tiles, kb, a.sms, spill=a.spill, late=False)
            check(tiles, kb, a.sms, split=False)
            r, _, by_clock = splits(tiles, kb, min(tiles, a.sms))
            rule = "by the SM clock" if by_clock else "split" if r else "whole tiles"
            print(f"{m:>6}x{k}x{n} {'128x' + str(bn):>7} {tiles:>5}={tiles // a.sms}x{a.sms}+{tiles % a.sms:<3}"
                  f" {whole:>6} {t:>7.0f} {whole / t:6.3f} {early:>7.0f}  {rule}")
    rng = random.Random(1)
    for _ in range(a.random):
        args = (rng.randint(1, 5000), rng.randint(1, 300), rng.randint(1, 200))
        for late in (True, False):
            check(*args, late=late)
            check(*args, split="rule", late=late)
        check(*args, split=False)
    print(f"{a.random} random (tiles, k blocks, grid) in both orders: every tile covered once, in order, "
          "no cycle of waits")


if __name__ == "__main__":
    main()
