// gemm-audit GEMM kernels, compiled at run time with NVRTC.
//
// Every kernel reads f32/f16/bf16 storage, widens exactly to f32,
// accumulates in f32 and rounds the output to the storage type with
// round-to-nearest-even. Layout (row-major, C[m,n] = A'[m,k] * B'[k,n]):
//   nn: A m x k, B k x n;  tn: A stored k x m;  nt: B stored n x k.
// This is the layout of the CPU reference (src/backend/cpu/kernels.rs).
//
// No headers are included: storage is handled as raw bits and every
// arithmetic instruction whose rounding matters is written as inline PTX
// (fma.rn.f32, add.rn.f32, cvt.rn.*), so neither NVRTC's headers nor the
// compiler's contraction choices can change an output bit.
//
// Kernel families (symbol gemm_<family>_<op>_<dtype>):
//   scalar_fma     one thread per output, ascending fma chain from +0.0
//   tiled          64x64 block tile through shared memory, same chain
//   split_k_fixed  one thread per output; ceil(k/S) chunks, each an fma
//                  chain from +0.0, folded acc = p0; acc = acc + p1; ...
//   split_k_atomic the nondeterministic control: one block per (tile,
//                  chunk), partials added with red.global.add.f32 in
//                  arrival order; the last block of a tile rounds, stores
//                  and re-zeroes the scratch (one kernel node per launch)
//   mma_large      mma.sync m16n8k16, 128x128 block tile, 8 warps
//   mma_small      mma.sync m16n8k16, 64x64 block tile, 4 warps
// The two mma families walk k in the same ascending 16-wide steps with one
// mma per step per output fragment and no split-K, so every output element
// sees the same sequence of mma operations: they are bit-identical.

typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

#define OP_NN 0
#define OP_TN 1
#define OP_NT 2
#define DT_F32 0
#define DT_F16 1
#define DT_BF16 2

// ------------------------------------------------------------ arithmetic

__device__ __forceinline__ float fma_rn(float a, float b, float c) {
    float d;
    asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(d) : "f"(a), "f"(b), "f"(c));
    return d;
}

__device__ __forceinline__ float add_rn(float a, float b) {
    float d;
    asm("add.rn.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
    return d;
}

__device__ __forceinline__ float f16_to_f32(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ float bf16_to_f32(u16 h) {
    float f;
    u32 bits = ((u32)h) << 16;
    asm("mov.b32 %0, %1;" : "=f"(f) : "r"(bits));
    return f;
}

__device__ __forceinline__ u16 f32_to_f16(float f) {
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

__device__ __forceinline__ u16 f32_to_bf16(float f) {
    u16 h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

// Element e of a storage buffer, widened to f32 (exact).
template <int DT>
__device__ __forceinline__ float load(const void* p, u64 e) {
    if (DT == DT_F32) return ((const float*)p)[e];
    if (DT == DT_F16) return f16_to_f32(((const u16*)p)[e]);
    return bf16_to_f32(((const u16*)p)[e]);
}

// Raw 16-bit storage element (mma operands).
__device__ __forceinline__ u16 load_raw16(const void* p, u64 e) {
    return ((const u16*)p)[e];
}

// Rounds v to the storage type (RNE) and stores it at element e.
template <int DT>
__device__ __forceinline__ void store(void* p, u64 e, float v) {
    if (DT == DT_F32) {
        ((float*)p)[e] = v;
    } else if (DT == DT_F16) {
        ((u16*)p)[e] = f32_to_f16(v);
    } else {
        ((u16*)p)[e] = f32_to_bf16(v);
    }
}

// Storage index of the logical A'(i, kk) and B'(kk, j).
template <int OP>
__device__ __forceinline__ u64 a_index(u32 i, u32 kk, u32 m, u32 k) {
    return OP == OP_TN ? (u64)kk * m + i : (u64)i * k + kk;
}

template <int OP>
__device__ __forceinline__ u64 b_index(u32 kk, u32 j, u32 k, u32 n) {
    return OP == OP_NT ? (u64)j * k + kk : (u64)kk * n + j;
}

// The reference chain over lo..hi: acc = +0; acc = fma(A', B', acc).
template <int OP, int DT>
__device__ __forceinline__ float chain(const void* A, const void* B, u32 i, u32 j,
                                       u32 lo, u32 hi, u32 m, u32 k, u32 n) {
    float acc = 0.0f;
    for (u32 kk = lo; kk < hi; ++kk) {
        acc = fma_rn(load<DT>(A, a_index<OP>(i, kk, m, k)),
                     load<DT>(B, b_index<OP>(kk, j, k, n)), acc);
    }
    return acc;
}

// ------------------------------------------------------------ scalar FMA
// grid (ceil(n/16), ceil(m/16)), block (16, 16).

template <int OP, int DT>
__device__ __forceinline__ void scalar_fma(const void* A, const void* B, void* C,
                                           u32 m, u32 k, u32 n) {
    u32 j = blockIdx.x * 16 + threadIdx.x;
    u32 i = blockIdx.y * 16 + threadIdx.y;
    if (i >= m || j >= n) return;
    store<DT>(C, (u64)i * n + j, chain<OP, DT>(A, B, i, j, 0, k, m, k, n));
}

// ------------------------------------------------------------ tiled
// grid (ceil(n/64), ceil(m/64)), block (16, 16); each thread owns a 4x4
// set of outputs (stride 16) and runs the same ascending chain per output.

#define TILE 64
#define TILE_K 16

template <int OP, int DT>
__device__ __forceinline__ void tiled(const void* A, const void* B, void* C,
                                      u32 m, u32 k, u32 n) {
    __shared__ float As[TILE_K][TILE];
    __shared__ float Bs[TILE_K][TILE];
    const u32 tx = threadIdx.x, ty = threadIdx.y, tid = ty * 16 + tx;
    const u32 m0 = blockIdx.y * TILE, n0 = blockIdx.x * TILE;
    float acc[4][4];
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[r][c] = 0.0f;
    for (u32 k0 = 0; k0 < k; k0 += TILE_K) {
        // 64x16 of A' and 16x64 of B', four elements each per thread.
        for (u32 idx = tid; idx < TILE * TILE_K; idx += 256) {
            u32 kk = idx / TILE, r = idx % TILE;
            u32 gi = m0 + r, gk = k0 + kk, gj = n0 + r;
            As[kk][r] = (gi < m && gk < k) ? load<DT>(A, a_index<OP>(gi, gk, m, k)) : 0.0f;
            Bs[kk][r] = (gj < n && gk < k) ? load<DT>(B, b_index<OP>(gk, gj, k, n)) : 0.0f;
        }
        __syncthreads();
        u32 kmax = k - k0 < TILE_K ? k - k0 : TILE_K;
        for (u32 kk = 0; kk < kmax; ++kk) {
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                float a = As[kk][ty + 16 * r];
#pragma unroll
                for (int c = 0; c < 4; ++c) acc[r][c] = fma_rn(a, Bs[kk][tx + 16 * c], acc[r][c]);
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            u32 i = m0 + ty + 16 * r, j = n0 + tx + 16 * c;
            if (i < m && j < n) store<DT>(C, (u64)i * n + j, acc[r][c]);
        }
}

// ------------------------------------------------------------ split-K, fixed order
// grid (ceil(n/16), ceil(m/16)), block (16, 16).

template <int OP, int DT>
__device__ __forceinline__ void split_k_fixed(const void* A, const void* B, void* C,
                                              u32 m, u32 k, u32 n, u32 splits) {
    u32 j = blockIdx.x * 16 + threadIdx.x;
    u32 i = blockIdx.y * 16 + threadIdx.y;
    if (i >= m || j >= n) return;
    u32 chunk = (k + splits - 1) / splits;
    float acc = 0.0f;
    for (u32 s = 0; s < splits; ++s) {
        u64 lo64 = (u64)s * chunk;
        u32 lo = lo64 < k ? (u32)lo64 : k;
        u32 hi = (u64)lo + chunk < k ? lo + chunk : k;
        float part = chain<OP, DT>(A, B, i, j, lo, hi, m, k, n);
        acc = s == 0 ? part : add_rn(acc, part);
    }
    store<DT>(C, (u64)i * n + j, acc);
}

// ------------------------------------------------------------ split-K, atomic (control)
// grid (ceil(n/16), ceil(m/16), splits), block (16, 16). `scratch` (m*n f32)
// and `counters` (one per 16x16 tile) must be zero before the first launch;
// the last block of each tile leaves them zero again.

template <int OP, int DT>
__device__ __forceinline__ void split_k_atomic(const void* A, const void* B, void* C,
                                               float* scratch, u32* counters,
                                               u32 m, u32 k, u32 n, u32 splits) {
    __shared__ u32 last;
    u32 j = blockIdx.x * 16 + threadIdx.x;
    u32 i = blockIdx.y * 16 + threadIdx.y;
    u32 s = blockIdx.z;
    bool inside = i < m && j < n;
    u64 e = (u64)i * n + j;
    if (inside) {
        u32 chunk = (k + splits - 1) / splits;
        u64 lo64 = (u64)s * chunk;
        u32 lo = lo64 < k ? (u32)lo64 : k;
        u32 hi = (u64)lo + chunk < k ? lo + chunk : k;
        float part = chain<OP, DT>(A, B, i, j, lo, hi, m, k, n);
        asm volatile("red.global.add.f32 [%0], %1;" ::"l"(scratch + e), "f"(part) : "memory");
    }
    asm volatile("membar.gl;" ::: "memory");
    __syncthreads();
    u32* counter = counters + (blockIdx.y * gridDim.x + blockIdx.x);
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        u32 ticket;
        asm volatile("atom.global.add.u32 %0, [%1], 1;" : "=r"(ticket) : "l"(counter) : "memory");
        last = ticket == splits - 1 ? 1u : 0u;
    }
    __syncthreads();
    if (last) {
        asm volatile("membar.gl;" ::: "memory");
        if (inside) {
            float v;
            asm volatile("atom.global.exch.b32 %0, [%1], %2;" : "=f"(v) : "l"(scratch + e), "f"(0.0f) : "memory");
            store<DT>(C, e, v);
        }
        if (threadIdx.x == 0 && threadIdx.y == 0) *counter = 0u;
    }
}

// ------------------------------------------------------------ tensor cores
// mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32.
// Block tile BM x BN, k staged 32 at a time through shared memory (zero
// padded), warps arranged WARPS_M x WARPS_N. Fragment layouts are those of
// the PTX ISA for m16n8k16 (g = lane / 4, t = lane % 4):
//   A: {A[g][2t..2t+1]}, {A[g+8][2t..]}, {A[g][2t+8..]}, {A[g+8][2t+8..]}
//   B: {B[2t..2t+1][g]}, {B[2t+8..2t+9][g]}
//   C: c0,c1 = C[g][2t..2t+1], c2,c3 = C[g+8][2t..2t+1]

#define MMA_BK 32
#define MMA_PAD 8

template <int DT>
__device__ __forceinline__ void mma16816(float* c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    if (DT == DT_BF16) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
            "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
            "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
}

template <int OP, int DT, int BM, int BN, int WARPS_M, int WARPS_N>
__device__ __forceinline__ void mma_gemm(const void* A, const void* B, void* C,
                                         u32 m, u32 k, u32 n) {
    const int THREADS = 32 * WARPS_M * WARPS_N;
    const int WTM = BM / WARPS_M, WTN = BN / WARPS_N;
    const int MI = WTM / 16, NI = WTN / 8;
    __shared__ __align__(16) u16 As[BM][MMA_BK + MMA_PAD];  // m x k
    __shared__ __align__(16) u16 Bs[BN][MMA_BK + MMA_PAD];  // n x k (B' transposed)
    const u32 tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const u32 wm = warp / WARPS_N, wn = warp % WARPS_N;
    const u32 g = lane >> 2, t = lane & 3;
    const u32 m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    float acc[MI][NI][4];
#pragma unroll
    for (int a = 0; a < MI; ++a)
#pragma unroll
        for (int b = 0; b < NI; ++b)
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[a][b][c] = 0.0f;
    for (u32 k0 = 0; k0 < k; k0 += MMA_BK) {
        for (u32 idx = tid; idx < BM * MMA_BK; idx += THREADS) {
            u32 r = idx / MMA_BK, kk = idx % MMA_BK;
            u32 gi = m0 + r, gk = k0 + kk;
            As[r][kk] = (gi < m && gk < k) ? load_raw16(A, a_index<OP>(gi, gk, m, k)) : (u16)0;
        }
        for (u32 idx = tid; idx < BN * MMA_BK; idx += THREADS) {
            u32 kk = idx / BN, c = idx % BN;
            u32 gj = n0 + c, gk = k0 + kk;
            Bs[c][kk] = (gj < n && gk < k) ? load_raw16(B, b_index<OP>(gk, gj, k, n)) : (u16)0;
        }
        __syncthreads();
#pragma unroll
        for (int ks = 0; ks < MMA_BK / 16; ++ks) {
            const u32 kb = ks * 16 + 2 * t;
#pragma unroll
            for (int a = 0; a < MI; ++a) {
                const u32 r = wm * WTM + a * 16 + g;
                u32 a0 = *(const u32*)&As[r][kb];
                u32 a1 = *(const u32*)&As[r + 8][kb];
                u32 a2 = *(const u32*)&As[r][kb + 8];
                u32 a3 = *(const u32*)&As[r + 8][kb + 8];
#pragma unroll
                for (int b = 0; b < NI; ++b) {
                    const u32 c = wn * WTN + b * 8 + g;
                    u32 b0 = *(const u32*)&Bs[c][kb];
                    u32 b1 = *(const u32*)&Bs[c][kb + 8];
                    mma16816<DT>(acc[a][b], a0, a1, a2, a3, b0, b1);
                }
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int a = 0; a < MI; ++a)
#pragma unroll
        for (int b = 0; b < NI; ++b) {
            u32 r = m0 + wm * WTM + a * 16 + g;
            u32 c = n0 + wn * WTN + b * 8 + 2 * t;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                u32 rr = r + 8 * h;
                if (rr < m) {
                    if (c < n) store<DT>(C, (u64)rr * n + c, acc[a][b][2 * h]);
                    if (c + 1 < n) store<DT>(C, (u64)rr * n + c + 1, acc[a][b][2 * h + 1]);
                }
            }
        }
}

// ------------------------------------------------------------ entry points

#define ARGS const void* A, const void* B, void* C, u32 m, u32 k, u32 n

#define SIMT_ENTRIES(opname, OPV, dtname, DTV)                                                   \
    extern "C" __global__ void __launch_bounds__(256)                                            \
        gemm_scalar_fma_##opname##_##dtname(ARGS) { scalar_fma<OPV, DTV>(A, B, C, m, k, n); }     \
    extern "C" __global__ void __launch_bounds__(256)                                            \
        gemm_tiled_##opname##_##dtname(ARGS) { tiled<OPV, DTV>(A, B, C, m, k, n); }               \
    extern "C" __global__ void __launch_bounds__(256) gemm_split_k_fixed_##opname##_##dtname(    \
        ARGS, u32 splits) { split_k_fixed<OPV, DTV>(A, B, C, m, k, n, splits); }                  \
    extern "C" __global__ void __launch_bounds__(256) gemm_split_k_atomic_##opname##_##dtname(   \
        ARGS, float* scratch, u32* counters, u32 splits) {                                        \
        split_k_atomic<OPV, DTV>(A, B, C, scratch, counters, m, k, n, splits);                    \
    }

#define MMA_ENTRIES(opname, OPV, dtname, DTV)                                                    \
    extern "C" __global__ void __launch_bounds__(256)                                            \
        gemm_mma_large_##opname##_##dtname(ARGS) {                                                \
        mma_gemm<OPV, DTV, 128, 128, 2, 4>(A, B, C, m, k, n);                                     \
    }                                                                                             \
    extern "C" __global__ void __launch_bounds__(128)                                            \
        gemm_mma_small_##opname##_##dtname(ARGS) {                                                \
        mma_gemm<OPV, DTV, 64, 64, 2, 2>(A, B, C, m, k, n);                                       \
    }

#define ALL_OPS(MACRO, dtname, DTV) \
    MACRO(nn, OP_NN, dtname, DTV)   \
    MACRO(tn, OP_TN, dtname, DTV)   \
    MACRO(nt, OP_NT, dtname, DTV)

ALL_OPS(SIMT_ENTRIES, f32, DT_F32)
ALL_OPS(SIMT_ENTRIES, f16, DT_F16)
ALL_OPS(SIMT_ENTRIES, bf16, DT_BF16)
ALL_OPS(MMA_ENTRIES, f16, DT_F16)
ALL_OPS(MMA_ENTRIES, bf16, DT_BF16)
