//! Format version 4, read and converted to the current model: the same
//! trace without `observation`. Version 5 added it, with the
//! `not-observed` fingerprint mode and the dtypes and layouts only read
//! from profiles (appended enum variants, so every version-4 value keeps
//! its encoding). Versions 4 and 5 store the context without pins
//! ([`ContextV4`]) and contracts in the vocabulary of formats 1 to 5
//! ([`super::pre6`]); the launch-set digest frames contract names, so it
//! still verifies.

use super::{FingerprintMode, OutputFingerprint, RecordedGemmTrace, pre6};
use crate::declaration::{
    BkRule, SplitRule, SymbolDeclaration, VendorConfiguration, VendorPermits,
};
use crate::digest::Digest;
use crate::identity::{
    GemmRouteIdentity, ModuleIdentity, Revisions, Service, SymbolEntry, VolatileMetadata,
};
use crate::launch_set::ResolvedGemmLaunchSet;
use crate::physical::PhysicalNode;
use crate::platform::{CompilerIdentity, DeviceIdentity};
use crate::policy::GemmPolicy;
use crate::route::TileShape;
use crate::vocab::{
    DType, GemmOp, ModuleKind, OperandConversion, OutputOwnership, PhysicalBackend,
};
use serde::{Deserialize, Serialize};

/// A symbol's service as versions 4 and 5 wrote it.
#[derive(Serialize, Deserialize)]
struct ServiceV4 {
    op: GemmOp,
    dtype: DType,
    contract: pre6::ContractKind,
    tensor_cores: bool,
    conversion: OperandConversion,
}

/// A vendor call configuration as versions 4 and 5 wrote it.
#[derive(Serialize, Deserialize)]
struct ConfigurationV4 {
    dtype: DType,
    contract: pre6::ContractKind,
    options_digest: Digest,
}

/// What a vendor configuration permits, as versions 4 and 5 wrote it.
#[derive(Serialize, Deserialize)]
struct PermitsV4 {
    library_version: String,
    max_split_k: i64,
    reduction_schemes: Vec<i64>,
    max_workspace_bytes: u64,
    configurations: Vec<ConfigurationV4>,
}

/// A symbol's declaration as versions 4 and 5 wrote it.
#[derive(Serialize, Deserialize)]
struct DeclarationV4 {
    instruction_family: String,
    instruction_shape: String,
    output_ownership: OutputOwnership,
    splits: SplitRule,
    tile: Option<TileShape>,
    bk: BkRule,
    stages: Option<u32>,
    tensor_map: bool,
    device_capabilities: Vec<String>,
    vendor: Option<PermitsV4>,
}

#[derive(Serialize, Deserialize)]
struct SymbolV4 {
    name: String,
    #[serde(deserialize_with = "crate::bounded::services")]
    serves: Vec<ServiceV4>,
    resources_digest: Option<Digest>,
    declaration: Option<DeclarationV4>,
}

#[derive(Serialize, Deserialize)]
struct ModuleV4 {
    backend: PhysicalBackend,
    kind: ModuleKind,
    digest: Digest,
    compiler: CompilerIdentity,
    target: String,
    #[serde(deserialize_with = "crate::bounded::symbols")]
    symbols: Vec<SymbolV4>,
}

/// The context of versions 4 and 5: no pins, contracts in the older
/// vocabulary.
#[derive(Serialize, Deserialize)]
pub(super) struct ContextV4 {
    policy: GemmPolicy,
    #[serde(deserialize_with = "crate::bounded::permitted")]
    permitted_backends: Vec<PhysicalBackend>,
    #[serde(deserialize_with = "crate::bounded::permitted")]
    permitted_contracts: Vec<pre6::ContractKind>,
    #[serde(deserialize_with = "crate::bounded::modules")]
    modules: Vec<ModuleV4>,
    device: DeviceIdentity,
    revisions: Revisions,
}

impl From<ServiceV4> for Service {
    fn from(s: ServiceV4) -> Self {
        Service {
            op: s.op,
            dtype: s.dtype,
            contract: s.contract.into(),
            tensor_cores: s.tensor_cores,
            conversion: s.conversion,
        }
    }
}

impl From<DeclarationV4> for SymbolDeclaration {
    fn from(d: DeclarationV4) -> Self {
        SymbolDeclaration {
            instruction_family: d.instruction_family,
            instruction_shape: d.instruction_shape,
            output_ownership: d.output_ownership,
            splits: d.splits,
            tile: d.tile,
            bk: d.bk,
            stages: d.stages,
            tensor_map: d.tensor_map,
            device_capabilities: d.device_capabilities,
            vendor: d.vendor.map(|v| VendorPermits {
                library_version: v.library_version,
                max_split_k: v.max_split_k,
                reduction_schemes: v.reduction_schemes,
                max_workspace_bytes: v.max_workspace_bytes,
                configurations: v
                    .configurations
                    .into_iter()
                    .map(|c| VendorConfiguration {
                        dtype: c.dtype,
                        contract: c.contract.into(),
                        options_digest: c.options_digest,
                    })
                    .collect(),
            }),
        }
    }
}

impl From<ContextV4> for GemmRouteIdentity {
    fn from(c: ContextV4) -> Self {
        let symbol = |s: SymbolV4| SymbolEntry {
            name: s.name,
            serves: s.serves.into_iter().map(Into::into).collect(),
            resources_digest: s.resources_digest,
            declaration: s.declaration.map(Into::into),
        };
        // Fields as stored: no re-sorting, so the context reads as written.
        let module = |m: ModuleV4| ModuleIdentity {
            backend: m.backend,
            kind: m.kind,
            digest: m.digest,
            compiler: m.compiler,
            target: m.target,
            symbols: m.symbols.into_iter().map(symbol).collect(),
        };
        GemmRouteIdentity {
            policy: c.policy,
            permitted_backends: c.permitted_backends,
            permitted_contracts: pre6::contracts(c.permitted_contracts),
            modules: c.modules.into_iter().map(module).collect(),
            device: c.device,
            revisions: c.revisions,
            pins: Vec::new(),
        }
    }
}

#[derive(Serialize, Deserialize)]
pub(super) struct TraceV4 {
    workload: String,
    workload_digest: Digest,
    context: ContextV4,
    launch_set: ResolvedGemmLaunchSet,
    routes: Vec<pre6::Route>,
    fingerprints: Vec<OutputFingerprint>,
    #[serde(deserialize_with = "crate::bounded::volatile")]
    volatile: VolatileMetadata,
    physical: Vec<PhysicalNode>,
    fingerprint_mode: FingerprintMode,
}

/// The current model of a version-4 trace: nothing observed elsewhere.
pub(super) fn upgrade(t: TraceV4) -> RecordedGemmTrace {
    RecordedGemmTrace {
        workload: t.workload,
        workload_digest: t.workload_digest,
        context: t.context.into(),
        launch_set: t.launch_set,
        routes: pre6::routes(t.routes),
        fingerprints: t.fingerprints,
        volatile: t.volatile,
        physical: t.physical,
        fingerprint_mode: t.fingerprint_mode,
        observation: None,
    }
}

/// The version-4 and -5 form of a context (for tests of the readers):
/// `None` when it has pins or a contract with no older form.
#[cfg(test)]
pub(super) fn downgrade_context(c: &GemmRouteIdentity) -> Option<ContextV4> {
    use pre6::ContractKind as K;
    if !c.pins.is_empty() {
        return None;
    }
    let declaration = |d: &SymbolDeclaration| -> Option<DeclarationV4> {
        let vendor = match &d.vendor {
            None => None,
            Some(v) => Some(PermitsV4 {
                library_version: v.library_version.clone(),
                max_split_k: v.max_split_k,
                reduction_schemes: v.reduction_schemes.clone(),
                max_workspace_bytes: v.max_workspace_bytes,
                configurations: v
                    .configurations
                    .iter()
                    .map(|x| {
                        Some(ConfigurationV4 {
                            dtype: x.dtype,
                            contract: K::of(&x.contract)?,
                            options_digest: x.options_digest,
                        })
                    })
                    .collect::<Option<_>>()?,
            }),
        };
        Some(DeclarationV4 {
            instruction_family: d.instruction_family.clone(),
            instruction_shape: d.instruction_shape.clone(),
            output_ownership: d.output_ownership,
            splits: d.splits,
            tile: d.tile,
            bk: d.bk,
            stages: d.stages,
            tensor_map: d.tensor_map,
            device_capabilities: d.device_capabilities.clone(),
            vendor,
        })
    };
    let symbol = |s: &SymbolEntry| -> Option<SymbolV4> {
        let serves = s.serves.iter().map(|v| {
            Some(ServiceV4 {
                op: v.op,
                dtype: v.dtype,
                contract: K::of(&v.contract)?,
                tensor_cores: v.tensor_cores,
                conversion: v.conversion,
            })
        });
        Some(SymbolV4 {
            name: s.name.clone(),
            serves: serves.collect::<Option<_>>()?,
            resources_digest: s.resources_digest,
            declaration: match &s.declaration {
                None => None,
                Some(d) => Some(declaration(d)?),
            },
        })
    };
    let module = |m: &ModuleIdentity| -> Option<ModuleV4> {
        Some(ModuleV4 {
            backend: m.backend.clone(),
            kind: m.kind.clone(),
            digest: m.digest,
            compiler: m.compiler.clone(),
            target: m.target.clone(),
            symbols: m.symbols.iter().map(symbol).collect::<Option<_>>()?,
        })
    };
    Some(ContextV4 {
        policy: c.policy,
        permitted_backends: c.permitted_backends.clone(),
        permitted_contracts: pre6::contracts_of(&c.permitted_contracts)?,
        modules: c.modules.iter().map(module).collect::<Option<_>>()?,
        device: c.device.clone(),
        revisions: c.revisions,
    })
}

/// The version-4 form of a trace (for tests of the reader).
#[cfg(test)]
pub(super) fn downgrade(t: &RecordedGemmTrace) -> Option<TraceV4> {
    Some(TraceV4 {
        workload: t.workload.clone(),
        workload_digest: t.workload_digest,
        context: downgrade_context(&t.context)?,
        launch_set: t.launch_set,
        routes: pre6::routes_of(&t.routes)?,
        fingerprints: t.fingerprints.clone(),
        volatile: t.volatile.clone(),
        physical: t.physical.clone(),
        fingerprint_mode: t.fingerprint_mode,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::codec;

    /// A version-4 payload reads as the same trace with no observation,
    /// and is not a version-5 payload (the observation is missing).
    #[test]
    fn a_version_4_payload_reads_with_no_observation() {
        let t = crate::testkit::sample_trace(3);
        let v4 = codec::encode(&downgrade(&t).expect("no pins, no vendor-invariant")).unwrap();
        let read = codec::decode_payload_version(4, &v4, &codec::Limits::default()).unwrap();
        assert_eq!(read, t);
        assert!(read.observation.is_none());
        assert!(codec::decode_payload(&v4, &codec::Limits::default()).is_err());
    }
}
