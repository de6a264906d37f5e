//! The embedding API: the route recorder's modes and refusals, record_eager,
//! capture discipline on a CPU stream, guarded replays and plans as Option.

use gemm_audit::backend::cpu::CpuStream;
use gemm_audit::recorder::{
    self, CaptureStream, GemmRouteRecorder, RecorderError, RecorderMode,
    require_deterministic_gemm_graph_plan,
};
use gemm_audit::{Error, GemmPolicy, PolicyMode, ResolvedGemmRoute, testkit};
use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::Rc;

fn routes(n: u64) -> Vec<ResolvedGemmRoute> {
    testkit::sample_routes(n)
}

/// A step that pushes `routes` and launches one counted op per route.
fn step(
    stream: &CpuStream,
    rec: &GemmRouteRecorder,
    routes: &[ResolvedGemmRoute],
    ran: &Rc<Cell<u32>>,
) -> Result<(), Error> {
    for r in routes {
        rec.push(r.clone())?;
        let ran = ran.clone();
        stream.launch(move || ran.set(ran.get() + 1));
    }
    Ok(())
}

#[test]
fn recorder_refuses_nesting_idle_pushes_and_wrong_modes() {
    let rec = GemmRouteRecorder::new();
    let live = testkit::context();
    assert!(matches!(
        rec.push(testkit::sample_route(0)),
        Err(RecorderError::NotRecording { .. })
    ));
    let g = rec.begin_eager(&live).unwrap();
    assert!(matches!(
        rec.begin_eager(&live),
        Err(RecorderError::Nested {
            active: RecorderMode::Eager
        })
    ));
    assert!(matches!(
        rec.begin_capture(&live, 4),
        Err(RecorderError::Nested { .. })
    ));
    rec.push(testkit::sample_route(0)).unwrap();
    assert_eq!(
        g.finish_capture(&live).unwrap_err(),
        RecorderError::WrongMode {
            active: RecorderMode::Eager,
            asked: RecorderMode::Capture
        }
    );
    // Finishing (even refused) clears the recorder.
    assert_eq!(rec.mode(), RecorderMode::Idle);
    let g = rec.begin_capture(&live, 1).unwrap();
    assert!(matches!(
        g.finish_eager(&live),
        Err(RecorderError::WrongMode {
            active: RecorderMode::Capture,
            ..
        })
    ));
}

#[test]
fn capture_mode_refuses_pushes_over_capacity_and_cannot_finish() {
    let rec = GemmRouteRecorder::new();
    let live = testkit::context();
    let g = rec.begin_capture(&live, 2).unwrap();
    rec.push(testkit::sample_route(0)).unwrap();
    rec.push(testkit::sample_route(1)).unwrap();
    let e = rec.push(testkit::sample_route(2)).unwrap_err();
    assert!(
        matches!(e, RecorderError::OverCapacity { capacity: 2, .. }),
        "{e}"
    );
    assert_eq!(rec.len(), 2);
    // Ignoring the push error does not help: the recording is spoiled.
    assert!(matches!(
        g.finish_capture(&live),
        Err(RecorderError::OverCapacity { .. })
    ));
}

#[test]
fn a_policy_change_while_recording_is_refused() {
    let rec = GemmRouteRecorder::new();
    let live = testkit::context();
    let g = rec.begin_eager(&live).unwrap();
    rec.push(testkit::sample_route(0)).unwrap();
    let flipped = live.with_policy(GemmPolicy {
        mode: PolicyMode::CublasFast,
        ..live.policy
    });
    match g.finish_eager(&flipped) {
        Err(RecorderError::ContextChanged(r)) => assert_eq!(r.change().field, "policy.mode"),
        other => panic!("{other:?}"),
    }
}

/// A dispatcher that resolved a route the recording's context cannot serve
/// (its policy flipped mid-step to tensor cores, here) is refused at that
/// push, not at the end; the recording then cannot finish.
#[test]
fn an_unservable_push_is_refused_when_it_happens() {
    let rec = GemmRouteRecorder::new();
    let mut live = testkit::context();
    live.policy.tensor_cores = false;
    let live = live.with_policy(live.policy);
    let g = rec.begin_eager(&live).unwrap();
    // A scalar route is servable; a tensor-core one is not, under this policy.
    let routes = routes(30);
    let scalar = routes.iter().find(|r| !r.uses_tensor_cores).unwrap();
    let tc = routes.iter().find(|r| r.uses_tensor_cores).unwrap();
    rec.push(scalar.clone()).unwrap();
    match rec.push(tc.clone()) {
        Err(RecorderError::Unservable { gemm, refusal }) => {
            assert_eq!(gemm, tc.gemm);
            assert_eq!(refusal.stage, gemm_audit::RefusalStage::Recording);
            assert_eq!(refusal.route_index, Some(1));
            assert!(
                ["uses_tensor_cores", "contract.kind"].contains(&refusal.change().field.as_str()),
                "{refusal}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(rec.len(), 1, "the refused route was not recorded");
    assert!(matches!(
        g.finish_eager(&live),
        Err(RecorderError::Unservable { .. })
    ));
    assert_eq!(rec.mode(), RecorderMode::Idle);
}

/// CUDA stream capture is per thread: a capture recording takes pushes
/// from the thread that began it only; an eager one from any thread.
#[test]
fn a_capture_takes_pushes_from_its_own_thread_only() {
    let rec = GemmRouteRecorder::new();
    let live = testkit::context();
    let g = rec.begin_capture(&live, 2).unwrap();
    rec.push(testkit::sample_route(0)).unwrap();
    let other = std::thread::scope(|s| {
        s.spawn(|| rec.push(testkit::sample_route(1)))
            .join()
            .unwrap()
    });
    assert!(
        matches!(other, Err(RecorderError::WrongThread { .. })),
        "{other:?}"
    );
    assert!(matches!(
        g.finish_capture(&live),
        Err(RecorderError::WrongThread { .. })
    ));

    let g = rec.begin_eager(&live).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| rec.push(testkit::sample_route(1)))
            .join()
            .unwrap()
    })
    .expect("an eager recording takes pushes from any thread");
    assert_eq!(g.finish_eager(&live).unwrap().len(), 1);
}

#[test]
fn the_recorder_is_cleared_on_drop_error_and_panic() {
    let rec = GemmRouteRecorder::new();
    let live = testkit::context();
    {
        let _g = rec.begin_eager(&live).unwrap();
        rec.push(testkit::sample_route(0)).unwrap();
    }
    assert_eq!((rec.mode(), rec.len()), (RecorderMode::Idle, 0));

    let r: Result<((), _), Error> = recorder::record_eager(&rec, &live, || {
        rec.push(testkit::sample_route(0))?;
        Err(Error::backend("engine", "step failed"))
    });
    assert!(r.is_err());
    assert_eq!(rec.mode(), RecorderMode::Idle);

    let panicked = catch_unwind(AssertUnwindSafe(|| {
        let _ = recorder::record_eager(&rec, &live, || -> Result<(), Error> {
            rec.push(testkit::sample_route(0))?;
            panic!("engine bug");
        });
    }));
    assert!(panicked.is_err());
    assert_eq!(rec.mode(), RecorderMode::Idle);
    // And a new recording can begin.
    assert!(rec.begin_eager(&live).is_ok());
}

#[test]
fn record_eager_gives_the_manifest_or_none_for_a_step_without_gemms() {
    let rec = GemmRouteRecorder::new();
    let live = testkit::context();
    let stream = CpuStream::new();
    let ran = Rc::new(Cell::new(0));
    let want = routes(3);
    let ((), eager) =
        recorder::record_eager(&rec, &live, || step(&stream, &rec, &want, &ran)).unwrap();
    assert_eq!(ran.get(), 3, "eager work runs at once");
    assert_eq!(eager.routes, want);
    let m = eager.manifest.unwrap();
    assert_eq!(
        m.launch_set,
        gemm_audit::build_resolved_gemm_launch_set(&want).unwrap()
    );
    assert_eq!(m.route_capacity, 3);
    assert_eq!(m.context, live);

    let ((), empty) = recorder::record_eager(&rec, &live, || Ok::<(), Error>(())).unwrap();
    assert!(empty.manifest.is_none() && empty.routes.is_empty());

    // Routes that do not form a launch set are refused.
    let mut bad = routes(1);
    bad[0].launch.grid = [0, 1, 1];
    let r = recorder::record_eager(&rec, &live, || step(&stream, &rec, &bad, &ran));
    assert!(matches!(
        r,
        Err(Error::Recorder(RecorderError::LaunchSet(_)))
    ));
}

#[test]
fn capture_then_guarded_replay() {
    let rec = GemmRouteRecorder::new();
    let live = testkit::context();
    let stream = CpuStream::new();
    let ran = Rc::new(Cell::new(0));
    let want = routes(4);
    let ((), eager) =
        recorder::record_eager(&rec, &live, || step(&stream, &rec, &want, &ran)).unwrap();
    let manifest = eager.manifest.unwrap();
    ran.set(0);
    let ((), cap) = recorder::capture(&stream, &rec, Some(&manifest), &live, || {
        step(&stream, &rec, &want, &ran)
    })
    .unwrap();
    assert_eq!(ran.get(), 0, "captured work does not run");
    assert!(!stream.is_capturing());
    assert_eq!(cap.gemm_launches, 4);
    assert_eq!(cap.graph.len(), 4);
    let plan = cap.plan.as_ref().unwrap();
    assert_eq!(plan.routes(), &want[..]);

    cap.launch_validated(&live, "replay", |g| g.launch())
        .unwrap();
    assert_eq!(ran.get(), 4);

    // A changed live context: refused, and the graph never launched.
    let flipped = live.with_policy(GemmPolicy {
        tensor_cores: false,
        ..live.policy
    });
    let r = cap.launch_validated(&flipped, "flipped", |g| g.launch());
    assert_eq!(r.unwrap_err().change().field, "policy.tensor_cores");
    assert_eq!(ran.get(), 4);
}

#[test]
fn capture_refuses_a_changed_context_at_the_request_without_running_the_body() {
    let rec = GemmRouteRecorder::new();
    let live = testkit::context();
    let stream = CpuStream::new();
    let manifest =
        gemm_audit::PreparedGemmCaptureManifest::from_routes(live.clone(), &routes(2)).unwrap();
    let mut other = live.clone();
    other.revisions.schedule += 1;
    let body_ran = Cell::new(false);
    let r = recorder::capture(&stream, &rec, Some(&manifest), &other, || {
        body_ran.set(true);
        Ok::<(), Error>(())
    });
    match r {
        Err(Error::Refused(refusal)) => {
            assert_eq!(refusal.stage, gemm_audit::RefusalStage::CaptureRequest);
            assert_eq!(refusal.change().field, "revisions.schedule");
        }
        other => panic!("{other:?}"),
    }
    assert!(!body_ran.get());
    assert!(!stream.is_capturing());
}

#[test]
fn capture_of_a_different_step_is_refused_at_the_capture_result() {
    let rec = GemmRouteRecorder::new();
    let live = testkit::context();
    let stream = CpuStream::new();
    let ran = Rc::new(Cell::new(0));
    let manifest =
        gemm_audit::PreparedGemmCaptureManifest::from_routes(live.clone(), &routes(3)).unwrap();
    let mut swapped = routes(3);
    swapped.swap(0, 2);
    let r = recorder::capture(&stream, &rec, Some(&manifest), &live, || {
        step(&stream, &rec, &swapped, &ran)
    });
    match r {
        Err(Error::Refused(refusal)) => {
            assert_eq!(refusal.stage, gemm_audit::RefusalStage::CaptureResult);
            assert_eq!(refusal.change().field, "ordered_digest");
        }
        other => panic!("{other:?}"),
    }
    // One GEMM more than the eager run: over capacity.
    let r = recorder::capture(&stream, &rec, Some(&manifest), &live, || {
        step(&stream, &rec, &routes(4), &ran)
    });
    assert!(matches!(
        r,
        Err(Error::Recorder(RecorderError::OverCapacity { .. }))
    ));
    // Without a manifest no GEMM may be captured at all.
    let r = recorder::capture(&stream, &rec, None, &live, || {
        step(&stream, &rec, &routes(1), &ran)
    });
    assert!(matches!(
        r,
        Err(Error::Recorder(RecorderError::OverCapacity {
            capacity: 0,
            ..
        }))
    ));
    assert!(!stream.is_capturing());
    assert_eq!(rec.mode(), RecorderMode::Idle);
}

#[test]
fn a_panic_in_the_body_is_resumed_after_the_capture_ended() {
    let rec = GemmRouteRecorder::new();
    let live = testkit::context();
    let stream = CpuStream::new();
    let manifest =
        gemm_audit::PreparedGemmCaptureManifest::from_routes(live.clone(), &routes(1)).unwrap();
    let r = catch_unwind(AssertUnwindSafe(|| {
        let _ = recorder::capture(
            &stream,
            &rec,
            Some(&manifest),
            &live,
            || -> Result<(), Error> {
                assert!(stream.is_capturing());
                panic!("engine bug during capture");
            },
        );
    }));
    let payload = r.unwrap_err();
    assert_eq!(
        payload.downcast_ref::<&str>(),
        Some(&"engine bug during capture")
    );
    assert!(!stream.is_capturing(), "the capture was ended");
    assert_eq!(rec.mode(), RecorderMode::Idle);
}

/// A stream whose end of capture fails, to see both errors reported.
struct FailingEnd(CpuStream);

impl CaptureStream for FailingEnd {
    type Graph = gemm_audit::backend::cpu::CpuStreamGraph;
    type Error = gemm_audit::backend::cpu::CpuStreamError;
    fn begin_capture(&self) -> Result<(), Self::Error> {
        self.0.begin_capture()
    }
    fn end_capture(&self) -> Result<Self::Graph, Self::Error> {
        self.0.end_capture()?;
        Err(gemm_audit::backend::cpu::CpuStreamError::NotCapturing)
    }
    fn upload(&self, g: &Self::Graph) -> Result<(), Self::Error> {
        self.0.upload(g)
    }
}

#[test]
fn when_body_and_end_both_fail_both_are_reported() {
    let rec = GemmRouteRecorder::new();
    let live = testkit::context();
    let stream = FailingEnd(CpuStream::new());
    let r = recorder::capture(&stream, &rec, None, &live, || {
        Err::<(), Error>(Error::backend("engine", "body failed"))
    });
    let msg = r.unwrap_err().to_string();
    assert!(msg.contains("body failed"), "{msg}");
    assert!(msg.contains("ending the capture failed too"), "{msg}");
    assert!(!stream.0.is_capturing());
}

#[test]
fn plans_are_optional_but_required_for_deterministic_gemm_work() {
    let rec = GemmRouteRecorder::new();
    let live = testkit::context();
    let stream = CpuStream::new();
    // A step without GEMM work: no plan, and it replays.
    let ((), cap) = recorder::capture(&stream, &rec, None, &live, || {
        stream.launch(|| {});
        Ok::<(), Error>(())
    })
    .unwrap();
    assert!(cap.plan.is_none());
    assert_eq!(cap.gemm_launches, 0);
    assert!(
        cap.launch_validated(&live, "no-gemm", |g| g.launch())
            .is_ok()
    );

    // GEMM work without a plan is refused under the deterministic policy...
    let r = require_deterministic_gemm_graph_plan(&live, 2, None).unwrap_err();
    assert_eq!(r.change().field, "plan");
    // ...but not under a vendor policy, which promises no fixed kernels.
    let vendor = live.with_policy(GemmPolicy {
        mode: PolicyMode::CublasFast,
        ..live.policy
    });
    assert!(require_deterministic_gemm_graph_plan(&vendor, 2, None).is_ok());
    // A plan for another launch count is refused.
    let plan = testkit::sample_trace(3).plan().unwrap();
    let r = require_deterministic_gemm_graph_plan(&live, 2, Some(&plan)).unwrap_err();
    assert_eq!(r.change().field, "launch_count");
    assert!(require_deterministic_gemm_graph_plan(&live, 3, Some(&plan)).is_ok());
}

// ------------------------------------------- an engine's own GemmBackend

use gemm_audit::backend::cpu::{CpuBackend, CpuLaunches};
use gemm_audit::backend::{Backend, CapturedLaunches, GemmBackend};

/// An engine backend: the CPU kernels under the engine's own name, with
/// its own launch type, run through the whole audit. It writes only its
/// own part of a capture; the discipline is the trait's.
#[derive(Debug, Default)]
struct MyEngine(CpuBackend);

/// What the engine keeps of a capture.
#[derive(Debug)]
struct MyLaunches(CpuLaunches);

impl GemmBackend for MyEngine {
    type Launches = MyLaunches;

    fn name(&self) -> &str {
        "my-engine"
    }
    fn context(&self) -> &gemm_audit::GemmRouteIdentity {
        self.0.context()
    }
    fn with_policy(&self, policy: GemmPolicy) -> MyEngine {
        MyEngine(CpuBackend::new(policy))
    }
    fn resolve(
        &self,
        spec: &gemm_audit::kernels::GemmSpec,
    ) -> gemm_audit::Result<ResolvedGemmRoute> {
        self.0.resolve(spec)
    }
    fn run(&self, route: &ResolvedGemmRoute, seed: u64) -> gemm_audit::Result<Vec<u8>> {
        self.0.run(route, seed)
    }
    fn capture_launches(
        &self,
        routes: &[ResolvedGemmRoute],
        seeds: &[u64],
    ) -> gemm_audit::Result<CapturedLaunches<MyLaunches>> {
        let c = self.0.capture_launches(routes, seeds)?;
        Ok(CapturedLaunches {
            launches: MyLaunches(c.launches),
            routes: c.routes,
            physical: c.physical,
        })
    }
    fn launch(&self, launches: &MyLaunches) -> gemm_audit::Result<Vec<Vec<u8>>> {
        self.0.launch(&launches.0)
    }
}

#[test]
fn an_engine_backend_runs_the_whole_record_and_check() {
    let backend = Backend::new(MyEngine::default());
    assert_eq!(backend.name(), "my-engine");
    let mut w = gemm_audit::workload::Workload::builtin("m-sweep").unwrap();
    w.gemms.truncate(3);
    let rec = recorder::record(&backend, &w, &mut |_, _| {}).unwrap();
    assert!(rec.replay.is_identical(), "{:?}", rec.replay);
    // An engine that does not time its kernels is timed around the whole
    // run, and says so.
    assert_eq!(rec.clock, gemm_audit::kernels::TimingClock::HostWall);
    assert_eq!(rec.seconds.len(), 3);
    let report = recorder::check(&backend, &rec.trace, Some(&rec.trace), true).unwrap();
    assert!(report.passed(), "{report:?}");
    // Under a policy flip the same trace is refused before launch.
    let flipped = backend.with_policy(GemmPolicy {
        tensor_cores: true,
        ..backend.context().policy
    });
    let report = recorder::check(&flipped, &rec.trace, None, true).unwrap();
    assert!(!report.passed());
    assert!(report.replay.is_none(), "nothing refused is launched");
}

/// The live context's health: a failed capture poisons it, and no replay
/// (nor another capture) runs until the engine re-validates it; an
/// unverified change poisons it the same way.
#[test]
fn a_poisoned_context_refuses_replays_until_revalidated() {
    use gemm_audit::recorder::LiveGemmContext;
    let rec = GemmRouteRecorder::new();
    let live = LiveGemmContext::new(testkit::context());
    let stream = CpuStream::new();
    let ran = Rc::new(Cell::new(0));
    let want = routes(3);
    let ((), eager) =
        recorder::record_eager(&rec, &live.identity(), || step(&stream, &rec, &want, &ran))
            .unwrap();
    let manifest = eager.manifest.unwrap();
    let ((), captured) = live
        .capture(&stream, &rec, Some(&manifest), || {
            step(&stream, &rec, &want, &ran)
        })
        .unwrap();
    live.launch_validated(&captured, "ok", |g| g.launch())
        .unwrap();

    // A capture whose step fails poisons the context.
    let failed = live.capture(&stream, &rec, Some(&manifest), || {
        Err::<(), Error>(Error::backend("engine", "the step failed mid-capture"))
    });
    assert!(failed.is_err());
    assert!(
        live.poisoned()
            .unwrap()
            .contains("the step failed mid-capture")
    );
    let mut launched = false;
    let refused = live.launch_validated(&captured, "poisoned", |_| launched = true);
    assert!(!launched, "a poisoned context launched");
    assert_eq!(refused.unwrap_err().change().field, "context.health");
    assert!(matches!(
        live.capture(&stream, &rec, Some(&manifest), || step(
            &stream, &rec, &want, &ran
        )),
        Err(Error::Refused(_))
    ));

    // Re-validated: replays run again.
    live.revalidate(testkit::context()).unwrap();
    live.launch_validated(&captured, "revalidated", |g| g.launch())
        .unwrap();

    // An unverified change (a math mode someone else set) poisons it too,
    // and a re-validation under another context refuses the old plan.
    live.poison("math mode changed, not verified");
    assert!(
        live.launch_validated(&captured, "changed", |g| g.launch())
            .is_err()
    );
    let mut other = testkit::context();
    other.policy.tensor_cores = !other.policy.tensor_cores;
    live.revalidate(other.with_policy(other.policy)).unwrap();
    let refused = live
        .launch_validated(&captured, "other", |g| g.launch())
        .unwrap_err();
    assert_eq!(refused.change().field, "policy.tensor_cores");
}

/// Recording through the live context reads it at both ends of the step:
/// a policy change asked for mid-step is refused when it is asked for (and
/// the step completes under the old context), a poison mid-step refuses
/// the step even when the context was re-validated before it ended.
#[test]
fn a_context_change_during_a_step_is_refused_when_it_happens() {
    use gemm_audit::recorder::LiveGemmContext;
    let rec = GemmRouteRecorder::new();
    let live = LiveGemmContext::new(testkit::context());
    let stream = CpuStream::new();
    let ran = Rc::new(Cell::new(0));
    let want = routes(3);
    let mut flipped = testkit::context();
    flipped.policy.tensor_cores = !flipped.policy.tensor_cores;
    let flipped = flipped.clone().with_policy(flipped.policy);

    // A policy change asked for in the middle of the step: refused at once,
    // naming the field; the step's recording is intact.
    let ((), eager) = live
        .record_eager(&rec, || {
            step(&stream, &rec, &want[..1], &ran)?;
            let refused = live.revalidate(flipped.clone()).unwrap_err();
            assert_eq!(refused.change().field, "policy.tensor_cores");
            assert_eq!(refused.stage, gemm_audit::RefusalStage::Recording);
            step(&stream, &rec, &want[1..], &ran)
        })
        .unwrap();
    assert_eq!(eager.routes, want);
    assert_eq!(live.identity(), testkit::context());
    let manifest = eager.manifest.unwrap();

    // Poisoned mid-step, re-validated before the end: the step is refused.
    let refused = live
        .record_eager(&rec, || {
            step(&stream, &rec, &want, &ran)?;
            live.poison("a library set the math mode");
            live.revalidate(testkit::context())?;
            Ok::<(), Error>(())
        })
        .unwrap_err();
    let Error::Refused(r) = refused else {
        panic!("{refused:?}")
    };
    assert_eq!(r.change().field, "context.health");
    assert!(
        r.change().found.contains("a library set the math mode"),
        "{r}"
    );
    assert!(live.poisoned().is_none(), "the re-validation stands");

    // The same for a capture: its graph is dropped, nothing is replayed.
    let refused = live
        .capture(&stream, &rec, Some(&manifest), || {
            step(&stream, &rec, &want, &ran)?;
            live.poison("allocator reset");
            Ok::<(), Error>(())
        })
        .unwrap_err();
    assert!(matches!(refused, Error::Refused(_)), "{refused:?}");
    assert!(live.poisoned().unwrap().contains("allocator reset"));

    // Between steps the change is accepted, and the old plan is refused.
    live.revalidate(testkit::context()).unwrap();
    let ((), captured) = live
        .capture(&stream, &rec, Some(&manifest), || {
            step(&stream, &rec, &want, &ran)
        })
        .unwrap();
    live.revalidate(flipped).unwrap();
    let mut launched = false;
    let refused = live
        .launch_validated(&captured, "flipped", |_| launched = true)
        .unwrap_err();
    assert!(!launched);
    assert_eq!(refused.change().field, "policy.tensor_cores");
}

/// `serves_route` answers exactly what `serves(&Service::of(route))` does.
#[test]
fn serves_route_agrees_with_the_service_it_would_build() {
    let m = testkit::module();
    let mut served = 0;
    for r in routes(40) {
        for s in &m.symbols {
            let mut other = r.clone();
            other.operand_conversion = gemm_audit::vocab::OperandConversion::Tf32Round;
            for x in [&r, &other] {
                assert_eq!(
                    s.serves_route(x),
                    s.serves(&gemm_audit::Service::of(x)),
                    "{} {}",
                    s.name,
                    x.gemm
                );
                served += s.serves_route(x) as u32;
            }
        }
    }
    assert!(served >= 40, "every sample route is served by its symbol");
}

/// Every line of code in `docs/embedding.md`'s Rust snippets is a line of
/// a compiled example (comments and elisions aside), so the page
/// cannot show an API that does not build: `examples/engine.rs` compiles
/// under `--features cuda` (clippy in CI), `cpu_engine.rs` in every build.
#[test]
fn embedding_md_snippets_are_compiled_code() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap();
    // Code without its comment, whitespace collapsed.
    let code = |line: &str| -> String {
        let line = match line.find("//") {
            Some(i) if !line[..i].contains('"') => &line[..i],
            _ => line,
        };
        line.split_whitespace().collect::<Vec<_>>().join(" ")
    };
    let compiled: std::collections::HashSet<String> =
        ["examples/engine.rs", "examples/cpu_engine.rs"]
            .iter()
            .flat_map(|p| read(p).lines().map(code).collect::<Vec<_>>())
            .collect();
    let doc = read("docs/embedding.md");
    let (mut in_rust, mut checked, mut missing) = (false, 0, Vec::new());
    for (n, line) in doc.lines().enumerate() {
        if line.starts_with("```") {
            in_rust = line == "```rust";
            continue;
        }
        let c = code(line);
        if in_rust && !c.is_empty() {
            checked += 1;
            if !compiled.contains(&c) {
                missing.push(format!("docs/embedding.md:{}: {c}", n + 1));
            }
        }
    }
    assert!(checked > 40, "only {checked} snippet lines found");
    assert!(
        missing.is_empty(),
        "snippet lines no example compiles:\n{}",
        missing.join("\n")
    );
}
