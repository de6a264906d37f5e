//! Backends behind one enum: the CPU reference (always present) and CUDA
//! (a stub that says why it is unavailable when built without `cuda`), so
//! callers match on [`Backend`] without `cfg`.

pub mod cpu;
pub mod cuda;

use crate::error::{Error, Result};
use crate::identity::{GemmRouteIdentity, VolatileMetadata};
use crate::route::ResolvedGemmRoute;
use crate::trace::PreparedGemmCaptureManifest;
use crate::workload::GemmSpec;
use std::fmt;

/// Which backend to open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendKind {
    /// CUDA when a device is present, else the CPU reference.
    Auto,
    /// The CPU reference backend.
    Cpu,
    /// NVIDIA GPUs through CUDA.
    Cuda,
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendKind::Auto => "auto",
            BackendKind::Cpu => "cpu",
            BackendKind::Cuda => "cuda",
        })
    }
}

/// An open backend.
// One per process: the size difference between variants does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Backend {
    Cpu(cpu::CpuBackend),
    Cuda(cuda::CudaBackend),
}

/// A captured graph of either backend.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Graph {
    Cpu(cpu::CpuGraph),
    Cuda(cuda::CudaGraph),
}

impl Graph {
    /// The plan replays of this graph are validated against.
    pub fn plan(&self) -> &crate::plan::CapturedGemmGraphPlan {
        match self {
            Graph::Cpu(g) => g.plan(),
            Graph::Cuda(g) => g.plan(),
        }
    }

    /// The graph's nodes in capture order (not yet bound to routes).
    pub fn physical(&self) -> Vec<crate::physical::PhysicalNode> {
        match self {
            Graph::Cpu(g) => g.physical(),
            Graph::Cuda(g) => g.physical(),
        }
    }
}

impl Backend {
    /// Opens `kind`. `Auto` falls back to the CPU backend when CUDA is not
    /// available, and says why in the returned note.
    pub fn open(kind: BackendKind) -> Result<(Backend, Option<String>)> {
        match kind {
            BackendKind::Cpu => Ok((Backend::Cpu(cpu::CpuBackend::default()), None)),
            BackendKind::Cuda => Ok((Backend::Cuda(cuda::CudaBackend::open()?), None)),
            BackendKind::Auto => match cuda::CudaBackend::open() {
                Ok(c) => Ok((Backend::Cuda(c), None)),
                Err(e) => Ok((
                    Backend::Cpu(cpu::CpuBackend::default()),
                    Some(format!("{e}; using the CPU reference backend")),
                )),
            },
        }
    }

    /// The same device under another policy (modules and device state are shared).
    pub fn with_policy(&self, policy: crate::policy::GemmPolicy) -> Backend {
        match self {
            Backend::Cpu(_) => Backend::Cpu(cpu::CpuBackend::new(policy)),
            Backend::Cuda(b) => Backend::Cuda(b.with_policy(policy)),
        }
    }

    /// The backend a workload is recorded on: this one, under the
    /// workload's policy mode if it names one.
    pub fn for_workload(&self, w: &crate::workload::Workload) -> Option<Backend> {
        w.policy
            .map(|mode| self.with_policy(self.context().policy.with_mode(mode)))
    }

    /// Short name: `cpu` or `cuda`.
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Cpu(_) => "cpu",
            Backend::Cuda(_) => "cuda",
        }
    }

    /// The live context replays are validated against.
    pub fn context(&self) -> &GemmRouteIdentity {
        match self {
            Backend::Cpu(b) => b.context(),
            Backend::Cuda(b) => b.context(),
        }
    }

    /// Per-machine facts for the trace (never compared).
    pub fn volatile(&self) -> VolatileMetadata {
        match self {
            Backend::Cpu(_) => cpu::volatile_metadata(),
            Backend::Cuda(b) => b.volatile(),
        }
    }

    /// Resolves a GEMM to the route this backend would launch.
    pub fn resolve(&self, spec: &GemmSpec) -> Result<ResolvedGemmRoute> {
        match self {
            Backend::Cpu(b) => b.resolve(spec),
            Backend::Cuda(b) => b.resolve(spec),
        }
    }

    /// Runs one route eagerly; returns the output bytes.
    pub fn run(&self, route: &ResolvedGemmRoute, seed: u64) -> Result<Vec<u8>> {
        match self {
            Backend::Cpu(b) => b.run(route, seed),
            Backend::Cuda(b) => b.run(route, seed),
        }
    }

    /// The scalar-FMA reference output of the same problem (computed on the CPU).
    pub fn reference(&self, route: &ResolvedGemmRoute, seed: u64) -> Result<Vec<u8>> {
        // Built once: its context hashes the kernel source and module symbols.
        static REFERENCE: std::sync::OnceLock<cpu::CpuBackend> = std::sync::OnceLock::new();
        let cpu = REFERENCE.get_or_init(cpu::CpuBackend::default);
        let reference = cpu.route(
            &route.gemm,
            route.op,
            route.dtype,
            route.shape,
            cpu::CpuKernel::ScalarFma,
        );
        cpu.run(&reference, seed)
    }

    /// Captures routes into a graph prepared from `manifest`.
    pub fn capture(
        &self,
        manifest: &PreparedGemmCaptureManifest,
        routes: &[ResolvedGemmRoute],
        seeds: &[u64],
    ) -> Result<Graph> {
        match self {
            Backend::Cpu(b) => Ok(Graph::Cpu(b.capture(manifest, routes, seeds)?)),
            Backend::Cuda(b) => Ok(Graph::Cuda(b.capture(manifest, routes, seeds)?)),
        }
    }

    /// Replays a graph through its plan's validation.
    pub fn replay(&self, graph: &Graph, label: &str) -> Result<Vec<Vec<u8>>> {
        match (self, graph) {
            (Backend::Cpu(b), Graph::Cpu(g)) => b.replay(g, label).map_err(Error::from),
            (Backend::Cuda(b), Graph::Cuda(g)) => b.replay(g, label),
            _ => Err(Error::backend(
                self.name(),
                "graph was captured by another backend",
            )),
        }
    }
}
