//! `compare` of ranks whose launch sets differ only in GEMMs no GEMM op
//! owns: each rank's profiling window caught a different number of a
//! compiled region's or a graph replay's GEMM kernels. The ranks are
//! compared on the GEMMs they share (the GEMM ops launch for launch, the
//! region GEMMs by name), the rest are listed as not compared with their
//! counts, and a group compares nothing only when nothing is shared.
//!
//! The profiles are crafted here (Kineto JSON as the PyTorch profiler
//! writes it: GEMM ops with shapes and their `cudaLaunchKernel` calls,
//! region GEMMs launched inside a `CompiledFunction` op or by a
//! `cudaGraphLaunch`) and imported with the command line.

use crate::common::{BIN, Scratch};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;

/// One GEMM op: its name, the dims of A and B, and its kernel.
type Op = (&'static str, [i64; 2], [i64; 2], &'static str);

/// The GEMM ops every rank runs, in order.
const OPS: [Op; 3] = [
    ("aten::mm", [16, 64], [64, 32], "nvjet_tst_64x8"),
    ("aten::addmm", [16, 32], [32, 128], "nvjet_tst_128x16"),
    ("aten::mm", [16, 128], [128, 64], "nvjet_tst_64x8"),
];

/// What one rank's profile holds.
struct Rank<'a> {
    rank: u64,
    ops: &'a [Op],
    /// Kernels launched inside the one `CompiledFunction` op, in order.
    compiled: &'a [&'a str],
    /// Kernels of graph replays, one `cudaGraphLaunch` each.
    replays: &'a [&'a str],
}

/// Events of a runtime call at `ts` on the main thread and the kernel it
/// launched, tied by `corr`.
fn launch(events: &mut Vec<Value>, api: &str, ts: f64, corr: u64, kernel: &str) {
    events.push(json!({
        "ph": "X", "cat": if api == "cuLaunchKernel" { "cuda_driver" } else { "cuda_runtime" },
        "name": api, "pid": 20, "tid": 20, "ts": ts, "dur": 2.0,
        "args": {"correlation": corr}
    }));
    events.push(json!({
        "ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7,
        "ts": ts + 40.0, "dur": 3.0,
        "args": {"correlation": corr, "device": 0, "grid": [8, 1, 1],
                 "block": [256, 1, 1], "shared memory": 2048}
    }));
}

/// The rank's profile as Kineto JSON.
fn profile(r: &Rank<'_>) -> Value {
    let mut events = Vec::new();
    let mut ts = 5000.0;
    let mut corr = 1;
    for (name, a, b, kernel) in r.ops {
        events.push(json!({
            "ph": "X", "cat": "cpu_op", "name": name, "pid": 20, "tid": 20,
            "ts": ts, "dur": 12.0,
            "args": {
                "Input Dims": [a, b],
                "Input Strides": [[a[1], 1], [b[1], 1]],
                "Input type": ["c10::BFloat16", "c10::BFloat16"],
            }
        }));
        launch(&mut events, "cudaLaunchKernel", ts + 3.0, corr, kernel);
        corr += 1;
        ts += 30.0;
    }
    if !r.compiled.is_empty() {
        let dur = 10.0 * r.compiled.len() as f64 + 5.0;
        events.push(json!({
            "ph": "X", "cat": "cpu_op", "name": "CompiledFunction", "pid": 20, "tid": 20,
            "ts": ts, "dur": dur, "args": {}
        }));
        for (i, k) in r.compiled.iter().enumerate() {
            launch(
                &mut events,
                "cuLaunchKernel",
                ts + 2.0 + 10.0 * i as f64,
                corr,
                k,
            );
            corr += 1;
        }
        ts += dur + 20.0;
    }
    for k in r.replays {
        launch(&mut events, "cudaGraphLaunch", ts, corr, k);
        corr += 1;
        ts += 20.0;
    }
    json!({
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "computeMajor": 9,
                              "computeMinor": 0, "numSms": 132}],
        "cuda_driver_version": 13000,
        "distributedInfo": {"backend": "nccl", "rank": r.rank, "world_size": 128},
        "traceEvents": events,
    })
}

/// Writes each rank's profile (`job-rankN.json`: one workload, `job`) and
/// imports them all into `DIR/traces` with the command line.
fn import(s: &Scratch, dir: &str, ranks: &[Rank<'_>]) -> String {
    let profiles = s.path(&format!("{dir}-profiles"));
    std::fs::create_dir_all(&profiles).unwrap();
    let mut args = vec!["import".to_string()];
    for r in ranks {
        let p = profiles.join(format!("job-rank{}.json", r.rank));
        std::fs::write(&p, serde_json::to_vec(&profile(r)).unwrap()).unwrap();
        args.push(p.display().to_string());
    }
    let out = s.path(dir).display().to_string();
    args.extend(["-o".to_string(), out.clone()]);
    let (code, text) = run(&s.0, &args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0, "import: {text}");
    out
}

fn run(dir: &Path, args: &[&str]) -> (i32, String) {
    let out = Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("spawn gemm-audit");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!text.contains("panicked"), "{args:?}: {text}");
    (out.status.code().expect("exited normally"), text)
}

fn json_of(dir: &Path, args: &[&str]) -> Value {
    let (_, text) = run(dir, args);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

const TEMPLATES: [&str; 5] = [
    "triton_tem_fused_mm_0",
    "triton_tem_fused_mm_1",
    "triton_tem_fused_addmm_2",
    "triton_tem_fused_mm_3",
    "triton_tem_fused_mm_4",
];

/// The bug: one job's ranks ran the same GEMM ops, but their profiling
/// windows caught 5, 3 and 4 of a compiled region's GEMM kernels. They
/// are compared on the 3 ops and the 3 region GEMMs every rank holds
/// (and pass: those agree), and the rest are listed as not compared,
/// rank by rank with counts, in the table, JSON and JUnit.
#[test]
fn ranks_with_more_region_gemms_are_compared_on_the_shared_ones() {
    let s = Scratch::new("compare-shared");
    let traces = import(
        &s,
        "ranks",
        &[
            Rank {
                rank: 0,
                ops: &OPS,
                compiled: &TEMPLATES,
                replays: &[],
            },
            Rank {
                rank: 1,
                ops: &OPS,
                compiled: &TEMPLATES[..3],
                replays: &[],
            },
            Rank {
                rank: 2,
                ops: &OPS,
                compiled: &TEMPLATES[..4],
                replays: &[],
            },
        ],
    );
    let (code, text) = run(&s.0, &["compare", &traces, "--junit", "compare.xml"]);
    assert_eq!(code, 0, "the shared GEMMs agree:\n{text}");
    assert!(
        text.contains("3 traces, routes agree, outputs not observed"),
        "{text}"
    );
    assert!(!text.contains("nothing to compare"), "{text}");
    assert!(!text.contains("another launch set"), "{text}");
    // The rest, rank by rank, with counts.
    let line = |rank: &str| {
        text.lines()
            .find(|l| l.contains("not compared") && l.contains(rank))
            .unwrap_or_else(|| panic!("no not-compared line for {rank}:\n{text}"))
            .to_string()
    };
    assert!(
        line("rank0").contains("2 of 8 GEMMs not compared"),
        "{text}"
    );
    assert!(
        line("rank2").contains("1 of 7 GEMMs not compared"),
        "{text}"
    );
    assert!(line("rank0").contains("compared on the 6 GEMMs every trace holds"));
    assert!(
        !text
            .lines()
            .any(|l| l.contains("not compared") && l.contains("rank1")),
        "rank 1 holds only shared GEMMs:\n{text}"
    );

    let v = json_of(&s.0, &["compare", &traces, "--format", "json"]);
    assert_eq!(v["verdict"], "pass", "{v}");
    let g = &v["groups"][0];
    assert_eq!(g["members"], 3);
    assert_eq!(g["mismatched"], json!([]), "{g}");
    let launches: Vec<&str> = g["launches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["gemm"].as_str().unwrap())
        .collect();
    assert_eq!(
        launches,
        [
            "aten::mm#0",
            "aten::addmm#0",
            "aten::mm#1",
            "CompiledFunction#0",
            "CompiledFunction#1",
            "CompiledFunction#2"
        ],
        "{g}"
    );
    for l in g["launches"].as_array().unwrap() {
        assert_eq!(l["voters"], 3, "{l}");
    }
    let rows: Vec<(String, u64, u64)> = g["not_compared"]
        .as_array()
        .unwrap_or_else(|| panic!("no not_compared: {g}"))
        .iter()
        .map(|r| {
            (
                r["label"].as_str().unwrap().to_string(),
                r["launches"].as_u64().unwrap(),
                r["of"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(rows[0].0.contains("rank0") && (rows[0].1, rows[0].2) == (2, 8));
    assert!(rows[1].0.contains("rank2") && (rows[1].1, rows[1].2) == (1, 7));
    // JUnit: one case per shared GEMM, the rest said in system-out.
    let x = std::fs::read_to_string(s.path("compare.xml")).unwrap();
    assert_eq!(x.matches("<testcase ").count(), 6, "{x}");
    assert!(x.contains("failures=\"0\""), "{x}");
    assert!(
        x.contains("2 of 8 GEMMs not compared") && x.contains("1 of 7 GEMMs not compared"),
        "{x}"
    );
}

/// A shared GEMM that one rank served another way fails, naming that rank:
/// a GEMM op launch for launch, and a region GEMM by name.
#[test]
fn a_shared_gemm_served_another_way_names_the_rank() {
    let s = Scratch::new("compare-shared-differs");
    let mut other_op = OPS;
    other_op[1].3 = "nvjet_tst_256x8_splitK";
    let traces = import(
        &s,
        "op",
        &[
            Rank {
                rank: 0,
                ops: &OPS,
                compiled: &TEMPLATES,
                replays: &[],
            },
            Rank {
                rank: 1,
                ops: &other_op,
                compiled: &TEMPLATES[..2],
                replays: &[],
            },
            Rank {
                rank: 2,
                ops: &OPS,
                compiled: &TEMPLATES[..3],
                replays: &[],
            },
        ],
    );
    let (code, text) = run(&s.0, &["compare", &traces]);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("launch 1 aten::addmm#0: served another way by 1 of 3"),
        "{text}"
    );
    assert!(text.contains("profile.rank=1"), "{text}");
    assert!(text.contains("nvjet_tst_256x8_splitK"), "{text}");
    assert!(text.contains("compare: FAIL"), "{text}");
    assert!(!text.contains("another launch set"), "{text}");

    // A region GEMM matched by name: rank 1's second one ran another kernel.
    let swapped = ["triton_tem_fused_mm_0", "triton_tem_fused_mm_7"];
    let traces = import(
        &s,
        "region",
        &[
            Rank {
                rank: 0,
                ops: &OPS,
                compiled: &TEMPLATES,
                replays: &[],
            },
            Rank {
                rank: 1,
                ops: &OPS,
                compiled: &swapped,
                replays: &[],
            },
            Rank {
                rank: 2,
                ops: &OPS,
                compiled: &TEMPLATES[..3],
                replays: &[],
            },
        ],
    );
    let v = json_of(&s.0, &["compare", &traces, "--format", "json"]);
    assert_eq!(v["verdict"], "fail", "{v}");
    let g = &v["groups"][0];
    let failing: Vec<&Value> = g["launches"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| !l["route_outliers"].as_array().unwrap().is_empty())
        .collect();
    assert_eq!(failing.len(), 1, "{g}");
    assert_eq!(failing[0]["gemm"], "CompiledFunction#1");
    let named = &failing[0]["route_outliers"][0];
    assert!(
        named["label"].as_str().unwrap().contains("rank1"),
        "{named}"
    );
    assert!(named["device"].as_str().unwrap().contains("profile.rank=1"));
    assert!(
        named["differs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d.as_str().unwrap().contains("triton_tem_fused_mm_7")),
        "{named}"
    );
}

/// Ranks that share no GEMM compare nothing: the group says so and fails,
/// and each rank's GEMMs are listed as not compared. Ranks whose GEMM ops
/// differ are another launch set, as before.
#[test]
fn ranks_that_share_nothing_compare_nothing() {
    let s = Scratch::new("compare-shared-nothing");
    let traces = import(
        &s,
        "apart",
        &[
            Rank {
                rank: 0,
                ops: &[],
                compiled: &TEMPLATES[..2],
                replays: &[],
            },
            Rank {
                rank: 1,
                ops: &[],
                compiled: &[],
                replays: &[
                    "nvjet_tst_graph_64x8",
                    "nvjet_tst_graph_64x8",
                    "nvjet_tst_graph_64x8",
                ],
            },
        ],
    );
    let (code, text) = run(&s.0, &["compare", &traces]);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("2 voting: nothing to compare (no GEMM every trace holds)"),
        "{text}"
    );
    assert!(text.contains("2 of 2 GEMMs not compared"), "{text}");
    assert!(text.contains("3 of 3 GEMMs not compared"), "{text}");
    assert!(text.contains("no GEMM is in every trace"), "{text}");
    assert!(text.contains("compare: FAIL"), "{text}");
    let v = json_of(&s.0, &["compare", &traces, "--format", "json"]);
    assert_eq!(v["verdict"], "fail");
    let g = &v["groups"][0];
    assert_eq!(g["launches"], json!([]), "{g}");
    assert_eq!(g["not_compared"].as_array().unwrap().len(), 2, "{g}");

    // Another GEMM op: another launch set, left out.
    let mut more = OPS.to_vec();
    more.push(("aten::mm", [16, 64], [64, 16], "nvjet_tst_64x8"));
    let traces = import(
        &s,
        "ops",
        &[
            Rank {
                rank: 0,
                ops: &OPS,
                compiled: &TEMPLATES,
                replays: &[],
            },
            Rank {
                rank: 1,
                ops: &more,
                compiled: &TEMPLATES[..3],
                replays: &[],
            },
        ],
    );
    let (code, text) = run(&s.0, &["compare", &traces]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("left out (another launch set)"), "{text}");
    assert!(text.contains("rank1"), "{text}");
}
