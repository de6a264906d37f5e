//! The recorder an engine's GEMM dispatcher pushes routes to, and the
//! record / capture calls around one step of the engine.

use crate::error::{Error, Refusal, RefusalStage};
pub use crate::error::{RecorderError, RecorderMode};
use crate::identity::GemmRouteIdentity;
use crate::launch_set::build_resolved_gemm_launch_set;
use crate::plan::{CapturedGemmGraphPlan, PreparedGemmCaptureManifest};
use crate::policy::PolicyMode;
use crate::route::ResolvedGemmRoute;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::{Mutex, MutexGuard};

/// A stream that can be captured into a replayable graph: the engine's own
/// CUDA stream (`cuda::CudaCaptureStream`, with the `cuda` feature), or a
/// CPU stream (`gemm_audit::backend::cpu::CpuStream`).
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

#[derive(Debug)]
enum State {
    Idle,
    Active {
        mode: RecorderMode,
        context: Box<GemmRouteIdentity>,
        routes: Vec<ResolvedGemmRoute>,
        capacity: usize,
        /// The thread a capture was begun on (capture is per thread);
        /// `None` for an eager recording, which any thread may push to.
        thread: Option<std::thread::ThreadId>,
        /// A push was refused: the recording cannot be finished.
        overflowed: Option<RecorderError>,
    },
}

/// The route recorder an engine's GEMM dispatcher pushes to.
///
/// The engine owns one (it is `Sync`, so a shared reference reaches every
/// thread that launches GEMMs) and its dispatcher calls
/// [`GemmRouteRecorder::push`] once per GEMM launch, with the route it
/// resolved. Between recordings pushes are refused, so a GEMM launched
/// outside a recorded step is noticed rather than silently dropped.
///
/// ```
/// use gemm_audit_model::recorder::{GemmRouteRecorder, RecorderError, RecorderMode};
/// use gemm_audit_model::testkit;
///
/// let recorder = GemmRouteRecorder::new();
/// let live = testkit::context();
/// let guard = recorder.begin_eager(&live).unwrap();
/// assert_eq!(recorder.mode(), RecorderMode::Eager);
/// // Recordings do not nest.
/// assert!(matches!(recorder.begin_eager(&live), Err(RecorderError::Nested { .. })));
/// recorder.push(testkit::sample_route(0)).unwrap();
/// let routes = guard.finish_eager(&live).unwrap();
/// assert_eq!(routes.len(), 1);
/// assert_eq!(recorder.mode(), RecorderMode::Idle);
/// ```
#[derive(Debug)]
pub struct GemmRouteRecorder {
    state: Mutex<State>,
}

impl Default for GemmRouteRecorder {
    fn default() -> Self {
        Self::new()
    }
}

impl GemmRouteRecorder {
    /// An idle recorder.
    pub const fn new() -> Self {
        GemmRouteRecorder {
            state: Mutex::new(State::Idle),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while the lock was held (in a dispatcher) leaves plain
        // data behind; the guard's drop resets it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current mode.
    pub fn mode(&self) -> RecorderMode {
        match &*self.lock() {
            State::Idle => RecorderMode::Idle,
            State::Active { mode, .. } => *mode,
        }
    }

    /// Routes pushed so far in the active recording (0 when idle).
    pub fn len(&self) -> usize {
        match &*self.lock() {
            State::Idle => 0,
            State::Active { routes, .. } => routes.len(),
        }
    }

    /// True when no route was pushed to the active recording (or none is active).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn begin(
        &self,
        mode: RecorderMode,
        context: &GemmRouteIdentity,
        capacity: usize,
    ) -> Result<RecordingGuard<'_>, RecorderError> {
        let mut state = self.lock();
        if let State::Active { mode: active, .. } = &*state {
            return Err(RecorderError::Nested { active: *active });
        }
        *state = State::Active {
            mode,
            context: Box::new(context.clone()),
            routes: Vec::with_capacity(capacity),
            capacity,
            thread: (mode == RecorderMode::Capture).then(|| std::thread::current().id()),
            overflowed: None,
        };
        Ok(RecordingGuard {
            recorder: self,
            mode,
        })
    }

    /// Begins an eager recording under `live`: storage grows with every
    /// push. Refused while another recording is active.
    pub fn begin_eager(
        &self,
        live: &GemmRouteIdentity,
    ) -> Result<RecordingGuard<'_>, RecorderError> {
        self.begin(RecorderMode::Eager, live, 0)
    }

    /// Begins a capture recording of `capacity` routes under `live`: the
    /// storage is reserved once, so pushes during capture never allocate,
    /// and a push beyond `capacity` is refused. Refused while another
    /// recording is active.
    pub fn begin_capture(
        &self,
        live: &GemmRouteIdentity,
        capacity: usize,
    ) -> Result<RecordingGuard<'_>, RecorderError> {
        self.begin(RecorderMode::Capture, live, capacity)
    }

    /// Records one GEMM launch. Refused when idle; in capture mode beyond
    /// the reserved capacity or from another thread than the capturing
    /// one; and whenever the recording's context cannot serve the route
    /// (the replay guard's per-route rules: a policy changed mid-step shows
    /// here, at the first route resolved under it). After a refusal the
    /// recording cannot finish.
    pub fn push(&self, route: ResolvedGemmRoute) -> Result<(), RecorderError> {
        let mut state = self.lock();
        match &mut *state {
            State::Idle => Err(RecorderError::NotRecording { gemm: route.gemm }),
            State::Active {
                mode,
                context,
                routes,
                capacity,
                thread,
                overflowed,
            } => {
                let refused = if thread.is_some_and(|t| t != std::thread::current().id()) {
                    Some(RecorderError::WrongThread {
                        gemm: route.gemm.clone(),
                    })
                } else if *mode == RecorderMode::Capture && routes.len() == *capacity {
                    Some(RecorderError::OverCapacity {
                        capacity: *capacity,
                        gemm: route.gemm.clone(),
                    })
                } else {
                    crate::plan::check_route(context, routes.len() as u64, &route)
                        .err()
                        .map(|mut r| {
                            r.stage = RefusalStage::Recording;
                            RecorderError::Unservable {
                                gemm: route.gemm.clone(),
                                refusal: Box::new(r),
                            }
                        })
                };
                match refused {
                    Some(e) => {
                        overflowed.get_or_insert_with(|| e.clone());
                        Err(e)
                    }
                    None => {
                        routes.push(route);
                        Ok(())
                    }
                }
            }
        }
    }
}

/// An active recording. Finish it with [`RecordingGuard::finish_eager`] or
/// [`RecordingGuard::finish_capture`]; dropping it (also on an error or a
/// panic in the step) clears the recorder, so the next step starts idle.
#[derive(Debug)]
#[must_use = "a recording is cleared when its guard drops"]
pub struct RecordingGuard<'a> {
    recorder: &'a GemmRouteRecorder,
    mode: RecorderMode,
}

impl RecordingGuard<'_> {
    /// The mode this recording was begun in.
    pub fn mode(&self) -> RecorderMode {
        self.mode
    }

    fn finish(
        self,
        asked: RecorderMode,
        live: &GemmRouteIdentity,
    ) -> Result<Vec<ResolvedGemmRoute>, RecorderError> {
        let state = std::mem::replace(&mut *self.recorder.lock(), State::Idle);
        let State::Active {
            mode,
            context,
            routes,
            overflowed,
            ..
        } = state
        else {
            // Only a guard sets Active, and only its drop or finish clears it.
            return Err(RecorderError::WrongMode {
                active: RecorderMode::Idle,
                asked,
            });
        };
        if mode != asked {
            return Err(RecorderError::WrongMode {
                active: mode,
                asked,
            });
        }
        if let Some(e) = overflowed {
            return Err(e);
        }
        if *context != *live {
            let refusal =
                crate::plan::context_refusal(RefusalStage::CaptureRequest, &context, live);
            return Err(RecorderError::ContextChanged(Box::new(refusal)));
        }
        Ok(routes)
    }

    /// Ends an eager recording: the routes in push order. Refused when the
    /// recording is a capture, or when `live` differs from the context the
    /// recording began under (a policy change while recording).
    pub fn finish_eager(
        self,
        live: &GemmRouteIdentity,
    ) -> Result<Vec<ResolvedGemmRoute>, RecorderError> {
        self.finish(RecorderMode::Eager, live)
    }

    /// Ends a capture recording: the routes in push order. Refused when the
    /// recording is eager, when a push overflowed, or when `live` changed.
    pub fn finish_capture(
        self,
        live: &GemmRouteIdentity,
    ) -> Result<Vec<ResolvedGemmRoute>, RecorderError> {
        self.finish(RecorderMode::Capture, live)
    }
}

impl Drop for RecordingGuard<'_> {
    fn drop(&mut self) {
        *self.recorder.lock() = State::Idle;
    }
}

/// What an eager step recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EagerRecording {
    /// The routes, in launch order.
    pub routes: Vec<ResolvedGemmRoute>,
    /// The manifest a capture of the step is prepared from; `None` when the
    /// step launched no GEMM (an empty launch set has no manifest).
    pub manifest: Option<PreparedGemmCaptureManifest>,
}

/// Runs `body` (one eager step of the engine) while `recorder` records in
/// eager mode under `live`, and returns the body's value with the routes
/// and the step's manifest.
///
/// Refused when a recording is already active, when a push was refused
/// (every push is checked against `live`), or when the routes do not form
/// a launch set (a zero grid, a placeholder arguments digest, ...). The
/// recorder is cleared on every path, a panic in `body` included (the panic
/// is resumed). `live` is one value for the whole step; an engine whose
/// context can change (or be poisoned) while a step runs records through
/// [`LiveGemmContext::record_eager`](super::LiveGemmContext::record_eager),
/// which reads it again at the end.
pub fn record_eager<T, E>(
    recorder: &GemmRouteRecorder,
    live: &GemmRouteIdentity,
    body: impl FnOnce() -> Result<T, E>,
) -> Result<(T, EagerRecording), E>
where
    E: From<Error>,
{
    let guard = recorder.begin_eager(live).map_err(Error::from)?;
    let value = body()?;
    let routes = guard.finish_eager(live).map_err(Error::from)?;
    let manifest = if routes.is_empty() {
        None
    } else {
        Some(
            PreparedGemmCaptureManifest::from_routes(live.clone(), &routes)
                .map_err(|e| Error::from(RecorderError::LaunchSet(e)))?,
        )
    };
    Ok((value, EagerRecording { routes, manifest }))
}

/// A captured step: its graph, the plan its replays are validated against
/// (`None` when the step launched no GEMM), and how many GEMM launches the
/// capture recorded.
#[derive(Debug)]
pub struct Captured<G> {
    /// The instantiated, uploaded graph.
    pub graph: G,
    /// The plan replays are validated against; `None` for a step without
    /// GEMM work.
    pub plan: Option<CapturedGemmGraphPlan>,
    /// GEMM launches recorded during the capture.
    pub gemm_launches: u64,
}

impl<G> Captured<G> {
    /// Calls `launch` with the graph only when a replay is valid under
    /// `live`: the plan (if any) validates against the live context, and
    /// under the deterministic policy GEMM work has a plan. Otherwise
    /// `launch` is never called.
    pub fn launch_validated<R>(
        &self,
        live: &GemmRouteIdentity,
        label: &str,
        launch: impl FnOnce(&G) -> R,
    ) -> Result<R, Refusal> {
        require_deterministic_gemm_graph_plan(live, self.gemm_launches, self.plan.as_ref())?;
        match &self.plan {
            Some(plan) => plan.with_validated_launch(live, label, |_| launch(&self.graph)),
            None => Ok(launch(&self.graph)),
        }
    }
}

/// Refuses a step whose GEMM work has no plan under the deterministic
/// policy, or whose plan's launch count is not the step's: a captured graph
/// with unrecorded GEMMs could replay any kernel.
///
/// Steps without GEMM work (`gemm_launches == 0`, no plan) pass. Vendor
/// policies only get the count check: they do not promise fixed kernels.
pub fn require_deterministic_gemm_graph_plan(
    live: &GemmRouteIdentity,
    gemm_launches: u64,
    plan: Option<&CapturedGemmGraphPlan>,
) -> Result<(), Refusal> {
    let stage = RefusalStage::ReplayValidation;
    match plan {
        None if gemm_launches > 0 && live.policy.mode == PolicyMode::Deterministic => {
            Err(Refusal::new(
                stage,
                None,
                "plan",
                "a captured GEMM plan (deterministic policy)",
                format!("none for {gemm_launches} GEMM launches"),
            ))
        }
        Some(p) if p.launch_set().launch_count != gemm_launches => Err(Refusal::new(
            stage,
            None,
            "launch_count",
            p.launch_set().launch_count,
            gemm_launches,
        )),
        _ => Ok(()),
    }
}

/// Captures `body` (the same step as the eager run that produced
/// `manifest`) into a graph on `stream`, recording its GEMM launches in
/// capture mode, and returns the body's value and the [`Captured`] graph.
///
/// The discipline, in order:
/// 1. the live context must equal the manifest's (refused at the capture
///    request, naming what changed);
/// 2. the recorder reserves exactly the manifest's launch count (0 without
///    a manifest: a step that launched no GEMM eagerly must not launch one
///    in capture);
/// 3. the stream is synchronized and capture begins;
/// 4. the capture is always ended, also when `body` fails or panics; a
///    panic is resumed after the capture has ended, and when both the body
///    and the end fail, both are reported;
/// 5. the captured routes must rebuild the manifest's launch set (capture
///    result check), and the plan is built from them;
/// 6. the graph is uploaded before it is returned.
pub fn capture<S, T, E>(
    stream: &S,
    recorder: &GemmRouteRecorder,
    manifest: Option<&PreparedGemmCaptureManifest>,
    live: &GemmRouteIdentity,
    body: impl FnOnce() -> Result<T, E>,
) -> Result<(T, Captured<S::Graph>), E>
where
    S: CaptureStream,
    E: From<Error> + fmt::Display,
{
    let capacity = match manifest {
        Some(m) => {
            if m.context != *live {
                return Err(Error::from(crate::plan::context_refusal(
                    RefusalStage::CaptureRequest,
                    &m.context,
                    live,
                ))
                .into());
            }
            m.check_capture_request(m.route_capacity)
                .map_err(Error::from)?;
            usize::try_from(m.route_capacity).map_err(|_| {
                Error::from(Refusal::new(
                    RefusalStage::CaptureRequest,
                    None,
                    "route_capacity",
                    "a capacity this machine can hold",
                    m.route_capacity,
                ))
            })?
        }
        None => 0,
    };
    let guard = recorder
        .begin_capture(live, capacity)
        .map_err(Error::from)?;
    stream
        .begin_capture()
        .map_err(stream_err("begin capture"))?;
    let body = catch_unwind(AssertUnwindSafe(body));
    let ended = stream.end_capture();
    let value = match (body, ended) {
        (Err(panic), _) => {
            drop(guard);
            resume_unwind(panic);
        }
        (Ok(Ok(v)), Ok(g)) => (v, g),
        (Ok(Err(b)), Ok(_)) => return Err(b),
        (Ok(Ok(_)), Err(e)) => return Err(stream_err("end capture")(e).into()),
        (Ok(Err(b)), Err(e)) => {
            let reason = format!("{b}; and ending the capture failed too: {e}");
            return Err(Error::backend_caused("capture", reason, e).into());
        }
    };
    let (value, graph) = value;
    let routes = guard.finish_capture(live).map_err(Error::from)?;
    let gemm_launches = routes.len() as u64;
    let plan = match manifest {
        None => None,
        Some(m) => {
            let captured = build_resolved_gemm_launch_set(&routes)
                .map_err(|e| Error::from(RecorderError::LaunchSet(e)))?;
            crate::plan::compare_launch_sets(RefusalStage::CaptureResult, &m.launch_set, &captured)
                .map_err(Error::from)?;
            Some(CapturedGemmGraphPlan::new(m.clone(), routes).map_err(Error::from)?)
        }
    };
    stream.upload(&graph).map_err(stream_err("graph upload"))?;
    Ok((
        value,
        Captured {
            graph,
            plan,
            gemm_launches,
        },
    ))
}

fn stream_err<X: std::error::Error + Send + Sync + 'static>(what: &str) -> impl FnOnce(X) -> Error {
    move |e| Error::backend_caused("capture", format!("{what}: {e}"), e)
}
