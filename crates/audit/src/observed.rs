//! GEMMs observed in another framework's step, written as a gemm-audit
//! trace.
//!
//! A framework that picks its own kernels (PyTorch through cuBLAS and
//! cuBLASLt) cannot be replayed by gemm-audit, but what it ran can be
//! recorded and gated: which op served each GEMM, its shape, layout and
//! dtype, the physical kernels the profiler bound to it (a split-K GEMM
//! and its reduce kernel are two kernels of one GEMM), the bits of its
//! output, and the determinism-relevant state of the framework. The Python
//! package's `gemm_audit.torch.record` collects an [`ObservedStep`];
//! [`ObservedStep::trace`] turns it into a [`RecordedGemmTrace`] of vendor
//! routes, so `diff`, `check --golden`, `compare` and the reports handle it
//! unchanged. Nothing here runs a GEMM.
//!
//! The trace's context is built from what was observed: one module for
//! the framework's BLAS (its digest frames the framework, its libraries
//! and every state knob, so flipping one is an identity change), with one
//! symbol per op seen, under the vendor-fast policy mode. A route's
//! `kernel_symbol` is the op (`aten::mm`, as a cuBLAS route's is the entry
//! point it called) and `vendor.physical_kernels` the kernels that ran.

use crate::declaration::{BkRule, SplitRule, SymbolDeclaration, VendorPermits};
use crate::digest::{DigestWriter, FieldValue};
use crate::identity::{
    GemmRouteIdentity, ModuleIdentity, Revisions, SymbolEntry, VolatileMetadata,
};
use crate::kernels::{GemmSpec, RouteChoice};
use crate::policy::{F32Policy, GemmPolicy, HalfPolicy, PolicyMode};
use crate::route::{GemmShape, GemmStrides, VendorRoute};
use crate::trace::{
    FingerprintMode, Observation, ObservedRoute, OutputFingerprint, RecordedGemmTrace,
};
use crate::vocab::{
    ContractKind, DType, GemmOp, ModuleKind, OperandConversion, OutputOwnership, PhysicalBackend,
};
use crate::workload::Workload;
use crate::{ArgumentsDigest, GemmRouteBuilder};
use crate::{CompilerIdentity, DeviceIdentity};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Why an observed step could not become a trace.
#[derive(Debug, thiserror::Error)]
pub enum ObservedError {
    /// The step description is not valid JSON of an [`ObservedStep`].
    #[error("observed step: {0}")]
    Json(#[from] serde_json::Error),
    /// A value of the step is out of range or inconsistent.
    #[error("observed step: {0}")]
    Invalid(String),
    /// The routes or trace could not be built.
    #[error("observed step: {0}")]
    Build(String),
}

/// The framework and the libraries it called.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedFramework {
    /// Its name, e.g. `torch`.
    pub name: String,
    /// Its version, e.g. `2.11.0+cu130`.
    pub version: String,
    /// Library names and versions it ran GEMMs through, e.g.
    /// `{"cuda": "13.0", "cublas": "13.1.0", "cublaslt": "13.1.0"}`.
    #[serde(default)]
    pub libraries: BTreeMap<String, String>,
    /// Every determinism-relevant setting, e.g. `allow_tf32`,
    /// `use_deterministic_algorithms`, `CUBLAS_WORKSPACE_CONFIG` (unset
    /// ones as `unset`): all of them are part of the trace's identity.
    #[serde(default)]
    pub state: BTreeMap<String, String>,
}

/// What a GPU activity is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ActivityKind {
    /// A kernel.
    #[default]
    Kernel,
    /// A memory copy.
    Memcpy,
    /// A memory fill.
    Memset,
}

impl std::fmt::Display for ActivityKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ActivityKind::Kernel => "kernel",
            ActivityKind::Memcpy => "memcpy",
            ActivityKind::Memset => "memset",
        })
    }
}

/// One physical kernel (or copy, or memset) bound to a GEMM.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedKernel {
    /// The symbol or the profiler's name of the activity.
    pub name: String,
    /// Kernel, copy or fill. Copies and fills are kept beside a GEMM's
    /// kernels, never as its launch.
    #[serde(default)]
    pub kind: ActivityKind,
    /// Grid dimensions; zero when the profiler does not say.
    #[serde(default)]
    pub grid: [u32; 3],
    /// Block dimensions; zero when the profiler does not say.
    #[serde(default)]
    pub block: [u32; 3],
    /// Dynamic shared memory in bytes.
    #[serde(default)]
    pub shared_memory: u32,
}

/// One GEMM-family op of the step, in launch order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedGemm {
    /// Its name in the step (e.g. `aten::addmm#3`): unique within the step.
    pub name: String,
    /// The op that served it (e.g. `aten::addmm`).
    pub op_name: String,
    /// Which operands are stored transposed.
    pub op: GemmOp,
    /// Element type of A, B and C.
    pub dtype: DType,
    /// C is `m x n` (per batch), reduced over `k`.
    pub m: u64,
    /// The reduced extent.
    pub k: u64,
    /// Columns of C.
    pub n: u64,
    /// Batch count (1 for mm / addmm).
    #[serde(default = "one")]
    pub batch: u64,
    /// Leading dimensions of A, B and C in elements.
    pub lda: u64,
    /// See `lda`.
    pub ldb: u64,
    /// See `lda`.
    pub ldc: u64,
    /// The kernels bound to it, in launch order: its launch (a copy or
    /// fill among them is moved beside it).
    pub kernels: Vec<ObservedKernel>,
    /// Copies, fills and kernels of its child ops (an `addmm` copying its
    /// C first), kept beside its kernels without becoming its launch.
    #[serde(default)]
    pub beside: Vec<ObservedKernel>,
    /// Where it ran: `cuda:N`, or `cpu`; unknown when absent.
    #[serde(default)]
    pub device: Option<String>,
    /// For a GEMM no GEMM op owns (a compiled region, a graph replay), the
    /// region its kernels were launched from.
    #[serde(default)]
    pub region: Option<String>,
    /// For a GEMM replayed from a CUDA graph, which graph and replay, as
    /// the recorder names them (`graph 0 (captured in decode@b8), replay
    /// 0`; an imported profile's graph launch region, `cudaGraphLaunch in
    /// step`); absent for a GEMM launched eagerly. Kept in the trace's
    /// observation, never in the route: a GEMM replayed from a graph
    /// serves the same route as the same GEMM launched eagerly.
    #[serde(default)]
    pub graph: Option<String>,
    /// Whether the op's shapes, strides and types were recorded (a GEMM
    /// without them has op and dtype `unrecorded` and a zero shape).
    #[serde(default = "yes")]
    pub shapes_recorded: bool,
    /// What else was observed of the call that can change its bits, as
    /// name and value (operand types, `alpha` and `beta`, C's shape).
    #[serde(default)]
    pub facts: Facts,
}

/// Named facts of a call, in name order: a map in JSON, a sorted list in
/// memory (a profile holds thousands of GEMMs with two or three facts
/// each, where a map's nodes would cost several times the facts).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts(Vec<(String, String)>);

impl Facts {
    /// Sets `name` to `value`, replacing an earlier value.
    pub fn insert(&mut self, name: impl Into<String>, value: impl Into<String>) {
        let name = name.into();
        match self.0.binary_search_by(|(k, _)| k.as_str().cmp(&name)) {
            Ok(i) => self.0[i].1 = value.into(),
            Err(i) => self.0.insert(i, (name, value.into())),
        }
    }

    /// The value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(k, _)| k.as_str().cmp(name))
            .ok()
            .map(|i| self.0[i].1.as_str())
    }

    /// Every fact, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Serialize for Facts {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.iter())
    }
}

impl<'de> Deserialize<'de> for Facts {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let map = BTreeMap::<String, String>::deserialize(d)?;
        Ok(Facts(map.into_iter().collect()))
    }
}

fn yes() -> bool {
    true
}

fn one() -> u64 {
    1
}

/// What a framework's step ran: the input to [`ObservedStep::trace`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedStep {
    /// The step's name (the trace's workload, e.g. `decode@b8`).
    pub workload: String,
    /// The framework and its state.
    pub framework: ObservedFramework,
    /// The device the step ran on.
    pub device: DeviceIdentity,
    /// The GEMMs, in launch order.
    pub gemms: Vec<ObservedGemm>,
    /// What observed the step and what became of its activities; the
    /// trace's [`Observation`] (its per-GEMM part is filled from `gemms`).
    /// Absent: the Python recorder.
    #[serde(default)]
    pub observation: Option<Observation>,
    /// Per-machine facts (the GPU's UUID, ordinal and bus id, the CPU's
    /// model): the trace's volatile metadata, kept for people and for
    /// `compare`'s one vote per device, never compared.
    #[serde(default)]
    pub volatile: BTreeMap<String, String>,
}

impl ObservedStep {
    /// Parses a step from its JSON description.
    pub fn from_json(json: &str) -> Result<ObservedStep, ObservedError> {
        Ok(serde_json::from_str(json)?)
    }

    /// The trace of this step: one vendor route per GEMM, in order, and
    /// `outputs[i]` (the storage bytes of GEMM `i`'s output) fingerprinted
    /// strongly. Fingerprints take input seed 0: a framework's inputs are
    /// its own, so two traces agree only for the same inputs.
    pub fn trace(&self, outputs: &[Vec<u8>]) -> Result<RecordedGemmTrace, ObservedError> {
        if outputs.len() != self.gemms.len() {
            return Err(ObservedError::Invalid(format!(
                "{} outputs for {} GEMMs",
                outputs.len(),
                self.gemms.len()
            )));
        }
        self.trace_fingerprinted(
            outputs
                .iter()
                .map(|o| OutputFingerprint::with_mode(FingerprintMode::Strong, 0, o))
                .collect(),
        )
    }

    /// [`ObservedStep::trace`] with each output's strong fingerprint
    /// already computed (`OutputFingerprint::of(0, bytes)`), e.g. on the device where the
    /// output lives (`ForeignFingerprinter` of the CUDA backend).
    pub fn trace_fingerprinted(
        &self,
        fingerprints: Vec<OutputFingerprint>,
    ) -> Result<RecordedGemmTrace, ObservedError> {
        if fingerprints.len() != self.gemms.len() {
            return Err(ObservedError::Invalid(format!(
                "{} outputs for {} GEMMs",
                fingerprints.len(),
                self.gemms.len()
            )));
        }
        if let Some(i) = fingerprints.iter().position(|f| f.input_seed != 0) {
            return Err(ObservedError::Invalid(format!(
                "the fingerprint of GEMM {:?} has input seed {}, not 0",
                self.gemms[i].name, fingerprints[i].input_seed
            )));
        }
        if self.gemms.is_empty() {
            return Err(ObservedError::Invalid(format!(
                "step {:?} ran no GEMM-family op",
                self.workload
            )));
        }
        let live = self.context()?;
        let module = &live.modules[0];
        let routes = self
            .gemms
            .iter()
            .map(|g| self.route(&live, module, g))
            .collect::<Result<Vec<_>, _>>()?;
        let mut volatile: VolatileMetadata = self.volatile.clone();
        volatile.insert(
            format!("{}.version", self.framework.name),
            self.framework.version.clone(),
        );
        if let Some(o) = &self.observation {
            if !o.file.is_empty() {
                volatile.insert("profile.file".into(), o.file.clone());
            }
            if let Some(r) = o.rank {
                volatile.insert("profile.rank".into(), r.to_string());
            }
            if let Some(w) = o.world_size {
                volatile.insert("profile.world_size".into(), w.to_string());
            }
        }
        let mut trace = RecordedGemmTrace::new(
            self.workload.clone(),
            self.workload_spec().digest(),
            live,
            routes,
            fingerprints,
            volatile,
        )
        .map_err(|e| ObservedError::Build(e.to_string()))?;
        trace.observation = Some(self.observation());
        Ok(trace)
    }

    /// The trace of this step with no outputs observed (an imported
    /// profile): every fingerprint a placeholder of the output's size.
    pub fn trace_unobserved(&self) -> Result<RecordedGemmTrace, ObservedError> {
        let placeholders = self
            .gemms
            .iter()
            .map(|g| OutputFingerprint::not_observed(g.output_bytes()))
            .collect();
        Ok(self
            .trace_fingerprinted(placeholders)?
            .in_mode(FingerprintMode::NotObserved))
    }

    /// The trace's observation: the step's own, or the recorder's, with
    /// one entry per GEMM.
    fn observation(&self) -> Observation {
        let mut o = self.observation.clone().unwrap_or_else(|| Observation {
            source: "gemm-audit-torch".into(),
            bound_kernels: self
                .gemms
                .iter()
                .map(|g| g.launch_kernels().count() as u64)
                .sum(),
            beside_gemms: self
                .gemms
                .iter()
                .map(|g| g.beside_kernels().count() as u64)
                .sum(),
            ..Observation::default()
        });
        o.gemms = self
            .gemms
            .iter()
            .map(|g| ObservedRoute {
                device: g.device.clone().unwrap_or_default(),
                region: g.region.clone(),
                shapes_recorded: g.shapes_recorded,
                batch: g.batch,
                beside: g
                    .beside_kernels()
                    .take(crate::trace::MAX_LISTED)
                    .map(|k| bounded_name(&format!("{}: {}", k.kind, k.name)).into_owned())
                    .collect(),
                graph: g.graph.as_deref().map(|l| bounded_name(l).into_owned()),
            })
            .collect();
        o
    }

    /// The GEMMs as a workload (its digest is the trace's workload digest).
    fn workload_spec(&self) -> Workload {
        Workload {
            name: self.workload.clone(),
            description: format!(
                "{} {} step, recorded by gemm-audit",
                self.framework.name, self.framework.version
            ),
            seed: 0,
            policy: Some(PolicyMode::CublasFast),
            gemms: self
                .gemms
                .iter()
                .map(|g| {
                    let mut s =
                        GemmSpec::new(g.name.clone(), g.dtype, g.m, g.k, g.n, RouteChoice::Cublas);
                    s.op = g.op;
                    s
                })
                .collect(),
        }
    }

    /// The framework's BLAS as a module, and the context around it.
    fn context(&self) -> Result<GemmRouteIdentity, ObservedError> {
        let f = &self.framework;
        let name = |s: &str| {
            s.chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
                .collect::<String>()
        };
        let backend = PhysicalBackend::engine(&name(&f.name), true)
            .map_err(|e| ObservedError::Invalid(format!("framework name {:?}: {e}", f.name)))?;
        let kind = ModuleKind::engine(&format!("{}-blas", name(&f.name)))
            .map_err(|e| ObservedError::Invalid(format!("framework name {:?}: {e}", f.name)))?;
        let mut w = DigestWriter::new("gemm-audit/observed-module/v1");
        w.field("framework", FieldValue::Str(&f.name));
        w.field("version", FieldValue::Str(&f.version));
        for (k, v) in &f.libraries {
            w.field("library", FieldValue::Str(k));
            w.field("version", FieldValue::Str(v));
        }
        for (k, v) in &f.state {
            w.field("state", FieldValue::Str(k));
            w.field("value", FieldValue::Str(v));
        }
        let digest = w.finish();
        let mut ops: Vec<(&str, GemmOp, DType)> = self
            .gemms
            .iter()
            .map(|g| (g.op_name.as_str(), g.op, g.dtype))
            .collect();
        ops.sort_by_key(|(s, op, d)| (s.to_string(), op.as_str(), d.as_str()));
        ops.dedup();
        let library = self.library();
        let mut symbols: BTreeMap<&str, SymbolEntry> = BTreeMap::new();
        for (sym, op, dtype) in ops {
            let entry = symbols.remove(sym).unwrap_or_else(|| {
                // What the framework permits its calls, as far as it says:
                // no split count, reduction scheme or workspace exposed.
                let permits = VendorPermits {
                    library_version: library.clone(),
                    max_split_k: -1,
                    reduction_schemes: vec![-1],
                    max_workspace_bytes: 0,
                    configurations: Vec::new(),
                };
                SymbolEntry::new(sym).declaring(
                    SymbolDeclaration::new(
                        "vendor-defined",
                        "vendor-defined",
                        OutputOwnership::VendorDefined,
                        SplitRule::Vendor,
                        BkRule::Fixed(0),
                    )
                    .with_vendor(permits),
                )
            });
            let entry = entry.serving_converted(
                &[op],
                &[dtype],
                &ContractKind::VendorFast,
                true,
                OperandConversion::VendorDefined,
            );
            symbols.insert(sym, entry);
        }
        // The version names every knob, so a diff of two contexts says
        // which one moved (the digest alone would only say that one did).
        let knobs = f
            .state
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ");
        let compiler = CompilerIdentity {
            name: f.name.clone(),
            version: if knobs.is_empty() {
                library
            } else {
                format!("{library}; {knobs}")
            },
            options_digest: digest,
            source_digest: digest,
        };
        let target = match self.device.compute_capability {
            Some([a, b]) => format!("sm_{a}{b}"),
            None => "cpu".to_string(),
        };
        let module = ModuleIdentity::new(
            backend,
            kind,
            digest,
            compiler,
            target,
            symbols.into_values().collect(),
        );
        let policy = GemmPolicy {
            mode: PolicyMode::CublasFast,
            tensor_cores: true,
            f32: F32Policy::Tf32,
            half: HalfPolicy::StreamK,
        };
        Ok(GemmRouteIdentity::new(
            policy,
            vec![module],
            self.device.clone(),
            Revisions {
                tuning_table: 1,
                schedule: 1,
                tensor_map: 0,
            },
        ))
    }

    /// The framework and its libraries, e.g. `torch 2.11.0+cu130, cublas
    /// 13.1.0, cuda 13.0`: every route's `vendor.library_version`.
    fn library(&self) -> String {
        let f = &self.framework;
        std::iter::once(format!("{} {}", f.name, f.version))
            .chain(f.libraries.iter().map(|(k, v)| format!("{k} {v}")))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The vendor route of one observed GEMM.
    fn route(
        &self,
        live: &GemmRouteIdentity,
        module: &ModuleIdentity,
        g: &ObservedGemm,
    ) -> Result<crate::ResolvedGemmRoute, ObservedError> {
        let shape = [g.m, g.k, g.n];
        let unrecorded = !g.shapes_recorded && shape == [0, 0, 0];
        if g.batch == 0 || (!unrecorded && shape.contains(&0)) {
            return Err(ObservedError::Invalid(format!(
                "GEMM {:?}: empty shape m={} k={} n={} batch={} (a GEMM whose shapes were not recorded says shapes_recorded: false and has m, k and n 0)",
                g.name, g.m, g.k, g.n, g.batch
            )));
        }
        // The GEMM's launch, as the route frames it: the first kernel's
        // geometry (one block of one thread where no kernel ran: a GEMM on
        // the host), and every kernel's name and geometry, what ran beside
        // them and every other observed fact in the arguments.
        let launch: Vec<&ObservedKernel> = g.launch_kernels().collect();
        let first = launch.first();
        let at_least_one = |d: [u32; 3]| d.map(|x| x.max(1));
        let mut args = ArgumentsDigest::new(&g.op_name)
            .u64("batch", g.batch)
            .u64("lda", g.lda)
            .u64("ldb", g.ldb)
            .u64("ldc", g.ldc);
        for k in &launch {
            args = args
                .bytes("kernel", k.name.as_bytes())
                .u64("grid.x", k.grid[0].into())
                .u64("grid.y", k.grid[1].into())
                .u64("grid.z", k.grid[2].into())
                .u64("block.x", k.block[0].into())
                .u64("block.y", k.block[1].into())
                .u64("block.z", k.block[2].into())
                .u64("shared", k.shared_memory.into());
        }
        for k in g.beside_kernels() {
            args = args.bytes(&format!("beside.{}", k.kind), k.name.as_bytes());
        }
        if let Some(d) = &g.device {
            args = args.bytes("device", d.as_bytes());
        }
        if let Some(r) = &g.region {
            args = args.bytes("region", r.as_bytes());
        }
        // `graph` is left out on purpose: how the GEMM was launched (eager
        // or replayed from a graph) is not what serves it.
        for (k, v) in g.facts.iter() {
            args = args.bytes(&format!("fact.{k}"), v.as_bytes());
        }
        let vendor = VendorRoute {
            library_version: self.library(),
            algorithm_id: -1,
            tile_id: -1,
            split_k: -1,
            reduction_scheme: -1,
            stages_id: -1,
            swizzle: -1,
            inner_shape_id: None,
            cluster_shape_id: None,
            workspace_bytes: 0,
            physical_kernels: launch
                .iter()
                .map(|k| bounded_name(&k.name).into_owned())
                .collect(),
        };
        GemmRouteBuilder::new(live, module, &g.op_name, &g.name)
            .problem(
                g.op,
                g.dtype,
                GemmShape {
                    m: g.m,
                    k: g.k,
                    n: g.n,
                },
            )
            .strides(GemmStrides {
                lda: g.lda,
                ldb: g.ldb,
                ldc: g.ldc,
            })
            .contract(ContractKind::VendorFast, 1)
            .tensor_cores(true)
            .numerics(
                OperandConversion::VendorDefined,
                OutputOwnership::VendorDefined,
            )
            .launch(
                first.map_or([1; 3], |k| at_least_one(k.grid)),
                first.map_or([1; 3], |k| at_least_one(k.block)),
                first.map_or(0, |k| k.shared_memory),
                args.finish(),
            )
            .vendor(vendor)
            .build()
            .map_err(|e| ObservedError::Build(format!("GEMM {:?}: {e}", g.name)))
    }
}

impl ObservedGemm {
    /// Its launch: the kernels bound to it (copies and fills excluded).
    pub fn launch_kernels(&self) -> impl Iterator<Item = &ObservedKernel> {
        self.kernels
            .iter()
            .filter(|k| k.kind == ActivityKind::Kernel)
    }

    /// What ran beside its kernels: copies and fills among `kernels`, then
    /// `beside`.
    pub fn beside_kernels(&self) -> impl Iterator<Item = &ObservedKernel> {
        self.kernels
            .iter()
            .filter(|k| k.kind != ActivityKind::Kernel)
            .chain(&self.beside)
    }

    /// The output's size in bytes, where the shape and dtype say (0 where
    /// they do not).
    pub fn output_bytes(&self) -> u64 {
        let size = crate::kernels::element_size(self.dtype) as u64;
        self.m
            .saturating_mul(self.n)
            .saturating_mul(self.batch)
            .saturating_mul(size)
    }
}

/// Longest name a trace keeps whole; a longer one (a C++ template kernel
/// name can run to kilobytes) is cut and names the whole one's digest, so
/// every reader's string limit holds and two long names still differ.
pub const MAX_KEPT_NAME_BYTES: usize = 1024;

/// `name`, or its first bytes and the SHA-256 of the whole when it is
/// longer than [`MAX_KEPT_NAME_BYTES`].
pub fn bounded_name(name: &str) -> std::borrow::Cow<'_, str> {
    if name.len() <= MAX_KEPT_NAME_BYTES {
        return std::borrow::Cow::Borrowed(name);
    }
    let mut cut = MAX_KEPT_NAME_BYTES - 96;
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    std::borrow::Cow::Owned(format!(
        "{}... [{} bytes, sha256 {}]",
        &name[..cut],
        name.len(),
        crate::Digest::sha256(name.as_bytes()).to_hex()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const STEP: &str = r#"{
      "workload": "decode@b8",
      "framework": {"name": "torch", "version": "2.11.0", "state": {"allow_tf32": "False"}},
      "device": {"class": "NVIDIA H200", "compute_capability": [9, 0], "multiprocessors": 132, "driver": "580"},
      "gemms": [
        {"name": "aten::mm#0", "op_name": "aten::mm", "op": "nn", "dtype": "bf16", "m": 8, "k": 64, "n": 32,
         "lda": 64, "ldb": 32, "ldc": 32, "device": "cuda:0",
         "kernels": [{"name": "nvjet_a", "grid": [4, 1, 1], "block": [384, 1, 1]}]},
        {"name": "aten::mm#1", "op_name": "aten::mm", "op": "nn", "dtype": "bf16", "m": 8, "k": 32, "n": 64,
         "lda": 32, "ldb": 64, "ldc": 64, "device": "cuda:0",
         "kernels": [{"name": "nvjet_b", "grid": [8, 1, 1], "block": [384, 1, 1]}]}
      ]
    }"#;

    /// A GEMM replayed from a graph keeps its label in the observation
    /// (bounded), and serves the same routes, context and workload as the
    /// same GEMMs launched eagerly: the label frames into no digest.
    #[test]
    fn a_graph_label_is_observed_never_digested() {
        let eager = ObservedStep::from_json(STEP).unwrap();
        assert!(eager.gemms.iter().all(|g| g.graph.is_none()));
        let mut replay = eager.clone();
        replay.gemms[0].graph = Some("graph 0 (captured in decode@b8), replay 0".into());
        replay.gemms[1].graph = Some("x".repeat(5000));
        let outputs = vec![vec![1u8; 512], vec![2u8; 1024]];
        let (e, r) = (
            eager.trace(&outputs).unwrap(),
            replay.trace(&outputs).unwrap(),
        );
        assert_eq!(e.routes, r.routes);
        assert_eq!(e.launch_set, r.launch_set);
        assert_eq!(e.context.digest(), r.context.digest());
        assert_eq!(e.workload_digest, r.workload_digest);
        let graphs = |t: &RecordedGemmTrace| -> Vec<Option<String>> {
            let o = t.observation.as_ref().unwrap();
            o.gemms.iter().map(|g| g.graph.clone()).collect()
        };
        assert_eq!(graphs(&e), [None, None]);
        let labels = graphs(&r);
        assert_eq!(
            labels[0].as_deref(),
            Some("graph 0 (captured in decode@b8), replay 0")
        );
        let long = labels[1].as_deref().unwrap();
        assert!(long.len() <= MAX_KEPT_NAME_BYTES, "{}", long.len());
        assert!(long.contains("[5000 bytes, sha256 "), "{long}");
        // The replay trace writes and reads back with its labels.
        assert_eq!(
            RecordedGemmTrace::from_bytes(&r.to_bytes().unwrap()).unwrap(),
            r
        );
    }
}
