// Seeded GEMM operands made on the device. The definition is
// `seeded_value` in crates/model/src/kernels/operands.rs; this kernel is
// the same integer hash and the same exact mapping, so its storage bytes
// equal the CPU's `to_storage_bytes(seeded_a / seeded_b)` bit for bit (a GPU
// test compares them for every dtype and layout).
//
// value(seed, row, col) = q * 2^-23 with q = (h >> 40) - 2^23 and
// h = splitmix64(splitmix64(splitmix64(seed) ^ row) ^ col); q is exact in
// f32 and the scale is a power of two, so the f32 value is exact; f16 and
// bf16 storage round it to nearest even (cvt.rn), like `half::from_f32`.
// No headers: conversions are spelled in PTX, as in gemm.cu.

typedef unsigned long long u64;
typedef long long i64;
typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;

#define DT_F32 0u
#define DT_F16 1u
#define DT_BF16 2u

__device__ __forceinline__ u64 splitmix64(u64 z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// Fills `out` (rows x cols elements of `dtype`) with the seeded matrix in
// row-major storage (element (r, c) at r * cols + c), or in transposed
// storage when `transposed` is set (at c * rows + r).
extern "C" __global__ void seed_operand(u8* __restrict__ out, u64 rows, u64 cols, u64 seed,
                                        u32 transposed, u32 dtype) {
    u64 len = rows * cols;
    u64 s = splitmix64(seed);
    for (u64 idx = (u64)blockIdx.x * blockDim.x + threadIdx.x; idx < len;
         idx += (u64)gridDim.x * blockDim.x) {
        u64 r, c;
        if (transposed) {
            c = idx / rows;
            r = idx - c * rows;
        } else {
            r = idx / cols;
            c = idx - r * cols;
        }
        u64 h = splitmix64(splitmix64(s ^ r) ^ c);
        i64 q = (i64)(h >> 40) - (1ll << 23);
        float v = (float)(int)q * 1.1920928955078125e-7f;  // exact: |q| <= 2^23, scale 2^-23
        if (dtype == DT_F32) {
            ((float*)out)[idx] = v;
        } else if (dtype == DT_F16) {
            u16 hv;
            asm("cvt.rn.f16.f32 %0, %1;" : "=h"(hv) : "f"(v));
            ((u16*)out)[idx] = hv;
        } else {
            u16 hv;
            asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(hv) : "f"(v));
            ((u16*)out)[idx] = hv;
        }
    }
}
