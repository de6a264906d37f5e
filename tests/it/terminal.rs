//! What a person sees at 80 and 100 columns, in a real pseudo-terminal
//! (`script` from util-linux): no line past the edge, rows that read
//! differently, identifiers whole, and a refused check that says why first.

use crate::common::{BIN, Scratch, root};
use std::process::Command;

/// Runs `args` in a pseudo-terminal of `cols` columns; stdout and stderr as
/// the terminal showed them, colours and carriage returns removed.
fn in_pty(dir: &std::path::Path, cols: usize, args: &[&str]) -> String {
    let quoted: Vec<String> = std::iter::once(BIN)
        .chain(args.iter().copied())
        .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
        .collect();
    let script = format!("stty cols {cols} rows 60; {}", quoted.join(" "));
    let out = Command::new("script")
        .args(["-qec", &script, "/dev/null"])
        .current_dir(dir)
        .env_remove("COLUMNS")
        .output()
        .expect("`script` (util-linux) runs a pseudo-terminal");
    let text = String::from_utf8_lossy(&out.stdout).replace('\r', "");
    let mut plain = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters final-byte.
            if chars.peek() == Some(&'[') {
                chars.next();
                for d in chars.by_ref() {
                    if d.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        plain.push(c);
    }
    plain
}

fn assert_fits(text: &str, cols: usize) {
    for l in text.lines() {
        assert!(
            l.chars().count() <= cols,
            "{} > {cols} columns: {l:?}\n{text}",
            l.chars().count()
        );
    }
}

#[test]
fn the_audit_table_fits_and_tells_its_rows_apart_at_80_and_100_columns() {
    let s = Scratch::new("pty-audit");
    for cols in [80, 100] {
        let text = in_pty(
            &s.0,
            cols,
            &["audit", "--backend", "cpu", "--runs", "2", "--no-progress"],
        );
        assert!(text.contains("verdict: PASS"), "{text}");
        assert_fits(&text, cols);
        // Every batch-invariance group is named whole (k, n and route tell
        // them apart), not cut to a shared middle.
        for subject in [
            "transformer-block tiled nn bf16 k=256 n=256",
            "transformer-block tiled nn bf16 k=256 n=768",
            "transformer-block tiled nn bf16 k=1024 n=256",
        ] {
            assert!(
                text.contains(subject),
                "{cols}: {subject:?} not whole\n{text}"
            );
        }
        assert!(!text.contains('…'), "{cols}: a cell was cut\n{text}");
    }
}

#[test]
fn a_check_of_another_machines_trace_says_why_first_at_80_and_100_columns() {
    let golden = root().join("traces/nvidia-h200/m-sweep.gat");
    let golden = golden.to_str().expect("a UTF-8 path");
    let s = Scratch::new("pty-check");
    for cols in [80, 100] {
        let text = in_pty(&s.0, cols, &["check", golden, "--backend", "cpu"]);
        assert_fits(&text, cols);
        let lines: Vec<&str> = text.lines().collect();
        let v = lines
            .iter()
            .position(|l| l.starts_with("validation   refused at replay validation: "))
            .unwrap_or_else(|| panic!("no refused validation\n{text}"));
        let reason = format!(
            "recorded on NVIDIA H200, this machine is cpu/{}",
            std::env::consts::ARCH
        );
        assert!(
            lines[v + 1..v + 3].iter().any(|l| l.trim() == reason),
            "the reason is not first\n{text}"
        );
        // A digest stays whole even at 80 columns.
        assert!(
            lines.iter().any(|l| l.trim_start().starts_with("expected ")
                && l.split_whitespace().nth(1).is_some_and(|d| d.len() == 64)),
            "{text}"
        );
        assert!(text.contains("--format json` lists every one"), "{text}");
        assert!(text.contains("check: FAIL"), "{text}");
    }
}
