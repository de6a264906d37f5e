//! gemm-audit: record which kernel served every GEMM, store it, rebuild and
//! check it, refuse drift before launch, and audit output bits.
//!
//! The data flow, one module each: [`digest`] (framed SHA-256), [`route`]
//! and [`identity`] (what ran, where), [`launch_set`], [`policy`],
//! [`trace`] (recorded traces and their files), [`plan`] (captured-graph
//! plans and replay validation), [`backend`] (CPU reference, CUDA),
//! [`workload`], [`recorder`], [`audit`].
//!
//! See `docs/design.md` for the meaning of every object.
//!
//! Record a workload on the CPU reference backend, store it, rebuild its
//! plan, and see a tampered route refused before anything is launched:
//!
//! ```
//! use gemm_audit::backend::{Backend, GemmBackend, cpu::CpuBackend};
//! use gemm_audit::{CapturedGemmGraphPlan, RecordedGemmTrace, recorder, workload::Workload};
//!
//! let backend = Backend::new(CpuBackend::default());
//! let mut w = Workload::builtin("m-sweep").unwrap();
//! w.gemms.truncate(2);
//! let rec = recorder::record(&backend, &w, &mut |_, _| {}).unwrap();
//! assert!(rec.replay.is_identical());
//!
//! // Store and read back: one trace, one encoding.
//! let bytes = rec.trace.to_bytes().unwrap();
//! let stored = RecordedGemmTrace::from_bytes(&bytes).unwrap();
//!
//! // The plan rebuilds only from matching routes, and replays only after validation.
//! let plan = CapturedGemmGraphPlan::from_trace(&stored).unwrap();
//! let mut launched = false;
//! plan.with_validated_launch(backend.context(), "replay", |_| launched = true).unwrap();
//! assert!(launched);
//!
//! // Any change to a route is refused at plan construction, naming what changed.
//! let mut routes = stored.routes.clone();
//! routes[1].kernel_symbol.push_str("_other");
//! let refusal = CapturedGemmGraphPlan::new(stored.manifest(), routes).unwrap_err();
//! assert_eq!(refusal.change().field, "ordered_digest");
//! ```

// `unsafe` lives only in the CUDA backend, the `gemm-audit-cuda` crate.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod backend;
pub mod budget;
pub mod census;

// The model's namespaces and curated root items are this crate's
// vocabulary, each at one path; the crate's own `backend` and `recorder`
// extend the model's of those names.
#[cfg(any(test, feature = "testkit"))]
pub use gemm_audit_model::testkit;
pub use gemm_audit_model::{
    ARGUMENTS_DOMAIN, ArgumentsDigest, BudgetLimit, COMPILER_OPTIONS_DOMAIN, CapturedGemmGraphPlan,
    CompilerIdentity, DType, DeviceIdentity, Digest, Error, F32Policy, FingerprintMode,
    FormatError, GemmOp, GemmPolicy, GemmRouteBuilder, GemmRouteIdentity, HalfPolicy,
    LaunchSetError, ModuleIdentity, OutputFingerprint, PolicyMode, PreparedGemmCaptureManifest,
    RecordedGemmTrace, Refusal, RefusalStage, ResolvedGemmLaunchSet, ResolvedGemmLaunchSetBuilder,
    ResolvedGemmRoute, Result, Revisions, RouteBuildError, Service, SymbolEntry,
    build_resolved_gemm_launch_set,
};
pub use gemm_audit_model::{
    declaration, digest, identity, kernels, launch_set, mutation, physical, pin, plan, policy,
    route, trace, util, vocab,
};

pub mod audit;
pub mod compare;
pub mod diff;
pub mod fleet;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod golden;
pub mod observed;
pub mod profile;
pub mod recorder;
pub mod render;
pub mod report;
pub mod workload;
