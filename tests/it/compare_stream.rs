//! `compare` over many traces holds memory that does not grow with their
//! number: each trace is read, folded into per-launch tallies and
//! dropped, and only the traces the report names are read again. Proved
//! by running it under a data-segment limit that holding every trace
//! would exceed several times over, and by what it still reports there.

use crate::common::{BIN, Scratch};
use gemm_audit::testkit;
use std::process::Command;

/// Traces in the fleet: 400 of 512 GEMMs hold about 270 MB in memory at
/// once (about 0.7 MB each), four times [`LIMIT_KIB`].
const NODES: usize = 400;
const GEMMS: u64 = 512;
/// The data-segment limit `compare` runs under (`ulimit -d`, KiB).
const LIMIT_KIB: u64 = 64 * 1024;
/// The node whose output of one launch differs.
const ODD: usize = 217;
/// The launch that differs on the odd node.
const ODD_LAUNCH: usize = 300;

/// Writes the fleet: one workload on `NODES` devices of one class, each
/// with its own UUID, `ODD` with one output bit changed.
fn fleet(s: &Scratch) -> std::path::PathBuf {
    let dir = s.path("fleet");
    std::fs::create_dir_all(&dir).unwrap();
    let base = testkit::sample_trace(GEMMS);
    for i in 0..NODES {
        let mut t = base.clone();
        t.volatile
            .insert("cuda.device.uuid".into(), format!("GPU-{i:04}"));
        if i == ODD {
            t.fingerprints[ODD_LAUNCH].sha256.0[0] ^= 1;
        }
        t.write(&dir.join(format!("node{i:04}.gat")), false)
            .unwrap();
    }
    dir
}

/// `compare` over the fleet in a child whose data segment is limited
/// (`ulimit -d`): its exit code and what it printed.
fn compare_limited(s: &Scratch, args: &str) -> (Option<i32>, String) {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -d {LIMIT_KIB} && exec \"$0\" compare fleet {args}"
        ))
        .arg(BIN)
        .current_dir(&s.0)
        .output()
        .expect("spawn sh");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

/// 400 traces under a limit a quarter of what holding them takes: the
/// comparison completes and names the odd node alone, with its device,
/// in the table and in JSON.
#[test]
fn compare_of_many_traces_runs_in_bounded_memory() {
    let s = Scratch::new("compare-stream");
    fleet(&s);
    let (code, text) = compare_limited(&s, "");
    assert_eq!(code, Some(1), "a finding, not an abort:\n{text}");
    let odd = format!("fleet/node{ODD:04}.gat");
    assert!(
        text.contains(&format!("{NODES} traces, DISAGREE")),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "launch {ODD_LAUNCH} gemm{ODD_LAUNCH} (scalar-fma): {}/{NODES} agree",
            NODES - 1
        )),
        "{text}"
    );
    let outliers: Vec<&str> = text.lines().filter(|l| l.contains("outlier")).collect();
    assert_eq!(outliers.len(), 1, "{text}");
    assert!(
        outliers[0].contains(&odd) && outliers[0].contains(&format!("GPU-{ODD:04}")),
        "{text}"
    );
    assert!(text.ends_with("compare: FAIL\n"), "{text}");

    let (code, json) = compare_limited(&s, "--format json");
    assert_eq!(code, Some(1), "{json}");
    let v: serde_json::Value =
        serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"));
    let g = &v["groups"][0];
    assert_eq!(g["members"], NODES);
    let named: Vec<(u64, &str)> = g["launches"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|l| {
            l["outliers"]
                .as_array()
                .unwrap()
                .iter()
                .map(move |o| (l["launch"].as_u64().unwrap(), o["label"].as_str().unwrap()))
        })
        .collect();
    assert_eq!(named, [(ODD_LAUNCH as u64, odd.as_str())]);
}
