//! gemm-audit's model: what a GEMM launch is ([`route`], [`identity`],
//! [`declaration`]), what may replay ([`policy`]), launch sets and
//! captured-graph plans ([`launch_set`], [`plan`], [`physical`]), recorded
//! traces and their files ([`trace`]), and the engine-facing recorder
//! ([`recorder`]).
//!
//! This crate knows no backend and no command line: backends, workloads
//! and the audit live in `gemm-audit`, which re-exports every module here
//! at the same path (`gemm_audit::route`, `gemm_audit::plan`, ...). See
//! `docs/design.md` for the meaning of every object.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod backend;
pub mod bounded;
pub mod builder;
pub mod declaration;
pub mod digest;
pub mod error;
pub mod fileio;
pub mod identity;
pub mod kernels;
pub mod launch_set;
pub mod mutation;
pub mod parallel;
pub mod physical;
pub mod pin;
pub mod plan;
pub mod platform;
pub mod policy;
pub mod recorder;
pub mod route;
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod trace;
pub mod vocab;

pub use digest::Digest;
pub use error::{Error, FormatError, LaunchSetError, Refusal, RefusalStage, Result};
pub use identity::{GemmRouteIdentity, ModuleIdentity, Revisions, Service, SymbolEntry};
pub use launch_set::{
    ResolvedGemmLaunchSet, ResolvedGemmLaunchSetBuilder, build_resolved_gemm_launch_set,
};
pub use plan::{CapturedGemmGraphPlan, PreparedGemmCaptureManifest};
pub use platform::{CompilerIdentity, DeviceIdentity};
pub use policy::{F32Policy, GemmPolicy, HalfPolicy, PolicyMode};
pub use route::ResolvedGemmRoute;
pub use trace::{FingerprintMode, OutputFingerprint, RecordedGemmTrace};
pub use vocab::{DType, GemmOp};
