//! Peak memory of reading, showing, diffing and checking a trace, against
//! the trace file's size, over trace sizes up to the reader's route limit.
//!
//! ```text
//! cargo bench --bench memory                 # 1,000 to 100,000 routes
//! cargo bench --bench memory -- --full       # and 1,000,000 (the reader's route limit; minutes, GBs)
//! cargo bench --bench memory -- FILE...      # your own traces
//! ```
//!
//! Each command runs in a fresh process (this bench re-run as a child that
//! calls the command line's own `main_with`, stdout to `/dev/null`), whose
//! resident high-water mark (`VmHWM`) is reported next to the file size,
//! with what an idle child holds subtracted. See `docs/performance.md`.

use gemm_audit::testkit;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The commands measured, as arguments after `gemm-audit` (`FILE` is the
/// trace).
const COMMANDS: [&[&str]; 5] = [
    &["show", "FILE"],
    &["show", "FILE", "--format", "json"],
    &["diff", "FILE", "FILE"],
    &["diff", "FILE", "FILE", "--format", "json"],
    &["check", "FILE", "--backend", "cpu"],
];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--child") {
        child(&args[1..]);
        return;
    }
    let full = args.iter().any(|a| a == "--full");
    let files: Vec<PathBuf> = args
        .iter()
        .filter(|a| !a.starts_with("--"))
        .map(PathBuf::from)
        .collect();
    let dir = std::env::temp_dir().join(format!("gemm-audit-bench-memory-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch folder");
    let traces: Vec<PathBuf> = if files.is_empty() {
        let mut sizes = vec![1_000u64, 10_000, 100_000];
        if full {
            sizes.push(1 << 20);
        }
        sizes
            .into_iter()
            .map(|n| {
                let path = dir.join(format!("{n}.gat"));
                testkit::sample_trace(n)
                    .write(&path, true)
                    .expect("write the trace");
                path
            })
            .collect()
    } else {
        files
    };
    let idle = peak(&["--version"]).unwrap_or(0);
    println!(
        "gemm-audit memory: peak resident memory of one command, less an idle process's ({:.1} MB)",
        mb(idle)
    );
    println!(
        "{:<40} {:>10} {:>10} {:>8}  command",
        "trace", "file MB", "peak MB", "x file"
    );
    for t in &traces {
        let size = std::fs::metadata(t).map(|m| m.len()).unwrap_or(0);
        for cmd in COMMANDS {
            let args: Vec<&str> = cmd
                .iter()
                .map(|a| {
                    if *a == "FILE" {
                        t.to_str().unwrap_or("")
                    } else {
                        a
                    }
                })
                .collect();
            match peak_and_code(&args) {
                Some((p, code)) => {
                    let held = p.saturating_sub(idle);
                    println!(
                        "{:<40} {:>10.1} {:>10.1} {:>8.1}  {} (exit {code})",
                        name(t),
                        mb(size),
                        mb(held),
                        held as f64 / size.max(1) as f64,
                        cmd.join(" ")
                    );
                }
                None => println!("{:<40} failed: {}", name(t), cmd.join(" ")),
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

/// In a child: runs the command line on `args`, then prints this process's
/// `VmHWM` on stderr's last line.
fn child(args: &[String]) {
    let code = gemm_audit_cli::main_with(
        std::iter::once("gemm-audit".to_string()).chain(args.iter().cloned()),
    );
    let hwm = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .unwrap_or(0);
    eprintln!("\nhwm {} {code}", hwm * 1024);
}

/// The peak resident memory of a child running the command line on `args`,
/// and its exit code.
fn peak_and_code(args: &[&str]) -> Option<(u64, String)> {
    let out = Command::new(std::env::current_exe().ok()?)
        .arg("--child")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .ok()?;
    let err = String::from_utf8_lossy(&out.stderr);
    let last = err.lines().rev().find(|l| l.starts_with("hwm "))?;
    let mut it = last.split_whitespace().skip(1);
    let peak = it.next()?.parse().ok()?;
    let mut code = it.next()?.to_string();
    if code != "0" && code != "1" {
        // Say why (the command's first error line).
        if let Some(e) = err.lines().find(|l| l.contains("error")) {
            code = format!("{code}: {e}");
        }
    }
    Some((peak, code))
}

/// The peak resident memory of a child running the command line on `args`.
fn peak(args: &[&str]) -> Option<u64> {
    peak_and_code(args).map(|(p, _)| p)
}
