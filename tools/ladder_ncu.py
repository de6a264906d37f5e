#!/usr/bin/env python3
"""The narrow rung (64x32, NN bf16, k = n = 4096) and cuBLAS at m = 8 and 64,
two launches each, for Nsight Compute on the device:

    LD_LIBRARY_PATH=/usr/local/cuda/lib64 ncu --clock-control none \\
        --kernel-name regex:'ladder|nvjet|gemv|cutlass|sm90' --launch-count 12 \\
        --section SpeedOfLight --section MemoryWorkloadAnalysis \\
        --section WarpStateStats --section LaunchStats python3 tools/ladder_ncu.py

ncu replays each profiled launch with its caches flushed, so its
durations are L2-cold (docs/benchmarks.md, section 4g).
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ladder_probe as lp  # noqa: E402
import wgmma_probe as wp  # noqa: E402


def main():
    torch.zeros(1, device="cuda")
    r = wp.Runner([])
    dt = torch.bfloat16
    for m in (8, 64):
        a, b, a_st, b_st = r.operands("nn", m, 4096, 4096, dt, 3)
        c = torch.empty(m, 4096, device="cuda", dtype=dt)
        for _ in range(2):
            lp.ladder(r, "64x32_fold", "nn", dt, a_st, b_st, m, 4096, 4096)
            torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    print("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
