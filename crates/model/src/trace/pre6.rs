//! The contract vocabulary trace formats 1 to 5 were written in, frozen,
//! and the one route type that holds it.
//!
//! bincode writes an enum variant as its declaration index. Format 6
//! inserted `vendor-invariant` into [`vocab::ContractKind`] at index 7,
//! before the engine variant, so an engine contract that formats 2 to 5
//! wrote as index 7 would decode with today's enum as `vendor-invariant`,
//! and its name as a boolean. Every older reader decodes contracts with
//! [`ContractKind`] below (the enum as those formats declared it) and
//! converts by variant, never by index. Format 1 had no engine variant:
//! its reader decodes with the same enum and refuses index 7 as engine
//! vocabulary that format did not have.
//!
//! Every other type a trace holds encodes in formats 1 to 5 as it does
//! today (later variants of `DType`, `GemmOp`, `ModuleKind`,
//! `PhysicalBackend` and `FingerprintMode` were appended after every
//! variant those formats wrote), so it is not copied here; the structs
//! that differ in fields are each format's own (`v1`, `v3`, `v4`).
//!
//! Contract names, not indices, are framed into the launch-set digest, so
//! a converted trace's digest verifies exactly when the file's did.

use crate::digest::Digest;
use crate::platform::{CompilerIdentity, DeviceIdentity};
use crate::route::{
    GemmShape, GemmStrides, LaunchConfig, ResolvedGemmRoute, TensorMapIdentity, TileShape,
    VendorRoute,
};
use crate::vocab::{
    self, DType, GemmOp, ModuleKind, Name, OperandConversion, OutputOwnership, PhysicalBackend,
};
use serde::{Deserialize, Serialize};

/// The built-in contract kinds of formats 1 to 5, in their order: what an
/// engine contract's `like` may be (so a file cannot nest engine
/// contracts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum BuiltinContractKind {
    ScalarFma,
    SplitKFixed,
    TensorCoreTileParity,
    Tf32,
    VendorPedantic,
    VendorFast,
    AtomicUnordered,
}

/// `ContractKind` as formats 2 to 5 declared it (format 1: without
/// `Engine`). A unit variant and a [`BuiltinContractKind`] of the same
/// index encode alike, so `like` reads the bytes those formats wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum ContractKind {
    ScalarFma,
    SplitKFixed,
    TensorCoreTileParity,
    Tf32,
    VendorPedantic,
    VendorFast,
    AtomicUnordered,
    Engine {
        name: Name,
        like: BuiltinContractKind,
    },
}

impl From<BuiltinContractKind> for vocab::ContractKind {
    fn from(k: BuiltinContractKind) -> Self {
        use BuiltinContractKind as B;
        match k {
            B::ScalarFma => vocab::ContractKind::ScalarFma,
            B::SplitKFixed => vocab::ContractKind::SplitKFixed,
            B::TensorCoreTileParity => vocab::ContractKind::TensorCoreTileParity,
            B::Tf32 => vocab::ContractKind::Tf32,
            B::VendorPedantic => vocab::ContractKind::VendorPedantic,
            B::VendorFast => vocab::ContractKind::VendorFast,
            B::AtomicUnordered => vocab::ContractKind::AtomicUnordered,
        }
    }
}

impl From<ContractKind> for vocab::ContractKind {
    fn from(k: ContractKind) -> Self {
        use BuiltinContractKind as B;
        match k {
            ContractKind::ScalarFma => B::ScalarFma.into(),
            ContractKind::SplitKFixed => B::SplitKFixed.into(),
            ContractKind::TensorCoreTileParity => B::TensorCoreTileParity.into(),
            ContractKind::Tf32 => B::Tf32.into(),
            ContractKind::VendorPedantic => B::VendorPedantic.into(),
            ContractKind::VendorFast => B::VendorFast.into(),
            ContractKind::AtomicUnordered => B::AtomicUnordered.into(),
            ContractKind::Engine { name, like } => vocab::ContractKind::Engine {
                name,
                like: Box::new(like.into()),
            },
        }
    }
}

impl ContractKind {
    /// True for the engine variant (which format 1 did not have).
    pub(super) fn is_engine(&self) -> bool {
        matches!(self, ContractKind::Engine { .. })
    }

    /// The older form of `k`; `None` for what formats 1 to 5 could not
    /// say (`vendor-invariant`). For the tests of the older readers.
    #[cfg(test)]
    pub(super) fn of(k: &vocab::ContractKind) -> Option<ContractKind> {
        use vocab::ContractKind as C;
        let builtin = |k: &C| {
            Some(match k {
                C::ScalarFma => BuiltinContractKind::ScalarFma,
                C::SplitKFixed => BuiltinContractKind::SplitKFixed,
                C::TensorCoreTileParity => BuiltinContractKind::TensorCoreTileParity,
                C::Tf32 => BuiltinContractKind::Tf32,
                C::VendorPedantic => BuiltinContractKind::VendorPedantic,
                C::VendorFast => BuiltinContractKind::VendorFast,
                C::AtomicUnordered => BuiltinContractKind::AtomicUnordered,
                C::VendorInvariant | C::Engine { .. } => return None,
            })
        };
        Some(match k {
            C::Engine { name, like } => ContractKind::Engine {
                name: name.clone(),
                like: builtin(like)?,
            },
            other => match builtin(other)? {
                BuiltinContractKind::ScalarFma => ContractKind::ScalarFma,
                BuiltinContractKind::SplitKFixed => ContractKind::SplitKFixed,
                BuiltinContractKind::TensorCoreTileParity => ContractKind::TensorCoreTileParity,
                BuiltinContractKind::Tf32 => ContractKind::Tf32,
                BuiltinContractKind::VendorPedantic => ContractKind::VendorPedantic,
                BuiltinContractKind::VendorFast => ContractKind::VendorFast,
                BuiltinContractKind::AtomicUnordered => ContractKind::AtomicUnordered,
            },
        })
    }
}

/// Converts a list of older contract kinds.
pub(super) fn contracts(ks: Vec<ContractKind>) -> Vec<vocab::ContractKind> {
    ks.into_iter().map(Into::into).collect()
}

/// The older form of each of `ks` (for tests of the older readers).
#[cfg(test)]
pub(super) fn contracts_of(ks: &[vocab::ContractKind]) -> Option<Vec<ContractKind>> {
    ks.iter().map(ContractKind::of).collect()
}

/// `NumericContract` with the older kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct NumericContract {
    pub(super) kind: ContractKind,
    splits: u32,
}

/// `ResolvedGemmRoute` as formats 1 to 5 wrote it: every field as today,
/// the contract in the older vocabulary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Route {
    gemm: String,
    pub(super) op: GemmOp,
    pub(super) dtype: DType,
    pub(super) backend: PhysicalBackend,
    pub(super) contract: NumericContract,
    instruction_family: String,
    instruction_shape: String,
    uses_tensor_cores: bool,
    operand_conversion: OperandConversion,
    output_ownership: OutputOwnership,
    kernel_symbol: String,
    pub(super) module_kind: ModuleKind,
    compilation_target: String,
    artifact_digest: Digest,
    compiler: CompilerIdentity,
    device: DeviceIdentity,
    #[serde(deserialize_with = "crate::bounded::route_list")]
    device_capabilities: Vec<String>,
    shape: GemmShape,
    strides: GemmStrides,
    tile: TileShape,
    bk: u32,
    stages: u32,
    threads: u32,
    launch: LaunchConfig,
    tensor_map: Option<TensorMapIdentity>,
    resources_digest: Digest,
    tuning_table_revision: u32,
    schedule_revision: u32,
    vendor: Option<VendorRoute>,
}

impl From<Route> for ResolvedGemmRoute {
    fn from(r: Route) -> Self {
        ResolvedGemmRoute {
            gemm: r.gemm,
            op: r.op,
            dtype: r.dtype,
            backend: r.backend,
            contract: crate::route::NumericContract {
                kind: r.contract.kind.into(),
                splits: r.contract.splits,
            },
            instruction_family: r.instruction_family,
            instruction_shape: r.instruction_shape,
            uses_tensor_cores: r.uses_tensor_cores,
            operand_conversion: r.operand_conversion,
            output_ownership: r.output_ownership,
            kernel_symbol: r.kernel_symbol,
            module_kind: r.module_kind,
            compilation_target: r.compilation_target,
            artifact_digest: r.artifact_digest,
            compiler: r.compiler,
            device: r.device,
            device_capabilities: r.device_capabilities,
            shape: r.shape,
            strides: r.strides,
            tile: r.tile,
            bk: r.bk,
            stages: r.stages,
            threads: r.threads,
            launch: r.launch,
            tensor_map: r.tensor_map,
            resources_digest: r.resources_digest,
            tuning_table_revision: r.tuning_table_revision,
            schedule_revision: r.schedule_revision,
            vendor: r.vendor,
        }
    }
}

/// Converts a list of older routes.
pub(super) fn routes(rs: Vec<Route>) -> Vec<ResolvedGemmRoute> {
    rs.into_iter().map(Into::into).collect()
}

impl Route {
    /// The older form of `r`; `None` when its contract has none. For the
    /// tests of the older readers.
    #[cfg(test)]
    pub(super) fn of(r: &ResolvedGemmRoute) -> Option<Route> {
        Some(Route {
            gemm: r.gemm.clone(),
            op: r.op,
            dtype: r.dtype,
            backend: r.backend.clone(),
            contract: NumericContract {
                kind: ContractKind::of(&r.contract.kind)?,
                splits: r.contract.splits,
            },
            instruction_family: r.instruction_family.clone(),
            instruction_shape: r.instruction_shape.clone(),
            uses_tensor_cores: r.uses_tensor_cores,
            operand_conversion: r.operand_conversion,
            output_ownership: r.output_ownership,
            kernel_symbol: r.kernel_symbol.clone(),
            module_kind: r.module_kind.clone(),
            compilation_target: r.compilation_target.clone(),
            artifact_digest: r.artifact_digest,
            compiler: r.compiler.clone(),
            device: r.device.clone(),
            device_capabilities: r.device_capabilities.clone(),
            shape: r.shape,
            strides: r.strides,
            tile: r.tile,
            bk: r.bk,
            stages: r.stages,
            threads: r.threads,
            launch: r.launch,
            tensor_map: r.tensor_map,
            resources_digest: r.resources_digest,
            tuning_table_revision: r.tuning_table_revision,
            schedule_revision: r.schedule_revision,
            vendor: r.vendor.clone(),
        })
    }
}

/// The older form of each of `rs` (for tests of the older readers).
#[cfg(test)]
pub(super) fn routes_of(rs: &[ResolvedGemmRoute]) -> Option<Vec<Route>> {
    rs.iter().map(Route::of).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::codec;

    fn decode(bytes: &[u8]) -> vocab::ContractKind {
        let (k, used): (ContractKind, usize) =
            bincode::serde::decode_from_slice(bytes, bincode::config::standard()).unwrap();
        assert_eq!(used, bytes.len());
        k.into()
    }

    /// The last index of the older enum is the engine contract, and the
    /// last built-in one `atomic-unordered`: bytes written by hand as
    /// formats 2 to 5 wrote them (variant index, then the fields).
    #[test]
    fn the_last_older_indices_decode_to_their_current_variants() {
        assert_eq!(decode(&[6]), vocab::ContractKind::AtomicUnordered);
        let mut engine = vec![7, 4];
        engine.extend_from_slice(b"fold");
        engine.push(6);
        assert_eq!(
            decode(&engine),
            vocab::ContractKind::engine("fold", vocab::ContractKind::AtomicUnordered).unwrap()
        );
        // Index 8 never existed; a `like` of 7 would be an engine one.
        let e =
            bincode::serde::decode_from_slice::<ContractKind, _>(&[8], bincode::config::standard());
        assert!(e.is_err());
        assert!(
            bincode::serde::decode_from_slice::<ContractKind, _>(
                &[7, 1, b'x', 7],
                bincode::config::standard()
            )
            .is_err()
        );
        // Today's enum reads the same engine bytes as another variant, or
        // not at all: why the older readers need this one.
        let today = bincode::serde::decode_from_slice::<vocab::ContractKind, _>(
            &engine,
            bincode::config::standard(),
        );
        assert!(
            today.as_ref().map_or(true, |(k, _)| !matches!(
                k,
                vocab::ContractKind::Engine { .. }
            )),
            "{today:?}"
        );
    }

    /// Every contract formats 1 to 5 could say converts to the current
    /// variant of the same name, and back.
    #[test]
    fn every_older_contract_keeps_its_name() {
        let mut all: Vec<vocab::ContractKind> = vocab::ContractKind::ALL.to_vec();
        all.push(vocab::ContractKind::engine("e", vocab::ContractKind::Tf32).unwrap());
        for k in all {
            let Some(old) = ContractKind::of(&k) else {
                assert_eq!(k, vocab::ContractKind::VendorInvariant);
                continue;
            };
            let bytes = codec::encode(&old).unwrap();
            assert_eq!(decode(&bytes), k);
        }
    }
}
