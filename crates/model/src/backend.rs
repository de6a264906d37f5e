//! What the audit needs of a backend ([`GemmBackend`]), and the capture
//! discipline every backend shares, written once as its provided methods:
//! a capture must reserve exactly its manifest's launch count, what was
//! captured must reproduce the manifest's launch set, and a replay goes
//! only through [`CapturedGemmGraphPlan::with_validated_launch`] under the
//! backend's live context. A backend supplies only its own part: how to
//! capture a list of launches and how to launch them again.

use crate::error::{Error, Result};
use crate::identity::{GemmRouteIdentity, VolatileMetadata};
use crate::kernels::{GemmSpec, TimedOutput, TimingClock};
use crate::launch_set::build_resolved_gemm_launch_set;
use crate::physical::PhysicalNode;
use crate::pin::VendorPin;
use crate::plan::{CapturedGemmGraphPlan, PreparedGemmCaptureManifest};
use crate::policy::GemmPolicy;
use crate::route::ResolvedGemmRoute;
use crate::trace::{FingerprintMode, OutputFingerprint};
use std::borrow::Cow;
use std::fmt;

/// What a backend captured: its own launch state, the routes it captured
/// in capture order, and the graph nodes the capture really holds.
#[derive(Debug)]
pub struct CapturedLaunches<L> {
    /// The backend's state for launching the graph again (a CUDA graph and
    /// its buffers, a CPU launch list).
    pub launches: L,
    /// The routes captured, in capture order.
    pub routes: Vec<ResolvedGemmRoute>,
    /// The graph's nodes in capture order (not yet bound to routes).
    pub physical: Vec<PhysicalNode>,
}

/// A captured graph of backend launches `L`, with the plan its replays are
/// validated against. Only [`GemmBackend::capture`] makes one, so every
/// graph has passed the capture discipline.
#[derive(Debug)]
pub struct GemmGraph<L> {
    launches: L,
    plan: CapturedGemmGraphPlan,
    physical: Vec<PhysicalNode>,
    /// The input seed of each captured launch, in capture order.
    seeds: Vec<u64>,
}

impl<L> GemmGraph<L> {
    /// The plan replays of this graph are validated against.
    pub fn plan(&self) -> &CapturedGemmGraphPlan {
        &self.plan
    }

    /// The graph's nodes in capture order (not yet bound to routes).
    pub fn physical(&self) -> &[PhysicalNode] {
        &self.physical
    }

    /// The backend's launch state, for the backend that captured it.
    pub fn launches(&self) -> &L {
        &self.launches
    }

    /// The input seed of each captured launch, in capture order.
    pub fn seeds(&self) -> &[u64] {
        &self.seeds
    }
}

/// An eager run held to the fingerprint it should reproduce
/// ([`GemmBackend::run_checked`]).
#[derive(Debug, Clone, PartialEq)]
pub struct CheckedRun {
    /// The launch's time in seconds, as measured by `clock`.
    pub seconds: f64,
    /// What the time includes.
    pub clock: TimingClock,
    /// The output in storage bytes, only when its fingerprint differs from
    /// the expected one (what a difference statistic needs); `None` when
    /// it matches, so a backend that fingerprints where the output lives
    /// copies nothing back.
    pub differing_output: Option<Vec<u8>>,
}

/// An eager run fingerprinted where its output lives, keeping only a
/// prefix of the output on the host ([`GemmBackend::run_keeping`]).
#[derive(Debug, Clone, PartialEq)]
pub struct KeptRun {
    /// The output's fingerprint (of all of it).
    pub fingerprint: OutputFingerprint,
    /// The first bytes of the output, as many as were asked for (all of
    /// it when it is shorter).
    pub kept: Vec<u8>,
    /// The output's length in bytes.
    pub output_len: usize,
    /// The launch's time in seconds, as measured by `clock`.
    pub seconds: f64,
    /// What the time includes.
    pub clock: TimingClock,
}

/// What the audit needs of a backend: its live context, routes for
/// workload GEMMs, eager runs, capture and validated replay.
///
/// The built-in backends implement it (the CPU reference, CUDA), and so
/// can an engine's own backend, which then runs the whole record / check /
/// audit. A backend implements [`GemmBackend::capture_launches`] and
/// [`GemmBackend::launch`]; [`GemmBackend::capture`] and
/// [`GemmBackend::replay`] are the discipline and are not meant to be
/// overridden.
pub trait GemmBackend: fmt::Debug + Send + Sync + 'static {
    /// What the backend keeps of a capture to launch it again (device
    /// graphs are often not `Send`: a graph is replayed where it was made).
    type Launches: fmt::Debug + 'static;

    /// Short name, e.g. `cpu`, `cuda` or the engine's name.
    fn name(&self) -> &str;

    /// The live context replays are validated against, without pins: the
    /// policy, modules, device and revisions, fixed for the backend's life.
    fn context(&self) -> &GemmRouteIdentity;

    /// The live context with the vendor configurations this backend has
    /// pinned so far ([`GemmRouteIdentity::pins`]); what replays are
    /// validated against. The default is [`GemmBackend::context`]: a
    /// backend that pins nothing has nothing to add.
    fn live_context(&self) -> Cow<'_, GemmRouteIdentity> {
        Cow::Borrowed(self.context())
    }

    /// Per-machine facts for the trace (never compared).
    fn volatile(&self) -> VolatileMetadata {
        VolatileMetadata::new()
    }

    /// The same device and modules under another policy.
    fn with_policy(&self, policy: GemmPolicy) -> Self
    where
        Self: Sized;

    /// Resolves a workload GEMM to the route this backend would launch.
    fn resolve(&self, spec: &GemmSpec) -> Result<ResolvedGemmRoute>;

    /// Adopts recorded pins ([`GemmRouteIdentity::pins`] of a trace) as
    /// this backend's choices for their families, where each is still one
    /// this backend could choose here (the CUDA backend's timed
    /// `cublaslt-invariant` configurations): a golden pins them, so timing
    /// noise cannot move a gated route, and its routes are then judged
    /// against them. Returns how many pins were adopted; the default
    /// adopts none (a backend whose resolution is a pure function pins
    /// nothing).
    fn adopt_pins(&self, pins: &[VendorPin]) -> usize {
        let _ = pins;
        0
    }

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

    /// Runs one route eagerly and compares the fingerprint of its output
    /// in `mode` with `expected`. The default runs [`GemmBackend::run_timed`]
    /// and fingerprints on the host; a device backend should fingerprint
    /// on the device and copy the output back only when it differs.
    fn run_checked(
        &self,
        route: &ResolvedGemmRoute,
        seed: u64,
        mode: FingerprintMode,
        expected: &OutputFingerprint,
    ) -> Result<CheckedRun> {
        let t = self.run_timed(route, seed)?;
        let same = OutputFingerprint::with_mode(mode, seed, &t.output) == *expected;
        Ok(CheckedRun {
            seconds: t.seconds,
            clock: t.clock,
            differing_output: (!same).then_some(t.output),
        })
    }

    /// Runs one route eagerly, fingerprints its output in `mode` and keeps
    /// its first `keep` bytes on the host (the audit keeps what its
    /// contracts compare, so large outputs need not fit in host memory).
    /// The default runs [`GemmBackend::run_timed`] and fingerprints on the
    /// host; a device backend should fingerprint on the device and copy
    /// back only the kept bytes.
    fn run_keeping(
        &self,
        route: &ResolvedGemmRoute,
        seed: u64,
        mode: FingerprintMode,
        keep: usize,
    ) -> Result<KeptRun> {
        let t = self.run_timed(route, seed)?;
        let fingerprint = OutputFingerprint::with_mode(mode, seed, &t.output);
        let output_len = t.output.len();
        let mut kept = t.output;
        kept.truncate(keep);
        kept.shrink_to_fit();
        Ok(KeptRun {
            fingerprint,
            kept,
            output_len,
            seconds: t.seconds,
            clock: t.clock,
        })
    }

    /// The backend's part of a capture: prepares and captures `routes`
    /// (inputs seeded by `seeds`, one per route) and says what it captured.
    /// [`GemmBackend::capture`] has checked the request before calling it.
    fn capture_launches(
        &self,
        routes: &[ResolvedGemmRoute],
        seeds: &[u64],
    ) -> Result<CapturedLaunches<Self::Launches>>;

    /// The backend's part of a replay: launches a captured graph (already
    /// validated) and returns its outputs in storage bytes, in route order.
    /// Refuses launches another device context captured.
    fn launch(&self, launches: &Self::Launches) -> Result<Vec<Vec<u8>>>;

    /// [`GemmBackend::launch`], returning each output's fingerprint in
    /// `mode` (launch `i`'s with `seeds[i]`) instead of its bytes. The
    /// default fingerprints on the host; a device backend should
    /// fingerprint where the outputs live.
    fn launch_fingerprinted(
        &self,
        launches: &Self::Launches,
        seeds: &[u64],
        mode: FingerprintMode,
    ) -> Result<Vec<OutputFingerprint>> {
        let outputs = self.launch(launches)?;
        Ok(OutputFingerprint::all_with_mode(mode, seeds, &outputs))
    }

    /// Captures `routes` into a graph prepared from `manifest`: the request
    /// must reserve exactly the manifest's launch count with one seed per
    /// route, and what was captured must reproduce the manifest's launch set.
    fn capture(
        &self,
        manifest: &PreparedGemmCaptureManifest,
        routes: &[ResolvedGemmRoute],
        seeds: &[u64],
    ) -> Result<GemmGraph<Self::Launches>> {
        manifest.check_capture_request(routes.len() as u64)?;
        if seeds.len() != routes.len() {
            return Err(Error::backend(
                self.name(),
                format!("{} input seeds for {} routes", seeds.len(), routes.len()),
            ));
        }
        let captured = self.capture_launches(routes, seeds)?;
        let set = build_resolved_gemm_launch_set(&captured.routes)?;
        let plan = CapturedGemmGraphPlan::new(manifest.clone(), captured.routes)?;
        plan.check_capture_result(&set)?;
        Ok(GemmGraph {
            launches: captured.launches,
            plan,
            physical: captured.physical,
            seeds: seeds.to_vec(),
        })
    }

    /// Replays a graph only through its plan's validation against this
    /// backend's live context; a refusal launches nothing.
    fn replay(&self, graph: &GemmGraph<Self::Launches>, label: &str) -> Result<Vec<Vec<u8>>> {
        graph
            .plan
            .with_validated_launch(&self.live_context(), label, |_| {
                self.launch(&graph.launches)
            })?
    }

    /// [`GemmBackend::replay`], returning each output's fingerprint in
    /// `mode` (with its launch's input seed) instead of its bytes.
    fn replay_fingerprinted(
        &self,
        graph: &GemmGraph<Self::Launches>,
        label: &str,
        mode: FingerprintMode,
    ) -> Result<Vec<OutputFingerprint>> {
        graph
            .plan
            .with_validated_launch(&self.live_context(), label, |_| {
                self.launch_fingerprinted(&graph.launches, &graph.seeds, mode)
            })?
    }
}
