//! Real profiles of CUDA-graph replays (tests/data/profiles/gpu-*.json.gz,
//! taken on an H100 with torch 2.11 by make_gpu.py): a replay bound
//! through the capture the profile holds gets the captured ops' identity
//! and shapes; a replay without its capture is paired with an eager
//! profile by kernel sequence; a TF32 setting changed only while capturing
//! is named at its GEMM.

use crate::common::{BIN, Scratch, root};
use serde_json::Value;
use std::process::Command;

fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(BIN)
        .current_dir(root())
        .args(args)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

/// Imports `tests/data/profiles/<name>.json.gz` as workload `step`.
fn import(dir: &Scratch, name: &str) -> String {
    let out = dir.path(&format!("{name}.gat"));
    let out = out.to_str().unwrap().to_string();
    let profile = format!("tests/data/profiles/{name}.json.gz");
    let (code, text) = run(&["import", &profile, "-o", &out, "--workload", "step"]);
    assert_eq!(code, 0, "{text}");
    out
}

fn show(trace: &str) -> Value {
    let (code, text) = run(&["show", trace, "--format", "json"]);
    assert_eq!(code, 0, "{text}");
    serde_json::from_str(&text).unwrap()
}

#[test]
fn a_replay_gets_the_identity_and_shapes_its_capture_recorded() {
    let dir = Scratch::new("graph-capture-replay");
    let t = show(&import(&dir, "gpu-capture-replay"));
    let routes = t["trace"]["routes"].as_array().unwrap();
    let observed = t["trace"]["observation"]["gemms"].as_array().unwrap();
    // Two warm-up steps run eagerly, then three replays of the captured
    // step: 15 GEMM ops, none a region GEMM, none without a kernel.
    assert_eq!(routes.len(), 15);
    assert!(observed.iter().all(|g| g["region"].is_null()));
    let o = &t["trace"]["observation"];
    assert_eq!(
        (
            o["bound_kernels"].as_u64(),
            o["unowned_gemm_kernels"].as_u64()
        ),
        (Some(15), Some(0))
    );
    let graph: Vec<bool> = observed.iter().map(|g| !g["graph"].is_null()).collect();
    assert_eq!(
        graph,
        [[false; 6].as_slice(), [true; 9].as_slice()].concat()
    );
    // Each replay's GEMMs are the captured step's: op, shape and kernel of
    // the eager warm-up at the same place.
    let key = |r: &Value| {
        (
            r["kernel_symbol"].to_string(),
            r["dtype"].to_string(),
            r["shape"].to_string(),
            r["vendor"]["physical_kernels"].to_string(),
        )
    };
    for i in 6..15 {
        assert_eq!(key(&routes[i]), key(&routes[i % 3]), "GEMM {i}");
    }
    assert_eq!(routes[8]["shape"]["m"], 8);
    assert_eq!(routes[8]["shape"]["k"], 256);
    assert_eq!(routes[8]["shape"]["n"], 128);
}

#[test]
fn graphs_of_one_step_at_several_batch_sizes_are_bound_only_where_one_capture_fits() {
    let dir = Scratch::new("graph-batches");
    let t = show(&import(&dir, "gpu-batches"));
    let o = &t["trace"]["observation"];
    let notes = o["notes"].to_string();
    assert!(notes.contains("fit more than one capture"), "{notes}");
    // The batch-64 graph runs other kernels than the batch-1 and -8 ones
    // (one capture fits it): its GEMMs are the captured ops; the other
    // two replays stay GEMMs of their region.
    let replayed: Vec<(Option<&str>, Option<&str>)> = o["gemms"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| !g["graph"].is_null())
        .map(|g| (g["region"].as_str(), g["graph"].as_str()))
        .collect();
    assert_eq!(replayed.len(), 9);
    assert!(replayed[..6].iter().all(|(r, _)| r.is_some()));
    assert!(
        replayed[6..]
            .iter()
            .all(|(r, g)| r.is_none() && *g == Some("cudaGraphLaunch in batch=64"))
    );
}

#[test]
fn replays_without_their_capture_pair_with_the_eager_step_by_kernels() {
    let dir = Scratch::new("graph-eager-replay");
    let eager = import(&dir, "gpu-eager");
    let replay = import(&dir, "gpu-replay");
    let (code, text) = run(&["diff", &eager, &replay]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("paired 3 GEMMs by kernel sequence"), "{text}");
    assert!(text.contains("same kernels in the same order"), "{text}");
    assert!(
        text.contains("the 2 further replays (6 GEMMs) ran the same kernels"),
        "{text}"
    );
    assert!(text.contains("replayed from a CUDA graph"), "{text}");
}

#[test]
fn tf32_turned_on_only_while_capturing_is_named_at_its_gemm() {
    let dir = Scratch::new("graph-tf32");
    let eager = import(&dir, "gpu-eager");
    let replay = import(&dir, "gpu-tf32-replay");
    let (code, text) = run(&["diff", &eager, &replay]);
    assert_ne!(code, 0, "{text}");
    assert!(
        text.contains("1 of 3 differ, first aten::addmm#2 (aten::addmm nt f32 8x256x128)"),
        "{text}"
    );
    assert!(
        text.contains("tf32"),
        "the replay's TF32 kernel is named: {text}"
    );
    assert!(text.contains("[route] route 2 (aten::addmm#2)"), "{text}");
    assert!(
        !text.contains("aten::addmm#0:") && !text.contains("aten::addmm#1:"),
        "{text}"
    );
}

/// The live recorder's binding (`profile::graph`, what
/// `gemm_audit.torch.capture` and `record(graphs=)` run) on the real
/// capture-and-replay profile, with the recorder's ranges added where it
/// puts them: the capture range opens before torch's `capture_begin`,
/// which fills its RNG seed and offset (two kernels) before the stream
/// capture begins; those two launches add no node, so the replay's five
/// activities take the five launches made while capturing.
#[test]
fn the_live_binding_skips_launches_before_the_stream_capture_begins() {
    use gemm_audit::profile::graph;
    let text = gemm_audit::profile::read_profile(
        &root().join("tests/data/profiles/gpu-capture-replay.json.gz"),
        1 << 30,
    )
    .unwrap();
    let mut doc: Value = serde_json::from_slice(&text).unwrap();
    let events = doc["traceEvents"].as_array_mut().unwrap();
    let at = |events: &[Value], name: &str| {
        events
            .iter()
            .filter(|e| e["name"] == name)
            .cloned()
            .min_by(|a, b| {
                a["ts"]
                    .as_f64()
                    .unwrap()
                    .total_cmp(&b["ts"].as_f64().unwrap())
            })
            .unwrap()
    };
    let begin = at(events, "cudaStreamBeginCapture");
    let end = at(events, "cudaStreamEndCapture");
    let launch = at(events, "cudaGraphLaunch");
    let (b, e) = (begin["ts"].as_f64().unwrap(), end["ts"].as_f64().unwrap());
    let range = |name: String, from: f64, to: f64| {
        serde_json::json!({"ph": "X", "cat": "user_annotation", "name": name, "pid": begin["pid"],
                           "tid": begin["tid"], "ts": from, "dur": to - from, "args": {}})
    };
    let mut added = vec![range("gemm_audit-capture:0".into(), b - 80.0, e + 5.0)];
    let mut ops: Vec<(f64, f64)> = events
        .iter()
        .filter(|x| x["name"] == "aten::addmm")
        .map(|x| (x["ts"].as_f64().unwrap(), x["dur"].as_f64().unwrap()))
        .filter(|(ts, _)| *ts > b && *ts < e)
        .collect();
    ops.sort_by(|x, y| x.0.total_cmp(&y.0));
    assert_eq!(ops.len(), 3);
    for (i, (ts, dur)) in ops.iter().enumerate() {
        added.push(range(format!("gemm_audit:{i}"), ts - 0.5, ts + dur + 0.5));
    }
    let l = launch["ts"].as_f64().unwrap();
    let d = launch["dur"].as_f64().unwrap();
    added.push(range("gemm_audit-replay:0".into(), l - 0.5, l + d + 0.5));
    events.extend(added);
    let text = serde_json::to_vec(&doc).unwrap();
    let captured = graph::captured_launches(&text, "gemm_audit:", "gemm_audit-capture:").unwrap();
    let owners: Vec<Option<u64>> = captured[&0].iter().map(|c| c.owner).collect();
    assert_eq!(owners, [Some(0), None, Some(1), None, Some(2)]);
    let replayed = graph::replayed_activities(&text, "gemm_audit-replay:").unwrap();
    let b = graph::bind_replay(&captured[&0], &replayed[&0]).unwrap();
    let kernels =
        |i: u64| -> Vec<String> { b.gemms[&i].kernels.iter().map(|k| k.name.clone()).collect() };
    assert_eq!(kernels(0), ["nvjet_sm90_tst_64x8_64x16_4x1_v_bz_bias_TNT"]);
    assert_eq!(kernels(1), ["nvjet_sm90_tst_8x64_64x16_4x1_v_bz_bias_TNN"]);
    assert!(
        kernels(2)[0].starts_with("void gemmSN_TN_kernel<float"),
        "{:?}",
        kernels(2)
    );
    assert_eq!(b.other.len(), 2, "relu and the f32 copy: {:?}", b.other);
}
