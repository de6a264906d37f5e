//! What a workload asks of a backend, and what a timed run reports: one
//! GEMM ([`GemmSpec`]) with how its kernel is picked ([`RouteChoice`]), the
//! limits on it, and a launch's time ([`TimedOutput`]).

use super::family::{FamilyParseError, KernelFamily};
use crate::vocab::{DType, GemmOp};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Largest operand or output a workload may ask for, in elements.
pub const MAX_ELEMENTS: u64 = 1 << 26;
/// Most k-splits a split-K route may use.
pub const MAX_SPLITS: u32 = 256;

/// How a GEMM picks its kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RouteChoice {
    /// Let the backend's shape-based dispatcher choose (like a vendor library).
    #[default]
    Policy,
    /// One built-in kernel family, by name (the tensor-core families are
    /// CUDA only; the wgmma ones need compute capability 9.0).
    Kernel(KernelFamily),
    /// cuBLAS (sgemm / GemmEx) under the context's policy (CUDA only).
    Cublas,
    /// cuBLASLt matmul with the heuristic's first algorithm (CUDA only).
    CublasLt,
    /// cuBLASLt matmul with one split-K-free, workspace-free configuration
    /// for every m of the problem family (op, dtype, k, n): batch invariant
    /// by construction, and audited as such (CUDA only).
    CublasLtInvariant,
    /// The invariant ladder at its fastest rung for m
    /// ([`RouteChoice::ladder_rung`]): every m of a problem family folds k
    /// in one order, so it promises batch invariance and the audit fails
    /// it when rows differ across m (CUDA sm_90 only).
    BatchInvariant,
}

/// Largest m the ladder's decode-size rungs (narrow 64x32, decode 64x64, band 64x128) serve under
/// [`RouteChoice::BatchInvariant`]. The rungs give the same bits, so the
/// limits change only speed: they are where the next rung becomes the
/// faster one on the H200 (docs/kernels.md).
pub const LADDER_DECODE_MAX_M: u64 = 64;
/// Largest m a one-chunk family's middle rungs serve: the band rung
/// (64x128 tiles) or the mid rung (128x128), whichever
/// [`RouteChoice::ladder_rung`] expects to take fewer waves. Above it
/// `wgmma-large`, `wgmma-medium` or `wgmma-small` (wgmma's order is a
/// one-chunk family's) serve; a family of more chunks keeps choosing
/// among the ladder's rungs at every m.
pub const LADDER_MID_MAX_M: u64 = 256;

/// Why [`RouteChoice::parse`] refused a route's name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RouteParseError {
    /// Neither a kernel family nor another route (the name as given).
    #[error("unknown route {0:?} (expected {names})", names = RouteChoice::expected_names())]
    Unknown(String),
    /// A kernel family with a bad split count.
    #[error(transparent)]
    Family(#[from] FamilyParseError),
}

impl From<KernelFamily> for RouteChoice {
    fn from(family: KernelFamily) -> Self {
        RouteChoice::Kernel(family)
    }
}

impl RouteChoice {
    /// The choices that are not a kernel family.
    const NAMED: [RouteChoice; 5] = [
        RouteChoice::Policy,
        RouteChoice::Cublas,
        RouteChoice::CublasLt,
        RouteChoice::CublasLtInvariant,
        RouteChoice::BatchInvariant,
    ];

    /// The name of a choice that is not a kernel family.
    fn name(&self) -> Option<&'static str> {
        match self {
            RouteChoice::Policy => Some("policy"),
            RouteChoice::Cublas => Some("cublas"),
            RouteChoice::CublasLt => Some("cublaslt"),
            RouteChoice::CublasLtInvariant => Some("cublaslt-invariant"),
            RouteChoice::BatchInvariant => Some("batch-invariant"),
            RouteChoice::Kernel(_) => None,
        }
    }

    /// Parses `policy`, a kernel family (`scalar-fma`, `tiled`,
    /// `split-k-fixed:S`, `split-k-atomic:S`, `mma-large`, ...), `cublas`,
    /// `cublaslt`, `cublaslt-invariant` or `batch-invariant`.
    pub fn parse(s: &str) -> Result<Self, RouteParseError> {
        if let Some(choice) = Self::NAMED.into_iter().find(|c| c.name() == Some(s)) {
            return Ok(choice);
        }
        match KernelFamily::parse(s) {
            Some(family) => Ok(RouteChoice::Kernel(family?)),
            None => Err(RouteParseError::Unknown(s.to_string())),
        }
    }

    /// Every route name `parse` takes, for its error message: `policy`,
    /// each family (`:S` where it takes a split count), then the vendor
    /// and batch-invariant choices.
    fn expected_names() -> String {
        let named = |c: &RouteChoice| c.name().unwrap_or_default().to_string();
        let (policy, others) = Self::NAMED.split_first().expect("NAMED is not empty");
        let families = KernelFamily::ALL.into_iter().map(|f| match f.is_split() {
            true => format!("{}:S", f.name()),
            false => f.name().to_string(),
        });
        let mut names: Vec<String> = std::iter::once(named(policy))
            .chain(families)
            .chain(others.iter().map(named))
            .collect();
        let last = names.pop().unwrap_or_default();
        format!("{} or {last}", names.join(", "))
    }

    /// The kernel family this choice names, if it names one.
    pub fn family(&self) -> Option<KernelFamily> {
        match self {
            RouteChoice::Kernel(f) => Some(*f),
            _ => None,
        }
    }

    /// Whether this choice promises batch invariance: a fixed kernel whose
    /// per-element reduction order does not depend on m. The policy
    /// dispatcher promises nothing; the atomic control promises nothing.
    pub fn promises_batch_invariance(&self) -> bool {
        match self {
            RouteChoice::Kernel(f) => f.promises_batch_invariance(),
            RouteChoice::CublasLtInvariant | RouteChoice::BatchInvariant => true,
            RouteChoice::Policy | RouteChoice::Cublas | RouteChoice::CublasLt => false,
        }
    }

    /// The rung [`RouteChoice::BatchInvariant`] serves a problem with,
    /// each with the problem family's [`super::ladder_chunks`]. The rungs
    /// give the same bits: the choice changes only speed, and never looks
    /// at the device (waves are counted in
    /// [`super::LADDER_TARGET_BLOCKS`], not in its SMs). The rules were
    /// fitted to H200 benches of every rung at every m
    /// (docs/kernels.md; `tests/it/rung_policy.rs`
    /// holds them to their logs).
    ///
    /// - TN below 64 rows, with one chunk: the decode rung where it fits
    ///   one wave. TN's m-contiguous A arrives one k row at a time (a box
    ///   of 8, 16, 32 or 64 m values, the narrowest that holds m), so the
    ///   rung that loads A the fewest times per output column wins: half
    ///   the narrow rung's A loads, twice the band rung's blocks (m = 8-32
    ///   at k = n = 4096: 0.89-1.20x cuBLAS hot against the narrow rung's
    ///   0.78-0.89x and the band rung's 0.66-1.05x). Below 16 rows with
    ///   several chunks the band rung, whose blocks read A the fewest
    ///   times (no bench has TN with several chunks).
    /// - Up to [`LADDER_DECODE_MAX_M`]: of the narrow (64x32), decode
    ///   (64x64) and band (64x128) rungs, the one with the fewest waves,
    ///   then the most tiles. A grid-splitting rung's chunk blocks count
    ///   in its waves but not as tiles: its partials go through memory and
    ///   its fold, and it lost to the narrow rung wherever that had more
    ///   tiles (k = 4096, n = 1024 at m = 16-64: 0.41x against 0.56-0.59x).
    /// - Up to [`LADDER_MID_MAX_M`], and at every larger m where k has more
    ///   than one chunk: the narrow rung where it fits one wave, else, with
    ///   one chunk, the decode rung where it does (k = n = 4096 at
    ///   m = 128: 1.05x against the band rung's 0.97x, hot and cold
    ///   alike; no bench has a family of several chunks where it would),
    ///   else the band rung or
    ///   the family's 128x128 rung (mid with one chunk, the
    ///   register-folding wide rung with more), whichever takes fewer
    ///   waves weighted by tile area, ties to the larger tile.
    /// - Above, with one chunk (wgmma's k order): `wgmma-large` (128x256),
    ///   `wgmma-medium` (128x192) or `wgmma-small` (128x128) by the same
    ///   weighted waves, a 128x128 tile's counted 1.1 times (at full waves
    ///   it ran 0.90-0.91x the larger tiles' speed on the H200), ties in
    ///   that order (QKV at m = 1024: medium, 0.99x cuBLAS against 0.76x
    ///   and 0.90x; MLP up: medium, 0.97x against 0.92x and 0.94x).
    pub fn ladder_rung(op: GemmOp, m: u64, k: u64, n: u64) -> KernelFamily {
        const TARGET: u64 = super::LADDER_TARGET_BLOCKS;
        let one_chunk = super::ladder_chunks(k, n) == 1;
        let rung = |f: KernelFamily| f.for_shape(k, n);
        let blocks = |f: KernelFamily| rung(f).wgmma_blocks(m, n).unwrap_or(u64::MAX);
        let tiles = |f: KernelFamily| f.wgmma_tiles(m, n).unwrap_or(0);
        let waves = |f: KernelFamily| blocks(f).div_ceil(TARGET);
        // Waves of the target grid times the tile's area in 64x128 units:
        // the time a tile shape takes while it computes rather than loads.
        let cost = |f: &KernelFamily| {
            let (bm, bn) = f.wgmma_tile().unwrap_or((128, 128));
            waves(*f) * u64::from(bm * bn) / (64 * 128)
        };
        let (narrow, decode, band) = (
            KernelFamily::LadderNarrow(1),
            KernelFamily::LadderDecode(1),
            KernelFamily::LadderBand(1),
        );
        let square = match one_chunk {
            true => KernelFamily::LadderMid(1),
            false => KernelFamily::LadderWide(1),
        };
        // `min_by_key` keeps the first of equals: candidates are listed
        // in the order ties go.
        let cheapest = |candidates: [KernelFamily; 2]| {
            candidates.into_iter().min_by_key(cost).unwrap_or(square)
        };
        let pick = if op == GemmOp::Tn && m < 64 && one_chunk && waves(decode) <= 1 {
            decode
        } else if op == GemmOp::Tn && m < 16 {
            band
        } else if m <= LADDER_DECODE_MAX_M {
            [narrow, decode, band]
                .into_iter()
                .min_by_key(|&f| (waves(f), std::cmp::Reverse(tiles(f))))
                .unwrap_or(decode)
        } else if m <= LADDER_MID_MAX_M || !one_chunk {
            if waves(narrow) <= 1 {
                narrow
            } else if one_chunk && waves(decode) <= 1 {
                decode
            } else {
                cheapest([square, band])
            }
        } else {
            let (large, medium, small) = (
                KernelFamily::WgmmaLarge,
                KernelFamily::WgmmaMedium,
                KernelFamily::WgmmaSmall,
            );
            let slowness = |f: &KernelFamily| if *f == small { 11 } else { 10 };
            [large, medium, small]
                .into_iter()
                .min_by_key(|f| cost(f) * slowness(f))
                .unwrap_or(large)
        };
        rung(pick)
    }

    /// Whether the route needs a vendor policy (`cublas-fast` or `cublas-pedantic`).
    pub fn is_vendor(&self) -> bool {
        matches!(
            self,
            RouteChoice::Cublas | RouteChoice::CublasLt | RouteChoice::CublasLtInvariant
        )
    }
}

impl fmt::Display for RouteChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self, self.name()) {
            (RouteChoice::Kernel(family), _) => family.fmt(f),
            (_, name) => f.write_str(name.unwrap_or_default()),
        }
    }
}

impl Serialize for RouteChoice {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for RouteChoice {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        RouteChoice::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// One GEMM of a workload: `C[m,n] = op(A)[m,k] * op(B)[k,n]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GemmSpec {
    /// The GEMM's name, unique within its workload (e.g. `qkv@b8`); routes
    /// and reports carry it.
    pub name: String,
    /// Which operands are stored transposed.
    pub op: GemmOp,
    /// Element type of A, B and C.
    pub dtype: DType,
    /// Rows of C (the batch dimension an M-sweep varies).
    pub m: u64,
    /// Length of the reduction.
    pub k: u64,
    /// Columns of C.
    pub n: u64,
    /// How the kernel is picked; default: the backend's dispatcher
    /// (`policy`).
    #[serde(default)]
    pub route: RouteChoice,
    /// Input seed; defaults to the workload's. GEMMs that share seed, op,
    /// dtype, k and n share the first rows of A and all of B, so they form
    /// an M-sweep for batch invariance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
}

impl GemmSpec {
    /// An NN GEMM `name` of `dtype`, m x k x n, served by `route`, with the
    /// workload's seed.
    pub fn new(name: String, dtype: DType, m: u64, k: u64, n: u64, route: RouteChoice) -> Self {
        GemmSpec {
            name,
            op: GemmOp::Nn,
            dtype,
            m,
            k,
            n,
            route,
            seed: None,
        }
    }

    /// The input seed, given the workload's default.
    pub fn input_seed(&self, workload_seed: u64) -> u64 {
        self.seed.unwrap_or(workload_seed)
    }
}

/// Which clock measured a launch, and so what its time includes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TimingClock {
    /// CUDA events recorded on the stream right before and after the
    /// launch: the device's time for the kernels alone.
    DeviceEvents,
    /// The host clock around the kernel alone (the CPU backend: inputs are
    /// seeded before the clock starts).
    HostKernel,
    /// The host clock around the whole run, input seeding and transfers
    /// included (an engine backend that does not time its kernels).
    HostWall,
}

impl fmt::Display for TimingClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TimingClock::DeviceEvents => "CUDA events around the kernels",
            TimingClock::HostKernel => "host clock around the kernel",
            TimingClock::HostWall => "host wall time around the whole run",
        })
    }
}

/// An output and how long its launch took.
#[derive(Debug, Clone, PartialEq)]
pub struct TimedOutput {
    /// The output C in the storage bytes of its dtype.
    pub output: Vec<u8>,
    /// The launch's time in seconds, as measured by `clock`.
    pub seconds: f64,
    /// What the time includes.
    pub clock: TimingClock,
}

/// The ordinals `0..count` in words: `0`, `0 and 1`, `0 to 7`, or `none`.
pub fn ordinals_in_words(count: usize) -> String {
    match count {
        0 => "none".into(),
        1 => "0".into(),
        2 => "0 and 1".into(),
        n => format!("0 to {}", n - 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_parse_errors_name_the_bad_value() {
        let e = RouteChoice::parse("magic").unwrap_err();
        assert_eq!(e, RouteParseError::Unknown("magic".into()));
        let text = e.to_string();
        assert!(
            text.starts_with("unknown route \"magic\" (expected policy, "),
            "{text}"
        );
        assert!(text.ends_with(" or batch-invariant)"), "{text}");
        let e = RouteChoice::parse("split-k-fixed:0").unwrap_err();
        assert!(matches!(e, RouteParseError::Family(_)), "{e:?}");
        assert!(e.to_string().contains("split count 0"), "{e}");
    }
}
