//! The Markdown summary of an audit.

use crate::audit::AuditReport;
use crate::report::{ReportInput, cell_text, clocks, environment};
use std::fmt::Write as _;

/// Text for a Markdown table cell: characters that Markdown (or the HTML
/// a renderer lets through) would interpret are backslash-escaped, line
/// breaks and control characters become spaces.
pub(crate) fn md(s: &str) -> String {
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
            md(c.contract.as_str()),
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
        for line in d.pairing_lines() {
            let _ = writeln!(s, "{}.\n", md(&super::capitalized(&line)));
        }
        if d.is_empty() {
            let _ = writeln!(s, "{}.\n", md(&super::capitalized(d.agreement())));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping() {
        assert_eq!(md("a|b\nc"), "a\\|b c");
        assert_eq!(md("<script>*x*"), "\\<script\\>\\*x\\*");
    }
}
