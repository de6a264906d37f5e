//! Compute and memory budgets: what a workload (or a stored trace's
//! replay) will cost, estimated before anything is allocated or launched,
//! and refused past a limit.
//!
//! Why: a workload or a resealed trace can ask for any shape (`m = 2^26`,
//! a `2000^3` product replayed on the CPU for hours, twenty huge outputs
//! held at once). The estimate is deliberately conservative; the limits are
//! documented defaults per backend that a user raises on purpose.

use crate::route::{GemmShape, ResolvedGemmRoute};
use crate::vocab::DType;
use crate::{BudgetLimit, Error, Result};

/// Host bytes per operand element (A, B and C of the largest GEMM) that the
/// estimate assumes: seeded f32 inputs, packed copies, accumulators, storage
/// conversion and the replay's copies. Calibrated on the CPU backend
/// (88 bytes per element measured for a 2^24 x 1 x 1 f32 record).
pub const HOST_BYTES_PER_OPERAND_ELEMENT: u64 = 96;

/// Copies of every output kept at once (the eager run, the replay and the
/// comparison runs).
pub const OUTPUT_COPIES: u64 = 3;

/// What some GEMMs will cost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// Floating-point operations, in GFLOP (2·m·n·k per GEMM and run).
    pub gflop: f64,
    /// Peak host memory in bytes.
    pub memory_bytes: u64,
}

impl Estimate {
    /// The cost of running `gemms` (shape and storage dtype) `runs` times.
    pub fn of(gemms: impl IntoIterator<Item = (GemmShape, DType)>, runs: u64) -> Estimate {
        let mut flop = 0f64;
        let mut outputs = 0u64;
        let mut largest = 0u64;
        for (s, dtype) in gemms {
            flop += 2.0 * s.m as f64 * s.n as f64 * s.k as f64;
            let elem = crate::kernels::element_size(dtype) as u64;
            outputs = outputs.saturating_add(s.m.saturating_mul(s.n).saturating_mul(elem));
            let operands =
                s.m.saturating_mul(s.k)
                    .saturating_add(s.k.saturating_mul(s.n))
                    .saturating_add(s.m.saturating_mul(s.n));
            largest = largest.max(operands);
        }
        Estimate {
            gflop: flop * runs.max(1) as f64 / 1e9,
            memory_bytes: largest
                .saturating_mul(HOST_BYTES_PER_OPERAND_ELEMENT)
                .saturating_add(outputs.saturating_mul(OUTPUT_COPIES)),
        }
    }

    /// The cost of replaying `routes` once.
    pub fn of_routes(routes: &[ResolvedGemmRoute]) -> Estimate {
        Estimate::of(routes.iter().map(|r| (r.shape, r.dtype)), 1)
    }
}

/// Limits on what one command may compute and hold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    /// Most GFLOP one command may run.
    pub max_gflop: f64,
    /// Most host memory, in bytes, one command may hold.
    pub max_memory_bytes: u64,
}

impl Budget {
    /// The default for a backend: the CPU reference runs about a GFLOP/s
    /// per core, so 200 GFLOP is minutes; a GPU runs hundreds of TFLOP/s.
    /// Memory: 8 GiB on the CPU, 32 GiB of host memory with CUDA.
    pub fn for_backend(name: &str) -> Budget {
        match name {
            "cpu" => Budget {
                max_gflop: 200.0,
                max_memory_bytes: 8 << 30,
            },
            _ => Budget {
                max_gflop: 500_000.0,
                max_memory_bytes: 32 << 30,
            },
        }
    }

    /// Refuses `estimate` for `what` (e.g. `workload m-sweep`) when it is
    /// over either limit, saying which.
    pub fn check(&self, what: &str, estimate: &Estimate) -> Result<()> {
        if estimate.gflop > self.max_gflop {
            return Err(Error::OverBudget {
                what: what.to_string(),
                need: format!("{:.1} GFLOP", estimate.gflop),
                limit: format!("{:.1} GFLOP", self.max_gflop),
                kind: BudgetLimit::Compute,
            });
        }
        if estimate.memory_bytes > self.max_memory_bytes {
            let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
            return Err(Error::OverBudget {
                what: what.to_string(),
                need: format!("about {:.2} GiB of memory", gib(estimate.memory_bytes)),
                limit: format!("{:.2} GiB", gib(self.max_memory_bytes)),
                kind: BudgetLimit::Memory,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(m: u64, k: u64, n: u64) -> GemmShape {
        GemmShape { m, k, n }
    }

    #[test]
    fn estimates_and_refusals() {
        let e = Estimate::of([(shape(2000, 2000, 2000), DType::F32)], 1);
        assert!((e.gflop - 16.0).abs() < 1e-9);
        let cpu = Budget::for_backend("cpu");
        assert!(cpu.check("x", &e).is_ok());
        // m = 2^26, k = n = 1: 2^26 outputs, 2^27 operand elements.
        let tall = Estimate::of([(shape(1 << 26, 1, 1), DType::F32)], 1);
        assert!(tall.memory_bytes > 8 << 30);
        let err = cpu.check("workload tall", &tall).unwrap_err();
        assert!(
            matches!(
                err,
                Error::OverBudget {
                    kind: BudgetLimit::Memory,
                    ..
                }
            ),
            "{err}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("memory limit") && msg.contains("workload tall") && !msg.contains("--"),
            "{msg}"
        );
        let cube = Estimate::of([(shape(20_000, 20_000, 20_000), DType::Bf16)], 3);
        let err = cpu.check("trace", &cube).unwrap_err();
        assert!(
            matches!(
                err,
                Error::OverBudget {
                    kind: BudgetLimit::Compute,
                    ..
                }
            ),
            "{err}"
        );
        // Hostile shapes saturate instead of overflowing.
        let huge = Estimate::of([(shape(u64::MAX, u64::MAX, u64::MAX), DType::F32)], 1);
        assert_eq!(huge.memory_bytes, u64::MAX);
    }
}
