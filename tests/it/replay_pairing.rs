//! A CUDA-graph replay profile against an eager profile of the same step
//! (issue 56): the replay's GEMMs carry no op, shape or dtype (Kineto
//! records none for replayed kernels), so `diff` and `check --golden`
//! pair them with the eager GEMMs by kernel sequence and say so.

use crate::common::{BIN, Scratch};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Three GEMM kernels of one step, as cuBLASLt names them.
const STEP: [&str; 3] = [
    "nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NNT",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64",
    "nvjet_tst_64x8_64x16_4x1_v_bz_TNT",
];

/// The ops of the eager step: name, dims of A and B.
const OPS: [(&str, [i64; 2], [i64; 2]); 3] = [
    ("aten::addmm", [8, 64], [64, 32]),
    ("aten::mm", [8, 32], [32, 128]),
    ("aten::mm", [8, 128], [128, 16]),
];

fn header(events: Vec<Value>) -> Value {
    json!({
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "computeMajor": 9,
                              "computeMinor": 0, "numSms": 132}],
        "cuda_driver_version": 13000,
        "traceEvents": events,
    })
}

fn kernel(corr: u64, at: f64, name: &str) -> Value {
    json!({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": at,
           "dur": 4.0, "args": {"correlation": corr, "device": 0, "grid": [4, 1, 1],
           "block": [128, 1, 1], "shared memory": 1024}})
}

/// An eager profile: one `step` range holding one GEMM op per kernel of
/// `kernels` (the ops of [`OPS`], cycled), each launching its kernel.
fn eager(kernels: &[&str]) -> Value {
    let mut events = vec![json!({
        "ph": "X", "cat": "user_annotation", "name": "step", "pid": 10, "tid": 10,
        "ts": 900.0, "dur": 100.0 * kernels.len() as f64 + 200.0, "args": {}
    })];
    for (i, k) in kernels.iter().enumerate() {
        let (op, a, b) = OPS[i % OPS.len()];
        let ts = 1000.0 + 100.0 * i as f64;
        let corr = i as u64 + 1;
        // addmm's bias comes first.
        let bias = op == "aten::addmm";
        let (mut dims, mut strides) = (
            vec![json!(a), json!(b)],
            vec![json!([a[1], 1]), json!([b[1], 1])],
        );
        if bias {
            dims.insert(0, json!([b[1]]));
            strides.insert(0, json!([1]));
        }
        events.push(json!({
            "ph": "X", "cat": "cpu_op", "name": op, "pid": 10, "tid": 10,
            "ts": ts, "dur": 20.0,
            "args": {
                "Input Dims": dims,
                "Input Strides": strides,
                "Input type": vec!["c10::BFloat16"; dims.len()],
            }
        }));
        events.push(json!({
            "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
            "pid": 10, "tid": 10, "ts": ts + 2.0, "dur": 3.0,
            "args": {"correlation": corr}
        }));
        events.push(kernel(corr, ts + 30.0, k));
    }
    header(events)
}

/// A replay profile: one `g.replay()` per entry of `replays` inside one
/// `step` range, each a `cudaGraphLaunch` whose correlation id every
/// kernel of the entry carries (Kineto records no op and no shape for
/// them).
fn replays(replays: &[&[&str]]) -> Value {
    let width = 1000.0;
    let mut events = vec![json!({
        "ph": "X", "cat": "user_annotation", "name": "step", "pid": 10, "tid": 10,
        "ts": 900.0, "dur": width * replays.len() as f64 + 200.0, "args": {}
    })];
    for (r, kernels) in replays.iter().enumerate() {
        let ts = 1000.0 + width * r as f64;
        let corr = r as u64 + 1;
        events.push(json!({
            "ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 10,
            "tid": 10, "ts": ts, "dur": 5.0, "args": {"correlation": corr}
        }));
        for (i, k) in kernels.iter().enumerate() {
            events.push(kernel(corr, ts + 30.0 + 50.0 * i as f64, k));
        }
    }
    header(events)
}

/// `n` replays of a step running `kernels`.
fn replay(kernels: &[&str], n: usize) -> Value {
    replays(&vec![kernels; n])
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Imports `profile` with `gemm-audit import` as `name`.gat; its path.
fn import(s: &Scratch, name: &str, profile: &Value) -> PathBuf {
    let json = s.write(
        &format!("{name}.json"),
        serde_json::to_vec(profile).unwrap(),
    );
    let gat = s.path(&format!("{name}.gat"));
    let (code, out, err) = run(&[
        "import",
        json.to_str().unwrap(),
        "-o",
        gat.to_str().unwrap(),
        "--workload",
        "step",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    gat
}

fn diff(a: &Path, b: &Path, json: bool) -> (i32, String) {
    let mut args = vec!["diff", a.to_str().unwrap(), b.to_str().unwrap()];
    if json {
        args.extend(["--format", "json"]);
    }
    let (code, out, err) = run(&args);
    (code, format!("{out}{err}"))
}

/// The step with its second kernel replaced.
fn changed_step() -> [&'static str; 3] {
    [
        STEP[0],
        "nvjet_tst_256x128_64x4_1x2_h_bz_coopB_NNT",
        STEP[2],
    ]
}

/// The same kernels in the same order pair by kernel sequence and pass,
/// whichever side is the replay, and the diff says so: the pairing, and
/// that the modules' declarations differ only by op names (no library
/// change, no GEMM missing or added).
#[test]
fn the_same_kernels_in_the_same_order_pass_and_say_so() {
    let s = Scratch::new("replay-same");
    let e = import(&s, "eager", &eager(&STEP));
    let r = import(&s, "replay", &replay(&STEP, 1));
    for (a, b, side) in [(&e, &r, "candidate"), (&r, &e, "golden")] {
        let (code, text) = diff(a, b, false);
        assert_eq!(code, 0, "{text}");
        assert!(
            text.contains(&format!(
                "paired 3 GEMMs by kernel sequence (the {side} is a graph-replay profile with no shapes): same kernels in the same order"
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "declarations differ only by op names: the {side} is a graph-replay profile"
            )),
            "{text}"
        );
        for absent in ["missing", "added", "library", "workload_digest"] {
            assert!(!text.contains(absent), "{absent}: {text}");
        }
    }
}

/// One replayed kernel changed: the diff fails naming the eager GEMM (its
/// op and shape) and both kernels, as a route difference of that GEMM
/// only.
#[test]
fn a_changed_replayed_kernel_names_the_eager_gemm_and_both_kernels() {
    let s = Scratch::new("replay-changed");
    let e = import(&s, "eager", &eager(&STEP));
    let x = import(&s, "changed", &replay(&changed_step(), 1));
    let (code, text) = diff(&e, &x, false);
    assert_ne!(code, 0, "{text}");
    assert!(
        text.contains(&format!(
            "1 of 3 differ, first aten::mm#0 (aten::mm nn bf16 8x32x128): kernels {} -> {}",
            STEP[1],
            changed_step()[1]
        )),
        "{text}"
    );
    assert!(
        text.contains("kernels   changed in 1 GEMMs: aten::mm#0"),
        "{text}"
    );
    assert!(text.contains("1 differences: 1 route"), "{text}");
    for absent in ["missing", "added", "cudaGraphLaunch in step#"] {
        assert!(!text.contains(absent), "{absent}: {text}");
    }
}

/// A replay profile holding three replays of the step against one eager
/// step: the first replay pairs, the two further replays are said to run
/// the same kernels, and the diff passes. Replays that differ from each
/// other are not folded: the GEMMs past the first replay are added.
#[test]
fn three_replays_against_one_eager_step() {
    let s = Scratch::new("replay-three");
    let e = import(&s, "eager", &eager(&STEP));
    let r3 = import(&s, "r3", &replay(&STEP, 3));
    let (code, text) = diff(&e, &r3, false);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains(
            "paired 3 GEMMs by kernel sequence (the candidate is a graph-replay profile with no shapes): same kernels in the same order; the candidate holds 3 replays: the first is paired, the 2 further replays (6 GEMMs) ran the same kernels in the same order"
        ),
        "{text}"
    );
    let changed = changed_step();
    let mixed = import(&s, "mixed", &replays(&[&STEP, &changed, &STEP]));
    let (code, text) = diff(&e, &mixed, false);
    assert_ne!(code, 0, "{text}");
    assert!(
        text.contains(
            "the candidate is a graph-replay profile with no shapes): the paired GEMMs ran the same kernels in the same order; 6 GEMMs added"
        ),
        "{text}"
    );
    assert!(
        text.contains("6 GEMMs added: cudaGraphLaunch in step#3"),
        "{text}"
    );
}

/// A replay with one GEMM more: the others pair around it and it alone is
/// added, named by its region.
#[test]
fn a_replay_with_one_gemm_more_adds_that_gemm_only() {
    let s = Scratch::new("replay-more");
    let e = import(&s, "eager", &eager(&STEP));
    let more = [
        STEP[0],
        STEP[1],
        "nvjet_tst_64x64_64x8_2x1_v_bz_extra_NNT",
        STEP[2],
    ];
    let m = import(&s, "more", &replay(&more, 1));
    let (code, text) = diff(&e, &m, false);
    assert_ne!(code, 0, "{text}");
    assert!(
        text.contains("paired 3 GEMMs by kernel sequence (the candidate is a graph-replay profile with no shapes): the paired GEMMs ran the same kernels in the same order; 1 GEMM added"),
        "{text}"
    );
    assert!(
        text.contains("1 GEMMs added: cudaGraphLaunch in step#2"),
        "{text}"
    );
    assert!(text.contains("1 differences: 1 structural"), "{text}");
    // One GEMM fewer: that eager GEMM alone is missing.
    let fewer = import(&s, "fewer", &replay(&[STEP[0], STEP[2]], 1));
    let (code, text) = diff(&e, &fewer, false);
    assert_ne!(code, 0, "{text}");
    assert!(text.contains("1 GEMMs missing: aten::mm#0"), "{text}");
    assert!(text.contains("1 differences: 1 structural"), "{text}");
}

/// `check --golden` judges a replay against an eager golden as `diff`
/// does: the same kernels pass and say how they were paired (text and
/// JSON), a changed kernel fails naming the eager GEMM and both kernels.
#[test]
fn check_golden_pairs_a_replay_by_kernel_sequence() {
    let s = Scratch::new("replay-check");
    let e = import(&s, "eager", &eager(&STEP));
    let r = import(&s, "replay", &replay(&STEP, 1));
    let x = import(&s, "changed", &replay(&changed_step(), 1));
    let check = |t: &PathBuf, json: bool| {
        let mut args = vec![
            "check",
            t.to_str().unwrap(),
            "--golden",
            e.to_str().unwrap(),
            "--backend",
            "cpu",
        ];
        if json {
            args.extend(["--format", "json"]);
        }
        let (code, out, err) = run(&args);
        (code, format!("{out}{err}"), out)
    };
    let (code, text, _) = check(&r, false);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("paired 3 GEMMs by kernel sequence (the candidate is a graph-replay profile with no shapes): same kernels in the same order"),
        "{text}"
    );
    let (code, _, out) = check(&r, true);
    assert_eq!(code, 0, "{out}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["verdict"], "pass");
    assert_eq!(doc["pairing"]["paired"], 3);
    assert_eq!(doc["pairing"]["differing"], 0);
    let errors = crate::schema::errors_of("check", &doc);
    assert!(errors.is_empty(), "{errors:?}");
    let (code, text, _) = check(&x, false);
    assert_ne!(code, 0, "{text}");
    assert!(text.contains("aten::mm#0"), "{text}");
    assert!(
        text.contains(changed_step()[1]) && text.contains(STEP[1]),
        "{text}"
    );
    let (_, _, out) = check(&x, true);
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["verdict"], "fail");
    assert_eq!(doc["summary"]["pairing"]["differing"], 1);
    let errors = crate::schema::errors_of("check", &doc);
    assert!(errors.is_empty(), "{errors:?}");
}

/// The JSON summary says how GEMMs were paired (and validates against
/// diff.schema.json); two eager profiles are paired by name and say
/// nothing of kernel sequences.
#[test]
fn the_json_summary_says_how_gemms_were_paired() {
    let s = Scratch::new("replay-json");
    let e = import(&s, "eager", &eager(&STEP));
    let x = import(&s, "changed", &replay(&changed_step(), 1));
    let (code, out) = diff(&e, &x, true);
    assert_ne!(code, 0);
    let json_end = out.rfind('}').unwrap() + 1;
    let doc: Value = serde_json::from_str(&out[..json_end]).unwrap();
    let errors = crate::schema::errors_of("diff", &doc);
    assert!(errors.is_empty(), "{errors:?}");
    let p = &doc["summary"]["pairing"];
    assert_eq!(p["side"], "candidate");
    assert_eq!(p["source"], "graph-replay profile");
    assert_eq!(
        (&p["paired"], &p["differing"], &p["replays"]),
        (&json!(3), &json!(1), &json!(1))
    );
    assert_eq!(
        (&p["missing"], &p["added"], &p["further_replay_gemms"]),
        (&json!(0), &json!(0), &json!(0))
    );
    assert!(
        p["first_differing"]
            .as_str()
            .unwrap()
            .starts_with("aten::mm#0 (aten::mm nn bf16 8x32x128)")
    );
    assert!(
        p["declarations"]
            .as_str()
            .unwrap()
            .contains("only by op names")
    );
    let d = doc["differences"].as_array().unwrap();
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0]["gemm"], "aten::mm#0");
    assert_eq!(d[0]["field"], "vendor.physical_kernels");
    assert_eq!(d[0]["expected"], json!([STEP[1]]));
    assert_eq!(d[0]["found"], json!([changed_step()[1]]));
    // Two eager steps: by name, no pairing.
    let e2 = import(&s, "eager2", &eager(&changed_step()));
    let (_, out) = diff(&e, &e2, true);
    let json_end = out.rfind('}').unwrap() + 1;
    let doc: Value = serde_json::from_str(&out[..json_end]).unwrap();
    assert!(doc["summary"]["pairing"].is_null(), "{doc}");
    assert!(crate::schema::errors_of("diff", &doc).is_empty());
}
