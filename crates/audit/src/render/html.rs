//! The self-contained HTML page: inline CSS and SVG, no script, no network.

use super::{capitalized, esc};
use crate::audit::{AuditReport, BatchMatrix, Verdict};
use crate::report::{ReportInput, cell_text, clocks, environment, provenance};
use std::fmt::Write as _;

// Every table fits the page (long symbols and digests wrap anywhere), so
// the report reads at 1280 px without horizontal scrolling.
const CSS: &str = "body{font-family:system-ui,sans-serif;margin:2em;color:#111;max-width:1200px}\
table{border-collapse:collapse;margin:1em 0;max-width:100%}td,th{border:1px solid #bbb;padding:4px 8px;text-align:left;font-size:13px;overflow-wrap:anywhere}\
table.matrix{width:100%;table-layout:fixed}table.matrix th.m{width:5em}table.matrix th.cmp{width:20em}table.matrix th.ct{width:12em}caption{text-align:left;font-weight:600;padding:4px 0}\
th{background:#eee}.PASS{background:#d9f2d9}.FAIL{background:#f8d0d0}.INFO{background:#fff3c4}\
.same{background:#d9f2d9}.differs{background:#f8d0d0}code{font-size:12px}h1 .v{padding:2px 8px;border-radius:4px}\
td.PASS,td.FAIL,td.INFO{white-space:nowrap;font-weight:600}details{margin:.5em 0}summary{cursor:pointer;font-weight:600}p.meta{color:#555}";

/// The self-contained HTML page: the verdict and summary first, then the
/// environment, the verdicts, the batch-invariance matrices, the drift
/// against goldens and the (folded) charts.
pub fn html(input: &ReportInput<'_>) -> String {
    let a = input.audit;
    let mut s = head_html(a);
    s.push_str(&verdicts_html(a));
    s.push_str(&matrices_html(a));
    s.push_str(&drift_html(input));
    s.push_str(&charts_html(a));
    let _ = writeln!(s, "</body></html>");
    s
}

/// The document head, the overall verdict, provenance, the per-workload
/// summary and the environment.
fn head_html(a: &AuditReport) -> String {
    let mut s = String::new();
    let verdict = if a.passed() { "PASS" } else { "FAIL" };
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>gemm-audit report</title><style>{CSS}</style></head><body>\n"
    );
    let _ = writeln!(
        s,
        "<h1>gemm-audit report <span class=\"v {verdict}\" id=\"overall-verdict\">{verdict}</span></h1>\n<p>Backend <b>{}</b>, {} runs per check.</p>",
        esc(&a.backend),
        a.runs
    );
    let _ = writeln!(
        s,
        "<p class=\"meta\" id=\"provenance\">{}</p>",
        esc(&provenance())
    );
    if let Some(n) = &a.note {
        let _ = writeln!(s, "<p><i>{}</i></p>", esc(n));
    }
    // The summary first: one line per workload.
    let _ = writeln!(s, "<ul id=\"summary\">");
    for (w, [pass, fail, info]) in a.case_counts() {
        let class = if fail > 0 { "FAIL" } else { "PASS" };
        let _ = writeln!(
            s,
            "<li><b>{}</b>: <span class=\"{class}\">{pass} pass, {fail} fail</span>, {info} info</li>",
            esc(&w)
        );
    }
    let _ = writeln!(s, "</ul>");
    // The environment: what the verdicts were measured on.
    let _ = writeln!(s, "<h2>Environment</h2>\n<table id=\"environment\"><tbody>");
    for (k, v) in environment(a) {
        let _ = writeln!(s, "<tr><th>{}</th><td>{}</td></tr>", esc(&k), esc(&v));
    }
    let _ = writeln!(s, "</tbody></table>");
    s
}

/// Every verdict row, failures first.
fn verdicts_html(a: &AuditReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<h2>Verdicts</h2>\n<table id=\"verdict-table\"><thead><tr><th>contract</th><th>subject</th><th>verdict</th><th>detail</th></tr></thead><tbody>"
    );
    // Failures first, as on the terminal.
    let failed = |c: &&crate::audit::Check| c.verdict == Verdict::Fail;
    for c in a
        .checks
        .iter()
        .filter(failed)
        .chain(a.checks.iter().filter(|c| !failed(c)))
    {
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td>{}</td><td class=\"{v}\">{v}</td><td>{}</td></tr>",
            esc(c.contract.as_str()),
            esc(&c.subject),
            esc(&c.detail),
            v = c.verdict
        );
    }
    let _ = writeln!(s, "</tbody></table>");
    s
}

/// The batch-invariance matrices; a matrix that differs stays unfolded.
fn matrices_html(a: &AuditReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "<h2>Batch invariance</h2>\n<div id=\"batch-matrix\">");
    // A matrix that differs somewhere stays open; identical ones fold.
    for m in &a.matrices {
        let differs = m.cells.iter().any(|c| !c.identical);
        let _ = writeln!(
            s,
            "<details{}><summary>{} / {}: {}</summary>",
            if differs { " open" } else { "" },
            esc(&m.workload),
            esc(&m.group),
            if differs {
                "differs"
            } else {
                "identical at every m"
            }
        );
        s.push_str(&matrix_html(m));
        let _ = writeln!(s, "</details>");
    }
    let _ = writeln!(s, "</div>");
    s
}

/// What changed against each golden: a per-GEMM summary, then every
/// field behind a fold.
fn drift_html(input: &ReportInput<'_>) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<h2>Route drift against goldens</h2>\n<div id=\"route-drift\">"
    );
    if input.drift.is_empty() {
        let _ = writeln!(
            s,
            "<p>No goldens were compared (pass <code>--golden-dir</code>).</p>"
        );
    }
    for (w, d) in &input.drift {
        let _ = writeln!(s, "<h3>{}</h3>", esc(w));
        for line in d.pairing_lines() {
            let _ = writeln!(s, "<p class=\"pairing\">{}.</p>", esc(&capitalized(&line)));
        }
        if d.is_empty() {
            let _ = writeln!(s, "<p>{}.</p>", esc(&capitalized(d.agreement())));
            continue;
        }
        // What changed per GEMM first; every field behind a fold.
        let _ = writeln!(
            s,
            "<p class=\"drift-summary\">{}</p>\n<details><summary>{} differences, field by field</summary>",
            esc(&d.summary()),
            d.differences.len()
        );
        let _ = writeln!(
            s,
            "<table><tr><th>class</th><th>route</th><th>field</th><th>golden</th><th>candidate</th></tr>"
        );
        for x in &d.differences {
            let at = x.location();
            let _ = writeln!(
                s,
                "<tr><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td></tr>",
                x.class,
                esc(&at),
                esc(&x.change.field),
                esc(&x.change.expected),
                esc(&x.change.found)
            );
        }
        let _ = writeln!(s, "</table></details>");
    }
    let _ = writeln!(s, "</div>");
    s
}

/// The throughput and timing charts, folded.
fn charts_html(a: &AuditReport) -> String {
    let mut s = String::new();
    // Charts are folded: on the CPU reference they measure a reference
    // implementation, not a GEMM library, and say so.
    let cpu_note = if a.backend == "cpu" {
        " (the CPU reference: correctness, not a performance figure)"
    } else {
        ""
    };
    let _ = writeln!(
        s,
        "<h2>Throughput by batch size</h2>\n<details><summary>TFLOP/s by m{cpu_note}</summary>"
    );
    s.push_str(&throughput_chart(a));
    let _ = writeln!(
        s,
        "</details>\n<h2>Timings</h2>\n<details><summary>Launch times{cpu_note}</summary>"
    );
    s.push_str(&timing_chart(a));
    let _ = writeln!(s, "</details>");
    s
}

/// One table per M-sweep group, one row per batch size: a group of many
/// sizes grows down the page, never wider than it, and a differing row is
/// coloured and marked whatever the width.
fn matrix_html(m: &BatchMatrix) -> String {
    let mut s = String::new();
    let differing: Vec<String> = m
        .cells
        .iter()
        .filter(|c| !c.identical)
        .map(|c| c.m.to_string())
        .collect();
    let _ = writeln!(
        s,
        "<table class=\"matrix\"><caption>{} / {}{}: {}</caption>\n<thead><tr><th class=\"m\">m</th><th class=\"cmp\">rows vs m={}</th><th class=\"ct\">contract</th><th>kernel</th></tr></thead><tbody>",
        esc(&m.workload),
        esc(&m.group),
        if m.promised {
            " (promised)"
        } else {
            " (not promised)"
        },
        if differing.is_empty() {
            "identical at every m".to_string()
        } else {
            format!("differs at m={}", differing.join(","))
        },
        m.cells.first().map_or(0, |c| c.m)
    );
    for c in &m.cells {
        let class = if c.identical { "same" } else { "differs" };
        let mark = if c.identical { "=" } else { "&ne;" };
        let _ = writeln!(
            s,
            "<tr class=\"{class}\"><th class=\"m\">{}</th><td class=\"{class}\"><b>{mark}</b> {}</td><td>{}</td><td><code>{}</code></td></tr>",
            c.m,
            esc(&cell_text(c)),
            esc(&c.contract),
            esc(&crate::audit::display_kernel(&c.kernel))
        );
    }
    let _ = writeln!(s, "</tbody></table>");
    s
}

/// A chart line: its label (`workload / group`) and (m, TFLOP/s) points.
type Series = (String, Vec<(u64, f64)>);

/// One series per M-sweep group: (m, TFLOP/s) of each member, from its
/// timing and shape.
fn throughput_series(a: &AuditReport) -> Vec<Series> {
    let mut shapes = std::collections::HashMap::new();
    for t in &a.traces {
        for r in &t.routes {
            shapes.insert((t.workload.as_str(), r.gemm.as_str()), r.shape);
        }
    }
    let mut secs = std::collections::HashMap::new();
    for t in &a.timings {
        secs.insert((t.workload.as_str(), t.gemm.as_str()), t.seconds);
    }
    a.matrices
        .iter()
        .filter_map(|mx| {
            let points: Vec<(u64, f64)> = mx
                .cells
                .iter()
                .filter_map(|c| {
                    let key = (mx.workload.as_str(), c.gemm.as_str());
                    let shape = shapes.get(&key)?;
                    let s = *secs.get(&key)?;
                    (s > 0.0).then(|| {
                        let flop = 2.0 * shape.m as f64 * shape.k as f64 * shape.n as f64;
                        (c.m, flop / s / 1e12)
                    })
                })
                .collect();
            (points.len() >= 2).then(|| (format!("{} / {}", mx.workload, mx.group), points))
        })
        .collect()
}

/// TFLOP/s by batch size, one chart per problem family (op, dtype, k, n)
/// with one line per route that swept it (cuBLAS, cuBLASLt,
/// cublaslt-invariant, the wgmma and mma families, ...), so the routes of
/// one problem are compared side by side; the families with the most routes
/// come first.
fn throughput_chart(a: &AuditReport) -> String {
    let series = throughput_series(a);
    if series.is_empty() {
        return "<p>No M-sweep was timed.</p>\n".into();
    }
    // A group is "<route> <op> <dtype> k=.. n=..": the family is the rest.
    let mut families: Vec<(String, Vec<Series>)> = Vec::new();
    for (label, points) in series {
        let group = label.split_once(" / ").map_or(label.as_str(), |x| x.1);
        let family = group.split_once(' ').map_or(group, |x| x.1).to_string();
        match families.iter_mut().find(|(f, _)| *f == family) {
            Some((_, v)) => v.push((label, points)),
            None => families.push((family, vec![(label, points)])),
        }
    }
    families.sort_by_key(|f| std::cmp::Reverse(f.1.len()));
    let mut s = String::new();
    for (i, (family, series)) in families.iter().enumerate() {
        let _ = writeln!(s, "<h3>{}</h3>", esc(family));
        s.push_str(&family_chart(a, i, &series[..]));
    }
    s
}

/// One family's chart (log2 m across, linear TFLOP/s up) as inline SVG.
fn family_chart(a: &AuditReport, index: usize, series: &[Series]) -> String {
    const COLORS: [&str; 8] = [
        "#4a7ebb", "#d07a2b", "#2e9e6b", "#7a5bb5", "#c0392b", "#8c6d31", "#17becf", "#555",
    ];
    let (w, h, left, top, bottom) = (760.0, 300.0, 56.0, 16.0, 36.0);
    let max_m = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|x| x.0))
        .max()
        .unwrap_or(1)
        .max(2);
    let max_t = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|x| x.1))
        .fold(0.0f64, f64::max)
        .max(1e-6);
    let lx = (max_m as f64).log2().max(1.0);
    let x = |m: u64| left + (m.max(1) as f64).log2() / lx * (w - left - 10.0);
    let y = |t: f64| top + (1.0 - t / max_t) * (h - top - bottom);
    let legend_h = series.len() as f64 * 16.0 + 8.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg id=\"throughput-by-m-{index}\" class=\"throughput-by-m\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{}\" role=\"img\" aria-label=\"TFLOP/s by batch size\">",
        h + legend_h
    );
    let _ = writeln!(
        s,
        "<line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#888\"/><line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{}\" stroke=\"#888\"/>",
        h - bottom,
        w - 10.0,
        h - bottom,
        h - bottom
    );
    let _ = writeln!(
        s,
        "<text x=\"0\" y=\"{}\" font-size=\"11\">{}</text><text x=\"0\" y=\"{}\" font-size=\"11\">0</text><text x=\"{left}\" y=\"{}\" font-size=\"11\">TFLOP/s by m (log scale), {}</text>",
        top + 4.0,
        if max_t >= 10.0 {
            format!("{max_t:.0}")
        } else {
            format!("{max_t:.3}")
        },
        h - bottom,
        h - 4.0,
        esc(&clocks(a))
    );
    let mut p = 1u64;
    while p <= max_m {
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{}\" font-size=\"10\" text-anchor=\"middle\">{p}</text>",
            x(p),
            h - bottom + 14.0
        );
        p = p.saturating_mul(if max_m > 512 { 4 } else { 2 });
    }
    for (i, (label, points)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let line: Vec<String> = points
            .iter()
            .map(|&(m, t)| format!("{:.1},{:.1}", x(m), y(t)))
            .collect();
        let _ = writeln!(
            s,
            "<polyline class=\"series\" fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"><title>{}</title></polyline>",
            line.join(" "),
            esc(label)
        );
        for &(m, t) in points {
            let _ = writeln!(
                s,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{color}\"><title>{}: m={m}, {t:.2} TFLOP/s</title></circle>",
                x(m),
                y(t),
                esc(label)
            );
        }
        let ly = h + 12.0 + i as f64 * 16.0;
        // The legend names the route and its workload; the family is the
        // chart's heading.
        let legend = match label.split_once(" / ") {
            Some((workload, group)) => {
                format!("{} ({workload})", group.split(' ').next().unwrap_or(group))
            }
            None => label.clone(),
        };
        let _ = writeln!(
            s,
            "<rect x=\"{left}\" y=\"{}\" width=\"12\" height=\"4\" fill=\"{color}\"/><text x=\"{}\" y=\"{ly}\" font-size=\"11\">{}</text>",
            ly - 5.0,
            left + 18.0,
            esc(&legend)
        );
    }
    let _ = writeln!(s, "</svg>");
    s
}

/// Horizontal bars of each timed launch, grouped by workload, as inline SVG.
fn timing_chart(a: &AuditReport) -> String {
    if a.timings.is_empty() {
        return "<p>No timings were recorded.</p>\n".into();
    }
    let max = a
        .timings
        .iter()
        .map(|t| t.seconds)
        .fold(0.0f64, f64::max)
        .max(1e-9);
    let (bar_h, label_w, chart_w) = (16.0, 260.0, 420.0);
    let height = a.timings.len() as f64 * (bar_h + 4.0) + 30.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg id=\"tax-chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{height}\" role=\"img\" aria-label=\"time per GEMM launch\">",
        label_w + chart_w + 120.0
    );
    let _ = writeln!(
        s,
        "<text x=\"0\" y=\"14\" font-size=\"12\">time per launch, {}, fastest of {} runs (longest = {:.3} ms)</text>",
        esc(&clocks(a)),
        a.runs,
        max * 1e3
    );
    for (i, t) in a.timings.iter().enumerate() {
        let y = 24.0 + i as f64 * (bar_h + 4.0);
        let w = (t.seconds / max * chart_w).max(1.0);
        let color = match t.contract.split('/').next().unwrap_or("") {
            "scalar-fma" => "#4a7ebb",
            "split-k-fixed" => "#7a5bb5",
            "tensor-core-tile-parity" => "#2e9e6b",
            "vendor-fast" | "vendor-pedantic" => "#d07a2b",
            _ => "#888",
        };
        let _ = writeln!(
            s,
            "<text x=\"0\" y=\"{}\" font-size=\"11\">{}</text><rect x=\"{label_w}\" y=\"{y}\" width=\"{w:.1}\" height=\"{bar_h}\" fill=\"{color}\"><title>{} {}: {:.3} ms</title></rect><text x=\"{:.1}\" y=\"{}\" font-size=\"11\">{:.3} ms {}</text>",
            y + 12.0,
            esc(&format!("{} {}", t.workload, t.gemm)),
            esc(&t.gemm),
            esc(&t.contract),
            t.seconds * 1e3,
            label_w + w + 4.0,
            y + 12.0,
            t.seconds * 1e3,
            esc(&t.contract)
        );
    }
    let _ = writeln!(s, "</svg>");
    s
}
