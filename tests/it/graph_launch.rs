//! GEMMs replayed from a CUDA graph (trace format 7): the observed-step
//! path the Python recorder writes through keeps which graph replayed each
//! GEMM, `show` marks them, and `diff` / `check --golden` of an eager
//! trace against a replay trace say so without calling it a difference,
//! since a replayed GEMM serves the same route as the same GEMM launched
//! eagerly.

use crate::common::{BIN, Scratch, root};
use gemm_audit::RecordedGemmTrace;
use gemm_audit::observed::ObservedStep;
use gemm_audit::profile::{self, ImportOptions};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The recorder's step of three GEMMs (`tests/data/torch-step.json`).
const STEP: &str = include_str!("../data/torch-step.json");

fn label(i: usize) -> String {
    format!("graph 0 (captured in block@b8), replay {i}")
}

/// The step's trace written to `dir/name`, with `graph` set on the GEMMs
/// `replayed` says, and the same output bytes whatever the launch.
fn write_step(dir: &Scratch, name: &str, replayed: &[bool]) -> (PathBuf, RecordedGemmTrace) {
    let mut step = ObservedStep::from_json(STEP).unwrap();
    for (i, g) in step.gemms.iter_mut().enumerate() {
        g.graph = replayed[i].then(|| label(i));
    }
    let outputs: Vec<Vec<u8>> = step
        .gemms
        .iter()
        .enumerate()
        .map(|(i, g)| vec![i as u8 + 1; (g.m * g.n * g.batch * 2) as usize])
        .collect();
    let t = step.trace(&outputs).unwrap();
    let p = dir.path(name);
    t.write(&p, false).unwrap();
    (p, t)
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The same step eager and replayed from a graph: the same routes, launch
/// set and context digest (the label frames into no digest), and `diff`
/// finds nothing, exits 0 and says it compared eager against replay.
#[test]
fn eager_against_graph_replay_is_the_same_routes_and_exit_0() {
    let dir = Scratch::new("graph-launch-diff");
    let (eager, e) = write_step(&dir, "eager.gat", &[false; 3]);
    let (replay, r) = write_step(&dir, "replay.gat", &[true; 3]);
    // What was written reads back with the labels.
    let back = RecordedGemmTrace::read(&replay).unwrap();
    let graphs: Vec<Option<String>> = back
        .observation
        .as_ref()
        .unwrap()
        .gemms
        .iter()
        .map(|g| g.graph.clone())
        .collect();
    assert_eq!(graphs, [Some(label(0)), Some(label(1)), Some(label(2))]);
    assert_eq!(e.routes, r.routes);
    assert_eq!(e.launch_set, r.launch_set);
    assert_eq!(e.context.digest(), r.context.digest());
    assert_eq!(e.workload_digest, r.workload_digest);

    let (code, out, err) = run(&["diff", s(&eager), s(&replay)]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        out,
        "no differences\nlaunch: 3 GEMMs eager in the golden are replayed from a CUDA graph in the candidate\n"
    );
    let (code, out, _) = run(&["diff", s(&replay), s(&eager)]);
    assert_eq!(code, 0);
    assert!(
        out.contains("3 GEMMs eager in the candidate are replayed from a CUDA graph in the golden"),
        "{out}"
    );
    // Two eager traces say nothing of launches.
    let (code, out, _) = run(&["diff", s(&eager), s(&eager)]);
    assert_eq!((code, out.as_str()), (0, "no differences\n"));

    let (code, out, _) = run(&["diff", s(&eager), s(&replay), "--format", "json"]);
    assert_eq!(code, 0);
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["verdict"], "pass");
    assert_eq!(doc["differences"], json!([]));
    assert_eq!(doc["summary"]["classes"], json!([]));
    assert_eq!(
        doc["summary"]["launch"],
        json!({"eager_to_graph": 3, "graph_to_eager": 0})
    );
    // `check --golden` passes the same pair.
    let (code, out, err) = run(&["check", s(&replay), "--golden", s(&eager)]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("golden       ok"), "{out}");
}

/// Beside a kernel change the launch line is one more overview line:
/// the exit code and classes are the kernel change's alone.
#[test]
fn beside_a_kernel_change_the_launch_is_one_overview_line() {
    let dir = Scratch::new("graph-launch-drift");
    let (eager, _) = write_step(&dir, "eager.gat", &[false; 3]);
    let mut step = ObservedStep::from_json(STEP).unwrap();
    step.gemms[1].kernels[0].name = "nvjet_sm90_other_TNT".into();
    step.gemms[0].graph = Some(label(0));
    step.gemms[1].graph = Some(label(1));
    let outputs: Vec<Vec<u8>> = step
        .gemms
        .iter()
        .enumerate()
        .map(|(i, g)| vec![i as u8 + 1; (g.m * g.n * g.batch * 2) as usize])
        .collect();
    let moved = dir.path("moved.gat");
    step.trace(&outputs).unwrap().write(&moved, false).unwrap();
    let (code, out, _) = run(&["diff", s(&eager), s(&moved)]);
    // The same drift launched eagerly: the exit code to match.
    let mut eager_step = step.clone();
    eager_step.gemms.iter_mut().for_each(|g| g.graph = None);
    let moved_eager = dir.path("moved-eager.gat");
    eager_step
        .trace(&outputs)
        .unwrap()
        .write(&moved_eager, false)
        .unwrap();
    let (plain, _, _) = run(&["diff", s(&eager), s(&moved_eager)]);
    assert_eq!(code, plain, "the launch changes no exit code");
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains(
            "\n  launch    2 GEMMs eager in the golden are replayed from a CUDA graph in the candidate\n"
        ),
        "{out}"
    );
    assert!(out.contains("kernels changed in 1 GEMMs"), "{out}");
}

/// `show` marks the GEMMs a graph replayed, with their labels and a
/// count, and its JSON gives each GEMM's `graph` (null when eager).
#[test]
fn show_marks_the_gemms_replayed_from_a_graph() {
    let dir = Scratch::new("graph-launch-show");
    let (eager, _) = write_step(&dir, "eager.gat", &[false; 3]);
    let (some, _) = write_step(&dir, "some.gat", &[true, false, true]);
    let (code, out, _) = run(&["show", s(&some)]);
    assert_eq!(code, 0);
    assert!(
        out.contains("\nlaunch          2 of 3 GEMMs replayed from a CUDA graph\n"),
        "{out}"
    );
    let header = out.lines().find(|l| l.starts_with("#  ")).unwrap();
    assert!(header.trim_end().ends_with("GRAPH"), "{header}");
    let rows: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("#  "))
        .skip(1)
        .collect();
    assert!(rows[0].trim_end().ends_with(&label(0)), "{out}");
    assert!(rows[1].trim_end().ends_with(" -"), "{out}");
    assert!(rows[2].trim_end().ends_with(&label(2)), "{out}");
    // An eager trace's table is as before: no column, no count.
    let (_, out, _) = run(&["show", s(&eager)]);
    assert!(!out.contains("GRAPH") && !out.contains("replayed"), "{out}");

    let (_, out, _) = run(&["show", s(&some), "--format", "json"]);
    let doc: Value = serde_json::from_str(&out).unwrap();
    let graphs: Vec<&Value> = doc["trace"]["observation"]["gemms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| &g["graph"])
        .collect();
    assert_eq!(graphs, [&json!(label(0)), &Value::Null, &json!(label(2))]);
}

/// An imported profile: a GEMM a graph launch ran is replayed from that
/// graph (its region's label); an op's GEMM and a compiled region's
/// template are not.
#[test]
fn an_imported_graph_launch_is_a_graph_replay() {
    let launch = |c: u64, ts: f64, name: &str| {
        json!({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": 1,
               "ts": ts, "dur": 2.0, "args": {"correlation": c}})
    };
    let kernel = |c: u64, ts: f64, name: &str| {
        json!({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7,
               "ts": ts, "dur": 2.0, "args": {"correlation": c, "device": 0}})
    };
    let range = |ts: f64, name: &str| {
        json!({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1,
               "ts": ts, "dur": 50.0, "args": {}})
    };
    let p = json!({
        "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "computeMajor": 9,
                              "computeMinor": 0, "numSms": 132}],
        "traceEvents": [
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
             "ts": 10.0, "dur": 20.0, "args": {"Input Dims": [[8, 64], [64, 32]],
             "Input Strides": [[64, 1], [32, 1]], "Input type": ["float", "float"]}},
            launch(1, 12.0, "cudaLaunchKernel"),
            kernel(1, 40.0, "nvjet_sm90_tst_eager_NNT"),
            range(100.0, "step"),
            launch(2, 110.0, "cudaGraphLaunch"),
            kernel(2, 200.0, "nvjet_sm90_tst_graph_NNT"),
            range(300.0, "CompiledFunction"),
            launch(3, 310.0, "cuLaunchKernel"),
            kernel(3, 400.0, "triton_tem_fused_mm_0"),
        ],
    });
    let t = profile::import_bytes(
        &serde_json::to_vec(&p).unwrap(),
        "graph.json",
        &ImportOptions::default(),
    )
    .unwrap()
    .trace;
    let o = t.observation.as_ref().unwrap();
    let seen: Vec<(&str, Option<&str>)> = t
        .routes
        .iter()
        .zip(&o.gemms)
        .map(|(r, g)| (r.gemm.as_str(), g.graph.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [
            ("aten::mm#0", None),
            ("cudaGraphLaunch in step#0", Some("cudaGraphLaunch in step")),
            ("CompiledFunction#0", None),
        ]
    );
}

/// A format-6 import of a profile with a graph replay reads its
/// graph-launch region's GEMM as replayed, as the same profile imported
/// today does: the two diff clean, with no launch line.
#[test]
fn a_format_6_import_against_a_format_7_import_of_the_same_profile() {
    let dir = Scratch::new("graph-launch-v6");
    let old = root().join("tests/data/v6/profile-graph-replay.gat");
    let new = dir.path("new.gat");
    let profile = root().join("tests/data/v6/profile-graph-replay.json");
    let (code, out, err) = run(&[
        "import",
        s(&profile),
        "-o",
        s(&new),
        "--workload",
        "graph-replay",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let (a, b) = (
        RecordedGemmTrace::read(&old).unwrap(),
        RecordedGemmTrace::read(&new).unwrap(),
    );
    assert_eq!(
        a.launch_set, b.launch_set,
        "the same routes in both formats"
    );
    let graph = |t: &RecordedGemmTrace| t.observation.as_ref().unwrap().gemms[1].graph.clone();
    assert_eq!(
        graph(&b).as_deref(),
        Some("cudaGraphLaunch (no enclosing range)")
    );
    assert_eq!(graph(&a), graph(&b));
    let (code, out, _) = run(&["diff", s(&old), s(&new)]);
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("no route differences"), "{out}");
    assert!(!out.contains("launch"), "{out}");
}
