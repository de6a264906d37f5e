//! How `cublaslt-invariant` picks its family configuration from timings
//! (`blas/lt_family.rs` times the candidates), and which dense problems no
//! family configuration serves. Pure logic, so unit-tested in every build.

use gemm_audit_model::kernels::element_size;
use gemm_audit_model::vocab::{DType, GemmOp};

/// How much worse than the best score (mean time relative to the fastest
/// at each m) the heuristic's earlier candidates may be and still be
/// chosen over it.
pub(crate) const CHOICE_MARGIN: f64 = 0.05;

/// Seconds of work one timing sample aims at (its launch count follows
/// from the problem's flops at about 600 TFLOP/s).
const SAMPLE_SECS: f64 = 2e-3;

/// The alignment, in bytes, a family asks of TN's m-contiguous A (its
/// rows are m elements): the fast Hopper kernels read it in 16-byte steps.
pub(crate) const TN_ALIGNMENT_BYTES: u64 = 16;

/// Why a dense problem is outside every family configuration, if it is:
/// TN at an m whose rows of A are not [`TN_ALIGNMENT_BYTES`]-aligned (a
/// multiple of 8 in bf16 and f16).
pub(crate) fn refusal(op: GemmOp, dtype: DType, m: u64) -> Option<String> {
    let size = element_size(dtype) as u64;
    let row = m * size;
    (op == GemmOp::Tn && !row.is_multiple_of(TN_ALIGNMENT_BYTES)).then(|| {
        format!(
            "cublaslt-invariant: TN at m = {m}: A is stored m-contiguous ({row}-byte rows) and the family's kernels read it in {TN_ALIGNMENT_BYTES}-byte steps, so dense TN needs m a multiple of {} (batch-invariant serves TN at any m through a padded leading dimension)",
            TN_ALIGNMENT_BYTES / size
        )
    })
}

/// Launches of one timing sample of an `m x k x n` problem.
pub(crate) fn launches_per_sample(m: u64, k: u64, n: u64) -> u32 {
    let secs = 2.0 * (m * k * n) as f64 / 6e14;
    (SAMPLE_SECS / secs).ceil().clamp(2.0, 64.0) as u32
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::INFINITY)
}

/// A finite value from random bits: read as bf16 its magnitude is
/// 2^-5..1 (exponent field 122..126), read as f16 1..2 (the same bits put
/// 15 in f16's exponent field); both keep the sign in bit 15.
pub(crate) fn half_bits(x: u64) -> u16 {
    let sign = ((x >> 63) as u16) << 15;
    let exp = 122 + (x >> 32) as u16 % 5;
    let mant = (x & 0x7f) as u16;
    sign | exp << 7 | mant
}

/// The chosen candidate's index for per-candidate times at each timed m
/// (rows: candidates in the heuristic's order; columns: batch sizes):
/// the earliest whose score (mean over m of its time over the fastest
/// time at that m) is within [`CHOICE_MARGIN`] of the best score. `None`
/// when there are no candidates.
pub(crate) fn choose(times: &[Vec<f64>]) -> Option<usize> {
    let scores = scores(times);
    let best = scores.iter().copied().fold(f64::INFINITY, f64::min);
    scores
        .iter()
        .position(|&s| s <= best * (1.0 + CHOICE_MARGIN))
}

/// Each candidate's score for per-candidate times at each timed m: the
/// mean over m of its time over the fastest candidate's time at that m
/// (1.0 = fastest everywhere).
pub(crate) fn scores(times: &[Vec<f64>]) -> Vec<f64> {
    let columns = times.first().map_or(0, Vec::len);
    let fastest: Vec<f64> = (0..columns)
        .map(|j| times.iter().map(|t| t[j]).fold(f64::INFINITY, f64::min))
        .collect();
    times
        .iter()
        .map(|t| t.iter().zip(&fastest).map(|(x, f)| x / f).sum::<f64>() / columns as f64)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_heuristics_first_stays_unless_another_is_clearly_faster() {
        // Within the margin: the earlier candidate wins.
        assert_eq!(choose(&[vec![1.02, 1.01], vec![1.0, 1.0]]), Some(0));
        // Just past the margin at both m: the later one.
        assert_eq!(choose(&[vec![1.07, 1.07], vec![1.0, 1.0]]), Some(1));
        // Clearly faster at one m, equal at the other: the later one.
        assert_eq!(choose(&[vec![1.2, 1.0], vec![1.0, 1.0]]), Some(1));
        // The earliest of the near-best, not the very best.
        assert_eq!(
            choose(&[vec![2.0, 2.0], vec![1.01, 1.01], vec![1.0, 1.0]]),
            Some(1)
        );
        assert_eq!(choose(&[vec![3.0, 1.0]]), Some(0));
        assert_eq!(choose(&[]), None);
    }

    #[test]
    fn timing_operands_are_finite_and_in_range() {
        let mut x = 1u64;
        for _ in 0..10_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let b = half_bits(x);
            let v = f32::from_bits(u32::from(b) << 16).abs();
            assert!((1.0 / 32.0..1.0).contains(&v), "{b:#06x} is {v} as bf16");
            assert_eq!((b >> 10) & 0x1f, 15, "{b:#06x} as f16");
        }
    }

    #[test]
    fn samples_last_about_two_milliseconds_within_bounds() {
        // 34.4 GFLOP at 600 TFLOP/s is 57 us: 35 launches make 2 ms.
        assert_eq!(launches_per_sample(1024, 4096, 4096), 35);
        // A large problem still takes two launches, a tiny one at most 64.
        assert_eq!(launches_per_sample(4096, 14336, 14336), 2);
        assert_eq!(launches_per_sample(1, 64, 64), 64);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(Vec::new()), f64::INFINITY);
    }

    #[test]
    fn dense_tn_needs_m_a_multiple_of_8() {
        for m in [1, 2, 4, 7, 9, 100] {
            assert!(refusal(GemmOp::Tn, DType::Bf16, m).is_some(), "m = {m}");
        }
        for m in [8, 48, 4096] {
            assert!(refusal(GemmOp::Tn, DType::F16, m).is_none(), "m = {m}");
        }
        assert!(refusal(GemmOp::Nn, DType::Bf16, 1).is_none());
        assert!(refusal(GemmOp::Nt, DType::Bf16, 3).is_none());
    }
}
