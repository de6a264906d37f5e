//! The CUDA backend when built without the `cuda` feature: every
//! constructor answers with a clear error, so `--backend auto` falls back to
//! the CPU and `--backend cuda` says why it cannot run. The types are
//! uninhabited, so their methods can never be reached.

use crate::error::{Error, Result};
use crate::identity::{GemmRouteIdentity, VolatileMetadata};
use crate::plan::CapturedGemmGraphPlan;
use crate::route::ResolvedGemmRoute;
use crate::trace::PreparedGemmCaptureManifest;
use crate::workload::GemmSpec;

#[derive(Debug)]
enum Never {}

/// Why no CUDA device can be opened in this build.
fn unavailable() -> Error {
    let reason = if cfg!(feature = "cuda") {
        "this version has no CUDA backend yet (the `cuda` feature only reserves it)"
    } else {
        "built without CUDA support (rebuild with --features cuda)"
    };
    Error::backend("cuda", reason)
}

/// A CUDA device (unavailable in this build).
#[derive(Debug)]
pub struct CudaBackend(Never);

/// A captured CUDA graph (unavailable in this build).
#[derive(Debug)]
pub struct CudaGraph(Never);

impl CudaBackend {
    /// Opens the first CUDA device.
    pub fn open() -> Result<Self> {
        Err(unavailable())
    }

    /// Opens CUDA device `ordinal` (unavailable in this build: says why).
    pub fn open_ordinal(_ordinal: usize) -> Result<Self> {
        Err(unavailable())
    }

    /// How many CUDA devices this host has (unavailable in this build:
    /// says why).
    pub fn device_count() -> Result<usize> {
        Err(unavailable())
    }

    /// The CUDA device ordinal this backend runs on (unreachable).
    pub fn ordinal(&self) -> usize {
        match self.0 {}
    }

    /// The same device under another policy (unreachable: no value exists).
    pub fn with_policy(&self, _policy: crate::policy::GemmPolicy) -> CudaBackend {
        match self.0 {}
    }

    /// The live context replays are validated against (unreachable).
    pub fn context(&self) -> &GemmRouteIdentity {
        match self.0 {}
    }

    /// Whether the TMA + wgmma kernel families run here (never: no CUDA).
    pub fn wgmma_available(&self) -> std::result::Result<(), String> {
        match self.0 {}
    }

    /// Per-card facts for the trace, never compared (unreachable).
    pub fn volatile(&self) -> VolatileMetadata {
        match self.0 {}
    }

    /// Resolves a GEMM to the route this backend would launch (unreachable).
    pub fn resolve(&self, _spec: &GemmSpec) -> Result<ResolvedGemmRoute> {
        match self.0 {}
    }

    /// Runs one route eagerly; returns the output bytes (unreachable).
    pub fn run(&self, _route: &ResolvedGemmRoute, _seed: u64) -> Result<Vec<u8>> {
        match self.0 {}
    }

    /// Runs one route eagerly and times it (unreachable).
    pub fn run_timed(
        &self,
        _route: &ResolvedGemmRoute,
        _seed: u64,
    ) -> Result<crate::backend::TimedOutput> {
        match self.0 {}
    }

    /// Captures routes into a graph prepared from the manifest (unreachable).
    pub fn capture(
        &self,
        _manifest: &PreparedGemmCaptureManifest,
        _routes: &[ResolvedGemmRoute],
        _seeds: &[u64],
    ) -> Result<CudaGraph> {
        match self.0 {}
    }

    /// Replays a graph through its plan's validation (unreachable).
    pub fn replay(&self, _graph: &CudaGraph, _label: &str) -> Result<Vec<Vec<u8>>> {
        match self.0 {}
    }
}

impl CudaGraph {
    /// The plan replays of this graph are validated against (unreachable).
    pub fn plan(&self) -> &CapturedGemmGraphPlan {
        match self.0 {}
    }

    /// The graph's nodes in capture order (unreachable).
    pub fn physical(&self) -> Vec<crate::physical::PhysicalNode> {
        match self.0 {}
    }
}
