//! The first pass of a comparison: each member, read once, is folded into
//! its group's per-launch tallies and dropped. A tally keeps, per launch,
//! each distinct route digest and output fingerprint once, with how many
//! devices voted for it and the first [`SAMPLE`] members that hold it:
//! an agreeing fleet keeps one value per launch however many members it
//! has. Per member it keeps only a seat (its index, role and launch count)
//! and its device key (one device, one vote).

use super::align::{Alignment, Reference};
use super::{Member, Scope, promises_same_bits};
use crate::Digest;
use crate::trace::RecordedGemmTrace;
use std::collections::HashMap;
use std::collections::hash_map::Entry;

/// Members kept per distinct value: a value held by more (an outlier side
/// that large, or a tie) is found again by a second reading of the
/// group's members.
pub(super) const SAMPLE: usize = 32;

/// Domain of a route's digest in a tally (never stored).
const ROUTE_DOMAIN: &str = "gemm-audit/compare-route/v1";

/// The digest a tally keeps of a route: equal exactly when the routes are
/// (every field of a route is framed).
pub(super) fn route_key(r: &crate::ResolvedGemmRoute) -> Digest {
    crate::digest::framed_digest(ROUTE_DOMAIN, r)
}

/// What tells one device from another in a vote.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum DeviceKey {
    Device(String),
    Uuid(String),
    Content(Digest),
}

/// The identity of the device a member ran on, for one-device-one-vote:
/// the caller's device, else its UUID where the trace records one, else
/// the trace's own content.
pub(super) fn device_key(m: &Member) -> DeviceKey {
    if let Some(d) = &m.device {
        return DeviceKey::Device(d.clone());
    }
    let t = &m.trace;
    match t.volatile.get("cuda.device.uuid") {
        Some(uuid) => DeviceKey::Uuid(uuid.clone()),
        None => {
            let bytes = t.to_bytes().unwrap_or_default();
            DeviceKey::Content(Digest::sha256(&bytes))
        }
    }
}

/// The warning for `copy`, left out of the vote as `twin`'s device.
fn left_out_warning(copy: &str, twin: &str, key: &DeviceKey) -> String {
    let why = match key {
        DeviceKey::Device(d) => format!("ran on the same device as {twin} ({d})"),
        DeviceKey::Uuid(u) => format!("names the same device as {twin} (cuda.device.uuid {u})"),
        DeviceKey::Content(_) => {
            format!("is a copy of {twin} (the same content, no device UUID)")
        }
    };
    format!(
        "{copy} {why}: left out of the vote (one device, one vote); its routes and outputs are still compared"
    )
}

/// A member as a pass read it: the member, its device key, its routes'
/// digests and its summary (computed where it was read).
pub(super) struct Read<'a> {
    pub(super) member: std::borrow::Cow<'a, Member>,
    pub(super) device: DeviceKey,
    pub(super) routes: Vec<Digest>,
    pub(super) summary: u64,
}

impl<'a> Read<'a> {
    /// `member` with its device key, route digests and summary.
    pub(super) fn of(member: std::borrow::Cow<'a, Member>) -> Read<'a> {
        let device = device_key(&member);
        let t = &member.trace;
        let routes: Vec<Digest> = t.routes.iter().map(route_key).collect();
        let summary = summary(t, &routes);
        Read {
            member,
            device,
            routes,
            summary,
        }
    }
}

/// Eight bytes of a digest of everything a tally takes from a trace (its
/// routes, fingerprints, owners and output mode): a member read again
/// for the report is the one that was voted when they are equal.
fn summary(t: &RecordedGemmTrace, routes: &[Digest]) -> u64 {
    let mut bytes = Vec::with_capacity(routes.len() * 65 + 8);
    for (i, (r, f)) in routes.iter().zip(&t.fingerprints).enumerate() {
        bytes.extend_from_slice(&r.0);
        bytes.extend_from_slice(&f.sha256.0);
        bytes.push(u8::from(super::align::region(t, i).is_some()));
    }
    bytes.push(u8::from(t.outputs_observed()));
    let d = Digest::sha256(&bytes);
    u64::from_le_bytes([
        d.0[0], d.0[1], d.0[2], d.0[3], d.0[4], d.0[5], d.0[6], d.0[7],
    ])
}

/// How a member takes part in its group's vote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// One vote: the first member of its device.
    Voter,
    /// Another member of a voter's device: no vote, held to the outcome.
    Copy,
    /// Another launch set: left out.
    Other,
}

/// A member's place in its group.
#[derive(Debug, Clone, Copy)]
pub(super) struct Seat {
    /// Its index in the comparison's members.
    pub(super) member: usize,
    pub(super) role: Role,
    /// Its launch count.
    pub(super) launches: usize,
    /// What it held when it was voted (see [`Read::of`]).
    pub(super) summary: u64,
}

/// One distinct route or fingerprint of a launch.
#[derive(Debug)]
pub(super) struct Value {
    pub(super) key: Digest,
    /// Voters holding it.
    pub(super) votes: usize,
    /// The first voter holding it (a seat).
    pub(super) first_voter: Option<usize>,
    /// Members holding it, copies included.
    pub(super) held: usize,
    /// The first [`SAMPLE`] seats holding it: all of them when `held`
    /// is no more.
    pub(super) sample: Vec<usize>,
}

impl Value {
    /// Whether `sample` lists every member holding it.
    pub(super) fn complete(&self) -> bool {
        self.sample.len() == self.held
    }
}

/// The distinct values of one launch, in the order first seen.
#[derive(Debug, Default)]
pub(super) struct Values {
    pub(super) list: Vec<Value>,
    /// Where each key is in `list`, once it is long (a fleet that agrees
    /// has one value and never needs it).
    index: HashMap<Digest, usize>,
}

/// From this many values on, a launch's values are found by hash.
const INDEXED: usize = 8;

impl Values {
    /// Where `key` is, if held.
    pub(super) fn find(&self, key: &Digest) -> Option<usize> {
        if self.list.len() > INDEXED {
            self.index.get(key).copied()
        } else {
            self.list.iter().position(|v| v.key == *key)
        }
    }

    fn add(&mut self, key: Digest, seat: usize, voter: bool) {
        let at = match self.find(&key) {
            Some(at) => at,
            None => {
                self.list.push(Value {
                    key,
                    votes: 0,
                    first_voter: None,
                    held: 0,
                    sample: Vec::new(),
                });
                let at = self.list.len() - 1;
                if self.list.len() > INDEXED {
                    if self.index.is_empty() {
                        self.index = self
                            .list
                            .iter()
                            .enumerate()
                            .map(|(i, v)| (v.key, i))
                            .collect();
                    } else {
                        self.index.insert(key, at);
                    }
                }
                at
            }
        };
        let v = &mut self.list[at];
        v.held += 1;
        if v.sample.len() < SAMPLE {
            v.sample.push(seat);
        }
        if voter {
            v.votes += 1;
            v.first_voter.get_or_insert(seat);
        }
    }
}

/// The tallies of one launch of the reference.
#[derive(Debug, Default)]
pub(super) struct LaunchTally {
    /// Members (voters and copies) holding it.
    pub(super) held: usize,
    /// Whether any holder's route promises the same bits on one class.
    pub(super) deterministic: bool,
    pub(super) routes: Values,
    /// Empty once a member's outputs were not observed.
    pub(super) outputs: Values,
}

/// The first pass's record of one (workload, device class) group.
#[derive(Debug)]
pub(super) struct GroupTally {
    pub(super) workload: String,
    pub(super) device: String,
    pub(super) reference: Reference,
    pub(super) seats: Vec<Seat>,
    pub(super) mismatched: Vec<String>,
    pub(super) duplicates: Vec<String>,
    pub(super) warnings: Vec<String>,
    /// Seats that voted or were held to the vote (not another launch set).
    pub(super) aligned: usize,
    pub(super) voters: usize,
    /// Whether every aligned member's outputs were observed.
    pub(super) observed: bool,
    pub(super) launches: Vec<LaunchTally>,
    devices: HashMap<DeviceKey, usize>,
}

impl GroupTally {
    /// A group whose first member is `first`.
    pub(super) fn new(workload: String, device: String, first: &RecordedGemmTrace) -> GroupTally {
        let reference = Reference::of(first);
        let launches = (0..reference.len())
            .map(|_| LaunchTally::default())
            .collect();
        GroupTally {
            workload,
            device,
            reference,
            seats: Vec::new(),
            mismatched: Vec::new(),
            duplicates: Vec::new(),
            warnings: Vec::new(),
            aligned: 0,
            voters: 0,
            observed: true,
            launches,
            devices: HashMap::new(),
        }
    }

    /// Folds member `index` into the tallies (`label_of` names the member
    /// whose device a copy shares).
    pub(super) fn fold(
        &mut self,
        index: usize,
        read: &Read<'_>,
        label_of: &dyn Fn(usize) -> String,
    ) {
        let t = &read.member.trace;
        let seat = self.seats.len();
        let alignment = self.reference.align(t);
        let mut role = Role::Voter;
        if alignment == Alignment::Other {
            role = Role::Other;
            self.mismatched.push(read.member.label.clone());
        } else {
            match self.devices.entry(read.device.clone()) {
                Entry::Occupied(e) => {
                    let twin = label_of(self.seats[*e.get()].member);
                    self.warnings
                        .push(left_out_warning(&read.member.label, &twin, &read.device));
                    self.duplicates.push(read.member.label.clone());
                    role = Role::Copy;
                }
                Entry::Vacant(e) => {
                    e.insert(seat);
                    self.voters += 1;
                }
            }
        }
        self.seats.push(Seat {
            member: index,
            role,
            launches: t.routes.len(),
            summary: read.summary,
        });
        if role == Role::Other {
            return;
        }
        self.aligned += 1;
        if self.observed && !t.outputs_observed() {
            // Placeholders are never voted on: keep none of them.
            self.observed = false;
            for l in &mut self.launches {
                l.outputs = Values::default();
            }
        }
        for (j, l) in self.launches.iter_mut().enumerate() {
            let Some(i) = alignment.index(j) else {
                continue;
            };
            l.held += 1;
            l.deterministic |= promises_same_bits(&t.routes[i].contract.kind, Scope::SameClass);
            l.routes.add(read.routes[i], seat, role == Role::Voter);
            if self.observed {
                l.outputs
                    .add(t.fingerprints[i].sha256, seat, role == Role::Voter);
            }
        }
    }

    /// The reference's launches every aligned member holds: the ones voted.
    pub(super) fn shared(&self) -> Vec<usize> {
        (0..self.launches.len())
            .filter(|&j| self.launches[j].held == self.aligned)
            .collect()
    }
}
