#!/usr/bin/env python3
"""What the persistent wgmma kernels' clock-chosen split measures (device
only; nothing here is used by the crate; docs/benchmarks.md 4s, 4t):

1. %globaltimer's step and %clock64 against it, one thread spinning alone;
2. block 0's first-tile timing in the shipped 128x256 kernel (8192 x 4096
   x 4096, bf16 NN), written by an instrumented build after the launch's
   tail words: cool (each launch after 0.3 s idle), hot (after 2 s of
   back-to-back launches), cool again.

    LD_LIBRARY_PATH=/usr/local/cuda/lib64 python3 tools/clock_probe.py
"""

import ctypes
import os
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import wgmma_probe as wp  # noqa: E402

SPIN = r'''
extern "C" __global__ void clk(unsigned long long* out, int n, int spin) {
    for (int i = 0; i < n; ++i) {
        unsigned long long t, c = clock64();
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        out[2 * i] = c;
        out[2 * i + 1] = t;
        while (clock64() - c < (unsigned long long)spin) {
        }
    }
}
'''


def timers(tmp):
    path = os.path.join(tmp, "clk.cu")
    open(path, "w").write(SPIN)
    f = wp.Module(wp.compile_cubin(path, "sm_90a", [])).func("clk")
    n = 40
    for spin in (200, 2000, 40000):
        out = torch.zeros(2 * n, dtype=torch.int64, device="cuda")
        wp.launch(f, (1, 1, 1), (1, 1, 1), 0, [ctypes.c_void_p(out.data_ptr()), ctypes.c_int(n), ctypes.c_int(spin)])
        torch.cuda.synchronize()
        v = out.view(n, 2).cpu().tolist()
        cycles = [v[i + 1][0] - v[i][0] for i in range(n - 1)]
        ns = [v[i + 1][1] - v[i][1] for i in range(n - 1)]
        rate = (v[-1][0] - v[0][0]) / max(1, v[-1][1] - v[0][1])
        print(f"spin {spin}: cycles/step {cycles[:6]} ns/step {ns[:12]} overall {rate:.3f} cycles/ns", flush=True)


def first_tile(tmp):
    path = os.path.join(tmp, "clock.cu")
    src = open(os.path.join(wp.ROOT, "crates/cuda/kernels/wgmma.cu")).read()
    publish = "    st_release(choice, c);\n}"
    assert publish in src, "tail_publish moved: update this probe"
    src = src.replace(publish, "    choice[3] = (u32)cycles;\n    choice[4] = (u32)ns;\n    choice[5] = c;\n" + publish)
    open(path, "w").write(src)
    mod = wp.Module(wp.compile_cubin(path, "sm_90a", []))
    m, k, n = 8192, 4096, 4096
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    b = torch.randn(k, n, device="cuda").to(torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    launch = wp.kernel_launch(mod, (128, 256), "wgmma", "nn", torch.bfloat16, a, b, m, k, n, c)
    tail = launch.counters.numel() - wp.TAIL_WORDS
    # Room for the three words the instrumented build writes after them.
    flags = torch.zeros(tail + wp.TAIL_WORDS + 3, device="cuda", dtype=torch.int32)
    launch.args[4] = ctypes.c_void_p(flags.data_ptr())
    launch.keep = (*launch.keep, flags)
    for mode in ("cool", "hot", "cool"):
        for _ in range(4):
            if mode == "cool":
                time.sleep(0.3)
            else:
                end = time.time() + 2.0
                while time.time() < end:
                    for _ in range(20):
                        launch()
                    torch.cuda.synchronize()
            launch()
            torch.cuda.synchronize()
            w = flags[tail:tail + 6].cpu().tolist()
            cycles, ns = w[3] & 0xFFFFFFFF, w[4] & 0xFFFFFFFF
            print(f"{mode}: words {w[:3]} cycles {cycles} ns {ns} -> {cycles / max(ns, 1):.3f} GHz "
                  f"choice {w[5]} (1 split, 2 whole)", flush=True)


def main():
    torch.zeros(1, device="cuda")
    print(torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        timers(tmp)
        first_tile(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
