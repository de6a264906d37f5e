//! The text of a cross-device comparison (`gemm-audit compare`): one
//! section per (workload, device class) group, saying only what was seen.
//! A tie lists every side, a member left out of the vote is a warning
//! naming it, and outputs that were not observed are never called equal:
//! the group then says its routes agree and its outputs were not observed.
//! JSON is the [`Comparison`] itself; JUnit is [`super::junit::compare_junit`].

use super::{one_line, shorten};
use crate::compare::{Comparison, Group, LaunchVote, Outlier, OutputVote};
use std::fmt::Write as _;

/// The comparison as text for a terminal, ending with the verdict line
/// (`compare: PASS` or `compare: FAIL`). With `allow_single`, a group of
/// one voter is allowed (and said to be). Every name read from a file is
/// one line, escaped.
pub fn compare_text(c: &Comparison, allow_single: bool) -> String {
    let mut s = String::new();
    for g in &c.groups {
        group_text(&mut s, g, allow_single);
    }
    let passed = if allow_single {
        c.agrees_allowing_single()
    } else {
        c.agrees()
    };
    let verdict = match (passed, c.outputs_observed()) {
        (false, _) => "FAIL",
        (true, true) => "PASS",
        (true, false) => "PASS (routes only: outputs not observed)",
    };
    let _ = writeln!(s, "compare: {verdict}");
    s
}

/// The group's verdict in words.
fn group_verdict(g: &Group, allow_single: bool) -> String {
    let failing = g.launches.iter().filter(|l| l.fails()).count();
    if failing > 0 || !g.mismatched.is_empty() {
        return "DISAGREE".into();
    }
    if g.nothing_shared() {
        return format!(
            "{} voting: nothing to compare (no GEMM every trace holds)",
            g.voters()
        );
    }
    if g.voters() < 2 {
        return format!(
            "{} voting: nothing to compare{}",
            g.voters(),
            if allow_single {
                " (allowed)"
            } else {
                " (every trace is of one device: add another device's, or pass --allow-single)"
            }
        );
    }
    if !g.outputs_observed() {
        return "routes agree, outputs not observed".into();
    }
    let loose = g.launches.iter().filter(|l| !l.outliers.is_empty()).count();
    if loose == 0 {
        "agree".into()
    } else {
        format!("agree ({loose} launches without a promise of the same bits differ)")
    }
}

fn group_text(s: &mut String, g: &Group, allow_single: bool) {
    let one = |x: &str| one_line(x).into_owned();
    let _ = writeln!(
        s,
        "{} on {}: {} trace{}, {}",
        one(&g.workload),
        one(&g.device),
        g.members,
        if g.members == 1 { "" } else { "s" },
        group_verdict(g, allow_single)
    );
    for w in &g.warnings {
        let _ = writeln!(s, "  warning: {}", one(w));
    }
    for l in &g.mismatched {
        let _ = writeln!(s, "  left out (another launch set): {}", one(l));
    }
    for l in g.launches.iter().filter(|l| !l.route_outliers.is_empty()) {
        let _ = writeln!(
            s,
            "  launch {} {}: served another way by {} of {}",
            l.launch,
            one(&l.gemm),
            l.route_outliers.len(),
            l.voters
        );
        for o in &l.route_outliers {
            let _ = writeln!(s, "    {} [{}]", one(&o.label), one(&o.device));
            for d in o.differs.iter().take(4) {
                let _ = writeln!(s, "      {}", one(&shorten(d, 160)));
            }
            if o.differs.len() > 4 {
                let _ = writeln!(s, "      and {} more fields", o.differs.len() - 4);
            }
        }
    }
    if !g.outputs_observed() {
        let _ = writeln!(
            s,
            "  numeric: not observed (profiles hold no output bits: routes compared, outputs not)"
        );
    }
    for l in g.launches.iter().filter(|l| !l.outliers.is_empty()) {
        outputs_text(s, g, l);
    }
}

/// The output vote of one launch whose members' bits differ.
fn outputs_text(s: &mut String, g: &Group, l: &LaunchVote) {
    let one = |x: &str| one_line(x).into_owned();
    let promise = if l.deterministic {
        String::new()
    } else {
        format!(
            " ({} promises no bits across devices: reported, not failed)",
            one(&l.contract)
        )
    };
    let n = l.agree.unwrap_or(0);
    let head = match l.outputs {
        OutputVote::Tie => format!(
            "a tie: no majority, {n} of {} devices on each leading side; every side listed",
            l.voters
        ),
        _ => format!("{n}/{} agree", l.voters),
    };
    let _ = writeln!(
        s,
        "  launch {} {} ({}): {head}{promise}",
        l.launch,
        one(&l.gemm),
        one(&l.contract),
    );
    let member = |o: &Outlier| {
        let note = if g.duplicates.contains(&o.label) {
            " (left out of the vote)"
        } else {
            ""
        };
        format!("{} [{}]{note}", one(&o.label), one(&o.device))
    };
    if l.tie {
        for side in l.outliers.chunk_by(|a, b| a.fingerprint == b.fingerprint) {
            let who: Vec<String> = side.iter().map(member).collect();
            let _ = writeln!(
                s,
                "    side {}: {}",
                short(&side[0].fingerprint),
                who.join(", ")
            );
        }
    } else {
        for o in &l.outliers {
            let _ = writeln!(
                s,
                "    outlier {} output {}",
                member(o),
                short(&o.fingerprint)
            );
        }
    }
}

/// The first 12 hex digits of a fingerprint, as `show` prints them.
fn short(hex: &str) -> &str {
    hex.get(..12).unwrap_or(hex)
}

/// One launch's finding in one line, for a JUnit message: who served it
/// another way, and who differs in output (every side of a tie).
pub fn launch_finding(l: &LaunchVote) -> String {
    let mut parts = Vec::new();
    if !l.route_outliers.is_empty() {
        let routes: Vec<String> = l
            .route_outliers
            .iter()
            .map(|o| format!("{} [{}]: {}", o.label, o.device, o.differs.join("; ")))
            .collect();
        parts.push(format!("served another way by {}", routes.join(", ")));
    }
    if !l.outliers.is_empty() {
        let who = |side: &[Outlier]| {
            side.iter()
                .map(|o| format!("{} [{}]", o.label, o.device))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if l.tie {
            let sides: Vec<String> = l
                .outliers
                .chunk_by(|a, b| a.fingerprint == b.fingerprint)
                .map(|side| format!("{}: {}", short(&side[0].fingerprint), who(side)))
                .collect();
            parts.push(format!(
                "a tie among {} devices, no majority; every side: {}",
                l.voters,
                sides.join(" vs ")
            ));
        } else {
            parts.push(format!(
                "{}/{} agree; outliers: {}",
                l.agree.unwrap_or(0),
                l.voters,
                who(&l.outliers)
            ));
        }
    }
    parts.join("; ")
}
