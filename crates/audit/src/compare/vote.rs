//! The vote of one group, from its tallies: per launch the majority route
//! and fingerprint (one vote per device, the members left out as another's
//! device held to the outcome), then a second reading of only the members
//! the report names (the outliers, every side of a tie, the holder of the
//! route they are measured against) for their devices and the fields that
//! differ. A side too large for its sample is found by reading the
//! group's members again.

use super::align::Prepared;
use super::source::Source;
use super::tally::{GroupTally, Role, Value, Values};
use super::{Group, LaunchVote, NotCompared, Outlier, OutputVote, RouteOutlier};
use crate::Digest;
use crate::trace::RecordedGemmTrace;
use std::collections::{BTreeMap, HashMap};

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

/// Which tally of a launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Kind {
    Route,
    Output,
}

/// The route vote of one launch: the majority (when one route has the
/// most votes alone) and the route the others are measured against (the
/// majority's, else the first voter's).
struct RouteDecision {
    majority: Option<usize>,
    reference: usize,
}

fn route_decision(v: &Values) -> RouteDecision {
    let most = v.list.iter().map(|x| x.votes).max().unwrap_or(0);
    let mut leaders = v.list.iter().enumerate().filter(|(_, x)| x.votes == most);
    let majority = match (leaders.next(), leaders.next()) {
        (Some((i, _)), None) => Some(i),
        _ => None,
    };
    let first = v
        .list
        .iter()
        .enumerate()
        .filter_map(|(i, x)| x.first_voter.map(|s| (s, i)))
        .min()
        .map_or(0, |(_, i)| i);
    RouteDecision {
        majority,
        reference: majority.unwrap_or(first),
    }
}

/// The output vote of one launch: the devices on the most common
/// fingerprint, the leaders (by fingerprint) and the majority when one
/// leads alone.
struct OutputDecision {
    most: usize,
    majority: Option<usize>,
}

fn output_decision(v: &Values) -> OutputDecision {
    let most = v.list.iter().map(|x| x.votes).max().unwrap_or(0);
    let mut leaders: Vec<usize> = (0..v.list.len())
        .filter(|&i| v.list[i].votes == most)
        .collect();
    leaders.sort_by_key(|&i| v.list[i].key.0);
    OutputDecision {
        most,
        majority: (leaders.len() == 1).then(|| leaders[0]),
    }
}

/// Per shared launch, the decisions and the values the report names.
struct Decisions {
    routes: Vec<RouteDecision>,
    outputs: Vec<Option<OutputDecision>>,
}

impl Decisions {
    fn of(g: &GroupTally, shared: &[usize]) -> Decisions {
        Decisions {
            routes: shared
                .iter()
                .map(|&j| route_decision(&g.launches[j].routes))
                .collect(),
            outputs: shared
                .iter()
                .map(|&j| g.observed.then(|| output_decision(&g.launches[j].outputs)))
                .collect(),
        }
    }

    /// The named values: (position in `shared`, tally, value), every value
    /// off its launch's majority.
    fn named(&self, g: &GroupTally, shared: &[usize]) -> Vec<(usize, Kind, usize)> {
        let mut out = Vec::new();
        for (p, &j) in shared.iter().enumerate() {
            let l = &g.launches[j];
            let majority = self.routes[p].majority;
            out.extend(
                (0..l.routes.list.len())
                    .filter(|&v| Some(v) != majority)
                    .map(|v| (p, Kind::Route, v)),
            );
            if let Some(o) = &self.outputs[p] {
                out.extend(
                    (0..l.outputs.list.len())
                        .filter(|&v| Some(v) != o.majority)
                        .map(|v| (p, Kind::Output, v)),
                );
            }
        }
        out
    }
}

fn tally_of(g: &GroupTally, j: usize, kind: Kind) -> &Values {
    match kind {
        Kind::Route => &g.launches[j].routes,
        Kind::Output => &g.launches[j].outputs,
    }
}

/// A member read again: the member and its alignment, digests and summary.
struct Reread<'s> {
    member: std::borrow::Cow<'s, super::Member>,
    prepared: Prepared,
}

impl Reread<'_> {
    /// Its key of `kind` at its launch `i`.
    fn key_at(&self, i: usize, kind: Kind) -> Digest {
        match kind {
            Kind::Route => self.prepared.keys[i],
            Kind::Output => self.member.trace.fingerprints[i].sha256,
        }
    }
}

/// Member `seat` read again: the error when it no longer holds what was
/// voted (a file rewritten between the passes).
fn reread<'s, S: Source>(
    g: &GroupTally,
    seat: usize,
    source: &'s S,
) -> Result<Reread<'s>, S::Error> {
    let index = g.seats[seat].member;
    let member = source.read(index)?;
    let prepared = g.reference.prepare(&member.trace);
    if prepared.summary != g.seats[seat].summary
        && let Some(e) = source.changed(index)
    {
        return Err(e);
    }
    Ok(Reread { member, prepared })
}

/// Completes the member lists of named values held by more members than
/// their sample: reads every member of the group that was held to the
/// vote again and finds those holding them.
fn complete<S: Source>(
    g: &mut GroupTally,
    shared: &[usize],
    named: &[(usize, Kind, usize)],
    source: &S,
) -> Result<(), S::Error> {
    let wanted: Vec<(usize, Kind, usize)> = named
        .iter()
        .copied()
        .filter(|&(p, kind, v)| !tally_of(g, shared[p], kind).list[v].complete())
        .collect();
    if wanted.is_empty() {
        return Ok(());
    }
    let mut found: HashMap<(usize, Kind, usize), Vec<usize>> = HashMap::new();
    for seat in 0..g.seats.len() {
        if g.seats[seat].role == Role::Other {
            continue;
        }
        let read = reread(g, seat, source)?;
        for &(p, kind, v) in &wanted {
            let want = tally_of(g, shared[p], kind).list[v].key;
            if let Some(i) = read.prepared.alignment.index(shared[p])
                && read.key_at(i, kind) == want
            {
                found.entry((p, kind, v)).or_default().push(seat);
            }
        }
    }
    for (p, kind, v) in wanted {
        let l = &mut g.launches[shared[p]];
        let value: &mut Value = match kind {
            Kind::Route => &mut l.routes.list[v],
            Kind::Output => &mut l.outputs.list[v],
        };
        value.sample = found.remove(&(p, kind, v)).unwrap_or_default();
    }
    Ok(())
}

/// What the second reading learns of the members the report names.
#[derive(Default)]
struct Named {
    /// Per seat: the device as its trace names it.
    devices: HashMap<usize, String>,
    /// Per (shared launch, seat): the route fields that differ.
    differs: HashMap<(usize, usize), Vec<String>>,
}

/// Reads the members the report names: first the holders of the routes
/// outliers are measured against, then each named member once.
fn name<S: Source>(
    g: &GroupTally,
    shared: &[usize],
    d: &Decisions,
    named: &[(usize, Kind, usize)],
    source: &S,
) -> Result<Named, S::Error> {
    // Per seat, the launches (positions in `shared`) whose reference route it holds.
    let mut holders: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    // Per seat, what it is named for: (position, kind, value).
    let mut needs: BTreeMap<usize, Vec<(usize, Kind, usize)>> = BTreeMap::new();
    for &(p, kind, v) in named {
        let l = tally_of(g, shared[p], kind);
        for &seat in &l.list[v].sample {
            needs.entry(seat).or_default().push((p, kind, v));
        }
        if kind == Kind::Route {
            let r = &l.list[d.routes[p].reference];
            if let Some(seat) = r.first_voter.or(r.sample.first().copied()) {
                let list = holders.entry(seat).or_default();
                if list.last() != Some(&p) {
                    list.push(p);
                }
            }
        }
    }
    let mut references: HashMap<usize, crate::ResolvedGemmRoute> = HashMap::new();
    for (seat, launches) in holders {
        let read = reread(g, seat, source)?;
        for p in launches {
            if let Some(i) = read.prepared.alignment.index(shared[p]) {
                references.insert(p, read.member.trace.routes[i].clone());
            }
        }
    }
    let mut out = Named::default();
    for (seat, list) in needs {
        let read = reread(g, seat, source)?;
        let t = &read.member.trace;
        out.devices.insert(seat, device_of(t));
        for (p, kind, v) in list {
            let Some(i) = read.prepared.alignment.index(shared[p]) else {
                continue;
            };
            if kind != Kind::Route {
                continue;
            }
            let differs = if v == d.routes[p].reference {
                vec!["(a tie: no route has a majority)".to_string()]
            } else {
                match references.get(&p) {
                    Some(reference) => crate::digest::field_changes(reference, &t.routes[i])
                        .into_iter()
                        .map(|c| format!("{}: {} -> {}", c.field, c.expected, c.found))
                        .collect(),
                    None => Vec::new(),
                }
            };
            out.differs.insert((p, seat), differs);
        }
    }
    Ok(out)
}

/// The members off launch `p`'s majority route, side by side: the sides
/// of the routes voters hold in the order voters first held them, then
/// the routes only copies hold; within a side voters, then copies, in
/// member order.
fn route_outliers<S: Source>(
    g: &GroupTally,
    j: usize,
    p: usize,
    d: &RouteDecision,
    named: &Named,
    source: &S,
) -> Vec<RouteOutlier> {
    let list = &g.launches[j].routes.list;
    let mut voted: Vec<usize> = (0..list.len())
        .filter(|&v| list[v].first_voter.is_some())
        .collect();
    voted.sort_by_key(|&v| list[v].first_voter);
    let side = |v: usize| voted.iter().position(|&x| x == v).unwrap_or(voted.len());
    let mut rows: Vec<(usize, bool, usize)> = Vec::new();
    for (v, value) in list.iter().enumerate() {
        if Some(v) == d.majority {
            continue;
        }
        rows.extend(
            value
                .sample
                .iter()
                .map(|&seat| (side(v), g.seats[seat].role == Role::Copy, seat)),
        );
    }
    rows.sort();
    rows.into_iter()
        .map(|(_, _, seat)| RouteOutlier {
            label: source.label(g.seats[seat].member),
            device: named.devices.get(&seat).cloned().unwrap_or_default(),
            differs: named.differs.get(&(p, seat)).cloned().unwrap_or_default(),
        })
        .collect()
}

/// The vote on shared launch `j` (position `p`).
fn launch_vote<S: Source>(
    g: &GroupTally,
    j: usize,
    p: usize,
    d: &Decisions,
    named: &Named,
    source: &S,
) -> LaunchVote {
    let l = &g.launches[j];
    let mut out = LaunchVote {
        launch: j,
        gemm: g.reference.names[j].clone(),
        contract: g.reference.contracts[j].clone(),
        deterministic: l.deterministic,
        outputs: OutputVote::NotObserved,
        agree: None,
        voters: g.voters,
        majority: None,
        tie: false,
        outliers: Vec::new(),
        observed: g.observed,
        route_outliers: route_outliers(g, j, p, &d.routes[p], named, source),
    };
    let Some(o) = &d.outputs[p] else {
        return out;
    };
    let list = &l.outputs.list;
    out.tie = o.majority.is_none();
    out.majority = o.majority.map(|v| list[v].key.to_hex());
    out.agree = Some(o.most);
    let mut rows: Vec<(&[u8; 32], bool, usize)> = Vec::new();
    for (v, value) in list.iter().enumerate() {
        if Some(v) != o.majority {
            rows.extend(
                value
                    .sample
                    .iter()
                    .map(|&seat| (&value.key.0, g.seats[seat].role == Role::Copy, seat)),
            );
        }
    }
    rows.sort();
    out.outliers = rows
        .into_iter()
        .map(|(key, _, seat)| Outlier {
            label: source.label(g.seats[seat].member),
            device: named.devices.get(&seat).cloned().unwrap_or_default(),
            fingerprint: Digest(*key).to_hex(),
        })
        .collect();
    out.outputs = if out.tie {
        OutputVote::Tie
    } else if out.outliers.is_empty() {
        OutputVote::Identical
    } else {
        OutputVote::Outliers
    };
    out
}

/// Members whose launches were not all compared (held by not every member
/// held to the vote), and the warning saying so for each.
fn not_compared<S: Source>(
    g: &GroupTally,
    shared: usize,
    source: &S,
) -> (Vec<NotCompared>, Vec<String>) {
    let rows: Vec<NotCompared> = g
        .seats
        .iter()
        .filter(|s| s.role != Role::Other && s.launches > shared)
        .map(|s| NotCompared {
            label: source.label(s.member),
            launches: s.launches - shared,
            of: s.launches,
        })
        .collect();
    let compared = if shared == 0 {
        "no GEMM is in every trace".to_string()
    } else {
        format!("compared on the {shared} GEMMs every trace holds")
    };
    let warnings = rows
        .iter()
        .map(|r| {
            format!(
                "{}: {} of {} GEMMs not compared (region GEMMs no GEMM op owns, not in every trace); {compared}",
                r.label, r.launches, r.of
            )
        })
        .collect();
    (rows, warnings)
}

/// The comparison of one group from its tallies: the launches every member
/// held to the vote holds are voted, the rest listed as not compared.
pub(super) fn judge<S: Source>(mut g: GroupTally, source: &S) -> Result<Group, S::Error> {
    let shared = g.shared();
    let d = Decisions::of(&g, &shared);
    let named_values = d.named(&g, &shared);
    complete(&mut g, &shared, &named_values, source)?;
    let named = name(&g, &shared, &d, &named_values, source)?;
    let launches = shared
        .iter()
        .enumerate()
        .map(|(p, &j)| launch_vote(&g, j, p, &d, &named, source))
        .collect();
    let (not_compared, notes) = not_compared(&g, shared.len(), source);
    let mut warnings = std::mem::take(&mut g.warnings);
    warnings.extend(notes);
    Ok(Group {
        workload: g.workload,
        device: g.device,
        members: g.seats.len(),
        mismatched: g.mismatched,
        duplicates: g.duplicates,
        not_compared,
        warnings,
        launches,
    })
}
