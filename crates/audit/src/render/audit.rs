//! The audit's verdict table, as text: a summary per workload, one row
//! per check (failures first), the overall verdict.

use super::Paint;
use crate::audit::{AuditReport, Check, Verdict};

/// The verdict table as plain text.
pub fn audit_text(report: &AuditReport) -> String {
    audit_table(report, None, &|_, _| None)
}

/// The verdict table: a summary per workload first, then one row per
/// check with its verdict in the first column (failures first), then
/// the overall verdict. `width` (a terminal's columns) wraps the
/// details; `paint` is given the verdict column's cells (column 0) and
/// the overall verdict, to colour them.
pub fn audit_table(report: &AuditReport, width: Option<usize>, paint: &Paint<'_>) -> String {
    let mut s = format!(
        "gemm-audit: backend {}, {} runs per check\n",
        super::one_line(&report.backend),
        report.runs
    );
    if let Some(n) = &report.note {
        s.push_str(&format!("note: {}\n", super::one_line(n)));
    }
    if let Some(t) = report.traces.first() {
        // Said on every run: what f32 and halves were permitted to do.
        s.push_str(&format!("policy: {}\n", t.context.policy));
    }
    for (workload, [pass, fail, info]) in report.case_counts() {
        s.push_str(&format!(
            "  {}: {pass} GEMM cases pass, {fail} fail, {info} info\n",
            super::one_line(&workload)
        ));
    }
    let mut table = super::Table::new(&["VERDICT", "CONTRACT", "SUBJECT", "DETAIL"]);
    if let Some(w) = width {
        // On a narrow terminal the subject gives way, so the details
        // keep room to wrap in (the verdict is first either way).
        table = table.cap(2, w.saturating_sub(9 + 25 + 30).clamp(16, super::MAX_CELL));
    }
    // Failures first; otherwise the order the checks ran in.
    let failed = |c: &&Check| c.verdict == Verdict::Fail;
    for c in report
        .checks
        .iter()
        .filter(failed)
        .chain(report.checks.iter().filter(|c| !failed(c)))
    {
        table.row(&[
            c.verdict.to_string(),
            c.contract.to_string(),
            c.subject.clone(),
            c.detail.clone(),
        ]);
    }
    s.push_str(&table.render_painted(width, paint));
    let count = |v| report.checks.iter().filter(|c| c.verdict == v).count();
    let verdict = if report.passed() {
        Verdict::Pass
    } else {
        Verdict::Fail
    }
    .to_string();
    let painted = match paint(0, &verdict) {
        Some((before, after)) => format!("{before}{verdict}{after}"),
        None => verdict,
    };
    s.push_str(&format!(
        "verdict: {painted} ({} pass, {} fail, {} info)\n",
        count(Verdict::Pass),
        count(Verdict::Fail),
        count(Verdict::Info)
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::Contract;

    /// Failures come first, the verdict is the first column, and on an
    /// 80-column terminal no line of the table passes the edge.
    #[test]
    fn the_verdict_table_puts_failures_first_and_fits_the_terminal() {
        let mut r = AuditReport::new("cpu", 3);
        let check = |verdict, subject: &str| {
            Check {
            contract: Contract::BatchInvariance,
            subject: subject.into(),
            verdict,
            detail: "rows differ from m=1 at m=32,64,128 (first at m=32); kernels by m: m=1..16: cpu_split_k_fixed_nn_f32; m=32..128: cpu_tiled32x32_nn_f32".into(),
        }
        };
        r.checks.push(check(
            Verdict::Pass,
            "m-sweep tiled nn f32 k=1024 n=256 m=[1, 2, 4, 8, 16, 32, 64, 128]",
        ));
        r.checks.push(check(Verdict::Fail, "m-sweep policy"));
        let text = audit_table(&r, Some(80), &|_, _| None);
        let body: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("VERDICT"))
            .collect();
        assert!(body[1].starts_with("FAIL "), "{text}");
        assert!(body.iter().all(|l| l.chars().count() <= 80), "{text}");
        assert!(
            text.ends_with("verdict: FAIL (1 pass, 1 fail, 0 info)\n"),
            "{text}"
        );
        // Painting wraps the verdict cells and the overall verdict only.
        let painted = audit_table(&r, None, &|c, v| {
            (c == 0).then(|| (format!("<{v}>"), "</>".into()))
        });
        assert!(painted.contains("<FAIL>FAIL</>") && painted.contains("verdict: <FAIL>FAIL</>"));
        assert!(!painted.contains("<VERDICT>"));
    }
}
