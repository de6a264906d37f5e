//! gemm-audit: record which kernel served every GEMM, store it, rebuild and
//! check it, refuse drift before launch, and audit output bits.
//!
//! The data flow, one module each: [`digest`] (framed SHA-256), [`route`]
//! and [`identity`] (what ran, where), [`launch_set`], [`policy`],
//! [`trace`] (recorded traces and their files), [`plan`] (captured-graph
//! plans and replay validation), [`backend`] (CPU reference, CUDA),
//! [`workload`], [`recorder`], [`audit`].
//!
//! See `shared/design/semantics.md` for the meaning of every object.

pub mod backend;
pub mod digest;
pub mod error;
pub mod identity;
pub mod launch_set;
pub mod physical;
pub mod plan;
pub mod policy;
pub mod route;
pub mod trace;

pub use digest::Digest;
pub use error::{Error, FormatError, LaunchSetError, Refusal, RefusalStage, Result};
pub use identity::{
    CompilerIdentity, DeviceIdentity, GemmRouteIdentity, ModuleIdentity, Revisions,
};
pub use launch_set::{
    ResolvedGemmLaunchSet, ResolvedGemmLaunchSetBuilder, build_resolved_gemm_launch_set,
};
pub use plan::CapturedGemmGraphPlan;
pub use policy::{F32Policy, GemmPolicy, HalfPolicy, PolicyMode};
pub use route::{DType, GemmOp, ResolvedGemmRoute};
pub use trace::{OutputFingerprint, PreparedGemmCaptureManifest, RecordedGemmTrace};
pub mod mutation;

pub mod audit;
pub mod diff;
#[doc(hidden)]
pub mod fuzzing;
pub mod golden;
pub mod recorder;
pub mod report;
#[doc(hidden)]
pub mod testkit;
pub mod workload;
