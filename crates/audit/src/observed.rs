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
    CompilerIdentity, DeviceIdentity, GemmRouteIdentity, ModuleIdentity, Revisions, SymbolEntry,
    VolatileMetadata,
};
use crate::policy::{F32Policy, GemmPolicy, HalfPolicy, PolicyMode};
use crate::route::{ArgumentsDigest, GemmRouteBuilder, GemmShape, GemmStrides, VendorRoute};
use crate::trace::{FingerprintMode, OutputFingerprint, RecordedGemmTrace};
use crate::vocab::{
    ContractKind, DType, GemmOp, ModuleKind, OperandConversion, OutputOwnership, PhysicalBackend,
};
use crate::workload::{GemmSpec, RouteChoice, Workload};
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

/// One physical kernel (or copy, or memset) bound to a GEMM.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedKernel {
    /// The symbol or the profiler's name of the activity.
    pub name: String,
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
    /// The kernels bound to it, in launch order.
    pub kernels: Vec<ObservedKernel>,
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
        let mut volatile = VolatileMetadata::new();
        volatile.insert(
            format!("{}.version", self.framework.name),
            self.framework.version.clone(),
        );
        RecordedGemmTrace::new(
            self.workload.clone(),
            self.workload_spec().digest(),
            live,
            routes,
            fingerprints,
            volatile,
        )
        .map_err(|e| ObservedError::Build(e.to_string()))
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
        if g.m == 0 || g.k == 0 || g.n == 0 || g.batch == 0 {
            return Err(ObservedError::Invalid(format!(
                "GEMM {:?}: empty shape m={} k={} n={} batch={}",
                g.name, g.m, g.k, g.n, g.batch
            )));
        }
        // The GEMM's launch, as the route frames it: the first kernel's
        // geometry, and every kernel's name and geometry in the arguments.
        let first = g.kernels.first();
        let mut args = ArgumentsDigest::new(&g.op_name)
            .u64("batch", g.batch)
            .u64("lda", g.lda)
            .u64("ldb", g.ldb)
            .u64("ldc", g.ldc);
        for k in &g.kernels {
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
            physical_kernels: g.kernels.iter().map(|k| k.name.clone()).collect(),
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
                first.map_or([0; 3], |k| k.grid),
                first.map_or([0; 3], |k| k.block),
                first.map_or(0, |k| k.shared_memory),
                args.finish(),
            )
            .vendor(vendor)
            .build()
            .map_err(|e| ObservedError::Build(format!("GEMM {:?}: {e}", g.name)))
    }
}
