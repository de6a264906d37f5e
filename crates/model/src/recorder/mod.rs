//! The engine-facing recorder: what an engine's own GEMM launches were.
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

mod engine;
mod live;

pub use engine::{
    CaptureStream, Captured, EagerRecording, GemmRouteRecorder, RecorderError, RecorderMode,
    RecordingGuard, capture, record_eager, require_deterministic_gemm_graph_plan,
};
pub use live::LiveGemmContext;
