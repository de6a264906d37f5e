//! Backends behind one trait, [`GemmBackend`], and one enum, [`Backend`]:
//! the CPU reference (always present), CUDA (a stub that says why it is
//! unavailable when built without `cuda`, so callers match without `cfg`)
//! and an engine's own backend.

pub mod common;
pub mod cpu;
pub mod cuda;

use crate::error::{Error, Result};
use crate::identity::{GemmRouteIdentity, VolatileMetadata};
use crate::policy::GemmPolicy;
use crate::route::ResolvedGemmRoute;
use crate::trace::PreparedGemmCaptureManifest;
use crate::workload::GemmSpec;
use std::fmt;

/// Which backend to open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
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

/// What the audit needs of a backend: its live context, routes for
/// workload GEMMs, eager runs, capture and validated replay.
///
/// The built-in backends implement it ([`cpu::CpuBackend`],
/// [`cuda::CudaBackend`], also when built without CUDA, where it is a stub
/// that cannot be opened), and so can an engine's own backend, which then
/// runs the whole audit through [`Backend::Engine`]. Replays must go through
/// [`crate::CapturedGemmGraphPlan::with_validated_launch`] under
/// [`GemmBackend::context`].
pub trait GemmBackend: fmt::Debug + Send + Sync {
    /// Short name, e.g. `cpu`, `cuda` or the engine's name.
    fn name(&self) -> &str;

    /// The live context replays are validated against.
    fn context(&self) -> &GemmRouteIdentity;

    /// Per-machine facts for the trace (never compared).
    fn volatile(&self) -> VolatileMetadata {
        VolatileMetadata::new()
    }

    /// The same device and modules under another policy.
    fn with_policy(&self, policy: GemmPolicy) -> Backend;

    /// Resolves a workload GEMM to the route this backend would launch.
    fn resolve(&self, spec: &GemmSpec) -> Result<ResolvedGemmRoute>;

    /// Runs one route eagerly on inputs seeded by `seed`; returns the
    /// output in storage bytes.
    fn run(&self, route: &ResolvedGemmRoute, seed: u64) -> Result<Vec<u8>>;

    /// [`GemmBackend::run`], also saying how long the launch took. The
    /// default times the whole of `run` on the host clock
    /// ([`TimingClock::HostWall`]: input seeding and transfers included);
    /// a backend that can time its kernels alone should override it.
    fn run_timed(&self, route: &ResolvedGemmRoute, seed: u64) -> Result<TimedOutput> {
        let start = std::time::Instant::now();
        let output = self.run(route, seed)?;
        Ok(TimedOutput {
            output,
            seconds: start.elapsed().as_secs_f64(),
            clock: TimingClock::HostWall,
        })
    }

    /// Captures routes into a graph prepared from `manifest`.
    fn capture(
        &self,
        manifest: &PreparedGemmCaptureManifest,
        routes: &[ResolvedGemmRoute],
        seeds: &[u64],
    ) -> Result<Graph>;

    /// Replays a graph through its plan's validation; returns the outputs.
    fn replay(&self, graph: &Graph, label: &str) -> Result<Vec<Vec<u8>>>;
}

/// Which clock measured a launch, and so what its time includes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TimingClock {
    /// CUDA events recorded on the stream right before and after the
    /// launch: the device's time for the kernels alone.
    DeviceEvents,
    /// The host clock around the kernel alone (the CPU backend: inputs are
    /// seeded before the clock starts).
    HostKernel,
    /// The host clock around the whole run, input seeding and transfers
    /// included (an engine backend that does not time its kernels).
    HostWall,
}

impl fmt::Display for TimingClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TimingClock::DeviceEvents => "CUDA events around the kernels",
            TimingClock::HostKernel => "host clock around the kernel",
            TimingClock::HostWall => "host wall time around the whole run",
        })
    }
}

/// An output and how long its launch took.
#[derive(Debug, Clone, PartialEq)]
pub struct TimedOutput {
    /// The output C in the storage bytes of its dtype.
    pub output: Vec<u8>,
    /// The launch's time in seconds, as measured by `clock`.
    pub seconds: f64,
    /// What the time includes.
    pub clock: TimingClock,
}

/// A stream that can be captured into a replayable graph: the engine's own
/// CUDA stream (`cuda::CudaCaptureStream`, with the `cuda` feature), or a
/// CPU stream ([`crate::backend::cpu::CpuStream`]).
pub trait CaptureStream {
    /// The captured, instantiated graph.
    type Graph;
    /// The stream's error.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Synchronizes the stream (so that work enqueued before cannot race
    /// the capture) and begins capturing.
    fn begin_capture(&self) -> Result<(), Self::Error>;

    /// Ends the capture and instantiates the graph.
    /// [`crate::recorder::capture`] calls it exactly once after a
    /// successful `begin_capture`, also when the body failed or panicked: a
    /// stream left capturing breaks every later operation on it.
    fn end_capture(&self) -> Result<Self::Graph, Self::Error>;

    /// Uploads the graph to the device, so the first replay does not pay
    /// for it (and a failure shows before the first replay).
    fn upload(&self, graph: &Self::Graph) -> Result<(), Self::Error>;
}

/// A graph captured by an engine's own backend.
pub trait EngineGraph: fmt::Debug + Send + Sync {
    /// The plan replays of this graph are validated against.
    fn plan(&self) -> &crate::plan::CapturedGemmGraphPlan;
    /// The graph's nodes in capture order (not yet bound to routes).
    fn physical(&self) -> Vec<crate::physical::PhysicalNode>;
    /// The graph as `Any`, so its backend can downcast it in `replay`.
    fn as_any(&self) -> &dyn std::any::Any;
}

/// An open backend.
// One per process: the size difference between variants does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Backend {
    /// The CPU reference backend.
    Cpu(cpu::CpuBackend),
    /// NVIDIA GPUs through CUDA.
    Cuda(cuda::CudaBackend),
    /// An engine's own backend.
    Engine(Box<dyn GemmBackend>),
}

/// A captured graph of any backend.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Graph {
    /// A CPU graph.
    Cpu(cpu::CpuGraph),
    /// A CUDA graph.
    Cuda(cuda::CudaGraph),
    /// An engine backend's graph.
    Engine(Box<dyn EngineGraph>),
}

impl Graph {
    /// The plan replays of this graph are validated against.
    pub fn plan(&self) -> &crate::plan::CapturedGemmGraphPlan {
        match self {
            Graph::Cpu(g) => g.plan(),
            Graph::Cuda(g) => g.plan(),
            Graph::Engine(g) => g.plan(),
        }
    }

    /// The graph's nodes in capture order (not yet bound to routes).
    pub fn physical(&self) -> Vec<crate::physical::PhysicalNode> {
        match self {
            Graph::Cpu(g) => g.physical(),
            Graph::Cuda(g) => g.physical(),
            Graph::Engine(g) => g.physical(),
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

    /// An engine's own backend.
    pub fn engine(backend: impl GemmBackend + 'static) -> Backend {
        Backend::Engine(Box::new(backend))
    }

    fn inner(&self) -> &dyn GemmBackend {
        match self {
            Backend::Cpu(b) => b,
            Backend::Cuda(b) => b,
            Backend::Engine(b) => b.as_ref(),
        }
    }

    /// The same device under another policy (modules and device state are shared).
    pub fn with_policy(&self, policy: crate::policy::GemmPolicy) -> Backend {
        self.inner().with_policy(policy)
    }

    /// The backend a workload is recorded on: this one, under the
    /// workload's policy mode if it names one.
    pub fn for_workload(&self, w: &crate::workload::Workload) -> Option<Backend> {
        w.policy
            .map(|mode| self.with_policy(self.context().policy.with_mode(mode)))
    }

    /// Short name: `cpu`, `cuda` or the engine backend's.
    pub fn name(&self) -> &str {
        self.inner().name()
    }

    /// The live context replays are validated against.
    pub fn context(&self) -> &GemmRouteIdentity {
        self.inner().context()
    }

    /// Per-machine facts for the trace (never compared).
    pub fn volatile(&self) -> VolatileMetadata {
        self.inner().volatile()
    }

    /// Resolves a GEMM to the route this backend would launch.
    pub fn resolve(&self, spec: &GemmSpec) -> Result<ResolvedGemmRoute> {
        self.inner().resolve(spec)
    }

    /// Runs one route eagerly; returns the output bytes.
    pub fn run(&self, route: &ResolvedGemmRoute, seed: u64) -> Result<Vec<u8>> {
        self.inner().run(route, seed)
    }

    /// Runs one route eagerly and times it ([`GemmBackend::run_timed`]).
    pub fn run_timed(&self, route: &ResolvedGemmRoute, seed: u64) -> Result<TimedOutput> {
        self.inner().run_timed(route, seed)
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
        self.inner().capture(manifest, routes, seeds)
    }

    /// Replays a graph through its plan's validation.
    pub fn replay(&self, graph: &Graph, label: &str) -> Result<Vec<Vec<u8>>> {
        self.inner().replay(graph, label)
    }
}

impl GemmBackend for Backend {
    fn name(&self) -> &str {
        Backend::name(self)
    }
    fn context(&self) -> &GemmRouteIdentity {
        Backend::context(self)
    }
    fn volatile(&self) -> VolatileMetadata {
        Backend::volatile(self)
    }
    fn with_policy(&self, policy: GemmPolicy) -> Backend {
        Backend::with_policy(self, policy)
    }
    fn resolve(&self, spec: &GemmSpec) -> Result<ResolvedGemmRoute> {
        Backend::resolve(self, spec)
    }
    fn run(&self, route: &ResolvedGemmRoute, seed: u64) -> Result<Vec<u8>> {
        Backend::run(self, route, seed)
    }
    fn run_timed(&self, route: &ResolvedGemmRoute, seed: u64) -> Result<TimedOutput> {
        Backend::run_timed(self, route, seed)
    }
    fn capture(
        &self,
        manifest: &PreparedGemmCaptureManifest,
        routes: &[ResolvedGemmRoute],
        seeds: &[u64],
    ) -> Result<Graph> {
        Backend::capture(self, manifest, routes, seeds)
    }
    fn replay(&self, graph: &Graph, label: &str) -> Result<Vec<Vec<u8>>> {
        Backend::replay(self, graph, label)
    }
}

/// The error for a graph replayed on a backend that did not capture it.
pub(crate) fn foreign_graph(backend: &str) -> Error {
    Error::backend(backend, "graph was captured by another backend")
}

impl GemmBackend for cpu::CpuBackend {
    fn name(&self) -> &str {
        "cpu"
    }
    fn context(&self) -> &GemmRouteIdentity {
        cpu::CpuBackend::context(self)
    }
    fn volatile(&self) -> VolatileMetadata {
        cpu::volatile_metadata()
    }
    fn with_policy(&self, policy: GemmPolicy) -> Backend {
        Backend::Cpu(cpu::CpuBackend::new(policy))
    }
    fn resolve(&self, spec: &GemmSpec) -> Result<ResolvedGemmRoute> {
        cpu::CpuBackend::resolve(self, spec)
    }
    fn run(&self, route: &ResolvedGemmRoute, seed: u64) -> Result<Vec<u8>> {
        cpu::CpuBackend::run(self, route, seed)
    }
    fn run_timed(&self, route: &ResolvedGemmRoute, seed: u64) -> Result<TimedOutput> {
        cpu::CpuBackend::run_timed(self, route, seed)
    }
    fn capture(
        &self,
        manifest: &PreparedGemmCaptureManifest,
        routes: &[ResolvedGemmRoute],
        seeds: &[u64],
    ) -> Result<Graph> {
        Ok(Graph::Cpu(cpu::CpuBackend::capture(
            self, manifest, routes, seeds,
        )?))
    }
    fn replay(&self, graph: &Graph, label: &str) -> Result<Vec<Vec<u8>>> {
        match graph {
            Graph::Cpu(g) => cpu::CpuBackend::replay(self, g, label).map_err(Error::from),
            _ => Err(foreign_graph("cpu")),
        }
    }
}

impl GemmBackend for cuda::CudaBackend {
    fn name(&self) -> &str {
        "cuda"
    }
    fn context(&self) -> &GemmRouteIdentity {
        cuda::CudaBackend::context(self)
    }
    fn volatile(&self) -> VolatileMetadata {
        cuda::CudaBackend::volatile(self)
    }
    fn with_policy(&self, policy: GemmPolicy) -> Backend {
        Backend::Cuda(cuda::CudaBackend::with_policy(self, policy))
    }
    fn resolve(&self, spec: &GemmSpec) -> Result<ResolvedGemmRoute> {
        cuda::CudaBackend::resolve(self, spec)
    }
    fn run(&self, route: &ResolvedGemmRoute, seed: u64) -> Result<Vec<u8>> {
        cuda::CudaBackend::run(self, route, seed)
    }
    fn run_timed(&self, route: &ResolvedGemmRoute, seed: u64) -> Result<TimedOutput> {
        cuda::CudaBackend::run_timed(self, route, seed)
    }
    fn capture(
        &self,
        manifest: &PreparedGemmCaptureManifest,
        routes: &[ResolvedGemmRoute],
        seeds: &[u64],
    ) -> Result<Graph> {
        Ok(Graph::Cuda(cuda::CudaBackend::capture(
            self, manifest, routes, seeds,
        )?))
    }
    fn replay(&self, graph: &Graph, label: &str) -> Result<Vec<Vec<u8>>> {
        match graph {
            Graph::Cuda(g) => cuda::CudaBackend::replay(self, g, label),
            _ => Err(foreign_graph("cuda")),
        }
    }
}
