//! Reports people and CI systems read: a Markdown summary, a self-contained
//! HTML page (inline CSS and SVG, no network), and JUnit XML.

use crate::audit::{AuditReport, BatchMatrix, Verdict};
use crate::diff::TraceDiff;
use crate::error::{Error, Result};
use std::fmt::Write as _;
use std::path::Path;

/// Everything a report shows.
#[derive(Debug, Clone)]
pub struct ReportInput<'a> {
    /// The audit whose verdicts, matrices and timings are shown.
    pub audit: &'a AuditReport,
    /// Route drift of each audited workload against its golden, when goldens were given.
    pub drift: Vec<(String, TraceDiff)>,
}

fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            // Control characters (C0, DEL, C1) are not text: XML 1.0 forbids
            // most of them even escaped, and U+FFFE / U+FFFF outright; bidi
            // overrides would reorder what a reader sees.
            '\n' | '\t' => o.push(c),
            c if !crate::render::is_xml_char(c) || crate::render::is_unsafe_char(c) => o.push(' '),
            c => o.push(c),
        }
    }
    o
}

/// Text for a Markdown table cell: characters that Markdown (or the HTML
/// a renderer lets through) would interpret are backslash-escaped, line
/// breaks and control characters become spaces.
fn md(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '|' | '\\' | '`' | '*' | '_' | '<' | '>' | '[' | ']' | '#' | '!' => {
                o.push('\\');
                o.push(c);
            }
            c if c.is_control() => o.push(' '),
            c => o.push(c),
        }
    }
    o
}

/// Text for a code span inside a Markdown table cell: backslashes are
/// literal there, so only backticks (which would end the span), pipes (which
/// would end the cell) and control characters are replaced.
fn md_code(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '`' => "'".to_string(),
            '|' => "\\|".to_string(),
            c if c.is_control() => " ".to_string(),
            c => c.to_string(),
        })
        .collect()
}

/// The Markdown summary.
pub fn markdown(input: &ReportInput<'_>) -> String {
    let a = input.audit;
    let mut s = String::new();
    let _ = writeln!(s, "# gemm-audit report\n");
    let _ = writeln!(
        s,
        "Backend **{}**, {} runs per check. Verdict: **{}**.\n",
        a.backend,
        a.runs,
        if a.passed() { "PASS" } else { "FAIL" }
    );
    if let Some(n) = &a.note {
        let _ = writeln!(s, "> {}\n", md(n));
    }
    let _ = writeln!(s, "## Environment\n\n| | |\n| --- | --- |");
    for (k, v) in environment(a) {
        let _ = writeln!(s, "| {} | {} |", md(&k), md(&v));
    }
    s.push('\n');
    let _ = writeln!(
        s,
        "## Verdicts\n\n| contract | subject | verdict | detail |\n| --- | --- | --- | --- |"
    );
    for c in &a.checks {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} |",
            md(&c.contract),
            md(&c.subject),
            c.verdict,
            md(&c.detail)
        );
    }
    let _ = writeln!(s, "\n## Batch invariance\n");
    for m in &a.matrices {
        let _ = writeln!(
            s,
            "**{} / {}**{}\n",
            md(&m.workload),
            md(&m.group),
            if m.promised { " (promised)" } else { "" }
        );
        let _ = writeln!(
            s,
            "| m | rows vs smallest m | contract | kernel |\n| --- | --- | --- | --- |"
        );
        for c in &m.cells {
            let _ = writeln!(
                s,
                "| {} | {} | {} | `{}` |",
                c.m,
                cell_text(c),
                md(&c.contract),
                md_code(&crate::audit::display_kernel(&c.kernel))
            );
        }
        s.push('\n');
    }
    let _ = writeln!(s, "## Route drift against goldens\n");
    if input.drift.is_empty() {
        let _ = writeln!(s, "No goldens were compared (pass `--golden-dir`).");
    }
    for (w, d) in &input.drift {
        let _ = writeln!(s, "### {}\n", md(w));
        if d.is_empty() {
            let _ = writeln!(s, "No differences.\n");
            continue;
        }
        let _ = writeln!(
            s,
            "| class | route | field | golden | candidate |\n| --- | --- | --- | --- | --- |"
        );
        for x in &d.differences {
            let at = x.location();
            let _ = writeln!(
                s,
                "| {} | {} | `{}` | `{}` | `{}` |",
                x.class,
                md(&at),
                md_code(&x.change.field),
                md_code(&x.change.expected),
                md_code(&x.change.found)
            );
        }
        s.push('\n');
    }
    let _ = writeln!(s, "## Timings\n");
    let _ = writeln!(s, "{}", timing_summary(a));
    s
}

fn timing_summary(a: &AuditReport) -> String {
    if a.timings.is_empty() {
        return "No timings were recorded.".into();
    }
    format!(
        "{} eager launches timed ({}; the fastest of {} runs each); the HTML report charts them. Timings vary with the machine and are not part of any verdict.",
        a.timings.len(),
        clocks(a),
        a.runs
    )
}

// Every table fits the page (long symbols and digests wrap anywhere), so
// the report reads at 1280 px without horizontal scrolling.
const CSS: &str = "body{font-family:system-ui,sans-serif;margin:2em;color:#111;max-width:1200px}\
table{border-collapse:collapse;margin:1em 0;max-width:100%}td,th{border:1px solid #bbb;padding:4px 8px;text-align:left;font-size:13px;overflow-wrap:anywhere}\
table.matrix{width:100%;table-layout:fixed}table.matrix th.m{width:5em}table.matrix th.cmp{width:20em}table.matrix th.ct{width:12em}caption{text-align:left;font-weight:600;padding:4px 0}\
th{background:#eee}.PASS{background:#d9f2d9}.FAIL{background:#f8d0d0}.INFO{background:#fff3c4}\
.same{background:#d9f2d9}.differs{background:#f8d0d0}code{font-size:12px}h1 .v{padding:2px 8px;border-radius:4px}\
td.PASS,td.FAIL,td.INFO{white-space:nowrap;font-weight:600}details{margin:.5em 0}summary{cursor:pointer;font-weight:600}p.meta{color:#555}";

/// When, where and from what a report was made: the UTC time, the host
/// (`HOSTNAME` or `/etc/hostname`) and the commit when CI says it
/// (`GITHUB_SHA`, `CI_COMMIT_SHA`, or `GEMM_AUDIT_COMMIT`).
pub fn provenance() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "an unknown host".into());
    let commit = ["GEMM_AUDIT_COMMIT", "GITHUB_SHA", "CI_COMMIT_SHA"]
        .iter()
        .find_map(|k| std::env::var(k).ok())
        .map(|c| format!(", commit {}", c.chars().take(40).collect::<String>()))
        .unwrap_or_default();
    format!(
        "Generated {} UTC on {host}{commit}, gemm-audit {}",
        utc(secs),
        env!("CARGO_PKG_VERSION")
    )
}

/// `YYYY-MM-DD HH:MM` of a UNIX time (proleptic Gregorian, UTC).
fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let (h, m) = ((secs % 86_400) / 3600, (secs % 3600) / 60);
    // Days to civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {h:02}:{m:02}")
}

/// The self-contained HTML page.
pub fn html(input: &ReportInput<'_>) -> String {
    let a = input.audit;
    let verdict = if a.passed() { "PASS" } else { "FAIL" };
    let mut s = String::new();
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
            esc(&c.contract),
            esc(&c.subject),
            esc(&c.detail),
            v = c.verdict
        );
    }
    let _ = writeln!(s, "</tbody></table>");
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
        if d.is_empty() {
            let _ = writeln!(s, "<p>No differences.</p>");
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
    // Charts are folded: on the CPU reference they measure a reference
    // implementation, not a GEMM library, and say so.
    let cpu_note = if a.backend == "cpu" {
        " (the CPU reference: correctness, not a performance figure)"
    } else {
        ""
    };
    let _ = writeln!(
        s,
        "</div>\n<h2>Throughput by batch size</h2>\n<details><summary>TFLOP/s by m{cpu_note}</summary>"
    );
    s.push_str(&throughput_chart(a));
    let _ = writeln!(
        s,
        "</details>\n<h2>Timings</h2>\n<details><summary>Launch times{cpu_note}</summary>"
    );
    s.push_str(&timing_chart(a));
    let _ = writeln!(s, "</details>");
    let _ = writeln!(s, "</body></html>");
    s
}

/// `identical`, or `differs (3 of 256 elements, max 2 ulp)`.
fn cell_text(c: &crate::audit::MatrixCell) -> String {
    match &c.difference {
        None if c.identical => "identical".into(),
        Some(d) => format!("differs ({d})"),
        None => "differs".into(),
    }
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

/// What the timings include, e.g. `CUDA events around the kernels`.
fn clocks(a: &AuditReport) -> String {
    let mut seen: Vec<String> = Vec::new();
    for t in &a.timings {
        let c = t.clock.to_string();
        if !seen.contains(&c) {
            seen.push(c);
        }
    }
    seen.join("; ")
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

/// JUnit XML: one test suite per GEMM contract and one for the
/// self-checks, one test case per contract per GEMM. FAIL verdicts are
/// failures (a golden drift's body lists its differences from `drift`);
/// INFO verdicts pass with their detail in `system-out`.
pub fn junit(a: &AuditReport, drift: &[(String, crate::diff::TraceDiff)]) -> String {
    // One suite per GEMM contract, in the order first seen, and one for
    // gemm-audit's own self-checks, so a CI view of the GEMMs is not
    // crowded by the tool checking itself.
    let mut suites: Vec<&str> = Vec::new();
    for c in &a.cases {
        let suite = suite_of(&c.contract);
        if !suites.contains(&suite) {
            suites.push(suite);
        }
    }
    let total = a.cases.len();
    let failures = a
        .cases
        .iter()
        .filter(|c| c.verdict == Verdict::Fail)
        .count();
    // A case's time is its GEMM's eager launch time where it has one (the
    // per-GEMM contracts); suites add up their cases; the whole file is the
    // audit's wall time.
    let time_of = |c: &crate::audit::Case| {
        a.timings
            .iter()
            .find(|t| t.workload == c.workload && t.gemm == c.gemm)
            .map_or(0.0, |t| t.seconds)
    };
    let props = environment(a);
    let mut s = String::new();
    let _ = writeln!(s, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>");
    let _ = writeln!(
        s,
        "<testsuites name=\"gemm-audit\" tests=\"{total}\" failures=\"{failures}\" errors=\"0\" time=\"{:.6}\">",
        a.elapsed_seconds
    );
    for (id, suite) in suites.iter().enumerate() {
        let cases: Vec<_> = a
            .cases
            .iter()
            .filter(|c| suite_of(&c.contract) == *suite)
            .collect();
        let f = cases.iter().filter(|c| c.verdict == Verdict::Fail).count();
        let suite_time: f64 = cases.iter().map(|c| time_of(c)).sum();
        let _ = writeln!(
            s,
            "  <testsuite name=\"{}\" id=\"{id}\" package=\"gemm-audit.{}\" tests=\"{}\" failures=\"{f}\" errors=\"0\" skipped=\"0\" time=\"{suite_time:.6}\">",
            esc(suite),
            esc(&a.backend),
            cases.len()
        );
        let _ = writeln!(s, "    <properties>");
        for (name, value) in &props {
            let _ = writeln!(
                s,
                "      <property name=\"{}\" value=\"{}\"/>",
                esc(name),
                esc(value)
            );
        }
        let _ = writeln!(s, "    </properties>");
        for c in cases {
            let _ = write!(
                s,
                "    <testcase name=\"{}\" classname=\"gemm-audit.{}.{}\" time=\"{:.6}\"",
                esc(&c.gemm),
                esc(&c.contract),
                esc(&c.workload),
                time_of(c)
            );
            match c.verdict {
                Verdict::Pass => {
                    let _ = writeln!(s, "/>");
                }
                Verdict::Info => {
                    let _ = writeln!(
                        s,
                        ">\n      <system-out>{}</system-out>\n    </testcase>",
                        esc(&c.detail)
                    );
                }
                Verdict::Fail => {
                    // The body is what a reviewer needs: for golden drift,
                    // every difference, not the one-line message again.
                    let differences = (c.contract == crate::audit::GOLDEN_DRIFT)
                        .then(|| drift.iter().find(|(w, _)| *w == c.workload))
                        .flatten()
                        .map(|(_, d)| format!("\n{}", d.render()))
                        .unwrap_or_default();
                    let _ = writeln!(
                        s,
                        ">\n      <failure message=\"{}\" type=\"contract-violated\">{}{}</failure>\n    </testcase>",
                        esc(&c.detail),
                        esc(&c.detail),
                        esc(&differences)
                    );
                }
            }
        }
        let _ = writeln!(s, "  </testsuite>");
    }
    let _ = writeln!(s, "</testsuites>");
    s
}

/// The JUnit suite a contract's cases are listed in: its own, or
/// `self-checks` for gemm-audit's checks of itself.
fn suite_of(contract: &str) -> &str {
    if crate::audit::SELF_CHECKS.contains(&contract) {
        "self-checks"
    } else {
        contract
    }
}

/// The environment of an audit, for people and CI systems: tool version,
/// backend, device, compute capability, driver, and the toolkit and library
/// versions the traces' volatile metadata recorded.
pub fn environment(a: &AuditReport) -> Vec<(String, String)> {
    let mut out = vec![
        (
            "tool.version".to_string(),
            env!("CARGO_PKG_VERSION").to_string(),
        ),
        ("backend".to_string(), a.backend.clone()),
    ];
    if let Some(t) = a.traces.first() {
        let d = &t.context.device;
        out.push(("device".into(), d.class.clone()));
        if let Some([x, y]) = d.compute_capability {
            out.push(("device.compute_capability".into(), format!("{x}.{y}")));
        }
        out.push(("device.driver".into(), d.driver.clone()));
        for key in [
            "cuda.driver_api_version",
            "cuda.nvrtc_version",
            "cuda.cublas_version",
            "cuda.cublaslt_version",
            "cpu.model",
        ] {
            if let Some(v) = t.volatile.get(key) {
                out.push((key.to_string(), v.clone()));
            }
        }
    }
    out
}

/// Writes `report.md` and `report.html` into `dir` (created if needed).
pub fn write_report(dir: &Path, input: &ReportInput<'_>) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    crate::trace::codec::write_atomic(&dir.join("report.md"), markdown(input).as_bytes(), true)?;
    crate::trace::codec::write_atomic(&dir.join("report.html"), html(input).as_bytes(), true)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping() {
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&apos;"
        );
        assert_eq!(md("a|b\nc"), "a\\|b c");
        assert_eq!(md("<script>*x*"), "\\<script\\>\\*x\\*");
        assert_eq!(esc("a\u{1b}[31m\u{85}"), "a [31m ");
        // Not XML at all, or reordering what a reader sees: replaced.
        assert_eq!(esc("x\u{FFFE}y\u{FFFF}z\u{202E}w"), "x y z w");
        assert_eq!(esc("line\nnext\tcol"), "line\nnext\tcol");
    }

    #[test]
    fn utc_dates_are_civil() {
        assert_eq!(utc(0), "1970-01-01 00:00");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00");
        assert_eq!(utc(1_700_000_000), "2023-11-14 22:13");
        assert!(provenance().starts_with("Generated "));
    }
}

/// Version of the JSON documents `audit`, `check` and `diff` print. Bumped
/// when a field is removed or changes meaning; new fields may appear.
pub const JSON_SCHEMA_VERSION: u32 = 1;

/// The envelope of every JSON document the command line prints: schema and
/// tool version, what it is and the overall verdict, then the body's own
/// fields. Keys are snake_case and enum values kebab-case throughout.
#[derive(Debug, serde::Serialize)]
pub struct JsonDocument<'a, T: serde::Serialize> {
    /// [`JSON_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// This build's version.
    pub tool_version: &'static str,
    /// `audit`, `check` or `diff`.
    pub kind: &'static str,
    /// `pass` or `fail`.
    pub verdict: &'static str,
    /// The document's own fields.
    #[serde(flatten)]
    pub body: &'a T,
}

/// Renders `body` as a pretty JSON document of `kind` with the envelope.
pub fn json_document<T: serde::Serialize>(kind: &'static str, passed: bool, body: &T) -> String {
    let doc = JsonDocument {
        schema_version: JSON_SCHEMA_VERSION,
        tool_version: env!("CARGO_PKG_VERSION"),
        kind,
        verdict: if passed { "pass" } else { "fail" },
        body,
    };
    // Plain data with string keys: serialization cannot fail.
    serde_json::to_string_pretty(&doc).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// JUnit XML of a cross-device comparison: one suite per (workload, device
/// class), one case per launch, failed when a deterministic launch has an
/// outlier (the message names the devices).
pub fn compare_junit(c: &crate::compare::Comparison) -> String {
    let total: usize = c.groups.iter().map(|g| g.launches.len()).sum();
    let failed = |l: &crate::compare::LaunchVote| l.deterministic && !l.outliers.is_empty();
    let failures: usize = c
        .groups
        .iter()
        .map(|g| g.launches.iter().filter(|l| failed(l)).count())
        .sum();
    let mut s = String::new();
    let _ = writeln!(s, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>");
    let _ = writeln!(
        s,
        "<testsuites name=\"gemm-audit compare\" tests=\"{total}\" failures=\"{failures}\" errors=\"0\" time=\"0\">"
    );
    for (id, g) in c.groups.iter().enumerate() {
        let f = g.launches.iter().filter(|l| failed(l)).count();
        let _ = writeln!(
            s,
            "  <testsuite name=\"{}/{}\" id=\"{id}\" package=\"gemm-audit.compare\" tests=\"{}\" failures=\"{f}\" errors=\"0\" skipped=\"0\" time=\"0\">",
            esc(&g.workload),
            esc(&g.device),
            g.launches.len()
        );
        for l in &g.launches {
            let _ = write!(
                s,
                "    <testcase name=\"{} {}\" classname=\"gemm-audit.compare.{}\" time=\"0\"",
                l.launch,
                esc(&l.gemm),
                esc(&g.workload)
            );
            if failed(l) {
                let who: Vec<String> = l
                    .outliers
                    .iter()
                    .map(|o| format!("{} [{}]", o.label, o.device))
                    .collect();
                let _ = writeln!(
                    s,
                    ">\n      <failure message=\"{}/{} agree; outliers: {}\"/>\n    </testcase>",
                    l.agree,
                    l.voters,
                    esc(&who.join(", "))
                );
            } else {
                let _ = writeln!(s, "/>");
            }
        }
        let _ = writeln!(s, "  </testsuite>");
    }
    let _ = writeln!(s, "</testsuites>");
    s
}
