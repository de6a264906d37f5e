//! Format version 3, read and converted to the current model.
//!
//! Version 3 is version 4 without what symbols declare: a service had no
//! operand conversion and a symbol no [`SymbolDeclaration`], and contracts
//! are written in the vocabulary of formats 1 to 5 ([`super::pre6`]).
//! Everything else (launch sets, fingerprints, physical nodes, the
//! fingerprint mode) is encoded the same, so a v3 trace's launch-set digest
//! still verifies. The conversion takes each service's operand conversion
//! from the trace's own routes through that symbol (exact widening where
//! no route used it) and leaves every declaration absent: the trace reads,
//! shows and diffs, but replay validation refuses its routes until it is
//! re-recorded, since nothing says what its symbols launch.
//!
//! [`SymbolDeclaration`]: crate::declaration::SymbolDeclaration

use super::{FingerprintMode, OutputFingerprint, RecordedGemmTrace, pre6};
use crate::digest::Digest;
use crate::identity::{
    GemmRouteIdentity, ModuleIdentity, Revisions, Service, SymbolEntry, VolatileMetadata,
};
use crate::launch_set::ResolvedGemmLaunchSet;
use crate::physical::PhysicalNode;
use crate::platform::{CompilerIdentity, DeviceIdentity};
use crate::policy::GemmPolicy;
use crate::route::ResolvedGemmRoute;
use crate::vocab::{DType, GemmOp, ModuleKind, OperandConversion, PhysicalBackend};
use serde::{Deserialize, Serialize};

#[derive(Clone, Serialize, Deserialize)]
pub(super) struct ServiceV3 {
    op: GemmOp,
    dtype: DType,
    contract: pre6::ContractKind,
    tensor_cores: bool,
}

#[derive(Clone, Serialize, Deserialize)]
pub(super) struct SymbolV3 {
    name: String,
    #[serde(deserialize_with = "crate::bounded::services")]
    serves: Vec<ServiceV3>,
    resources_digest: Option<Digest>,
}

#[derive(Clone, Serialize, Deserialize)]
pub(super) struct ModuleV3 {
    backend: PhysicalBackend,
    kind: ModuleKind,
    digest: Digest,
    compiler: CompilerIdentity,
    target: String,
    #[serde(deserialize_with = "crate::bounded::symbols")]
    symbols: Vec<SymbolV3>,
}

/// The context of versions 2 and 3.
#[derive(Clone, Serialize, Deserialize)]
pub(super) struct ContextV3 {
    policy: GemmPolicy,
    #[serde(deserialize_with = "crate::bounded::permitted")]
    permitted_backends: Vec<PhysicalBackend>,
    #[serde(deserialize_with = "crate::bounded::permitted")]
    permitted_contracts: Vec<pre6::ContractKind>,
    #[serde(deserialize_with = "crate::bounded::modules")]
    modules: Vec<ModuleV3>,
    device: DeviceIdentity,
    revisions: Revisions,
}

#[derive(Serialize, Deserialize)]
pub(super) struct TraceV3 {
    pub(super) workload: String,
    pub(super) workload_digest: Digest,
    pub(super) context: ContextV3,
    pub(super) launch_set: ResolvedGemmLaunchSet,
    pub(super) routes: Vec<pre6::Route>,
    pub(super) fingerprints: Vec<OutputFingerprint>,
    #[serde(deserialize_with = "crate::bounded::volatile")]
    pub(super) volatile: VolatileMetadata,
    pub(super) physical: Vec<PhysicalNode>,
    pub(super) fingerprint_mode: FingerprintMode,
}

impl ContextV3 {
    /// The current model of this context, services' conversions taken
    /// from `routes`.
    pub(super) fn upgrade(self, routes: &[ResolvedGemmRoute]) -> GemmRouteIdentity {
        let modules = self
            .modules
            .into_iter()
            .map(|m| {
                let symbols = m
                    .symbols
                    .into_iter()
                    .map(|s| upgrade_symbol(s, &m.kind, &m.digest, routes))
                    .collect();
                ModuleIdentity::new(m.backend, m.kind, m.digest, m.compiler, m.target, symbols)
            })
            .collect();
        GemmRouteIdentity {
            policy: self.policy,
            permitted_backends: self.permitted_backends,
            permitted_contracts: pre6::contracts(self.permitted_contracts),
            modules,
            device: self.device,
            revisions: self.revisions,
            pins: Vec::new(),
        }
    }
}

fn upgrade_symbol(
    s: SymbolV3,
    kind: &ModuleKind,
    digest: &Digest,
    routes: &[ResolvedGemmRoute],
) -> SymbolEntry {
    let through: Vec<&ResolvedGemmRoute> = routes
        .iter()
        .filter(|r| &r.module_kind == kind && &r.artifact_digest == digest)
        .filter(|r| r.kernel_symbol == s.name)
        .collect();
    let mut serves = Vec::with_capacity(s.serves.len());
    for v in s.serves {
        let contract = v.contract.into();
        let mut conversions: Vec<OperandConversion> = through
            .iter()
            .filter(|r| {
                r.op == v.op
                    && r.dtype == v.dtype
                    && r.contract.kind == contract
                    && r.uses_tensor_cores == v.tensor_cores
            })
            .map(|r| r.operand_conversion)
            .collect();
        if conversions.is_empty() {
            conversions.push(OperandConversion::ExactWiden);
        }
        for conversion in conversions {
            serves.push(Service {
                op: v.op,
                dtype: v.dtype,
                contract: contract.clone(),
                tensor_cores: v.tensor_cores,
                conversion,
            });
        }
    }
    serves.sort();
    serves.dedup();
    SymbolEntry {
        name: s.name,
        serves,
        resources_digest: s.resources_digest,
        declaration: None,
    }
}

/// The current model of a version-3 trace.
pub(super) fn upgrade(t: TraceV3) -> RecordedGemmTrace {
    let routes = pre6::routes(t.routes);
    RecordedGemmTrace {
        workload: t.workload,
        workload_digest: t.workload_digest,
        context: t.context.upgrade(&routes),
        launch_set: t.launch_set,
        routes,
        fingerprints: t.fingerprints,
        volatile: t.volatile,
        physical: t.physical,
        fingerprint_mode: t.fingerprint_mode,
        observation: None,
    }
}

/// The version-3 form of a trace (for tests of the reader): services
/// without conversions, symbols without declarations; `None` where a
/// contract has no older form.
#[cfg(test)]
pub(super) fn downgrade_context(c: &GemmRouteIdentity) -> Option<ContextV3> {
    let symbol = |s: &SymbolEntry| -> Option<SymbolV3> {
        let serves = s.serves.iter().map(|v| {
            Some(ServiceV3 {
                op: v.op,
                dtype: v.dtype,
                contract: pre6::ContractKind::of(&v.contract)?,
                tensor_cores: v.tensor_cores,
            })
        });
        Some(SymbolV3 {
            name: s.name.clone(),
            serves: serves.collect::<Option<_>>()?,
            resources_digest: s.resources_digest,
        })
    };
    let module = |m: &ModuleIdentity| -> Option<ModuleV3> {
        Some(ModuleV3 {
            backend: m.backend.clone(),
            kind: m.kind.clone(),
            digest: m.digest,
            compiler: m.compiler.clone(),
            target: m.target.clone(),
            symbols: m.symbols.iter().map(symbol).collect::<Option<_>>()?,
        })
    };
    Some(ContextV3 {
        policy: c.policy,
        permitted_backends: c.permitted_backends.clone(),
        permitted_contracts: pre6::contracts_of(&c.permitted_contracts)?,
        modules: c.modules.iter().map(module).collect::<Option<_>>()?,
        device: c.device.clone(),
        revisions: c.revisions,
    })
}

/// The version-3 form of a trace (for tests of the reader).
#[cfg(test)]
pub(super) fn downgrade(t: &RecordedGemmTrace) -> Option<TraceV3> {
    Some(TraceV3 {
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

    #[test]
    fn a_version_3_payload_reads_with_its_symbols_undeclared() {
        let t = crate::testkit::sample_trace(5);
        let v3 = codec::encode(&downgrade(&t).expect("no vendor-invariant")).unwrap();
        let read = codec::decode_payload_version(3, &v3, &codec::Limits::default()).unwrap();
        // Routes, launch set and fingerprints are untouched: the digest verifies.
        assert_eq!(read.routes, t.routes);
        assert_eq!(read.launch_set, t.launch_set);
        assert_eq!(read.fingerprints, t.fingerprints);
        let symbols = read.context.modules.iter().flat_map(|m| &m.symbols);
        assert!(symbols.clone().all(|s| s.declaration.is_none()));
        // Each route's service, conversion included, survives the upgrade.
        for r in &read.routes {
            let m = &read.context.modules[0];
            assert!(m.symbol(&r.kernel_symbol).unwrap().serves(&Service::of(r)));
        }
        // A plan rebuilds, but replay validation refuses the undeclared symbols.
        let plan = crate::CapturedGemmGraphPlan::from_trace(&read).unwrap();
        let refusal = plan.validate(&read.context).unwrap_err();
        assert_eq!(refusal.change().field, "kernel_symbol");
        assert!(
            refusal.to_string().contains("declares nothing"),
            "{refusal}"
        );
        // The same bytes are not a version-4 payload.
        assert!(codec::decode_payload(&v3, &codec::Limits::default()).is_err());
    }
}
