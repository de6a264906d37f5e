//! The CUDA backend: eager runs, device fingerprints, capture,
//! introspection and validated replay. Resolving GEMMs to routes is in
//! `resolve`, prepared launches in `launch`, the shared device state in
//! `shared`, benchmark timing in `timing`.
//!
//! Default policy ([`CUDA_DEFAULT_POLICY`]): deterministic mode, tensor
//! cores permitted (the mma routes), f32 policy `tf32` and half policy
//! `streamk`, i.e. deterministic but not scalar-exact contracts (fixed
//! split-K) are permitted for every dtype, as on the CPU backend, so the
//! built-in workloads (which use fixed split-K on f32) replay. No TF32
//! kernel exists here, so the f32 policy only admits fixed split-K.

use crate::blas::HandlesGuard;
use crate::catalog;
use crate::error::{CudaError, cuda_err, drv};
use crate::graph;
use crate::launch::{EventTimer, Prepared, time_launches};
use crate::shared::{Shared, device_count, shared};
use cudarc::driver::CudaGraph as RawGraph;
use gemm_audit_model::backend::{CapturedLaunches, CheckedRun, GemmBackend, GemmGraph, KeptRun};
use gemm_audit_model::identity::{GemmRouteIdentity, Revisions, VolatileMetadata};
use gemm_audit_model::kernels::GemmSpec;
use gemm_audit_model::policy::{F32Policy, GemmPolicy, HalfPolicy, PolicyMode};
use gemm_audit_model::route::ResolvedGemmRoute;
use gemm_audit_model::trace::{FingerprintMode, OutputFingerprint};
use gemm_audit_model::{Error, Result};
use std::fmt;
use std::sync::Arc;

/// The CUDA backend's default policy (see the module documentation).
pub const CUDA_DEFAULT_POLICY: GemmPolicy = GemmPolicy {
    mode: PolicyMode::Deterministic,
    tensor_cores: true,
    f32: F32Policy::Tf32,
    half: HalfPolicy::StreamK,
};

/// A CUDA device (any ordinal; [`CudaBackend::open`] opens device 0) under
/// one policy.
#[derive(Debug, Clone)]
pub struct CudaBackend {
    pub(super) shared: Arc<Shared>,
    pub(super) context: GemmRouteIdentity,
}

impl CudaBackend {
    /// Opens device 0: loads the driver, compiles the kernels with NVRTC
    /// (once per process), finds cuBLAS/cuBLASLt. The error names what is
    /// missing; this never panics.
    pub fn open() -> Result<Self> {
        Self::open_ordinal(0)
    }

    /// Opens CUDA device `ordinal` with its own context and stream (the
    /// kernels are compiled once per device per process). An ordinal the
    /// host does not have is [`Error::NoSuchDevice`], naming the ordinals
    /// present; a missing driver or library is a backend error.
    pub fn open_ordinal(ordinal: usize) -> Result<Self> {
        let count = Self::device_count()?;
        if count == 0 {
            return Err(cuda_err("no CUDA device is present"));
        }
        if ordinal >= count {
            return Err(Error::NoSuchDevice {
                backend: "cuda".into(),
                requested: ordinal,
                available: gemm_audit_model::kernels::ordinals_in_words(count),
            });
        }
        let shared = shared(ordinal)?;
        let context = context_of(&shared, CUDA_DEFAULT_POLICY);
        Ok(CudaBackend { shared, context })
    }

    /// How many CUDA devices this host has (`cuDeviceGetCount`). An error
    /// says what is missing (the driver library, or a failing driver).
    pub fn device_count() -> Result<usize> {
        Ok(device_count()?)
    }

    /// The CUDA device ordinal this backend runs on.
    pub fn ordinal(&self) -> usize {
        self.shared.ordinal
    }

    /// The compilation target, e.g. `sm_90`.
    pub fn arch(&self) -> &str {
        &self.shared.arch
    }

    /// Whether the TMA + wgmma kernel families (`wgmma-large`,
    /// `wgmma-small`) run here; the error says why not (not a compute
    /// capability 9.0 device, or NVRTC could not build them).
    pub fn wgmma_available(&self) -> std::result::Result<(), catalog::WgmmaUnavailable> {
        self.shared.wgmma.as_ref().map(|_| ()).map_err(Clone::clone)
    }

    /// Runs one route eagerly and fingerprints its output on the device
    /// (the output is not copied back).
    pub fn run_fingerprinted(
        &self,
        route: &ResolvedGemmRoute,
        seed: u64,
    ) -> Result<OutputFingerprint> {
        let sh = &self.shared;
        let _lock = sh.lock();
        let handles = self.vendor_handles(route)?;
        let mut launch = Prepared::new(sh, handles.as_ref().map(|h| h.get()), route, seed)?;
        launch.enqueue(sh, handles.as_ref().map(|h| h.get()), &sh.stream)?;
        launch.fingerprint(sh, FingerprintMode::Strong, seed)
    }

    /// The output fingerprint of `bytes` in `mode`, computed on the device
    /// (uploads them first). Equals `OutputFingerprint::with_mode(mode,
    /// input_seed, bytes)`.
    pub fn fingerprint_in(
        &self,
        mode: FingerprintMode,
        input_seed: u64,
        bytes: &[u8],
    ) -> Result<OutputFingerprint> {
        let sh = &self.shared;
        let _lock = sh.lock();
        // An empty output still needs a (never read) device buffer.
        let buf = if bytes.is_empty() {
            sh.stream.alloc_zeros::<u8>(16)
        } else {
            sh.stream.clone_htod(bytes)
        }
        .map_err(drv("upload"))?;
        Ok(sh.fingerprinter.fingerprint_in(
            mode,
            &sh.stream,
            &buf.slice(..bytes.len()),
            input_seed,
        )?)
    }

    /// The fast (NH) chunk digests of `bytes`, computed on the device:
    /// uploads `offset` padding bytes and then `bytes`, and hashes the view
    /// that starts at `offset` (an `offset` that is no multiple of 16 takes
    /// the kernel's realigning path). Equals
    /// `gemm_audit_model::trace::fast::fast_chunk_digests(bytes)`. For tests and
    /// benchmarks of the fast fingerprint's building block (the `bench`
    /// feature).
    #[cfg(feature = "bench")]
    pub fn fast_chunk_digests(&self, bytes: &[u8], offset: usize) -> Result<Vec<[u8; 16]>> {
        let sh = &self.shared;
        let _lock = sh.lock();
        let mut host = vec![0u8; offset];
        host.extend_from_slice(bytes);
        if host.is_empty() {
            return Ok(Vec::new());
        }
        let buf = sh.stream.clone_htod(&host).map_err(drv("upload"))?;
        Ok(sh
            .fingerprinter
            .fast_chunk_digests(&sh.stream, &buf.slice(offset..))?)
    }

    /// The storage bytes of A and B of `problem` in `dtype` for input seed
    /// `seed`, made on the device exactly as this backend's launches make
    /// them, then copied back. They equal the model's
    /// `to_storage_bytes(seeded_inputs(..))` bit for bit (a GPU test holds
    /// them to it).
    pub fn seeded_operands(
        &self,
        problem: &gemm_audit_model::kernels::Problem,
        dtype: gemm_audit_model::vocab::DType,
        seed: u64,
    ) -> Result<(Vec<u8>, Vec<u8>)> {
        let sh = &self.shared;
        let _lock = sh.lock();
        let specs = crate::seed::OperandSpec::of(problem, dtype, seed);
        let lens = [problem.a_len(), problem.b_len()]
            .map(|l| l * gemm_audit_model::kernels::element_size(dtype));
        let mut out = Vec::with_capacity(2);
        for (spec, len) in specs.iter().zip(lens) {
            let buf = sh.seeder.operand(&sh.stream, spec)?;
            let mut host = sh
                .stream
                .clone_dtoh(&buf)
                .map_err(drv("downloading an operand"))?;
            host.truncate(len);
            out.push(host);
        }
        let b = out.pop().unwrap_or_default();
        let a = out.pop().unwrap_or_default();
        Ok((a, b))
    }

    /// The output fingerprint of `bytes`, computed on the device (uploads
    /// them first). Equals `OutputFingerprint::of(input_seed, bytes)`.
    pub fn fingerprint(&self, input_seed: u64, bytes: &[u8]) -> Result<OutputFingerprint> {
        self.fingerprint_in(FingerprintMode::Strong, input_seed, bytes)
    }

    /// Prepares `route` on inputs seeded by `seed` and launches it once,
    /// timed with CUDA events right before and after the launch (which
    /// includes the host's enqueue of it: `kernel_seconds`
    /// times the kernels alone). The caller holds the stream's lock.
    fn timed_launch(&self, route: &ResolvedGemmRoute, seed: u64) -> Result<(Prepared, f64)> {
        let sh = &self.shared;
        let handles = self.vendor_handles(route)?;
        let h = handles.as_ref().map(|h| h.get());
        let mut launch = Prepared::new(sh, h, route, seed)?;
        let timer = EventTimer::new(sh)?;
        // The inputs are made on the same stream: finish that first, so
        // the start event is not held back behind it.
        sh.stream.synchronize().map_err(drv("seeding inputs"))?;
        let seconds = timer.time(sh, || launch.enqueue(sh, h, &sh.stream))?;
        Ok((launch, seconds))
    }

    /// Seconds per launch of a prepared `launch`, timed as the GPU bench
    /// times routes: CUDA events around one launch of a captured graph of
    /// back-to-back launches (about 1 ms of them, 2 to 64), after one
    /// untimed launch of the graph. Nothing the host does between the
    /// events adds to it, so a 40 us kernel shows as 40 us, not 40 us
    /// plus its enqueue. `eager` (an event-timed eager launch) sizes the
    /// graph, and is the answer when the launch cannot be captured or is
    /// faster. The launches overwrite the output: call it after the
    /// output was fingerprinted or copied back. The caller holds the
    /// stream's lock.
    fn kernel_seconds(
        &self,
        route: &ResolvedGemmRoute,
        launch: &mut Prepared,
        eager: f64,
    ) -> Result<f64> {
        const GRAPH_SECONDS: f64 = 1e-3;
        let sh = &self.shared;
        let handles = self.vendor_handles(route)?;
        let h = handles.as_ref().map(|h| h.get());
        let count = (GRAPH_SECONDS / eager.max(1e-7)).round().clamp(2.0, 64.0) as u32;
        let captured = graph::capture(&sh.stream, || {
            for _ in 0..count {
                launch.enqueue(sh, h, &sh.stream)?;
            }
            Ok::<(), Error>(())
        });
        let Ok(g) = captured else {
            return Ok(eager);
        };
        g.launch().map_err(drv("graph launch"))?;
        let timer = EventTimer::new(sh)?;
        let graphed = time_launches(sh, &timer, h, launch, Some(&g), count)?;
        Ok(graphed.min(eager))
    }

    fn vendor_handles(&self, route: &ResolvedGemmRoute) -> Result<Option<HandlesGuard<'_>>> {
        if route.backend.is_vendor() {
            Ok(Some(self.shared.vendor.handles(&self.shared)?))
        } else {
            Ok(None)
        }
    }

    /// Launches a graph through validation without copying outputs back
    /// (the benches' validated replay; the `bench` feature).
    #[cfg(feature = "bench")]
    pub fn launch_validated(&self, graph: &CudaGraph, label: &str) -> Result<()> {
        let launches = self.own(graph.launches())?;
        graph
            .plan()
            .with_validated_launch(&self.context_with_pins(), label, |_| {
                let _lock = self.shared.lock();
                launches.launch_and_wait()
            })
            .map_err(Error::from)?
    }

    /// Launches a graph WITHOUT validation. Only for measuring what
    /// validation costs (the `bench` feature; never in the binary).
    #[cfg(feature = "bench")]
    pub fn launch_unvalidated(&self, graph: &CudaGraph) -> Result<()> {
        let launches = self.own(graph.launches())?;
        let _lock = self.shared.lock();
        launches.launch_and_wait()
    }

    /// `launches`, if this device context captured them.
    fn own<'a>(&self, launches: &'a CudaLaunches) -> Result<&'a CudaLaunches> {
        if !Arc::ptr_eq(&self.shared, &launches.shared) {
            return Err(cuda_err("graph was captured on another device context"));
        }
        Ok(launches)
    }
}

impl GemmBackend for CudaBackend {
    type Launches = CudaLaunches;

    fn name(&self) -> &str {
        "cuda"
    }

    fn context(&self) -> &GemmRouteIdentity {
        &self.context
    }

    /// The context with `cublaslt-invariant`'s family configurations
    /// pinned so far.
    fn live_context(&self) -> std::borrow::Cow<'_, GemmRouteIdentity> {
        self.context_with_pins()
    }

    /// Per-card facts (UUID, bus id, memory, clock, library versions): never digested.
    fn volatile(&self) -> VolatileMetadata {
        self.shared.volatile.clone()
    }

    /// The same device (context, stream, modules) under another policy.
    fn with_policy(&self, policy: GemmPolicy) -> CudaBackend {
        CudaBackend {
            shared: self.shared.clone(),
            context: context_of(&self.shared, policy),
        }
    }

    fn resolve(&self, spec: &GemmSpec) -> Result<ResolvedGemmRoute> {
        self.resolve_spec(spec)
    }

    /// Recorded `cublaslt-invariant` family configurations, where the
    /// library still offers them.
    fn adopt_pins(&self, pins: &[gemm_audit_model::pin::VendorPin]) -> usize {
        self.adopt_family_pins(pins)
    }

    /// Runs one route eagerly on inputs seeded by `seed` (the CPU backend's
    /// seeding); returns the output storage bytes.
    fn run(&self, route: &ResolvedGemmRoute, seed: u64) -> Result<Vec<u8>> {
        let sh = &self.shared;
        let _lock = sh.lock();
        let handles = self.vendor_handles(route)?;
        let mut launch = Prepared::new(sh, handles.as_ref().map(|h| h.get()), route, seed)?;
        launch.enqueue(sh, handles.as_ref().map(|h| h.get()), &sh.stream)?;
        sh.stream.synchronize().map_err(drv("kernel"))?;
        launch.download(sh)
    }

    /// [`GemmBackend::run`], timing the kernels with CUDA events around a
    /// captured graph of back-to-back launches (`kernel_seconds`):
    /// the kernels' device time, not the allocation, upload, download or
    /// host enqueue around them.
    fn run_timed(
        &self,
        route: &ResolvedGemmRoute,
        seed: u64,
    ) -> Result<gemm_audit_model::kernels::TimedOutput> {
        let sh = &self.shared;
        let _lock = sh.lock();
        let (mut launch, eager) = self.timed_launch(route, seed)?;
        let output = launch.download(sh)?;
        Ok(gemm_audit_model::kernels::TimedOutput {
            output,
            seconds: self.kernel_seconds(route, &mut launch, eager)?,
            clock: gemm_audit_model::kernels::TimingClock::DeviceEvents,
        })
    }

    /// [`GemmBackend::run_checked`] with the output fingerprinted on the
    /// device: only an output that differs is copied back.
    fn run_checked(
        &self,
        route: &ResolvedGemmRoute,
        seed: u64,
        mode: FingerprintMode,
        expected: &OutputFingerprint,
    ) -> Result<CheckedRun> {
        let sh = &self.shared;
        let _lock = sh.lock();
        let (mut launch, eager) = self.timed_launch(route, seed)?;
        let same = launch.fingerprint(sh, mode, seed)? == *expected;
        // Copied back before the timing launches overwrite it.
        let differing_output = if same {
            None
        } else {
            Some(launch.download(sh)?)
        };
        Ok(CheckedRun {
            seconds: self.kernel_seconds(route, &mut launch, eager)?,
            clock: gemm_audit_model::kernels::TimingClock::DeviceEvents,
            differing_output,
        })
    }

    /// [`GemmBackend::run_keeping`] with the output fingerprinted on the
    /// device and only its first `keep` bytes copied back.
    fn run_keeping(
        &self,
        route: &ResolvedGemmRoute,
        seed: u64,
        mode: FingerprintMode,
        keep: usize,
    ) -> Result<KeptRun> {
        let sh = &self.shared;
        let _lock = sh.lock();
        let (mut launch, eager) = self.timed_launch(route, seed)?;
        let fingerprint = launch.fingerprint(sh, mode, seed)?;
        let kept = launch.download_prefix(sh, keep)?;
        Ok(KeptRun {
            fingerprint,
            kept,
            output_len: launch.output_len(),
            seconds: self.kernel_seconds(route, &mut launch, eager)?,
            clock: gemm_audit_model::kernels::TimingClock::DeviceEvents,
        })
    }

    /// Inputs are uploaded and outputs allocated first, then the launches
    /// are captured on this backend's own stream, and the graph is
    /// instantiated, uploaded and walked into physical nodes.
    fn capture_launches(
        &self,
        routes: &[ResolvedGemmRoute],
        seeds: &[u64],
    ) -> Result<CapturedLaunches<CudaLaunches>> {
        let sh = &self.shared;
        let _lock = sh.lock();
        let any_vendor = routes.iter().any(|r| r.backend.is_vendor());
        let handles = if any_vendor {
            Some(sh.vendor.handles(sh)?)
        } else {
            None
        };
        let h = handles.as_ref().map(|g| g.get());
        let mut prepared = Vec::with_capacity(routes.len());
        for (route, &seed) in routes.iter().zip(seeds) {
            prepared.push(Prepared::new(sh, h, route, seed)?);
        }
        let mut captured: Vec<ResolvedGemmRoute> = Vec::with_capacity(routes.len());
        let raw = graph::capture(&sh.stream, || {
            for (launch, route) in prepared.iter_mut().zip(routes) {
                launch
                    .enqueue(sh, h, &sh.stream)
                    .map_err(|e| CudaError::msg(format!("route {:?}: {e}", route.gemm)))?;
                captured.push(route.clone());
            }
            Ok::<(), CudaError>(())
        })
        .map_err(|e| e.context("graph capture"))?;
        let physical = graph::introspect(&raw)?;
        drop(handles);
        Ok(CapturedLaunches {
            launches: CudaLaunches {
                raw,
                prepared,
                shared: sh.clone(),
            },
            routes: captured,
            physical,
        })
    }

    fn launch(&self, launches: &CudaLaunches) -> Result<Vec<Vec<u8>>> {
        let launches = self.own(launches)?;
        let _lock = self.shared.lock();
        launches.launch_and_wait()?;
        launches
            .prepared
            .iter()
            .map(|l| l.download(&self.shared))
            .collect()
    }

    /// [`GemmBackend::launch`] with every output fingerprinted on the
    /// device: nothing but the chunk digests is copied back.
    fn launch_fingerprinted(
        &self,
        launches: &CudaLaunches,
        seeds: &[u64],
        mode: FingerprintMode,
    ) -> Result<Vec<OutputFingerprint>> {
        let launches = self.own(launches)?;
        let _lock = self.shared.lock();
        launches.launch_and_wait()?;
        launches
            .prepared
            .iter()
            .zip(seeds)
            .map(|(l, &seed)| l.fingerprint(&self.shared, mode, seed))
            .collect()
    }
}

/// The context of `shared` under `policy`.
pub(super) fn context_of(shared: &Shared, policy: GemmPolicy) -> GemmRouteIdentity {
    let mut modules = vec![shared.gemm.identity.clone()];
    if let Some(l) = &shared.vendor.cublas {
        modules.push(l.module.clone());
    }
    if let Some(l) = &shared.vendor.cublaslt {
        modules.push(l.module.clone());
    }
    // Last, so that a trace recorded before this module existed differs
    // from the live context by one module, not by a shifted list.
    if let Ok(m) = &shared.wgmma {
        modules.push(m.identity.clone());
    }
    GemmRouteIdentity::new(
        policy,
        modules,
        shared.device.clone(),
        Revisions {
            tuning_table: catalog::TUNING_TABLE_REVISION,
            schedule: catalog::SCHEDULE_REVISION,
            tensor_map: catalog::TENSOR_MAP_REVISION,
        },
    )
}

/// A captured CUDA graph: its launches, the plan replays are validated
/// against, and the nodes the graph really holds.
pub type CudaGraph = GemmGraph<CudaLaunches>;

/// The launches of a CUDA graph: the instantiated, uploaded graph and the
/// buffers its launches use, on one device context.
pub struct CudaLaunches {
    // Declared first: the graph is destroyed before the buffers it uses.
    raw: RawGraph,
    prepared: Vec<Prepared>,
    shared: Arc<Shared>,
}

impl fmt::Debug for CudaLaunches {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaLaunches")
            .field("launches", &self.prepared.len())
            .finish_non_exhaustive()
    }
}

impl CudaLaunches {
    fn launch_and_wait(&self) -> Result<()> {
        self.raw.launch().map_err(drv("graph launch"))?;
        self.shared
            .stream
            .synchronize()
            .map_err(drv("graph replay"))
    }
}
