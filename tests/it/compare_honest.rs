//! `compare` says only what was seen: a tie is a disagreement nobody can
//! attribute (every side listed, never a pass), a member left out as
//! another's device is a warning naming it and is still held to the
//! group's bits, and traces whose outputs were not observed (imported
//! profiles) never have their outputs called equal, in any sink.
//!
//! The observed traces are the real H200 torch step the recorder wrote
//! (`python/tests/fixtures/torch-block-b8-h200.gat`, five cuBLAS GEMMs under
//! `vendor-fast`), given device identities as three nodes would have; the
//! unobserved ones are the real two-rank CPU profiles imported with the
//! command line.

use crate::common::{BIN, Scratch, root};
use gemm_audit::RecordedGemmTrace;
use gemm_audit::audit::{Contract, Verdict};
use gemm_audit::backend::DeviceLabel;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What one run of the binary printed, and its exit code.
struct Run {
    code: i32,
    stdout: String,
}

fn run(dir: &Path, args: &[&str]) -> Run {
    let out = Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("spawn gemm-audit");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
    Run {
        code: out.status.code().expect("exited normally"),
        stdout: format!("{}{stderr}", String::from_utf8_lossy(&out.stdout)),
    }
}

fn json(dir: &Path, args: &[&str]) -> Value {
    let r = run(dir, args);
    serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {}", r.stdout))
}

/// The recorder's real H200 trace of one torch step.
fn h200_step() -> RecordedGemmTrace {
    let p = root().join("python/tests/fixtures/torch-block-b8-h200.gat");
    RecordedGemmTrace::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The step as recorded on the card `uuid`; with `changed`, that launch's
/// output differs (one bit of its fingerprint), as a node whose output
/// changed would record it.
fn on_card(uuid: &str, changed: Option<usize>) -> RecordedGemmTrace {
    let mut t = h200_step();
    t.volatile.insert("cuda.device.uuid".into(), uuid.into());
    if let Some(i) = changed {
        t.fingerprints[i].sha256.0[0] ^= 1;
    }
    t
}

fn write_all(s: &Scratch, dir: &str, traces: &[(&str, RecordedGemmTrace)]) -> PathBuf {
    let d = s.path(dir);
    std::fs::create_dir_all(&d).unwrap();
    for (name, t) in traces {
        t.write(&d.join(name), true).unwrap();
    }
    d
}

/// The launch the planted change is in (a bf16 cuBLAS GEMM).
const CHANGED: usize = 2;

/// The bug: three traces of one H200 step, one node's output changed, one
/// trace carrying another's device identity. The copy is left out (a
/// warning naming it), the remaining two tie, and the tie fails with
/// every side listed, in the table, JSON and JUnit.
#[test]
fn a_tie_left_by_a_duplicate_identity_fails_and_lists_every_side() {
    let s = Scratch::new("tie-after-duplicate");
    write_all(
        &s,
        "step",
        &[
            ("a.gat", on_card("GPU-aaaa", None)),
            // Node b's trace carries node a's device identity.
            ("b.gat", on_card("GPU-aaaa", None)),
            ("c.gat", on_card("GPU-cccc", Some(CHANGED))),
        ],
    );
    let r = run(&s.0, &["compare", "step", "--junit", "compare.xml"]);
    assert_eq!(r.code, 1, "a tie is a failure:\n{}", r.stdout);
    let text = &r.stdout;
    assert!(text.contains("compare: FAIL"), "{text}");
    assert!(text.contains("tie"), "{text}");
    assert!(!text.contains("no cross-device promise"), "{text}");
    // Every side of the tie, with its output.
    let tie_line = text
        .lines()
        .position(|l| l.contains(&format!("launch {CHANGED} aten::addmm#2")) && l.contains("tie"))
        .unwrap_or_else(|| panic!("no tie line for launch {CHANGED}:\n{text}"));
    let sides: Vec<&str> = text.lines().skip(tie_line + 1).take(2).collect();
    assert!(
        sides.iter().any(|l| l.contains("step/a.gat"))
            && sides.iter().any(|l| l.contains("step/c.gat")),
        "both sides under the tie:\n{text}"
    );
    // The member left out is a warning naming it and the device it shares.
    let warning = text
        .lines()
        .find(|l| l.contains("warning") && l.contains("step/b.gat"))
        .unwrap_or_else(|| panic!("no warning naming step/b.gat:\n{text}"));
    assert!(
        warning.contains("GPU-aaaa") && warning.contains("step/a.gat"),
        "{warning}"
    );
    // JUnit: the launch fails and its message names both sides.
    let x = std::fs::read_to_string(s.path("compare.xml")).unwrap();
    assert!(x.contains("failures=\"1\""), "{x}");
    let failure = x
        .lines()
        .find(|l| l.contains("<failure"))
        .unwrap_or_else(|| panic!("no failure:\n{x}"));
    assert!(
        failure.contains("tie") && failure.contains("step/a.gat") && failure.contains("step/c.gat"),
        "{failure}"
    );
    assert!(
        x.contains("step/b.gat"),
        "the warning reaches JUnit too:\n{x}"
    );

    // JSON: the same verdict, the tie's sides and the warning.
    let v = json(&s.0, &["compare", "step", "--format", "json"]);
    assert_eq!(v["verdict"], "fail", "{v}");
    let g = &v["groups"][0];
    let l = &g["launches"][CHANGED];
    assert_eq!(
        (&l["outputs"], &l["tie"]),
        (&Value::from("tie"), &Value::from(true)),
        "{l}"
    );
    assert!(l["majority"].is_null(), "a tie has no majority: {l}");
    // Every member on its side: b (left out of the vote) with a.
    let mut sides: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for o in l["outliers"].as_array().unwrap() {
        sides
            .entry(o["fingerprint"].as_str().unwrap())
            .or_default()
            .push(o["label"].as_str().unwrap());
    }
    let mut sides: Vec<Vec<&str>> = sides.into_values().collect();
    sides.sort();
    assert_eq!(
        sides,
        [vec!["step/a.gat", "step/b.gat"], vec!["step/c.gat"]],
        "{l}"
    );
    for warnings in [&g["warnings"], &v["warnings"]] {
        let w = warnings
            .as_array()
            .unwrap_or_else(|| panic!("no warnings: {v}"));
        assert!(
            w.iter().any(|w| w.as_str().unwrap().contains("step/b.gat")),
            "{w:?}"
        );
    }
    // Every other launch: the same bits everywhere.
    for (i, l) in g["launches"].as_array().unwrap().iter().enumerate() {
        if i != CHANGED {
            assert_eq!(l["outputs"], "identical", "{l}");
        }
    }

    // A fourth node of the class breaks the tie: c alone is named, and a
    // vendor route's changed bits on one class still fail.
    write_all(&s, "step", &[("d.gat", on_card("GPU-dddd", None))]);
    let v = json(&s.0, &["compare", "step", "--format", "json"]);
    assert_eq!(v["verdict"], "fail", "{v}");
    let l = &v["groups"][0]["launches"][CHANGED];
    assert_eq!(l["outputs"], "outliers", "{l}");
    assert_eq!(l["agree"], 2, "{l}");
    let named: Vec<&str> = l["outliers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["label"].as_str().unwrap())
        .collect();
    assert_eq!(named, ["step/c.gat"], "{l}");
}

/// The member left out as another's device is still held to the group's
/// bits: when it is the one whose output changed, the group fails and
/// names it (the voters agreeing among themselves is not enough).
#[test]
fn a_left_out_member_that_disagrees_fails_the_group() {
    let s = Scratch::new("duplicate-disagrees");
    write_all(
        &s,
        "step",
        &[
            ("a.gat", on_card("GPU-aaaa", None)),
            ("b.gat", on_card("GPU-aaaa", Some(CHANGED))),
            ("c.gat", on_card("GPU-cccc", None)),
        ],
    );
    let r = run(&s.0, &["compare", "step"]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(r.stdout.contains("compare: FAIL"), "{}", r.stdout);
    let v = json(&s.0, &["compare", "step", "--format", "json"]);
    let l = &v["groups"][0]["launches"][CHANGED];
    let named: Vec<&str> = l["outliers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["label"].as_str().unwrap())
        .collect();
    assert_eq!(named, ["step/b.gat"], "{l}");
    // One voter and a disagreeing copy of its device: not a pass either,
    // even where one trace per class is allowed.
    std::fs::remove_file(s.path("step/c.gat")).unwrap();
    let r = run(&s.0, &["compare", "step", "--allow-single"]);
    assert_eq!(r.code, 1, "{}", r.stdout);
}

/// Imports the real two-rank CPU profiles with the command line: two
/// traces whose outputs were not observed.
fn imported_ranks(s: &Scratch) -> PathBuf {
    let ranks: Vec<String> = std::fs::read_dir(root().join("tests/data/profiles/cpu-ranks"))
        .unwrap()
        .map(|e| e.unwrap().path().display().to_string())
        .collect();
    assert_eq!(ranks.len(), 2);
    let mut args = vec!["import"];
    args.extend(ranks.iter().map(String::as_str));
    args.extend(["-o", "ranks"]);
    let r = run(&s.0, &args);
    assert_eq!(r.code, 0, "{}", r.stdout);
    s.path("ranks")
}

/// Profiles hold no output bits: the table, JSON and JUnit of their
/// comparison never call outputs equal, identical or agreeing, never count
/// equal fingerprints, and say "not observed"; the routes are compared.
#[test]
fn unobserved_outputs_are_never_called_equal_in_any_sink() {
    let s = Scratch::new("unobserved");
    imported_ranks(&s);
    let r = run(&s.0, &["compare", "ranks", "--junit", "compare.xml"]);
    assert_eq!(r.code, 0, "the routes agree:\n{}", r.stdout);
    let text = &r.stdout;
    assert!(text.contains("not observed"), "{text}");
    for line in text.lines() {
        let l = line.to_lowercase();
        if l.contains("agree") || l.contains("identical") || l.contains("pass") {
            assert!(
                l.contains("route") && l.contains("not observed"),
                "a line that could be read as outputs agreeing: {line:?}\n{text}"
            );
        }
    }
    // JSON: every launch's output vote is "not observed", with no count.
    let v = json(&s.0, &["compare", "ranks", "--format", "json"]);
    let launches = v["groups"][0]["launches"].as_array().unwrap();
    assert!(!launches.is_empty());
    for l in launches {
        assert_eq!(l["outputs"], "not-observed", "{l}");
        assert!(l["agree"].is_null() && l["majority"].is_null(), "{l}");
        assert_eq!(l["observed"], false, "{l}");
    }
    // JUnit: no launch passes on bits; each is skipped, saying why.
    let x = std::fs::read_to_string(s.path("compare.xml")).unwrap();
    let cases = x.matches("<testcase ").count();
    assert_eq!(cases, launches.len(), "{x}");
    assert_eq!(x.matches("<skipped message=").count(), cases, "{x}");
    assert!(x.contains("not observed"), "{x}");
    assert!(!x.to_lowercase().contains("identical"), "{x}");

    // A route that differs still fails.
    let mut t = RecordedGemmTrace::read(&first_gat(&s.path("ranks"))).unwrap();
    t.routes[0].kernel_symbol.push_str("_other");
    t.volatile.insert("profile.rank".into(), "7".into());
    t.write(&s.path("ranks/other.gat"), true).unwrap();
    let r = run(&s.0, &["compare", "ranks"]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(r.stdout.contains("served another way"), "{}", r.stdout);
}

fn first_gat(dir: &Path) -> PathBuf {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "gat"))
        .collect();
    v.sort();
    v.remove(0)
}

/// `gpu-to-gpu` over unobserved traces (what `bless --device all` and the
/// fleet run on): no row or case passes on bits or says "bit-identical";
/// the launches are INFO, "not observed".
#[test]
fn gpu_to_gpu_of_unobserved_traces_says_not_observed() {
    let s = Scratch::new("unobserved-fleet");
    let dir = imported_ranks(&s);
    let mut traces: Vec<(DeviceLabel, RecordedGemmTrace)> = Vec::new();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    for (i, p) in paths.iter().enumerate() {
        traces.push((
            DeviceLabel::new("cpu", i),
            RecordedGemmTrace::read(p).unwrap(),
        ));
    }
    let r = gemm_audit::fleet::gpu_to_gpu_traces(&traces);
    assert!(!r.cases.is_empty() && !r.checks.is_empty(), "{r:?}");
    for c in &r.cases {
        assert_eq!(c.contract, Contract::GpuToGpu);
        assert_eq!(c.verdict, Verdict::Info, "{c:?}");
        assert!(c.detail.contains("not observed"), "{c:?}");
    }
    for c in &r.checks {
        assert_ne!(c.verdict, Verdict::Pass, "{c:?}");
        assert!(!c.detail.contains("identical"), "{c:?}");
        assert!(c.detail.contains("not observed"), "{c:?}");
    }
    assert!(r.passed(), "the routes agree: {r:?}");
}
