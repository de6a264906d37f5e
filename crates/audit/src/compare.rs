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

use crate::route::ContractKind;
use crate::trace::RecordedGemmTrace;
use serde::Serialize;
use std::collections::BTreeMap;

/// One trace in a comparison: where it came from and what it holds.
#[derive(Debug, Clone)]
pub struct Member {
    /// A label for people: the file it was read from.
    pub label: String,
    /// The trace.
    pub trace: RecordedGemmTrace,
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
    /// The majority fingerprint.
    pub majority: String,
    /// Members that disagreed (for deterministic launches: suspect devices).
    pub outliers: Vec<Outlier>,
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
    /// One vote per launch.
    pub launches: Vec<LaunchVote>,
}

impl Group {
    /// True when no deterministic launch has an outlier and no member was
    /// left out.
    pub fn agrees(&self) -> bool {
        self.mismatched.is_empty()
            && self
                .launches
                .iter()
                .all(|l| !l.deterministic || l.outliers.is_empty())
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
        let (same, mismatched): (Vec<&Member>, Vec<&Member>) = list
            .iter()
            .partition(|m| m.trace.launch_set.launch_count == first.launch_set.launch_count);
        let mut launches = Vec::new();
        for (i, route) in first.routes.iter().enumerate() {
            let mut votes: BTreeMap<String, Vec<&Member>> = BTreeMap::new();
            for m in &same {
                let fp = m.trace.fingerprints[i].sha256.to_hex();
                votes.entry(fp).or_default().push(m);
            }
            // The majority; a tie goes to the smaller fingerprint, so the
            // result does not depend on input order.
            let (majority, agree) = votes
                .iter()
                .max_by(|a, b| a.1.len().cmp(&b.1.len()).then(b.0.cmp(a.0)))
                .map(|(fp, ms)| (fp.clone(), ms.len()))
                .unwrap_or_default();
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
            launches.push(LaunchVote {
                launch: i,
                gemm: route.gemm.clone(),
                contract: route.contract.to_string(),
                deterministic: deterministic(&route.contract.kind),
                agree,
                voters: same.len(),
                majority,
                outliers,
            });
        }
        out.push(Group {
            workload,
            device,
            members: list.len(),
            mismatched: mismatched.iter().map(|m| m.label.clone()).collect(),
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
        let mut members: Vec<Member> = (0..3).map(|i| member(&format!("h{i}"), "u")).collect();
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
        assert!(cmp.agrees());
    }
}
