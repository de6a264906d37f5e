//! Recording: what an engine's own GEMM launches were, and the built-in
//! workloads' record and check.
//!
//! An engine embeds gemm-audit with three calls around a step (see
//! `docs/embedding.md`):
//!
//! 1. [`record_eager`] runs the step eagerly while the engine's GEMM
//!    dispatcher pushes one [`ResolvedGemmRoute`](crate::ResolvedGemmRoute)
//!    per launch to a [`GemmRouteRecorder`]; it returns the routes and the
//!    step's [`PreparedGemmCaptureManifest`](crate::PreparedGemmCaptureManifest)
//!    (`None` when the step launched no GEMM).
//! 2. [`capture`] captures the same step into a graph on the engine's own
//!    stream ([`CaptureStream`]), with the recorder reserved to exactly the
//!    manifest's launch count, and returns the graph with its
//!    [`CapturedGemmGraphPlan`](crate::CapturedGemmGraphPlan).
//! 3. [`Captured::launch_validated`] replays the graph only after the plan
//!    validated against the live context.
//!
//! [`LiveGemmContext`] holds the live context with its health: after a
//! failed capture or an unverified change it refuses replays until the
//! engine re-validates it.
//!
//! [`record`] and [`check`] do the same for the built-in workloads on a
//! [`Backend`](crate::backend::Backend).

mod workload;

pub use gemm_audit_model::recorder::{
    CaptureStream, Captured, EagerRecording, GemmRouteRecorder, LiveGemmContext, RecorderError,
    RecorderMode, RecordingGuard, capture, record_eager, require_deterministic_gemm_graph_plan,
};
pub use workload::{
    CheckReport, EagerRun, GoldenCheck, Recording, ReplayOutcome, allowed_golden_differences,
    capture_and_replay, check, check_golden, eager_rerun, eager_run, record, record_fingerprinted,
    record_in, record_keeping,
};
