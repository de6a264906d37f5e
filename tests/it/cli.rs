//! End-to-end tests of the `gemm-audit` binary: every subcommand on good
//! input, and bad command lines, bad workloads and damaged or tampered
//! traces. Each case asserts the exit code (see `gemm-audit --help`), a
//! message that names what is wrong, and that nothing panicked.

use crate::common::*;
use gemm_audit::workload::Workload;
use gemm_audit::{RecordedGemmTrace, build_resolved_gemm_launch_set};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The documented exit codes.
const OK: i32 = 0;
const FINDING: i32 = 1;
const USAGE: i32 = 2;
const BAD_INPUT: i32 = 3;
#[cfg_attr(feature = "cuda", allow(dead_code))]
const BACKEND: i32 = 4;
const DIFF_BASE: i32 = 64;

/// The tiny custom workload (three GEMMs), recorded by most tests.
const TINY: &str = include_str!("../data/tiny.toml");

// ---------------------------------------------------------------- helpers

/// What one run of the binary did.
struct Run {
    cmd: String,
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn all(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }

    /// Asserts the exit code, printing the whole run on failure.
    fn code(&self, want: i32) -> &Self {
        assert_eq!(
            self.code, want,
            "`{}` exited {}; {self}",
            self.cmd, self.code
        );
        self
    }

    /// Asserts that stdout or stderr contains every needle.
    fn says(&self, needles: &[&str]) -> &Self {
        let all = self.all();
        for n in needles {
            assert!(all.contains(n), "`{}` does not say {n:?}; {self}", self.cmd);
        }
        self
    }

    /// Asserts that stdout or stderr contains none of the needles.
    fn never_says(&self, needles: &[&str]) -> &Self {
        let all = self.all();
        for n in needles {
            assert!(!all.contains(n), "`{}` says {n:?}; {self}", self.cmd);
        }
        self
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "\n--- stdout\n{}\n--- stderr\n{}",
            self.stdout, self.stderr
        )
    }
}

/// Runs the binary in `dir` and checks that it exited normally, without a panic.
fn run_in(dir: &Path, args: &[&str]) -> Run {
    let out = Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("spawn gemm-audit");
    let run = Run {
        cmd: format!("gemm-audit {}", args.join(" ")),
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(
        out.status.code().is_some(),
        "`{}` was killed by a signal; {run}",
        run.cmd
    );
    assert!(
        !run.stderr.contains("panicked"),
        "`{}` panicked; {run}",
        run.cmd
    );
    run
}

/// Writes the tiny workload into `s` and records it to `tiny.gat`.
fn record_tiny(s: &Scratch) -> PathBuf {
    s.write("tiny.toml", TINY);
    run_in(
        &s.0,
        &["record", "tiny.toml", "-o", "tiny.gat", "--backend", "cpu"],
    )
    .code(OK)
    .says(&["recorded tiny (3 launches)", "replay: 3/3"]);
    s.path("tiny.gat")
}

fn read(path: &Path) -> RecordedGemmTrace {
    RecordedGemmTrace::read(path).expect("trace reads back")
}

// ------------------------------------------------------------ help, usage

/// The subcommands, as the root `--help` lists them (so a new one is covered too).
fn subcommands(dir: &Path) -> Vec<String> {
    let r = run_in(dir, &["--help"]);
    r.code(OK);
    let names: Vec<String> = r
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| *n != "help")
        .map(str::to_string)
        .collect();
    for expected in ["audit", "record", "check", "show", "diff", "workloads"] {
        assert!(
            names.iter().any(|n| n == expected),
            "root --help does not list {expected}: {names:?}{r}"
        );
    }
    names
}

#[test]
fn help_of_root_and_every_subcommand_lists_the_exit_codes() {
    let s = Scratch::new("help");
    let mut missing = Vec::new();
    let mut cases: Vec<Vec<String>> = vec![vec!["--help".into()], vec!["-h".into()]];
    for c in subcommands(&s.0) {
        cases.push(vec![c.clone(), "--help".into()]);
        cases.push(vec!["help".into(), c]);
    }
    for args in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = run_in(&s.0, &args);
        r.code(OK);
        if !(r.stdout.contains("Exit codes") && r.stdout.contains("64+N")) {
            missing.push(r.cmd.clone());
        }
    }
    assert!(
        missing.is_empty(),
        "help without the exit codes (add `after_help = EXIT_CODES` in src/cli/mod.rs): {missing:?}"
    );
}

#[test]
fn version_prints_the_crate_version() {
    let s = Scratch::new("version");
    run_in(&s.0, &["--version"])
        .code(OK)
        .says(&[&format!("gemm-audit {}", env!("CARGO_PKG_VERSION"))]);
}

#[test]
fn bad_command_lines_exit_2_and_name_the_problem() {
    let s = Scratch::new("usage");
    let cases: &[(&[&str], &[&str])] = &[
        (&[], &["Usage"]),
        (&["audit", "--runs", "1"], &["--runs", "2..=1000"]),
        (
            &["audit", "--control-attempts", "1"],
            &["--control-attempts"],
        ),
        (&["frobnicate"], &["unrecognized subcommand", "frobnicate"]),
        (
            &["record", "m-sweep", "-o", "x.gat", "--backend", "x"],
            &["--backend", "'x'", "cpu"],
        ),
        (&["audit", "--backend", "x"], &["--backend", "'x'"]),
        (
            &["diff", "a.gat", "b.gat", "--allow", "bogus"],
            &["--allow", "bogus", "numeric"],
        ),
        (
            &["diff", "a.gat", "b.gat", "--allow", "identity,"],
            &["--allow"],
        ),
        (&["record", "m-sweep"], &["--out"]),
        (&["check"], &["<TRACE>"]),
        (
            &["show", "x.gat", "--format", "yaml"],
            &["--format", "yaml"],
        ),
        (&["audit", "--no-such-flag"], &["--no-such-flag"]),
        // A budget that would switch itself off, or refuse everything.
        (&["--max-gflop=nan", "audit"], &["--max-gflop", "finite"]),
        (&["--max-gflop=inf", "audit"], &["--max-gflop", "finite"]),
        (&["--max-memory-gib=-1", "audit"], &["--max-memory-gib"]),
        (&["--max-gflop=0", "audit"], &["greater than 0"]),
        (
            &["compile-kernels", "--arch", "sm90"],
            &["--arch", "sm90", "sm_90"],
        ),
        (&["compile-kernels", "--arch", "sm_90a"], &["sm_90a"]),
    ];
    for (args, needles) in cases {
        run_in(&s.0, args).code(USAGE).says(needles);
    }
    assert!(!s.path("x.gat").exists(), "a usage error wrote a file");
}

// --------------------------------------------------------------- workloads

#[test]
fn unknown_workload_exits_3_and_lists_the_builtins() {
    let s = Scratch::new("unknown-workload");
    run_in(&s.0, &["record", "nope", "-o", "x.gat", "--backend", "cpu"])
        .code(BAD_INPUT)
        .says(&[
            "nope",
            "transformer-block",
            "m-sweep",
            "nondeterministic-control",
        ]);
    assert!(!s.path("x.gat").exists());
    run_in(&s.0, &["workloads", "--show", "nope"])
        .code(BAD_INPUT)
        .says(&["nope", "transformer-block", "m-sweep"]);
    run_in(&s.0, &["audit", "--backend", "cpu", "--workload", "nope"])
        .code(BAD_INPUT)
        .says(&["nope", "transformer-block"]);
}

const GEMM_A: &str = "[[gemm]]\nname = \"a\"\nop = \"nn\"\ndtype = \"f32\"\nm = 1\nk = 2\nn = 3\n";

#[test]
// Over 100 lines: one scenario, asserted step by step in the order a user meets it.
fn malformed_workload_files_exit_3_and_name_the_problem() {
    let s = Scratch::new("malformed-workload");
    let gemm = |name: &str, dtype: &str, m: u64| {
        format!(
            "[[gemm]]\nname = \"{name}\"\nop = \"nn\"\ndtype = \"{dtype}\"\nm = {m}\nk = 2\nn = 3\n"
        )
    };
    let cases: Vec<(&str, String, Vec<&str>)> = vec![
        (
            "syntax.toml",
            "name = \"x\"\n[[gemm]\nname = \"a\"\n".into(),
            vec!["syntax.toml", "TOML parse error", "line 2"],
        ),
        (
            "unknown-field.toml",
            format!("name = \"x\"\n{GEMM_A}colour = \"red\"\n"),
            vec!["unknown-field.toml", "unknown field", "colour"],
        ),
        (
            "unknown-top-field.toml",
            format!("name = \"x\"\nbogus = 1\n{GEMM_A}"),
            vec!["unknown field", "bogus"],
        ),
        (
            "zero-m.toml",
            format!("name = \"x\"\n{}", gemm("a", "f32", 0)),
            vec!["zero-m.toml", "\"a\"", "m must be at least 1"],
        ),
        (
            "dtype.toml",
            format!("name = \"x\"\n{}", gemm("a", "f64", 1)),
            vec!["dtype.toml", "f64", "bf16"],
        ),
        (
            "duplicate.toml",
            format!("name = \"x\"\n{}{}", gemm("a", "f32", 1), gemm("a", "f32", 2)),
            vec!["duplicate.toml", "\"a\"", "appears twice"],
        ),
        (
            "empty.toml",
            "name = \"x\"\ngemm = []\n".into(),
            vec!["empty.toml", "no GEMMs"],
        ),
        (
            "too-big.toml",
            format!("name = \"x\"\n{}", gemm("huge", "f32", 1 << 40)),
            vec!["too-big.toml", "huge", "over"],
        ),
        (
            "bad-route.toml",
            format!("name = \"x\"\n{GEMM_A}route = \"split-k-fixed:0\"\n"),
            vec!["bad-route.toml", "split count 0"],
        ),
        (
            "syntax.json",
            r#"{"name": "x", "gemm": [{"name": "a", "op": "nn", "dtype": "f32", "m": 1, "k": 1, "n": 1,}]}"#.into(),
            vec!["syntax.json", "trailing comma"],
        ),
        (
            "unknown-field.json",
            r#"{"name": "x", "extra": 1, "gemm": [{"name": "a", "op": "nn", "dtype": "f32", "m": 1, "k": 1, "n": 1}]}"#.into(),
            vec!["unknown-field.json", "unknown field", "extra"],
        ),
        (
            "zero-m.json",
            r#"{"name": "x", "gemm": [{"name": "a", "op": "nn", "dtype": "f32", "m": 0, "k": 1, "n": 1}]}"#.into(),
            vec!["zero-m.json", "m must be at least 1"],
        ),
        (
            "dtype.json",
            r#"{"name": "x", "gemm": [{"name": "a", "op": "nn", "dtype": "f8", "m": 1, "k": 1, "n": 1}]}"#.into(),
            vec!["dtype.json", "f8"],
        ),
        (
            "workload.yaml",
            "name: x\n".into(),
            vec!["workload.yaml", ".toml or .json"],
        ),
    ];
    for (file, text, needles) in &cases {
        s.write(file, text);
        run_in(&s.0, &["record", file, "-o", "out.gat", "--backend", "cpu"])
            .code(BAD_INPUT)
            .says(needles);
        assert!(!s.path("out.gat").exists(), "{file}: a trace was written");
    }
    // The audit loads its --workload files the same way.
    run_in(
        &s.0,
        &[
            "audit",
            "--backend",
            "cpu",
            "--no-progress",
            "--workload",
            "duplicate.toml",
        ],
    )
    .code(BAD_INPUT)
    .says(&["duplicate.toml", "appears twice"]);
}

#[test]
fn workloads_lists_the_builtins_and_show_prints_toml_that_record_accepts() {
    let s = Scratch::new("workloads");
    let r = run_in(&s.0, &["workloads"]);
    r.code(OK).says(&gemm_audit::workload::BUILTINS);
    assert_eq!(
        r.stdout.lines().count(),
        gemm_audit::workload::BUILTINS.len(),
        "one line per built-in{r}"
    );

    let r = run_in(&s.0, &["workloads", "--show", "m-sweep"]);
    r.code(OK).says(&["name = \"m-sweep\"", "[[gemm]]"]);
    let builtin = Workload::builtin("m-sweep").expect("built-in");
    let parsed = Workload::from_toml(&r.stdout).expect("printed TOML parses");
    assert_eq!(parsed, builtin, "the printed TOML is the built-in");

    s.write("m-sweep.toml", &r.stdout);
    run_in(
        &s.0,
        &["record", "m-sweep.toml", "-o", "m.gat", "--backend", "cpu"],
    )
    .code(OK)
    .says(&["recorded m-sweep (32 launches)", "replay: 32/32"]);
    let t = read(&s.path("m.gat"));
    assert_eq!(t.workload, "m-sweep");
    assert_eq!(
        t.workload_digest,
        builtin.digest(),
        "a workload file equal to the built-in has the built-in's digest"
    );
}

// ------------------------------------------------------------------ record

#[test]
fn record_writes_then_refuses_to_overwrite_without_force() {
    let s = Scratch::new("record");
    let path = record_tiny(&s);
    let before = std::fs::read(&path).expect("trace written");
    let t = read(&path);
    assert_eq!(t.workload, "tiny");
    assert_eq!(t.routes.len(), 3);
    assert_eq!(t.fingerprints.len(), 3);

    run_in(
        &s.0,
        &["record", "tiny.toml", "-o", "tiny.gat", "--backend", "cpu"],
    )
    .code(BAD_INPUT)
    .says(&["tiny.gat", "already exists", "--force"])
    .never_says(&["recorded"]);
    assert_eq!(
        std::fs::read(&path).expect("still there"),
        before,
        "a refused record changed the file"
    );

    run_in(
        &s.0,
        &[
            "record",
            "tiny.toml",
            "-o",
            "tiny.gat",
            "--backend",
            "cpu",
            "--force",
        ],
    )
    .code(OK)
    .says(&["recorded tiny", "replay: 3/3"]);
    let again = read(&path);
    assert!(
        gemm_audit::diff::TraceDiff::between(&t, &again).is_empty(),
        "re-recording changed the trace"
    );

    // An output in a directory that does not exist is bad input, not a panic.
    run_in(
        &s.0,
        &[
            "record",
            "tiny.toml",
            "-o",
            "no/such/dir/t.gat",
            "--backend",
            "cpu",
        ],
    )
    .code(BAD_INPUT)
    .says(&["no/such/dir"]);
}

#[test]
fn record_of_the_nondeterministic_control_is_refused_but_written() {
    let s = Scratch::new("control");
    run_in(
        &s.0,
        &[
            "record",
            "nondeterministic-control",
            "-o",
            "c.gat",
            "--backend",
            "cpu",
        ],
    )
    .code(FINDING)
    .says(&[
        "recorded nondeterministic-control",
        "refused",
        "contract.kind",
    ]);
    let t = read(&s.path("c.gat"));
    assert_eq!(t.workload, "nondeterministic-control");

    for extra in [&[][..], &["--replay"][..]] {
        let mut args = vec!["check", "c.gat", "--backend", "cpu"];
        args.extend_from_slice(extra);
        run_in(&s.0, &args)
            .code(FINDING)
            .says(&[
                "replay validation",
                "route 0",
                "contract.kind",
                "atomic-unordered",
                "check: FAIL",
            ])
            .never_says(&["fingerprints identical"]);
    }
}

// ------------------------------------------------------------------- check

#[test]
fn check_of_a_valid_trace_passes_and_replays_identical() {
    let s = Scratch::new("check-ok");
    record_tiny(&s);
    run_in(&s.0, &["check", "tiny.gat", "--backend", "cpu"])
        .code(OK)
        .says(&["tiny.gat", "3 launches", "check: PASS"])
        .never_says(&["refused"]);
    run_in(&s.0, &["check", "tiny.gat", "--backend", "cpu", "--replay"])
        .code(OK)
        .says(&["3/3 fingerprints identical", "check: PASS"]);
    run_in(
        &s.0,
        &[
            "check",
            "tiny.gat",
            "--backend",
            "cpu",
            "--golden",
            "tiny.gat",
        ],
    )
    .code(OK)
    .says(&["golden", "check: PASS"]);

    let r = run_in(
        &s.0,
        &[
            "check",
            "tiny.gat",
            "--backend",
            "cpu",
            "--replay",
            "--format",
            "json",
        ],
    );
    r.code(OK);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("check JSON parses");
    assert_eq!(v["workload"], "tiny");
    assert_eq!(v["launch_count"], 3);
    assert_eq!(v["replay"]["outcome"], "identical", "{v}");
}

#[test]
fn damaged_trace_files_exit_3_and_name_the_path_and_problem() {
    let s = Scratch::new("damaged");
    let good = std::fs::read(record_tiny(&s)).expect("trace");
    assert!(good.len() > 64);

    let mut cases: Vec<(String, Vec<u8>, &[&str])> = Vec::new();
    for cut in [3, 8, 20, good.len() / 2, good.len() - 1] {
        cases.push((
            format!("truncated-{cut}.gat"),
            good[..cut].to_vec(),
            &["truncated", "does not match", "checksum"],
        ));
    }
    cases.push(("empty.gat".into(), Vec::new(), &["truncated"]));
    for at in [good.len() / 3, good.len() / 2, good.len() - 5] {
        let mut b = good.clone();
        b[at] ^= 0x10;
        cases.push((
            format!("flipped-{at}.gat"),
            b,
            &["checksum", "does not decode", "does not match"],
        ));
    }
    let mut b = good.clone();
    b[..4].copy_from_slice(b"NOPE");
    cases.push((
        "magic.gat".into(),
        b,
        &["not a gemm-audit trace", "begins with \"NOPEAUDT\""],
    ));
    cases.push((
        "text.gat".into(),
        b"this is not a trace at all\n".to_vec(),
        &["not a gemm-audit trace"],
    ));
    let mut b = good.clone();
    b.extend_from_slice(b"trailing");
    cases.push((
        "appended.gat".into(),
        b,
        &["does not match", "checksum", "trailing"],
    ));

    for (name, bytes, any_of) in &cases {
        s.write(name, bytes);
        for args in [
            vec!["check", name.as_str(), "--backend", "cpu"],
            vec!["show", name.as_str()],
            vec!["diff", "tiny.gat", name.as_str()],
        ] {
            let r = run_in(&s.0, &args);
            r.code(BAD_INPUT).says(&[name.as_str()]);
            assert!(
                any_of.iter().any(|n| r.stderr.contains(n)),
                "`{}` names none of {any_of:?}; {r}",
                r.cmd
            );
        }
    }

    std::fs::create_dir(s.path("dir.gat")).expect("mkdir");
    let r = run_in(&s.0, &["check", "dir.gat", "--backend", "cpu"]);
    r.code(BAD_INPUT).says(&["dir.gat"]);
    #[cfg(unix)]
    r.says(&["directory"]);

    let r = run_in(&s.0, &["check", "missing.gat", "--backend", "cpu"]);
    r.code(BAD_INPUT).says(&["missing.gat"]);
    #[cfg(unix)]
    r.says(&["No such file"]);
    run_in(&s.0, &["show", "missing.gat"])
        .code(BAD_INPUT)
        .says(&["missing.gat"]);
    run_in(&s.0, &["check", "tiny.gat", "--golden", "missing.gat"])
        .code(BAD_INPUT)
        .says(&["missing.gat"]);
}

#[test]
fn resealed_route_tampering_is_refused_at_plan_construction() {
    let s = Scratch::new("resealed");
    let path = record_tiny(&s);
    let mut t = read(&path);
    let old_set = t.launch_set;
    // A symbol the CPU module serves, so only the launch set can tell.
    t.routes[1].kernel_symbol = "cpu_scalar_fma_tn_bf16".into();
    t.write(&s.path("resealed.gat"), true)
        .expect("writes with a valid checksum");
    assert_eq!(read(&s.path("resealed.gat")).launch_set, old_set);

    for extra in [&[][..], &["--replay"][..]] {
        let mut args = vec!["check", "resealed.gat", "--backend", "cpu"];
        args.extend_from_slice(extra);
        run_in(&s.0, &args)
            .code(FINDING)
            .says(&[
                "plan construction",
                "ordered_digest",
                &old_set.ordered_digest.to_string(),
                "check: FAIL",
            ])
            .never_says(&["fingerprints identical"]);
    }
}

#[test]
fn re_digested_route_tampering_is_refused_against_the_golden() {
    let s = Scratch::new("redigested");
    let path = record_tiny(&s);
    let t = read(&path);
    let mut routes = t.routes.clone();
    routes[1].kernel_symbol = "cpu_scalar_fma_tn_bf16".into();
    let forged = RecordedGemmTrace::new(
        t.workload.clone(),
        t.workload_digest,
        t.context.clone(),
        routes,
        t.fingerprints.clone(),
        t.volatile.clone(),
    )
    .expect("a re-digested trace is self-consistent");
    assert_ne!(forged.launch_set, t.launch_set);
    forged
        .write(&s.path("forged.gat"), false)
        .expect("write forged");

    run_in(
        &s.0,
        &[
            "check",
            "forged.gat",
            "--backend",
            "cpu",
            "--golden",
            "tiny.gat",
        ],
    )
    .code(FINDING)
    .says(&[
        "golden comparison",
        "route 1",
        "kernel_symbol",
        "cpu_split_k_fixed_tn_bf16",
        "cpu_scalar_fma_tn_bf16",
        "check: FAIL",
    ]);
    // The golden comparison comes before any replay.
    run_in(
        &s.0,
        &[
            "check",
            "forged.gat",
            "--backend",
            "cpu",
            "--golden",
            "tiny.gat",
            "--replay",
        ],
    )
    .code(FINDING)
    .says(&["kernel_symbol"])
    .never_says(&["fingerprints identical"]);
}

// -------------------------------------------------------------------- show

#[test]
fn show_prints_a_table_and_lossless_json() {
    let s = Scratch::new("show");
    let path = record_tiny(&s);
    let t = read(&path);
    let r = run_in(&s.0, &["show", "tiny.gat"]);
    r.code(OK).says(&[
        "workload        tiny",
        "launches        3",
        &t.launch_set.ordered_digest.to_string(),
        "KERNEL",
        "cpu_split_k_fixed_tn_bf16",
        "split-k-fixed/2",
    ]);
    for g in ["a", "b", "c"] {
        assert!(
            r.stdout
                .lines()
                .any(|l| l.split_whitespace().nth(1) == Some(g)),
            "no row for GEMM {g}{r}"
        );
    }

    let r = run_in(&s.0, &["show", "tiny.gat", "--format", "json"]);
    r.code(OK);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("show JSON parses");
    assert_eq!(
        (v["kind"].as_str(), v["schema_version"].as_u64()),
        (Some("show"), Some(1))
    );
    assert_eq!(v["trace"]["workload"], "tiny");
    assert_eq!(v["trace"]["routes"].as_array().map(Vec::len), Some(3));
    assert_eq!(v["trace"]["context"]["policy"]["half"], "stream-k");
    let back: RecordedGemmTrace =
        serde_json::from_value(v["trace"].clone()).expect("show JSON holds the trace");
    assert_eq!(back, t, "the JSON rendering is lossless");
}

// -------------------------------------------------------------------- diff

#[test]
// Over 100 lines: one scenario, asserted step by step in the order a user meets it.
fn diff_classifies_changes_and_exits_64_plus_their_bits() {
    let s = Scratch::new("diff");
    let path = record_tiny(&s);
    let t = read(&path);

    // Same workload recorded again: only volatile metadata may differ.
    run_in(
        &s.0,
        &["record", "tiny.toml", "-o", "again.gat", "--backend", "cpu"],
    )
    .code(OK);
    run_in(&s.0, &["diff", "tiny.gat", "again.gat"])
        .code(OK)
        .says(&["no differences"]);
    run_in(&s.0, &["diff", "tiny.gat", "tiny.gat"])
        .code(OK)
        .says(&["no differences"]);

    // A changed output fingerprint: numeric (64 + 4).
    let mut numeric = t.clone();
    numeric.fingerprints[2].sha256.0[0] ^= 1;
    numeric.write(&s.path("numeric.gat"), false).expect("write");
    run_in(&s.0, &["diff", "tiny.gat", "numeric.gat"])
        .code(DIFF_BASE + 4)
        .says(&["[numeric]", "route 2 (c)", "output_fingerprint", "numeric"]);
    run_in(
        &s.0,
        &["diff", "tiny.gat", "numeric.gat", "--allow", "numeric"],
    )
    .code(OK)
    .says(&["output_fingerprint"]);
    run_in(
        &s.0,
        &[
            "diff",
            "tiny.gat",
            "numeric.gat",
            "--allow",
            "route,identity",
        ],
    )
    .code(DIFF_BASE + 4);
    let r = run_in(
        &s.0,
        &["diff", "tiny.gat", "numeric.gat", "--format", "json"],
    );
    r.code(DIFF_BASE + 4);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("diff JSON parses");
    assert_eq!(v["differences"][0]["class"], "numeric", "{v}");
    assert_eq!(v["differences"][0]["field"], "output_fingerprint", "{v}");
    assert_eq!(v["differences"][0]["route_index"], 2, "{v}");

    // A new driver everywhere: identity (64 + 1).
    let mut identity = t.clone();
    identity.context.device.driver = "590.44".into();
    for r in &mut identity.routes {
        r.device.driver = "590.44".into();
    }
    identity.launch_set = build_resolved_gemm_launch_set(&identity.routes).expect("launch set");
    identity.write(&s.path("driver.gat"), false).expect("write");
    let r = run_in(&s.0, &["diff", "tiny.gat", "driver.gat"]);
    r.code(DIFF_BASE + 1)
        .says(&["[identity]", "device.driver", "590.44", "identity"])
        .never_says(&["[route]", "[numeric]", "[structural]", "[policy]"]);
    run_in(
        &s.0,
        &["diff", "tiny.gat", "driver.gat", "--allow", "identity"],
    )
    .code(OK);

    // Both at once: 64 + 1 + 4; allowing one leaves the other's bit.
    let mut both = identity.clone();
    both.fingerprints = numeric.fingerprints.clone();
    both.write(&s.path("both.gat"), false).expect("write");
    run_in(&s.0, &["diff", "tiny.gat", "both.gat"])
        .code(DIFF_BASE + 5)
        .says(&["identity", "numeric"]);
    run_in(
        &s.0,
        &["diff", "tiny.gat", "both.gat", "--allow", "numeric"],
    )
    .code(DIFF_BASE + 1);

    // The same GEMMs under another workload name: structural (64 + 8).
    s.write(
        "other.toml",
        TINY.replace("name = \"tiny\"", "name = \"other\""),
    );
    run_in(
        &s.0,
        &[
            "record",
            "other.toml",
            "-o",
            "other.gat",
            "--backend",
            "cpu",
        ],
    )
    .code(OK);
    run_in(&s.0, &["diff", "tiny.gat", "other.gat"])
        .code(DIFF_BASE + 8)
        .says(&["[structural]", "workload: tiny -> other", "structural"])
        .never_says(&["[route]", "[numeric]", "[identity]", "[policy]"]);
}

// ------------------------------------------------------------------- audit

#[test]
fn audit_on_the_cpu_passes_every_contract() {
    let s = Scratch::new("audit");
    let r = run_in(&s.0, &["audit", "--backend", "cpu", "--no-progress"]);
    r.code(OK).says(&["backend cpu", "verdict: PASS"]);
    let rows: Vec<Vec<&str>> = r
        .stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    // The verdict is the first column, the contract the second.
    let has = |contract: &str, verdict: &str| {
        rows.iter()
            .any(|cells| cells.first() == Some(&verdict) && cells.get(1) == Some(&contract))
    };
    for contract in [
        "run-to-run",
        "eager-vs-replay",
        "cpu-reference",
        "batch-invariance",
        "nondeterminism-detected",
        "policy-refuses-control",
        "mutation-refusal",
    ] {
        assert!(has(contract, "PASS"), "no PASS row for {contract}{r}");
    }
    assert!(
        !rows.iter().any(|cells| cells.first() == Some(&"FAIL")),
        "a FAIL row{r}"
    );
    // One summary line per workload above the table.
    assert!(r.stdout.contains("  m-sweep: ") && r.stdout.contains(" GEMM cases pass, 0 fail"));
    assert!(
        r.stdout.lines().any(|l| l.starts_with("INFO")
            && l.contains("batch-invariance")
            && l.contains("NOT batch invariant")),
        "no INFO row saying NOT batch invariant{r}"
    );
}

/// Where stderr is not a terminal (a CI log), progress is one line per
/// finished stage, numbered of the stage count, timed, with an estimate of
/// the time left; `--no-progress` and `-q` drop it.
#[test]
fn progress_in_a_log_is_one_line_per_stage() {
    let s = Scratch::new("progress-lines");
    s.write("tiny.toml", TINY);
    let r = run_in(
        &s.0,
        &[
            "audit",
            "--backend",
            "cpu",
            "--workload",
            "tiny.toml",
            "--runs",
            "2",
        ],
    );
    r.code(OK);
    let lines: Vec<&str> = r.stderr.lines().filter(|l| l.contains(" done: ")).collect();
    // Record + replay, one rerun, the CPU reference, the control and the
    // mutation self-check: the announced count is the count run.
    assert_eq!(lines.len(), 5, "{r}");
    for (i, l) in lines.iter().enumerate() {
        assert!(
            l.starts_with(&format!("gemm-audit: stage {}/5 done: ", i + 1)),
            "{r}"
        );
    }
    assert!(
        lines[0].starts_with("gemm-audit: stage 1/5 done: tiny: record + replay (3 launches) in "),
        "{r}"
    );
    // Every line but the last says about how long is left.
    assert!(
        lines[..4]
            .iter()
            .all(|l| l.contains(" s elapsed, about ") && l.ends_with(" s left")),
        "{r}"
    );
    assert!(lines[4].ends_with(" s elapsed"), "{r}");
    // -q keeps a log's progress lines (a CI job is never silent for
    // minutes); --no-progress drops them.
    for (flag, lines) in [("--no-progress", 0), ("-q", 5)] {
        let r = run_in(
            &s.0,
            &[
                "audit",
                "--backend",
                "cpu",
                "--workload",
                "tiny.toml",
                "--runs",
                "2",
                flag,
            ],
        );
        r.code(OK);
        assert_eq!(r.stderr.matches(" done: ").count(), lines, "{flag}: {r}");
    }
}

#[cfg(not(feature = "cuda"))]
#[test]
fn cuda_backend_without_cuda_support_exits_4() {
    let s = Scratch::new("cuda");
    run_in(&s.0, &["audit", "--backend", "cuda", "--no-progress"])
        .code(BACKEND)
        .says(&["built without CUDA support"]);
    s.write("tiny.toml", TINY);
    run_in(
        &s.0,
        &["record", "tiny.toml", "-o", "t.gat", "--backend", "cuda"],
    )
    .code(BACKEND)
    .says(&["built without CUDA support"]);
    assert!(!s.path("t.gat").exists());
    // `auto` falls back to the CPU; a CPU-only build says why only with -v
    // (nobody asked for CUDA), and -q says nothing but results.
    let quiet = run_in(&s.0, &["record", "tiny.toml", "-o", "t.gat"]);
    quiet.code(OK).says(&["recorded tiny"]);
    assert!(!quiet.stderr.contains("CUDA"), "{quiet}");
    run_in(
        &s.0,
        &["record", "tiny.toml", "-o", "t.gat", "--force", "-v"],
    )
    .code(OK)
    .says(&["built without CUDA support", "CPU", "recorded tiny"]);
    std::fs::create_dir_all(s.path(&g_cpu(""))).unwrap();
    std::fs::copy(s.path("t.gat"), s.path(&g_cpu("tiny.gat"))).unwrap();
    run_in(&s.0, &["check", "t.gat", "--golden-dir", "g"])
        .code(OK)
        .says(&["gemm-audit: golden", "check: PASS"]);
    let q = run_in(&s.0, &["check", "t.gat", "--golden-dir", "g", "-q"]);
    q.code(OK).says(&["check: PASS"]);
    assert!(!q.stderr.contains("gemm-audit: golden"), "{q}");
    run_in(&s.0, &["check", "t.gat", "-q", "-v"]).code(USAGE);
    run_in(&s.0, &["check", "t.gat", "--backend", "cuda"])
        .code(BACKEND)
        .says(&["built without CUDA support"]);
    // Filling a kernel cache needs NVRTC through the CUDA backend too.
    run_in(&s.0, &["compile-kernels"])
        .code(BACKEND)
        .says(&["built without CUDA support"]);
}

/// A closed stdout (`gemm-audit diff a b | head`) stops the output quietly
/// (no panic message) but not the verdict: the exit code is the one the
/// command returns with its reader attached.
#[test]
fn a_closed_stdout_pipe_keeps_the_exit_code() {
    use std::process::{Command, Stdio};
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for args in [
        vec![
            "diff",
            "traces/cpu-x86_64/transformer-block.gat",
            "traces/cpu-x86_64/m-sweep.gat",
        ],
        vec!["show", "traces/cpu-x86_64/m-sweep.gat", "--format", "json"],
        vec!["check", "traces/cpu-x86_64/m-sweep.gat", "--backend", "cpu"],
    ] {
        let attached = Command::new(BIN)
            .args(&args)
            .current_dir(root)
            .output()
            .unwrap();
        if args[0] == "diff" {
            assert!(
                attached.status.code().unwrap() >= 64,
                "the diff is a finding"
            );
        }
        // A pipe whose read end is closed before the child starts, so every
        // write the child makes meets a closed pipe (no race with its output).
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let child = Command::new(BIN)
            .args(&args)
            .current_dir(root)
            .stdout(writer)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(
            out.status.code(),
            attached.status.code(),
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains("writing to stdout"), "{args:?}: {stderr}");
    }
}

/// `check --allow` accepts a golden that differs only in allowed classes
/// (a driver upgrade is an identity difference) and nothing else.
#[test]
// Over 100 lines: one scenario, asserted step by step in the order a user meets it.
fn check_allow_accepts_only_the_allowed_classes() {
    let s = Scratch::new("check-allow");
    let trace = record_tiny(&s);
    // The same recording, as if made under another driver.
    let mut golden = read(&trace);
    golden.context.device.driver.push_str(".1");
    for r in &mut golden.routes {
        r.device.driver.push_str(".1");
    }
    golden.launch_set = build_resolved_gemm_launch_set(&golden.routes).unwrap();
    golden.write(&s.path("golden.gat"), false).unwrap();

    run_in(
        &s.0,
        &[
            "check",
            "tiny.gat",
            "--golden",
            "golden.gat",
            "--backend",
            "cpu",
        ],
    )
    .code(FINDING)
    .says(&["device.driver", "check: FAIL"]);
    run_in(
        &s.0,
        &[
            "check",
            "tiny.gat",
            "--golden",
            "golden.gat",
            "--allow",
            "route,numeric",
            "--backend",
            "cpu",
        ],
    )
    .code(FINDING)
    .says(&["check: FAIL"]);
    run_in(
        &s.0,
        &[
            "check",
            "tiny.gat",
            "--golden",
            "golden.gat",
            "--allow",
            "identity",
            "--replay",
            "--backend",
            "cpu",
        ],
    )
    .code(OK)
    .says(&[
        "golden       ok",
        "replay       3/3",
        "check: PASS",
        "allowed differences (identity)",
    ]);
    // --allow needs a golden to compare with.
    run_in(&s.0, &["check", "tiny.gat", "--allow", "identity"]).code(USAGE);

    // Field-level: "a driver upgrade only" passes the driver and nothing
    // else; the same allowance does not pass a rebuilt kernel too.
    let driver_only = |extra: &[&str]| {
        let mut args = vec![
            "check",
            "tiny.gat",
            "--golden",
            "golden.gat",
            "--backend",
            "cpu",
        ];
        args.extend_from_slice(extra);
        run_in(&s.0, &args)
    };
    driver_only(&["--allow", "device.driver"])
        .code(OK)
        .says(&["check: PASS"]);
    let mut rebuilt = read(&s.path("golden.gat"));
    rebuilt.routes[0].kernel_symbol.push_str("_v2");
    rebuilt.launch_set = build_resolved_gemm_launch_set(&rebuilt.routes).unwrap();
    rebuilt.write(&s.path("golden.gat"), true).unwrap();
    driver_only(&["--allow", "device.driver"]).code(FINDING);
    driver_only(&["--allow", "device.driver,kernel_symbol"]).code(OK);
    run_in(
        &s.0,
        &["diff", "golden.gat", "tiny.gat", "--allow", "device.driver"],
    )
    .code(DIFF_BASE + 2)
    .says(&["kernel_symbol"]);
    run_in(
        &s.0,
        &[
            "diff",
            "golden.gat",
            "tiny.gat",
            "--allow",
            "device.*,kernel_symbol",
        ],
    )
    .code(OK);
    // An allowance that names no field a difference can have is a usage error.
    run_in(
        &s.0,
        &["diff", "golden.gat", "tiny.gat", "--allow", "devcie.driver"],
    )
    .code(USAGE)
    .says(&["devcie.driver", "neither a difference class"]);
}

/// A checked-in waiver file passes what it names while it applies; an
/// expired waiver is said and not applied; a bad file is exit 3 before
/// any work.
#[test]
fn waiver_files_allow_with_a_reason_until_they_expire() {
    let s = Scratch::new("waivers");
    record_tiny(&s);
    let mut golden = read(&s.path("tiny.gat"));
    golden.context.device.driver.push_str(".1");
    for r in &mut golden.routes {
        r.device.driver.push_str(".1");
    }
    golden.launch_set = build_resolved_gemm_launch_set(&golden.routes).unwrap();
    golden.write(&s.path("golden.gat"), false).unwrap();
    let check = |file: &str| {
        run_in(
            &s.0,
            &[
                "check",
                "tiny.gat",
                "--golden",
                "golden.gat",
                "--backend",
                "cpu",
                "--waivers",
                file,
            ],
        )
    };
    s.write(
        "ok.toml",
        "[[waiver]]\nfield = \"device.driver\"\nreason = \"driver rollout\"\nexpires = \"2999-12-31\"\n",
    );
    check("ok.toml").code(OK).says(&["check: PASS"]);
    s.write(
        "old.toml",
        "[[waiver]]\nfield = \"device.driver\"\nreason = \"driver rollout\"\nexpires = \"2000-01-01\"\n",
    );
    check("old.toml")
        .code(FINDING)
        .says(&["waiver for device.driver expired on 2000-01-01 (driver rollout): not applied"]);
    s.write("bad.toml", "[[waiver]]\nfield = \"device.driver\"\n");
    check("bad.toml").code(3).says(&["bad.toml"]);
    s.write(
        "bad.json",
        "{\"waiver\": [{\"field\": \"device.driver\", \"reason\": \"\"}]}",
    );
    run_in(
        &s.0,
        &["diff", "golden.gat", "tiny.gat", "--waivers", "bad.json"],
    )
    .code(3)
    .says(&["needs a reason"]);
    run_in(
        &s.0,
        &["diff", "golden.gat", "tiny.gat", "--waivers", "ok.toml"],
    )
    .code(OK);
}

/// `audit` on the CPU against the goldens in `g`, with `extra` arguments.
fn audit_cpu(s: &Scratch, extra: &[&str]) -> Run {
    let mut args = vec![
        "audit",
        "--backend",
        "cpu",
        "--runs",
        "2",
        "--no-progress",
        "--golden-dir",
        "g",
    ];
    args.extend_from_slice(extra);
    run_in(&s.0, &args)
}

/// [`audit_cpu`] of the tiny workload only.
fn audit_tiny(s: &Scratch, extra: &[&str]) -> Run {
    audit_cpu(s, &[&["--workload", "tiny.toml"], extra].concat())
}

/// A golden of another device class is never used for this node: with
/// only another class's golden present the audit fails naming it, and
/// the same trace relabelled as another class, put where this node's
/// golden goes, fails on the device identity.
#[test]
fn a_golden_of_another_device_class_is_never_used() {
    let s = Scratch::new("audit-other-class");
    let tiny = record_tiny(&s);
    let mut other = read(&tiny);
    other.context.device.class = "NVIDIA H100 80GB HBM3".into();
    std::fs::create_dir_all(s.path("g/nvidia-h100-80gb-hbm3")).unwrap();
    other
        .write(&s.path("g/nvidia-h100-80gb-hbm3/tiny.gat"), false)
        .unwrap();
    let audit = || audit_tiny(&s, &["--check"]);
    audit().code(FINDING).says(&[
        &format!("no golden at {}", g_cpu("tiny.gat")),
        "present: nvidia-h100-80gb-hbm3/tiny.gat",
    ]);
    std::fs::create_dir_all(s.path(&g_cpu(""))).unwrap();
    other.write(&s.path(&g_cpu("tiny.gat")), false).unwrap();
    audit()
        .code(FINDING)
        .says(&["NVIDIA H100 80GB HBM3"])
        .never_says(&["no golden at"]);
    // The node's own golden passes.
    std::fs::copy(&tiny, s.path(&g_cpu("tiny.gat"))).unwrap();
    audit().code(OK);
}

/// `audit --check` judges against the goldens but writes nothing into the
/// golden folder: no candidate for a missing golden, no stale one removed.
#[test]
fn audit_check_writes_nothing_into_the_golden_folder() {
    let s = Scratch::new("audit-check");
    s.write("tiny.toml", TINY);
    std::fs::create_dir_all(s.path("g")).unwrap();
    let audit = || audit_tiny(&s, &["--check"]);
    audit()
        .code(FINDING)
        .says(&[
            "no golden at",
            "candidate not kept (--check writes nothing into the golden folder)",
        ])
        .never_says(&["gemm-audit accept"]);
    assert!(
        !s.path(&g_cpu("")).exists(),
        "--check wrote into the golden folder"
    );
    record_tiny(&s);
    std::fs::create_dir_all(s.path(&g_cpu(""))).unwrap();
    std::fs::copy(s.path("tiny.gat"), s.path(&g_cpu("tiny.gat"))).unwrap();
    std::fs::copy(s.path("tiny.gat"), s.path(&g_cpu("tiny.gat.pending"))).unwrap();
    audit().code(OK).never_says(&["stale candidate"]);
    assert!(
        s.path(&g_cpu("tiny.gat.pending")).exists(),
        "--check removed a candidate"
    );
    run_in(&s.0, &["audit", "--check"]).code(USAGE);
}

/// `audit --allow` passes a golden that differs only in what it allows, and
/// keeps no candidate for it.
#[test]
fn audit_allow_passes_only_the_allowed_fields() {
    let s = Scratch::new("audit-allow");
    record_tiny(&s);
    std::fs::create_dir_all(s.path(&g_cpu(""))).unwrap();
    let mut golden = read(&s.path("tiny.gat"));
    golden.context.device.driver.push_str(".1");
    for r in &mut golden.routes {
        r.device.driver.push_str(".1");
    }
    golden.launch_set = build_resolved_gemm_launch_set(&golden.routes).unwrap();
    golden.write(&s.path(&g_cpu("tiny.gat")), false).unwrap();
    let audit = |extra: &[&str]| audit_tiny(&s, extra);
    audit(&[]).code(FINDING);
    std::fs::remove_file(s.path(&g_cpu("tiny.gat.pending"))).unwrap();
    audit(&["--allow", "device.driver"])
        .code(OK)
        .says(&["only in allowed differences (device.driver)"]);
    assert!(!s.path(&g_cpu("tiny.gat.pending")).exists());
    run_in(&s.0, &["audit", "--allow", "device.driver"]).code(USAGE);
}

/// `check --golden` judges outputs as `diff` does: a trace whose routes
/// match the golden but whose outputs drifted fails, with or without
/// `--replay` (which only reproduces the trace's own bits), and passes only
/// when numeric differences are allowed.
#[test]
fn check_against_a_golden_compares_output_fingerprints() {
    let s = Scratch::new("check-numeric");
    record_tiny(&s);
    let mut drifted = read(&s.path("tiny.gat"));
    drifted.fingerprints[0].sha256.0[0] ^= 1;
    drifted.write(&s.path("drifted.gat"), false).unwrap();
    let gate = |extra: &[&str]| {
        let mut args = vec![
            "check",
            "drifted.gat",
            "--golden",
            "tiny.gat",
            "--backend",
            "cpu",
        ];
        args.extend_from_slice(extra);
        run_in(&s.0, &args)
    };
    gate(&[])
        .code(FINDING)
        .says(&["output_fingerprint", "check: FAIL"]);
    gate(&["--allow", "identity,route"])
        .code(FINDING)
        .says(&["check: FAIL"]);
    gate(&["--allow", "numeric"]).code(OK);
    // With --golden-dir the same: the golden is found by workload and device.
    let dir = s.path("goldens");
    run_in(
        &s.0,
        &[
            "bless",
            "tiny.toml",
            "--golden-dir",
            "goldens",
            "--backend",
            "cpu",
        ],
    )
    .code(OK);
    assert!(dir.exists());
    run_in(
        &s.0,
        &[
            "check",
            "drifted.gat",
            "--golden-dir",
            "goldens",
            "--backend",
            "cpu",
        ],
    )
    .code(FINDING)
    .says(&["output_fingerprint"]);
}

/// A trace whose names are huge or hostile renders without a panic, on
/// lines that hold no raw control or bidi characters. The writer refuses a
/// name no reader accepts, so the file is sealed by hand.
#[test]
fn show_of_huge_and_hostile_names_never_panics() {
    let s = Scratch::new("show-huge");
    record_tiny(&s);
    let mut t = read(&s.path("tiny.gat"));
    t.routes[0].gemm = "g".repeat(70_000);
    t.routes[1].gemm = "a\u{202E}b\u{2028}c\u{1b}[2J".into();
    t.launch_set = build_resolved_gemm_launch_set(&t.routes).unwrap();
    let refused = t.write(&s.path("huge.gat"), false).unwrap_err().to_string();
    assert!(refused.contains("string length"), "{refused}");
    assert!(!s.path("huge.gat").exists(), "nothing is written");
    let payload = gemm_audit::trace::codec::encode_payload(&t).unwrap();
    std::fs::write(s.path("huge.gat"), gemm_audit::trace::codec::seal(&payload)).unwrap();
    let r = run_in(&s.0, &["show", "huge.gat"]);
    assert!(r.code == OK || r.code == 3, "{r}");
    assert!(
        !r.all()
            .chars()
            .any(|c| matches!(c, '\u{202E}' | '\u{2028}' | '\u{1b}')),
        "{r}"
    );
}

/// Each pending file is judged on its own: one that is not the candidate
/// of the golden its name says (another workload's trace, a truncated file,
/// a link) is an error for that file (exit 3) and is never installed; the
/// good candidates are still accepted; `reject` removes the bad files (a
/// link itself, not its target); naming a workload with no candidate is an
/// error, not a pass.
#[test]
fn hostile_pending_files_are_refused_one_by_one() {
    let s = Scratch::new("pending-hostile");
    record_tiny(&s);
    let tiny = read(&s.path("tiny.gat"));
    std::fs::create_dir_all(s.path(&g_cpu(""))).unwrap();
    tiny.write(&s.path(&g_cpu("tiny.gat.pending")), false)
        .unwrap();
    // Another workload's golden name holding tiny's trace.
    tiny.write(&s.path(&g_cpu("m-sweep.gat.pending")), false)
        .unwrap();
    // A truncated candidate.
    let bytes = std::fs::read(s.path("tiny.gat")).unwrap();
    std::fs::write(
        s.path(&g_cpu("short.gat.pending")),
        &bytes[..bytes.len() / 2],
    )
    .unwrap();
    // A link to a trace elsewhere.
    #[cfg(unix)]
    std::os::unix::fs::symlink(s.path("tiny.gat"), s.path(&g_cpu("linked.gat.pending"))).unwrap();

    run_in(&s.0, &["review", "nosuch", "--golden-dir", "g"])
        .code(3)
        .says(&[
            "no pending candidate for workload \"nosuch\"",
            "pending: tiny",
        ]);
    run_in(&s.0, &["review", "--golden-dir", "g"])
        .code(3)
        .says(&[
            &format!("{} -> {}", g_cpu("tiny.gat.pending"), g_cpu("tiny.gat")),
            "m-sweep.gat.pending",
            "whose golden is",
            "short.gat.pending",
        ]);
    run_in(&s.0, &["accept", "--golden-dir", "g"])
        .code(3)
        .says(&[&format!("accepted {}", g_cpu("tiny.gat.pending"))]);
    assert!(s.path(&g_cpu("tiny.gat")).is_file());
    assert!(
        !s.path(&g_cpu("m-sweep.gat")).exists(),
        "a mislabelled candidate was installed"
    );
    #[cfg(unix)]
    assert!(
        !s.path(&g_cpu("linked.gat")).exists(),
        "a linked candidate was installed"
    );
    run_in(&s.0, &["reject", "--golden-dir", "g"])
        .code(OK)
        .says(&["removed unusable"]);
    assert!(
        std::fs::read_dir(s.path(&g_cpu(""))).unwrap().all(|e| !e
            .unwrap()
            .path()
            .to_string_lossy()
            .ends_with(".pending"))
    );
    assert!(s.path("tiny.gat").is_file(), "reject followed a link");
}

/// JSON differences carry typed values: strings unquoted, numbers as
/// numbers, dimensions as arrays, a compute capability as `"9.0"`.
#[test]
fn json_differences_carry_typed_values() {
    let s = Scratch::new("typed-json");
    record_tiny(&s);
    let mut t = read(&s.path("tiny.gat"));
    t.routes[0].shape.m += 1;
    t.routes[0].launch.grid[0] += 1;
    t.routes[1].compilation_target = "elsewhere".into();
    t.context.device.compute_capability = Some([9, 0]);
    t.launch_set = build_resolved_gemm_launch_set(&t.routes).unwrap();
    t.write(&s.path("changed.gat"), false).unwrap();
    let r = run_in(
        &s.0,
        &["diff", "tiny.gat", "changed.gat", "--format", "json"],
    );
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let find = |field: &str| {
        v["differences"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["field"] == field)
            .unwrap_or_else(|| panic!("no {field} difference: {v}"))
            .clone()
    };
    let m = find("shape.m");
    assert!(
        m["expected"].is_u64() && m["found"].as_u64() == Some(m["expected"].as_u64().unwrap() + 1),
        "{m}"
    );
    let grid = find("launch.grid");
    assert!(grid["found"].is_array(), "{grid}");
    let target = find("compilation_target");
    assert_eq!(target["found"], "elsewhere", "{target}");
    // Counts and indices are numbers too.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let r2 = run_in(
        root,
        &[
            "diff",
            "traces/cpu-x86_64/transformer-block.gat",
            "traces/cpu-x86_64/m-sweep.gat",
            "--format",
            "json",
        ],
    );
    let v2: serde_json::Value = serde_json::from_str(&r2.stdout).unwrap();
    let count = v2["differences"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["field"] == "launch_count")
        .expect("a launch_count difference")
        .clone();
    assert_eq!(
        (count["expected"].as_u64(), count["found"].as_u64()),
        (Some(12), Some(32)),
        "{count}"
    );
    let cc = find("context.device.compute_capability");
    assert_eq!(
        (cc["expected"].clone(), cc["found"].clone()),
        (serde_json::Value::Null, "9.0".into())
    );
    assert!(
        !r.stdout.contains("\\\""),
        "a Debug-quoted value: {}",
        r.stdout
    );
}

/// Makes a FIFO and a character device (the same device as /dev/zero) in
/// the scratch directory. `None` where that is not possible (not root); in
/// CI, which runs as root, it must be.
#[cfg(unix)]
fn special_files(s: &Scratch) -> Option<(PathBuf, PathBuf)> {
    let fifo = s.path("pipe");
    let zero = s.path("zero");
    let made = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|x| x.success())
        && Command::new("mknod")
            .args([zero.to_str().unwrap(), "c", "1", "5"])
            .status()
            .is_ok_and(|x| x.success());
    if !made {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must be able to mknod and mkfifo (root)"
        );
        eprintln!("mkfifo/mknod unavailable (not root?): skipping the special-file cases");
        return None;
    }
    Some((fifo, zero))
}

#[cfg(unix)]
fn is_char_device(p: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_char_device())
}

/// Devices and FIFOs are never read (no endless read of a zero device, no
/// FIFO that blocks forever) and never replaced, `--force` or not.
#[cfg(unix)]
#[test]
fn devices_and_fifos_are_refused_as_inputs_and_outputs() {
    let s = Scratch::new("special");
    let Some((fifo, zero)) = special_files(&s) else {
        return;
    };
    let (fifo, zero) = (fifo.to_str().unwrap(), zero.to_str().unwrap());
    run_in(&s.0, &["show", zero])
        .code(BAD_INPUT)
        .says(&["character device"]);
    run_in(&s.0, &["show", fifo])
        .code(BAD_INPUT)
        .says(&["FIFO"]);
    run_in(&s.0, &["check", fifo, "--backend", "cpu"])
        .code(BAD_INPUT)
        .says(&["FIFO"]);
    run_in(&s.0, &["diff", zero, fifo])
        .code(BAD_INPUT)
        .says(&["not a regular file"]);
    run_in(&s.0, &["record", fifo, "-o", "x.gat", "--backend", "cpu"])
        .code(BAD_INPUT)
        .says(&["FIFO"]);
    s.write("tiny.toml", TINY);
    run_in(
        &s.0,
        &[
            "record",
            "tiny.toml",
            "-o",
            zero,
            "--force",
            "--backend",
            "cpu",
        ],
    )
    .code(BAD_INPUT)
    .says(&["character device", "refusing"]);
    assert!(is_char_device(Path::new(zero)), "the device was replaced");
    run_in(
        &s.0,
        &[
            "audit",
            "--backend",
            "cpu",
            "--workload",
            "tiny.toml",
            "--runs",
            "2",
            "--junit",
            zero,
            "-q",
        ],
    )
    .code(BAD_INPUT)
    .says(&["character device"]);
    assert!(is_char_device(Path::new(zero)), "the device was replaced");
}

/// Names are bounded and free of control characters: a 65,536-byte GEMM
/// name once panicked the audit table's formatter.
#[test]
fn huge_and_control_character_names_are_refused_clearly() {
    let s = Scratch::new("names");
    let long = "g".repeat(65_536);
    s.write(
        "long.toml",
        format!("name = \"long\"\n[[gemm]]\nname = \"{long}\"\nop = \"nn\"\ndtype = \"f32\"\nm = 1\nk = 1\nn = 1\n"),
    );
    run_in(
        &s.0,
        &["audit", "--backend", "cpu", "--workload", "long.toml", "-q"],
    )
    .code(BAD_INPUT)
    .says(&["GEMM name", "over the limit of 128"]);
    s.write(
        "ctl.toml",
        "name = \"ctl\"\n[[gemm]]\nname = \"a\\u001b[31mred\"\nop = \"nn\"\ndtype = \"f32\"\nm = 1\nk = 1\nn = 1\n",
    );
    run_in(
        &s.0,
        &["record", "ctl.toml", "-o", "c.gat", "--backend", "cpu"],
    )
    .code(BAD_INPUT)
    .says(&["control characters"]);
}

/// Golden drift, and a missing golden, are findings in every artifact: the
/// table, the JSON, report.md, report.html, the JUnit file and the exit
/// code agree, and a missing golden still writes every output and says how
/// to create it.
#[test]
fn golden_drift_and_missing_goldens_fail_in_every_artifact() {
    let s = Scratch::new("drift");
    s.write("tiny.toml", TINY);
    let audit = |extra: &[&str]| {
        let mut args = vec![
            "audit",
            "--backend",
            "cpu",
            "--workload",
            "tiny.toml",
            "--runs",
            "2",
            "-q",
            "--golden-dir",
            "g",
            "--report",
            "r",
            "--junit",
            "j.xml",
        ];
        args.extend_from_slice(extra);
        run_in(&s.0, &args)
    };
    let junit_failures = || {
        let x = std::fs::read_to_string(s.path("j.xml")).unwrap();
        x.matches("<failure").count()
    };

    // Missing: a finding, every output written, a candidate kept and the
    // commands that settle it named (with -q too).
    audit(&[]).code(FINDING).says(&[
        "golden-drift",
        "FAIL",
        &format!("candidate kept as {}", g_cpu("tiny.gat.pending")),
        "gemm-audit accept --golden-dir g",
    ]);
    assert!(s.path(&g_cpu("tiny.gat.pending")).is_file());
    for f in ["r/report.md", "r/report.html", "j.xml"] {
        assert!(s.path(f).is_file(), "{f} not written");
    }
    assert!(junit_failures() >= 1);
    assert!(
        std::fs::read_to_string(s.path("r/report.md"))
            .unwrap()
            .contains("golden-drift")
    );

    // Accepting the candidate creates the golden; the next run passes.
    run_in(&s.0, &["accept", "--golden-dir", "g"])
        .code(OK)
        .says(&["accepted"]);
    assert!(s.path(&g_cpu("tiny.gat")).is_file() && !s.path(&g_cpu("tiny.gat.pending")).exists());
    // Identical: passes everywhere, and a stale candidate is settled.
    std::fs::copy(
        s.path(&g_cpu("tiny.gat")),
        s.path(&g_cpu("tiny.gat.pending")),
    )
    .unwrap();
    audit(&[])
        .code(OK)
        .says(&["golden-drift", "identical to", "stale candidate"]);
    assert!(!s.path(&g_cpu("tiny.gat.pending")).exists());
    assert_eq!(junit_failures(), 0);

    // Drifted: a route field changed (and re-digested) in the golden.
    let mut g = read(&s.path(&g_cpu("tiny.gat")));
    g.routes[0].tile.m += 1;
    g.launch_set = build_resolved_gemm_launch_set(&g.routes).unwrap();
    g.write(&s.path(&g_cpu("tiny.gat")), true).unwrap();
    let json = audit(&["--format", "json"]);
    json.code(FINDING);
    let v: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    let row = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["contract"] == "golden-drift")
        .expect("a golden-drift row");
    assert_eq!(row["verdict"], "fail", "{row}");
    assert!(row["detail"].as_str().unwrap().contains("route"), "{row}");
    // The differences themselves, typed, for machines.
    let drift = &v["drift"][0];
    assert_eq!(drift["workload"], "tiny", "{v}");
    let d = drift["differences"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["field"] == "tile.m")
        .expect("the tile.m difference");
    assert!(d["expected"].is_u64() && d["found"].is_u64(), "{d}");
    assert!(v["environment"]["backend"] == "cpu" && v["timings"].is_array());
    assert!(junit_failures() >= 1);
    let md = std::fs::read_to_string(s.path("r/report.md")).unwrap();
    assert!(md.contains("golden-drift") && md.contains("FAIL"), "{md}");
    let html = std::fs::read_to_string(s.path("r/report.html")).unwrap();
    assert!(html.contains("golden-drift"));
}

/// A route relabelled to a symbol that serves the same problem but
/// declares another output ownership (scalar FMA per element, not per
/// tile) is refused by replay validation alone, before launch, as a
/// finding (exit 1), not a backend failure.
#[test]
fn a_relabelled_kernel_on_check_replay_is_a_finding() {
    let s = Scratch::new("relabel");
    let trace = record_tiny(&s);
    let mut t = read(&trace);
    let i = t
        .routes
        .iter()
        .position(|r| r.kernel_symbol.starts_with("cpu_tiled32x32_"))
        .expect("tiny has a tiled route");
    t.routes[i].kernel_symbol = t.routes[i]
        .kernel_symbol
        .replace("tiled32x32", "scalar_fma");
    t.launch_set = build_resolved_gemm_launch_set(&t.routes).unwrap();
    t.write(&s.path("relabelled.gat"), false).unwrap();
    run_in(
        &s.0,
        &["check", "relabelled.gat", "--replay", "--backend", "cpu"],
    )
    .code(FINDING)
    .says(&[
        "validation   refused at replay validation: route",
        "output_ownership expected one-owner-per-element, found one-owner-per-tile",
        "replay       skipped (refused before launch)",
        "check: FAIL",
    ]);
}

/// JSON documents carry the schema and tool version and the overall
/// verdict, keys in snake_case and values in kebab-case, and never Rust's
/// `{"Ok": null}`.
#[test]
fn json_documents_have_an_envelope_and_one_casing() {
    let s = Scratch::new("json");
    record_tiny(&s);
    let ok = run_in(
        &s.0,
        &["check", "tiny.gat", "--format", "json", "--backend", "cpu"],
    );
    ok.code(OK);
    assert!(
        !ok.stdout.contains("\"Ok\"") && !ok.stdout.contains("\"Err\""),
        "{ok}"
    );
    let v: serde_json::Value = serde_json::from_str(&ok.stdout).unwrap();
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["tool_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(
        (v["kind"].as_str(), v["verdict"].as_str()),
        (Some("check"), Some("pass"))
    );
    assert_eq!(v["plan"]["status"], "ok");
    assert_eq!(v["validation"]["status"], "ok");

    let mut t = read(&s.path("tiny.gat"));
    t.routes[0].tile.m += 1; // not re-digested: refused at plan construction
    t.write(&s.path("bad.gat"), false).unwrap();
    let bad = run_in(
        &s.0,
        &["check", "bad.gat", "--format", "json", "--backend", "cpu"],
    );
    bad.code(FINDING);
    let v: serde_json::Value = serde_json::from_str(&bad.stdout).unwrap();
    assert_eq!(v["verdict"], "fail");
    assert_eq!(v["plan"]["status"], "refused");
    assert_eq!(v["plan"]["refusal"]["stage"], "plan-construction");

    let d = run_in(&s.0, &["diff", "tiny.gat", "bad.gat", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&d.stdout).unwrap();
    assert_eq!(
        (v["kind"].as_str(), v["verdict"].as_str()),
        (Some("diff"), Some("fail"))
    );
    assert!(v["differences"].as_array().is_some_and(|a| !a.is_empty()));
}

/// Strings from a trace file reach the terminal escaped: an escape
/// sequence in a GEMM name or kernel symbol is shown, never sent raw.
#[test]
fn terminal_output_never_carries_raw_control_characters() {
    let s = Scratch::new("escapes");
    record_tiny(&s);
    let mut t = read(&s.path("tiny.gat"));
    t.routes[0].gemm = "evil\u{1b}[2J\u{7}".into();
    t.launch_set = build_resolved_gemm_launch_set(&t.routes).unwrap();
    t.write(&s.path("evil.gat"), false).unwrap();
    for args in [
        vec!["show", "evil.gat"],
        vec!["diff", "tiny.gat", "evil.gat"],
        vec![
            "check",
            "evil.gat",
            "--golden",
            "tiny.gat",
            "--backend",
            "cpu",
        ],
    ] {
        let r = run_in(&s.0, &args);
        let all = format!("{}{}", r.stdout, r.stderr);
        assert!(
            !all.contains('\u{1b}') && !all.contains('\u{7}'),
            "{args:?}: {r}"
        );
    }
    let r = run_in(&s.0, &["show", "evil.gat"]);
    r.says(&["evil\\u{1b}[2J\\u{7}"]);
}

/// Work over the compute or memory budget is refused before anything is
/// allocated or launched, naming the flag that raises the limit.
/// A CUDA-only workload on the CPU is refused for needing CUDA, before
/// its compute is weighed (vendor-sweep is over the CPU's default limit,
/// which would be the wrong reason), and nothing is written.
#[test]
fn a_cuda_only_workload_on_the_cpu_names_the_route_that_needs_cuda() {
    let s = Scratch::new("cuda-only-on-cpu");
    run_in(
        &s.0,
        &["record", "vendor-sweep", "--backend", "cpu", "-o", "v.gat"],
    )
    .code(BACKEND)
    .says(&["GEMM \"sgemm\": route cublas needs the CUDA backend"])
    .never_says(&["GFLOP"]);
    assert!(!s.path("v.gat").exists());
    run_in(
        &s.0,
        &["audit", "--backend", "cpu", "--workload", "batch-invariant"],
    )
    .code(BACKEND)
    .says(&["route cublaslt-invariant needs the CUDA backend"])
    .never_says(&["GFLOP"]);
}

#[test]
fn work_over_budget_is_refused_before_it_starts() {
    let s = Scratch::new("budget");
    s.write(
        "tall.toml",
        "name = \"tall\"\n[[gemm]]\nname = \"g\"\nop = \"nn\"\ndtype = \"f32\"\nm = 67108864\nk = 1\nn = 1\n",
    );
    run_in(
        &s.0,
        &["record", "tall.toml", "-o", "t.gat", "--backend", "cpu"],
    )
    .code(BAD_INPUT)
    .says(&[
        "workload tall needs about",
        "GiB of memory",
        "--max-memory-gib",
    ]);
    assert!(!s.path("t.gat").exists());
    run_in(
        &s.0,
        &[
            "audit",
            "--backend",
            "cpu",
            "--workload",
            "tall.toml",
            "--max-memory-gib",
            "1000",
            "--max-gflop",
            "0.000001",
        ],
    )
    .code(BAD_INPUT)
    .says(&["GFLOP", "--max-gflop"]);

    // Devices working at once add up their host memory: a limit one
    // device fits (tiny needs about 10 KB) refuses three.
    s.write("tiny.toml", TINY);
    let limit = ["--max-memory-gib", "0.00002"]; // about 21 KB
    let on = |devices: &[&str]| {
        run_in(
            &s.0,
            &[
                &["audit", "--backend", "cpu", "--workload", "tiny.toml"][..],
                &limit,
                devices,
            ]
            .concat(),
        )
    };
    on(&["--device", "0"]).code(OK);
    on(&["--device", "all", "--cpu-stand-ins", "3"])
        .code(BAD_INPUT)
        .says(&[
            "workload tiny on 3 devices at once needs about",
            "--max-memory-gib",
        ]);

    // A resealed trace asking for a 20000^3 replay.
    let trace = record_tiny(&s);
    let mut t = read(&trace);
    t.routes[0].shape = gemm_audit::route::GemmShape {
        m: 20_000,
        k: 20_000,
        n: 20_000,
    };
    t.launch_set = build_resolved_gemm_launch_set(&t.routes).unwrap();
    t.write(&s.path("cube.gat"), false).unwrap();
    run_in(&s.0, &["check", "cube.gat", "--replay", "--backend", "cpu"])
        .code(BAD_INPUT)
        .says(&["the replay of cube.gat needs", "GFLOP", "--max-gflop"]);
    // Without --replay nothing runs, so nothing is refused for cost.
    let r = run_in(&s.0, &["check", "cube.gat", "--backend", "cpu"]);
    assert!(!r.stderr.contains("--max-gflop"), "{r}");
}

/// Drift keeps the candidate beside the golden; `review` shows it,
/// `reject` drops it, `accept` makes it the golden; `bless --from` accepts a
/// trace recorded elsewhere under the same no-clobber rules.
#[test]
// Over 100 lines: one scenario, asserted step by step in the order a user meets it.
fn pending_candidates_review_accept_reject_and_bless_from() {
    let s = Scratch::new("pending");
    s.write("tiny.toml", TINY);
    std::fs::create_dir_all(s.path(&g_cpu(""))).unwrap();
    run_in(
        &s.0,
        &[
            "record",
            "tiny.toml",
            "-o",
            &g_cpu("tiny.gat"),
            "--backend",
            "cpu",
        ],
    )
    .code(OK);
    let fresh = read(&s.path(&g_cpu("tiny.gat")));
    let mut old = fresh.clone();
    old.routes[0].tile.m += 1;
    old.launch_set = build_resolved_gemm_launch_set(&old.routes).unwrap();
    old.write(&s.path(&g_cpu("tiny.gat")), true).unwrap();
    let audit = || {
        run_in(
            &s.0,
            &[
                "audit",
                "--backend",
                "cpu",
                "--workload",
                "tiny.toml",
                "--runs",
                "2",
                "-q",
                "--golden-dir",
                "g",
            ],
        )
    };
    audit()
        .code(FINDING)
        .says(&["candidate kept as", "tiny.gat.pending"]);
    let pending = s.path(&g_cpu("tiny.gat.pending"));
    assert_eq!(read(&pending), fresh);
    run_in(&s.0, &["review", "--golden-dir", "g"])
        .code(FINDING)
        .says(&["tile.m", "tiny.gat.pending"]);
    run_in(&s.0, &["reject", "--golden-dir", "g"])
        .code(OK)
        .says(&["rejected"]);
    assert!(!pending.exists());
    assert_eq!(
        read(&s.path(&g_cpu("tiny.gat"))),
        old,
        "reject kept the golden"
    );
    audit().code(FINDING);
    run_in(&s.0, &["accept", "tiny", "--golden-dir", "g"])
        .code(OK)
        .says(&["accepted"]);
    assert!(!pending.exists());
    assert_eq!(read(&s.path(&g_cpu("tiny.gat"))), fresh);
    audit().code(OK);
    run_in(&s.0, &["review", "--golden-dir", "g"])
        .code(OK)
        .says(&["no pending candidates"]);

    // bless --from: a trace recorded elsewhere becomes the golden.
    run_in(
        &s.0,
        &[
            "record",
            "tiny.toml",
            "-o",
            "elsewhere.gat",
            "--backend",
            "cpu",
        ],
    )
    .code(OK);
    run_in(
        &s.0,
        &["bless", "--from", "elsewhere.gat", "--golden-dir", "h"],
    )
    .code(OK)
    .says(&["blessed elsewhere.gat"]);
    assert!(s.path(&format!("h/{}/tiny.gat", cpu_key())).is_file());
    old.write(&s.path("other.gat"), false).unwrap();
    run_in(&s.0, &["bless", "--from", "other.gat", "--golden-dir", "h"])
        .code(BAD_INPUT)
        .says(&["not replacing", "--force"]);
    assert_eq!(read(&s.path(&format!("h/{}/tiny.gat", cpu_key()))), fresh);
    run_in(
        &s.0,
        &[
            "bless",
            "--from",
            "other.gat",
            "--golden-dir",
            "h",
            "--force",
        ],
    )
    .code(OK);
    assert_eq!(read(&s.path(&format!("h/{}/tiny.gat", cpu_key()))), old);
}

/// Verdicts are coloured only for a terminal (or when forced), never in a
/// pipe or with NO_COLOR.
#[test]
fn colour_only_when_asked_for_by_the_terminal_or_the_environment() {
    let s = Scratch::new("colour");
    s.write("tiny.toml", TINY);
    let run = |env: &[(&str, &str)]| {
        let mut c = Command::new(BIN);
        c.args([
            "audit",
            "--backend",
            "cpu",
            "--workload",
            "tiny.toml",
            "--runs",
            "2",
            "-q",
        ])
        .current_dir(&s.0)
        .env_remove("NO_COLOR")
        .env_remove("CLICOLOR_FORCE");
        for (k, v) in env {
            c.env(k, v);
        }
        let out = c.output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let piped = run(&[]);
    assert!(
        piped.contains("PASS") && !piped.contains('\u{1b}'),
        "{piped}"
    );
    let forced = run(&[("CLICOLOR_FORCE", "1")]);
    assert!(forced.contains("\u{1b}[32mPASS\u{1b}[0m"), "{forced}");
    let no_color = run(&[("NO_COLOR", "1")]);
    assert!(!no_color.contains('\u{1b}'), "{no_color}");
}

/// `compare` votes per launch across traces of one device class and names
/// the trace (device) that disagrees; JSON and JUnit say the same.
#[test]
fn compare_names_the_disagreeing_trace() {
    let s = Scratch::new("compare");
    let tiny = record_tiny(&s);
    std::fs::create_dir_all(s.path("fleet/host-b")).unwrap();
    // Plain copies of one file are one device: one vote, nothing compared.
    for name in ["copies/a.gat", "copies/b.gat"] {
        std::fs::create_dir_all(s.path("copies")).unwrap();
        std::fs::copy(&tiny, s.path(name)).unwrap();
    }
    run_in(&s.0, &["compare", "copies"]).code(FINDING).says(&[
        "warning: copies/b.gat is a copy of copies/a.gat",
        "2 traces, 1 voting: nothing to compare (every trace is of one device: add another device's, or pass --allow-single)",
        "compare: FAIL",
    ]);
    run_in(&s.0, &["compare", "copies", "--allow-single"])
        .code(OK)
        .says(&["(allowed)", "compare: PASS"]);
    // Three hosts: the same recording, each with its own device.
    for (name, uuid) in [
        ("fleet/a.gat", "a"),
        ("fleet/host-b/b.gat", "b"),
        ("fleet/c.gat", "c"),
    ] {
        let mut t = read(&tiny);
        t.volatile
            .insert("cuda.device.uuid".into(), format!("uuid-{uuid}"));
        t.write(&s.path(name), false).unwrap();
    }
    // A link back to the folder is not walked (no loop, no double count).
    #[cfg(unix)]
    std::os::unix::fs::symlink(".", s.path("fleet/self")).unwrap();
    run_in(&s.0, &["compare", "fleet", "fleet/a.gat"])
        .code(OK)
        .says(&[
            &format!("tiny on {}: 3 traces, agree", cpu_key()),
            "compare: PASS",
        ]);
    let mut b = read(&s.path("fleet/host-b/b.gat"));
    b.fingerprints[1].sha256.0[0] ^= 1;
    b.write(&s.path("fleet/host-b/b.gat"), true).unwrap();
    run_in(&s.0, &["compare", "fleet", "--junit", "compare.xml"])
        .code(FINDING)
        .says(&[
            "DISAGREE",
            "launch 1",
            "2/3 agree",
            "outlier fleet/host-b/b.gat",
            "compare: FAIL",
        ]);
    let x = std::fs::read_to_string(s.path("compare.xml")).unwrap();
    assert!(
        x.contains("failures=\"1\"") && x.contains("host-b/b.gat"),
        "{x}"
    );
    let j = run_in(
        &s.0,
        &[
            "compare",
            "fleet/a.gat",
            "fleet/c.gat",
            "fleet/host-b",
            "--format",
            "json",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&j.stdout).unwrap();
    assert_eq!(
        (v["kind"].as_str(), v["verdict"].as_str()),
        (Some("compare"), Some("fail"))
    );
    let outliers = &v["groups"][0]["launches"][1]["outliers"];
    assert_eq!(outliers.as_array().unwrap().len(), 1, "{v}");
}

// ---------------------------------------------------------------- devices

#[test]
fn device_ordinals_the_backend_lacks_are_clear_errors() {
    let s = Scratch::new("no-device");
    s.write("tiny.toml", TINY);
    // The CPU backend is one device: 5 is bad input (exit 3), no panic.
    for args in [
        &[
            "audit",
            "--backend",
            "cpu",
            "--device",
            "5",
            "--no-progress",
        ][..],
        &[
            "record",
            "tiny.toml",
            "-o",
            "t.gat",
            "--backend",
            "cpu",
            "--device",
            "5",
        ],
        &["bless", "tiny.toml", "--backend", "cpu", "--device", "5"],
    ] {
        run_in(&s.0, args)
            .code(BAD_INPUT)
            .says(&["backend cpu has no device 5", "available: 0"]);
    }
    assert!(!s.path("t.gat").exists());
    run_in(&s.0, &["audit", "--device", "first"])
        .code(USAGE)
        .says(&["expected a device ordinal (0, 1, ...) or `all`"]);
    // `--device 0` is today's behaviour.
    run_in(
        &s.0,
        &[
            "record",
            "tiny.toml",
            "-o",
            "t.gat",
            "--backend",
            "cpu",
            "--device",
            "0",
        ],
    )
    .code(OK)
    .says(&["recorded tiny (3 launches) on cpu -> t.gat"]);
}

#[test]
fn audit_of_every_device_is_one_json_document_and_names_the_faulty_device() {
    let s = Scratch::new("devices-audit");
    s.write("tiny.toml", TINY);
    // On the CPU, `all` is its one device: one document, no gpu-to-gpu rows.
    let one = run_in(
        &s.0,
        &[
            "audit",
            "--backend",
            "cpu",
            "--device",
            "all",
            "--workload",
            "tiny.toml",
            "--format",
            "json",
            "--no-progress",
        ],
    );
    one.code(OK);
    let v: serde_json::Value = serde_json::from_str(&one.stdout).expect("one JSON document");
    assert_eq!(v["kind"], "audit");
    assert_eq!(v["devices"].as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(v["devices"][0]["device"]["ordinal"], 0);
    assert_eq!(v["gpu_to_gpu"]["checks"].as_array().map(Vec::len), Some(0));
    // Three CPU stand-ins, device 1 with a planted fault.
    let args = [
        "audit",
        "--backend",
        "cpu",
        "--device",
        "all",
        "--cpu-stand-ins",
        "3",
        "--workload",
        "tiny.toml",
        "--no-progress",
        "--junit",
        "j.xml",
        "--traces",
        "tr",
    ];
    let r = run_in(
        &s.0,
        &[&args[..], &["--plant-fault", "1", "--format", "json"]].concat(),
    );
    r.code(FINDING);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("one JSON document");
    assert_eq!(v["verdict"], "fail");
    assert_eq!(v["devices"].as_array().map(Vec::len), Some(3), "{v}");
    let fails: Vec<&serde_json::Value> = v["gpu_to_gpu"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["verdict"] == "fail")
        .collect();
    assert_eq!(fails.len(), 1, "{v}");
    let detail = fails[0]["detail"].as_str().unwrap();
    assert!(
        detail.contains("launch 0 a") && detail.contains("device 1 differs"),
        "{detail}"
    );
    assert!(
        !detail.contains("device 0") && !detail.contains("device 2"),
        "{detail}"
    );
    let junit = std::fs::read_to_string(s.path("j.xml")).unwrap();
    assert!(
        junit.contains("gemm-audit.gpu-to-gpu.tiny") && junit.contains("device 1 differs"),
        "{junit}"
    );
    for n in 0..3 {
        assert!(s.path(&format!("tr/tiny.dev{n}.gat")).exists());
    }
    // `compare` over the written traces names the same device: the CPU
    // stand-ins record no UUID, so dev0 and dev2 (the same content) are
    // one vote, and the tie with dev1 lists every side, dev1 alone on its.
    let r = run_in(&s.0, &["compare", "tr"]);
    r.code(FINDING)
        .says(&["a tie", "tr/tiny.dev2.gat is a copy of tr/tiny.dev0.gat"]);
    assert!(
        r.stdout.lines().any(|l| l.trim_start().starts_with("side ")
            && l.contains("tr/tiny.dev1.gat")
            && !l.contains("dev0")),
        "{r}"
    );
    // Without the fault the devices agree; the table has a PASS row.
    run_in(&s.0, &args).code(OK).says(&[
        "gpu-to-gpu",
        "3/3 deterministic launches bit-identical on devices 0, 1, 2",
    ]);
}

#[test]
fn record_check_and_bless_on_every_device() {
    let s = Scratch::new("devices-record");
    s.write("tiny.toml", TINY);
    let all = [
        "--backend",
        "cpu",
        "--device",
        "all",
        "--cpu-stand-ins",
        "2",
    ];
    run_in(
        &s.0,
        &[&["record", "tiny.toml", "-o", "t.gat"][..], &all].concat(),
    )
    .code(OK)
    .says(&["-> t.dev0.gat", "-> t.dev1.gat", "gpu-to-gpu"]);
    assert!(!s.path("t.gat").exists());
    // Existing files are refused before any work, as for one device.
    run_in(
        &s.0,
        &[&["record", "tiny.toml", "-o", "t.gat"][..], &all].concat(),
    )
    .code(BAD_INPUT)
    .says(&["t.dev0.gat already exists"]);
    assert_eq!(read(&s.path("t.dev1.gat")).workload, "tiny");
    run_in(
        &s.0,
        &[&["check", "t.dev1.gat", "--replay"][..], &all].concat(),
    )
    .code(OK)
    .says(&["on device 0:", "on device 1:", "check on 2 devices: PASS"]);
    // Disagreeing devices: nothing is blessed.
    let three = [
        "--backend",
        "cpu",
        "--device",
        "all",
        "--cpu-stand-ins",
        "3",
    ];
    run_in(
        &s.0,
        &[
            &[
                "bless",
                "tiny.toml",
                "--golden-dir",
                "g",
                "--plant-fault",
                "2",
            ][..],
            &three,
        ]
        .concat(),
    )
    .code(FINDING)
    .says(&["device 2 differs", "nothing was blessed"]);
    assert!(!s.path(&g_cpu("tiny.gat")).exists());
    run_in(
        &s.0,
        &[&["bless", "tiny.toml", "--golden-dir", "g"][..], &three].concat(),
    )
    .code(OK)
    .says(&[&format!(
        "blessed tiny (from device 0) -> {}",
        g_cpu("tiny.gat")
    )])
    .never_says(&["from device 1"]);
    // Auditing every device against that golden: a lone bad device drifts
    // but proposes no golden (only the lowest ordinal keeps a candidate),
    // and devices never overwrite each other's candidate.
    let audit = |fault: &str| {
        run_in(
            &s.0,
            &[
                &[
                    "audit",
                    "--workload",
                    "tiny.toml",
                    "--golden-dir",
                    "g",
                    "--no-progress",
                    "--plant-fault",
                    fault,
                ][..],
                &three,
            ]
            .concat(),
        )
    };
    audit("1")
        .code(FINDING)
        .says(&["candidate not kept (with several devices, the lowest ordinal's is)"]);
    assert!(!s.path(&g_cpu("tiny.gat.pending")).exists());
    audit("0").code(FINDING).says(&["candidate kept as"]);
    let pending = read(&s.path(&g_cpu("tiny.gat.pending")));
    let golden = read(&s.path(&g_cpu("tiny.gat")));
    assert_ne!(
        pending.fingerprints, golden.fingerprints,
        "device 0's drifted candidate"
    );
}

/// `--fingerprint fast`: recorded, stored (format 3 says the mode), checked
/// with replay in that mode, and a strong and a fast trace of one workload
/// differ only by their mode (outputs are not compared across modes).
#[test]
fn fast_fingerprints_record_check_and_diff() {
    let s = Scratch::new("fast-fingerprints");
    s.write("tiny.toml", TINY);
    let cpu = ["--backend", "cpu"];
    run_in(
        &s.0,
        &[
            &[
                "record",
                "tiny.toml",
                "-o",
                "fast.gat",
                "--fingerprint",
                "fast",
            ][..],
            &cpu,
        ]
        .concat(),
    )
    .code(OK);
    run_in(
        &s.0,
        &[&["record", "tiny.toml", "-o", "strong.gat"][..], &cpu].concat(),
    )
    .code(OK);
    let (fast, strong) = (read(&s.path("fast.gat")), read(&s.path("strong.gat")));
    assert_eq!(fast.fingerprint_mode, gemm_audit::FingerprintMode::Fast);
    assert_eq!(strong.fingerprint_mode, gemm_audit::FingerprintMode::Strong);
    // Same routes and outputs, different fingerprints.
    assert_eq!(fast.routes, strong.routes);
    for (f, g) in fast.fingerprints.iter().zip(&strong.fingerprints) {
        assert_eq!((f.input_seed, f.bytes), (g.input_seed, g.bytes));
        assert_ne!(f.sha256, g.sha256);
    }
    run_in(&s.0, &["show", "fast.gat"])
        .code(OK)
        .says(&["fingerprints    fast"]);
    // The replay is fingerprinted in the trace's own mode.
    run_in(
        &s.0,
        &[&["check", "fast.gat", "--replay"][..], &cpu].concat(),
    )
    .code(OK)
    .says(&["fingerprints identical", "check: PASS"]);
    let d = run_in(&s.0, &["diff", "strong.gat", "fast.gat"]);
    d.says(&["fingerprint_mode", "outputs not compared"])
        .never_says(&["output_fingerprint"]);
    assert_ne!(d.code, OK, "a mode change is a difference");
    // Checked against a golden of the other mode, the outputs cannot be
    // compared: that fails the gate, it does not pass it.
    run_in(
        &s.0,
        &[&["check", "fast.gat", "--golden", "strong.gat"][..], &cpu].concat(),
    )
    .code(FINDING)
    .says(&["fingerprint_mode", "outputs not compared", "check: FAIL"]);
    // A tampered fast fingerprint is still caught on replay.
    let mut bad = fast.clone();
    bad.fingerprints[0].sha256.0[0] ^= 1;
    bad.write(&s.path("bad.gat"), false).unwrap();
    run_in(
        &s.0,
        &[&["check", "bad.gat", "--replay"][..], &cpu].concat(),
    )
    .code(FINDING);
}

/// `audit --review` prints each candidate the run kept with its
/// differences; `audit --accept` installs them in one go (a missing golden
/// and a drifted one alike), its golden rows pass saying so, and the next
/// plain run passes. Both need `--golden-dir` and neither goes with
/// `--check`.
#[test]
fn audit_review_and_accept_settle_candidates_in_one_go() {
    let s = Scratch::new("audit-accept");
    s.write("tiny.toml", TINY);
    let audit = |extra: &[&str]| {
        let mut args = vec![
            "audit",
            "--backend",
            "cpu",
            "--workload",
            "tiny.toml",
            "--runs",
            "2",
            "-q",
            "--golden-dir",
            "g",
        ];
        args.extend_from_slice(extra);
        run_in(&s.0, &args)
    };
    let golden = s.path(&g_cpu("tiny.gat"));
    let pending = s.path(&g_cpu("tiny.gat.pending"));

    // No golden yet: --review names the candidate, the gate still fails.
    audit(&["--review"]).code(FINDING).says(&[
        &format!("{} -> {}", g_cpu("tiny.gat.pending"), g_cpu("tiny.gat")),
        "no golden yet: accepting creates it",
    ]);
    assert!(pending.is_file() && !golden.exists());
    // --accept creates it; the run passes and says what it wrote.
    audit(&["--accept"])
        .code(OK)
        .says(&["accepted this run's trace as", "now holds this run's trace"]);
    assert!(golden.is_file() && !pending.exists());
    audit(&[]).code(OK).says(&["identical to"]);

    // A deliberate change (a dtype): --review shows the differences and
    // keeps the candidate; --accept replaces the golden with this run's.
    s.write(
        "tiny.toml",
        TINY.replacen("dtype = \"bf16\"", "dtype = \"f16\"", 1),
    );
    audit(&["--review"])
        .code(FINDING)
        .says(&[&g_cpu("tiny.gat.pending"), "dtype"]);
    assert!(pending.is_file());
    let before = std::fs::read(&golden).unwrap();
    audit(&["--review", "--accept"])
        .code(OK)
        .says(&["dtype", "accepted"]);
    assert!(std::fs::read(&golden).unwrap() != before && !pending.exists());
    audit(&[]).code(OK);
    // Nothing kept: --review says so.
    audit(&["--review"]).code(OK).says(&["no candidates kept"]);
    // With every device, the first device's candidate is the one shown
    // and installed; the others then match it.
    s.write(
        "tiny.toml",
        TINY.replacen("dtype = \"f16\"", "dtype = \"bf16\"", 1),
    );
    let all = ["--device", "all", "--cpu-stand-ins", "2"];
    audit(&[&all[..], &["--review"]].concat())
        .code(FINDING)
        .says(&[&g_cpu("tiny.gat.pending"), "dtype"]);
    let before = std::fs::read(&golden).unwrap();
    audit(&[&all[..], &["--accept"]].concat())
        .code(OK)
        .says(&["accepted this run's trace as"]);
    assert!(std::fs::read(&golden).unwrap() != before && !pending.exists());
    audit(&all).code(OK);

    // A run that fails its own contracts (a planted fault: the first GEMM's
    // outputs flipped) accepts nothing, even with --accept: the fault
    // must not become the golden.
    let before = std::fs::read(&golden).unwrap();
    audit(&["--plant-fault", "0", "--accept"])
        .code(FINDING)
        .says(&[
            "not accepting any candidate",
            "not accepted: this run failed its own contracts",
        ]);
    assert_eq!(std::fs::read(&golden).unwrap(), before);
    audit(&[]).code(OK);

    // Usage errors, and nothing written.
    run_in(
        &s.0,
        &[
            "audit",
            "--backend",
            "cpu",
            "--workload",
            "tiny.toml",
            "--accept",
        ],
    )
    .code(USAGE);
    audit(&["--accept", "--check"]).code(USAGE);
    audit(&["--review", "--check"]).code(USAGE);
    assert!(!pending.exists());
}

/// `audit --traces DIR` names each trace as goldens are named: workloads
/// whose names differ only in characters a file name cannot hold (`a b`,
/// `a/b`, `a:b`) get three files, none replacing another.
#[test]
fn audit_traces_of_similar_names_never_share_a_file() {
    let s = Scratch::new("audit-traces-names");
    let mut args = vec![
        "audit",
        "--backend",
        "cpu",
        "--runs",
        "2",
        "-q",
        "--traces",
        "tr",
    ];
    let names = ["a b", "a/b", "a:b"];
    let files: Vec<String> = (0..names.len()).map(|i| format!("w{i}.toml")).collect();
    for (name, file) in names.iter().zip(&files) {
        let text = TINY.replacen(
            TINY.lines().find(|l| l.starts_with("name")).unwrap(),
            &format!("name = {name:?}"),
            1,
        );
        s.write(file, text);
    }
    for f in &files {
        args.extend(["--workload", f.as_str()]);
    }
    run_in(&s.0, &args).code(OK);
    let mut written: Vec<String> = std::fs::read_dir(s.path("tr"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    written.sort();
    assert_eq!(written.len(), 3, "{written:?}");
    for name in names {
        let path = s
            .path("tr")
            .join(format!("{}.gat", gemm_audit::golden::file_stem(name)));
        let t = RecordedGemmTrace::read(&path).unwrap();
        assert_eq!(t.workload, name);
    }
}

/// Notes obey -q: the audit table's `note:` (here: why the CPU serves
/// `--backend auto` in a build without CUDA) is left out with -q, while the
/// JSON document keeps it as data.
#[cfg(not(feature = "cuda"))]
#[test]
fn audit_notes_obey_quiet_and_json_keeps_them() {
    let s = Scratch::new("quiet-notes");
    s.write("tiny.toml", TINY);
    let args = [
        "audit",
        "--backend",
        "auto",
        "--workload",
        "tiny.toml",
        "--runs",
        "2",
    ];
    let r = run_in(&s.0, &args);
    r.code(OK);
    assert!(
        r.stdout
            .contains("note: backend cuda: built without CUDA support"),
        "{r}"
    );
    let r = run_in(&s.0, &[&args[..], &["-q"]].concat());
    r.code(OK);
    assert!(
        !r.stdout.contains("note:") && !r.stderr.contains("note:"),
        "{r}"
    );
    let r = run_in(&s.0, &[&args[..], &["-q", "--format", "json"]].concat());
    let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("one JSON document");
    assert!(
        v["note"]
            .as_str()
            .is_some_and(|n| n.contains("built without CUDA support")),
        "{r}"
    );
}

/// `accept` takes a pending file by path as well as a workload by name, so
/// one candidate is installed and the others stay pending; a path that
/// names no candidate is an error that installs nothing.
#[test]
fn accept_installs_one_candidate_named_by_its_path() {
    let s = Scratch::new("accept-by-path");
    s.write("tiny.toml", TINY);
    let other = TINY.replacen("name = \"tiny\"", "name = \"tiny2\"", 1);
    s.write("tiny2.toml", other);
    run_in(
        &s.0,
        &[
            "audit",
            "--backend",
            "cpu",
            "--runs",
            "2",
            "-q",
            "--golden-dir",
            "g",
            "--workload",
            "tiny.toml",
            "--workload",
            "tiny2.toml",
        ],
    )
    .code(FINDING);
    let (one, two) = (g_cpu("tiny.gat"), g_cpu("tiny2.gat"));
    let (one_pending, two_pending) = (format!("{one}.pending"), format!("{two}.pending"));
    assert!(s.path(&one_pending).is_file() && s.path(&two_pending).is_file());

    run_in(
        &s.0,
        &["accept", "--golden-dir", "g", "g/nowhere.gat.pending"],
    )
    .code(BAD_INPUT)
    .says(&["no pending candidate"]);
    assert!(!s.path(&one).exists() && !s.path(&two).exists());

    run_in(&s.0, &["accept", "--golden-dir", "g", &two_pending]).code(OK);
    assert!(s.path(&two).is_file() && !s.path(&two_pending).exists());
    assert!(!s.path(&one).exists() && s.path(&one_pending).is_file());
}

/// Goldens no workload of the default suite writes (a removed workload's)
/// are named (`--unreferenced warn`, the default), make the audit a
/// finding (`fail`) or are removed (`delete`); the goldens in use stay.
#[test]
fn unreferenced_goldens_are_named_failed_or_removed() {
    let s = Scratch::new("unreferenced");
    let key = g_cpu("");
    let folder = s.path(&key);
    std::fs::create_dir_all(&folder).unwrap();
    for f in ["transformer-block.gat", "m-sweep.gat"] {
        std::fs::copy(
            root().join("traces").join(cpu_key()).join(f),
            folder.join(f),
        )
        .unwrap();
    }
    std::fs::copy(
        root().join("traces").join(cpu_key()).join("m-sweep.gat"),
        folder.join("removed-workload.gat"),
    )
    .unwrap();
    let old = s.path(&g_cpu("removed-workload.gat"));
    let audit = |extra: &[&str]| audit_cpu(&s, extra);
    audit(&[])
        .code(OK)
        .says(&["unreferenced golden", "removed-workload.gat"]);
    audit(&["--unreferenced", "fail"])
        .code(FINDING)
        .says(&["removed-workload.gat"]);
    assert!(old.is_file());
    // A chosen subset says nothing about the other goldens.
    audit(&["--unreferenced", "fail", "--workload", "m-sweep"]).code(OK);
    audit(&["--unreferenced", "delete", "-q"])
        .code(OK)
        .says(&["removed unreferenced golden"]);
    assert!(!old.exists());
    assert!(s.path(&g_cpu("m-sweep.gat")).is_file());
    audit(&["--unreferenced", "fail"])
        .code(OK)
        .never_says(&["unreferenced golden"]);
}
