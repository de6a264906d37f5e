//! Identity of what serves a GEMM: compiler, device, modules, and the live
//! context (`GemmRouteIdentity`) a replay is checked against.

use crate::digest::{Digest, DigestWriter, FieldValue, FieldVisitor, Framed};
use crate::policy::GemmPolicy;
use crate::route::{ContractKind, ModuleKind, PhysicalBackend};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Domain of [`GemmRouteIdentity::digest`].
pub const CONTEXT_DOMAIN: &str = "gemm-audit/context/v1";

/// Which compiler built a kernel, with which options, from which source.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CompilerIdentity {
    /// e.g. `gemm-audit-cpu` or `nvrtc`.
    pub name: String,
    /// e.g. the crate version, or `13.0`.
    pub version: String,
    pub options_digest: Digest,
    pub source_digest: Digest,
}

impl Framed for CompilerIdentity {
    fn visit_fields<V: FieldVisitor>(&self, v: &mut V) {
        v.field("compiler.name", FieldValue::Str(&self.name));
        v.field("compiler.version", FieldValue::Str(&self.version));
        v.field(
            "compiler.options_digest",
            FieldValue::Digest(&self.options_digest),
        );
        v.field(
            "compiler.source_digest",
            FieldValue::Digest(&self.source_digest),
        );
    }
}

impl CompilerIdentity {
    pub(crate) fn strings(&self) -> impl Iterator<Item = &str> {
        [self.name.as_str(), self.version.as_str()].into_iter()
    }
}

/// The device facts that can change output bits. Per-card facts (UUID, CPU
/// model, core count) are not here: they live in [`VolatileMetadata`], so a
/// golden recorded on one machine checks on another of the same class.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DeviceIdentity {
    /// Device class, e.g. `cpu/x86_64` or `NVIDIA H200`.
    pub class: String,
    /// CUDA compute capability (major, minor); absent on the CPU.
    pub compute_capability: Option<[u32; 2]>,
    /// Streaming multiprocessors; 0 on the CPU (not applicable).
    pub multiprocessors: u32,
    /// Driver version; `none` on the CPU.
    pub driver: String,
}

impl Framed for DeviceIdentity {
    fn visit_fields<V: FieldVisitor>(&self, v: &mut V) {
        v.field("device.class", FieldValue::Str(&self.class));
        match self.compute_capability {
            Some([a, b]) => v.field("device.compute_capability", FieldValue::U32x3([a, b, 0])),
            None => v.field("device.compute_capability", FieldValue::Absent),
        }
        v.field(
            "device.multiprocessors",
            FieldValue::U32(self.multiprocessors),
        );
        v.field("device.driver", FieldValue::Str(&self.driver));
    }
}

impl DeviceIdentity {
    pub(crate) fn strings(&self) -> impl Iterator<Item = &str> {
        [self.class.as_str(), self.driver.as_str()].into_iter()
    }
}

/// A loaded module (artifact): its kind, digest, and the symbols it serves.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ModuleIdentity {
    pub kind: ModuleKind,
    pub digest: Digest,
    /// Kernel symbols the module serves, sorted.
    pub symbols: Vec<String>,
}

/// Revisions of the tables that steer route selection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Revisions {
    pub tuning_table: u32,
    pub schedule: u32,
    pub tensor_map: u32,
}

/// The live context: policy, what it permits, compilers, modules, device and
/// revisions. Two contexts are equal only if all of it is.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GemmRouteIdentity {
    pub policy: GemmPolicy,
    /// Backends this context may replay (derived from the policy and what is present).
    pub permitted_backends: Vec<PhysicalBackend>,
    /// Numeric contracts the policy permits, before per-dtype rules.
    pub permitted_contracts: Vec<ContractKind>,
    pub compiler: CompilerIdentity,
    pub modules: Vec<ModuleIdentity>,
    pub device: DeviceIdentity,
    pub revisions: Revisions,
}

impl Framed for GemmRouteIdentity {
    fn visit_fields<V: FieldVisitor>(&self, v: &mut V) {
        self.policy.visit_fields(v);
        let backends: Vec<String> = self
            .permitted_backends
            .iter()
            .map(|b| b.to_string())
            .collect();
        v.field("permitted_backends", FieldValue::StrList(&backends));
        let contracts: Vec<String> = self
            .permitted_contracts
            .iter()
            .map(|c| c.to_string())
            .collect();
        v.field("permitted_contracts", FieldValue::StrList(&contracts));
        self.compiler.visit_fields(v);
        v.field("modules.count", FieldValue::U64(self.modules.len() as u64));
        for m in &self.modules {
            v.field("module.kind", FieldValue::Str(m.kind.as_str()));
            v.field("module.digest", FieldValue::Digest(&m.digest));
            v.field("module.symbols", FieldValue::StrList(&m.symbols));
        }
        self.device.visit_fields(v);
        v.field(
            "revisions.tuning_table",
            FieldValue::U32(self.revisions.tuning_table),
        );
        v.field(
            "revisions.schedule",
            FieldValue::U32(self.revisions.schedule),
        );
        v.field(
            "revisions.tensor_map",
            FieldValue::U32(self.revisions.tensor_map),
        );
    }
}

impl GemmRouteIdentity {
    /// Framed digest of the whole context.
    pub fn digest(&self) -> Digest {
        let mut w = DigestWriter::new(CONTEXT_DOMAIN);
        w.frame(self);
        w.finish()
    }

    /// The module of `kind` whose digest is `digest`, if loaded.
    pub fn module(&self, kind: ModuleKind, digest: &Digest) -> Option<&ModuleIdentity> {
        self.modules
            .iter()
            .find(|m| m.kind == kind && &m.digest == digest)
    }

    pub(crate) fn strings(&self) -> impl Iterator<Item = &str> {
        self.compiler.strings().chain(self.device.strings()).chain(
            self.modules
                .iter()
                .flat_map(|m| m.symbols.iter().map(String::as_str)),
        )
    }
}

/// Per-machine facts kept for people, never digested or compared: CPU model,
/// core count, runtime CPU features, GPU UUID, host name of the recording.
pub type VolatileMetadata = BTreeMap<String, String>;
