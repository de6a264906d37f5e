//! What a workload asks of a backend, and what a timed run reports: one
//! GEMM ([`GemmSpec`]) with how its kernel is picked ([`RouteChoice`]), the
//! limits on it, and a launch's time ([`TimedOutput`]).

use crate::route::{DType, GemmOp};
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
    /// One ascending FMA chain per output, one thread.
    ScalarFma,
    /// Tiled and parallel, bit-identical to scalar FMA.
    Tiled,
    /// Fixed-order split-K with this many splits.
    SplitKFixed(u32),
    /// The nondeterministic control: split-K folded in completion order.
    SplitKAtomic(u32),
    /// Tensor-core `mma.sync` (bf16/f16), large tile family (CUDA only).
    MmaLarge,
    /// Tensor-core `mma.sync` (bf16/f16), small tile family (CUDA only).
    MmaSmall,
    /// Hopper TMA + `wgmma` (bf16/f16), 128x256 tiles, warp-specialised
    /// (CUDA, compute capability 9.0 only). Bit-identical to the mma
    /// families; k and n (and m for TN) must be multiples of 8.
    WgmmaLarge,
    /// The same kernel with 128x128 tiles.
    WgmmaSmall,
    /// cuBLAS (sgemm / GemmEx) under the context's policy (CUDA only).
    Cublas,
    /// cuBLASLt matmul with the heuristic's first algorithm (CUDA only).
    CublasLt,
    /// cuBLASLt matmul with one split-K-free, workspace-free configuration
    /// for every m of the problem family (op, dtype, k, n): batch invariant
    /// by construction, and audited as such (CUDA only).
    CublasLtInvariant,
}

impl RouteChoice {
    /// Parses `policy`, `scalar-fma`, `tiled`, `split-k-fixed:S`, `split-k-atomic:S`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let splits = |rest: &str| -> Result<u32, String> {
            let n: u32 = rest
                .parse()
                .map_err(|_| format!("split count {rest:?} is not a number"))?;
            if n == 0 || n > MAX_SPLITS {
                return Err(format!("split count {n} is outside 1..={MAX_SPLITS}"));
            }
            Ok(n)
        };
        match s {
            "policy" => Ok(RouteChoice::Policy),
            "scalar-fma" => Ok(RouteChoice::ScalarFma),
            "tiled" => Ok(RouteChoice::Tiled),
            "mma-large" => Ok(RouteChoice::MmaLarge),
            "mma-small" => Ok(RouteChoice::MmaSmall),
            "wgmma-large" => Ok(RouteChoice::WgmmaLarge),
            "wgmma-small" => Ok(RouteChoice::WgmmaSmall),
            "cublas" => Ok(RouteChoice::Cublas),
            "cublaslt" => Ok(RouteChoice::CublasLt),
            "cublaslt-invariant" => Ok(RouteChoice::CublasLtInvariant),
            _ => {
                if let Some(rest) = s.strip_prefix("split-k-fixed:") {
                    Ok(RouteChoice::SplitKFixed(splits(rest)?))
                } else if let Some(rest) = s.strip_prefix("split-k-atomic:") {
                    Ok(RouteChoice::SplitKAtomic(splits(rest)?))
                } else {
                    Err(format!(
                        "unknown route {s:?} (expected policy, scalar-fma, tiled, split-k-fixed:S, split-k-atomic:S, mma-large, mma-small, wgmma-large, wgmma-small, cublas, cublaslt or cublaslt-invariant)"
                    ))
                }
            }
        }
    }

    /// Whether this choice promises batch invariance: a fixed kernel whose
    /// per-element reduction order does not depend on m. The policy
    /// dispatcher promises nothing; the atomic control promises nothing.
    pub fn promises_batch_invariance(&self) -> bool {
        matches!(
            self,
            RouteChoice::ScalarFma
                | RouteChoice::Tiled
                | RouteChoice::SplitKFixed(_)
                | RouteChoice::MmaLarge
                | RouteChoice::MmaSmall
                | RouteChoice::WgmmaLarge
                | RouteChoice::WgmmaSmall
                | RouteChoice::CublasLtInvariant
        )
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
        match self {
            RouteChoice::Policy => f.write_str("policy"),
            RouteChoice::ScalarFma => f.write_str("scalar-fma"),
            RouteChoice::Tiled => f.write_str("tiled"),
            RouteChoice::SplitKFixed(s) => write!(f, "split-k-fixed:{s}"),
            RouteChoice::SplitKAtomic(s) => write!(f, "split-k-atomic:{s}"),
            RouteChoice::MmaLarge => f.write_str("mma-large"),
            RouteChoice::MmaSmall => f.write_str("mma-small"),
            RouteChoice::WgmmaLarge => f.write_str("wgmma-large"),
            RouteChoice::WgmmaSmall => f.write_str("wgmma-small"),
            RouteChoice::Cublas => f.write_str("cublas"),
            RouteChoice::CublasLt => f.write_str("cublaslt"),
            RouteChoice::CublasLtInvariant => f.write_str("cublaslt-invariant"),
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
    #[doc(hidden)]
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
