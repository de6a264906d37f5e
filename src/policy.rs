//! `GemmPolicy`: which backends and numeric contracts a replay may use.

use crate::digest::{FieldValue, FieldVisitor, Framed};
use crate::route::{ContractKind, DType, PhysicalBackend, ResolvedGemmRoute};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Policy mode: who may serve GEMMs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyMode {
    /// Custom fixed-order kernels only (CPU reference, NVRTC).
    Deterministic,
    /// Vendor libraries, TF32 allowed.
    CublasFast,
    /// Vendor libraries, pedantic f32 compute.
    CublasPedantic,
}

impl PolicyMode {
    pub fn as_str(&self) -> &'static str {
        match self {
            PolicyMode::Deterministic => "deterministic",
            PolicyMode::CublasFast => "cublas-fast",
            PolicyMode::CublasPedantic => "cublas-pedantic",
        }
    }
}

/// What f32 GEMMs may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum F32Policy {
    /// Only the exact scalar-FMA contract.
    Exact,
    /// Deterministic non-exact contracts too: TF32 and fixed-order split-K.
    Tf32,
}

/// What f16/bf16 GEMMs may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum HalfPolicy {
    /// Tile-parity contracts only (scalar FMA, tensor-core tile parity).
    Tiled,
    /// Fixed-order split-K / stream-K folds too.
    StreamK,
}

/// The numeric policy of a context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GemmPolicy {
    pub mode: PolicyMode,
    pub tensor_cores: bool,
    pub f32: F32Policy,
    pub half: HalfPolicy,
}

impl fmt::Display for GemmPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} tensor-cores={} f32={} half={}",
            self.mode.as_str(),
            if self.tensor_cores { "on" } else { "off" },
            match self.f32 {
                F32Policy::Exact => "exact",
                F32Policy::Tf32 => "tf32",
            },
            match self.half {
                HalfPolicy::Tiled => "tiled",
                HalfPolicy::StreamK => "streamk",
            }
        )
    }
}

impl Framed for GemmPolicy {
    fn visit_fields<V: FieldVisitor>(&self, v: &mut V) {
        v.field("policy.mode", FieldValue::Str(self.mode.as_str()));
        v.field("policy.tensor_cores", FieldValue::Bool(self.tensor_cores));
        v.field(
            "policy.f32",
            FieldValue::Str(match self.f32 {
                F32Policy::Exact => "exact",
                F32Policy::Tf32 => "tf32",
            }),
        );
        v.field(
            "policy.half",
            FieldValue::Str(match self.half {
                HalfPolicy::Tiled => "tiled",
                HalfPolicy::StreamK => "streamk",
            }),
        );
    }
}

impl GemmPolicy {
    /// This policy with another mode (vendor modes allow TF32 only in `CublasFast`).
    pub fn with_mode(self, mode: PolicyMode) -> GemmPolicy {
        GemmPolicy { mode, ..self }
    }

    /// The CPU backend's default: deterministic, no tensor cores, and
    /// fixed-order (deterministic, not scalar-exact) split-K permitted for
    /// every dtype, so the shape-based dispatcher may use it.
    pub const CPU_DEFAULT: GemmPolicy = GemmPolicy {
        mode: PolicyMode::Deterministic,
        tensor_cores: false,
        f32: F32Policy::Tf32,
        half: HalfPolicy::StreamK,
    };

    /// Backends this mode may replay.
    pub fn backends(&self) -> &'static [PhysicalBackend] {
        match self.mode {
            PolicyMode::Deterministic => {
                &[PhysicalBackend::CpuReference, PhysicalBackend::CudaNvrtc]
            }
            PolicyMode::CublasFast | PolicyMode::CublasPedantic => {
                &[PhysicalBackend::Cublas, PhysicalBackend::CublasLt]
            }
        }
    }

    /// Contract kinds this mode may replay, before per-dtype rules.
    pub fn contracts(&self) -> &'static [ContractKind] {
        use ContractKind::*;
        match (self.mode, self.tensor_cores) {
            (PolicyMode::Deterministic, false) => &[ScalarFma, SplitKFixed, Tf32],
            (PolicyMode::Deterministic, true) => {
                &[ScalarFma, SplitKFixed, Tf32, TensorCoreTileParity]
            }
            (PolicyMode::CublasFast, _) => &[VendorPedantic, VendorFast],
            (PolicyMode::CublasPedantic, _) => &[VendorPedantic],
        }
    }

    /// Why `contract` is not permitted for `dtype` under this policy, if it is not.
    ///
    /// `AtomicUnordered` is permitted by no policy: it exists only as the
    /// audit's negative control.
    pub fn refuse_contract(&self, dtype: DType, contract: ContractKind) -> Option<&'static str> {
        use ContractKind::*;
        if !self.contracts().contains(&contract) {
            return Some("numeric contract not permitted by the policy mode");
        }
        match (contract, dtype) {
            (SplitKFixed, d) if d.is_half() && self.half == HalfPolicy::Tiled => {
                Some("fixed-order split-K needs half policy streamk")
            }
            (SplitKFixed, DType::F32) if self.f32 == F32Policy::Exact => {
                Some("fixed-order split-K needs f32 policy tf32")
            }
            (Tf32, DType::F32) if self.f32 == F32Policy::Exact => {
                Some("tf32 needs f32 policy tf32")
            }
            (Tf32, d) if d.is_half() => Some("tf32 applies to f32 only"),
            (TensorCoreTileParity, DType::F32) => {
                Some("tensor-core tile parity applies to half types")
            }
            _ => None,
        }
    }

    /// Why this policy refuses to replay `route`, naming the field, if it does.
    /// Symbol and module checks against the loaded modules are the plan's job.
    pub fn refuse_route(&self, route: &ResolvedGemmRoute) -> Option<(&'static str, &'static str)> {
        if !self.backends().contains(&route.backend) {
            return Some(("backend", "backend not permitted by the policy mode"));
        }
        if route.uses_tensor_cores && !self.tensor_cores {
            return Some((
                "uses_tensor_cores",
                "tensor cores not permitted by the policy",
            ));
        }
        if let Some(why) = self.refuse_contract(route.dtype, route.contract.kind) {
            return Some(("contract.kind", why));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_is_never_permitted() {
        for mode in [
            PolicyMode::Deterministic,
            PolicyMode::CublasFast,
            PolicyMode::CublasPedantic,
        ] {
            for tc in [false, true] {
                let p = GemmPolicy {
                    mode,
                    tensor_cores: tc,
                    f32: F32Policy::Tf32,
                    half: HalfPolicy::StreamK,
                };
                for d in DType::ALL {
                    assert!(
                        p.refuse_contract(*d, ContractKind::AtomicUnordered)
                            .is_some()
                    );
                }
            }
        }
    }

    #[test]
    fn split_k_follows_dtype_policy() {
        let p = GemmPolicy::CPU_DEFAULT;
        assert!(
            p.refuse_contract(DType::Bf16, ContractKind::SplitKFixed)
                .is_none()
        );
        assert!(
            p.refuse_contract(DType::F32, ContractKind::SplitKFixed)
                .is_none()
        );
        let exact = GemmPolicy {
            f32: F32Policy::Exact,
            ..p
        };
        assert!(
            exact
                .refuse_contract(DType::F32, ContractKind::SplitKFixed)
                .is_some()
        );
        assert!(
            exact
                .refuse_contract(DType::Bf16, ContractKind::SplitKFixed)
                .is_none()
        );
        let tiled = GemmPolicy {
            half: HalfPolicy::Tiled,
            ..p
        };
        assert!(
            tiled
                .refuse_contract(DType::F16, ContractKind::SplitKFixed)
                .is_some()
        );
        assert!(
            p.refuse_contract(DType::F32, ContractKind::ScalarFma)
                .is_none()
        );
    }

    #[test]
    fn pedantic_refuses_fast() {
        let p = GemmPolicy {
            mode: PolicyMode::CublasPedantic,
            ..GemmPolicy::CPU_DEFAULT
        };
        assert!(
            p.refuse_contract(DType::F32, ContractKind::VendorFast)
                .is_some()
        );
        assert!(
            p.refuse_contract(DType::F32, ContractKind::VendorPedantic)
                .is_none()
        );
        assert!(
            p.refuse_contract(DType::F32, ContractKind::ScalarFma)
                .is_some()
        );
    }
}
