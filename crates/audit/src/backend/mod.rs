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

/// Which device(s) of a backend to run on (`--device N|all`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceSelection {
    /// One device by ordinal (CUDA device ordinal; the CPU backend has only 0).
    Ordinal(usize),
    /// Every device of the backend, one worker each (the CPU backend: its one device).
    All,
}

impl Default for DeviceSelection {
    fn default() -> Self {
        DeviceSelection::Ordinal(0)
    }
}

impl fmt::Display for DeviceSelection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSelection::Ordinal(n) => write!(f, "{n}"),
            DeviceSelection::All => f.write_str("all"),
        }
    }
}

impl std::str::FromStr for DeviceSelection {
    type Err = String;

    /// `all`, or a device ordinal (a non-negative integer).
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        if s.eq_ignore_ascii_case("all") {
            return Ok(DeviceSelection::All);
        }
        s.parse::<usize>()
            .map(DeviceSelection::Ordinal)
            .map_err(|_| format!("expected a device ordinal (0, 1, ...) or `all`, got {s:?}"))
    }
}

/// Which device a result came from, for people: backend, ordinal and, for
/// a GPU, its PCI bus id and UUID (read from the backend's volatile
/// metadata, which is never digested or compared).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct DeviceLabel {
    /// The backend's short name: `cpu`, `cuda` or an engine's.
    pub backend: String,
    /// The device ordinal (CUDA device ordinal; 0 for the CPU).
    pub ordinal: usize,
    /// The PCI bus id, e.g. `0000:19:00.0`, where known.
    pub pci_bus_id: Option<String>,
    /// The device UUID (hex), where known.
    pub uuid: Option<String>,
}

impl DeviceLabel {
    /// The label of `backend` opened as device `ordinal`: bus id and UUID
    /// from its volatile metadata (`cuda.device.pci_bus_id`,
    /// `cuda.device.uuid`) where present.
    pub fn of(backend: &Backend, ordinal: usize) -> DeviceLabel {
        let volatile = backend.volatile();
        DeviceLabel {
            backend: backend.name().to_string(),
            ordinal,
            pci_bus_id: volatile.get("cuda.device.pci_bus_id").cloned(),
            uuid: volatile.get("cuda.device.uuid").cloned(),
        }
    }

    /// A label with only a backend name and an ordinal (no bus id or UUID).
    pub fn new(backend: &str, ordinal: usize) -> DeviceLabel {
        DeviceLabel {
            backend: backend.to_string(),
            ordinal,
            pci_bus_id: None,
            uuid: None,
        }
    }
}

impl fmt::Display for DeviceLabel {
    /// `device 1 (pci 0000:19:00.0, uuid 3f2a...)`, or `device 1` when
    /// neither is known.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "device {}", self.ordinal)?;
        let facts: Vec<String> = [
            self.pci_bus_id.as_ref().map(|b| format!("pci {b}")),
            self.uuid.as_ref().map(|u| format!("uuid {u}")),
        ]
        .into_iter()
        .flatten()
        .collect();
        if !facts.is_empty() {
            write!(f, " ({})", facts.join(", "))?;
        }
        Ok(())
    }
}

/// Devices opened by [`Backend::open_devices`], each with its label, in
/// ascending ordinal.
pub type OpenedDevices = Vec<(DeviceLabel, Backend)>;

pub use gemm_audit_model::kernels::{TimedOutput, TimingClock, ordinals_in_words};

/// The CPU reference backend, which is one device: ordinal 0.
fn cpu_device(ordinal: usize) -> Result<Backend> {
    if ordinal != 0 {
        return Err(Error::NoSuchDevice {
            backend: "cpu".into(),
            requested: ordinal,
            available: "0 (the CPU reference backend is one device)".into(),
        });
    }
    Ok(Backend::Cpu(cpu::CpuBackend::default()))
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

pub use crate::recorder::CaptureStream;

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

    /// Opens device `ordinal` of `kind`: a CUDA device ordinal, or the CPU
    /// backend's one device (0). `Auto` falls back to the CPU when CUDA is
    /// not available, and says why in the returned note; an ordinal the
    /// backend does not have is [`Error::NoSuchDevice`], naming those it has.
    pub fn open_device(kind: BackendKind, ordinal: usize) -> Result<(Backend, Option<String>)> {
        match kind {
            BackendKind::Cpu => Ok((cpu_device(ordinal)?, None)),
            BackendKind::Cuda => Ok((
                Backend::Cuda(cuda::CudaBackend::open_ordinal(ordinal)?),
                None,
            )),
            BackendKind::Auto => match cuda::CudaBackend::open_ordinal(ordinal) {
                Ok(c) => Ok((Backend::Cuda(c), None)),
                Err(e @ Error::NoSuchDevice { .. }) => Err(e),
                Err(e) => Ok((
                    cpu_device(ordinal)?,
                    Some(format!("{e}; using the CPU reference backend")),
                )),
            },
        }
    }

    /// Opens the devices `selection` names: one, or every device of the
    /// backend (`All`: every CUDA device, each with its own context and
    /// stream, opened concurrently; the CPU backend's one device). Each comes
    /// with its [`DeviceLabel`], in ascending ordinal.
    pub fn open_devices(
        kind: BackendKind,
        selection: DeviceSelection,
    ) -> Result<(OpenedDevices, Option<String>)> {
        let ordinal = match selection {
            DeviceSelection::Ordinal(n) => n,
            DeviceSelection::All => {
                let count = match kind {
                    BackendKind::Cpu => None,
                    BackendKind::Cuda => Some(cuda::CudaBackend::device_count()?),
                    BackendKind::Auto => cuda::CudaBackend::device_count().ok().filter(|&n| n > 0),
                };
                match count {
                    Some(n) if n > 1 => {
                        let opened: Vec<Result<Backend>> = std::thread::scope(|s| {
                            let workers: Vec<_> = (0..n)
                                .map(|i| {
                                    s.spawn(move || {
                                        cuda::CudaBackend::open_ordinal(i).map(Backend::Cuda)
                                    })
                                })
                                .collect();
                            workers
                                .into_iter()
                                .map(|w| {
                                    w.join().unwrap_or_else(|_| {
                                        Err(Error::backend("cuda", "opening a device panicked"))
                                    })
                                })
                                .collect()
                        });
                        let mut out = Vec::with_capacity(n);
                        for (i, b) in opened.into_iter().enumerate() {
                            let b = b?;
                            out.push((DeviceLabel::of(&b, i), b));
                        }
                        return Ok((out, None));
                    }
                    // One CUDA device, or the CPU: device 0.
                    _ => 0,
                }
            }
        };
        let (b, note) = Backend::open_device(kind, ordinal)?;
        Ok((vec![(DeviceLabel::of(&b, ordinal), b)], note))
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
            cpu::CpuKernel::SCALAR_FMA,
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
