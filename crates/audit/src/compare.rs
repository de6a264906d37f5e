//! Comparing many traces of the same workload, recorded on many devices or
//! hosts: deterministic routes must give the same bits on every device of
//! one class, so a device that disagrees with the majority is suspect.
//!
//! Traces are grouped by workload and device class (`golden::device_key`);
//! within a group each launch's output fingerprint is put to a vote, and
//! every trace whose fingerprint differs from the majority's is an outlier,
//! named by its file and by the device facts its volatile metadata holds
//! (ordinal, PCI bus id, UUID). Launches under contracts that promise no
//! determinism (vendor or atomic) are reported but never make an outlier.

use crate::trace::RecordedGemmTrace;
use crate::vocab::ContractKind;
use crate::{Error, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The trace files `paths` name: files as given, folders searched
/// recursively for `*.gat` (not following links to folders, so a `self ->
/// .` link cannot loop), each file once however many paths lead to it.
/// Finding none is an error: a comparison of nothing is not an agreement.
pub fn trace_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    fn walk(
        dir: &Path,
        out: &mut Vec<PathBuf>,
        seen: &mut std::collections::HashSet<PathBuf>,
    ) -> Result<()> {
        let mut entries: Vec<std::fs::DirEntry> = std::fs::read_dir(dir)
            .map_err(|e| Error::io(dir, e))?
            .flatten()
            .collect();
        entries.sort_by_key(|e| e.path());
        for e in entries {
            let p = e.path();
            let is_link = e.file_type().is_ok_and(|t| t.is_symlink());
            if p.is_dir() {
                if !is_link {
                    walk(&p, out, seen)?;
                }
            } else if p.extension().is_some_and(|e| e == "gat") {
                take(p, out, seen);
            }
        }
        Ok(())
    }
    fn take(p: PathBuf, out: &mut Vec<PathBuf>, seen: &mut std::collections::HashSet<PathBuf>) {
        let key = std::fs::canonicalize(&p).unwrap_or_else(|_| p.clone());
        if seen.insert(key) {
            out.push(p);
        }
    }
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for p in paths {
        if p.is_dir() {
            walk(p, &mut out, &mut seen)?;
        } else {
            take(p.clone(), &mut out, &mut seen);
        }
    }
    if out.is_empty() {
        return Err(Error::NoTraces {
            paths: if paths.is_empty() {
                "no path given".to_string()
            } else {
                paths
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        });
    }
    Ok(out)
}

/// One trace in a comparison: where it came from and what it holds.
#[derive(Debug, Clone)]
pub struct Member {
    /// A label for people: the file it was read from.
    pub label: String,
    /// The trace.
    pub trace: RecordedGemmTrace,
    /// The device it ran on, when the caller knows it (the fleet does):
    /// one vote per device. `None`: the trace's device UUID, or where it
    /// records none, its content (so copies of one file vote once).
    pub device: Option<String>,
}

/// A trace that disagreed with the majority on one launch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Outlier {
    /// The member's label (its file).
    pub label: String,
    /// The device as its volatile metadata names it (ordinal, bus id,
    /// UUID), or `unknown device`.
    pub device: String,
    /// Its fingerprint of the launch.
    pub fingerprint: String,
}

/// A trace whose route for one launch differs from the majority's: on
/// one job's ranks or one device class, the same GEMM served by another
/// kernel, algorithm, library or driver.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RouteOutlier {
    /// The member's label (its file).
    pub label: String,
    /// The device or rank as its trace names it.
    pub device: String,
    /// The route fields that differ from the majority's route, with both
    /// values (`vendor.physical_kernels: [...] -> [...]`).
    pub differs: Vec<String>,
}

/// The vote on one launch of one group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LaunchVote {
    /// Launch index in enqueue order.
    pub launch: usize,
    /// The GEMM's name.
    pub gemm: String,
    /// The route's numeric contract.
    pub contract: String,
    /// Whether the contract promises the same bits on every device.
    pub deterministic: bool,
    /// Members that agree with the majority, and how many voted.
    pub agree: usize,
    /// Members that voted.
    pub voters: usize,
    /// The majority fingerprint (empty on a tie: no majority exists).
    pub majority: String,
    /// True when the most common fingerprints are held by equally many
    /// members: the vote cannot say which device is wrong, so every member
    /// of the tie is listed as an outlier.
    pub tie: bool,
    /// Members that disagreed (for deterministic launches: suspect devices).
    pub outliers: Vec<Outlier>,
    /// Whether the members' outputs were observed: false for imported
    /// profiles, whose fingerprints are placeholders and are not voted on
    /// (`outliers` is then empty, `majority` too).
    pub observed: bool,
    /// Members whose route differs from the majority's (every member of a
    /// tie where no route has a majority). Any is a disagreement, under
    /// every contract: the same GEMM on one device class (or one job's
    /// ranks) must be served the same way.
    pub route_outliers: Vec<RouteOutlier>,
}

/// The comparison of one (workload, device class) group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Group {
    /// The workload.
    pub workload: String,
    /// The device class key, e.g. `nvidia-h200`.
    pub device: String,
    /// Members in the group.
    pub members: usize,
    /// Members left out because their launch set differs from the group's
    /// first member (another GEMM list): labels.
    pub mismatched: Vec<String>,
    /// Members left out as copies of another member's device (the same
    /// device UUID, or the same trace content where no UUID is known): one
    /// device, one vote. Labels.
    pub duplicates: Vec<String>,
    /// One vote per launch.
    pub launches: Vec<LaunchVote>,
}

impl Group {
    /// Members whose vote counted (not left out as mismatched or copies).
    pub fn voters(&self) -> usize {
        self.members - self.mismatched.len() - self.duplicates.len()
    }

    /// True when at least two devices voted, no launch was served another
    /// way by any member, no deterministic launch has an output outlier
    /// and no member was left out for another launch count. One voter
    /// compares nothing, so it does not agree.
    pub fn agrees(&self) -> bool {
        self.voters() >= 2
            && self.mismatched.is_empty()
            && self
                .launches
                .iter()
                .all(|l| l.route_outliers.is_empty() && (!l.deterministic || l.outliers.is_empty()))
    }
}

/// The whole comparison.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Comparison {
    /// One per (workload, device class).
    pub groups: Vec<Group>,
}

impl Comparison {
    /// True when every group agrees.
    pub fn agrees(&self) -> bool {
        self.groups.iter().all(Group::agrees)
    }

    /// Like [`Comparison::agrees`], but a group with a single voter passes
    /// (when one trace per device class is expected).
    pub fn agrees_allowing_single(&self) -> bool {
        self.groups
            .iter()
            .all(|g| g.agrees() || (g.voters() == 1 && g.mismatched.is_empty()))
    }
}

/// The identity of the device a member ran on, for one-device-one-vote:
/// its UUID where the trace records one, else the trace's own content.
fn device_vote_key(m: &Member) -> String {
    if let Some(d) = &m.device {
        return format!("device:{d}");
    }
    let t = &m.trace;
    match t.volatile.get("cuda.device.uuid") {
        Some(uuid) => format!("uuid:{uuid}"),
        None => {
            let bytes = t.to_bytes().unwrap_or_default();
            format!("content:{}", crate::Digest::sha256(&bytes))
        }
    }
}

/// Whether `kind` promises the same bits on every device of a class.
fn deterministic(kind: &ContractKind) -> bool {
    !matches!(
        kind.class(),
        ContractKind::AtomicUnordered | ContractKind::VendorFast | ContractKind::VendorPedantic
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

/// The vote of `members` on launch `i` (whose route in the first member is
/// `route`). The launch is held to the same bits when any member's route
/// promises them, so one relabelled trace cannot switch the vote off.
fn vote(i: usize, route: &crate::ResolvedGemmRoute, members: &[&Member]) -> LaunchVote {
    let observed = members.iter().all(|m| m.trace.outputs_observed());
    let mut votes: BTreeMap<String, Vec<&Member>> = BTreeMap::new();
    for m in members.iter().filter(|_| observed) {
        let fp = m.trace.fingerprints[i].sha256.to_hex();
        votes.entry(fp).or_default().push(m);
    }
    let most = votes.values().map(Vec::len).max().unwrap_or(0);
    let leaders: Vec<&String> = votes
        .iter()
        .filter(|(_, ms)| ms.len() == most)
        .map(|(fp, _)| fp)
        .collect();
    let tie = leaders.len() > 1;
    let majority = if tie {
        String::new()
    } else {
        leaders.first().map(|s| s.to_string()).unwrap_or_default()
    };
    let outliers = votes
        .iter()
        .filter(|(fp, _)| **fp != majority)
        .flat_map(|(fp, ms)| {
            ms.iter().map(move |m| Outlier {
                label: m.label.clone(),
                device: device_of(&m.trace),
                fingerprint: fp.clone(),
            })
        })
        .collect();
    let deterministic = members.iter().any(|m| {
        m.trace
            .routes
            .get(i)
            .is_some_and(|r| deterministic(&r.contract.kind))
    });
    LaunchVote {
        launch: i,
        gemm: route.gemm.clone(),
        contract: route.contract.to_string(),
        deterministic,
        agree: if tie { 0 } else { most },
        voters: members.len(),
        majority,
        tie,
        outliers,
        observed,
        route_outliers: route_vote(i, members),
    }
}

/// The members whose route `i` differs from the majority's route (all of
/// them where two or more routes tie for the most votes), each with the
/// fields that differ.
fn route_vote(i: usize, members: &[&Member]) -> Vec<RouteOutlier> {
    let mut votes: Vec<(&crate::ResolvedGemmRoute, Vec<&Member>)> = Vec::new();
    for m in members {
        let Some(r) = m.trace.routes.get(i) else {
            continue;
        };
        match votes.iter_mut().find(|(v, _)| *v == r) {
            Some((_, ms)) => ms.push(m),
            None => votes.push((r, vec![m])),
        }
    }
    if votes.len() < 2 {
        return Vec::new();
    }
    let most = votes.iter().map(|(_, ms)| ms.len()).max().unwrap_or(0);
    let leaders = votes.iter().filter(|(_, ms)| ms.len() == most).count();
    let majority = (leaders == 1)
        .then(|| {
            votes
                .iter()
                .find(|(_, ms)| ms.len() == most)
                .map(|(r, _)| *r)
        })
        .flatten();
    let reference = majority.unwrap_or(votes[0].0);
    votes
        .iter()
        .filter(|(r, _)| majority != Some(*r))
        .flat_map(|(r, ms)| {
            let differs: Vec<String> = if std::ptr::eq(*r, reference) {
                vec!["(a tie: no route has a majority)".to_string()]
            } else {
                crate::digest::field_changes(reference, *r)
                    .into_iter()
                    .map(|c| format!("{}: {} -> {}", c.field, c.expected, c.found))
                    .collect()
            };
            ms.iter().map(move |m| RouteOutlier {
                label: m.label.clone(),
                device: device_of(&m.trace),
                differs: differs.clone(),
            })
        })
        .collect()
}

/// Groups `members` by workload and device class and votes on every launch.
pub fn compare(members: &[Member]) -> Comparison {
    let mut groups: BTreeMap<(String, String), Vec<&Member>> = BTreeMap::new();
    for m in members {
        // Fingerprints compare only within a mode: a fast trace votes with
        // fast traces.
        let mut device = crate::golden::device_key(&m.trace.context.device);
        if m.trace.fingerprint_mode != crate::FingerprintMode::Strong {
            device.push_str(&format!(" ({} fingerprints)", m.trace.fingerprint_mode));
        }
        let key = (m.trace.workload.clone(), device);
        groups.entry(key).or_default().push(m);
    }
    let mut out = Vec::new();
    for ((workload, device), list) in groups {
        let first = &list[0].trace;
        let mut keys = std::collections::HashSet::new();
        let (unique, duplicates): (Vec<&Member>, Vec<&Member>) =
            list.iter().partition(|m| keys.insert(device_vote_key(m)));
        let (same, mismatched): (Vec<&Member>, Vec<&Member>) = unique
            .iter()
            .partition(|m| m.trace.launch_set.launch_count == first.launch_set.launch_count);
        let launches = first
            .routes
            .iter()
            .enumerate()
            .map(|(i, route)| vote(i, route, &same))
            .collect();
        out.push(Group {
            workload,
            device,
            members: list.len(),
            mismatched: mismatched.iter().map(|m| m.label.clone()).collect(),
            duplicates: duplicates.iter().map(|m| m.label.clone()).collect(),
            launches,
        });
    }
    Comparison { groups: out }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(label: &str, device_uuid: &str) -> Member {
        let mut trace = crate::testkit::sample_trace(3);
        trace
            .volatile
            .insert("cuda.device.uuid".into(), device_uuid.into());
        Member {
            label: label.into(),
            trace,
            device: None,
        }
    }

    #[test]
    fn the_disagreeing_device_is_named() {
        let mut members: Vec<Member> = (0..4)
            .map(|i| member(&format!("host{i}.gat"), &format!("uuid-{i}")))
            .collect();
        // A planted disagreement on host2's launch 1.
        members[2].trace.fingerprints[1].sha256.0[0] ^= 1;
        let c = compare(&members);
        assert_eq!(c.groups.len(), 1);
        let g = &c.groups[0];
        assert_eq!((g.members, g.device.as_str()), (4, "synthetic-gpu"));
        assert!(!c.agrees());
        let bad: Vec<(usize, &Outlier)> = g
            .launches
            .iter()
            .flat_map(|l| l.outliers.iter().map(move |o| (l.launch, o)))
            .collect();
        assert_eq!(bad.len(), 1);
        assert_eq!(bad[0].0, 1);
        assert_eq!(bad[0].1.label, "host2.gat");
        assert!(bad[0].1.device.contains("uuid-2"));
        assert_eq!(g.launches[1].agree, 3);
        // Without the fault everyone agrees.
        members[2].trace.fingerprints[1].sha256.0[0] ^= 1;
        assert!(compare(&members).agrees());
    }

    #[test]
    fn vendor_disagreements_are_reported_but_not_outliers() {
        let mut members: Vec<Member> = (0..3)
            .map(|i| member(&format!("h{i}"), &format!("u{i}")))
            .collect();
        for m in &mut members {
            m.trace.routes[0].contract.kind = ContractKind::VendorFast;
        }
        members[1].trace.fingerprints[0].sha256.0[0] ^= 1;
        let c = compare(&members);
        assert_eq!(c.groups[0].launches[0].outliers.len(), 1);
        assert!(!c.groups[0].launches[0].deterministic);
        assert!(c.agrees(), "vendor routes promise no cross-device bits");
    }

    #[test]
    fn groups_split_by_workload_and_device_class() {
        let a = member("a", "1");
        let mut b = member("b", "2");
        b.trace.context.device.class = "NVIDIA H100 PCIe".into();
        let mut c = member("c", "3");
        c.trace.workload = "other".into();
        let cmp = compare(&[a, b, c]);
        assert_eq!(cmp.groups.len(), 3);
        // One trace per group compares nothing: not agreement, unless asked.
        assert!(!cmp.agrees());
        assert!(cmp.agrees_allowing_single());
    }

    /// Copies of one device's trace vote once, so two copies of a bad trace
    /// cannot out-vote a good one; a tie says so and blames no one device.
    #[test]
    fn one_device_one_vote_and_ties_name_no_majority() {
        let good = member("good.gat", "uuid-good");
        let mut bad = member("bad.gat", "uuid-bad");
        bad.trace.fingerprints[0].sha256.0[0] ^= 1;
        let copy = Member {
            label: "bad-copy.gat".into(),
            ..bad.clone()
        };
        let c = compare(&[good.clone(), bad.clone(), copy]);
        let g = &c.groups[0];
        assert_eq!(g.duplicates, vec!["bad-copy.gat".to_string()]);
        assert_eq!(g.voters(), 2);
        let l = &g.launches[0];
        assert!(l.tie && l.majority.is_empty(), "{l:?}");
        assert_eq!(l.outliers.len(), 2, "every device of the tie is listed");
        assert!(!c.agrees());
        // A third device breaks the tie and names the bad one alone.
        let third = member("third.gat", "uuid-third");
        let c = compare(&[good, bad, third]);
        let l = &c.groups[0].launches[0];
        assert!(!l.tie);
        assert_eq!(l.outliers.len(), 1);
        assert_eq!(l.outliers[0].label, "bad.gat");
    }

    /// A launch is held to the same bits when any member's route promises
    /// them: relabelling the first trace's contract does not switch the
    /// vote off.
    #[test]
    fn a_relabelled_first_trace_does_not_switch_the_vote_off() {
        let mut members: Vec<Member> = (0..3)
            .map(|i| member(&format!("h{i}"), &format!("u{i}")))
            .collect();
        members[0].trace.routes[0].contract.kind = ContractKind::VendorFast;
        members[2].trace.fingerprints[0].sha256.0[0] ^= 1;
        let c = compare(&members);
        assert!(c.groups[0].launches[0].deterministic);
        assert!(!c.agrees());
    }
}
