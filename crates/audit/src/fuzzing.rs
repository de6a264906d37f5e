//! Entry points for the fuzz targets in `fuzz/` (one-liners there call
//! these). Each asserts the invariants that must hold for any input; a
//! panic here is a bug.

use crate::PreparedGemmCaptureManifest;
use crate::backend::GemmBackend;
use crate::launch_set::build_resolved_gemm_launch_set;
use crate::plan::CapturedGemmGraphPlan;
use crate::trace::codec::{self, Limits};

/// Decodes arbitrary bytes as a trace file. Whatever decodes must re-encode
/// (in the current version) to the same bytes when it was of the current
/// version, and to a file that decodes to the same trace when it was
/// older; its plan must build or be refused without panicking.
pub fn decode_trace(data: &[u8]) {
    let limits = Limits {
        max_file_bytes: 4 << 20,
        ..Limits::default()
    };
    if let Ok(trace) = codec::decode_trace(data, &limits) {
        let again = codec::encode_trace(&trace).expect("a decoded trace re-encodes");
        let (version, _) = codec::open_versioned(data, &limits).expect("it decoded");
        if version == codec::FORMAT_VERSION {
            assert_eq!(again, data, "one trace, one encoding");
        } else {
            let upgraded = codec::decode_trace(&again, &limits).expect("an upgrade decodes");
            assert_eq!(upgraded, trace, "an upgraded trace reads back unchanged");
        }
        let _ = CapturedGemmGraphPlan::from_trace(&trace).map(|p| p.validate(&trace.context));
    }
}

/// Builds routes from arbitrary bytes (mutations of sample routes), then a
/// plan: a plan built against the original manifest must refuse any change,
/// and a re-digested one must be refused by the golden comparison.
pub fn plan_from_routes(data: &[u8]) {
    let Some((&count, ops)) = data.split_first() else {
        return;
    };
    let count = (count % 16) as u64 + 1;
    let golden_routes = crate::testkit::sample_routes(count);
    let golden = crate::testkit::sample_trace(count);
    let mut routes = golden_routes.clone();
    for chunk in ops.chunks(3) {
        crate::mutation::apply_bytes(&mut routes, chunk);
    }
    let changed = routes != golden_routes;
    let manifest = golden.manifest();
    match CapturedGemmGraphPlan::new(manifest.clone(), routes.clone()) {
        Ok(plan) => {
            assert!(
                !changed,
                "a changed route list was accepted against the original manifest"
            );
            plan.check_against_golden(&manifest)
                .expect("unchanged plan matches its golden");
        }
        Err(_) => assert!(changed, "unchanged routes refused"),
    }
    if let Ok(set) = build_resolved_gemm_launch_set(&routes) {
        let redigested = PreparedGemmCaptureManifest {
            launch_set: set,
            route_capacity: set.launch_count,
            ..manifest.clone()
        };
        if let Ok(plan) = CapturedGemmGraphPlan::new(redigested, routes) {
            let verdict = plan.check_against_golden_trace(&golden);
            assert_eq!(
                verdict.is_err(),
                changed,
                "golden comparison must refuse exactly the changed plans"
            );
        }
    }
}

/// Parses arbitrary bytes as a workload file, as TOML and as JSON. Whatever
/// parses must validate or be refused with a message; a valid workload's
/// digest must not panic, and its JSON rendering must parse back to the
/// same workload.
pub fn parse_workload(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = [
        crate::workload::Workload::from_toml(text),
        crate::workload::Workload::from_json(text),
    ];
    for w in parsed.into_iter().flatten() {
        let _ = w.digest();
        let json = serde_json::to_string(&w).expect("a workload serializes");
        let again = crate::workload::Workload::from_json(&json).expect("its JSON parses back");
        assert_eq!(
            again.digest(),
            w.digest(),
            "JSON round trip changed the workload"
        );
    }
}

/// Decodes two traces from arbitrary bytes (the first 4 bytes, little
/// endian, give the first trace's length) and diffs them both ways: whatever decodes must diff and render
/// without panicking, a trace must never differ from itself, and two traces
/// differ one way exactly when they differ the other way.
pub fn diff_traces(data: &[u8]) {
    if data.len() < 4 {
        return;
    }
    let (head, rest) = data.split_at(4);
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    let (a, b) = rest.split_at(len.min(rest.len()));
    let limits = Limits {
        max_file_bytes: 4 << 20,
        ..Limits::default()
    };
    let decode = |bytes: &[u8]| {
        codec::decode_trace(bytes, &limits)
            .or_else(|_| codec::decode_trace(&codec::seal(bytes), &limits))
            .ok()
    };
    let (Some(a), Some(b)) = (decode(a), decode(b)) else {
        return;
    };
    use crate::diff::TraceDiff;
    assert!(
        TraceDiff::between(&a, &a).is_empty(),
        "a trace differs from itself"
    );
    let ab = TraceDiff::between(&a, &b);
    let ba = TraceDiff::between(&b, &a);
    assert_eq!(
        ab.is_empty(),
        ba.is_empty(),
        "diff is not symmetric in emptiness"
    );
    let _ = ab.render();
    let _ = crate::diff::portability(&a, &b);
}

/// The CPU backend's routes of the transformer-block and its live context,
/// built once (the guard targets mutate copies of them).
fn cpu_corpus() -> &'static (crate::GemmRouteIdentity, Vec<crate::ResolvedGemmRoute>) {
    static CORPUS: std::sync::OnceLock<(crate::GemmRouteIdentity, Vec<crate::ResolvedGemmRoute>)> =
        std::sync::OnceLock::new();
    CORPUS.get_or_init(|| {
        let cpu = crate::backend::cpu::CpuBackend::default();
        let routes = crate::workload::Workload::builtin("transformer-block")
            .expect("a built-in workload")
            .gemms
            .iter()
            .filter_map(|g| cpu.resolve(g).ok())
            .collect();
        (cpu.context().clone(), routes)
    })
}

/// Changes one field of one real route (bytes: route, field tag, then a
/// little-endian `by` for `mutation::mutate_field_by`), re-digests, and
/// replays it alone under the live context: the closure must never run
/// for a policy-visible field (by `route::classes`), and nothing panics
/// for any field.
pub fn guard_alone(data: &[u8]) {
    let (live, routes) = cpu_corpus();
    let (Some(&r), Some(&t)) = (data.first(), data.get(1)) else {
        return;
    };
    let mut by = [0u8; 8];
    for (d, s) in by.iter_mut().zip(data.iter().skip(2)) {
        *d = *s;
    }
    let tags = crate::route::ResolvedGemmRoute::field_tags();
    let clean = &routes[r as usize % routes.len()];
    let tag = tags[t as usize % tags.len()];
    let mut route = clean.clone();
    assert!(crate::mutation::mutate_field_by(
        &mut route,
        tag,
        u64::from_le_bytes(by)
    ));
    let policy = crate::route::classify(tag)
        .expect("every framed field is classified")
        .on(crate::route::RouteKind::of(clean))
        .is_policy();
    let Ok(manifest) = PreparedGemmCaptureManifest::from_routes(live.clone(), &[route.clone()])
    else {
        return; // The launch-set builder refused it: before launch too.
    };
    let plan = CapturedGemmGraphPlan::new(manifest, vec![route]).expect("its own manifest");
    let mut ran = false;
    let verdict = plan.with_validated_launch(live, "fuzz", |_| ran = true);
    if policy {
        assert!(
            verdict.is_err() && !ran,
            "a change of policy-visible {tag} reached the launch"
        );
    }
    assert_eq!(
        verdict.is_ok(),
        ran,
        "the closure ran exactly when accepted"
    );
}

/// Drives one recorder through arbitrary operations (each byte: begin
/// eager, begin capture of a small capacity, push a sample route, finish
/// eager, finish capture, drop the guard) against a model of its state
/// machine: idle pushes, nesting, the wrong finish and pushes over capacity
/// are refused, and a finished or dropped recording leaves it idle.
pub fn recorder_ops(data: &[u8]) {
    use crate::recorder::{GemmRouteRecorder, RecorderError, RecorderMode};
    let live = crate::testkit::context();
    let rec = GemmRouteRecorder::new();
    let mut guard = None;
    // The model: the active mode, its capacity, and the pushes so far.
    let mut model: Option<(RecorderMode, usize, usize, bool)> = None;
    for (k, &b) in data.iter().enumerate() {
        match b % 6 {
            0 | 1 => {
                let capture = b % 6 == 1;
                let cap = (b / 6) as usize % 4;
                let r = if capture {
                    rec.begin_capture(&live, cap)
                } else {
                    rec.begin_eager(&live)
                };
                match (&model, r) {
                    (Some(_), Err(RecorderError::Nested { .. })) => {}
                    (None, Ok(g)) => {
                        guard = Some(g);
                        let mode = if capture {
                            RecorderMode::Capture
                        } else {
                            RecorderMode::Eager
                        };
                        model = Some((mode, cap, 0, false));
                    }
                    (m, r) => panic!("begin under {m:?} gave {r:?}"),
                }
            }
            2 => {
                let r = rec.push(crate::testkit::sample_route(k as u64));
                match (&mut model, r) {
                    (None, Err(RecorderError::NotRecording { .. })) => {}
                    (
                        Some((RecorderMode::Capture, cap, n, failed)),
                        Err(RecorderError::OverCapacity { .. }),
                    ) => {
                        assert_eq!(*n, *cap);
                        *failed = true;
                    }
                    (Some((mode, cap, n, _)), Ok(())) => {
                        assert!(*mode == RecorderMode::Eager || *n < *cap);
                        *n += 1;
                    }
                    (m, r) => panic!("push under {m:?} gave {r:?}"),
                }
            }
            3 | 4 => {
                let asked = if b % 6 == 3 {
                    RecorderMode::Eager
                } else {
                    RecorderMode::Capture
                };
                let Some(g) = guard.take() else {
                    continue;
                };
                let r = if asked == RecorderMode::Eager {
                    g.finish_eager(&live)
                } else {
                    g.finish_capture(&live)
                };
                let (mode, _, n, failed) = model.take().expect("a guard means a recording");
                match r {
                    Ok(routes) => {
                        assert!(mode == asked && !failed);
                        assert_eq!(routes.len(), n);
                    }
                    Err(RecorderError::WrongMode { .. }) => assert_ne!(mode, asked),
                    Err(RecorderError::OverCapacity { .. }) => assert!(failed && mode == asked),
                    Err(e) => panic!("finish gave {e}"),
                }
            }
            _ => {
                drop(guard.take());
                model = None;
            }
        }
        let expected = model.map_or(RecorderMode::Idle, |(m, ..)| m);
        assert_eq!(rec.mode(), expected);
        assert_eq!(rec.len(), model.map_or(0, |(_, _, n, _)| n));
    }
}

/// Builds a route of a testkit symbol from arbitrary bytes (symbol, op,
/// dtype, contract, splits, tensor cores, shape, grid, block): whatever
/// the builder accepts is served by its symbol and contradicts nothing the
/// symbol declares.
pub fn route_builder(data: &[u8]) {
    use crate::route::GemmShape;
    use crate::vocab::{ContractKind, DType, GemmOp};
    use crate::{ArgumentsDigest, GemmRouteBuilder};
    let b = |i: usize| data.get(i).copied().unwrap_or(0);
    let wide = |i: usize| u16::from_le_bytes([b(i), b(i + 1)]) as u64;
    let live = crate::testkit::context();
    let module = &live.modules[0];
    let symbol = &module.symbols[b(0) as usize % module.symbols.len()];
    let op = GemmOp::ALL[b(1) as usize % GemmOp::ALL.len()];
    let dtype = DType::ALL[b(2) as usize % DType::ALL.len()];
    let contract = ContractKind::ALL[b(3) as usize % ContractKind::ALL.len()].clone();
    let splits = b(4) as u32 % 9;
    let shape = GemmShape {
        m: wide(5),
        k: wide(7),
        n: wide(9),
    };
    let grid = [b(11) as u32, b(12) as u32 % 4, b(13) as u32 % 9];
    let block = [b(14) as u32 * 2, 1, 1];
    let built = GemmRouteBuilder::new(&live, module, &symbol.name, "fuzz")
        .problem(op, dtype, shape)
        .contract(contract, splits)
        .tensor_cores(b(15) % 2 == 1)
        .launch(grid, block, 0, ArgumentsDigest::new(&symbol.name).finish())
        .build();
    if let Ok(route) = built {
        assert!(symbol.serves(&crate::identity::Service::of(&route)));
        let declared = symbol
            .declaration
            .as_ref()
            .expect("a built route's symbol declares");
        assert_eq!(
            declared.contradiction(&route),
            None,
            "the builder let a contradiction through"
        );
    }
}

/// Imports arbitrary bytes as a PyTorch profiler trace: never a panic; a
/// profile that imports gives a trace that holds no observed outputs, has
/// an observation entry per route, and writes and reads back unchanged.
pub fn import_profile(data: &[u8]) {
    let options = crate::profile::ImportOptions {
        max_events: 1 << 16,
        ..Default::default()
    };
    if let Ok(p) = crate::profile::import_bytes(data, "fuzz.json", &options) {
        let t = p.trace;
        assert!(!t.outputs_observed());
        let o = t
            .observation
            .as_ref()
            .expect("an import carries its observation");
        assert_eq!(o.gemms.len(), t.routes.len());
        let bytes = t.to_bytes().expect("an imported trace encodes");
        let back = codec::decode_trace(&bytes, &Limits::default()).expect("and decodes");
        assert_eq!(back, t);
    }
}
