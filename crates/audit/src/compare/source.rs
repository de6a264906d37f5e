//! Where a comparison's members come from: a slice held in memory (the
//! fleet's own traces), or trace files read one at a time, twice at most
//! (once to tally, once more for the few the report names), so that the
//! memory a comparison holds does not grow with the number of files.

use super::Member;
use super::tally::{GroupTally, Read};
use crate::trace::RecordedGemmTrace;
use crate::{Error, Result};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Members a comparison reads by index, as often as it needs.
pub(super) trait Source: Sync {
    /// What reading can fail with.
    type Error: Send;
    /// How many members there are.
    fn len(&self) -> usize;
    /// Member `i`'s label, without reading it.
    fn label(&self, i: usize) -> String;
    /// Member `i`.
    fn read(&self, i: usize) -> std::result::Result<Cow<'_, Member>, Self::Error>;
    /// The error for member `i` found changed on a second reading, where
    /// members can change (files); `None` where they cannot.
    fn changed(&self, i: usize) -> Option<Self::Error>;
}

/// Members in memory: nothing to fail, nothing that changes.
pub(super) struct InMemory<'a>(pub(super) &'a [Member]);

impl Source for InMemory<'_> {
    type Error = std::convert::Infallible;
    fn len(&self) -> usize {
        self.0.len()
    }
    fn label(&self, i: usize) -> String {
        self.0[i].label.clone()
    }
    fn read(&self, i: usize) -> std::result::Result<Cow<'_, Member>, Self::Error> {
        Ok(Cow::Borrowed(&self.0[i]))
    }
    fn changed(&self, _: usize) -> Option<Self::Error> {
        None
    }
}

/// Trace files, labelled by their paths, their device told by their own
/// content (UUID, else the trace itself).
pub(super) struct Files(pub(super) Vec<PathBuf>);

impl Source for Files {
    type Error = Error;
    fn len(&self) -> usize {
        self.0.len()
    }
    fn label(&self, i: usize) -> String {
        self.0[i].display().to_string()
    }
    fn read(&self, i: usize) -> Result<Cow<'_, Member>> {
        Ok(Cow::Owned(Member {
            label: self.label(i),
            trace: RecordedGemmTrace::read(&self.0[i])?,
            device: None,
        }))
    }
    fn changed(&self, i: usize) -> Option<Error> {
        Some(Error::TraceChanged {
            path: self.0[i].clone(),
        })
    }
}

/// Most members the first pass holds at once.
pub(super) const MAX_BATCH: usize = 16;

/// Members read at once by the first pass: two per core, so reading
/// (parsing, digesting routes) runs on every core, and never more than
/// [`MAX_BATCH`], so memory holds at most that many traces whatever the
/// host.
fn batch() -> usize {
    (2 * std::thread::available_parallelism().map_or(1, |n| n.get())).min(MAX_BATCH)
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

/// The first pass: every member read once, in order, folded into its
/// group's tallies and dropped.
pub(super) fn tally_all<S: Source>(
    source: &S,
) -> std::result::Result<BTreeMap<(String, String), GroupTally>, S::Error> {
    let mut groups: BTreeMap<(String, String), GroupTally> = BTreeMap::new();
    let label_of = |i: usize| source.label(i);
    let all: Vec<usize> = (0..source.len()).collect();
    for chunk in all.chunks(batch()) {
        let reads = crate::util::map_in_order(chunk, |&i| source.read(i).map(Read::of));
        for (&i, read) in chunk.iter().zip(reads) {
            let read = read?;
            let t = &read.member.trace;
            let (workload, device) = group_key(t);
            let g = groups
                .entry((workload.clone(), device.clone()))
                .or_insert_with(|| GroupTally::new(workload, device, t));
            g.fold(i, &read, &label_of);
        }
    }
    Ok(groups)
}
