// gemm-audit output fingerprints: plain SHA-256 (FIPS 180-4) of each
// `chunk_bytes` chunk of a device buffer (the last chunk may be shorter),
// one thread per chunk, written as 32 big-endian digest bytes per chunk.
// The host frames the chunk digests into the output fingerprint
// (OutputFingerprint::from_chunk_digests), so equal bytes give the same
// fingerprint on the device and on the host.

typedef unsigned char u8;
typedef unsigned int u32;
typedef unsigned long long u64;

__constant__ u32 K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

__device__ __forceinline__ u32 rotr(u32 x, u32 n) { return (x >> n) | (x << (32 - n)); }

__device__ __forceinline__ u32 bswap(u32 x) {
    u32 y;
    asm("prmt.b32 %0, %1, 0, 0x0123;" : "=r"(y) : "r"(x));
    return y;
}

__device__ void compress(u32* h, u32* w) {
    // w[0..16] holds the block as big-endian words; the schedule is rolled in place.
    u32 a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
#pragma unroll
    for (int i = 0; i < 64; ++i) {
        u32 wi;
        if (i < 16) {
            wi = w[i];
        } else {
            u32 w15 = w[(i - 15) & 15], w2 = w[(i - 2) & 15];
            u32 s0 = rotr(w15, 7) ^ rotr(w15, 18) ^ (w15 >> 3);
            u32 s1 = rotr(w2, 17) ^ rotr(w2, 19) ^ (w2 >> 10);
            wi = w[i & 15] + s0 + w[(i - 7) & 15] + s1;
            w[i & 15] = wi;
        }
        u32 S1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
        u32 ch = (e & f) ^ (~e & g);
        u32 t1 = hh + S1 + ch + K256[i] + wi;
        u32 S0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
        u32 mj = (a & b) ^ (a & c) ^ (b & c);
        u32 t2 = S0 + mj;
        hh = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d;
    h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
}

// The SHA-256 of the `clen` bytes at `p` (4-byte aligned), written to `o`.
__device__ void hash_chunk(const u8* p, u32 clen, u8* o) {
    u32 h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    u32 w[16];
    u32 full = clen / 64;
    for (u32 blk = 0; blk < full; ++blk) {
        const u32* q = (const u32*)(p + (u64)blk * 64);
#pragma unroll
        for (int i = 0; i < 16; ++i) w[i] = bswap(q[i]);
        compress(h, w);
    }
    // Tail: remaining bytes, 0x80, zeros, 64-bit big-endian bit length.
    u32 r = clen - full * 64;
    const u8* tail = p + (u64)full * 64;
    u64 bits = (u64)clen * 8;
    u32 blocks = r >= 56 ? 2 : 1;
    for (u32 blk = 0; blk < blocks; ++blk) {
        for (int i = 0; i < 16; ++i) {
            u32 word = 0;
            for (int b = 0; b < 4; ++b) {
                u32 pos = blk * 64 + i * 4 + b;
                u32 byte;
                if (pos < r) {
                    byte = tail[pos];
                } else if (pos == r) {
                    byte = 0x80;
                } else if (blk == blocks - 1 && i * 4 + b >= 56) {
                    byte = (u32)(bits >> (8 * (63 - (i * 4 + b)))) & 0xff;
                } else {
                    byte = 0;
                }
                word = (word << 8) | byte;
            }
            w[i] = word;
        }
        compress(h, w);
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        o[4 * i + 0] = (u8)(h[i] >> 24);
        o[4 * i + 1] = (u8)(h[i] >> 16);
        o[4 * i + 2] = (u8)(h[i] >> 8);
        o[4 * i + 3] = (u8)h[i];
    }
}

// `data` must be 4-byte aligned and `chunk_bytes` a multiple of 64.
extern "C" __global__ void sha256_chunks(const u8* data, u64 len, u32 chunk_bytes, u64 chunks,
                                         u8* out) {
    u64 c = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= chunks) return;
    u64 start = c * chunk_bytes;
    u64 rest = len - start;
    hash_chunk(data + start, rest < chunk_bytes ? (u32)rest : chunk_bytes, out + c * 32);
}

// The chunks of `buffers` buffers in one launch, each hashed as
// sha256_chunks hashes it alone. `table` holds the buffers' addresses
// (4-byte aligned), then their lengths, then the launch-wide index of each
// one's first chunk (ascending from 0), each `buffers` u64s; `chunks` is
// the total. One launch keeps every chunk in flight at once: a chunk is
// hashed serially by one thread, so outputs hashed one launch at a time
// wait on each other.
extern "C" __global__ void sha256_chunks_many(const u64* table, u32 buffers, u32 chunk_bytes,
                                              u64 chunks, u8* out) {
    u64 c = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= chunks) return;
    const u64* addrs = table;
    const u64* lens = table + buffers;
    const u64* firsts = table + 2 * (u64)buffers;
    // The last buffer whose first chunk is at or before c (an empty buffer
    // shares its first index with the next, which wins).
    u32 lo = 0, hi = buffers - 1;
    while (lo < hi) {
        u32 mid = (lo + hi + 1) / 2;
        if (firsts[mid] <= c) lo = mid; else hi = mid - 1;
    }
    u64 start = (c - firsts[lo]) * chunk_bytes;
    u64 rest = lens[lo] - start;
    hash_chunk((const u8*)addrs[lo] + start, rest < chunk_bytes ? (u32)rest : chunk_bytes,
               out + c * 32);
}
