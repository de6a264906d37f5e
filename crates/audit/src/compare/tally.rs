//! The first pass of a comparison: each member, read once, is folded into
//! its group's per-launch tallies and dropped. A tally keeps, per launch,
//! each distinct route digest and output fingerprint once, with how many
//! devices voted for it and the first [`SAMPLE`] members that hold it:
//! an agreeing fleet keeps one value per launch however many members it
//! has. Per member it keeps only a seat (its index, role and launch count)
//! and its device key (one device, one vote).

use super::align::{Alignment, Prepared, Reference};
use super::source::Source;
use super::{Member, Scope, promises_same_bits};
use crate::Digest;
use crate::trace::RecordedGemmTrace;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};

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

/// A member as the first pass read it: the member, its group, its device
/// key and, where its group was known when it was read, its alignment and
/// route digests (computed where it was read, on any core).
pub(super) struct Read<'a> {
    pub(super) member: std::borrow::Cow<'a, Member>,
    pub(super) group: (String, String),
    pub(super) device: DeviceKey,
    pub(super) prepared: Option<Prepared>,
}

impl<'a> Read<'a> {
    /// `member` in its group (`groups` holds those known so far).
    pub(super) fn of(
        member: std::borrow::Cow<'a, Member>,
        groups: &BTreeMap<(String, String), GroupTally>,
    ) -> Read<'a> {
        let device = device_key(&member);
        let group = group_key(&member.trace);
        let prepared = groups
            .get(&group)
            .map(|g| g.reference.prepare(&member.trace));
        Read {
            member,
            group,
            device,
            prepared,
        }
    }
}

/// The group key of a trace: its workload and device class (fingerprints
/// compare only within a mode: a fast trace votes with fast traces).
fn group_key(t: &RecordedGemmTrace) -> (String, String) {
    let mut device = crate::golden::device_key(&t.context.device);
    if t.fingerprint_mode != crate::FingerprintMode::Strong {
        device.push_str(&format!(" ({} fingerprints)", t.fingerprint_mode));
    }
    (t.workload.clone(), device)
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
    /// What it held when it was voted ([`Prepared::summary`]).
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
    fn new(workload: String, device: String, first: &RecordedGemmTrace) -> GroupTally {
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
    fn fold(&mut self, index: usize, read: Read<'_>, label_of: &dyn Fn(usize) -> String) {
        let t = &read.member.trace;
        let seat = self.seats.len();
        let p = read.prepared.unwrap_or_else(|| self.reference.prepare(t));
        let mut role = Role::Voter;
        if p.alignment == Alignment::Other {
            role = Role::Other;
            self.mismatched.push(read.member.label.clone());
        } else {
            match self.devices.entry(read.device) {
                Entry::Occupied(e) => {
                    let twin = label_of(self.seats[*e.get()].member);
                    self.warnings
                        .push(left_out_warning(&read.member.label, &twin, e.key()));
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
            summary: p.summary,
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
        let voter = role == Role::Voter;
        for (j, l) in self.launches.iter_mut().enumerate() {
            let Some(i) = p.alignment.index(j) else {
                continue;
            };
            l.held += 1;
            l.deterministic |= promises_same_bits(&t.routes[i].contract.kind, Scope::SameClass);
            l.routes.add(p.keys[i], seat, voter);
            if self.observed {
                l.outputs.add(t.fingerprints[i].sha256, seat, voter);
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

/// The first pass: every member read once, in order, folded into its
/// group's tallies and dropped. Members are read a batch at a time on
/// every core (parsed, aligned with their group's reference, their routes
/// digested), then folded in order.
pub(super) fn tally_all<S: Source>(
    source: &S,
) -> Result<BTreeMap<(String, String), GroupTally>, S::Error> {
    let mut groups: BTreeMap<(String, String), GroupTally> = BTreeMap::new();
    let label_of = |i: usize| source.label(i);
    let all: Vec<usize> = (0..source.len()).collect();
    for chunk in all.chunks(batch()) {
        let known = &groups;
        let reads =
            crate::util::map_in_order(chunk, |&i| source.read(i).map(|m| Read::of(m, known)));
        for (&i, read) in chunk.iter().zip(reads) {
            let read = read?;
            let g = groups.entry(read.group.clone()).or_insert_with(|| {
                let (workload, device) = read.group.clone();
                GroupTally::new(workload, device, &read.member.trace)
            });
            g.fold(i, read, &label_of);
        }
    }
    Ok(groups)
}

/// Most members the first pass holds at once.
const MAX_BATCH: usize = 16;

/// Members read at once by the first pass: two per core, so reading runs
/// on every core, and never more than [`MAX_BATCH`], so memory holds at
/// most that many traces whatever the host.
fn batch() -> usize {
    (2 * std::thread::available_parallelism().map_or(1, |n| n.get())).min(MAX_BATCH)
}
