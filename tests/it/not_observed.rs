//! Say only what was seen: traces without observed outputs (imported
//! profiles, or a trace relabelled so) never pass on bits, in any sink;
//! a failing diff or gate opens with the few lines a person needs.

use crate::common::{BIN, Scratch, root};
use gemm_audit::diff::TraceDiff;
use gemm_audit::{FingerprintMode, OutputFingerprint, RecordedGemmTrace};
use serde_json::Value;
use std::process::{Command, Output};

fn run(s: &Scratch, args: &[&str]) -> Output {
    Command::new(BIN)
        .current_dir(&s.0)
        .args(args)
        .output()
        .expect("run gemm-audit")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Two profiles of one step imported as if from two GPUs of one class with
/// different drivers: same routes, no output bits.
fn two_unobserved(s: &Scratch) -> (RecordedGemmTrace, RecordedGemmTrace) {
    let profile = root().join("tests/data/profiles/cpu-block.json.gz");
    let o = run(
        s,
        &["-q", "import", profile.to_str().unwrap(), "-o", "a.gat"],
    );
    assert!(o.status.success(), "{}", text(&o));
    let a = RecordedGemmTrace::read(&s.path("a.gat")).unwrap();
    let mut b = a.clone();
    b.context.device.driver = "another driver".into();
    for r in &mut b.routes {
        r.device.driver = "another driver".into();
    }
    b.launch_set = gemm_audit::build_resolved_gemm_launch_set(&b.routes).unwrap();
    b.write(&s.path("b.gat"), false).unwrap();
    (a, b)
}

/// A cross-device diff of two imported profiles reports portability as
/// not observed, never portable or bit-identical (table and JSON).
#[test]
fn portability_of_unobserved_traces_is_not_observed() {
    let s = Scratch::new("unobserved-portability");
    let (a, b) = two_unobserved(&s);
    assert!(a.routes.len() > 1);
    let o = run(&s, &["diff", "a.gat", "b.gat"]);
    let t = text(&o);
    assert!(t.contains("portability by numeric contract"), "{t}");
    assert!(t.contains("not observed"), "{t}");
    for claim in ["portable (", "bit-identical", "identical"] {
        assert!(
            !t.contains(claim),
            "claims `{claim}` of unobserved bits:\n{t}"
        );
    }
    let o = run(&s, &["diff", "a.gat", "b.gat", "--format", "json"]);
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    let p = doc["portability"].as_array().unwrap();
    assert!(!p.is_empty(), "{doc}");
    for x in p {
        assert!(
            x["equal"].is_null(),
            "equal counted for unobserved bits: {x}"
        );
        assert!(x["pairs"].as_u64().unwrap() > 0, "{x}");
    }
    assert_eq!(doc["summary"]["outputs"]["bits"], "not-observed", "{doc}");
    // The library API says the same.
    let p = gemm_audit::diff::portability(&a, &b);
    assert!(p.iter().all(|x| x.portable().is_none()), "{p:?}");
}

/// A replay of placeholder fingerprints compares nothing: it is refused,
/// and `check --replay` fails, in the table and in JSON.
#[test]
fn a_replay_of_placeholder_fingerprints_never_passes() {
    let s = Scratch::new("unobserved-replay");
    let tiny = root().join("tests/data/tiny.toml");
    let o = run(
        &s,
        &[
            "-q",
            "record",
            tiny.to_str().unwrap(),
            "-o",
            "r.gat",
            "--backend",
            "cpu",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let mut t = RecordedGemmTrace::read(&s.path("r.gat")).unwrap();
    t.fingerprint_mode = FingerprintMode::NotObserved;
    for f in &mut t.fingerprints {
        *f = OutputFingerprint::not_observed(f.bytes);
    }
    t.write(&s.path("p.gat"), false).unwrap();
    // The real recording replays identical: the refusal is the label's.
    let o = run(&s, &["check", "r.gat", "--backend", "cpu", "--replay"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = run(&s, &["check", "p.gat", "--backend", "cpu", "--replay"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("check: FAIL"), "{out}");
    assert!(out.contains("placeholder fingerprints"), "{out}");
    assert!(!out.contains("fingerprints identical"), "{out}");
    let o = run(
        &s,
        &[
            "check",
            "p.gat",
            "--backend",
            "cpu",
            "--replay",
            "--format",
            "json",
        ],
    );
    assert_eq!(o.status.code(), Some(1));
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["verdict"], "fail", "{doc}");
    assert_eq!(doc["replay"]["outcome"], "refused", "{doc}");
}

/// `check --golden` and `review` of unobserved traces with equal routes
/// pass on routes and say the bits were not observed, never "identical".
#[test]
fn golden_checks_of_unobserved_traces_claim_no_bits() {
    let s = Scratch::new("unobserved-golden");
    two_unobserved(&s);
    let o = run(
        &s,
        &["check", "a.gat", "--golden", "a.gat", "--backend", "cpu"],
    );
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("not observed"), "{out}");
    assert!(!out.contains("identical"), "{out}");
    // A pending candidate equal to its golden in routes: review says the
    // bits were not observed.
    let o = run(&s, &["bless", "--from", "a.gat", "--golden-dir", "g"]);
    assert!(o.status.success(), "{}", text(&o));
    let golden = std::fs::read_dir(s.path("g"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
        .join(format!(
            "{}.gat",
            RecordedGemmTrace::read(&s.path("a.gat")).unwrap().workload
        ));
    std::fs::copy(&golden, golden.with_extension("gat.pending")).unwrap();
    let o = run(&s, &["review", "--golden-dir", "g"]);
    let out = text(&o);
    assert!(out.contains("output bits not observed"), "{out}");
    assert!(!out.contains("identical"), "{out}");
}

/// The report sinks (HTML, Markdown, JUnit) of a drift between unobserved
/// traces with equal routes say the bits were not observed.
#[test]
fn report_sinks_say_unobserved_bits_were_not_observed() {
    let s = Scratch::new("unobserved-sinks");
    let (a, _) = two_unobserved(&s);
    let d = TraceDiff::between(&a, &a);
    assert!(d.is_empty());
    assert_eq!(d.render(), format!("{}\n", d.agreement()));
    assert!(d.agreement().contains("not observed"));
    assert!(!d.render().contains("no differences"));
    let input = gemm_audit::report::ReportInput {
        audit: crate::report::audit(),
        drift: vec![(a.workload.clone(), d)],
    };
    let html = gemm_audit::render::html::html(&input);
    let md = gemm_audit::render::markdown::markdown(&input);
    for (sink, out) in [("html", &html), ("markdown", &md)] {
        assert!(out.contains("output bits not observed"), "{sink}:\n{out}");
        assert!(!out.contains("No differences"), "{sink}:\n{out}");
    }
}

/// A failing diff opens with what changed once (a library, with the
/// routes it reaches), whether kernels changed and what is known of the
/// bits, then how to accept it; the per-route detail is grouped.
#[test]
fn a_failing_diff_opens_with_its_summary() {
    let s = Scratch::new("diff-summary");
    let profile = root().join("tests/data/profiles/cpu-block.json.gz");
    let p = profile.to_str().unwrap();
    for (out, lib) in [("a.gat", "cublas=13.0.2"), ("b.gat", "cublas=13.1.0")] {
        let o = run(&s, &["-q", "import", p, "-o", out, "--library", lib]);
        assert!(o.status.success(), "{}", text(&o));
    }
    let routes = RecordedGemmTrace::read(&s.path("a.gat"))
        .unwrap()
        .routes
        .len();
    let o = run(&s, &["diff", "a.gat", "b.gat"]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(o.status.code(), Some(65), "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("libraries changed: "), "{out}");
    assert!(lines[0].contains("kernels unchanged"), "{out}");
    assert!(lines[0].contains("output bits not observed"), "{out}");
    let library = lines
        .iter()
        .position(|l| l.trim_start().starts_with("library"))
        .expect("a library line");
    assert!(library < 4, "{out}");
    assert!(
        lines[library].contains(&format!("cublas 13.0.2 -> cublas 13.1.0 ({routes} routes)")),
        "{out}"
    );
    assert!(
        lines.iter().take(8).any(|l| l.contains("--allow identity")),
        "{out}"
    );
    // One group for the change every route shares, not a line per route
    // and field.
    assert!(lines.len() < 30, "{} lines:\n{out}", lines.len());
    assert!(
        out.contains(&format!("[identity] {routes} routes (")),
        "{out}"
    );
    // The same summary in JSON.
    let o = run(&s, &["diff", "a.gat", "b.gat", "--format", "json"]);
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    let lib = &doc["summary"]["libraries"][0];
    assert_eq!(lib["expected"], "cublas 13.0.2", "{doc}");
    assert_eq!(lib["found"], "cublas 13.1.0", "{doc}");
    assert_eq!(lib["routes"], routes, "{doc}");
    assert_eq!(doc["summary"]["kernels"]["gemms"], 0, "{doc}");
    // check --golden opens with the same lines.
    let o = run(
        &s,
        &["check", "b.gat", "--golden", "a.gat", "--backend", "cpu"],
    );
    let check = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(o.status.code(), Some(1), "{check}");
    assert!(
        check
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("libraries changed"),
        "{check}"
    );
}
