#!/usr/bin/env python3
"""Independent cross-check of the invariant ladder (kernels/wgmma.cu,
`gemm_ladder_*`) with PyTorch (device only).

Launches the five rungs (64x64 split, 128x128 split, 128x128 fold, 64x128
fold, 64x32 fold) through
ctypes (NVRTC, cuTensorMapEncodeTiled, cuLaunchKernel: the helpers of
tools/wgmma_probe.py) on PyTorch tensors, with its own statement of the
chunk rule and launch geometry from docs/design.md, and checks:

- every rung against a float64 PyTorch reference (relative error, next to
  the mma_large family's);
- the five rungs bit-identical on the same problem;
- batch invariance: the rows of every m (1 .. 264; TN at 8, 16, 24 and 32
  reads A in narrower boxes) against an m = 1024
  product, across rungs;
- run to run, which for the splitting rungs also proves that the per-tile
  counters reset themselves between launches;
- with one chunk, bit-identical to wgmma_256.

Nothing here is used by the crate.

    python3 tools/ladder_probe.py
"""

import ctypes
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wgmma_probe import Runner, bits, kernel_launch  # noqa: E402


def chunks(k, n):
    """docs/design.md: 1 where n has 128 tiles of 32 columns; else 128 / ceil(n / 64)
    blocks, 1..4, each chunk >= 8 blocks of 64 k."""
    if -(-n // 32) >= 128:
        return 1
    tiles = max(1, -(-n // 64))
    by_k = max(1, (-(-k // 64)) // 8)
    return min(max(1, min(4, 128 // tiles)), by_k)


RUNGS = {  # name: (rows, cols, chunks on the grid)
    "64x64_split": (64, 64, True),
    "128x128_split": (128, 128, True),
    "128x128_fold": (128, 128, False),
    "64x128_fold": (64, 128, False),
    "64x32_fold": (64, 32, False),
}


def ladder(r, rung, op, dtype, a_st, b_st, m, k, n):
    """Two launches of `rung` on the same tile counters: (C, C of the second)."""
    bm, bn, grid = RUNGS[rung]
    c = torch.empty(m, n, device="cuda", dtype=dtype)
    run = kernel_launch(r.wg, (bm, bn), "split" if grid else "fold", op, dtype, a_st, b_st, m, k, n, c,
                        chunks=chunks(k, n))
    run()
    # Launch again on the same counters: the last block of each tile reset them.
    c2 = torch.empty_like(c)
    run.args[2] = ctypes.c_void_p(c2.data_ptr())
    run()
    torch.cuda.synchronize()
    assert int(run.counters.abs().sum()) == 0, "tile counters not reset"
    return c, c2


def main():
    torch.zeros(1, device="cuda")
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    r = Runner([])
    ok = True
    for dtype in (torch.bfloat16, torch.float16):
        for op in ("nn", "tn", "nt"):
            for (k, n) in ((4096, 4096), (4096, 3072), (4096, 1024), (4096, 6144), (14336, 4096),
                           (1024, 256), (512, 8192)):
                big_m = 1024
                a, b, a_st, b_st = r.operands(op, big_m, k, n, dtype, 5)
                ref = a.double() @ b.double()
                ml = r.mma_large(op, dtype, a_st, b_st, big_m, k, n)
                torch.cuda.synchronize()
                ml_err = ((ml.double() - ref).abs().max() / ref.abs().max()).item()
                bigs = {}
                for rung in RUNGS:
                    c, c2 = ladder(r, rung, op, dtype, a_st, b_st, big_m, k, n)
                    err = ((c.double() - ref).abs().max() / ref.abs().max()).item()
                    rr = (bits(c) != bits(c2)).sum().item()
                    good = err < 2 * ml_err + 1e-3 and rr == 0
                    ok &= good
                    print(f"{'OK ' if good else 'BAD'} {op} {str(dtype)[6:]:8} {rung:13} {big_m}x{k}x{n} "
                          f"({chunks(k, n)} chunks): rel err {err:.2e} (mma_large {ml_err:.2e}), run-to-run diff {rr}")
                    bigs[rung] = c
                base = bigs["64x64_split"]
                same = all(torch.equal(bits(base), bits(v)) for v in bigs.values())
                ok &= same
                print(f"    rungs bit-identical: {same}")
                if chunks(k, n) == 1:
                    w = r.wgmma(op, 256, dtype, a_st, b_st, big_m, k, n)
                    torch.cuda.synchronize()
                    v = torch.equal(bits(w), bits(base))
                    ok &= v
                    print(f"    one chunk: equal to wgmma_256: {v}")
                bad = []
                for m in (1, 8, 16, 24, 32, 64, 72, 256, 264):
                    if op == "tn" and m % 8:
                        continue
                    sub = a[:m]
                    sa = sub.t().contiguous() if op == "tn" else sub.contiguous()
                    for rung in RUNGS:
                        c, _ = ladder(r, rung, op, dtype, sa, b_st, m, k, n)
                        if not torch.equal(bits(c), bits(base[:m])):
                            bad.append((m, rung))
                ok &= not bad
                print(f"{'OK ' if not bad else 'BAD'} batch invariance {op} {str(dtype)[6:]} k={k} n={n}: differs at {bad}")
    print("LADDER PROBE", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
