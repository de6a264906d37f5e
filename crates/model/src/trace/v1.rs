//! Format version 1, read and converted to the current model.
//!
//! Version 1 stored one compiler for the whole context and modules as bare
//! symbol lists. Contracts decode in the frozen vocabulary of formats 1 to
//! 5 ([`super::pre6`]); launch sets, fingerprints and physical nodes, and
//! every other route field, are encoded as today (vocabulary variants were
//! only appended), so a v1 trace's launch-set digest still verifies. The
//! conversion gives every module the v1 context's compiler, derives its
//! backend from its kind, its target and each symbol's services from the
//! trace's own routes through it.

use super::RecordedGemmTrace;
use super::pre6;
use crate::digest::Digest;
use crate::error::FormatError;
use crate::identity::{
    GemmRouteIdentity, ModuleIdentity, Revisions, Service, SymbolEntry, VolatileMetadata,
};
use crate::launch_set::ResolvedGemmLaunchSet;
use crate::physical::PhysicalNode;
use crate::platform::{CompilerIdentity, DeviceIdentity};
use crate::policy::GemmPolicy;
use crate::route::ResolvedGemmRoute;
use crate::trace::OutputFingerprint;
use crate::vocab::{ModuleKind, PhysicalBackend};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
pub(super) struct ModuleV1 {
    kind: ModuleKind,
    digest: Digest,
    #[serde(deserialize_with = "crate::bounded::symbols")]
    symbols: Vec<String>,
}

#[derive(Serialize, Deserialize)]
pub(super) struct ContextV1 {
    policy: GemmPolicy,
    #[serde(deserialize_with = "crate::bounded::permitted")]
    permitted_backends: Vec<PhysicalBackend>,
    #[serde(deserialize_with = "crate::bounded::permitted")]
    permitted_contracts: Vec<pre6::ContractKind>,
    compiler: CompilerIdentity,
    #[serde(deserialize_with = "crate::bounded::modules")]
    modules: Vec<ModuleV1>,
    device: DeviceIdentity,
    revisions: Revisions,
}

#[derive(Serialize, Deserialize)]
pub(super) struct TraceV1 {
    workload: String,
    workload_digest: Digest,
    context: ContextV1,
    launch_set: ResolvedGemmLaunchSet,
    routes: Vec<pre6::Route>,
    fingerprints: Vec<OutputFingerprint>,
    #[serde(deserialize_with = "crate::bounded::volatile")]
    volatile: VolatileMetadata,
    physical: Vec<PhysicalNode>,
}

fn inconsistent(what: String) -> FormatError {
    FormatError::Inconsistent(format!("version 1 trace: {what}"))
}

fn builtin_backend(kind: &ModuleKind) -> Result<PhysicalBackend, FormatError> {
    Ok(match kind {
        ModuleKind::CpuReference => PhysicalBackend::CpuReference,
        ModuleKind::Nvrtc => PhysicalBackend::CudaNvrtc,
        ModuleKind::Cublas => PhysicalBackend::Cublas,
        ModuleKind::CublasLt => PhysicalBackend::CublasLt,
        ModuleKind::Engine(n) => {
            return Err(inconsistent(format!(
                "engine module kind {n} did not exist in version 1"
            )));
        }
    })
}

/// Converts a decoded version-1 trace to the current model.
pub(super) fn upgrade(t: TraceV1) -> Result<RecordedGemmTrace, FormatError> {
    // Engine vocabulary did not exist in version 1: such a file is forged.
    for (i, r) in t.routes.iter().enumerate() {
        if matches!(r.backend, PhysicalBackend::Engine { .. })
            || matches!(r.module_kind, ModuleKind::Engine(_))
            || r.contract.kind.is_engine()
        {
            return Err(inconsistent(format!(
                "route {i} uses engine vocabulary, which version 1 did not have"
            )));
        }
    }
    let ctx = t.context;
    if ctx
        .permitted_contracts
        .iter()
        .any(pre6::ContractKind::is_engine)
        || ctx
            .permitted_backends
            .iter()
            .any(|b| matches!(b, PhysicalBackend::Engine { .. }))
    {
        return Err(inconsistent(
            "the context permits engine vocabulary, which version 1 did not have".into(),
        ));
    }
    let routes = pre6::routes(t.routes);
    let mut modules = Vec::with_capacity(ctx.modules.len());
    for m in ctx.modules {
        let backend = builtin_backend(&m.kind)?;
        let through: Vec<&ResolvedGemmRoute> = routes
            .iter()
            .filter(|r| r.module_kind == m.kind && r.artifact_digest == m.digest)
            .collect();
        let target = through
            .first()
            .map(|r| r.compilation_target.clone())
            .unwrap_or_default();
        // The services of each symbol, from the routes through it: indexed
        // once, so a large file costs routes + symbols, not their product.
        let mut services: std::collections::HashMap<&str, Vec<Service>> =
            std::collections::HashMap::new();
        for r in &through {
            services
                .entry(r.kernel_symbol.as_str())
                .or_default()
                .push(Service {
                    op: r.op,
                    dtype: r.dtype,
                    contract: r.contract.kind.clone(),
                    tensor_cores: r.uses_tensor_cores,
                    conversion: r.operand_conversion,
                });
        }
        let symbols = m
            .symbols
            .into_iter()
            .map(|name| {
                let mut entry = SymbolEntry::new(name);
                entry.serves = services
                    .get(entry.name.as_str())
                    .cloned()
                    .unwrap_or_default();
                entry.serves.sort();
                entry.serves.dedup();
                entry
            })
            .collect();
        modules.push(ModuleIdentity::new(
            backend,
            m.kind,
            m.digest,
            ctx.compiler.clone(),
            target,
            symbols,
        ));
    }
    let context = GemmRouteIdentity {
        policy: ctx.policy,
        permitted_backends: ctx.permitted_backends,
        permitted_contracts: pre6::contracts(ctx.permitted_contracts),
        modules,
        device: ctx.device,
        revisions: ctx.revisions,
        pins: Vec::new(),
    };
    Ok(RecordedGemmTrace {
        workload: t.workload,
        workload_digest: t.workload_digest,
        context,
        launch_set: t.launch_set,
        routes,
        fingerprints: t.fingerprints,
        volatile: t.volatile,
        physical: t.physical,
        fingerprint_mode: super::FingerprintMode::Strong,
        observation: None,
    })
}
