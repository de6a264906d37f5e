//! The batch-invariant route's rung choice (`RouteChoice::ladder_rung`)
//! held against committed H200 benches of every rung at every m
//! (`bench decode-by-m`, docs/kernels.md): on the
//! measured rows the rules must keep their speed, close to the fastest
//! rung of each row. A change of the rules that picks slower rungs on this
//! data fails here; a kernel change that moves the figures adds its log.

use gemm_audit::kernels::{KernelFamily, RouteChoice, ladder_chunks};
use gemm_audit::vocab::GemmOp;
use std::collections::HashMap;

/// The bench logs the rules are held to: the run they were first fitted
/// to (section 4g), the first runs of the kernels with the staged epilogue
/// (section 4i) and with descriptors built once a stage (section 4j, whose
/// TN and m = 128 rows the decode rung's rules were fitted to), the run
/// of those rules and the run with two k blocks a stage on the decode
/// rung (section 4j), the first run with TN's narrow A boxes (section
/// 4k), the first with `wgmma-medium`, the first that varies the order
/// the bench visits its routes in (section 4l) and the first with four k
/// blocks a stage on the narrow rung (section 4o).
const LOGS: [&str; 9] = [
    "tests/data/decode-by-m/rung-rules.txt",
    "tests/data/decode-by-m/epilogue.txt",
    "tests/data/decode-by-m/fastdesc.txt",
    "tests/data/decode-by-m/rules.txt",
    "tests/data/decode-by-m/decode2.txt",
    "tests/data/decode-by-m/tnbox.txt",
    "tests/data/decode-by-m/medium.txt",
    "tests/data/decode-by-m/order.txt",
    "tests/data/decode-by-m/narrow4.txt",
];

/// The logs before TN's narrow A boxes (section 4k): their TN rows below
/// 33 rows timed 64-wide boxes on the 64-row rungs, kernels that no
/// longer run there, so the rules are not held to those rows.
const BEFORE_TN_BOXES: usize = 5;

/// One row of the hot table: the problem and cuBLAS time / rung time by
/// column name (`None` where the bench left the rung out).
struct Row {
    op: GemmOp,
    m: u64,
    k: u64,
    n: u64,
    ratios: HashMap<String, Option<f64>>,
}

/// The rows of `log`'s table, with the ratios of its `temp` columns ("hot"
/// or "cold"; the cold ones stop at m = 256).
fn rows(log: &str, temp: &str) -> Vec<Row> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(log);
    let text = std::fs::read_to_string(&path).expect("the committed bench log");
    let header = text
        .lines()
        .find(|l| l.trim_start().starts_with("problem "))
        .expect("the decode-by-m header");
    // Columns are separated by two spaces or more and end in "hot" or
    // "cold" (cuBLAS's times in us, "cuBLAS hot us", are not ratios).
    let names: Vec<&str> = header
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .skip(1)
        .collect();
    let mut out = Vec::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.len() < 5 + names.len() || !words[2].starts_with("k=") {
            continue;
        }
        let op = match words[0] {
            "nn" => GemmOp::Nn,
            "tn" => GemmOp::Tn,
            "nt" => GemmOp::Nt,
            _ => continue,
        };
        let num = |w: &str, p: &str| w.strip_prefix(p).and_then(|v| v.parse::<u64>().ok());
        let (Some(k), Some(n), Some(m)) = (
            num(words[2], "k="),
            num(words[3], "n="),
            num(words[4], "m="),
        ) else {
            continue;
        };
        let mut ratios = HashMap::new();
        for (name, cell) in names.iter().zip(&words[5..]) {
            if let Some(rung) = name.strip_suffix(&format!(" {temp}")) {
                ratios.insert(rung.to_string(), cell.parse::<f64>().ok());
            }
        }
        out.push(Row {
            op,
            m,
            k,
            n,
            ratios,
        });
    }
    out
}

/// The bench column that times a family.
fn column(f: KernelFamily) -> &'static str {
    match f {
        KernelFamily::LadderNarrow(_) => "narrow",
        KernelFamily::LadderDecode(_) => "decode",
        KernelFamily::LadderMid(_) => "mid",
        KernelFamily::LadderBand(_) => "band",
        KernelFamily::LadderWide(_) => "wide",
        KernelFamily::WgmmaLarge => "wgmma",
        KernelFamily::WgmmaSmall => "small",
        KernelFamily::WgmmaMedium => "medium",
        other => panic!("{other} is no rung of the batch-invariant route"),
    }
}

#[test]
fn the_rung_rules_keep_their_speed_on_the_measured_h200_tables() {
    for (i, log) in LOGS.iter().enumerate() {
        holds_on(log, "hot", i < BEFORE_TN_BOXES);
    }
}

/// The weights of a decode step stream from memory: the rules must hold
/// on the L2-cold columns too (m <= 256), which they were not fitted to.
#[test]
fn the_rung_rules_keep_their_speed_with_the_weights_cold() {
    for (i, log) in LOGS.iter().enumerate() {
        holds_on(log, "cold", i < BEFORE_TN_BOXES);
    }
}

fn holds_on(log: &str, temp: &str, wide_tn_boxes: bool) {
    let rows = rows(log, temp);
    assert!(rows.len() > 100, "only {} rows in {log}", rows.len());
    let (mut ours, mut best, mut count) = (0.0f64, 0.0f64, 0u32);
    for r in &rows {
        if wide_tn_boxes && r.op == GemmOp::Tn && r.m <= 32 {
            continue;
        }
        let pick = RouteChoice::ladder_rung(r.op, r.m, r.k, r.n);
        // Rows the route does not serve (TN below 8 rows) have no ratio,
        // nor rows of a rung the log has no column for (`medium` before
        // section 4l).
        let Some(Some(x)) = r.ratios.get(column(pick)) else {
            continue;
        };
        // The fastest rung of the row with the family's k order: the
        // wgmma families only where k has one chunk.
        let one_chunk = ladder_chunks(r.k, r.n) == 1;
        let fastest = r
            .ratios
            .iter()
            .filter(|(c, _)| match c.as_str() {
                "narrow" | "decode" | "mid" | "band" => true,
                "wgmma" | "small" | "medium" => one_chunk,
                "wide" => !one_chunk,
                _ => false,
            })
            .filter_map(|(_, v)| *v)
            .fold(0.0f64, f64::max);
        assert!(
            *x >= 0.75 * fastest,
            "{log} ({temp}): {} m={} k={} n={}: {pick} at {x}x cuBLAS, the fastest rung at {fastest}x",
            r.op,
            r.m,
            r.k,
            r.n
        );
        ours += x.ln();
        best += fastest.ln();
        count += 1;
    }
    let (ours, best) = ((ours / count as f64).exp(), (best / count as f64).exp());
    println!(
        "{log} ({temp}): {count} rows: the rules at {ours:.4}x cuBLAS (geometric mean), the fastest rungs at {best:.4}x"
    );
    // Every row the route serves: 124 hot, 93 cold (to m = 256); 8 fewer
    // where TN's rows below 33 are left out.
    assert!(count > 80, "{log}: {count}");
    // Within 1.5% of the fastest rung of every row; the bench's noise
    // between two columns of one kernel is a few percent (section 4g).
    assert!(ours >= 0.985 * best, "{log}: {ours} against {best}");
}
