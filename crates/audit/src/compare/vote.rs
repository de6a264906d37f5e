//! The vote of one group: one vote per device, the members left out as
//! another's device held to the outcome, routes and output fingerprints
//! voted launch by launch.

use super::{
    Group, LaunchVote, Member, Outlier, OutputVote, RouteOutlier, Scope, promises_same_bits,
};
use crate::trace::RecordedGemmTrace;
use std::collections::BTreeMap;

/// The identity of the device a member ran on, for one-device-one-vote:
/// the caller's device, else its UUID where the trace records one, else
/// the trace's own content.
fn device_vote_key(m: &Member) -> DeviceKey {
    if let Some(d) = &m.device {
        return DeviceKey::Device(d.clone());
    }
    let t = &m.trace;
    match t.volatile.get("cuda.device.uuid") {
        Some(uuid) => DeviceKey::Uuid(uuid.clone()),
        None => {
            let bytes = t.to_bytes().unwrap_or_default();
            DeviceKey::Content(crate::Digest::sha256(&bytes))
        }
    }
}

/// What tells one device from another in a vote.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum DeviceKey {
    Device(String),
    Uuid(String),
    Content(crate::Digest),
}

/// The warning for `copy`, left out of the vote as `twin`'s device.
fn left_out_warning(copy: &Member, twin: &Member, key: &DeviceKey) -> String {
    let why = match key {
        DeviceKey::Device(d) => format!("ran on the same device as {} ({d})", twin.label),
        DeviceKey::Uuid(u) => format!(
            "names the same device as {} (cuda.device.uuid {u})",
            twin.label
        ),
        DeviceKey::Content(_) => format!(
            "is a copy of {} (the same content, no device UUID)",
            twin.label
        ),
    };
    format!(
        "{} {why}: left out of the vote (one device, one vote); its routes and outputs are still compared",
        copy.label
    )
}

fn device_of(t: &RecordedGemmTrace) -> String {
    let keys = [
        "profile.rank",
        "cuda.device.ordinal",
        "cuda.device.pci_bus_id",
        "cuda.device.uuid",
        "cpu.model",
    ];
    let parts: Vec<String> = keys
        .iter()
        .filter_map(|k| t.volatile.get(*k).map(|v| format!("{k}={v}")))
        .collect();
    if parts.is_empty() {
        "unknown device".into()
    } else {
        parts.join(" ")
    }
}

/// The vote on launch `i` (whose route in the group's first member is
/// `route`): `voters` weigh one each, `copies` (left out as another's
/// device) weigh nothing but are held to the outcome like everyone. The
/// launch is held to the same bits when any member's route promises them,
/// so one relabelled trace cannot switch the vote off.
fn vote(
    i: usize,
    route: &crate::ResolvedGemmRoute,
    voters: &[&Member],
    copies: &[&Member],
) -> LaunchVote {
    let everyone = || voters.iter().chain(copies).copied();
    let observed = everyone().all(|m| m.trace.outputs_observed());
    let deterministic = everyone().any(|m| {
        m.trace
            .routes
            .get(i)
            .is_some_and(|r| promises_same_bits(&r.contract.kind, Scope::SameClass))
    });
    let mut out = LaunchVote {
        launch: i,
        gemm: route.gemm.clone(),
        contract: route.contract.to_string(),
        deterministic,
        outputs: OutputVote::NotObserved,
        agree: None,
        voters: voters.len(),
        majority: None,
        tie: false,
        outliers: Vec::new(),
        observed,
        route_outliers: route_vote(i, voters, copies),
    };
    if !observed {
        return out;
    }
    let fp = |m: &Member| m.trace.fingerprints[i].sha256.to_hex();
    let mut tally: BTreeMap<String, usize> = BTreeMap::new();
    for m in voters {
        *tally.entry(fp(m)).or_default() += 1;
    }
    let most = tally.values().copied().max().unwrap_or(0);
    let leaders: Vec<&String> = tally
        .iter()
        .filter(|(_, n)| **n == most)
        .map(|(f, _)| f)
        .collect();
    out.tie = leaders.len() > 1;
    out.majority = (!out.tie)
        .then(|| leaders.first().map(|s| s.to_string()))
        .flatten();
    out.agree = Some(most);
    out.outliers = everyone()
        .map(|m| (fp(m), m))
        .filter(|(f, _)| out.majority.as_ref() != Some(f))
        .map(|(fingerprint, m)| Outlier {
            label: m.label.clone(),
            device: device_of(&m.trace),
            fingerprint,
        })
        .collect();
    // One side after the other (stable: members keep their order within a side).
    out.outliers
        .sort_by(|a, b| a.fingerprint.cmp(&b.fingerprint));
    out.outputs = if out.tie {
        OutputVote::Tie
    } else if out.outliers.is_empty() {
        OutputVote::Identical
    } else {
        OutputVote::Outliers
    };
    out
}

/// The members whose route `i` differs from the voters' majority route
/// (all of them where two or more routes tie for the most votes), copies
/// included, each with the fields that differ.
fn route_vote(i: usize, voters: &[&Member], copies: &[&Member]) -> Vec<RouteOutlier> {
    let mut tally: Vec<(&crate::ResolvedGemmRoute, usize)> = Vec::new();
    for r in voters.iter().filter_map(|m| m.trace.routes.get(i)) {
        match tally.iter_mut().find(|(v, _)| *v == r) {
            Some((_, n)) => *n += 1,
            None => tally.push((r, 1)),
        }
    }
    let Some(&(first, _)) = tally.first() else {
        return Vec::new();
    };
    let most = tally.iter().map(|(_, n)| *n).max().unwrap_or(0);
    let mut leaders = tally.iter().filter(|(_, n)| *n == most).map(|(r, _)| *r);
    let majority = match (leaders.next(), leaders.next()) {
        (Some(r), None) => Some(r),
        _ => None,
    };
    let reference = majority.unwrap_or(first);
    let mut out: Vec<(usize, RouteOutlier)> = Vec::new();
    for m in voters.iter().chain(copies) {
        let Some(r) = m.trace.routes.get(i) else {
            continue;
        };
        if majority == Some(r) {
            continue;
        }
        let differs: Vec<String> = if r == reference {
            vec!["(a tie: no route has a majority)".to_string()]
        } else {
            crate::digest::field_changes(reference, r)
                .into_iter()
                .map(|c| format!("{}: {} -> {}", c.field, c.expected, c.found))
                .collect()
        };
        // Side by side: members of one route together, in the order the
        // routes were first seen.
        let side = tally
            .iter()
            .position(|(v, _)| *v == r)
            .unwrap_or(tally.len());
        out.push((
            side,
            RouteOutlier {
                label: m.label.clone(),
                device: device_of(&m.trace),
                differs,
            },
        ));
    }
    out.sort_by_key(|(side, _)| *side);
    out.into_iter().map(|(_, o)| o).collect()
}

/// The comparison of one group's members: those with another launch set
/// left out (a failure), then one voter per device, its copies held to
/// the vote's outcome.
pub(super) fn group(workload: String, device: String, list: &[&Member]) -> Group {
    let first = &list[0].trace;
    let (same, mismatched): (Vec<&Member>, Vec<&Member>) = list
        .iter()
        .partition(|m| m.trace.launch_set.launch_count == first.launch_set.launch_count);
    let mut seen: Vec<(DeviceKey, &Member)> = Vec::new();
    let (mut voters, mut copies, mut warnings) = (Vec::new(), Vec::new(), Vec::new());
    for m in same {
        let key = device_vote_key(m);
        match seen.iter().find(|(k, _)| *k == key) {
            Some((_, twin)) => {
                warnings.push(left_out_warning(m, twin, &key));
                copies.push(m);
            }
            None => {
                seen.push((key, m));
                voters.push(m);
            }
        }
    }
    let launches = first
        .routes
        .iter()
        .enumerate()
        .map(|(i, route)| vote(i, route, &voters, &copies))
        .collect();
    Group {
        workload,
        device,
        members: list.len(),
        mismatched: mismatched.iter().map(|m| m.label.clone()).collect(),
        duplicates: copies.iter().map(|m| m.label.clone()).collect(),
        warnings,
        launches,
    }
}
