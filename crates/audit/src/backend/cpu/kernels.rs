//! CPU reference GEMM kernels.
//!
//! Every kernel accumulates in f32 over operands that were widened exactly from
//! their storage dtype. The bit patterns these kernels produce are what the
//! audit compares device results against, so the per-element summation order
//! is part of each kernel's contract and is spelled out on each function.
//!
//! Layout (row-major, `C[m,n] = A'[m,k] * B'[k,n]`):
//! - `Nn`: A stored `m x k` (`A'(i,kk) = a[i*k + kk]`), B stored `k x n` (`B'(kk,j) = b[kk*n + j]`).
//! - `Tn`: A stored `k x m` (`A'(i,kk) = a[kk*m + i]`), B as `Nn`.
//! - `Nt`: A as `Nn`, B stored `n x k` (`B'(kk,j) = b[j*k + kk]`).
//! - C is always `m x n` row-major.
//!
//! Internally every kernel first packs A' into contiguous rows and B' into
//! contiguous columns (a transposed copy where the storage layout is not already
//! that). Packing only moves values, so the per-element chain of operations, and
//! therefore every output bit, is independent of `op`.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU32, Ordering};

use half::{bf16, f16};

use crate::route::{DType, GemmOp};

/// Shape of one GEMM: `C[m,n] = A'[m,k] * B'[k,n]`, with the storage layout of
/// A and B chosen by `op`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Problem {
    /// Which operand (if any) is stored transposed.
    pub op: GemmOp,
    /// Rows of C (and of the logical A').
    pub m: usize,
    /// Reduction length.
    pub k: usize,
    /// Columns of C (and of the logical B').
    pub n: usize,
}

impl Problem {
    /// Number of elements of A in storage (`m * k` for every op).
    pub fn a_len(&self) -> usize {
        self.m * self.k
    }

    /// Number of elements of B in storage (`k * n` for every op).
    pub fn b_len(&self) -> usize {
        self.k * self.n
    }

    /// Number of elements of C (`m * n`).
    pub fn c_len(&self) -> usize {
        self.m * self.n
    }
}

/// Wrong slice lengths are a caller bug, never a data condition: fail loudly.
fn check_lengths(p: &Problem, a: &[f32], b: &[f32], c: &[f32]) {
    assert_eq!(
        a.len(),
        p.a_len(),
        "operand A has the wrong length for {p:?}"
    );
    assert_eq!(
        b.len(),
        p.b_len(),
        "operand B has the wrong length for {p:?}"
    );
    assert_eq!(
        c.len(),
        p.c_len(),
        "output C has the wrong length for {p:?}"
    );
}

/// Transpose a row-major `rows x cols` matrix into a row-major `cols x rows` one.
fn transpose(src: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut dst = vec![0.0f32; src.len()];
    for (r, row) in src.chunks_exact(cols.max(1)).take(rows).enumerate() {
        for (c, &v) in row.iter().enumerate() {
            dst[c * rows + r] = v;
        }
    }
    dst
}

/// A' and B' packed so that row `i` of A' and column `j` of B' are both
/// contiguous length-`k` slices: the k loop then walks memory linearly and
/// needs no per-iteration index arithmetic.
struct Packed<'a> {
    /// A' row-major, `m x k`.
    a_rows: Cow<'a, [f32]>,
    /// B' column-major (i.e. B'^T row-major), `n x k`.
    b_cols: Cow<'a, [f32]>,
    k: usize,
}

impl<'a> Packed<'a> {
    fn new(p: &Problem, a: &'a [f32], b: &'a [f32]) -> Self {
        let a_rows = match p.op {
            GemmOp::Nn | GemmOp::Nt => Cow::Borrowed(a),
            // A stored k x m: its transpose is A' row-major.
            GemmOp::Tn => Cow::Owned(transpose(a, p.k, p.m)),
        };
        let b_cols = match p.op {
            // B stored k x n: its transpose holds the columns of B' contiguously.
            GemmOp::Nn | GemmOp::Tn => Cow::Owned(transpose(b, p.k, p.n)),
            GemmOp::Nt => Cow::Borrowed(b),
        };
        Packed {
            a_rows,
            b_cols,
            k: p.k,
        }
    }

    fn a_row(&self, i: usize) -> &[f32] {
        &self.a_rows[i * self.k..(i + 1) * self.k]
    }

    fn b_col(&self, j: usize) -> &[f32] {
        &self.b_cols[j * self.k..(j + 1) * self.k]
    }
}

/// The reference chain: `acc = 0; acc = a[kk].mul_add(b[kk], acc)` for
/// ascending `kk`. Every kernel funnels through this (or `dot4`, which is the
/// same chain four times) so they cannot disagree about the order.
#[inline]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = 0.0f32;
    for (&x, &y) in a.iter().zip(b) {
        acc = x.mul_add(y, acc);
    }
    acc
}

/// Four independent copies of the `dot` chain sharing one A' row. Same
/// per-element order as `dot`; interleaving only exposes instruction-level
/// parallelism, since each chain is latency bound on its own.
#[inline]
fn dot4(a: &[f32], b0: &[f32], b1: &[f32], b2: &[f32], b3: &[f32]) -> [f32; 4] {
    let len = a.len();
    let (b0, b1, b2, b3) = (&b0[..len], &b1[..len], &b2[..len], &b3[..len]);
    let (mut s0, mut s1, mut s2, mut s3) = (0.0f32, 0.0f32, 0.0f32, 0.0f32);
    for kk in 0..len {
        let x = a[kk];
        s0 = x.mul_add(b0[kk], s0);
        s1 = x.mul_add(b1[kk], s1);
        s2 = x.mul_add(b2[kk], s2);
        s3 = x.mul_add(b3[kk], s3);
    }
    [s0, s1, s2, s3]
}

/// Fill `out` (the segment of row `i` of C starting at column `j0`) with the
/// scalar_fma chain over the k range `lo..hi`.
fn fill_segment(pk: &Packed<'_>, i: usize, j0: usize, lo: usize, hi: usize, out: &mut [f32]) {
    let ar = &pk.a_row(i)[lo..hi];
    let col = |j: usize| &pk.b_col(j)[lo..hi];
    let mut quads = out.chunks_exact_mut(4);
    let mut j = j0;
    for q in &mut quads {
        q.copy_from_slice(&dot4(ar, col(j), col(j + 1), col(j + 2), col(j + 3)));
        j += 4;
    }
    for v in quads.into_remainder() {
        *v = dot(ar, col(j));
        j += 1;
    }
}

/// One tile of C: a list of row segments `(row, first column, values)`.
/// Holding disjoint `&mut` segments lets tiles go to threads without copying
/// results back and without unsafe code.
type Tile<'c> = Vec<(usize, usize, &'c mut [f32])>;

/// Split C into `tile_m x tile_n` tiles, deal them round-robin to `workers`
/// threads and run `kernel(row, col0, segment)` on every row segment. The
/// kernel alone decides the numbers, so the tiling and thread count can never
/// change a bit of the output.
fn par_tiles<F>(
    c: &mut [f32],
    m: usize,
    n: usize,
    tile_m: usize,
    tile_n: usize,
    workers: usize,
    kernel: F,
) where
    F: Fn(usize, usize, &mut [f32]) + Sync,
{
    if m == 0 || n == 0 {
        return;
    }
    let (tile_m, tile_n) = (tile_m.max(1), tile_n.max(1));
    let tiles_n = n.div_ceil(tile_n);
    let tiles_total = m.div_ceil(tile_m) * tiles_n;
    let mut tiles: Vec<Tile<'_>> = (0..tiles_total).map(|_| Vec::new()).collect();
    for (i, row) in c.chunks_exact_mut(n).take(m).enumerate() {
        for (tj, seg) in row.chunks_mut(tile_n).enumerate() {
            tiles[(i / tile_m) * tiles_n + tj].push((i, tj * tile_n, seg));
        }
    }
    let workers = workers.clamp(1, tiles_total);
    let run = |tiles: Vec<Tile<'_>>| {
        for tile in tiles {
            for (i, j0, seg) in tile {
                kernel(i, j0, seg);
            }
        }
    };
    if workers == 1 {
        run(tiles);
        return;
    }
    let mut per_worker: Vec<Vec<Tile<'_>>> = (0..workers).map(|_| Vec::new()).collect();
    for (t, tile) in tiles.into_iter().enumerate() {
        per_worker[t % workers].push(tile);
    }
    std::thread::scope(|s| {
        for share in per_worker {
            s.spawn(|| run(share));
        }
    });
}

/// Threads to use where the caller did not choose: the machine's parallelism.
fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |w| w.get())
}

/// Scalar FMA reference: each output is an ascending-k chain of `f32::mul_add`
/// starting from `0.0f32`:
/// `acc = 0; for kk in 0..k { acc = A'(i,kk).mul_add(B'(kk,j), acc) }`.
///
/// This is THE numeric reference (a device kernel using `__fmaf_rn` in the same
/// order matches it bit for bit). `k == 0` gives `0.0` everywhere.
pub fn scalar_fma(p: &Problem, a: &[f32], b: &[f32], c: &mut [f32]) {
    check_lengths(p, a, b, c);
    let pk = Packed::new(p, a, b);
    // One full row per segment, single thread: the plainest possible schedule.
    par_tiles(c, p.m, p.n, 1, p.n, 1, |i, j0, seg| {
        fill_segment(&pk, i, j0, 0, p.k, seg)
    });
}

/// Tiled/parallel GEMM: C is split into `tile_m x tile_n` tiles, dealt to
/// `workers` scoped threads, and every element is computed with exactly the
/// `scalar_fma` chain, so the result is bit-identical to `scalar_fma`.
///
/// Exists to show that work distribution alone does not move bits.
/// `tile_m`, `tile_n` or `workers` of 0 are treated as 1.
pub fn tiled(
    p: &Problem,
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    tile_m: usize,
    tile_n: usize,
    workers: usize,
) {
    check_lengths(p, a, b, c);
    let pk = Packed::new(p, a, b);
    par_tiles(c, p.m, p.n, tile_m, tile_n, workers, |i, j0, seg| {
        fill_segment(&pk, i, j0, 0, p.k, seg)
    });
}

/// The k range of chunk `s` when k is cut into `splits` contiguous chunks of
/// `ceil(k / splits)`; trailing chunks may be shorter or empty.
fn chunk_range(k: usize, splits: usize, s: usize) -> (usize, usize) {
    let chunk = k.div_ceil(splits);
    let lo = (s * chunk).min(k);
    let hi = (lo + chunk).min(k);
    (lo, hi)
}

/// Tile width used by `split_k_fixed` (bounds its per-segment scratch).
const SPLIT_TILE_N: usize = 64;

/// Fixed-order split-K: k is cut into `splits` contiguous chunks of
/// `ceil(k / splits)` (the last may be shorter or empty); partial `s` is the
/// ascending `mul_add` chain from `0.0` over chunk `s`; partials are folded in
/// fixed order with plain f32 adds: `acc = partial_0; acc = acc + partial_1; ...`.
///
/// Deterministic run to run, but NOT equal to `scalar_fma` in general (the
/// rounding points differ). Parallelism is over output tiles, each element's
/// partials and fold staying in one thread, so the order is fixed.
/// `splits == 0` is treated as 1; `splits > k` just yields empty chunks
/// (partial `0.0`).
pub fn split_k_fixed(p: &Problem, a: &[f32], b: &[f32], c: &mut [f32], splits: usize) {
    check_lengths(p, a, b, c);
    let splits = splits.max(1);
    let pk = Packed::new(p, a, b);
    par_tiles(
        c,
        p.m,
        p.n,
        4,
        SPLIT_TILE_N,
        default_workers(),
        |i, j0, seg| {
            // Segments are at most SPLIT_TILE_N wide, so the partial fits on the stack.
            let mut scratch = [0.0f32; SPLIT_TILE_N];
            let part = &mut scratch[..seg.len()];
            for s in 0..splits {
                let (lo, hi) = chunk_range(p.k, splits, s);
                if s == 0 {
                    fill_segment(&pk, i, j0, lo, hi, seg);
                } else {
                    fill_segment(&pk, i, j0, lo, hi, part);
                    for (acc, &x) in seg.iter_mut().zip(part.iter()) {
                        *acc += x;
                    }
                }
            }
        },
    );
}

/// Add `x` into an f32 stored as bits in `cell`, the way CUDA `atomicAdd` does
/// for floats: read, add, compare-exchange, retry on interference.
fn atomic_add_f32(cell: &AtomicU32, x: f32) {
    let mut cur = cell.load(Ordering::Relaxed);
    loop {
        let new = (f32::from_bits(cur) + x).to_bits();
        match cell.compare_exchange_weak(cur, new, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return,
            Err(actual) => cur = actual,
        }
    }
}

/// How many elements a split-k atomic thread handles before yielding, so that
/// the scheduler reshuffles threads mid-run.
const ATOMIC_YIELD_EVERY: usize = 256;

/// Nondeterministic control: `splits` threads (one per non-empty k chunk, as
/// in `split_k_fixed`) each compute their chunk's partial for every element and
/// add it into a shared per-element `AtomicU32` (f32 bits, starting at `0.0`)
/// with a compare-exchange loop, in whatever order the threads get there, like
/// CUDA `atomicAdd` split-K.
///
/// The drift is genuine thread-timing nondeterminism, not a seeded shuffle:
/// each thread starts at a different rotation through the output elements and
/// yields every few hundred elements so arrival orders interleave. The result
/// is close to `scalar_fma` but its bits may change from run to run; the audit
/// relies on that to prove it can see drift. `splits == 0` is treated as 1.
pub fn split_k_atomic(p: &Problem, a: &[f32], b: &[f32], c: &mut [f32], splits: usize) {
    check_lengths(p, a, b, c);
    let splits = splits.max(1);
    let total = p.c_len();
    if total == 0 {
        return;
    }
    let pk = Packed::new(p, a, b);
    let acc: Vec<AtomicU32> = (0..total)
        .map(|_| AtomicU32::new(0.0f32.to_bits()))
        .collect();
    let chunks: Vec<(usize, usize)> = (0..splits)
        .map(|s| chunk_range(p.k, splits, s))
        .filter(|&(lo, hi)| hi > lo)
        .collect();
    let threads = chunks.len();
    let n = p.n;
    std::thread::scope(|scope| {
        for (t, &(lo, hi)) in chunks.iter().enumerate() {
            let (pk, acc) = (&pk, &acc);
            scope.spawn(move || {
                // Stagger the starting points so threads meet each element at
                // different, timing-dependent moments.
                let start = t * total / threads;
                for step in 0..total {
                    let e = (start + step) % total;
                    let (i, j) = (e / n, e % n);
                    let part = dot(&pk.a_row(i)[lo..hi], &pk.b_col(j)[lo..hi]);
                    atomic_add_f32(&acc[e], part);
                    if step % ATOMIC_YIELD_EVERY == ATOMIC_YIELD_EVERY - 1 {
                        std::thread::yield_now();
                    }
                }
            });
        }
    });
    for (out, cell) in c.iter_mut().zip(&acc) {
        *out = f32::from_bits(cell.load(Ordering::Relaxed));
    }
}

/// Bytes per stored element of `dtype`.
pub fn element_size(dtype: DType) -> usize {
    match dtype {
        DType::F32 => 4,
        DType::F16 | DType::Bf16 => 2,
    }
}

/// Round f32 values to the storage dtype with round-to-nearest-even
/// (`half::{f16, bf16}::from_f32` are RNE) and return little-endian storage
/// bytes. F32 is stored as is.
pub fn to_storage_bytes(dtype: DType, values: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() * element_size(dtype));
    match dtype {
        DType::F32 => values
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        DType::F16 => values
            .iter()
            .for_each(|&v| out.extend_from_slice(&f16::from_f32(v).to_bits().to_le_bytes())),
        DType::Bf16 => values
            .iter()
            .for_each(|&v| out.extend_from_slice(&bf16::from_f32(v).to_bits().to_le_bytes())),
    }
    out
}

/// Inverse of `to_storage_bytes`: exact widening of little-endian storage
/// bytes to f32. `None` if `bytes.len()` is not a multiple of the element size.
pub fn from_storage_bytes(dtype: DType, bytes: &[u8]) -> Option<Vec<f32>> {
    if bytes.len() % element_size(dtype) != 0 {
        return None;
    }
    let values = match dtype {
        DType::F32 => bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        DType::F16 => bytes
            .chunks_exact(2)
            .map(|b| f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32())
            .collect(),
        DType::Bf16 => bytes
            .chunks_exact(2)
            .map(|b| bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32())
            .collect(),
    };
    Some(values)
}

/// Round one value to `dtype` (RNE) and widen it back.
fn quantize_one(dtype: DType, v: f32) -> f32 {
    match dtype {
        DType::F32 => v,
        DType::F16 => f16::from_f32(v).to_f32(),
        DType::Bf16 => bf16::from_f32(v).to_f32(),
    }
}

/// Round each value to `dtype` and back, in place: exactly what storing then
/// loading does, so reference inputs match what a device kernel reads.
pub fn quantize(dtype: DType, values: &mut [f32]) {
    if dtype != DType::F32 {
        values.iter_mut().for_each(|v| *v = quantize_one(dtype, *v));
    }
}

/// splitmix64 finaliser: a cheap, well-mixed 64-bit bijection.
fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Bits of the hash kept for a seeded value. 24 bits gives multiples of 2^-23
/// in [-1, 1), a full f32 significand: f32 products are then inexact, so an
/// FMA chain and a separate multiply-then-add give different bits and the
/// audit can tell them apart. For f16/bf16 the value is rounded (RNE) to the
/// dtype, whose products are exact in f32 anyway.
const SEEDED_BITS: u32 = 24;

/// Deterministic seeded value of logical element `(row, col)` of a matrix.
///
/// A splitmix64-style hash of `(seed, row, col)` is mapped to a multiple of
/// 2^-23 in [-1, 1), then quantized to `dtype` (f16/bf16 rounding can reach
/// exactly ±1). The value does not depend on the matrix's dimensions, so the
/// first `r` rows of an M=64 operand equal an M=r operand, which the
/// batch-invariance audits need.
pub fn seeded_value(seed: u64, row: u64, col: u64, dtype: DType) -> f32 {
    let h = splitmix64(splitmix64(splitmix64(seed) ^ row) ^ col);
    let half_range = 1i64 << (SEEDED_BITS - 1);
    let q = (h >> (64 - SEEDED_BITS)) as i64 - half_range;
    quantize_one(dtype, q as f32 / half_range as f32)
}

/// Operand A (logical `m x k`) in its storage layout for `p.op`, with
/// `A'(i,kk) = seeded_value(seed, i, kk, dtype)`.
pub fn seeded_a(p: &Problem, dtype: DType, seed: u64) -> Vec<f32> {
    let mut a = vec![0.0f32; p.a_len()];
    for i in 0..p.m {
        for kk in 0..p.k {
            let idx = match p.op {
                GemmOp::Nn | GemmOp::Nt => i * p.k + kk,
                GemmOp::Tn => kk * p.m + i,
            };
            a[idx] = seeded_value(seed, i as u64, kk as u64, dtype);
        }
    }
    a
}

/// Operand B (logical `k x n`) in its storage layout for `p.op`, with
/// `B'(kk,j) = seeded_value(seed, kk, j, dtype)`.
pub fn seeded_b(p: &Problem, dtype: DType, seed: u64) -> Vec<f32> {
    let mut b = vec![0.0f32; p.b_len()];
    for kk in 0..p.k {
        for j in 0..p.n {
            let idx = match p.op {
                GemmOp::Nn | GemmOp::Tn => kk * p.n + j,
                GemmOp::Nt => j * p.k + kk,
            };
            b[idx] = seeded_value(seed, kk as u64, j as u64, dtype);
        }
    }
    b
}

#[cfg(test)]
#[path = "kernels_tests.rs"]
mod tests;
