//! Pairing GEMMs that have no op identity by kernel sequence.
//!
//! A profile of CUDA-graph replays records no op, shape or dtype for the
//! replayed kernels: each GEMM kernel becomes a GEMM of its region
//! (`cudaGraphLaunch in step#0`, op and dtype `unrecorded`), so no name
//! pairs it with the same GEMM of an eager profile. After the routes are
//! paired by name, if one side's unpaired routes are all such region GEMMs
//! (their observation says a region and no recorded shapes), the unpaired
//! routes of both sides are aligned in trace order by their kernels
//! (`vendor.physical_kernels`, or the kernel symbol of a route without
//! them):
//!
//! 1. Replays. The region side may hold several replays of the step: its
//!    unpaired routes split into `k` equal runs of the same kernels, `k`
//!    of the divisors of their count, taking the run length nearest the
//!    other side's count (the whole list, `k = 1`, is always a choice, so
//!    a step of repeating layers is never cut). The first run is aligned;
//!    the others are further replays of the same kernels, reported as
//!    such, never as added GEMMs.
//! 2. Alignment. The common prefix and suffix of kernels pair; the rest is
//!    aligned by a longest common subsequence of kernels (at most
//!    [`LCS_CELLS`] cells; past that, by position). Between two aligned
//!    GEMMs, the GEMMs left on both sides pair by position (another
//!    kernel: a difference of that pair); those left on one side only are
//!    missing or added. One inserted, removed or changed GEMM so stays one
//!    difference.

use crate::digest::FieldChange;
use crate::trace::RecordedGemmTrace;
use serde::Serialize;
use std::collections::HashMap;

/// The largest longest-common-subsequence table the alignment builds
/// (cells of 4 bytes): past it, the middle pairs by position.
pub const LCS_CELLS: usize = 1 << 22;

/// Which trace of a diff.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Side {
    /// The golden (`A`).
    Golden,
    /// The candidate (`B`).
    Candidate,
}

impl std::fmt::Display for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Side::Golden => "the golden",
            Side::Candidate => "the candidate",
        })
    }
}

/// How a diff paired GEMMs by kernel sequence, and what it found: said by
/// every sink (the text, the JSON `summary.pairing`, the reports).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SequencePairing {
    /// The trace whose GEMMs have no op identity.
    pub side: Side,
    /// What it is: `graph-replay profile` (its regions are graph
    /// launches) or `profile of regions` (compiled regions).
    pub source: String,
    /// GEMM pairs made by kernel sequence.
    pub paired: usize,
    /// Pairs whose kernels or geometry differ.
    pub differing: usize,
    /// The first differing pair: the GEMM of the side with identity, its
    /// op and shape, and its kernels each way.
    pub first_differing: Option<String>,
    /// Replays of the step the region side holds (1 where it holds one).
    pub replays: usize,
    /// GEMMs of the replays after the first, the same kernels in the same
    /// order: not compared again, never added.
    pub further_replay_gemms: usize,
    /// GEMMs of the golden left unpaired (missing, each a difference).
    pub missing: usize,
    /// GEMMs of the candidate left unpaired (added, each a difference).
    pub added: usize,
    /// Set where the context's modules differed only in the symbols they
    /// declare (one per op name), which follows from one side lacking op
    /// names: what that is, instead of a library change.
    pub declarations: Option<String>,
}

impl SequencePairing {
    /// Whether the paired GEMMs ran the same kernels in the same order,
    /// with none left unpaired.
    pub fn same_kernels(&self) -> bool {
        self.differing == 0 && self.missing == 0 && self.added == 0
    }

    /// What it says, one sentence a line (no trailing newline): `paired
    /// 3 GEMMs by kernel sequence (...): same kernels in the same order`,
    /// then the declarations sentence where it applies.
    pub fn lines(&self) -> Vec<String> {
        let mut out = vec![self.to_string()];
        out.extend(self.declarations.clone());
        out
    }

    /// [`SequencePairing::lines`] as the text overview prints them, each
    /// after its column label (`pairing`, `context`).
    pub fn labelled_lines(&self) -> Vec<String> {
        ["pairing", "context"]
            .iter()
            .zip(self.lines())
            .map(|(label, line)| format!("{label:<9} {line}"))
            .collect()
    }
}

impl std::fmt::Display for SequencePairing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let gemms = |n: usize| if n == 1 { "GEMM" } else { "GEMMs" };
        write!(
            f,
            "paired {} {} by kernel sequence ({} is a {} with no shapes)",
            self.paired,
            gemms(self.paired),
            self.side,
            self.source
        )?;
        if self.same_kernels() {
            f.write_str(": same kernels in the same order")?;
        } else if let Some(first) = &self.first_differing {
            write!(
                f,
                ": {} of {} differ, first {first}",
                self.differing, self.paired
            )?;
        } else {
            f.write_str(": the paired GEMMs ran the same kernels in the same order")?;
        }
        for (n, what) in [(self.missing, "missing"), (self.added, "added")] {
            if n > 0 {
                write!(f, "; {n} {} {what}", gemms(n))?;
            }
        }
        if self.replays > 1 {
            write!(
                f,
                "; {} holds {} replays: the first is paired, the {} further replays ({} {}) ran the same kernels in the same order",
                self.side,
                self.replays,
                self.replays - 1,
                self.further_replay_gemms,
                gemms(self.further_replay_gemms)
            )?;
        }
        Ok(())
    }
}

/// The unpaired routes of both sides, aligned by kernel sequence.
pub(super) struct Aligned {
    /// (golden, candidate) route pairs, in golden order.
    pub(super) pairs: Vec<(usize, usize)>,
    /// Golden routes left unpaired.
    pub(super) missing: Vec<usize>,
    /// Candidate routes left unpaired.
    pub(super) added: Vec<usize>,
    /// What the diff says of the pairing (its differing pairs and
    /// declarations are filled in by the comparison).
    pub(super) pairing: SequencePairing,
}

/// Whether route `i` of `t` is a GEMM with no op identity: a region's
/// GEMM whose shapes were not recorded.
pub(super) fn without_identity(t: &RecordedGemmTrace, i: usize) -> bool {
    t.observation
        .as_ref()
        .and_then(|o| o.gemms.get(i))
        .is_some_and(|g| g.region.is_some() && !g.shapes_recorded)
}

/// The kernels a route ran, as the pairing compares them.
fn kernels(t: &RecordedGemmTrace, i: usize) -> Vec<&str> {
    let r = &t.routes[i];
    match r.vendor.as_ref().filter(|v| !v.physical_kernels.is_empty()) {
        Some(v) => v.physical_kernels.iter().map(String::as_str).collect(),
        None => vec![r.kernel_symbol.as_str()],
    }
}

/// Aligns the routes left unpaired by name (`missing` of the golden,
/// `added` of the candidate, each in trace order) by kernel sequence,
/// where one side's are all GEMMs without op identity; `None` otherwise
/// (see the module's rule).
pub(super) fn align(
    golden: &RecordedGemmTrace,
    candidate: &RecordedGemmTrace,
    missing: &[usize],
    added: &[usize],
) -> Option<Aligned> {
    if missing.is_empty() || added.is_empty() {
        return None;
    }
    let all = |t, ids: &[usize]| ids.iter().all(|&i| without_identity(t, i));
    let side = if all(candidate, added) {
        Side::Candidate
    } else if all(golden, missing) {
        Side::Golden
    } else {
        return None;
    };
    // Each distinct kernel list as a number, so comparisons are cheap.
    let mut ids: HashMap<Vec<&str>, u32> = HashMap::new();
    let mut key = |t, i| {
        let n = ids.len() as u32;
        *ids.entry(kernels(t, i)).or_insert(n)
    };
    let gk: Vec<u32> = missing.iter().map(|&i| key(golden, i)).collect();
    let ck: Vec<u32> = added.iter().map(|&i| key(candidate, i)).collect();
    let (shaped, region) = match side {
        Side::Candidate => (&gk, &ck),
        Side::Golden => (&ck, &gk),
    };
    let period = replay_length(region, shaped.len());
    let first = &region[..period];
    let (pos_pairs, shaped_left, region_left) = align_keys(shaped, first);
    let further = region.len() - period;
    let (region_ids, shaped_ids) = match side {
        Side::Candidate => (added, missing),
        Side::Golden => (missing, added),
    };
    let pairs_of = |(s, r): (usize, usize)| match side {
        Side::Candidate => (shaped_ids[s], region_ids[r]),
        Side::Golden => (region_ids[r], shaped_ids[s]),
    };
    let mut pairs: Vec<(usize, usize)> = pos_pairs.into_iter().map(pairs_of).collect();
    pairs.sort_unstable();
    let shaped_left: Vec<usize> = shaped_left.into_iter().map(|s| shaped_ids[s]).collect();
    let region_left: Vec<usize> = region_left.into_iter().map(|r| region_ids[r]).collect();
    let (missing, added) = match side {
        Side::Candidate => (shaped_left, region_left),
        Side::Golden => (region_left, shaped_left),
    };
    let graph = region_ids
        .iter()
        .filter_map(|&i| {
            let t = if side == Side::Candidate {
                candidate
            } else {
                golden
            };
            t.observation.as_ref()?.gemms.get(i)?.region.as_deref()
        })
        .any(|r| r.contains("GraphLaunch"));
    let pairing = SequencePairing {
        side,
        source: if graph {
            "graph-replay profile"
        } else {
            "profile of regions"
        }
        .into(),
        paired: pairs.len(),
        differing: 0,
        first_differing: None,
        replays: region.len() / period,
        further_replay_gemms: further,
        missing: missing.len(),
        added: added.len(),
        declarations: None,
    };
    Some(Aligned {
        pairs,
        missing,
        added,
        pairing,
    })
}

/// The length of one replay in `region`: a divisor `p` of its length such
/// that `region` is the same `p` kernels repeated, nearest `shaped` (the
/// other side's count; the longer on a tie). The whole length always
/// qualifies.
fn replay_length(region: &[u32], shaped: usize) -> usize {
    let n = region.len();
    (1..=n)
        .filter(|&p| n.is_multiple_of(p))
        .filter(|&p| (p..n).all(|i| region[i] == region[i - p]))
        .min_by_key(|&p| (p.abs_diff(shaped), std::cmp::Reverse(p)))
        .unwrap_or(n)
}

/// Aligns two key sequences: (pairs of positions, positions of `a` left,
/// positions of `b` left), each in order (see the module's rule).
fn align_keys(a: &[u32], b: &[u32]) -> (Vec<(usize, usize)>, Vec<usize>, Vec<usize>) {
    let prefix = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let suffix = a[prefix..]
        .iter()
        .rev()
        .zip(b[prefix..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (am, bm) = (&a[prefix..a.len() - suffix], &b[prefix..b.len() - suffix]);
    // Anchors: equal keys on both sides, in order.
    let mut anchors: Vec<(usize, usize)> = (0..prefix).map(|i| (i, i)).collect();
    anchors.extend(
        lcs(am, bm)
            .into_iter()
            .map(|(i, j)| (i + prefix, j + prefix)),
    );
    anchors.extend((0..suffix).map(|k| (a.len() - suffix + k, b.len() - suffix + k)));
    let mut pairs = Vec::with_capacity(a.len().min(b.len()));
    let (mut a_left, mut b_left) = (Vec::new(), Vec::new());
    let (mut i, mut j) = (0, 0);
    // A sentinel anchor past both ends closes the last gap.
    for (ai, bj) in anchors.into_iter().chain([(a.len(), b.len())]) {
        let (ga, gb) = (ai - i, bj - j);
        let common = ga.min(gb);
        pairs.extend((0..common).map(|k| (i + k, j + k)));
        a_left.extend(i + common..ai);
        b_left.extend(j + common..bj);
        if ai < a.len() {
            pairs.push((ai, bj));
        }
        (i, j) = (ai + 1, bj + 1);
    }
    (pairs, a_left, b_left)
}

/// A longest common subsequence of `a` and `b` as position pairs, or none
/// where its table would pass [`LCS_CELLS`].
fn lcs(a: &[u32], b: &[u32]) -> Vec<(usize, usize)> {
    let (n, m) = (a.len(), b.len());
    if n == 0 || m == 0 || (n + 1).saturating_mul(m + 1) > LCS_CELLS {
        return Vec::new();
    }
    let w = m + 1;
    let mut t = vec![0u32; (n + 1) * w];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            t[i * w + j] = if a[i] == b[j] {
                t[(i + 1) * w + j + 1] + 1
            } else {
                t[(i + 1) * w + j].max(t[i * w + j + 1])
            };
        }
    }
    let mut out = Vec::with_capacity(t[0] as usize);
    let (mut i, mut j) = (0, 0);
    while i < n && j < m {
        if a[i] == b[j] {
            out.push((i, j));
            (i, j) = (i + 1, j + 1);
        } else if t[(i + 1) * w + j] >= t[i * w + j + 1] {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// Fields of a route that follow from its op identity: the GEMM's name,
/// its op (the kernel symbol of an observed route), layout, dtype, shape,
/// strides and the arguments digest that frames them. A GEMM without op
/// identity holds none of them, so a pair by kernel sequence never
/// compares them.
const IDENTITY_FIELDS: [&str; 11] = [
    "gemm",
    "op",
    "dtype",
    "kernel_symbol",
    "shape.m",
    "shape.k",
    "shape.n",
    "strides.lda",
    "strides.ldb",
    "strides.ldc",
    "launch.arguments_digest",
];

/// Whether a pair by kernel sequence compares `field`: not an identity
/// field, and the launch geometry only where both routes hold it (a
/// profile that recorded no geometry has one block of one thread).
pub(super) fn observed_by_both(
    field: &str,
    golden: &crate::ResolvedGemmRoute,
    candidate: &crate::ResolvedGemmRoute,
) -> bool {
    let unknown =
        |r: &crate::ResolvedGemmRoute| r.launch.grid == [1; 3] && r.launch.block == [1; 3];
    if IDENTITY_FIELDS.contains(&field) {
        return false;
    }
    !(field.starts_with("launch.") && (unknown(golden) || unknown(candidate)))
}

/// The first differing pair by kernel sequence, for the overview: the
/// GEMM with identity, its op and shape, then its kernels each way (or
/// the fields that differ, where the kernels do not).
pub(super) fn first_differing(
    side: Side,
    golden: &crate::ResolvedGemmRoute,
    candidate: &crate::ResolvedGemmRoute,
    changes: &[FieldChange],
) -> String {
    let named = match side {
        Side::Candidate => golden,
        Side::Golden => candidate,
    };
    let kernels = |r: &crate::ResolvedGemmRoute| match &r.vendor {
        Some(v) => v.physical_kernels.join(", "),
        None => r.kernel_symbol.clone(),
    };
    // Compared whole, shown short (a templated cuBLAS name runs to
    // hundreds of characters; the route difference below keeps it whole).
    let shown = |r: &crate::ResolvedGemmRoute| match &r.vendor {
        Some(v) => v
            .physical_kernels
            .iter()
            .map(|k| crate::render::kernel_name::kernel_display_name(k))
            .collect::<Vec<_>>()
            .join(", "),
        None => r.kernel_symbol.clone(),
    };
    let what = if kernels(golden) != kernels(candidate) {
        format!("kernels {} -> {}", shown(golden), shown(candidate))
    } else {
        let fields: Vec<String> = changes
            .iter()
            .map(|c| format!("{} {} -> {}", c.field, c.expected, c.found))
            .collect();
        fields.join(", ")
    };
    format!(
        "{} ({} {} {} {}x{}x{}): {what}",
        named.gemm,
        named.kernel_symbol,
        named.op,
        named.dtype,
        named.shape.m,
        named.shape.k,
        named.shape.n
    )
}

/// Whether every context difference is a module's declared symbols (its
/// symbols, services, resources and declarations: one per op name), and
/// there is one.
pub(super) fn only_declarations_differ(changes: &[(super::DiffClass, FieldChange)]) -> bool {
    const DECLARED: [&str; 4] = ["symbols", "services", "resources", "declarations"];
    !changes.is_empty()
        && changes.iter().all(|(_, c)| {
            c.field.starts_with("context.module[")
                && c.field
                    .rsplit_once("].")
                    .is_some_and(|(_, rest)| DECLARED.contains(&rest))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_change_insertion_or_removal_stays_one_difference() {
        // Same.
        let (p, a, b) = align_keys(&[1, 2, 3], &[1, 2, 3]);
        assert_eq!((p, a, b), (vec![(0, 0), (1, 1), (2, 2)], vec![], vec![]));
        // One kernel changed: still paired, by position between anchors.
        let (p, a, b) = align_keys(&[1, 2, 3], &[1, 9, 3]);
        assert_eq!((p, a, b), (vec![(0, 0), (1, 1), (2, 2)], vec![], vec![]));
        // One GEMM more on b, in the middle.
        let (p, a, b) = align_keys(&[1, 2, 3], &[1, 2, 7, 3]);
        assert_eq!((p, a, b), (vec![(0, 0), (1, 1), (2, 3)], vec![], vec![2]));
        // One GEMM fewer on b, at the start.
        let (p, a, b) = align_keys(&[1, 2, 3, 4], &[2, 3, 4]);
        assert_eq!((p, a, b), (vec![(1, 0), (2, 1), (3, 2)], vec![0], vec![]));
        // Nothing in common: by position, the rest left.
        let (p, a, b) = align_keys(&[1, 2], &[5, 6, 7]);
        assert_eq!((p, a, b), (vec![(0, 0), (1, 1)], vec![], vec![2]));
    }

    #[test]
    fn replays_are_found_without_cutting_a_repeating_step() {
        // Three replays of a 3-GEMM step.
        assert_eq!(replay_length(&[1, 2, 3, 1, 2, 3, 1, 2, 3], 3), 3);
        // A step of two identical layers against the same step: one replay.
        assert_eq!(replay_length(&[1, 2, 1, 2], 4), 4);
        // The same step, replayed twice.
        assert_eq!(replay_length(&[1, 2, 1, 2, 1, 2, 1, 2], 4), 4);
        // Replays that differ: one run.
        assert_eq!(replay_length(&[1, 2, 3, 1, 2, 4], 3), 6);
        // Each replay one GEMM longer than the other side.
        assert_eq!(replay_length(&[1, 2, 5, 3, 1, 2, 5, 3], 3), 4);
    }

    #[test]
    fn a_large_middle_pairs_by_position() {
        let n = 3000;
        let a: Vec<u32> = (0..n).collect();
        let b: Vec<u32> = (0..n).map(|x| x + n).collect();
        let (p, l, r) = align_keys(&a, &b);
        assert_eq!(p.len(), n as usize);
        assert!(l.is_empty() && r.is_empty());
    }
}
