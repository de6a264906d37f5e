// gemm-audit Hopper GEMM kernels (TMA + wgmma), compiled at run time with
// NVRTC for sm_90a only.
//
// Same storage and layout as kernels/gemm.cu (row-major, C[m,n] =
// A'[m,k] * B'[k,n]; nn: A m x k, B k x n; tn: A stored k x m; nt: B
// stored n x k), f16/bf16 inputs, f32 accumulation, round-to-nearest-even
// output.
//
// Why it is deterministic and batch invariant by construction:
// - one tile configuration for every m: each BM x BN output tile walks k
//   in ascending BK = 64 steps, each four wgmma k16 steps accumulating
//   into the same f32 registers from +0.0; there is no split-K, no atomics
//   and no reduction across blocks. Where the last wave of tiles would
//   leave SMs idle, a tile's walk may be cut into pieces run by different
//   blocks in series, each continuing the f32 partial of the one before
//   (see the schedule at wgmma_gemm): the same sequence of operations;
// - an output element's value depends only on its row of A', its column of
//   B' and that fixed sequence of wgmma operations, never on m, on which
//   blocks run it or on when they run (rows past m and the k tail are
//   zero-filled by TMA, identically for every m);
// - the three tile variants (BN = 256, 192 and 128) issue the same k16
//   sequence per output element, so they are expected to agree bit for
//   bit (the audit checks it rather than assuming it).
//
// Structure: 3 warpgroups per block. Warpgroup 0 is the producer: one
// thread issues TMA loads (128-byte swizzle) into a ring of STAGES shared
// memory stages guarded by mbarriers. Warpgroups 1 and 2 are consumers:
// each owns 64 rows of the tile, waits for a stage, issues wgmma on it and
// releases it to the producer once its wgmma group has retired.
//
// TMA needs 16-byte aligned global strides: k and n must be multiples of 8
// (and m too for tn, whose A is m-contiguous); the host refuses other
// shapes with that reason. C's rows are `ldc` elements apart (n when
// dense; an even ldc >= n keeps every 2-element store 4-byte aligned).
// The epilogue stages each tile in stages of the ring the tile has read
// and stores it as 16-byte runs of rows (4-byte stores where C or ldc is
// not 16-byte aligned): see store_tile.

typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

#define OP_NN 0
#define OP_TN 1
#define OP_NT 2
#define DT_F16 1
#define DT_BF16 2

#define BM 128
#define BK 64
#define THREADS 384
// Bytes of shared memory the stage ring may use (the rest of the 227 KiB
// holds the barriers and the alignment slack).
#define RING_BYTES (192 * 1024)

// CUtensorMap: 128 opaque bytes, 64-byte aligned, passed by value.
struct __align__(64) TensorMap {
    u64 opaque[16];
};

// ------------------------------------------------------------ PTX helpers

__device__ __forceinline__ u32 smem_addr(const void* p) {
    u32 r;
    asm("{\n.reg .u64 t;\ncvta.to.shared.u64 t, %1;\ncvt.u32.u64 %0, t;\n}\n" : "=r"(r) : "l"(p));
    return r;
}

__device__ __forceinline__ void st_shared(u32 addr, u32 v) {
    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}

__device__ __forceinline__ u32 ld_shared(u32 addr) {
    u32 v;
    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
    return v;
}

__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_expect_tx(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    u32 done = 0;
    while (!done) {
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
            "selp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    }
}

__device__ __forceinline__ void tma_load(u32 dst, const TensorMap* map, u32 bar, int c0, int c1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4}], [%2];\n" ::"r"(dst),
        "l"((u64)map), "r"(bar), "r"(c0), "r"(c1)
        : "memory");
}

__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// A shared-memory matrix descriptor, 128-byte swizzle (layout type 1).
__device__ __forceinline__ u64 smem_desc(u32 addr, u32 lbo, u32 sbo) {
    return (u64)((addr & 0x3FFFF) >> 4) | ((u64)((lbo >> 4) & 0x3FFF) << 16) |
           ((u64)((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
}

__device__ __forceinline__ u32 pack2(float lo, float hi, int dt) {
    u32 r;
    if (dt == DT_BF16) {
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    } else {
        asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    }
    return r;
}

// ------------------------------------------------------------ wgmma
// Generated operand lists: D is N/2 f32 registers per thread.

template <int TA, int TB>
__device__ __forceinline__ void wgmma_n128_bf16(float* d, u64 da, u64 db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "%64, %65, p, 1, 1, %67, %68;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "r"(1), "n"(TA), "n"(TB));
}

template <int TA, int TB>
__device__ __forceinline__ void wgmma_n128_f16(float* d, u64 da, u64 db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "%64, %65, p, 1, 1, %67, %68;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "r"(1), "n"(TA), "n"(TB));
}

template <int TA, int TB>
__device__ __forceinline__ void wgmma_n256_bf16(float* d, u64 da, u64 db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
        "%128, %129, p, 1, 1, %131, %132;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(da), "l"(db), "r"(1), "n"(TA), "n"(TB));
}

template <int TA, int TB>
__device__ __forceinline__ void wgmma_n256_f16(float* d, u64 da, u64 db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
        "%128, %129, p, 1, 1, %131, %132;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(da), "l"(db), "r"(1), "n"(TA), "n"(TB));
}

template <int TA, int TB>
__device__ __forceinline__ void wgmma_n192_bf16(float* d, u64 da, u64 db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, "
        "%96, %97, p, 1, 1, %99, %100;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
        : "l"(da), "l"(db), "r"(1), "n"(TA), "n"(TB));
}

template <int TA, int TB>
__device__ __forceinline__ void wgmma_n192_f16(float* d, u64 da, u64 db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n192k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, "
        "%96, %97, p, 1, 1, %99, %100;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
        : "l"(da), "l"(db), "r"(1), "n"(TA), "n"(TB));
}

template <int TA, int TB>
__device__ __forceinline__ void wgmma_n64_bf16(float* d, u64 da, u64 db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "%32, %33, p, 1, 1, %35, %36;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(1), "n"(TA), "n"(TB));
}

template <int TA, int TB>
__device__ __forceinline__ void wgmma_n64_f16(float* d, u64 da, u64 db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "%32, %33, p, 1, 1, %35, %36;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(1), "n"(TA), "n"(TB));
}

template <int TA, int TB>
__device__ __forceinline__ void wgmma_n32_bf16(float* d, u64 da, u64 db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
        "%16, %17, p, 1, 1, %19, %20;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(da), "l"(db), "r"(1), "n"(TA), "n"(TB));
}

template <int TA, int TB>
__device__ __forceinline__ void wgmma_n32_f16(float* d, u64 da, u64 db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
        "%16, %17, p, 1, 1, %19, %20;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(da), "l"(db), "r"(1), "n"(TA), "n"(TB));
}

template <int BN, int DT, int TA, int TB>
__device__ __forceinline__ void wgmma_tile(float* d, u64 da, u64 db) {
    if (BN == 256) {
        if (DT == DT_BF16) wgmma_n256_bf16<TA, TB>(d, da, db);
        else wgmma_n256_f16<TA, TB>(d, da, db);
    } else if (BN == 192) {
        if (DT == DT_BF16) wgmma_n192_bf16<TA, TB>(d, da, db);
        else wgmma_n192_f16<TA, TB>(d, da, db);
    } else if (BN == 64) {
        if (DT == DT_BF16) wgmma_n64_bf16<TA, TB>(d, da, db);
        else wgmma_n64_f16<TA, TB>(d, da, db);
    } else if (BN == 32) {
        if (DT == DT_BF16) wgmma_n32_bf16<TA, TB>(d, da, db);
        else wgmma_n32_f16<TA, TB>(d, da, db);
    } else {
        if (DT == DT_BF16) wgmma_n128_bf16<TA, TB>(d, da, db);
        else wgmma_n128_f16<TA, TB>(d, da, db);
    }
}

// ------------------------------------------------------------ the kernel

// Shared memory per stage: A is BM x BK, B is BK x BN (2-byte elements).
template <int BN>
struct Ring {
    static constexpr u32 A_BYTES = BM * BK * 2;
    static constexpr u32 B_BYTES = BN * BK * 2;
    static constexpr u32 STAGE_BYTES = A_BYTES + B_BYTES;
    static constexpr u32 STAGES = RING_BYTES / STAGE_BYTES;
};

// The row band (64 rows of A' for one consumer) and the B' panel of one
// k16 step, as wgmma descriptors. K-major operands (A of nn/nt, B of nt)
// are 128-byte rows of 64 k values: a k16 step advances 32 bytes and 8-row
// groups are 1024 bytes apart. MN-major operands (A of tn, B of nn/tn) are
// TMA boxes of 64 k rows x 64 m/n values (8 KiB each): a k16 step advances
// 16 rows (2048 bytes), 8-k groups are 1024 bytes apart and successive
// 64-wide m/n blocks 8 KiB apart.
//
// TN's A on the ladder's 64-row rungs, where the problem has at most 32
// rows, is one box of AW = 8, 16 or 32 m values per k row instead (16-,
// 32- or 64-byte rows with the swizzle of their width: none, 32 and 64
// bytes, layout types 0, 3 and 2): TMA's zero fill of a 64-wide box at
// m = 8 cost that rung as much as full boxes. The wgmma's other m rows
// read the stale rest of the stage's A and are never stored.
template <int OP, int AW = 64>
__device__ constexpr u32 a_k16_bytes() {
    return OP == OP_TN ? 16 * AW * 2 : 32;
}

template <int OP, int BN>
__device__ constexpr u32 b_k16_bytes() {
    // BN = 32: one TMA box of 64 k rows x 32 n values (64-byte rows,
    // 64-byte swizzle, layout type 2): a k16 step advances 16 rows.
    return OP == OP_NT ? 32 : BN == 32 ? 1024 : 2048;
}

// The descriptor's layout type for a swizzle of `bytes` per row (16: none).
__device__ __forceinline__ u64 with_swizzle(u64 desc, u32 bytes) {
    const u64 type = bytes == 128 ? 1 : bytes == 64 ? 2 : bytes == 32 ? 3 : 0;
    return (desc & ~(3ull << 62)) | (type << 62);
}

template <int OP, int AW>
__device__ __forceinline__ u64 desc_a(u32 a_stage, u32 consumer) {
    if (OP == OP_TN && AW == 8) {
        // Unswizzled (PTX's MN-major "interleave" layout): the leading
        // offset steps 8-k groups (128 bytes), the stride offset 8-wide m
        // blocks (only the first holds rows that are stored).
        return with_swizzle(smem_desc(a_stage, 128, 1024), 16);
    }
    if (OP == OP_TN) {
        // AW-wide boxes: 16 k rows of 2 AW bytes a k16 step; swizzled
        // layouts step AW-wide m blocks by the leading offset (128 AW
        // bytes, one box) and 8-k groups by the stride offset (16 AW).
        return with_swizzle(smem_desc(a_stage + consumer * 8192, 128 * AW, 16 * AW), 2 * AW);
    }
    return smem_desc(a_stage + consumer * 64 * 128, 16, 1024);
}

template <int OP, int BN>
__device__ __forceinline__ u64 desc_b(u32 b_stage) {
    if (OP == OP_NT) {
        return smem_desc(b_stage, 16, 1024);
    }
    if (BN == 32) {
        // 8-k groups 512 bytes apart (see b_k16_bytes).
        return with_swizzle(smem_desc(b_stage, 4096, 512), 64);
    }
    return smem_desc(b_stage, 8192, 1024);
}

// A warp-uniform copy of `x` (lane 0's). Where ptxas cannot prove a stage
// address or consumer index uniform it builds every wgmma descriptor in
// vector registers and moves it to uniform ones (R2UR) between the wgmma
// of one group, which then issue far apart; from a uniform value it builds
// them in the uniform datapath (docs/benchmarks.md, 4j).
__device__ __forceinline__ u32 uniform(u32 x) {
    return __shfl_sync(0xffffffffu, x, 0);
}

// Tile order: groups of GROUP_M row tiles, column-major inside a group,
// so blocks that run together share B' panels and A' bands in L2. Only
// the order blocks run in depends on m, never an output's arithmetic.
#define GROUP_M 16

// The output tile (row, column) of block `b` among the TBM x BN tiles.
template <int TBM, int BN>
__device__ __forceinline__ void tile_of(u32 b, u32 m, u32 n, u32& tile_m, u32& tile_n) {
    const u32 tiles_m = (m + TBM - 1) / TBM;
    const u32 tiles_n = (n + BN - 1) / BN;
    const u32 group = GROUP_M * tiles_n;
    const u32 first_m = (b / group) * GROUP_M;
    const u32 rows_in_group = tiles_m - first_m < GROUP_M ? tiles_m - first_m : GROUP_M;
    tile_m = first_m + (b % group) % rows_in_group;
    tile_n = (b % group) / rows_in_group;
}

// The producer's TMA loads of one stage: A' (TBM rows; TN's m-contiguous
// A as 64-wide boxes) at a_dst, B' (BN columns) at b_dst, k block at kc.
template <int OP, int TBM, int BN>
__device__ __forceinline__ void load_stage(const TensorMap& ta, const TensorMap& tb, u32 a_dst,
                                           u32 b_dst, u32 full, int kc, u32 tile_m, u32 tile_n) {
    if (OP == OP_TN) {
#pragma unroll
        for (u32 j = 0; j < TBM / 64; ++j) {
            tma_load(a_dst + j * 8192, &ta, full, (int)(tile_m * TBM + 64 * j), kc);
        }
    } else {
        tma_load(a_dst, &ta, full, kc, (int)(tile_m * TBM));
    }
    if (OP == OP_NT) {
        tma_load(b_dst, &tb, full, kc, (int)(tile_n * BN));
    } else if (BN == 32) {
        tma_load(b_dst, &tb, full, (int)(tile_n * BN), kc);
    } else {
#pragma unroll
        for (int j = 0; j < BN / 64; ++j) {
            tma_load(b_dst + j * 8192, &tb, full, (int)(tile_n * BN + 64 * j), kc);
        }
    }
}

// One consumer's wgmma group over one stage (KB k blocks of four k16 steps
// onto d, block q's A and B `stride` bytes after block q - 1's), then a
// wait until at most this group is in flight: the previous stage's group
// has retired and its stage may go back to the producer.
//
// The descriptors are built once a stage: a step moves only the start
// address field (bits 0-13, the address >> 4), and shared addresses stay
// below 256 KiB, so adding to that field equals building the descriptor
// anew. The wgmma of a group then issue back to back.
template <int OP, int DT, int BN, int KB = 1, int AW = 64>
__device__ __forceinline__ void consume_stage(float* d, u32 a_stage, u32 b_stage, u32 consumer,
                                              u32 stride = 0) {
    constexpr int TA = OP == OP_TN ? 1 : 0;
    constexpr int TB = OP == OP_NT ? 0 : 1;
    const u64 da = desc_a<OP, AW>(a_stage, consumer);
    const u64 db = desc_b<OP, BN>(b_stage);
    wgmma_fence();
#pragma unroll
    for (u32 q = 0; q < KB; ++q) {
#pragma unroll
        for (u32 ks = 0; ks < BK / 16; ++ks) {
            const u32 block = (q * stride) >> 4;
            wgmma_tile<BN, DT, TA, TB>(d, da + block + ((ks * a_k16_bytes<OP, AW>()) >> 4),
                                       db + block + ((ks * b_k16_bytes<OP, BN>()) >> 4));
        }
    }
    wgmma_commit();
    wgmma_wait<1>();
}

// Epilogue: one consumer warpgroup's 64 x BN tile, rounded, staged in
// shared memory (ring stages the tile has read) and stored as whole
// 16-byte runs of C's rows. Storing the wgmma fragment straight from
// registers (16 bytes of 8 rows per warp instruction) took about 7 us per
// wave of 128 x 256 tiles on the H200 (docs/benchmarks.md, 4i). The
// values and their rounding are the same either way: only the stores
// differ.
//
// Fragment of warp w, lane l: rows 16 w + l/4 (+8), columns 8 j + 2 (l%4)
// (+1). Staged rows are STAGED_PITCH(BN) = BN * 2 + 16 bytes apart, so the
// 32 lanes of one 4-byte fragment write hit 32 banks. `tile` is this
// warpgroup's staging area.
#define STAGED_PITCH(bn) ((bn) * 2u + 16u)

template <int DT, int BN>
__device__ __forceinline__ void stage_tile(const float* d, unsigned char* tile) {
    constexpr u32 PITCH = STAGED_PITCH(BN);
    const u32 t = threadIdx.x % 128;
    const u32 r = (t / 32) * 16 + (t % 32) / 4;
    const u32 c = 2 * (t % 4);
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
        *(u32*)(tile + r * PITCH + (8 * j + c) * 2) = pack2(d[4 * j], d[4 * j + 1], DT);
        *(u32*)(tile + (r + 8) * PITCH + (8 * j + c) * 2) = pack2(d[4 * j + 2], d[4 * j + 3], DT);
    }
}

// A 16-byte run of a staged row to C at `out`: one 16-byte store where C is
// 16-byte aligned and ldc a multiple of 8 elements (`wide`), four 4-byte
// ones elsewhere (ldc is even, so `out` is 4-byte aligned).
__device__ __forceinline__ void store_run(u16* out, uint4 v, bool wide) {
    if (wide) {
        *(uint4*)out = v;
    } else {
        u32* o = (u32*)out;
        o[0] = v.x;
        o[1] = v.y;
        o[2] = v.z;
        o[3] = v.w;
    }
}

// The consumer warpgroup stages its tile and stores it itself (`wg_bar` is
// its named barrier; row0/col0 locate the 64 x BN tile in C).
template <int DT, int BN>
__device__ __forceinline__ void store_tile(u16* C, const float* d, unsigned char* tile, u32 wg_bar,
                                           u32 row0, u32 col0, u32 m, u32 n, u32 ldc) {
    constexpr u32 PITCH = STAGED_PITCH(BN);
    constexpr u32 RUNS = BN / 8;  // 16-byte runs per row
    const u32 t = threadIdx.x % 128;
    stage_tile<DT, BN>(d, tile);
    asm volatile("bar.sync %0, 128;\n" ::"r"(wg_bar) : "memory");
    // n is a multiple of 8 (the host's TMA rule), so a run is all in or all out.
    const bool wide = ((u64)C % 16 == 0) && ldc % 8 == 0;
    for (u32 i = t; i < 64 * RUNS; i += 128) {
        const u32 row = row0 + i / RUNS;
        const u32 col = col0 + 8 * (i % RUNS);
        if (row < m && col < n) {
            store_run(C + (u64)row * ldc + col, *(const uint4*)(tile + (i / RUNS) * PITCH + (i % RUNS) * 16),
                      wide);
        }
    }
}

// Bytes of shared memory the epilogue stages per consumer warpgroup.
#define STAGED_BYTES(bn) (64u * STAGED_PITCH(bn))

// ------------------------------------------------------------ the schedule
//
// wgmma_gemm is persistent: gridDim.x blocks (at most one per SM, at most
// one per tile; the host picks min(tiles, SMs)) take the tiles b, b + grid,
// ... of the first q = tiles / grid waves whole. Of the r = tiles % grid
// tiles left, a last wave that would leave SMs idle, the k blocks are cut
// into S = min(grid, 2 r) equal contiguous segments, one a block (blocks
// b >= S take none). A tile cut into pieces is summed in series: each piece
// starts from the f32 partial the piece before it left in the workspace
// (stored and loaded as is, so exact) and walks its k blocks in ascending
// k16 order onto it. Every output therefore sees the same sequence of
// wgmma operations as a block that walks all of k, whoever runs which
// piece and when: the schedule depends on m and on the grid, the bits do
// not.
//
// A block runs its piece that starts a tile before its last two whole
// tiles, a piece from the middle of a tile before its last whole tile, and
// a piece that ends a tile last, so the piece before (at most 15/16 of a
// tile, see the rule below) has finished when it is waited for; a piece
// only ever waits for pieces of lower-numbered blocks. Pieces that late
// keep the blocks' k walks in step until the last two tiles: a block that
// ran a piece first would walk the rest of the kernel out of step with
// those that did not, and blocks in step share A' and B' in L2 (pieces
// first cost 3-6% at the 1.98 GHz boost clock; docs/benchmarks.md 4r).
// flags[j] holds how many k blocks tail tile j's partial has summed (0 at
// rest); the piece that ends the tile puts it back to 0, so a launch
// leaves the flags as it found them (graph replays need nothing reset).
//
// The split is taken only where it paid on the H200 (docs/benchmarks.md,
// 4p, 4s, 4t): a last wave cut by at least 1/40 of the whole-tile time,
// into segments of at most 4/5 of a tile's k blocks (15/16 where every
// block has three whole tiles or more) and, where they are over 3/5 of a
// tile, of at most TAIL_DRIFT_MAX_KBLOCKS k blocks. A block that runs a
// piece walks k up to a segment out of step with those that do not, and
// blocks share A' and B' in L2 only while their k walks stay within what
// L2 holds: at the power cap, segments of 73 and 85 k blocks ran 0.6% and
// 1.5% faster split, of 97 1% slower, of 113-197 8-20% slower
// (4096 x 14336 x 4096, 197 k blocks: 20% slower at either clock, and 31%
// with the pieces first, 4p).
//
// Where the segments are longer than 3/5 of a tile, whether the split
// pays depends on the SM clock (4q, 4r, 4s, 4t): at the power cap, where
// large GEMMs run back to back, it runs 1-3% faster than whole tiles; at
// the boost clock, where the kernel leans on L2 and memory, whose speed
// does not follow the SM clock, 1-7% slower. Shorter segments cut enough
// of the last wave to pay at any clock (MLP up at m = 1024, segments of
// 1/2 a tile: 8% faster split at the boost clock too), so they are always
// taken.
// So where the segments are over 3/5 of a tile and every block has at
// least three whole tiles, the launch measures its clock and decides:
// block 0's producer times its first tile (%clock64 cycles against
// %globaltimer nanoseconds) and publishes the choice in the words after
// the flags, and every block reads it before its last two whole tiles,
// where the two walks part (block 0's first tile ends long before then,
// so nobody waits). Under this load the H200's SMs run slower than
// nvidia-smi's clock says: block 0 measured 1.63 GHz after idle time (the
// boost clock) and 1.22-1.26 GHz at the power cap. Below
// TAIL_SPLIT_BELOW_MHZ the launch splits, else every tile is whole.
// Either walk gives every output the same wgmma sequence, so the bits do
// not depend on the choice.
#ifndef TAIL_DRIFT_MAX_KBLOCKS
#define TAIL_DRIFT_MAX_KBLOCKS 90
#endif
#ifndef TAIL_SPLIT_BELOW_MHZ
#define TAIL_SPLIT_BELOW_MHZ 1450
#endif
// A first tile shorter than this (few k blocks) times the clock too
// coarsely (%globaltimer ticks every 32 ns or so): the launch splits.
#define TAIL_CLOCK_MIN_NS 16000

struct TailPiece {
    u32 tile, lo, hi;  // linear tile, k blocks [lo, hi)
};

struct TailPlan {
    u32 whole;  // whole tiles of this block: blockIdx.x + i gridDim.x
    u32 first;  // linear index of tail tile 0 (q grid)
    u32 kblocks;
    bool has_begin, has_middle, has_end;
    TailPiece begin, middle, end;
    // Split or not by the launch's clock (segments over 3/5 of a tile,
    // and every block has three or more whole tiles); unsplit, this
    // block's tiles are all `all_whole` of its b + i grid.
    bool by_clock;
    u32 all_whole;
    u32* choice;  // flags[tiles % grid]: 0 not yet, 1 split, 2 whole; then
                  // how many readers have read it, and a forced choice
};

__device__ __forceinline__ TailPlan tail_plan(u32 tiles, u32 kblocks, u32* flags) {
    const u32 G = gridDim.x, b = blockIdx.x;
    TailPlan p;
    p.kblocks = kblocks;
    p.has_begin = p.has_middle = p.has_end = false;
    u32 r = tiles % G;
    p.choice = flags + r;
    p.all_whole = tiles / G + (b < r ? 1 : 0);
    // With more segments than two a tile, a tile would be cut into chains of
    // short pieces that wait on one another.
    const u32 S = 2 * r >= G ? G : 2 * r;
    const u64 R = (u64)r * kblocks;
    const u64 seg = S ? (R + S - 1) / S : 0, K = kblocks, waves = tiles / G + 1;
    const bool three = tiles / G >= 3, long_seg = 5 * seg > 3 * K;
    const bool fits = (three ? 16 * seg <= 15 * K : 5 * seg <= 4 * K) &&
                      (!long_seg || seg <= TAIL_DRIFT_MAX_KBLOCKS);
    if (r != 0 && !(fits && 40 * (K - seg) >= waves * K)) r = 0;
    p.by_clock = r != 0 && three && long_seg;
    p.first = tiles - r;
    p.whole = p.first > b ? (p.first - b + G - 1) / G : 0;
    if (r == 0 || b >= S) return p;
    const u64 lo = (u64)b * R / S, hi = (u64)(b + 1) * R / S;
    if (lo == hi) return p;
    const u32 j0 = (u32)(lo / kblocks), j1 = (u32)((hi - 1) / kblocks);
    for (u32 j = j0; j <= j1; ++j) {
        const u64 t0 = (u64)j * kblocks;
        TailPiece c;
        c.tile = p.first + j;
        c.lo = (u32)((lo > t0 ? lo : t0) - t0);
        c.hi = (u32)((hi < t0 + kblocks ? hi : t0 + kblocks) - t0);
        if (c.hi == kblocks) {
            p.end = c;
            p.has_end = true;
        } else if (c.lo == 0) {
            p.begin = c;
            p.has_begin = true;
        } else {
            p.middle = c;
            p.has_middle = true;
        }
    }
    return p;
}

// Calls f(piece) for each of this block's work items, in the order above;
// where the plan splits by the clock, split() (called once, where the two
// walks part) says whether this launch does.
template <typename S, typename F>
__device__ __forceinline__ void tail_walk(const TailPlan& p, S split, F f) {
    const u32 G = gridDim.x, b = blockIdx.x;
    const u32 at_begin = p.whole >= 2 ? p.whole - 2 : 0, at_middle = p.whole >= 1 ? p.whole - 1 : 0;
    for (u32 i = 0; i < at_begin; ++i) f(TailPiece{b + i * G, 0, p.kblocks});
    if (p.by_clock && !split()) {
        for (u32 i = at_begin; i < p.all_whole; ++i) f(TailPiece{b + i * G, 0, p.kblocks});
        return;
    }
    if (p.has_begin) f(p.begin);
    for (u32 i = at_begin; i < at_middle; ++i) f(TailPiece{b + i * G, 0, p.kblocks});
    if (p.has_middle) f(p.middle);
    for (u32 i = at_middle; i < p.whole; ++i) f(TailPiece{b + i * G, 0, p.kblocks});
    if (p.has_end) f(p.end);
}

__device__ __forceinline__ u32 ld_acquire(const u32* p) {
    u32 v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void st_release(u32* p, u32 v) {
    asm volatile("fence.acq_rel.gpu;\nst.relaxed.gpu.global.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

// Read as the partial of a piece that starts a tile (see wgmma_gemm).
__device__ float4 tail_zero;

__device__ __forceinline__ u64 global_ns() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
    return t;
}

// Block 0's producer, after loading its first tile (begun at cycle c0 and
// nanosecond t0): the launch's choice, published for every block. A forced
// choice (choice[2], which no launch writes) wins.
__device__ __forceinline__ void tail_publish(u32* choice, u64 c0, u64 t0) {
    const u64 cycles = clock64() - c0, ns = global_ns() - t0;
    u32 c = *(volatile u32*)(choice + 2);
    if (c == 0) {
        c = ns >= TAIL_CLOCK_MIN_NS && cycles * 1000 >= (u64)TAIL_SPLIT_BELOW_MHZ * ns ? 2 : 1;
    }
    st_release(choice, c);
}

// One thread's read of the launch's choice (waiting for it to be
// published); two threads a block read it, and the last of the 2 grid puts
// both words back to 0 for the next launch.
__device__ __forceinline__ bool tail_read(u32* choice) {
    u32 c;
    while ((c = ld_acquire(choice)) == 0) {
    }
    if (atomicAdd(choice + 1, 1u) == 2 * gridDim.x - 1) {
        choice[0] = 0;
        choice[1] = 0;
    }
    return c == 1;
}

// Dynamic shared memory: the ring, then full[s], empty[s], then
// PERSISTENT_BYTES (catalog::WGMMA_PERSISTENT_SHARED_BYTES on the host):
// - stored by the consumers (HAND false): `epi` (both consumers are done
//   with their staging after an epilogue) and the split choice's word;
// - handed over (HAND true): `epi` and `epi + 8` (consumer 0's and 1's
//   staging of an epilogue is stored and free again), `epi + EPI_STG` (an
//   epilogue is staged), the split choice's word and two slots of what an
//   epilogue staged, one for each parity of its number.
//
// An epilogue stages each consumer's 64 x BN tile in one of the two stages
// the item it ends read last, so the producer loads the next item's first
// STAGES - 2 stages while the tile is stored and waits for `epi` only
// before it reuses those two: the consumers find the next tile's first k
// blocks loaded instead of waiting out TMA's latency after every tile
// (about 1% faster at the power cap, the same at the boost clock:
// docs/benchmarks.md, 4u).
//
// Handed over, the consumers do not store the tile: warps 1-3 of the
// producer warpgroup, idle otherwise, copy it to C (store_staged) while the
// consumers go on to the next tile, and free each consumer's stage as soon
// as it is copied. That is about 1.5% faster at the boost clock where every
// block has several tiles, but 1.5-3% slower where a block has one tile
// and nothing to overlap the store with (three warps copy instead of
// eight; docs/benchmarks.md, 4v, 4w): the entry takes it only where every
// block has two whole tiles or more. Only who writes C differs, never what.
#define EPI_STG 16
#define EPI_CHOICE 24
#define EPI_SLOTS 28
#define EPI_SLOT_BYTES 12
#define PERSISTENT_BYTES 64
static_assert(EPI_SLOTS + 2 * EPI_SLOT_BYTES <= PERSISTENT_BYTES, "the slots fit the host's bytes");
// A slot's first word after the last epilogue: no more tiles.
#define NO_TILE 0xFFFFFFFFu

// Warps 1-3 of a persistent block's producer warpgroup, handed over:
// epilogue e's two staged 64 x BN tiles (consumer c's in stage (first + c)
// % STAGES) to C rows row0.., columns col0.., as slot e % 2 says once
// `epi + EPI_STG` says it is staged; each consumer's stage freed by
// `epi + 8 c` once it is copied. Thread t copies run t % RUNS of rows
// t / RUNS, + STEP, ..., reading four rows before it stores any: three
// warps keep several reads of shared memory in flight that way.
template <int BN, u32 STAGES, u32 STAGE_BYTES>
__device__ __forceinline__ void store_staged(u16* C, const unsigned char* ring, u32 epi, u32 m, u32 n,
                                             u32 ldc) {
    constexpr u32 PITCH = STAGED_PITCH(BN);
    constexpr u32 RUNS = BN / 8;
    constexpr u32 STEP = 96 / RUNS;
    static_assert(96 % RUNS == 0, "each thread copies one run of a row");
    const u32 t = threadIdx.x - 32;
    const bool wide = ((u64)C % 16 == 0) && ldc % 8 == 0;
    for (u32 e = 0;; ++e) {
        mbar_wait(epi + EPI_STG, e & 1);
        const u32 slot = epi + EPI_SLOTS + EPI_SLOT_BYTES * (e & 1);
        const u32 row0 = ld_shared(slot);
        if (row0 == NO_TILE) return;
        const u32 col0 = ld_shared(slot + 4), first = ld_shared(slot + 8);
        // n is a multiple of 8 (the host's TMA rule), so a run is all in or all out.
        const u32 col = col0 + 8 * (t % RUNS);
        for (u32 c = 0; c < 2; ++c) {
            const unsigned char* src = ring + ((first + c) % STAGES) * STAGE_BYTES + (t % RUNS) * 16;
            if (col < n && row0 + 64 * c < m) {
                const u32 rows = min(64u, m - (row0 + 64 * c));
                u16* out = C + (u64)(row0 + 64 * c) * ldc + col;
                for (u32 r = t / RUNS; r < rows; r += 4 * STEP) {
                    uint4 v[4];
#pragma unroll
                    for (u32 q = 0; q < 4; ++q) {
                        if (r + q * STEP < rows) v[q] = *(const uint4*)(src + (r + q * STEP) * PITCH);
                    }
#pragma unroll
                    for (u32 q = 0; q < 4; ++q) {
                        if (r + q * STEP < rows) store_run(out + (u64)(r + q * STEP) * ldc, v[q], wide);
                    }
                }
            }
            asm volatile("bar.sync 4, 96;\n" ::: "memory");
            if (t == 0) mbar_arrive(epi + 8 * c);
        }
    }
}

template <int OP, int DT, int BN, bool HAND>
__device__ __forceinline__ void wgmma_gemm(const TensorMap& ta, const TensorMap& tb, u16* C,
                                           float* ws, u32* flags, u32 m, u32 k, u32 n, u32 ldc) {
    typedef Ring<BN> R;
    static_assert(STAGED_BYTES(BN) <= R::STAGE_BYTES && R::STAGES >= 3,
                  "a consumer's epilogue is staged in one stage, with at least one stage to load ahead");
    extern __shared__ unsigned char smem_raw[];
    const u32 base = (smem_addr(smem_raw) + 1023u) & ~1023u;
    const u32 bars = base + R::STAGES * R::STAGE_BYTES;
    const u32 epi = bars + 16 * R::STAGES;
    const u32 tid = threadIdx.x;
    const u32 wg = tid / 128;
    const u32 kblocks = (k + BK - 1) / BK;
    const u32 tiles = ((m + BM - 1) / BM) * ((n + BN - 1) / BN);
    const TailPlan plan = tail_plan(tiles, kblocks, flags);

    if (tid == 0) {
        for (u32 s = 0; s < R::STAGES; ++s) {
            mbar_init(bars + 8 * s, 1);
            mbar_init(bars + 8 * (R::STAGES + s), 8);  // one arrival per consumer warp
        }
        if constexpr (HAND) {
            mbar_init(epi, 1);  // store_staged's thread 0, for each consumer
            mbar_init(epi + 8, 1);
            mbar_init(epi + EPI_STG, 1);  // consumer thread 128
        } else {
            mbar_init(epi, 2);  // one arrival per consumer warpgroup
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (tid == 0) {
            // The ring runs on across items, so the next item's loads overlap
            // a partial's store; after an epilogue staged in the last two
            // stages read (load numbers staged_at - 2 and - 1), the loads
            // that reuse them wait for `epi`.
            u32 i = 0, epilogues = 0, staged_at = 0;
            bool staging = false;
            const auto wait_epi = [&]() {
                mbar_wait(epi, epilogues & 1);
                ++epilogues;
                staging = false;
            };
            // Handed over: consumer c's stage (load staged_at - 2 + c) is
            // reused by load staged_at + STAGES - 2 + c, which waits for
            // `epi + 8 c` (`staging` for consumer 0, `staging1` for 1).
            // Consumer 0's wait always comes first, so one count of
            // epilogues freed serves both.
            bool staging1 = false;
            const bool times = plan.by_clock && blockIdx.x == 0;
            const u64 c0 = times ? clock64() : 0, t0 = times ? global_ns() : 0;
            const auto split = [&]() { return tail_read(plan.choice); };
            tail_walk(plan, split, [&](const TailPiece& w) {
                u32 tile_m, tile_n;
                tile_of<BM, BN>(w.tile, m, n, tile_m, tile_n);
                for (u32 it = w.lo; it < w.hi; ++it, ++i) {
                    // An item that ends a tile waits for the epilogue in
                    // flight before its last load at the latest, so the next
                    // epilogue cannot begin first: `epi`'s phases are waited
                    // for one at a time, in order.
                    if constexpr (HAND) {
                        const bool last = w.hi == kblocks && it + 1 == w.hi;
                        if (staging && (i >= staged_at + R::STAGES - 2 || last)) {
                            mbar_wait(epi, epilogues & 1);
                            staging = false;
                        }
                        if (staging1 && (i >= staged_at + R::STAGES - 1 || last)) {
                            mbar_wait(epi + 8, epilogues & 1);
                            ++epilogues;
                            staging1 = false;
                        }
                    } else if (staging &&
                               (i >= staged_at + R::STAGES - 2 || (w.hi == kblocks && it + 1 == w.hi))) {
                        wait_epi();
                    }
                    const u32 s = i % R::STAGES;
                    mbar_wait(bars + 8 * (R::STAGES + s), ((i / R::STAGES) & 1) ^ 1);
                    const u32 full = bars + 8 * s;
                    mbar_expect_tx(full, R::STAGE_BYTES);
                    const u32 a_dst = base + s * R::STAGE_BYTES;
                    load_stage<OP, BM, BN>(ta, tb, a_dst, a_dst + R::A_BYTES, full, (int)(it * BK),
                                           tile_m, tile_n);
                }
                // Block 0's first tile, a whole one, is loaded: publish.
                if (times && i == kblocks) tail_publish(plan.choice, c0, t0);
                if (w.hi == kblocks) {
                    staging = staging1 = true;
                    staged_at = i;
                }
            });
        } else if (HAND && tid >= 32) {
            store_staged<BN, R::STAGES, R::STAGE_BYTES>(C, smem_raw + (base - smem_addr(smem_raw)), epi, m, n,
                                                        ldc);
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const u32 consumer = uniform(wg - 1);
    const u32 lane = tid % 32;
    const u32 t = tid % 128;
    u32 i = 0, epilogues = 0;
    // One consumer thread reads the choice for both warpgroups, through
    // a spare word after `epi`.
    constexpr u32 CHOICE = HAND ? EPI_CHOICE : 8;
    const auto split = [&]() {
        if (tid == 128) st_shared(epi + CHOICE, tail_read(plan.choice) ? 1u : 0u);
        asm volatile("bar.sync 1, 256;\n" ::: "memory");
        return ld_shared(epi + CHOICE) != 0;
    };
    // Thread 128 hands an epilogue (or NO_TILE) over to store_staged.
    const auto hand_over = [&](u32 row0, u32 col0, u32 first) {
        const u32 slot = epi + EPI_SLOTS + EPI_SLOT_BYTES * (epilogues & 1);
        st_shared(slot, row0);
        st_shared(slot + 4, col0);
        st_shared(slot + 8, first);
        mbar_arrive(epi + EPI_STG);
    };
    tail_walk(plan, split, [&](const TailPiece& w) {
        u32 tile_m, tile_n;
        tile_of<BM, BN>(w.tile, m, n, tile_m, tile_n);
        // This thread's registers of a tail tile's partial, 16 bytes per
        // thread and instruction (used by pieces only).
        float4* part = (float4*)(ws + (u64)(w.tile - plan.first) * BM * BN) + consumer * (BN / 8) * 128 + t;
        u32* flag = flags + (w.tile - plan.first);
        float d[BN / 2];
        // The partial, or zeros read the same way: accumulators defined on
        // two paths (a branch or a select) make ptxas serialize every wgmma
        // of the kernel (C7515).
        const bool seeded = w.lo != 0;
        if (seeded) {
            if (tid == 128) {
                while (ld_acquire(flag) != w.lo) {
                }
            }
            asm volatile("bar.sync 1, 256;\n" ::: "memory");
        }
        const float4* from = seeded ? part : &tail_zero;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            const float4 v = __ldcg(from + (seeded ? j * 128 : 0));
            d[4 * j] = v.x;
            d[4 * j + 1] = v.y;
            d[4 * j + 2] = v.z;
            d[4 * j + 3] = v.w;
        }
        if (seeded && w.hi == kblocks && tid == 128) *flag = 0;
        const u32 i0 = i;
        for (u32 it = w.lo; it < w.hi; ++it, ++i) {
            const u32 s = i % R::STAGES;
            mbar_wait(bars + 8 * s, (i / R::STAGES) & 1);
            const u32 a_stage = uniform(base + s * R::STAGE_BYTES);
            consume_stage<OP, DT, BN>(d, a_stage, a_stage + R::A_BYTES, consumer);
            if (i > i0 && lane == 0) {
                mbar_arrive(bars + 8 * (R::STAGES + (i - 1) % R::STAGES));
            }
        }
        wgmma_wait<0>();
        if (lane == 0) mbar_arrive(bars + 8 * (R::STAGES + (i - 1) % R::STAGES));
        if (w.hi < kblocks) {
#pragma unroll
            for (int j = 0; j < BN / 8; ++j) {
                __stcg(part + j * 128, make_float4(d[4 * j], d[4 * j + 1], d[4 * j + 2], d[4 * j + 3]));
            }
            asm volatile("bar.sync 1, 256;\n" ::: "memory");
            if (tid == 128) st_release(flag, w.hi);
            return;
        }
        // Both consumers are past their last wgmma, and the producer loads
        // nothing into the last two stages read until `epi`: consumer c
        // stages its tile in the stage of load i - 2 + c.
        asm volatile("bar.sync 1, 256;\n" ::: "memory");
        if constexpr (HAND) {
            const u32 first = (i + R::STAGES - 2) % R::STAGES;
            stage_tile<DT, BN>(d, smem_raw + (base - smem_addr(smem_raw)) +
                                      ((first + consumer) % R::STAGES) * R::STAGE_BYTES);
            asm volatile("bar.sync 1, 256;\n" ::: "memory");
            if (tid == 128) hand_over(tile_m * BM, tile_n * BN, first);
            ++epilogues;
        } else {
            const u32 staged = ((i + R::STAGES - 2 + consumer) % R::STAGES) * R::STAGE_BYTES;
            store_tile<DT, BN>(C, d, smem_raw + (base - smem_addr(smem_raw)) + staged, 2 + consumer,
                               tile_m * BM + consumer * 64, tile_n * BN, m, n, ldc);
            asm volatile("bar.sync %0, 128;\n" ::"r"(2 + consumer) : "memory");
            if (t == 0) mbar_arrive(epi);
        }
    });
    // No more tiles, once store_staged has read the last epilogue's slot (it
    // has when that epilogue's `epi + 8` phase is complete): `epi + EPI_STG`
    // never runs two phases ahead of its waiter.
    if (HAND && tid == 128) {
        if (epilogues > 0) mbar_wait(epi + 8, (epilogues - 1) & 1);
        hand_over(NO_TILE, 0, 0);
    }
}

// Each block's tiles stored by its consumers, or handed over where every
// block has two whole tiles or more (see above). Only the 128x256 kernel
// hands over: the ladder picks it from m = 2048 on the goal shapes (the
// 128x192 one at m = 1024, with one or two tiles a block), and each copy
// of a kernel lengthens the module's NVRTC compile (docs/benchmarks.md,
// 4w).
template <int OP, int DT, int BN>
__device__ __forceinline__ void wgmma_entry(const TensorMap& ta, const TensorMap& tb, u16* C, float* ws,
                                            u32* flags, u32 m, u32 k, u32 n, u32 ldc) {
    if constexpr (BN == 256) {
        if (((m + BM - 1) / BM) * ((n + BN - 1) / BN) >= 2 * gridDim.x) {
            wgmma_gemm<OP, DT, BN, true>(ta, tb, C, ws, flags, m, k, n, ldc);
            return;
        }
    }
    wgmma_gemm<OP, DT, BN, false>(ta, tb, C, ws, flags, m, k, n, ldc);
}

// The entries: gemm_wgmma_<bn>_<op>_<dtype>(maps of A and B, C, workspace,
// flags, m, k, n, ldc). The workspace holds one BM x BN f32 partial per
// tail tile and the flags one u32 per tail tile, zero before the first
// launch (tiles % grid of each; see the schedule above).
#define ENTRY(bn, opname, OPV, dtname, DTV)                                                       \
    extern "C" __global__ void __launch_bounds__(THREADS, 1) gemm_wgmma_##bn##_##opname##_##dtname( \
        const __grid_constant__ TensorMap ta, const __grid_constant__ TensorMap tb, void* C,      \
        float* ws, u32* flags, u32 m, u32 k, u32 n, u32 ldc) {                                   \
        wgmma_entry<OPV, DTV, bn>(ta, tb, (u16*)C, ws, flags, m, k, n, ldc);                    \
    }

#define ALL_OPS(bn, dtname, DTV)     \
    ENTRY(bn, nn, OP_NN, dtname, DTV) \
    ENTRY(bn, tn, OP_TN, dtname, DTV) \
    ENTRY(bn, nt, OP_NT, dtname, DTV)

ALL_OPS(256, f16, DT_F16)
ALL_OPS(256, bf16, DT_BF16)
ALL_OPS(128, f16, DT_F16)
ALL_OPS(128, bf16, DT_BF16)
ALL_OPS(192, f16, DT_F16)
ALL_OPS(192, bf16, DT_BF16)

// ------------------------------------------------------------ the ladder
//
// One invariant family for every m: rungs of different tiles that give
// every output element the same k order, so choosing a rung by m keeps a
// row's bits the same for every batch.
//
// The order: k is cut into `chunks` contiguous runs of whole BK blocks
// (chunk c holds blocks [c P, (c + 1) P), P = ceil(blocks / chunks));
// each chunk's partial sum walks its blocks in ascending k16 wgmma steps
// from +0.0, exactly as wgmma_gemm walks all of k; the partials are folded
// in chunk order, ((p0 + p1) + p2) + ..., in f32, then rounded once. The
// host derives `chunks` from k and n alone (never from m or the device),
// so the order is a property of the problem family (op, dtype, k, n).
// With one chunk it is wgmma_gemm's order, bit for bit.
//
// The rungs differ only in tile and in who computes the partials:
// - ladder_64x64_split (decode sizes) and ladder_128x128_split (mid m):
//   one block per tile and chunk (grid z); each block stores its f32
//   partial in the workspace, and the last block of a tile to finish (an
//   atomic count, reset by that block for the next launch) folds all of
//   them in chunk order;
// - ladder_128x128_fold (large m), ladder_64x128_fold (m = 65..256,
//   twice the blocks) and ladder_64x32_fold (decode sizes: as many
//   blocks as the split rung has, without its fold): one block per tile
//   walks every chunk, folding each finished partial into a second
//   register set. The decode rung's stages hold two k blocks and the
//   narrow rung's four (one barrier handshake per eight or sixteen k16
//   steps); the blocks of a chunk that do not fill a stage are a stage of
//   their own.
// Below one tile of rows, A (K-major) is loaded as boxes of m rounded up
// to 8 rows rather than of the whole tile: the rows past them are never
// stored, and loading fewer rows than TMA would zero-fill is what makes
// m = 1 as fast as m = 64.
// Which block finishes last changes nothing: the fold reads the partials
// in chunk order whoever runs it.

// A stage holds KPS k blocks (the last of a chunk may hold fewer), each
// laid out as a one-block stage is: one barrier handshake per KPS blocks.
template <int TBM, int BN, int KPS>
struct LadderRing {
    static constexpr u32 A_BYTES = TBM * BK * 2;
    static constexpr u32 B_BYTES = BN * BK * 2;
    static constexpr u32 BLOCK_BYTES = A_BYTES + B_BYTES;
    static constexpr u32 STAGE_BYTES = KPS * BLOCK_BYTES;
    static constexpr u32 STAGES = RING_BYTES / STAGE_BYTES;
};

template <int OP, int DT, int TBM, int BN, bool GRID_CHUNKS, int KPS, int AW = 64>
__device__ __forceinline__ void ladder_gemm(const TensorMap& ta, const TensorMap& tb, u16* C,
                                            float* ws, u32* counters, u32 m, u32 k, u32 n,
                                            u32 ldc, u32 chunks) {
    static_assert(KPS == 1 || KPS == 2 || KPS == 4, "a stage holds one, two or four k blocks");
    static_assert(AW == 64 || (OP == OP_TN && TBM == 64), "narrow boxes: TN's A on 64-row tiles");
    static_assert(AW == 8 || AW == 16 || AW == 32 || AW == 64, "box widths: 8, 16, 32 or 64 m values");
    typedef LadderRing<TBM, BN, KPS> R;
    constexpr u32 CONSUMERS = TBM / 64;
    static_assert(CONSUMERS * STAGED_BYTES(BN) <= R::STAGES * R::STAGE_BYTES, "the epilogue is staged in the ring");
    extern __shared__ unsigned char smem_raw[];
    __shared__ u32 folds_here;
    const u32 base = (smem_addr(smem_raw) + 1023u) & ~1023u;
    const u32 bars = base + R::STAGES * R::STAGE_BYTES;
    const u32 tid = threadIdx.x;
    const u32 wg = tid / 128;

    u32 tile_m, tile_n;
    tile_of<TBM, BN>(blockIdx.x, m, n, tile_m, tile_n);
    const u32 kblocks = (k + BK - 1) / BK;
    const u32 per_chunk = (kblocks + chunks - 1) / chunks;
    // Rows of A per load (see above; TN's A: its box width, see desc_a):
    // the host's tensor map box agrees.
    const u32 a_rows = OP == OP_TN ? (AW < 64 ? AW : TBM) : m < TBM ? (m + 7) & ~7u : TBM;
    const u32 block_bytes = a_rows * BK * 2 + R::B_BYTES;
    // The k blocks of walk c: this block's chunk (the grid holds the
    // chunks), or chunk c. Producer and consumers cut them into the same
    // stages.
    const u32 walks = GRID_CHUNKS ? 1 : chunks;
    auto chunk_blocks = [&](u32 c, u32& lo, u32& hi) {
        const u32 at = GRID_CHUNKS ? blockIdx.z : c;
        lo = at * per_chunk < kblocks ? at * per_chunk : kblocks;
        hi = lo + per_chunk < kblocks ? lo + per_chunk : kblocks;
    };

    if (tid == 0) {
        for (u32 s = 0; s < R::STAGES; ++s) {
            mbar_init(bars + 8 * s, 1);
            mbar_init(bars + 8 * (R::STAGES + s), 4 * CONSUMERS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {
        if (CONSUMERS == 2) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (tid == 0) {
            u32 i = 0;
            for (u32 c = 0; c < walks; ++c) {
                u32 lo, hi;
                chunk_blocks(c, lo, hi);
                for (u32 it = lo; it < hi; it += KPS, ++i) {
                    const u32 blocks = hi - it < KPS ? hi - it : KPS;
                    const u32 s = i % R::STAGES;
                    mbar_wait(bars + 8 * (R::STAGES + s), ((i / R::STAGES) & 1) ^ 1);
                    const u32 full = bars + 8 * s;
                    mbar_expect_tx(full, blocks * block_bytes);
                    for (u32 q = 0; q < blocks; ++q) {
                        const u32 a_dst = base + s * R::STAGE_BYTES + q * R::BLOCK_BYTES;
                        load_stage<OP, TBM, BN>(ta, tb, a_dst, a_dst + R::A_BYTES, full,
                                                (int)((it + q) * BK), tile_m, tile_n);
                    }
                }
            }
        }
        return;
    }
    if (CONSUMERS == 2) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const u32 consumer = CONSUMERS == 1 ? 0u : uniform(wg - 1);
    const u32 lane = tid % 32;
    float d[BN / 2];
    // The fold of finished chunks (register-folding rung only).
    float acc[GRID_CHUNKS ? 1 : BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) d[i] = 0.0f;
    // Chunk by chunk (one chunk when the grid holds the chunks), so a
    // partial is read only once its wgmma groups have all retired. Whole
    // stages, then a chunk's odd last block alone: the k16 steps go onto d
    // in the same order either way.
    u32 i = 0;
    for (u32 c = 0; c < walks; ++c) {
        u32 lo, hi;
        chunk_blocks(c, lo, hi);
        const u32 whole = (hi - lo) / KPS;
        for (u32 w = 0; w < whole; ++w, ++i) {
            const u32 s = i % R::STAGES;
            mbar_wait(bars + 8 * s, (i / R::STAGES) & 1);
            const u32 a_stage = uniform(base + s * R::STAGE_BYTES);
            consume_stage<OP, DT, BN, KPS, AW>(d, a_stage, a_stage + R::A_BYTES, consumer,
                                               R::BLOCK_BYTES);
            if (i > 0 && lane == 0) {
                mbar_arrive(bars + 8 * (R::STAGES + (i - 1) % R::STAGES));
            }
        }
        // Kept out of the loop above: a choice of wgmma path inside the loop
        // that issues them cost 6-19% where measured (docs/benchmarks.md, 4h).
        const u32 tail = (hi - lo) % KPS;
        if (KPS > 1 && tail != 0) {
            const u32 s = i % R::STAGES;
            mbar_wait(bars + 8 * s, (i / R::STAGES) & 1);
            const u32 a_stage = uniform(base + s * R::STAGE_BYTES);
            // The producer loaded `tail` blocks into this stage; each count
            // is its own instantiation (KB is a template argument).
            if (tail == 1) {
                consume_stage<OP, DT, BN, 1, AW>(d, a_stage, a_stage + R::A_BYTES, consumer);
            } else if (tail == 2) {
                consume_stage<OP, DT, BN, (KPS > 2 ? 2 : 1), AW>(d, a_stage, a_stage + R::A_BYTES,
                                                                 consumer, R::BLOCK_BYTES);
            } else {
                consume_stage<OP, DT, BN, (KPS > 3 ? 3 : 1), AW>(d, a_stage, a_stage + R::A_BYTES,
                                                                 consumer, R::BLOCK_BYTES);
            }
            if (i > 0 && lane == 0) {
                mbar_arrive(bars + 8 * (R::STAGES + (i - 1) % R::STAGES));
            }
            ++i;
        }
        wgmma_wait<0>();
        if (!GRID_CHUNKS) {
            // Fold this chunk's partial; the next starts from +0.0.
#pragma unroll
            for (int j = 0; j < BN / 2; ++j) {
                const int at = GRID_CHUNKS ? 0 : j;
                acc[at] = c == 0 ? d[j] : __fadd_rn(acc[at], d[j]);
                d[j] = 0.0f;
            }
        }
    }
    if (!GRID_CHUNKS) {
#pragma unroll
        for (int j = 0; j < BN / 2; ++j) d[j] = acc[GRID_CHUNKS ? 0 : j];
    }

    // Fragment (row 16 w + l/4 [+8], columns 8 j + 2 (l%4) [+1]).
    const u32 warp = (tid % 128) / 32;
    const u32 row0 = tile_m * TBM + consumer * 64 + warp * 16 + lane / 4;
    const u32 col0 = tile_n * BN + 2 * (lane % 4);
    if (GRID_CHUNKS && chunks > 1) {
        // Store this chunk's partial, count the tile's finished chunks, and
        // let the last block fold them all in chunk order.
        const u64 plane = (u64)m * n;
        float* part = ws + (u64)blockIdx.z * plane;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            const u32 col = col0 + 8 * j;
            if (col < n) {
                if (row0 < m) {
                    *(float2*)(part + (u64)row0 * n + col) = make_float2(d[4 * j], d[4 * j + 1]);
                }
                if (row0 + 8 < m) {
                    *(float2*)(part + (u64)(row0 + 8) * n + col) =
                        make_float2(d[4 * j + 2], d[4 * j + 3]);
                }
            }
        }
        __threadfence();
        asm volatile("bar.sync 1, %0;\n" ::"n"(128 * CONSUMERS) : "memory");
        if (tid == 128) {
            folds_here = atomicAdd(counters + blockIdx.x, 1u) == chunks - 1;
        }
        asm volatile("bar.sync 1, %0;\n" ::"n"(128 * CONSUMERS) : "memory");
        if (!folds_here) return;
        __threadfence();
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            const u32 col = col0 + 8 * j;
#pragma unroll
            for (u32 h = 0; h < 2; ++h) {
                const u32 row = row0 + 8 * h;
                if (col < n && row < m) {
                    const u64 at = (u64)row * n + col;
                    float2 v = __ldcg((const float2*)(ws + at));
                    for (u32 c = 1; c < chunks; ++c) {
                        const float2 p = __ldcg((const float2*)(ws + c * plane + at));
                        v.x = __fadd_rn(v.x, p.x);
                        v.y = __fadd_rn(v.y, p.y);
                    }
                    d[4 * j + 2 * h] = v.x;
                    d[4 * j + 2 * h + 1] = v.y;
                }
            }
        }
        if (tid == 128) counters[blockIdx.x] = 0;
    }
    // Once every consumer is past its last wgmma, the ring is free for the
    // epilogue.
    asm volatile("bar.sync 1, %0;\n" ::"n"(128 * CONSUMERS) : "memory");
    store_tile<DT, BN>(C, d, smem_raw + (base - smem_addr(smem_raw)) + consumer * STAGED_BYTES(BN),
                       2 + consumer, tile_m * TBM + consumer * 64, tile_n * BN, m, n, ldc);
}

// The ladder's entries: gemm_ladder_<BM>x<BN>_<split|fold>_<op>_<dtype>(maps
// of A and B, C, workspace, counters, m, k, n, ldc, chunks). The workspace
// holds chunks x m x n f32 (dense, whatever ldc is) and the counters one u32
// per output tile, zero before the first launch; the folding rung reads
// neither.
//
// TN on a 64-row rung picks its A box width (desc_a) once, here: each
// width is its own instantiation, so the loop that issues the wgmma has
// compile-time descriptors (a choice inside it cost 6-19%,
// docs/benchmarks.md 4h). The host's tensor map box agrees
// (catalog/tensor_map.rs `tn_a_box_cols`).
template <int OP, int DT, int TBM, int BN, bool GRID_CHUNKS, int KPS>
__device__ __forceinline__ void ladder_entry(const TensorMap& ta, const TensorMap& tb, u16* C,
                                             float* ws, u32* counters, u32 m, u32 k, u32 n,
                                             u32 ldc, u32 chunks) {
    if constexpr (OP == OP_TN && TBM == 64) {
        if (m <= 8) {
            ladder_gemm<OP, DT, TBM, BN, GRID_CHUNKS, KPS, 8>(ta, tb, C, ws, counters, m, k, n, ldc, chunks);
            return;
        }
        if (m <= 16) {
            ladder_gemm<OP, DT, TBM, BN, GRID_CHUNKS, KPS, 16>(ta, tb, C, ws, counters, m, k, n, ldc, chunks);
            return;
        }
        if (m <= 32) {
            ladder_gemm<OP, DT, TBM, BN, GRID_CHUNKS, KPS, 32>(ta, tb, C, ws, counters, m, k, n, ldc, chunks);
            return;
        }
    }
    ladder_gemm<OP, DT, TBM, BN, GRID_CHUNKS, KPS>(ta, tb, C, ws, counters, m, k, n, ldc, chunks);
}

#define LADDER_ENTRY(tbm, bn, how, grid_chunks, kps, opname, OPV, dtname, DTV)                   \
    extern "C" __global__ void __launch_bounds__(128 * (1 + tbm / 64), 1)                        \
        gemm_ladder_##tbm##x##bn##_##how##_##opname##_##dtname(                                   \
            const __grid_constant__ TensorMap ta, const __grid_constant__ TensorMap tb, void* C,  \
            float* ws, u32* counters, u32 m, u32 k, u32 n, u32 ldc, u32 chunks) {                 \
        ladder_entry<OPV, DTV, tbm, bn, grid_chunks, kps>(ta, tb, (u16*)C, ws, counters, m, k, n, \
                                                          ldc, chunks);                           \
    }

#define LADDER_OPS(tbm, bn, how, grid_chunks, kps, dtname, DTV)            \
    LADDER_ENTRY(tbm, bn, how, grid_chunks, kps, nn, OP_NN, dtname, DTV)    \
    LADDER_ENTRY(tbm, bn, how, grid_chunks, kps, tn, OP_TN, dtname, DTV)    \
    LADDER_ENTRY(tbm, bn, how, grid_chunks, kps, nt, OP_NT, dtname, DTV)

// The fifth argument: k blocks per stage (KernelFamily::wgmma_k_blocks_per_stage
// agrees). Fewer handshakes per k16 step made the 64-row rungs faster:
// two blocks on the decode rung (four cost it 3-15% at m >= 64), four on
// the narrow rung (docs/benchmarks.md, 4o); the band rung's larger stages
// left fewer bytes in flight and it lost 5-10% L2-cold (4i and 4j).
LADDER_OPS(64, 64, split, true, 2, f16, DT_F16)
LADDER_OPS(64, 64, split, true, 2, bf16, DT_BF16)
LADDER_OPS(128, 128, split, true, 1, f16, DT_F16)
LADDER_OPS(128, 128, split, true, 1, bf16, DT_BF16)
LADDER_OPS(128, 128, fold, false, 1, f16, DT_F16)
LADDER_OPS(128, 128, fold, false, 1, bf16, DT_BF16)
LADDER_OPS(64, 128, fold, false, 1, f16, DT_F16)
LADDER_OPS(64, 128, fold, false, 1, bf16, DT_BF16)
LADDER_OPS(64, 32, fold, false, 4, f16, DT_F16)
LADDER_OPS(64, 32, fold, false, 4, bf16, DT_BF16)
