//! JUnit XML of an audit and of a comparison.

use super::esc;
use crate::audit::{AuditReport, Contract, Verdict};
use crate::report::environment;
use std::fmt::Write as _;

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
        let suite = suite_of(c.contract);
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
            .filter(|c| suite_of(c.contract) == *suite)
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
            testcase(&mut s, c, time_of(c), drift);
        }
        let _ = writeln!(s, "  </testsuite>");
    }
    let _ = writeln!(s, "</testsuites>");
    s
}

/// One test case: a pass is empty, an INFO verdict keeps its detail in
/// `system-out`, a failure's body is what a reviewer needs.
fn testcase(
    s: &mut String,
    c: &crate::audit::Case,
    time: f64,
    drift: &[(String, crate::diff::TraceDiff)],
) {
    let _ = write!(
        s,
        "    <testcase name=\"{}\" classname=\"gemm-audit.{}.{}\" time=\"{:.6}\"",
        esc(&c.gemm),
        esc(c.contract.as_str()),
        esc(&c.workload),
        time
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
            let differences = (c.contract == Contract::GoldenDrift)
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

/// The JUnit suite a contract's cases are listed in: its own, or
/// `self-checks` for gemm-audit's checks of itself.
fn suite_of(contract: Contract) -> &'static str {
    if contract.is_self_check() {
        "self-checks"
    } else {
        contract.as_str()
    }
}

/// JUnit XML of a cross-device comparison: one suite per (workload, device
/// class), one case per launch, failed when [`LaunchVote::fails`] (the
/// message names who served it another way and every member whose output
/// differs, every side of a tie), skipped when its outputs were not
/// observed (only its route was compared: no case passes on bits nobody
/// saw). A group's warnings (members left out of the vote) are its
/// suite's `system-out`.
///
/// [`LaunchVote::fails`]: crate::compare::LaunchVote::fails
pub fn compare_junit(c: &crate::compare::Comparison) -> String {
    use crate::compare::LaunchVote;
    let skipped = |l: &LaunchVote| !l.fails() && !l.observed;
    let count = |f: &dyn Fn(&LaunchVote) -> bool| -> usize {
        c.groups
            .iter()
            .map(|g| g.launches.iter().filter(|l| f(l)).count())
            .sum()
    };
    let total = count(&|_| true);
    let failures = count(&|l| l.fails());
    let mut s = String::new();
    let _ = writeln!(s, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>");
    let _ = writeln!(
        s,
        "<testsuites name=\"gemm-audit compare\" tests=\"{total}\" failures=\"{failures}\" errors=\"0\" time=\"0\">"
    );
    for (id, g) in c.groups.iter().enumerate() {
        let f = g.launches.iter().filter(|l| l.fails()).count();
        let k = g.launches.iter().filter(|l| skipped(l)).count();
        let _ = writeln!(
            s,
            "  <testsuite name=\"{}/{}\" id=\"{id}\" package=\"gemm-audit.compare\" tests=\"{}\" failures=\"{f}\" errors=\"0\" skipped=\"{k}\" time=\"0\">",
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
            let (element, message) = if l.fails() {
                ("failure", super::compare::launch_finding(l))
            } else if skipped(l) {
                (
                    "skipped",
                    format!(
                        "outputs not observed (imported profile): the route is the same on {} traces, output bits not compared",
                        l.voters
                    ),
                )
            } else {
                let _ = writeln!(s, "/>");
                continue;
            };
            let _ = writeln!(
                s,
                ">\n      <{element} message=\"{}\"/>\n    </testcase>",
                esc(&message)
            );
        }
        if !g.warnings.is_empty() {
            let lines: Vec<String> = g.warnings.iter().map(|w| format!("warning: {w}")).collect();
            let _ = writeln!(s, "    <system-out>{}</system-out>", esc(&lines.join("\n")));
        }
        let _ = writeln!(s, "  </testsuite>");
    }
    let _ = writeln!(s, "</testsuites>");
    s
}
