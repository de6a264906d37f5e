#!/usr/bin/env python3
"""Which kernels cuBLAS (through torch.matmul) runs for the issue's large-m
goal shapes, and their time: a device-only probe (nothing here is used by
the crate). C = A B with A m x k and B k x n row-major (NN), bf16.

    LD_LIBRARY_PATH=/usr/local/cuda/lib64 python3 tools/cublas_kernels.py
"""

import torch
from torch.profiler import ProfilerActivity, profile

SHAPES = [(4096, 4096, 4096), (8192, 4096, 4096), (4096, 4096, 6144), (8192, 4096, 6144),
          (1024, 4096, 14336), (4096, 4096, 14336), (4096, 14336, 4096), (8192, 8192, 8192)]


def main():
    props = torch.cuda.get_device_properties(0)
    print(props.name, props.multi_processor_count, "SMs, torch", torch.__version__, flush=True)
    for (m, k, n) in SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        for _ in range(3):
            torch.matmul(a, b, out=c)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                torch.matmul(a, b, out=c)
            torch.cuda.synchronize()
        seen = {}
        for e in prof.events():
            if e.device_type.name == "CUDA":
                seen.setdefault(e.name, []).append(e.device_time)
        for name, us in seen.items():
            print(f"{m}x{k}x{n}: {name[:110]} x{len(us)} median {sorted(us)[len(us) // 2]:.1f} us", flush=True)


if __name__ == "__main__":
    main()
