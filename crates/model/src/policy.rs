//! `GemmPolicy`: which backends and numeric contracts a replay may use.

use crate::digest::{FieldValue, FieldVisitor, Framed};
use crate::vocab::{ContractKind, DType, OperandConversion, OutputOwnership, PhysicalBackend};
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
    /// The stable name.
    pub fn as_str(&self) -> &'static str {
        match self {
            PolicyMode::Deterministic => "deterministic",
            PolicyMode::CublasFast => "cublas-fast",
            PolicyMode::CublasPedantic => "cublas-pedantic",
        }
    }
}

/// What f32 GEMMs may do. (JSON spells it kebab-case; the names earlier
/// versions wrote, `Exact` and `Tf32`, are still read.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum F32Policy {
    /// Only the exact scalar-FMA contract.
    #[serde(alias = "Exact")]
    Exact,
    /// Deterministic non-exact contracts too: TF32 and fixed-order split-K.
    #[serde(alias = "Tf32")]
    Tf32,
}

/// What f16/bf16 GEMMs may do. (JSON spells it kebab-case; `Tiled` and
/// `StreamK` are still read.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HalfPolicy {
    /// Tile-parity contracts only (scalar FMA, tensor-core tile parity).
    #[serde(alias = "Tiled")]
    Tiled,
    /// Fixed-order split-K / stream-K folds too.
    #[serde(alias = "StreamK")]
    StreamK,
}

/// The numeric policy of a context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GemmPolicy {
    /// Who may serve GEMMs.
    pub mode: PolicyMode,
    /// Whether tensor cores are permitted.
    pub tensor_cores: bool,
    /// What f32 GEMMs may do.
    pub f32: F32Policy,
    /// What f16/bf16 GEMMs may do.
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

    /// Built-in backends this mode may replay. Engine backends are
    /// judged by [`GemmPolicy::refuse_backend`].
    ///
    /// The vendor modes permit the custom fixed-order backends too: an
    /// engine that calls cuBLAS for some GEMMs and its own deterministic
    /// kernels for others is audited under one policy, and a fixed-order
    /// kernel is never less reproducible than a vendor call. The
    /// deterministic mode never permits a vendor backend.
    pub fn backends(&self) -> &'static [PhysicalBackend] {
        use PhysicalBackend::*;
        const DETERMINISTIC: &[PhysicalBackend] = &[CpuReference, CudaNvrtc];
        const VENDOR: &[PhysicalBackend] = &[CpuReference, CudaNvrtc, Cublas, CublasLt];
        match self.mode {
            PolicyMode::Deterministic => DETERMINISTIC,
            PolicyMode::CublasFast | PolicyMode::CublasPedantic => VENDOR,
        }
    }

    /// Built-in contract kinds this mode may replay, before per-dtype
    /// rules. Engine contracts follow their `like` kind. The vendor modes
    /// add their vendor contracts to the fixed-order ones.
    pub fn contracts(&self) -> &'static [ContractKind] {
        use ContractKind::*;
        const PLAIN: &[ContractKind] = &[ScalarFma, SplitKFixed, Tf32];
        const TENSOR: &[ContractKind] = &[ScalarFma, SplitKFixed, Tf32, TensorCoreTileParity];
        const FAST: &[ContractKind] = &[
            ScalarFma,
            SplitKFixed,
            Tf32,
            VendorPedantic,
            VendorFast,
            VendorInvariant,
        ];
        const FAST_TENSOR: &[ContractKind] = &[
            ScalarFma,
            SplitKFixed,
            Tf32,
            TensorCoreTileParity,
            VendorPedantic,
            VendorFast,
            VendorInvariant,
        ];
        const PEDANTIC: &[ContractKind] = &[ScalarFma, SplitKFixed, Tf32, VendorPedantic];
        const PEDANTIC_TENSOR: &[ContractKind] = &[
            ScalarFma,
            SplitKFixed,
            Tf32,
            TensorCoreTileParity,
            VendorPedantic,
        ];
        match (self.mode, self.tensor_cores) {
            (PolicyMode::Deterministic, false) => PLAIN,
            (PolicyMode::Deterministic, true) => TENSOR,
            (PolicyMode::CublasFast, false) => FAST,
            (PolicyMode::CublasFast, true) => FAST_TENSOR,
            (PolicyMode::CublasPedantic, false) => PEDANTIC,
            (PolicyMode::CublasPedantic, true) => PEDANTIC_TENSOR,
        }
    }

    /// Why this policy's mode does not permit `backend`, if it does not.
    /// An engine backend whose kernels the engine picks (fixed kernels) is
    /// permitted by every mode; one whose kernels a library picks only by
    /// the vendor modes.
    pub fn refuse_backend(&self, backend: &PhysicalBackend) -> Option<&'static str> {
        let permitted = match backend {
            PhysicalBackend::Engine { vendor, .. } => {
                !*vendor || self.mode != PolicyMode::Deterministic
            }
            builtin => self.backends().contains(builtin),
        };
        (!permitted).then_some("backend not permitted by the policy mode")
    }

    /// Why `contract` is not permitted for `dtype` under this policy, if it
    /// is not. An engine contract is judged as its `like` kind.
    ///
    /// `AtomicUnordered` is permitted by no policy: it exists only as the
    /// audit's negative control.
    pub fn refuse_contract(&self, dtype: DType, contract: &ContractKind) -> Option<&'static str> {
        use ContractKind::*;
        let contract = contract.class();
        if !self.contracts().contains(contract) {
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

    /// Why this policy refuses a launch on `backend` of `dtype` under
    /// `contract`, with or without tensor cores: the field at fault and the
    /// reason. Symbol and module checks against the loaded modules are the
    /// plan's job.
    pub fn refuse(
        &self,
        backend: &PhysicalBackend,
        dtype: DType,
        contract: &ContractKind,
        tensor_cores: bool,
    ) -> Option<(&'static str, &'static str)> {
        if let Some(why) = self.refuse_backend(backend) {
            return Some(("backend", why));
        }
        if tensor_cores && !self.tensor_cores {
            return Some((
                "uses_tensor_cores",
                "tensor cores not permitted by the policy",
            ));
        }
        if let Some(why) = self.refuse_contract(dtype, contract) {
            return Some(("contract.kind", why));
        }
        None
    }
}

impl GemmPolicy {
    /// Why this policy refuses operands converted by `conversion` for a
    /// `dtype` GEMM under `contract` on `backend`, if it does.
    ///
    /// TF32 rounding is the f32 policy's to permit (`Tf32`), or the
    /// fast-math vendor contracts' (vendor-fast, vendor-invariant), which the
    /// mode permits as a whole; it never
    /// applies to halves. Vendor-defined conversion is a vendor library's
    /// alone: a kernel whose code is known says how it converts.
    pub fn refuse_conversion(
        &self,
        backend: &PhysicalBackend,
        dtype: DType,
        contract: &ContractKind,
        conversion: OperandConversion,
    ) -> Option<&'static str> {
        match conversion {
            OperandConversion::ExactWiden => None,
            OperandConversion::Tf32Round if dtype != DType::F32 => {
                Some("tf32 rounding applies to f32 operands only")
            }
            OperandConversion::Tf32Round
                if self.f32 == F32Policy::Exact
                    && !matches!(
                        contract.class(),
                        ContractKind::VendorFast | ContractKind::VendorInvariant
                    ) =>
            {
                Some(
                    "tf32 rounding needs f32 policy tf32 (or a vendor contract with fast math: vendor-fast, vendor-invariant)",
                )
            }
            OperandConversion::Tf32Round => None,
            OperandConversion::VendorDefined if !backend.is_vendor() => {
                Some("vendor-defined conversion is a vendor library's only")
            }
            OperandConversion::VendorDefined => None,
        }
    }

    /// Why this policy refuses outputs owned as `ownership` under
    /// `contract` on `backend`, if it does.
    ///
    /// Atomic accumulation is permitted by no policy (like the
    /// `atomic-unordered` contract it implements); a fixed split-K fold
    /// belongs to the fixed split-K contract; vendor-defined ownership is a
    /// vendor library's alone.
    pub fn refuse_ownership(
        &self,
        backend: &PhysicalBackend,
        contract: &ContractKind,
        ownership: OutputOwnership,
    ) -> Option<&'static str> {
        match ownership {
            OutputOwnership::AtomicAccumulate => {
                Some("atomic accumulation is permitted by no policy")
            }
            OutputOwnership::FixedSplitKFold if contract.class() != &ContractKind::SplitKFixed => {
                Some("a fixed split-K fold needs the split-k-fixed contract")
            }
            OutputOwnership::VendorDefined if !backend.is_vendor() => {
                Some("vendor-defined output ownership is a vendor library's only")
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_are_kebab_case_in_json_and_old_names_still_read() {
        assert_eq!(serde_json::to_string(&F32Policy::Tf32).unwrap(), "\"tf32\"");
        assert_eq!(
            serde_json::to_string(&HalfPolicy::StreamK).unwrap(),
            "\"stream-k\""
        );
        for (old, new) in [
            ("\"Tf32\"", F32Policy::Tf32),
            ("\"Exact\"", F32Policy::Exact),
        ] {
            assert_eq!(serde_json::from_str::<F32Policy>(old).unwrap(), new);
        }
        assert_eq!(
            serde_json::from_str::<HalfPolicy>("\"StreamK\"").unwrap(),
            HalfPolicy::StreamK
        );
    }

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
                        p.refuse_contract(*d, &ContractKind::AtomicUnordered)
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
            p.refuse_contract(DType::Bf16, &ContractKind::SplitKFixed)
                .is_none()
        );
        assert!(
            p.refuse_contract(DType::F32, &ContractKind::SplitKFixed)
                .is_none()
        );
        let exact = GemmPolicy {
            f32: F32Policy::Exact,
            ..p
        };
        assert!(
            exact
                .refuse_contract(DType::F32, &ContractKind::SplitKFixed)
                .is_some()
        );
        assert!(
            exact
                .refuse_contract(DType::Bf16, &ContractKind::SplitKFixed)
                .is_none()
        );
        let tiled = GemmPolicy {
            half: HalfPolicy::Tiled,
            ..p
        };
        assert!(
            tiled
                .refuse_contract(DType::F16, &ContractKind::SplitKFixed)
                .is_some()
        );
        assert!(
            p.refuse_contract(DType::F32, &ContractKind::ScalarFma)
                .is_none()
        );
    }

    #[test]
    fn pedantic_refuses_fast_and_vendor_modes_keep_fixed_order() {
        let p = GemmPolicy {
            mode: PolicyMode::CublasPedantic,
            ..GemmPolicy::CPU_DEFAULT
        };
        assert!(
            p.refuse_contract(DType::F32, &ContractKind::VendorFast)
                .is_some()
        );
        assert!(
            p.refuse_contract(DType::F32, &ContractKind::VendorPedantic)
                .is_none()
        );
        // Fixed-order contracts stay permitted under a vendor mode.
        assert!(
            p.refuse_contract(DType::F32, &ContractKind::ScalarFma)
                .is_none()
        );
        // The deterministic mode never permits a vendor contract or backend.
        let det = GemmPolicy::CPU_DEFAULT;
        assert!(
            det.refuse_contract(DType::F32, &ContractKind::VendorPedantic)
                .is_some()
        );
        assert!(det.refuse_backend(&PhysicalBackend::Cublas).is_some());
        assert!(p.refuse_backend(&PhysicalBackend::CudaNvrtc).is_none());
        let cudnn = PhysicalBackend::engine("cudnn", true).unwrap();
        let cutlass = PhysicalBackend::engine("cutlass", false).unwrap();
        assert!(det.refuse_backend(&cudnn).is_some());
        assert!(det.refuse_backend(&cutlass).is_none());
        assert!(p.refuse_backend(&cudnn).is_none());
        assert!(p.refuse_backend(&cutlass).is_none());
    }
}
