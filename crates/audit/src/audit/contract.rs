//! The audit's contracts: each row of the verdict table and each JUnit
//! case names one. Their names are part of the JSON and JUnit output.

use std::fmt;

/// One contract the audit checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Contract {
    /// A captured graph's replay gives the eager run's bits.
    EagerVsReplay,
    /// Repeated eager runs give the same bits.
    RunToRun,
    /// Scalar-FMA-contract outputs equal the CPU reference bit for bit.
    CpuReference,
    /// Rows of an M-sweep agree across batch sizes where the route
    /// promises it.
    BatchInvariance,
    /// Routes that promise the same contract give the same bits.
    ContractParity,
    /// The planted nondeterministic control was caught.
    NondeterminismDetected,
    /// The live policy refuses the control's replay before launch.
    PolicyRefusesControl,
    /// Route mutations are refused before launch.
    MutationRefusal,
    /// Policy changes are refused by a captured plan before launch.
    PolicyMutationRefusal,
    /// A recorded trace matches its golden.
    GoldenDrift,
    /// Every batch-invariance group of the golden is still covered.
    GoldenCoverage,
    /// Devices of one class agree launch for launch.
    GpuToGpu,
}

impl Contract {
    /// Every contract, in the order the audit checks them.
    pub const ALL: [Contract; 12] = [
        Contract::EagerVsReplay,
        Contract::RunToRun,
        Contract::CpuReference,
        Contract::BatchInvariance,
        Contract::ContractParity,
        Contract::NondeterminismDetected,
        Contract::PolicyRefusesControl,
        Contract::MutationRefusal,
        Contract::PolicyMutationRefusal,
        Contract::GoldenDrift,
        Contract::GoldenCoverage,
        Contract::GpuToGpu,
    ];

    /// Its name in tables, JSON and JUnit, e.g. `run-to-run`.
    pub fn as_str(self) -> &'static str {
        match self {
            Contract::EagerVsReplay => "eager-vs-replay",
            Contract::RunToRun => "run-to-run",
            Contract::CpuReference => "cpu-reference",
            Contract::BatchInvariance => "batch-invariance",
            Contract::ContractParity => "contract-parity",
            Contract::NondeterminismDetected => "nondeterminism-detected",
            Contract::PolicyRefusesControl => "policy-refuses-control",
            Contract::MutationRefusal => "mutation-refusal",
            Contract::PolicyMutationRefusal => "policy-mutation-refusal",
            Contract::GoldenDrift => "golden-drift",
            Contract::GoldenCoverage => "golden-coverage",
            Contract::GpuToGpu => "gpu-to-gpu",
        }
    }

    /// A check of gemm-audit itself (that the audit detects what it
    /// claims), not of the GEMMs: reports list these apart.
    pub fn is_self_check(self) -> bool {
        matches!(
            self,
            Contract::NondeterminismDetected
                | Contract::PolicyRefusesControl
                | Contract::MutationRefusal
                | Contract::PolicyMutationRefusal
        )
    }

    /// A row about the goldens (drift and coverage), which `--accept`
    /// settles.
    pub fn is_golden(self) -> bool {
        matches!(self, Contract::GoldenDrift | Contract::GoldenCoverage)
    }
}

// Serialized by its name, so the name is written in one place.
impl serde::Serialize for Contract {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl fmt::Display for Contract {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A contract name that is not one of [`Contract::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown contract {0:?}")]
pub struct UnknownContract(pub String);

impl std::str::FromStr for Contract {
    type Err = UnknownContract;

    fn from_str(s: &str) -> Result<Contract, UnknownContract> {
        Contract::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| UnknownContract(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::Contract;

    #[test]
    fn names_round_trip_through_text_and_json() {
        for c in Contract::ALL {
            assert_eq!(c.as_str().parse::<Contract>(), Ok(c));
            assert_eq!(serde_json::to_string(&c).unwrap(), format!("\"{c}\""));
        }
        assert!("run_to_run".parse::<Contract>().is_err());
        assert_eq!(
            Contract::ALL.iter().filter(|c| c.is_self_check()).count(),
            4
        );
    }
}
