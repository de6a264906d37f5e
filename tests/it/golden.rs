//! Golden CPU traces (`traces/cpu-<arch>/*.gat`, committed for x86_64): a fresh recording of every
//! deterministic built-in workload must equal its golden, the golden must
//! check and replay on the live CPU backend, and the reviewable renderings
//! (JSON, `show`, `check`, `diff`, `audit`) are pinned as insta snapshots
//! under `tests/it/snapshots/`.
//!
//! When a golden differs on purpose (a new kernel, a format change), review
//! the diff this test prints, then re-bless:
//!
//! ```text
//! cargo run --release -- record <name> --backend cpu -o traces/cpu-x86_64/<name>.gat --force   # cpu-<arch> elsewhere
//! INSTA_UPDATE=always cargo test --test it golden::   # then review tests/it/snapshots/*.snap
//! ```

use crate::common::*;
use gemm_audit::backend::Backend;
use gemm_audit::backend::GemmBackend;
use gemm_audit::backend::cpu::CpuBackend;
use gemm_audit::diff::TraceDiff;
use gemm_audit::recorder;
use gemm_audit::workload::Workload;
use gemm_audit::{CapturedGemmGraphPlan, RecordedGemmTrace, build_resolved_gemm_launch_set};
use std::path::Path;
use std::process::Command;

/// The built-in workloads with a golden CPU trace (not the nondeterministic control).
const GOLDENS: [&str; 2] = ["transformer-block", "m-sweep"];

/// The golden's path relative to the crate root (as the commands below see it).
fn rel(name: &str) -> String {
    format!("traces/cpu-{}/{name}.gat", std::env::consts::ARCH)
}

fn rebless(name: &str) -> String {
    format!(
        "if this change is deliberate, review the differences above, then re-bless the golden:\n    \
         cargo run --release -- record {name} --backend cpu -o traces/cpu-{arch}/{name}.gat --force\n\
         (or `cargo run --release -- bless {name} --golden-dir traces --backend cpu --force`)\n\
         and update the snapshots (INSTA_UPDATE=always cargo test --test it golden::, then review tests/it/snapshots/)",
        arch = std::env::consts::ARCH
    )
}

fn golden(name: &str) -> RecordedGemmTrace {
    let path = root().join(rel(name));
    RecordedGemmTrace::read(&path).unwrap_or_else(|e| {
        panic!(
            "golden {} does not read: {e}\n{}",
            path.display(),
            rebless(name)
        )
    })
}

fn cpu() -> Backend {
    Backend::new(CpuBackend::default())
}

/// Runs the binary in `dir`; returns the exit code and a reviewable
/// transcript (command, exit code, stdout, stderr) for a snapshot.
fn run_in(dir: &Path, args: &[&str]) -> (i32, String) {
    let out = Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("spawn gemm-audit");
    let code = out.status.code().expect("exited normally, not by a signal");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("panicked"),
        "gemm-audit {args:?} panicked:\n{stderr}"
    );
    let transcript = format!(
        "$ gemm-audit {}\nexit: {code}\n--- stdout\n{stdout}--- stderr\n{stderr}",
        args.join(" ")
    );
    (code, transcript)
}

// ------------------------------------------------------------ the goldens

#[test]
fn fresh_recordings_equal_the_goldens() {
    let backend = cpu();
    for name in GOLDENS {
        let w = Workload::builtin(name).expect("built-in workload");
        let rec = recorder::record(&backend, &w, &mut |_, _| {}).expect("records");
        assert!(
            rec.replay.is_identical(),
            "{name}: the fresh recording's replay is {:?}",
            rec.replay
        );
        let mut fresh = rec.trace;
        let mut golden = golden(name);
        let diff = TraceDiff::between(&golden, &fresh);
        assert!(
            diff.is_empty(),
            "the CPU recording of {name} differs from {}:\n{}\n{}",
            rel(name),
            diff.render(),
            rebless(name)
        );
        // What the diff does not compare must be equal too (launch set,
        // graph nodes), all but the per-machine volatile metadata.
        golden.volatile.clear();
        fresh.volatile.clear();
        assert!(
            golden == fresh,
            "the CPU recording of {name} differs from {} outside the \
             fields `diff` compares (launch set or graph nodes):\n\
             golden launch set {:?}\nfresh  launch set {:?}\n{}",
            rel(name),
            golden.launch_set,
            fresh.launch_set,
            rebless(name)
        );
    }
}

#[test]
fn goldens_are_canonical_and_consistent() {
    for name in GOLDENS {
        let bytes = std::fs::read(root().join(rel(name))).expect("golden exists");
        let g = golden(name);
        assert_eq!(
            g.to_bytes().expect("encodes"),
            bytes,
            "{name}: the golden is not in canonical encoding\n{}",
            rebless(name)
        );
        assert_eq!(g.workload, name);
        assert_eq!(
            g.workload_digest,
            Workload::builtin(name).expect("built-in").digest(),
            "{name}: the built-in's definition changed\n{}",
            rebless(name)
        );
        assert_eq!(
            build_resolved_gemm_launch_set(&g.routes).expect("launch set builds"),
            g.launch_set,
            "{name}: the golden's launch set does not match its routes"
        );
    }
}

#[test]
fn golden_plans_build_and_validate_against_the_live_cpu_context() {
    let backend = cpu();
    for name in GOLDENS {
        let g = golden(name);
        let plan = CapturedGemmGraphPlan::from_trace(&g)
            .unwrap_or_else(|r| panic!("{name}: the golden's plan is refused: {r}"));
        plan.validate(backend.context()).unwrap_or_else(|r| {
            panic!(
                "{name}: the golden does not validate against the live CPU context: {r}\n{}",
                rebless(name)
            )
        });
        plan.check_against_golden_trace(&g)
            .unwrap_or_else(|r| panic!("{name}: the golden differs from itself: {r}"));
    }
}

#[test]
fn golden_check_with_replay_passes() {
    for name in GOLDENS {
        let (code, out) = run_in(
            root(),
            &["check", &rel(name), "--replay", "--backend", "cpu"],
        );
        assert_eq!(code, 0, "{out}\n{}", rebless(name));
        insta::assert_snapshot!(format!("check-replay-{name}"), out);
    }
}

#[test]
fn goldens_are_found_by_golden_dir_and_bless_reproduces_them() {
    for name in GOLDENS {
        let (code, out) = run_in(
            root(),
            &[
                "check",
                &rel(name),
                "--golden-dir",
                "traces",
                "--backend",
                "cpu",
            ],
        );
        assert_eq!(code, 0, "{out}");
        assert!(out.contains("check: PASS"), "{out}");
    }
    // `bless` into a scratch folder writes the same traces (volatile aside).
    let s = Scratch::new("bless");
    let mut args = vec!["bless"];
    args.extend(GOLDENS);
    args.extend(["--golden-dir", "out", "--backend", "cpu"]);
    let (code, out) = run_in(&s.0, &args);
    assert_eq!(code, 0, "{out}");
    for name in GOLDENS {
        let blessed =
            RecordedGemmTrace::read(&s.path("out").join(cpu_key()).join(format!("{name}.gat")))
                .unwrap_or_else(|e| panic!("bless did not write {name}: {e}\n{out}"));
        let diff = TraceDiff::between(&golden(name), &blessed);
        assert!(
            diff.is_empty(),
            "bless of {name} differs from the golden:\n{}\n{}",
            diff.render(),
            rebless(name)
        );
    }
}

// -------------------------------------------------------------- snapshots

/// Every trace under `traces/` (all devices), as reviewable text: a golden
/// change shows up as a text diff in review. Volatile metadata is redacted;
/// digests and fingerprints never are (they are the point).
#[test]
fn every_golden_trace_renders_as_a_snapshot() {
    let mut seen = 0;
    insta::glob!("../../traces", "**/*.gat", |path| {
        seen += 1;
        let g = RecordedGemmTrace::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            !g.volatile.is_empty(),
            "{}: no volatile metadata",
            path.display()
        );
        insta::assert_json_snapshot!(g, { ".volatile" => "[volatile]" });
    });
    assert!(seen >= GOLDENS.len(), "found only {seen} golden traces");
}

#[test]
fn show_json_prints_the_trace_document() {
    for name in GOLDENS {
        let g = golden(name);
        let (code, out) = run_in(root(), &["show", &rel(name), "--format", "json"]);
        assert_eq!(code, 0, "{out}");
        let stdout = out
            .split_once("--- stdout\n")
            .and_then(|(_, r)| r.split_once("--- stderr\n"))
            .map(|(s, _)| s)
            .expect("transcript");
        let doc: serde_json::Value = serde_json::from_str(stdout).expect("one JSON document");
        assert_eq!(doc["kind"], "show", "{name}");
        let trace: serde_json::Value = serde_json::from_str(&g.to_json()).unwrap();
        assert_eq!(
            doc["trace"], trace,
            "{name}: show --format json holds the trace"
        );
    }
}

#[test]
fn golden_show_tables() {
    for name in GOLDENS {
        let (code, out) = run_in(root(), &["show", &rel(name)]);
        assert_eq!(code, 0, "{out}");
        insta::assert_snapshot!(format!("show-{name}"), out);
    }
}

#[test]
fn check_refusals() {
    let s = Scratch::new("check-refusals");

    // The nondeterministic control: recorded (replay refused), then refused by check.
    let (code, _) = run_in(
        &s.0,
        &[
            "record",
            "nondeterministic-control",
            "-o",
            "control.gat",
            "--backend",
            "cpu",
        ],
    );
    assert_eq!(code, 1, "record of the control is a finding");
    let (code, out) = run_in(&s.0, &["check", "control.gat", "--backend", "cpu"]);
    assert_eq!(code, 1, "{out}");
    insta::assert_snapshot!("check-refused-control", out);

    // A golden whose route was changed and re-sealed without its launch set.
    let g = golden("transformer-block");
    let mut resealed = g.clone();
    resealed.routes[5].kernel_symbol = "cpu_scalar_fma_nn_bf16".into();
    resealed
        .write(&s.path("resealed.gat"), false)
        .expect("write");
    let (code, out) = run_in(
        &s.0,
        &["check", "resealed.gat", "--replay", "--backend", "cpu"],
    );
    assert_eq!(code, 1, "{out}");
    insta::assert_snapshot!("check-refused-resealed", out);

    // The same change with the launch set re-digested: only the golden catches it.
    let mut redigested = resealed.clone();
    redigested.launch_set = build_resolved_gemm_launch_set(&redigested.routes).expect("builds");
    redigested
        .write(&s.path("redigested.gat"), false)
        .expect("write");
    std::fs::copy(root().join(rel("transformer-block")), s.path("golden.gat")).expect("copy");
    let (code, out) = run_in(
        &s.0,
        &[
            "check",
            "redigested.gat",
            "--golden",
            "golden.gat",
            "--backend",
            "cpu",
        ],
    );
    assert_eq!(code, 1, "{out}");
    insta::assert_snapshot!("check-refused-against-golden", out);
}

#[test]
fn diff_outputs() {
    let (code, out) = run_in(
        root(),
        &["diff", &rel("transformer-block"), &rel("m-sweep")],
    );
    assert!(code >= 64 && (code - 64) & 8 != 0, "structural bit: {out}");
    insta::assert_snapshot!("diff-transformer-block-vs-m-sweep", out);

    // A tampered copy: a kernel (route), an output (numeric) and a driver
    // (identity) changed, launch set re-digested: 64 + 1 + 2 + 4.
    let s = Scratch::new("diff");
    let g = golden("transformer-block");
    let mut t = g.clone();
    t.routes[3].kernel_symbol = "cpu_scalar_fma_nn_bf16".into();
    t.fingerprints[7].sha256.0[31] ^= 0x80;
    t.context.device.driver = "590.44".into();
    for r in &mut t.routes {
        r.device.driver = "590.44".into();
    }
    t.launch_set = build_resolved_gemm_launch_set(&t.routes).expect("builds");
    t.write(&s.path("tampered.gat"), false).expect("write");
    std::fs::copy(root().join(rel("transformer-block")), s.path("golden.gat")).expect("copy");
    let (code, out) = run_in(&s.0, &["diff", "golden.gat", "tampered.gat"]);
    assert_eq!(code, 64 + 1 + 2 + 4, "{out}");
    insta::assert_snapshot!("diff-golden-vs-tampered", out);
    let (code, out) = run_in(
        &s.0,
        &[
            "diff",
            "golden.gat",
            "tampered.gat",
            "--allow",
            "identity,numeric",
        ],
    );
    assert_eq!(code, 64 + 2, "{out}");
}

#[test]
fn audit_json() {
    let out = Command::new(BIN)
        .args([
            "audit",
            "--format",
            "json",
            "--backend",
            "cpu",
            "--no-progress",
        ])
        .output()
        .expect("spawn gemm-audit");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "audit failed:\n{stderr}");
    let mut report: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("audit JSON parses");
    // The control's distinct-output and run counts vary run to run: redact
    // that detail only (in every table of the report that has a row for
    // it), after checking its form. Every other row is pinned.
    let redacted = redact_control_detail(&mut report);
    assert!(redacted >= 1, "no nondeterminism-detected row in {report}");
    // Times and the machine's own facts vary: check their form, then pin
    // everything else.
    let timings = report["timings"].as_array_mut().expect("timings");
    assert!(!timings.is_empty());
    for t in timings {
        assert!(t["seconds"].as_f64().is_some_and(|s| s >= 0.0), "{t}");
        assert_eq!(t["clock"], "host-kernel");
        t["seconds"] = "[seconds]".into();
    }
    assert!(report["elapsed_seconds"].as_f64().is_some_and(|s| s > 0.0));
    report["elapsed_seconds"] = "[seconds]".into();
    let env = report["environment"].as_object_mut().expect("environment");
    assert_eq!(env["backend"], "cpu");
    for volatile in ["cpu.model", "device", "tool.version"] {
        if env.contains_key(volatile) {
            env.insert(volatile.into(), format!("[{volatile}]").into());
        }
    }
    assert_eq!(report["drift"], serde_json::json!([]));
    insta::assert_json_snapshot!("audit-cpu-json", report);
}

/// Replaces the detail of every `nondeterminism-detected` row, wherever it
/// sits in the report; returns how many were replaced.
fn redact_control_detail(v: &mut serde_json::Value) -> usize {
    match v {
        serde_json::Value::Object(map) => {
            if map.get("contract").and_then(|c| c.as_str()) == Some("nondeterminism-detected") {
                let detail = map
                    .get("detail")
                    .and_then(|d| d.as_str())
                    .expect("the control row has a detail");
                assert!(
                    detail.starts_with("planted drift caught: ")
                        && detail.contains(" distinct outputs in "),
                    "unexpected control detail {detail:?}"
                );
                map.insert(
                    "detail".into(),
                    "[volatile: planted drift caught: N distinct outputs in R runs]".into(),
                );
                return 1;
            }
            map.values_mut().map(redact_control_detail).sum()
        }
        serde_json::Value::Array(items) => items.iter_mut().map(redact_control_detail).sum(),
        _ => 0,
    }
}
