//! Comparing many traces of the same workload, recorded on many devices or
//! hosts: the same route on two devices of one class must give the same
//! bits (under every contract but `atomic-unordered`; [`promises_same_bits`]
//! is the table), so a device that disagrees with the majority is suspect.
//!
//! Traces are grouped by workload and device class (`golden::device_key`);
//! within a group each launch's route and output fingerprint are put to a
//! vote, one vote per device, and every trace whose route or fingerprint
//! differs from the majority's is an outlier, named by its file and by the
//! device facts its volatile metadata holds (ordinal, PCI bus id, UUID). A
//! tie (no majority) fails with every side listed; a trace left out of the
//! vote as another's device is a warning and is still held to the
//! majority. Outputs that were not observed (imported profiles) are never
//! voted on: only their routes are compared. Traces whose launch sets
//! differ only in GEMMs no GEMM op owns (a profile's region GEMMs) are
//! compared on the launches they share; the rest are listed as not
//! compared.
//!
//! The vote runs in bounded memory ([`compare_files`]): each trace is read
//! once, folded into per-launch tallies that keep each distinct route
//! digest and fingerprint once with a count and a bounded sample of the
//! members holding it, and dropped; only the members the report names are
//! read again. docs/fleet.md states the bound.

use crate::trace::RecordedGemmTrace;
use crate::vocab::ContractKind;
use crate::{Error, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};

mod align;
mod source;
mod tally;
mod vote;

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

/// Where two devices that ran the same route on the same inputs sit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Two devices of one class: equal name, compute capability,
    /// multiprocessor count and driver (a route records all four, and its
    /// library versions, so equal routes imply them).
    SameClass,
    /// Devices of two classes.
    AcrossClasses,
}

/// Whether the same route under contract `kind`, run on the same inputs
/// on two devices in `scope`, is promised the same output bits: the table
/// of docs/fleet.md (a test holds the two together), and the only place
/// `compare` and `gpu-to-gpu` learn it from.
///
/// On one class every contract but `atomic-unordered` is: gemm-audit's
/// kernels fix every operation's order, and cuBLAS promises the same bits
/// run to run on GPUs of one architecture and SM count for one toolkit
/// version (one active stream, atomics not allowed, which the recorder
/// refuses). Across classes only the scalar contracts are: a tensor core's
/// arithmetic and a library's kernel choice belong to the architecture.
/// An engine contract follows its `like` kind on one class and promises
/// nothing across classes (its arithmetic is the engine's own).
pub fn promises_same_bits(kind: &ContractKind, scope: Scope) -> bool {
    match (kind, scope) {
        (_, Scope::SameClass) => !matches!(kind.class(), ContractKind::AtomicUnordered),
        (ContractKind::ScalarFma | ContractKind::SplitKFixed, Scope::AcrossClasses) => true,
        (_, Scope::AcrossClasses) => false,
    }
}

/// A trace whose output of one launch is off the majority's, or (on a
/// tie) on one side of it.
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

/// What the members' outputs of one launch say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OutputVote {
    /// Every member gave the same fingerprint.
    Identical,
    /// A majority of devices gave one fingerprint; the outliers another.
    Outliers,
    /// No majority: the most common fingerprints are held by equally many
    /// devices. Nobody can say which is wrong, so every side is listed.
    Tie,
    /// The outputs were not observed (imported profiles hold placeholder
    /// fingerprints): nothing was voted, nothing is said of the bits.
    NotObserved,
}

impl OutputVote {
    /// The vote in words, for people.
    pub fn as_str(self) -> &'static str {
        match self {
            OutputVote::Identical => "identical",
            OutputVote::Outliers => "outliers",
            OutputVote::Tie => "tie",
            OutputVote::NotObserved => "not observed",
        }
    }
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
    /// Whether the contract promises the same bits for the same route on
    /// devices of one class ([`promises_same_bits`]; every contract but
    /// `atomic-unordered`). True when any member's route promises it.
    pub deterministic: bool,
    /// What the outputs say.
    pub outputs: OutputVote,
    /// Devices holding the most common fingerprint (on a tie, each leading
    /// side holds this many); `None` when the outputs were not observed.
    pub agree: Option<usize>,
    /// Devices that voted (one per device: members left out as another's
    /// device do not vote, but are still held to the majority's bits).
    pub voters: usize,
    /// The majority fingerprint; `None` on a tie or when not observed.
    pub majority: Option<String>,
    /// True when the most common fingerprints are held by equally many
    /// devices: every member is then listed in `outliers`, by side.
    pub tie: bool,
    /// Members off the majority's fingerprint, left-out members included;
    /// on a tie every member, ordered by fingerprint (one side after the
    /// other).
    pub outliers: Vec<Outlier>,
    /// Whether the members' outputs were observed: false for imported
    /// profiles, whose fingerprints are placeholders and are not voted on.
    pub observed: bool,
    /// Members whose route differs from the majority's (every member of a
    /// tie where no route has a majority). Any is a disagreement, under
    /// every contract: the same GEMM on one device class (or one job's
    /// ranks) must be served the same way.
    pub route_outliers: Vec<RouteOutlier>,
}

impl LaunchVote {
    /// Whether this launch fails its group: a member served it another
    /// way, or its contract promises the same bits on one class and a
    /// member's output differs (an outlier, or a tie). Outputs that were
    /// not observed fail nothing and pass nothing.
    pub fn fails(&self) -> bool {
        !self.route_outliers.is_empty() || (self.deterministic && !self.outliers.is_empty())
    }
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
    /// first member (another GEMM list): labels. Any fails the group.
    pub mismatched: Vec<String>,
    /// Members left out of the vote as another member's device (the same
    /// device UUID, or the same trace content where no UUID is known): one
    /// device, one vote. Labels. Their outputs and routes are still held
    /// to the majority's, and each is named in `warnings`.
    pub duplicates: Vec<String>,
    /// Members with launches that were not compared: GEMMs no GEMM op owns
    /// (a profile's region GEMMs) that not every member holds. Only the
    /// launches every member held to the vote holds are voted; each such
    /// member is also named in `warnings`. Not a failure, unless nothing
    /// is shared.
    pub not_compared: Vec<NotCompared>,
    /// Things a reader must know that are not failures: each member left
    /// out of the vote, and whose device it shares; each member with
    /// launches not compared, and how many.
    pub warnings: Vec<String>,
    /// One vote per launch.
    pub launches: Vec<LaunchVote>,
}

/// A member some of whose launches were not compared.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NotCompared {
    /// The member's label (its file).
    pub label: String,
    /// Its launches that were not compared: GEMMs no GEMM op owns that
    /// not every member holds.
    pub launches: usize,
    /// Its launches in all.
    pub of: usize,
}

impl Group {
    /// Members whose vote counted (not left out as mismatched or copies).
    pub fn voters(&self) -> usize {
        self.members - self.mismatched.len() - self.duplicates.len()
    }

    /// True when the members held to the vote share no launch: nothing
    /// was compared, which is no agreement.
    pub fn nothing_shared(&self) -> bool {
        self.launches.is_empty() && !self.not_compared.is_empty()
    }

    /// Whether no launch fails, no member was left out for another launch
    /// set and something was shared: what a group of one voter must also
    /// hold to pass where one trace per class is allowed.
    fn consistent(&self) -> bool {
        self.mismatched.is_empty()
            && !self.nothing_shared()
            && !self.launches.iter().any(LaunchVote::fails)
    }

    /// True when at least two devices voted, no member was left out for
    /// another launch set, they share a launch and no launch fails
    /// ([`LaunchVote::fails`]). One voter compares nothing, so it does not
    /// agree.
    pub fn agrees(&self) -> bool {
        self.voters() >= 2 && self.consistent()
    }

    /// Whether the outputs of every launch were observed (false for
    /// imported profiles: then only routes were compared).
    pub fn outputs_observed(&self) -> bool {
        self.launches.iter().all(|l| l.observed)
    }
}

/// The whole comparison.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Comparison {
    /// One per (workload, device class).
    pub groups: Vec<Group>,
    /// Every group's warnings, each prefixed with its group.
    pub warnings: Vec<String>,
}

impl Comparison {
    /// True when every group agrees.
    pub fn agrees(&self) -> bool {
        self.groups.iter().all(Group::agrees)
    }

    /// Like [`Comparison::agrees`], but a group with a single voter passes
    /// (when one trace per device class is expected), unless a member left
    /// out as its device disagrees with it.
    pub fn agrees_allowing_single(&self) -> bool {
        self.groups
            .iter()
            .all(|g| g.agrees() || (g.voters() == 1 && g.consistent()))
    }

    /// Whether the outputs of every group were observed.
    pub fn outputs_observed(&self) -> bool {
        self.groups.iter().all(Group::outputs_observed)
    }
}

/// Groups `members` by workload and device class and votes on every launch.
pub fn compare(members: &[Member]) -> Comparison {
    match run(&source::InMemory(members)) {
        Ok(c) => c,
        Err(never) => match never {},
    }
}

/// [`compare`] over the trace files `paths` name ([`trace_files`]), in
/// memory that does not grow with their number: each file is read once and
/// folded into per-launch tallies, and read again only when the report
/// names it (an outlier, a side of a tie, the holder of the route an
/// outlier's is measured against). Members are labelled by their paths.
/// A file that no longer holds what was voted when it is read again is
/// [`Error::TraceChanged`].
pub fn compare_files(paths: &[PathBuf]) -> Result<Comparison> {
    run(&source::Files(trace_files(paths)?))
}

fn run<S: source::Source>(members: &S) -> std::result::Result<Comparison, S::Error> {
    let mut out = Comparison {
        groups: Vec::new(),
        warnings: Vec::new(),
    };
    for (_, tally) in tally::tally_all(members)? {
        let g = vote::judge(tally, members)?;
        out.warnings.extend(
            g.warnings
                .iter()
                .map(|w| format!("{} on {}: {w}", g.workload, g.device)),
        );
        out.groups.push(g);
    }
    Ok(out)
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
        assert_eq!(g.launches[1].agree, Some(3));
        assert_eq!(g.launches[1].outputs, OutputVote::Outliers);
        assert_eq!(g.launches[0].outputs, OutputVote::Identical);
        // Without the fault everyone agrees.
        members[2].trace.fingerprints[1].sha256.0[0] ^= 1;
        assert!(compare(&members).agrees());
    }

    /// The same vendor route on two devices of one class is promised the
    /// same bits (cuBLAS: one architecture, SM count and toolkit): a
    /// difference fails. `atomic-unordered` promises nothing: reported,
    /// never failed.
    #[test]
    fn vendor_routes_are_held_to_one_class_bits_atomic_ones_are_not() {
        let mut members: Vec<Member> = (0..3)
            .map(|i| member(&format!("h{i}"), &format!("u{i}")))
            .collect();
        for m in &mut members {
            m.trace.routes[0].contract.kind = ContractKind::VendorFast;
        }
        members[1].trace.fingerprints[0].sha256.0[0] ^= 1;
        let c = compare(&members);
        let l = &c.groups[0].launches[0];
        assert!(l.deterministic && l.fails(), "{l:?}");
        assert_eq!(l.outliers.len(), 1);
        assert!(!c.agrees(), "a vendor route's bits differ on one class");
        for m in &mut members {
            m.trace.routes[0].contract.kind = ContractKind::AtomicUnordered;
        }
        let c = compare(&members);
        let l = &c.groups[0].launches[0];
        assert_eq!(l.outliers.len(), 1, "reported");
        assert!(!l.deterministic && !l.fails(), "{l:?}");
        assert!(c.agrees(), "atomic-unordered promises no bits");
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
        assert!(l.tie && l.majority.is_none(), "{l:?}");
        assert_eq!(l.outputs, OutputVote::Tie);
        // Every side is listed, the copy on its side, and the tie fails.
        let sides: Vec<(&str, &str)> = l
            .outliers
            .iter()
            .map(|o| (o.label.as_str(), o.fingerprint.as_str()))
            .collect();
        assert_eq!(sides.len(), 3, "{sides:?}");
        let side_of = |label: &str| sides.iter().find(|s| s.0 == label).unwrap().1;
        assert_eq!(side_of("bad.gat"), side_of("bad-copy.gat"));
        assert_ne!(side_of("bad.gat"), side_of("good.gat"));
        assert!(l.fails() && !c.agrees());
        assert_eq!(g.warnings.len(), 1);
        assert!(
            g.warnings[0].starts_with("bad-copy.gat names the same device as bad.gat"),
            "{:?}",
            g.warnings
        );
        assert_eq!(c.warnings.len(), 1);
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
        members[0].trace.routes[0].contract.kind = ContractKind::AtomicUnordered;
        members[2].trace.fingerprints[0].sha256.0[0] ^= 1;
        let c = compare(&members);
        assert!(c.groups[0].launches[0].deterministic);
        assert!(!c.agrees());
    }

    /// A member left out as another's device weighs nothing in the vote
    /// but is held to its outcome: when it is the one that differs, the
    /// launch fails and names it, even with one voter allowed.
    #[test]
    fn a_left_out_member_is_still_held_to_the_bits() {
        let a = member("a.gat", "uuid-a");
        let mut same_card = member("b.gat", "uuid-a");
        same_card.trace.fingerprints[1].sha256.0[0] ^= 1;
        let c = member("c.gat", "uuid-c");
        let cmp = compare(&[a.clone(), same_card.clone(), c]);
        let g = &cmp.groups[0];
        assert_eq!((g.voters(), g.duplicates.len()), (2, 1));
        let l = &g.launches[1];
        assert_eq!(l.outputs, OutputVote::Outliers);
        assert_eq!(l.agree, Some(2));
        assert_eq!(l.outliers.len(), 1);
        assert_eq!(l.outliers[0].label, "b.gat");
        assert!(!cmp.agrees());
        assert!(
            g.warnings[0]
                .contains("b.gat names the same device as a.gat (cuda.device.uuid uuid-a)"),
            "{:?}",
            g.warnings
        );
        // One voter and its disagreeing twin: no pass, even allowed single.
        let cmp = compare(&[a, same_card]);
        assert_eq!(cmp.groups[0].voters(), 1);
        assert!(!cmp.agrees_allowing_single());
    }

    /// Outputs that were not observed are never voted on: no count, no
    /// majority, no "identical"; the routes are still compared and fail.
    #[test]
    fn unobserved_outputs_are_not_voted_routes_are() {
        let mut members: Vec<Member> = (0..2)
            .map(|i| member(&format!("r{i}"), &format!("u{i}")))
            .collect();
        for m in &mut members {
            m.trace.fingerprint_mode = crate::FingerprintMode::NotObserved;
        }
        // Placeholder fingerprints that differ are not a disagreement.
        members[1].trace.fingerprints[0].sha256.0[0] ^= 1;
        let c = compare(&members);
        assert!(!c.outputs_observed());
        for l in &c.groups[0].launches {
            assert_eq!(l.outputs, OutputVote::NotObserved);
            assert_eq!((l.agree, l.majority.as_ref(), l.tie), (None, None, false));
            assert!(l.outliers.is_empty() && !l.observed);
        }
        assert!(c.agrees(), "the routes agree");
        members[1].trace.routes[2].kernel_symbol.push('x');
        let c = compare(&members);
        assert!(c.groups[0].launches[2].fails() && !c.agrees());
    }

    /// The promise table of docs/fleet.md is the one [`promises_same_bits`]
    /// holds, row for row.
    #[test]
    fn the_promise_table_in_fleet_md_is_the_code() {
        let doc = include_str!("../../../docs/fleet.md");
        let word = |promised: bool| if promised { "same bits" } else { "no promise" };
        let mut rows = 0;
        for line in doc.lines().filter(|l| l.starts_with("| `")) {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let name = cells[1].trim_matches('`');
            let Some(kind) = ContractKind::parse(name) else {
                continue;
            };
            rows += 1;
            for (cell, scope) in [
                (cells[2], Scope::SameClass),
                (cells[3], Scope::AcrossClasses),
            ] {
                assert!(
                    cell.starts_with(word(promises_same_bits(&kind, scope))),
                    "{name} {scope:?}: fleet.md says {cell:?}"
                );
            }
        }
        assert_eq!(
            rows,
            ContractKind::ALL.len(),
            "one row per built-in contract"
        );
        let engine = ContractKind::engine("fold", ContractKind::SplitKFixed).unwrap();
        assert!(promises_same_bits(&engine, Scope::SameClass));
        assert!(!promises_same_bits(&engine, Scope::AcrossClasses));
    }

    /// A side held by more members than a tally samples is found by a
    /// second reading: every member on it is named, in member order, and
    /// every member of a tie that large is listed by side.
    #[test]
    fn sides_larger_than_the_sample_are_named_in_full() {
        let n = tally::SAMPLE + 8;
        let mut members: Vec<Member> = (0..3 * n)
            .map(|i| member(&format!("m{i:03}.gat"), &format!("u{i}")))
            .collect();
        // Every third member's launch 2 differs: n outliers, 2n agree.
        for m in members.iter_mut().skip(1).step_by(3) {
            m.trace.fingerprints[2].sha256.0[0] ^= 1;
        }
        let c = compare(&members);
        let l = &c.groups[0].launches[2];
        assert_eq!((l.agree, l.outputs), (Some(2 * n), OutputVote::Outliers));
        let named: Vec<&str> = l.outliers.iter().map(|o| o.label.as_str()).collect();
        let want: Vec<String> = (0..n).map(|k| format!("m{:03}.gat", 3 * k + 1)).collect();
        assert_eq!(named, want);
        assert!(
            l.outliers
                .iter()
                .all(|o| o.device.contains("cuda.device.uuid=u"))
        );
        // A tie of two sides of n + 4: everyone listed, one side after the other.
        let mut tie: Vec<Member> = members[..2 * n + 8].to_vec();
        for (i, m) in tie.iter_mut().enumerate() {
            m.trace.fingerprints[2] = members[0].trace.fingerprints[2];
            if i % 2 == 1 {
                m.trace.fingerprints[2].sha256.0[0] ^= 1;
            }
        }
        let c = compare(&tie);
        let l = &c.groups[0].launches[2];
        assert!(l.tie, "{:?}", l.agree);
        assert_eq!(l.outliers.len(), 2 * n + 8);
        let sides: Vec<&[Outlier]> = l
            .outliers
            .chunk_by(|a, b| a.fingerprint == b.fingerprint)
            .collect();
        assert_eq!(sides.len(), 2);
        assert!(sides.iter().all(|s| s.len() == n + 4));
        // Routes too: a route side that large is named with its fields.
        for m in members.iter_mut().step_by(3) {
            m.trace.routes[1].kernel_symbol.push_str("_v2");
        }
        let c = compare(&members);
        let r = &c.groups[0].launches[1].route_outliers;
        assert_eq!(r.len(), n);
        assert!(
            r.iter()
                .all(|o| o.differs.iter().any(|d| d.contains("_v2"))),
            "{r:?}"
        );
    }

    /// Files read again for the report must hold what was voted: one
    /// rewritten between the passes is an error naming it, never a report
    /// mixing two versions.
    #[test]
    fn a_member_changed_between_the_passes_is_refused() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        struct Rewritten {
            members: Vec<Member>,
            reads: Vec<AtomicUsize>,
        }
        impl source::Source for Rewritten {
            type Error = Error;
            fn len(&self) -> usize {
                self.members.len()
            }
            fn label(&self, i: usize) -> String {
                self.members[i].label.clone()
            }
            fn read(&self, i: usize) -> Result<std::borrow::Cow<'_, Member>> {
                let mut m = self.members[i].clone();
                // Member 2 is rewritten after its first reading.
                if i == 2 && self.reads[i].fetch_add(1, Ordering::Relaxed) > 0 {
                    m.trace.fingerprints[0].sha256.0[5] ^= 1;
                }
                Ok(std::borrow::Cow::Owned(m))
            }
            fn changed(&self, i: usize) -> Option<Error> {
                Some(Error::TraceChanged {
                    path: self.members[i].label.clone().into(),
                })
            }
        }
        let mut members: Vec<Member> = (0..4)
            .map(|i| member(&format!("n{i}.gat"), &format!("u{i}")))
            .collect();
        members[2].trace.fingerprints[1].sha256.0[0] ^= 1;
        let reads = (0..4).map(|_| AtomicUsize::new(0)).collect();
        let e = run(&Rewritten { members, reads }).unwrap_err();
        assert!(matches!(&e, Error::TraceChanged { path } if path.ends_with("n2.gat")));
        assert!(
            e.to_string().contains("changed while compare read it"),
            "{e}"
        );
    }
}
