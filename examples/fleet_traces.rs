//! Writes a fleet's traces for `gemm-audit compare` to read: N traces of
//! one workload on N devices of one class, each GEMMS launches long,
//! written through the library's own writer, every one with its own
//! device identity (ordinal, PCI bus id, UUID, host) in its volatile
//! metadata. With `--odd K`, node K's output of one launch (the middle
//! one) differs by one bit: the planted odd node `compare` must name.
//!
//! ```text
//! cargo run --release --example fleet_traces -- OUT N GEMMS [--odd K]
//! gemm-audit compare OUT             # names OUT/node0000K.gat when --odd K
//! ```
//!
//! The measurements of docs/fleet.md ("What `compare` costs") ran on its
//! output.

use gemm_audit::RecordedGemmTrace;
use gemm_audit::testkit;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// What the command line asked for.
struct Args {
    out: PathBuf,
    nodes: usize,
    gemms: u64,
    odd: Option<usize>,
}

fn parse() -> Result<Args, String> {
    let usage = "usage: fleet_traces OUT N GEMMS [--odd K]";
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut plain = Vec::new();
    let mut odd = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--odd" {
            let k = it.next().ok_or(usage)?;
            odd = Some(
                k.parse()
                    .map_err(|_| format!("--odd {k}: not a node index"))?,
            );
        } else {
            plain.push(a.as_str());
        }
    }
    let [out, nodes, gemms] = plain[..] else {
        return Err(usage.into());
    };
    let nodes: usize = nodes
        .parse()
        .map_err(|_| format!("N {nodes}: not a count"))?;
    let gemms: u64 = gemms
        .parse()
        .map_err(|_| format!("GEMMS {gemms}: not a count"))?;
    if gemms == 0 {
        return Err("GEMMS must be at least 1".into());
    }
    if let Some(k) = odd
        && k >= nodes
    {
        return Err(format!("--odd {k}: there are only {nodes} nodes"));
    }
    Ok(Args {
        out: out.into(),
        nodes,
        gemms,
        odd,
    })
}

/// Node `i`'s trace: `base` with its device facts, and on the odd node one
/// output bit changed.
fn node_trace(base: &RecordedGemmTrace, i: usize, odd: bool) -> RecordedGemmTrace {
    let mut t = base.clone();
    let v = &mut t.volatile;
    v.insert("host".into(), format!("node{i:05}"));
    v.insert("cuda.device.ordinal".into(), (i % 8).to_string());
    v.insert(
        "cuda.device.pci_bus_id".into(),
        format!("0000:{:02x}:00.0", i % 8),
    );
    v.insert("cuda.device.uuid".into(), format!("GPU-{i:08x}-fleet"));
    if odd {
        let mid = t.fingerprints.len() / 2;
        t.fingerprints[mid].sha256.0[0] ^= 1;
    }
    t
}

fn write_node(out: &Path, base: &RecordedGemmTrace, i: usize, odd: bool) -> Result<(), String> {
    let path = out.join(format!("node{i:05}.gat"));
    node_trace(base, i, odd)
        .write(&path, true)
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = std::fs::create_dir_all(&args.out) {
        eprintln!("{}: {e}", args.out.display());
        return ExitCode::from(2);
    }
    let base = testkit::sample_trace(args.gemms);
    let nodes: Vec<usize> = (0..args.nodes).collect();
    let written = gemm_audit::util::map_in_order(&nodes, |&i| {
        write_node(&args.out, &base, i, args.odd == Some(i))
    });
    for r in &written {
        if let Err(e) = r {
            eprintln!("{e}");
            return ExitCode::from(1);
        }
    }
    println!(
        "{} traces of {} GEMMs in {}{}",
        args.nodes,
        args.gemms,
        args.out.display(),
        args.odd
            .map(|k| format!(" (node{k:05}.gat is odd)"))
            .unwrap_or_default()
    );
    ExitCode::SUCCESS
}
