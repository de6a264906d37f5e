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

use crate::vocab::GemmOp;

use crate::kernels::Problem;

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
        // Only the runnable layouts reach a kernel (no CPU symbol serves
        // another), so an unrecorded one is never packed.
        let a_rows = match p.op {
            // A stored k x m: its transpose is A' row-major.
            GemmOp::Tn | GemmOp::Tt => Cow::Owned(transpose(a, p.k, p.m)),
            _ => Cow::Borrowed(a),
        };
        let b_cols = match p.op {
            GemmOp::Nt | GemmOp::Tt => Cow::Borrowed(b),
            // B stored k x n: its transpose holds the columns of B' contiguously.
            _ => Cow::Owned(transpose(b, p.k, p.n)),
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

#[cfg(test)]
#[path = "kernels_tests.rs"]
mod tests;
