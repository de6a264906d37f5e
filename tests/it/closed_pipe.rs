//! Every command with its stdout and stderr closed before it writes a
//! byte (`gemm-audit diff a b 2>&1 | head -1` once the reader has gone):
//! no panic, no exit 101, and the exit code is still the verdict the same
//! command gives with open pipes.

use crate::common::{BIN, Scratch, root};
use std::process::{Command, Stdio};

/// Exit code of `args` with stdout and stderr open (captured).
fn open_code(dir: &Scratch, args: &[&str]) -> i32 {
    Command::new(BIN)
        .current_dir(&dir.0)
        .args(args)
        .output()
        .expect("run gemm-audit")
        .status
        .code()
        .expect("exited, not killed")
}

/// Exit code and stderr-less run of `args` with both streams writing into
/// a pipe whose reader is already gone: every write fails with EPIPE.
fn closed_code(dir: &Scratch, args: &[&str]) -> i32 {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let status = Command::new(BIN)
        .current_dir(&dir.0)
        .args(args)
        .stdin(Stdio::null())
        .stdout(writer.try_clone().expect("clone pipe"))
        .stderr(writer)
        .status()
        .expect("run gemm-audit");
    status.code().expect("exited, not killed by a signal")
}

#[test]
fn every_command_survives_closed_stdout_and_stderr() {
    let dir = Scratch::new("closed-pipe");
    let tiny = root().join("tests/data/tiny.toml");
    let tiny = tiny.to_str().unwrap();
    let profile = root().join("tests/data/profiles/cpu-block.json.gz");
    let profile = profile.to_str().unwrap();
    // Fixtures made with open pipes: two traces that differ (another
    // library version), a recording, a golden folder with a candidate.
    assert_eq!(
        open_code(&dir, &["-q", "import", profile, "-o", "a.gat"]),
        0
    );
    assert_eq!(
        open_code(
            &dir,
            &[
                "-q",
                "import",
                profile,
                "-o",
                "b.gat",
                "--library",
                "cublas=13.1.0"
            ]
        ),
        0
    );
    assert_eq!(
        open_code(
            &dir,
            &["-q", "record", tiny, "-o", "r.gat", "--backend", "cpu"]
        ),
        0
    );
    let commands: Vec<Vec<&str>> = vec![
        vec!["--help"],
        vec!["--version"],
        vec!["diff", "--help"],
        vec!["no-such-command"],
        vec!["workloads"],
        vec!["workloads", "m-sweep"],
        vec!["show", "a.gat"],
        vec!["show", "a.gat", "--format", "json"],
        vec!["show", "missing.gat"],
        vec!["diff", "a.gat", "b.gat"],
        vec!["diff", "a.gat", "b.gat", "--format", "json"],
        vec!["diff", "a.gat", "a.gat"],
        vec!["check", "r.gat", "--backend", "cpu", "--replay"],
        vec!["check", "b.gat", "--golden", "a.gat", "--backend", "cpu"],
        vec!["compare", "a.gat", "b.gat"],
        vec!["census", profile],
        vec!["census", profile, "--format", "markdown"],
        vec!["import", profile, "-o", "c.gat"],
        vec!["record", tiny, "-o", "r2.gat", "--backend", "cpu"],
        vec!["bless", tiny, "--golden-dir", "g", "--backend", "cpu"],
        vec!["review", "--golden-dir", "g"],
        vec!["audit", "--backend", "cpu", "--workload", tiny],
    ];
    for args in &commands {
        // Commands that write files get a fresh name with open pipes, so
        // both runs do the same work.
        let open_args: Vec<String> = args
            .iter()
            .map(|a| match *a {
                "c.gat" => "c-open.gat".to_string(),
                "r2.gat" => "r2-open.gat".to_string(),
                "g" => "g-open".to_string(),
                a => a.to_string(),
            })
            .collect();
        let open_args: Vec<&str> = open_args.iter().map(String::as_str).collect();
        let expected = open_code(&dir, &open_args);
        let closed = closed_code(&dir, args);
        assert_ne!(closed, 101, "gemm-audit {args:?} panicked on a closed pipe");
        assert_eq!(
            closed, expected,
            "gemm-audit {args:?}: exit {closed} on a closed pipe, {expected} with open pipes"
        );
    }
}
