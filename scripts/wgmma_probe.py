#!/usr/bin/env python3
"""Independent cross-check of kernels/wgmma.cu with PyTorch (device only).

Compiles kernels/wgmma.cu (sm_90a) and kernels/gemm.cu (sm_90) with NVRTC
through ctypes, encodes the TMA tensor maps with the driver's
cuTensorMapEncodeTiled, and on PyTorch tensors:

- checks every op/dtype/variant against a float64 PyTorch reference
  (relative error) and counts bit differences to the mma_large family;
- checks batch invariance (rows of an m = 4096 product against m = 1, 3,
  8, 64, 200, ...), run-to-run identity and BN = 256 vs BN = 128 identity;
- times the wgmma family against torch.matmul (cuBLAS) in one interleaved
  run.

Nothing here is used by the crate; it exists so that the kernel can be
validated by code that shares nothing with the Rust host side.

    python3 scripts/wgmma_probe.py [--quick] [--define NAME ...]
"""

import argparse
import ctypes
import os
import re
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

cuda = ctypes.CDLL("libcuda.so.1")
nvrtc = None
for name in ("libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "/usr/local/cuda/lib64/libnvrtc.so"):
    try:
        nvrtc = ctypes.CDLL(name)
        break
    except OSError:
        pass
if nvrtc is None:
    sys.exit("libnvrtc not found (set LD_LIBRARY_PATH=/usr/local/cuda/lib64)")


def check(rc, what):
    if rc != 0:
        msg = ctypes.c_char_p()
        cuda.cuGetErrorString(rc, ctypes.byref(msg))
        raise RuntimeError(f"{what}: CUDA error {rc} {msg.value}")


def compile_cubin(path, arch, defines):
    src = open(path, "rb").read()
    prog = ctypes.c_void_p()
    rc = nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src, os.path.basename(path).encode(), 0, None, None)
    assert rc == 0, rc
    opts = [f"--gpu-architecture={arch}", "--fmad=false", "--ftz=false", "--prec-div=true",
            "--prec-sqrt=true", "-default-device", "--std=c++17"] + [f"-D{d}" for d in defines]
    arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
    rc = nvrtc.nvrtcCompileProgram(prog, len(opts), arr)
    size = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetProgramLog(prog, log)
    if rc != 0:
        raise RuntimeError(f"NVRTC {path}: {rc}\n{log.value.decode()}")
    if log.value.strip():
        print(f"[nvrtc log {path}]\n{log.value.decode()}")
    nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(size))
    cubin = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetCUBIN(prog, cubin)
    own = re.search(rb"^#define PERSISTENT_BYTES (\d+)", src, re.M)
    cubin.persistent_bytes = int(own.group(1)) if own else PERSISTENT_BYTES
    return cubin


class Module:
    def __init__(self, cubin):
        self.persistent_bytes = getattr(cubin, "persistent_bytes", PERSISTENT_BYTES)
        self.mod = ctypes.c_void_p()
        check(cuda.cuModuleLoadData(ctypes.byref(self.mod), cubin), "cuModuleLoadData")
        self.funcs = {}

    def func(self, name, smem=0):
        if name not in self.funcs:
            f = ctypes.c_void_p()
            check(cuda.cuModuleGetFunction(ctypes.byref(f), self.mod, name.encode()), name)
            if smem:
                # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
                check(cuda.cuFuncSetAttribute(f, 8, smem), "max dynamic smem")
            regs = ctypes.c_int()
            cuda.cuFuncGetAttribute(ctypes.byref(regs), 4, f)  # NUM_REGS
            spill = ctypes.c_int()
            cuda.cuFuncGetAttribute(ctypes.byref(spill), 3, f)  # LOCAL_SIZE_BYTES
            print(f"  {name}: {regs.value} registers, {spill.value} local bytes")
            self.funcs[name] = f
        return self.funcs[name]


def persistent(f):
    """True for a persistent wgmma_gemm (builds since 4p of
    031b011's docs/benchmarks.md): it takes nine parameters, the one-CTA kernel seven."""
    offset, size = ctypes.c_size_t(), ctypes.c_size_t()
    return cuda.cuFuncGetParamInfo(f, 8, ctypes.byref(offset), ctypes.byref(size)) == 0


def launch(f, grid, block, smem, args):
    ptrs = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.pointer(a), ctypes.c_void_p) for a in args])
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    check(cuda.cuLaunchKernel(f, grid[0], grid[1], grid[2], block[0], block[1], block[2], smem,
                              stream, ptrs, None), "cuLaunchKernel")


def tensor_map(t, dims, box, dtype, swizzle=3):
    """dims: (inner, outer) in elements; row stride = inner leading dim;
    swizzle: 3 = 128 bytes, 2 = 64 bytes, 1 = 32 bytes, 0 none (the box
    row's bytes; none for 16)."""
    # CUtensorMap must be 64-byte aligned: carve it out of a larger buffer.
    raw = ctypes.create_string_buffer(192)
    addr = (ctypes.addressof(raw) + 63) & ~63
    tm = (ctypes.c_uint64 * 16).from_address(addr)
    tm._keep = raw
    gdim = (ctypes.c_uint64 * 2)(dims[0], dims[1])
    gstride = (ctypes.c_uint64 * 1)(dims[2] * 2)
    boxd = (ctypes.c_uint32 * 2)(box[0], box[1])
    estr = (ctypes.c_uint32 * 2)(1, 1)
    dt = 9 if dtype == torch.bfloat16 else 6
    # interleave none, swizzle 128B (3), L2 promotion 256B (3), OOB fill zeros (0)
    check(cuda.cuTensorMapEncodeTiled(tm, dt, 2, ctypes.c_void_p(t.data_ptr()), gdim, gstride, boxd,
                                      estr, 0, swizzle, 3, 0), f"cuTensorMapEncodeTiled {dims} {box}")
    return tm


BM, BK = 128, 64
# u32 words after a persistent kernel's tail flags that the shipped kernel
# reads (docs/kernels.md): the launch's choice to split, its
# readers, a forced choice; read from the crate's catalog::TAIL_CHOICE_WORDS,
# where the host sizes the same words. Older builds ignore them.
CATALOG = open(os.path.join(ROOT, "crates/cuda/src/catalog/mod.rs")).read()
TAIL_WORDS = int(re.search(r"pub const TAIL_CHOICE_WORDS: u64 = (\d+);", CATALOG).group(1))
# Shared memory a persistent kernel holds after its ring's barriers: a
# build's own `#define PERSISTENT_BYTES n` (the shipped kernel's;
# compile_cubin reads it), else the crate's
# catalog::WGMMA_PERSISTENT_SHARED_BYTES (builds from before the define).
PERSISTENT_BYTES = int(re.search(r"const WGMMA_PERSISTENT_SHARED_BYTES: u32 = (\d+);", CATALOG).group(1))
# Bytes of shared memory a kernel's stage ring may use (RING_BYTES in wgmma.cu).
RING = 192 * 1024


def smem_bytes(bn, bm=BM, ring=RING):
    """Dynamic shared memory of a launch: the ring's whole stages, 1 KiB of
    alignment slack and the barriers (crates/cuda/src/catalog/mod.rs). Counted
    with stages of one k block: the narrow rung's stages of two (since
    2026-12-02) need 16 bytes less per pair, so this size serves builds
    from before and after."""
    stage = (bm + bn) * BK * 2
    stages = ring // stage
    return stages * stage + 1024 + 16 * stages


class Launch:
    """One launch of a wgmma-module kernel: call it to enqueue it on the
    current stream. `grid` may be changed before a call (the cluster and
    persistent variants do); `keep` holds what the arguments point into,
    `counters` a splitting rung's tile counters or a persistent kernel's
    tail flags."""

    def __init__(self, f, grid, block, smem, args, keep, counters=None):
        self.f, self.grid, self.block, self.smem, self.args = f, grid, block, smem, args
        self.keep, self.counters = keep, counters

    def __call__(self):
        launch(self.f, self.grid, self.block, self.smem, self.args)
        return self.keep


def kernel_launch(mod, tile, how, op, dtype, a_st, b_st, m, k, n, c, ldc=None, chunks=1, ring=RING,
                  suffix="", lda=None):
    """The launch the crate's host makes of a wgmma-module kernel (one
    statement of its tensor maps, grid and arguments for every tool here):
    tile = (rows, columns); how = "wgmma" (gemm_wgmma_<bn><suffix>_<op>_<dt>)
    or a ladder rung's "split" / "fold" (gemm_ladder_<bm>x<bn>_<how><suffix>_...);
    A and B as stored (TN's A k x m, NT's B n x k); C a tensor or a device
    address, rows ldc apart (default n); `chunks` the ladder's chunk count;
    `ring` the stage ring's bytes the module was built with; `lda` TN's
    A row stride in elements (default m, dense)."""
    bm, bn = tile
    dt = "bf16" if dtype == torch.bfloat16 else "f16"
    smem = smem_bytes(bn, bm, ring)
    if how == "wgmma":
        f = mod.func(f"gemm_wgmma_{bn}{suffix}_{op}_{dt}", smem)
        rows = bm
    else:
        f = mod.func(f"gemm_ladder_{bm}x{bn}_{how}{suffix}_{op}_{dt}", smem)
        # Below one tile of rows a rung loads m rounded up to 8 rows of A.
        rows = bm if m >= bm else -(-m // 8) * 8
    if op == "tn":
        # TN's A on a 64-row rung at m <= 32: one box of 8, 16 or 32 m
        # values, no, 32- or 64-byte swizzle (catalog/tensor_map.rs tn_a_box_cols).
        # mod.tn_min_box: the narrowest box a module's kernels read (64 for
        # builds before narrow boxes, 16 for builds without the 8-wide one).
        cols, narrowest = 64, getattr(mod, "tn_min_box", 8)
        if how != "wgmma" and bm == 64 and m <= 32 and narrowest < 64:
            cols = 32 if m > 16 else 16 if m > 8 or narrowest == 16 else 8
        ta = tensor_map(a_st, (m, k, lda or m), (cols, 64), dtype, swizzle={8: 0, 16: 1, 32: 2, 64: 3}[cols])
    else:
        ta = tensor_map(a_st, (k, m, k), (64, rows), dtype)
    if op == "nt":
        # A box has at most 256 rows: a 320-wide tile loads two of 160.
        tb = tensor_map(b_st, (k, n, k), (64, bn if bn <= 256 else bn // 2), dtype)
    elif bn == 32:
        # One 32-wide box: 64-byte rows, 64-byte swizzle (docs/design.md).
        tb = tensor_map(b_st, (n, k, n), (32, 64), dtype, swizzle=2)
    else:
        tb = tensor_map(b_st, (n, k, n), (64, 64), dtype)
    tiles = (-(-m // bm)) * (-(-n // bn))
    cp = ctypes.c_void_p(c if isinstance(c, int) else c.data_ptr())
    dims = [ctypes.c_uint32(m), ctypes.c_uint32(k), ctypes.c_uint32(n), ctypes.c_uint32(ldc or n)]
    if how == "wgmma":
        if not persistent(f):
            return Launch(f, (tiles, 1, 1), (384, 1, 1), smem, [ta, tb, cp, *dims], (ta, tb, c))
        # Builds since 4p: at most one block per SM, a workspace of one
        # 128 x bn f32 partial and one flag per tile of the last partial
        # wave, then TAIL_WORDS, and the build's persistent_bytes of shared
        # memory after the ring's barriers.
        grid = min(tiles, torch.cuda.get_device_properties(0).multi_processor_count)
        tail = tiles % grid
        ws = torch.zeros(max(1, tail * bm * bn), device="cuda", dtype=torch.float32)
        flags = torch.zeros(tail + TAIL_WORDS, device="cuda", dtype=torch.int32)
        extra = mod.persistent_bytes
        check(cuda.cuFuncSetAttribute(f, 8, smem + extra), "max dynamic smem")
        args = [ta, tb, cp, ctypes.c_void_p(ws.data_ptr()), ctypes.c_void_p(flags.data_ptr()), *dims]
        return Launch(f, (grid, 1, 1), (384, 1, 1), smem + extra, args, (ta, tb, c, ws, flags), flags)
    split = how == "split"
    # The workspace (chunks x m x n f32) and the tile counters only a
    # splitting rung reads.
    ws = torch.zeros(chunks * m * n if split else 1, device="cuda", dtype=torch.float32)
    counters = torch.zeros(tiles, device="cuda", dtype=torch.int32)
    args = [ta, tb, cp, ctypes.c_void_p(ws.data_ptr() if split else 0),
            ctypes.c_void_p(counters.data_ptr() if split else 0), *dims, ctypes.c_uint32(chunks)]
    return Launch(f, (tiles, 1, chunks if split else 1), (128 * (1 + bm // 64), 1, 1), smem, args,
                  (ta, tb, c, ws, counters), counters)


class Runner:
    def __init__(self, defines):
        self.wg = Module(compile_cubin(os.path.join(ROOT, "crates/cuda/kernels/wgmma.cu"), "sm_90a", defines))
        self.ref = Module(compile_cubin(os.path.join(ROOT, "crates/cuda/kernels/gemm.cu"), "sm_90", []))

    def operands(self, op, m, k, n, dtype, seed):
        g = torch.Generator(device="cuda").manual_seed(seed)
        a = torch.randn(m, k, device="cuda", generator=g).to(dtype)  # A' (logical)
        b = torch.randn(k, n, device="cuda", generator=g).to(dtype)  # B' (logical)
        a_st = a.t().contiguous() if op == "tn" else a.contiguous()
        b_st = b.t().contiguous() if op == "nt" else b.contiguous()
        return a, b, a_st, b_st

    def wgmma(self, op, bn, dtype, a_st, b_st, m, k, n, out=None):
        c = out if out is not None else torch.empty(m, n, device="cuda", dtype=dtype)
        kernel_launch(self.wg, (BM, bn), "wgmma", op, dtype, a_st, b_st, m, k, n, c)()
        return c

    def mma_large(self, op, dtype, a_st, b_st, m, k, n):
        dt = "bf16" if dtype == torch.bfloat16 else "f16"
        f = self.ref.func(f"gemm_mma_large_{op}_{dt}")
        c = torch.zeros(m, n, device="cuda", dtype=dtype)
        args = [ctypes.c_void_p(a_st.data_ptr()), ctypes.c_void_p(b_st.data_ptr()),
                ctypes.c_void_p(c.data_ptr()), ctypes.c_uint32(m), ctypes.c_uint32(k), ctypes.c_uint32(n)]
        launch(f, ((n + 127) // 128, (m + 127) // 128, 1), (256, 1, 1), 0, args)
        return c


def bits(t):
    return t.view(torch.int16)


def differing(out, ref):
    """How many elements of `out` differ from `ref` in their bits."""
    return (bits(out) != bits(ref)).sum().item()


def validate(r, quick):
    ok = True
    shapes = [(256, 512, 512), (200, 136, 264), (4096, 4096, 4096)] if not quick else [(200, 136, 264), (1024, 1024, 1024)]
    for dtype in (torch.bfloat16, torch.float16):
        for op in ("nn", "tn", "nt"):
            for (m, k, n) in shapes:
                a, b, a_st, b_st = r.operands(op, m, k, n, dtype, 7)
                ref = (a.double() @ b.double())
                ml = r.mma_large(op, dtype, a_st, b_st, m, k, n)
                for bn in (256, 128):
                    c = r.wgmma(op, bn, dtype, a_st, b_st, m, k, n)
                    c2 = r.wgmma(op, bn, dtype, a_st, b_st, m, k, n)
                    torch.cuda.synchronize()
                    err = ((c.double() - ref).abs().max() / ref.abs().max()).item()
                    ml_err = ((ml.double() - ref).abs().max() / ref.abs().max()).item()
                    diff_ml = (bits(c) != bits(ml)).sum().item()
                    rr = (bits(c) != bits(c2)).sum().item()
                    good = err < 2 * ml_err + 1e-3 and rr == 0
                    ok &= good
                    print(f"{'OK ' if good else 'BAD'} {op} {str(dtype)[6:]:8} bn={bn} {m}x{k}x{n}: rel err {err:.2e} "
                          f"(mma_large {ml_err:.2e}), {diff_ml} elements differ from mma_large, run-to-run diff {rr}")
                    if bn == 256:
                        c256 = c
                    else:
                        v = (bits(c) != bits(c256)).sum().item()
                        print(f"    bn=128 vs bn=256: {v} elements differ")
                        ok &= v == 0
    # Batch invariance: rows of a large product against small m.
    k = n = 4096
    for dtype in (torch.bfloat16,):
        for op in ("nn", "tn", "nt"):
            big_m = 4096
            a, b, a_st, b_st = r.operands(op, big_m, k, n, dtype, 11)
            big = r.wgmma(op, 256, dtype, a_st, b_st, big_m, k, n)
            bad = []
            for m in (1, 2, 3, 8, 48, 64, 96, 128, 200, 1000):
                if op == "tn" and m % 8:
                    continue
                sub = a[:m]
                sa = sub.t().contiguous() if op == "tn" else sub.contiguous()
                for bn in (256, 128):
                    c = r.wgmma(op, bn, dtype, sa, b_st, m, k, n)
                    torch.cuda.synchronize()
                    if not torch.equal(bits(c), bits(big[:m])):
                        bad.append((m, bn))
            ok &= not bad
            print(f"{'OK ' if not bad else 'BAD'} batch invariance {op} bf16 k=n=4096: differs at {bad}")
    return ok


def timeit(fn, reps):
    fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / 1e3 / reps


def bench(r, ops):
    dtype = torch.bfloat16
    shapes = [(m, 4096, 4096) for m in (1, 16, 128, 1024, 4096, 8192)] + [(8192, 8192, 8192)]
    print(f"{'op':3} {'m x k x n':>18} {'cuBLAS':>9} {'wgmma256':>9} {'wgmma128':>9}  ratio256 ratio128 (TFLOP/s)")
    for op in ops:
        for (m, k, n) in shapes:
            a, b, a_st, b_st = r.operands(op, m, k, n, dtype, 3)
            if op == "tn" and m % 8:
                continue
            a_l = a_st.t() if op == "tn" else a_st
            b_l = b_st.t() if op == "nt" else b_st
            c = torch.empty(m, n, device="cuda", dtype=dtype)
            flop = 2.0 * m * k * n
            reps = max(3, min(200, int(2e12 / flop)))
            best = {}
            for _ in range(3):  # interleaved rounds, keep the fastest
                for name, fn in (("cublas", lambda: torch.matmul(a_l, b_l, out=c)),
                                 ("w256", lambda: r.wgmma(op, 256, dtype, a_st, b_st, m, k, n, c)),
                                 ("w128", lambda: r.wgmma(op, 128, dtype, a_st, b_st, m, k, n, c))):
                    t = timeit(fn, reps)
                    best[name] = min(best.get(name, 1e9), t)
            tf = {x: flop / best[x] / 1e12 for x in best}
            print(f"{op:3} {m:>6}x{k}x{n} {tf['cublas']:9.1f} {tf['w256']:9.1f} {tf['w128']:9.1f}  "
                  f"{tf['w256'] / tf['cublas']:7.3f}  {tf['w128'] / tf['cublas']:7.3f}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--define", action="append", default=[])
    p.add_argument("--no-bench", action="store_true")
    p.add_argument("--bench-ops", default="nn,tn,nt")
    args = p.parse_args()
    torch.zeros(1, device="cuda")  # make PyTorch's context current
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "defines", args.define)
    t0 = time.time()
    r = Runner(args.define)
    print(f"compiled in {time.time() - t0:.1f} s")
    ok = validate(r, args.quick)
    print("VALIDATION", "PASS" if ok else "FAIL")
    if not args.no_bench:
        bench(r, args.bench_ops.split(","))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
