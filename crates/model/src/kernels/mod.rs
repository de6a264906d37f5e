//! The kernel facts every backend must agree on, in one place: how a
//! launch's inputs are seeded and stored (`seeded_inputs`, `to_storage_bytes`), the shape-based
//! dispatcher's thresholds, the arguments digest of a built-in kernel, the
//! limits on a GEMM, what a workload asks of a backend ([`GemmSpec`],
//! [`RouteChoice`]) and how a timed run reports. The CPU reference
//! and the CUDA backend both read these, so a fingerprint recorded on one
//! is comparable with the other's, and both pick the same contract for the
//! same shape.

mod family;
mod operands;
mod spec;

use crate::digest::{Digest, DigestWriter, FieldValue};
use crate::route::{GemmShape, GemmStrides};
use crate::vocab::DType;

pub use family::{
    FamilyParseError, KernelFamily, LADDER_MAX_CHUNKS, LADDER_MIN_CHUNK_BLOCKS,
    LADDER_TARGET_BLOCKS, LADDER_TILE_N, RouteFamilyError, SplitCountOutOfRange, check_splits,
    ladder_chunks,
};
pub use operands::{
    OPERANDS_SOURCE, Problem, element_size, from_storage_bytes, quantize, seeded_a, seeded_b,
    seeded_value, to_storage_bytes,
};
pub use spec::{
    GemmSpec, LADDER_DECODE_MAX_M, LADDER_MID_MAX_M, MAX_ELEMENTS, MAX_SPLITS, RouteChoice,
    RouteParseError, TimedOutput, TimingClock, ordinals_in_words,
};

/// B's seed is the launch seed plus this, so A and B differ.
pub const B_SEED_OFFSET: u64 = 0x9e37_79b9_7f4a_7c15;

/// A and B of a launch seeded by `seed`, as f32 values already rounded to
/// `dtype` (A from `seed`, B from `seed + B_SEED_OFFSET`).
pub fn seeded_inputs(p: &Problem, dtype: DType, seed: u64) -> (Vec<f32>, Vec<f32>) {
    (
        seeded_a(p, dtype, seed),
        seeded_b(p, dtype, seed.wrapping_add(B_SEED_OFFSET)),
    )
}

/// Revision of the dispatchers' thresholds (the tuning table: the
/// split-K thresholds below and [`DISPATCH_MMA_LARGE_MIN_M`]), in every
/// built-in route.
pub const TUNING_TABLE_REVISION: u32 = 1;

/// With tensor cores permitted, the CUDA dispatcher serves halves with the
/// large mma tile family from this m on, the small one below it. Both
/// families are bit-identical, so this threshold never changes an output bit.
pub const DISPATCH_MMA_LARGE_MIN_M: u64 = 128;

/// The policy dispatcher picks fixed split-K for m at most this...
pub const DISPATCH_SPLIT_K_MAX_M: u64 = 16;
/// ...when k is at least this...
pub const DISPATCH_SPLIT_K_MIN_K: u64 = 256;
/// ...with this many splits.
pub const DISPATCH_SPLITS: u32 = 4;

/// Whether the policy dispatcher picks fixed split-K for `m` x `k` when the
/// policy permits split-K for the dtype (`split_ok`): the same answer on
/// every backend, so both serve a shape under the same contract.
pub fn dispatch_split_k(m: u64, k: u64, split_ok: bool) -> bool {
    split_ok && m <= DISPATCH_SPLIT_K_MAX_M && k >= DISPATCH_SPLIT_K_MIN_K
}

/// The arguments digest of a built-in GEMM kernel launch: the symbol, the
/// problem, the leading dimensions, the split count and `alpha = 1`,
/// `beta = 0`, framed under the backend's `domain`
/// (`gemm-audit/cpu-arguments/v1`, `gemm-audit/cuda-arguments/v1`). One
/// framing for every backend, so the same launch digests the same fields.
pub fn gemm_arguments_digest(
    domain: &str,
    symbol: &str,
    shape: GemmShape,
    strides: GemmStrides,
    splits: u32,
) -> Digest {
    let mut w = DigestWriter::new(domain);
    w.field("symbol", FieldValue::Str(symbol));
    for (tag, v) in [
        ("m", shape.m),
        ("k", shape.k),
        ("n", shape.n),
        ("lda", strides.lda),
        ("ldb", strides.ldb),
        ("ldc", strides.ldc),
    ] {
        w.field(tag, FieldValue::U64(v));
    }
    w.field("splits", FieldValue::U32(splits));
    w.field("alpha", FieldValue::Str("1"));
    w.field("beta", FieldValue::Str("0"));
    w.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_k_thresholds() {
        assert!(dispatch_split_k(1, 256, true));
        assert!(dispatch_split_k(16, 4096, true));
        assert!(!dispatch_split_k(17, 4096, true));
        assert!(!dispatch_split_k(1, 255, true));
        assert!(!dispatch_split_k(1, 4096, false));
    }
}
