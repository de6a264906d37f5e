//! The rows and cases of `gpu-to-gpu`: each (workload, device class)
//! group's vote ([`crate::compare`]) in words, as verdicts.

use super::GpuToGpu;
use crate::audit::{Case, Check, Contract, Verdict};
use crate::backend::DeviceLabel;
use crate::compare::{self, LaunchVote};

/// Rows and cases of one (workload, device class) group: a case per
/// launch (FAIL when [`LaunchVote::fails`], INFO when its outputs were not
/// observed or its contract promises no bits, else PASS), one row for the
/// group, an INFO row per member left out as another's device, and per
/// device an INFO row for the launches without a promise.
pub(super) fn judge_group(
    out: &mut GpuToGpu,
    g: &compare::Group,
    class: &str,
    labels: &[DeviceLabel],
) {
    let names: Vec<String> = labels.iter().map(|l| format!("{}", l.ordinal)).collect();
    let subject = format!("{} on {} ({} devices)", g.workload, class, labels.len());
    let mut failures: Vec<String> = g
        .mismatched
        .iter()
        .map(|l| format!("{l} recorded another launch set"))
        .collect();
    if g.nothing_shared() {
        failures.push("the devices share no GEMM: nothing compared".to_string());
    }
    for l in &g.launches {
        let gemm = format!("{} (launch {})", l.gemm, l.launch);
        let (verdict, detail) = if l.fails() {
            let d = describe(l);
            failures.push(d.clone());
            (Verdict::Fail, d)
        } else if !l.observed {
            (
                Verdict::Info,
                format!(
                    "outputs not observed: the route is the same on {} devices, output bits not compared",
                    l.voters
                ),
            )
        } else if !l.deterministic {
            (
                Verdict::Info,
                format!(
                    "{} promises no bits across devices: {}",
                    l.contract,
                    agreement(l)
                ),
            )
        } else {
            (
                Verdict::Pass,
                format!("bit-identical on {} devices", l.voters),
            )
        };
        out.cases.push(Case {
            contract: Contract::GpuToGpu,
            workload: g.workload.clone(),
            gemm,
            verdict,
            detail,
        });
    }
    let devices = names.join(", ");
    let promised: Vec<&LaunchVote> = g
        .launches
        .iter()
        .filter(|l| l.deterministic && l.observed)
        .collect();
    let (verdict, detail) = if !failures.is_empty() {
        (Verdict::Fail, failures.join("; "))
    } else if !g.outputs_observed() {
        (
            Verdict::Info,
            format!(
                "routes the same on devices {devices}; outputs not observed: output bits not compared"
            ),
        )
    } else {
        (
            Verdict::Pass,
            format!(
                "{}/{} deterministic launches bit-identical on devices {devices}",
                promised.iter().filter(|l| l.outliers.is_empty()).count(),
                promised.len(),
            ),
        )
    };
    out.checks.push(Check {
        contract: Contract::GpuToGpu,
        subject,
        verdict,
        detail,
    });
    for w in &g.warnings {
        out.checks.push(Check {
            contract: Contract::GpuToGpu,
            subject: format!("{} on {class}", g.workload),
            verdict: Verdict::Info,
            detail: format!("warning: {w}"),
        });
    }
    loose_rows(out, g, labels);
}

/// Launches whose contract promises no bits (`atomic-unordered`): a fact
/// per device, whether it gave the majority's bits.
fn loose_rows(out: &mut GpuToGpu, g: &compare::Group, labels: &[DeviceLabel]) {
    let loose: Vec<&LaunchVote> = g
        .launches
        .iter()
        .filter(|l| !l.deterministic && l.observed)
        .collect();
    if loose.is_empty() {
        return;
    }
    for label in labels {
        let me = label.to_string();
        let differs: Vec<String> = loose
            .iter()
            .filter(|l| l.outliers.iter().any(|o| o.label == me))
            .map(|l| format!("{} {}", l.launch, l.gemm))
            .collect();
        let detail = if differs.is_empty() {
            format!(
                "{} launches without a cross-device promise (atomic-unordered): all give the majority's bits",
                loose.len()
            )
        } else {
            format!(
                "{} launches without a cross-device promise (atomic-unordered): differs from the majority on {}/{} (launches {})",
                loose.len(),
                differs.len(),
                loose.len(),
                differs.join(", ")
            )
        };
        out.checks.push(Check {
            contract: Contract::GpuToGpu,
            subject: format!("{} on {}", g.workload, label),
            verdict: Verdict::Info,
            detail,
        });
    }
}

/// How many devices gave the most common bits of an observed launch.
fn agreement(l: &LaunchVote) -> String {
    match (l.outputs, l.agree) {
        (compare::OutputVote::Identical, _) => format!("the same bits on {} devices", l.voters),
        (compare::OutputVote::Tie, Some(n)) => {
            format!("no majority (a tie, {n} devices on each leading side)")
        }
        (_, Some(n)) => format!("{n}/{} devices agree", l.voters),
        (_, None) => "outputs not observed".to_string(),
    }
}

/// One failing launch in words: the members served another way, the
/// outliers when a majority exists, every side when it is a tie.
fn describe(l: &LaunchVote) -> String {
    let head = format!("launch {} {} ({})", l.launch, l.gemm, l.contract);
    let mut parts = Vec::new();
    if !l.route_outliers.is_empty() {
        let who: Vec<String> = l
            .route_outliers
            .iter()
            .map(|o| match o.differs.first() {
                Some(d) => format!("{} ({d})", o.label),
                None => o.label.clone(),
            })
            .collect();
        parts.push(format!("served another way by {}", who.join(", ")));
    }
    if l.deterministic && !l.outliers.is_empty() {
        let labels = |side: &[&compare::Outlier]| {
            side.iter()
                .map(|o| o.label.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let all: Vec<&compare::Outlier> = l.outliers.iter().collect();
        if l.tie {
            let sides: Vec<String> = all
                .chunk_by(|a, b| a.fingerprint == b.fingerprint)
                .map(labels)
                .collect();
            parts.push(format!(
                "no majority (a tie, at most {} of {} devices agree): {}",
                l.agree.unwrap_or(0),
                l.voters,
                sides.join(" vs ")
            ));
        } else {
            parts.push(format!(
                "{} {} from the majority ({})",
                labels(&all),
                if all.len() == 1 { "differs" } else { "differ" },
                agreement(l)
            ));
        }
    }
    format!("{head}: {}", parts.join("; "))
}
