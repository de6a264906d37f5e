//! Entry points for the fuzz targets in `fuzz/` (one-liners there call
//! these). Each asserts the invariants that must hold for any input; a
//! panic here is a bug.

use crate::launch_set::build_resolved_gemm_launch_set;
use crate::plan::CapturedGemmGraphPlan;
use crate::trace::PreparedGemmCaptureManifest;
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
