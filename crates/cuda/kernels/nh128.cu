// NH chunk hash (src/trace/fast.rs is the reference and the definition):
// for each 4096-byte chunk, the sum mod 2^128 over 16-byte pairs p of
// (w[2p] + k[2p]) * (w[2p+1] + k[2p+1]), words little-endian, the last pair
// zero-padded. One warp per chunk: lane l takes pairs l, l + 32, ...; the
// partial sums are added across the warp (mod 2^128: the order of the adds
// cannot change the result). `data` must be 16-byte aligned.

typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned char u8;

#define CHUNK 4096u

__device__ __forceinline__ void add128(u64& lo, u64& hi, u64 plo, u64 phi) {
    u64 s = lo + plo;
    hi += phi + (s < lo ? 1ull : 0ull);
    lo = s;
}

extern "C" __global__ void nh128_chunks(const u8* __restrict__ data, u64 len, u64 chunks,
                                        const u64* __restrict__ keys, u8* __restrict__ out) {
    u64 warp = ((u64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    u32 lane = threadIdx.x & 31u;
    if (warp >= chunks) return;  // the whole warp leaves together
    u64 start = warp * CHUNK;
    u64 rest = len - start;
    u32 clen = rest < CHUNK ? (u32)rest : CHUNK;
    u32 pairs = (clen + 15u) / 16u;
    const u8* p = data + start;
    u64 lo = 0, hi = 0;
#pragma unroll 8
    for (u32 q = lane; q < pairs; q += 32u) {
        u64 w0, w1;
        if (q * 16u + 16u <= clen) {
            ulonglong2 v = __ldg((const ulonglong2*)(p + (u64)q * 16u));
            w0 = v.x;
            w1 = v.y;
        } else {
            u8 b[16];
            for (u32 i = 0; i < 16u; ++i) b[i] = (q * 16u + i < clen) ? p[(u64)q * 16u + i] : 0;
            w0 = 0;
            w1 = 0;
            for (int i = 7; i >= 0; --i) {
                w0 = (w0 << 8) | b[i];
                w1 = (w1 << 8) | b[8 + i];
            }
        }
        u64 a = w0 + __ldg(keys + 2u * q);
        u64 c = w1 + __ldg(keys + 2u * q + 1u);
        add128(lo, hi, a * c, __umul64hi(a, c));
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        u64 olo = __shfl_down_sync(0xffffffffu, lo, off);
        u64 ohi = __shfl_down_sync(0xffffffffu, hi, off);
        add128(lo, hi, olo, ohi);
    }
    if (lane == 0) {
        u8* o = out + warp * 16u;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            o[i] = (u8)(lo >> (8 * i));
            o[8 + i] = (u8)(hi >> (8 * i));
        }
    }
}
