#!/usr/bin/env python3
"""Cycles per k16 step of a chain of dependent wgmma, by shape and operand
source, on operands already in shared memory (device only; nothing here is
used by the crate; docs/benchmarks.md, section 4i).

The question it answers: the narrow rung (64x32 tiles) takes the same
11 us at every m from 1 to 64 for k = n = 4096, that is 256 dependent k16
steps at about 85 cycles each. Is that the latency of one dependent
wgmma (then only shorter chains, i.e. more chunks, make it faster), or
the kernel's own overhead around it (barriers, loads)?

Each variant is one block walking `ITERS` stages of the shipped
consumer's pattern (fence, four k16 wgmma on the same accumulators,
commit, wait until at most one group is in flight), with no loads and no
mbarriers, and reports clock64 cycles per k16 step. Variants: N = 8 ..
256; B MN-major (NN's) or K-major (NT's); A from shared memory (SS) or
registers (RS); waiting for every group (wait 0); two independent
accumulator chains in one warpgroup; two or four warpgroups per block,
each with its own chain.

The `ring*` kernels time the narrow rung's stage handshake alone (a
producer thread and one consumer warpgroup over 16 mbarrier-guarded
stages, no loads, no wgmma) in cycles per stage. (Ring kernels that also
issued wgmma were dropped: ptxas serialized their wgmma, note C7514, which
it does not do to the shipped kernels; docs/benchmarks.md, 4i.)

    LD_LIBRARY_PATH=/usr/local/cuda/lib64 python3 tools/wgmma_latency.py
"""

import ctypes
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wgmma_probe as wp  # noqa: E402

HEAD = r"""
typedef unsigned int u32;
typedef unsigned long long u64;
__device__ __forceinline__ u32 smem_addr(const void* p) {
    u32 r;
    asm("{\n.reg .u64 t;\ncvta.to.shared.u64 t, %1;\ncvt.u32.u64 %0, t;\n}\n" : "=r"(r) : "l"(p));
    return r;
}
__device__ __forceinline__ u64 smem_desc(u32 addr, u32 lbo, u32 sbo) {
    return (u64)((addr & 0x3FFFF) >> 4) | ((u64)((lbo >> 4) & 0x3FFF) << 16) |
           ((u64)((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
}
__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int W> __device__ __forceinline__ void wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(W) : "memory");
}
"""


# B's shared-memory layouts, as wgmma descriptors of k16 step `ks` at
# address `b`: the shipped kernels' 64-wide MN-major TMA boxes (128-byte
# swizzle), the narrow rung's one 32-wide box (64-byte swizzle, layout
# type 2), and K-major 128-byte rows.
B_DESC = {
    "box64": "smem_desc(b + ks * 2048, 8192, 1024)",
    "box32": "((smem_desc(b + ks * 1024, 4096, 512) & ~(3ull << 62)) | (2ull << 62))",
    "kmajor": "smem_desc(b + ks * 32, 16, 1024)",
}


def wgmma_fn(n, rs):
    """C++ for one m64nNk16 bf16 wgmma, A from smem (SS) or registers (RS)."""
    regs = n // 2
    dl = ", ".join(f"%{i}" for i in range(regs))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    if rs:
        a = f"{{%{regs}, %{regs + 1}, %{regs + 2}, %{regs + 3}}}"
        b, p, tb = regs + 4, regs + 5, regs + 6
        ins = '"r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1), "n"(TB)'
        tail = f"%{b}, p, 1, 1, %{tb}"
        sig = "float* d, const u32* a, u64 db"
    else:
        a = f"%{regs}"
        b, p, ta, tb = regs + 1, regs + 2, regs + 3, regs + 4
        ins = '"l"(da), "l"(db), "r"(1), "n"(0), "n"(TB)'
        tail = f"%{b}, p, 1, 1, %{ta}, %{tb}"
        sig = "float* d, u64 da, u64 db"
    name = f"mma_{'rs' if rs else 'ss'}_n{n}"
    return (f"template <int TB> __device__ __forceinline__ void {name}({sig}) {{\n"
            f'    asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{p}, 0;\\n"\n'
            f'        "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 {{{dl}}}, {a}, {tail};\\n}}\\n"\n'
            f"        : {outs}\n        : {ins});\n}}\n")


def kernel(name, n, tb, rs, wait, chains, wgs, bkind=None):
    """One warpgroup's chain(s) of `iters` stages of four k16 steps; every
    warpgroup of the block runs its own; cycles per warpgroup to out."""
    call = f"mma_{'rs' if rs else 'ss'}_n{n}<{tb}>"
    # B: MN-major (TB = 1) as the shipped NN kernels' 64-wide TMA boxes
    # (8 KiB apart), or K-major 128-byte rows (TB = 0); A K-major.
    b_desc = B_DESC[bkind or ("box64" if tb else "kmajor")]
    a_arg = "afrag" if rs else "smem_desc(a + ks * 32, 16, 1024)"
    return f"""
extern "C" __global__ void __launch_bounds__({128 * wgs}, 1) {name}(u64* out, u32 iters) {{
    extern __shared__ unsigned char raw[];
    const u32 base = (smem_addr(raw) + 1023u) & ~1023u;
    u32* words = (u32*)(raw + (base - smem_addr(raw)));
    for (u32 i = threadIdx.x; i < 40960 / 4; i += blockDim.x) words[i] = 0x3c003c00u * (i & 1);
    __syncthreads();
    const u32 b = base + 8192;
{"" if rs else "    const u32 a = base;"}
    float d[{chains}][{n // 2}];
    #pragma unroll
    for (int c = 0; c < {chains}; ++c)
        #pragma unroll
        for (int i = 0; i < {n // 2}; ++i) d[c][i] = 0.0f;
{"    const u32 afrag[4] = {0x3c003c00u, 0u, 0x3c003c00u, 0u};" if rs else ""}
    const u64 t0 = clock64();
    for (u32 it = 0; it < iters; ++it) {{
        fence();
        #pragma unroll
        for (u32 ks = 0; ks < 4; ++ks) {{
            #pragma unroll
            for (int c = 0; c < {chains}; ++c) {call}(d[c], {a_arg}, {b_desc});
        }}
        commit();
        wait<{wait}>();
    }}
    wait<0>();
    const u64 t1 = clock64();
    float s = 0.0f;
    #pragma unroll
    for (int c = 0; c < {chains}; ++c)
        #pragma unroll
        for (int i = 0; i < {n // 2}; ++i) s += d[c][i];
    if (threadIdx.x % 128 == 0) out[blockIdx.x * 4 + threadIdx.x / 128] = (t1 - t0) | (s == 12345.0f ? 1ull << 63 : 0ull);
}}
"""


RING = r"""
__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// WAITK 0: try_wait (as shipped); 1: test_wait spin; 2: try_wait with a
// suspend-time hint of 0x10 ns.
template <int WAITK>
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    u32 done = 0;
    while (!done) {
        if (WAITK == 1) {
            asm volatile("{\n.reg .pred p;\nmbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                         "selp.u32 %0, 1, 0, p;\n}\n" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
        } else if (WAITK == 2) {
            asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, %3;\n"
                         "selp.u32 %0, 1, 0, p;\n}\n" : "=r"(done) : "r"(bar), "r"(parity), "r"(0x10) : "memory");
        } else {
            asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                         "selp.u32 %0, 1, 0, p;\n}\n" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
        }
    }
}
"""


def ring_kernel(name, waitk, wgmma_sync):
    """The narrow rung's stage handshake alone, with no loads and no wgmma:
    a producer thread completing each of 16 stages' barrier as soon as the
    consumers release it, one consumer warpgroup waiting for each stage
    and releasing the one before (one arrival per warp), with or without
    the consumer's wgmma fence, commit and wait."""
    sync_a = "fence();" if wgmma_sync else ""
    sync_b = "commit(); wait<1>();" if wgmma_sync else ""
    return f"""
extern "C" __global__ void __launch_bounds__(256, 1) {name}(u64* out, u32 iters) {{
    extern __shared__ unsigned char raw[];
    const u32 base = (smem_addr(raw) + 1023u) & ~1023u;
    const u32 bars = base + 16 * 12288;
    if (threadIdx.x == 0) {{
        for (u32 s = 0; s < 16; ++s) {{ mbar_init(bars + 8 * s, 1); mbar_init(bars + 8 * (16 + s), 4); }}
        asm volatile("fence.mbarrier_init.release.cluster;\\n" ::: "memory");
    }}
    __syncthreads();
    const u64 t0 = clock64();
    if (threadIdx.x < 128) {{
        if (threadIdx.x == 0) {{
            for (u32 i = 0; i < iters; ++i) {{
                const u32 s = i % 16;
                mbar_wait<{waitk}>(bars + 8 * (16 + s), ((i / 16) & 1) ^ 1);
                mbar_arrive(bars + 8 * s);
            }}
        }}
        return;
    }}
    for (u32 i = 0; i < iters; ++i) {{
        mbar_wait<{waitk}>(bars + 8 * (i % 16), (i / 16) & 1);
        {sync_a}
        {sync_b}
        if (i > 0 && threadIdx.x % 32 == 0) mbar_arrive(bars + 8 * (16 + (i - 1) % 16));
    }}
    const u64 t1 = clock64();
    if (threadIdx.x == 128) out[blockIdx.x * 4] = t1 - t0;
}}
"""


# name: (wait kind, the consumer's wgmma fence/commit/wait)
RING_VARIANTS = {
    "ring": (0, 1),
    "ring_nosync": (0, 0),
    "ring_testwait": (1, 0),
    "ring_hint": (2, 0),
}

# name: (n, tb, rs, wait, chains, warpgroups)
VARIANTS = {
    "ss_n8": (8, 1, 0, 1, 1, 1),
    "ss_n16": (16, 1, 0, 1, 1, 1),
    "ss_n32": (32, 1, 0, 1, 1, 1),
    "ss_n64": (64, 1, 0, 1, 1, 1),
    "ss_n128": (128, 1, 0, 1, 1, 1),
    "ss_n256": (256, 1, 0, 1, 1, 1),
    "ss_n32_kmajor_b": (32, 0, 0, 1, 1, 1),
    "ss_n32_wait0": (32, 1, 0, 0, 1, 1),
    "rs_n32": (32, 1, 1, 1, 1, 1),
    "rs_n64": (64, 1, 1, 1, 1, 1),
    "ss_n32_2chains": (32, 1, 0, 1, 2, 1),
    "ss_n32_2wg": (32, 1, 0, 1, 1, 2),
    "ss_n32_4wg": (32, 1, 0, 1, 1, 4),
    "rs_n32_2wg": (32, 1, 1, 1, 1, 2),
    "ss_n64_2wg": (64, 1, 0, 1, 1, 2),
    "ss_n128_2wg": (128, 1, 0, 1, 1, 2),
    "ss_n256_2wg": (256, 1, 0, 1, 1, 2),
    "ss_n32_box32": (32, 1, 0, 1, 1, 1, "box32"),
    "ss_n32_box32_2wg": (32, 1, 0, 1, 1, 2, "box32"),
}


def main():
    torch.zeros(1, device="cuda")
    src = HEAD
    for n in (8, 16, 32, 64, 128, 256):
        src += wgmma_fn(n, False)
        src += wgmma_fn(n, True)
    for name, spec in VARIANTS.items():
        src += kernel(name, *spec)
    src += RING
    for name, spec in RING_VARIANTS.items():
        src += ring_kernel(name, *spec)
    path = os.path.join(tempfile.mkdtemp(), "wgmma_latency.cu")
    open(path, "w").write(src)
    mod = wp.Module(wp.compile_cubin(path, "sm_90a", []))
    out = torch.zeros(4 * 132, device="cuda", dtype=torch.int64)
    smem = 40960 + 1024
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    print("variant              blocks  cycles per k16 step per warpgroup (min / max over warpgroups), best of 5")
    for blocks in (1, 132):
        for name, (n, tb, rs, wait, chains, wgs, *_) in VARIANTS.items():
            f = mod.func(name, smem)
            best = None
            for _ in range(5):
                iters = ctypes.c_uint32(256)
                args = [ctypes.c_void_p(out.data_ptr()), iters]
                out.zero_()
                wp.launch(f, (blocks, 1, 1), (128 * wgs, 1, 1), smem, args)
                torch.cuda.synchronize()
                cyc = out.view(-1, 4)[:blocks, :wgs].reshape(-1).cpu() & ((1 << 62) - 1)
                per = cyc.double() / (256 * 4)
                lo, hi = per.min().item(), per.max().item()
                if best is None or hi < best[1]:
                    best = (lo, hi)
            print(f"{name:20} {blocks:6}  {best[0]:7.1f} / {best[1]:7.1f}", flush=True)
    print("ring (the narrow rung's stage handshake: no loads, no wgmma)  cycles per stage, best of 5")
    for blocks in (1, 132):
        for name in RING_VARIANTS:
            f = mod.func(name, 16 * 12288 + 1024 + 256)
            best = None
            for _ in range(5):
                out.zero_()
                wp.launch(f, (blocks, 1, 1), (256, 1, 1), 16 * 12288 + 1024 + 256,
                          [ctypes.c_void_p(out.data_ptr()), ctypes.c_uint32(1024)])
                torch.cuda.synchronize()
                cyc = out.view(-1, 4)[:blocks, 0].cpu() & ((1 << 62) - 1)
                per = cyc.double().max().item() / 1024
                best = per if best is None else min(best, per)
            print(f"{name:20} {blocks:6}  {best:7.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
