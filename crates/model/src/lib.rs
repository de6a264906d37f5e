//! gemm-audit's model: what a GEMM launch is ([`route`], [`identity`],
//! [`declaration`]), what may replay ([`policy`]), launch sets and
//! captured-graph plans ([`launch_set`], [`plan`], [`physical`]), recorded
//! traces and their files ([`trace`]), and the engine-facing recorder
//! ([`recorder`]).
//!
//! The public API is curated: each namespace module above is one idea of
//! the vocabulary, the core objects are also at the root, and the
//! implementation modules (bounded lists, the route builder, errors, file
//! I/O, platform identities) are private, their items public once, at the
//! root or in [`util`].
//!
//! This crate knows no backend and no command line: backends, workloads
//! and the audit live in `gemm-audit-core` (`gemm_audit`), which
//! re-exports these namespaces and root items at the same paths
//! (`gemm_audit::route`, `gemm_audit::plan`, ...). See `docs/design.md`
//! for the meaning of every object.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

// The public namespaces: each is one idea of the vocabulary.
pub mod backend;
pub mod declaration;
pub mod digest;
pub mod identity;
pub mod kernels;
pub mod launch_set;
pub mod mutation;
pub mod physical;
pub mod pin;
pub mod plan;
pub mod policy;
pub mod recorder;
pub mod route;
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod trace;
pub mod vocab;

// Implementation modules: their items are public only through the curated
// list below (or a namespace's), so each has one path.
mod bounded;
mod builder;
mod error;
mod fileio;
mod parallel;
mod platform;

/// The implementation modules stay private: each of these paths fails to
/// compile (the item's one public path is at the root, in `trace` or in
/// [`util`]).
///
/// ```compile_fail
/// use gemm_audit_model::bounded::MAX_MODULES;
/// ```
///
/// ```compile_fail
/// use gemm_audit_model::builder::GemmRouteBuilder;
/// ```
///
/// ```compile_fail
/// use gemm_audit_model::error::Error;
/// ```
///
/// ```compile_fail
/// use gemm_audit_model::fileio::write_atomic;
/// ```
///
/// ```compile_fail
/// use gemm_audit_model::parallel::map_in_order;
/// ```
///
/// ```compile_fail
/// use gemm_audit_model::platform::DeviceIdentity;
/// ```
#[allow(dead_code, reason = "holds the privacy doctests above")]
const IMPLEMENTATION_MODULES_ARE_PRIVATE: () = ();

pub use builder::{ARGUMENTS_DOMAIN, ArgumentsDigest, GemmRouteBuilder, RouteBuildError};
pub use digest::Digest;
pub use error::{BudgetLimit, Error, FormatError, LaunchSetError, Refusal, RefusalStage, Result};
pub use identity::{GemmRouteIdentity, ModuleIdentity, Revisions, Service, SymbolEntry};
pub use launch_set::{
    ResolvedGemmLaunchSet, ResolvedGemmLaunchSetBuilder, build_resolved_gemm_launch_set,
};
pub use plan::{CapturedGemmGraphPlan, PreparedGemmCaptureManifest};
pub use platform::{COMPILER_OPTIONS_DOMAIN, CompilerIdentity, DeviceIdentity};
pub use policy::{F32Policy, GemmPolicy, HalfPolicy, PolicyMode};
pub use route::ResolvedGemmRoute;
pub use trace::{FingerprintMode, OutputFingerprint, RecordedGemmTrace};
pub use vocab::{DType, GemmOp};

/// Plumbing the workspace's crates share with the model: files read with a
/// size bound and written atomically (the rules every trace, golden and
/// cache entry follows), and an order-keeping parallel map.
pub mod util {
    pub use crate::fileio::{read_regular, write_atomic};
    pub use crate::parallel::map_in_order;
}
