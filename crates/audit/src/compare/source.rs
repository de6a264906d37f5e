//! Where a comparison's members come from: a slice held in memory (the
//! fleet's own traces), or trace files read a few at a time (once to
//! tally, again only for what the report names), so that the memory a
//! comparison holds does not grow with the number of files.

use super::Member;
use crate::trace::RecordedGemmTrace;
use crate::{Error, Result};
use std::borrow::Cow;
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
