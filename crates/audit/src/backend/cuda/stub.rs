//! The CUDA backend when built without the `cuda` feature: every
//! constructor answers with a clear error, so `--backend auto` falls back to
//! the CPU and `--backend cuda` says why it cannot run. The types are
//! uninhabited, so their methods can never be reached.

use crate::backend::{CapturedLaunches, GemmBackend, GemmGraph};
use crate::identity::GemmRouteIdentity;
use crate::kernels::GemmSpec;
use crate::policy::GemmPolicy;
use crate::route::ResolvedGemmRoute;
use crate::{Error, Result};

#[derive(Debug)]
enum Never {}

/// Why no CUDA device can be opened in this build.
fn unavailable() -> Error {
    Error::backend(
        "cuda",
        "built without CUDA support (rebuild with --features cuda)",
    )
}

/// Compiles the kernels into the kernel cache (unavailable in this build:
/// says why).
pub fn fill_kernel_cache(
    _arch: &str,
    _before_compile: impl FnMut(&str),
) -> Result<Vec<(String, super::kernel_cache::Outcome)>> {
    Err(unavailable())
}

/// A CUDA device (unavailable in this build).
#[derive(Debug)]
pub struct CudaBackend(Never);

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

    /// Whether the TMA + wgmma kernel families run here (never: no CUDA).
    pub fn wgmma_available(
        &self,
    ) -> std::result::Result<(), gemm_audit_cuda::catalog::WgmmaUnavailable> {
        match self.0 {}
    }
}

/// The launches of a CUDA graph (none exist in this build).
#[derive(Debug)]
pub struct CudaLaunches(Never);

/// A captured CUDA graph (unavailable in this build).
pub type CudaGraph = GemmGraph<CudaLaunches>;

// Every method is unreachable: no `CudaBackend` value exists.
impl GemmBackend for CudaBackend {
    type Launches = CudaLaunches;

    fn name(&self) -> &str {
        match self.0 {}
    }

    fn context(&self) -> &GemmRouteIdentity {
        match self.0 {}
    }

    fn with_policy(&self, _policy: GemmPolicy) -> CudaBackend {
        match self.0 {}
    }

    fn resolve(&self, _spec: &GemmSpec) -> Result<ResolvedGemmRoute> {
        match self.0 {}
    }

    fn run(&self, _route: &ResolvedGemmRoute, _seed: u64) -> Result<Vec<u8>> {
        match self.0 {}
    }

    fn capture_launches(
        &self,
        _routes: &[ResolvedGemmRoute],
        _seeds: &[u64],
    ) -> Result<CapturedLaunches<CudaLaunches>> {
        match self.0 {}
    }

    fn launch(&self, _launches: &CudaLaunches) -> Result<Vec<Vec<u8>>> {
        match self.0 {}
    }
}
