//! The library's error type. The binary maps it to exit codes.

use crate::digest::{ABSENT, FieldChange};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::PathBuf;

/// Everything the library can refuse or fail at.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A launch set could not be built.
    #[error("launch set refused: {0}")]
    LaunchSet(#[from] LaunchSetError),
    /// A plan, capture or replay was refused.
    #[error("{0}")]
    Refused(Box<Refusal>),
    /// The route recorder refused a call (nesting, capacity, mode, a
    /// context change while recording).
    #[error("recorder: {0}")]
    Recorder(#[from] RecorderError),
    /// A trace file is malformed.
    #[error("{path}: {source}")]
    Format {
        /// The file read or written (`<new trace>` for one built in memory).
        path: PathBuf,
        /// What is wrong with its bytes.
        source: FormatError,
    },
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder the operation was on.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A path that must be a regular file is something else (a device, a
    /// FIFO, a directory): never read from, never replaced.
    #[error("{path} is {kind}, not a regular file; refusing to use it")]
    NotRegularFile {
        /// The path.
        path: PathBuf,
        /// What it is instead, in words.
        kind: &'static str,
    },
    /// A file is longer than the limit for its kind.
    #[error("{path} is {size} bytes, over the {limit}-byte limit")]
    TooLarge {
        /// The path.
        path: PathBuf,
        /// Its size in bytes (at least this many were present).
        size: u64,
        /// The limit in bytes.
        limit: u64,
    },
    /// Work estimated over a compute or memory limit, refused before
    /// anything was allocated or launched.
    #[error("{what} needs {need}, over the {kind} limit of {limit}")]
    OverBudget {
        /// What was refused, e.g. `workload m-sweep`.
        what: String,
        /// The estimate, in words.
        need: String,
        /// The limit, in words.
        limit: String,
        /// Which limit.
        kind: BudgetLimit,
    },
    /// A file exists and no overwrite was asked for.
    #[error("{path} already exists (left in place)")]
    WouldOverwrite {
        /// The existing file that was left in place.
        path: PathBuf,
    },
    /// No golden trace exists for a workload on a device class.
    #[error(
        "no golden for workload {workload:?} on device {device:?}: expected {path} (goldens present: {available})"
    )]
    GoldenMissing {
        /// Where the golden was looked for: `DIR/<device>/<workload>.gat`.
        path: PathBuf,
        /// The trace's workload name.
        workload: String,
        /// The device class folder name (see `gemm_audit::golden::device_key`).
        device: String,
        /// The goldens present under the folder, as `device/file.gat`
        /// joined by `, `, or `none`.
        available: String,
    },
    /// A pending candidate that cannot be reviewed, accepted or rejected as
    /// asked: none for a named workload, or a file that is not the candidate
    /// of the golden its name says.
    #[error("{path}: {reason}")]
    Candidate {
        /// The pending file, or the golden folder when none was found.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Paths that should hold traces hold none: nothing to compare (a CI
    /// job whose artifact download found nothing), never a pass.
    #[error("no trace (.gat) in {paths}: nothing to compare")]
    NoTraces {
        /// The paths given, in words.
        paths: String,
    },
    /// A trace `compare` read twice (once to vote, once to name what
    /// differs) was not the same the second time.
    #[error(
        "{}: the trace changed while compare read it (once to vote, once to name what differs): compare again once nothing writes it",
        path.display()
    )]
    TraceChanged {
        /// The trace file.
        path: PathBuf,
    },
    /// A workload is unknown or malformed.
    #[error("workload {name}: {reason}")]
    Workload {
        /// The built-in name or file path as given.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A device ordinal (`--device N`) that the backend does not have.
    #[error("backend {backend} has no device {requested}; available: {available}")]
    NoSuchDevice {
        /// The backend's short name: `cpu` or `cuda`.
        backend: String,
        /// The ordinal asked for.
        requested: usize,
        /// The devices present, in words (e.g. `0 to 3`).
        available: String,
    },
    /// The backend is unavailable or failed. `reason` says everything (the
    /// cause included); `source`, when present, is the typed cause (for
    /// CUDA, a `CudaError` whose own source is the cudarc error).
    #[error("backend {backend}: {reason}")]
    Backend {
        /// The backend's short name: `cpu`, `cuda` or an engine's.
        backend: String,
        /// The whole explanation, the cause included.
        reason: String,
        /// The typed cause, when there is one.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    },
}

impl From<Refusal> for Error {
    fn from(r: Refusal) -> Self {
        Error::Refused(Box::new(r))
    }
}

impl Error {
    /// Reading or writing `path` failed with `source`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// A backend error without a cause (an engine's own backend uses it too).
    pub fn backend(backend: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Backend {
            backend: backend.into(),
            reason: reason.into(),
            source: None,
        }
    }

    /// A backend error whose `source` is `cause` (`reason` should still
    /// name it: the message is `backend {backend}: {reason}`).
    pub fn backend_caused(
        backend: impl Into<String>,
        reason: impl Into<String>,
        cause: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        Error::Backend {
            backend: backend.into(),
            reason: reason.into(),
            source: Some(cause.into()),
        }
    }

    /// The workload `name` is invalid for `reason`.
    pub fn workload(name: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Workload {
            name: name.into(),
            reason: reason.into(),
        }
    }
}

/// Result alias of the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The limit an [`Error::OverBudget`] refusal is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetLimit {
    /// Floating-point work (GFLOP).
    Compute,
    /// Host memory.
    Memory,
}

impl fmt::Display for BudgetLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BudgetLimit::Compute => "compute",
            BudgetLimit::Memory => "memory",
        })
    }
}

/// Why a launch set was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchSetError {
    /// Zero launches were declared: an empty set is never valid.
    #[error("a launch set must hold at least one launch")]
    Empty,
    /// A route was pushed after the declared count was reached.
    #[error("more routes pushed than the {declared} declared")]
    TooManyRoutes {
        /// The number of launches the set was started with.
        declared: u64,
    },
    /// The set was finished before the declared count was reached.
    #[error("finished with {pushed} of {declared} declared routes")]
    Short {
        /// The number of launches the set was started with.
        declared: u64,
        /// The number of routes actually pushed.
        pushed: u64,
    },
    /// A route's launch grid has a zero dimension, so it would launch nothing.
    #[error("route {index}: zero grid dimension {grid:?}")]
    ZeroGrid {
        /// Position of the route in enqueue order (from 0).
        index: u64,
        /// The grid as `[x, y, z]`, in blocks.
        grid: [u32; 3],
    },
    /// A route's thread block has a zero dimension.
    #[error("route {index}: zero block dimension {block:?}")]
    ZeroBlock {
        /// Position of the route in enqueue order (from 0).
        index: u64,
        /// The block as `[x, y, z]`, in threads.
        block: [u32; 3],
    },
    /// The launch's block size disagrees with the thread count the route
    /// declares for its kernel.
    #[error(
        "route {index}: block has {block_threads} threads but the route declares {route_threads}"
    )]
    ThreadsMismatch {
        /// Position of the route in enqueue order (from 0).
        index: u64,
        /// Threads per block of the launch (`x * y * z`, saturating).
        block_threads: u64,
        /// Threads per block the route declares.
        route_threads: u32,
    },
    /// A route's launch arguments digest was never filled in (it is still
    /// the all-zero placeholder), so its arguments would go unchecked.
    #[error("route {index}: arguments digest is the all-zero placeholder")]
    ZeroArgumentsDigest {
        /// Position of the route in enqueue order (from 0).
        index: u64,
    },
}

/// Where in the record → capture → replay flow a refusal happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RefusalStage {
    /// Building a plan: the launch set rebuilt from the routes differs.
    PlanConstruction,
    /// A capture request whose route capacity differs from the manifest.
    CaptureRequest,
    /// Checking a replay against the live context, before launch.
    ReplayValidation,
    /// A capture whose result differs from the manifest.
    CaptureResult,
    /// Comparing a plan with a golden manifest or trace.
    GoldenComparison,
    /// A route pushed to a recording that its context cannot serve.
    Recording,
}

impl fmt::Display for RefusalStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RefusalStage::PlanConstruction => "plan construction",
            RefusalStage::CaptureRequest => "capture request",
            RefusalStage::ReplayValidation => "replay validation",
            RefusalStage::CaptureResult => "capture result",
            RefusalStage::GoldenComparison => "golden comparison",
            RefusalStage::Recording => "recording",
        })
    }
}

/// A refusal that names what changed: where, which route, which field, the
/// expected value and the one found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
pub struct Refusal {
    /// Where in the flow it was refused.
    pub stage: RefusalStage,
    /// The replay label, when refused during a replay.
    pub label: Option<String>,
    /// Route index, when one route is at fault.
    pub route_index: Option<u64>,
    /// What changed: never empty; the first is the reason, the rest are
    /// further changed fields of the same route or context.
    changes: Vec<FieldChange>,
}

impl Refusal {
    /// A refusal at `stage` naming one changed field: what was expected
    /// and what was found (an engine refusing a launch of its own says it
    /// the same way).
    pub fn new(
        stage: RefusalStage,
        route_index: Option<u64>,
        field: impl Into<String>,
        expected: impl fmt::Display,
        found: impl fmt::Display,
    ) -> Self {
        Refusal {
            stage,
            label: None,
            route_index,
            changes: vec![FieldChange::text(
                field,
                expected.to_string(),
                found.to_string(),
            )],
        }
    }

    /// A refusal naming several changed fields. `None` when `changes` is empty.
    pub fn with_changes(
        stage: RefusalStage,
        route_index: Option<u64>,
        changes: Vec<FieldChange>,
    ) -> Option<Self> {
        (!changes.is_empty()).then_some(Refusal {
            stage,
            label: None,
            route_index,
            changes,
        })
    }

    /// The change that caused the refusal.
    pub fn change(&self) -> &FieldChange {
        &self.changes[0]
    }

    /// Every changed field named, the cause first.
    pub fn changes(&self) -> &[FieldChange] {
        &self.changes
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "refused at {}", self.stage)?;
        if let Some(l) = &self.label {
            write!(f, " of {l:?}")?;
        }
        if let Some(i) = self.route_index {
            write!(f, ": route {i}")?;
        }
        write_changes(f, &self.changes)
    }
}

/// Fields shown of a group one side lacks; [`Refusal::changes`] keeps all.
const ABSENT_GROUP_SHOWN: usize = 2;

/// The changes as `field expected X, found Y; ...`, except that a run of
/// fields of one group (`module.*`) that one side lacks is written once,
/// `module absent: expected module.backend "cuda-nvrtc", module.kind
/// "nvrtc" and 10 more fields`: a missing module is one fact, not twelve.
fn write_changes(f: &mut fmt::Formatter<'_>, changes: &[FieldChange]) -> fmt::Result {
    let group = |c: &FieldChange| c.field.split_once('.').map(|(g, _)| g.to_string());
    let lacking = |c: &FieldChange| c.found == ABSENT || c.expected == ABSENT;
    let mut i = 0;
    while i < changes.len() {
        let sep = if i == 0 { ": " } else { "; " };
        let c = &changes[i];
        let run = match group(c) {
            Some(g) if lacking(c) => changes[i..]
                .iter()
                .take_while(|d| lacking(d) && group(d).as_deref() == Some(g.as_str()))
                .take_while(|d| (d.found == ABSENT) == (c.found == ABSENT))
                .count(),
            _ => 1,
        };
        if run <= ABSENT_GROUP_SHOWN {
            for (j, c) in changes[i..i + run].iter().enumerate() {
                let sep = if j == 0 { sep } else { "; " };
                write!(
                    f,
                    "{sep}{} expected {}, found {}",
                    c.field, c.expected, c.found
                )?;
            }
        } else {
            let g = group(c).unwrap_or_default();
            let (state, side, value): (_, _, fn(&FieldChange) -> &str) = if c.found == ABSENT {
                ("absent", "expected", |c| c.expected.as_str())
            } else {
                ("unexpected", "found", |c| c.found.as_str())
            };
            let shown: Vec<String> = changes[i..i + ABSENT_GROUP_SHOWN]
                .iter()
                .map(|c| format!("{} {}", c.field, value(c)))
                .collect();
            write!(
                f,
                "{sep}{g} {state}: {side} {} and {} more fields",
                shown.join(", "),
                run - ABSENT_GROUP_SHOWN
            )?;
        }
        i += run;
    }
    Ok(())
}

#[cfg(test)]
mod refusal_text_tests {
    use super::*;

    fn change(field: &str, expected: &str, found: &str) -> FieldChange {
        FieldChange::text(field, expected.to_string(), found.to_string())
    }

    fn refusal(changes: Vec<FieldChange>) -> Refusal {
        Refusal::with_changes(RefusalStage::ReplayValidation, None, changes).unwrap()
    }

    #[test]
    fn a_missing_group_is_written_once_and_kept_whole() {
        let mut changes = vec![change("modules.count", "1", "0")];
        for (field, v) in [
            ("module.backend", "\"cuda-nvrtc\""),
            ("module.kind", "\"nvrtc\""),
            ("module.digest", "bd43"),
            ("module.symbols", "[\"a\", \"b\"]"),
        ] {
            changes.push(change(field, v, ABSENT));
        }
        changes.push(change("device.name", "\"H200\"", "\"H100\""));
        let r = refusal(changes);
        let text = r.to_string();
        assert!(
            text.ends_with(
                "modules.count expected 1, found 0; module absent: expected module.backend \"cuda-nvrtc\", module.kind \"nvrtc\" and 2 more fields; device.name expected \"H200\", found \"H100\""
            ),
            "{text}"
        );
        assert!(!text.contains("bd43"), "{text}");
        // Nothing is lost for machines: every field is still listed.
        assert_eq!(r.changes().len(), 6);
    }

    #[test]
    fn short_or_present_runs_are_written_field_by_field() {
        let r = refusal(vec![
            change("module.digest", "aa", ABSENT),
            change("module.kind", "\"nvrtc\"", ABSENT),
            change("tile.m", "64", "128"),
            change("tile.n", "32", "128"),
            change("tile.k", "64", "32"),
        ]);
        let text = r.to_string();
        assert!(
            text.contains("module.digest expected aa, found (absent); module.kind"),
            "{text}"
        );
        assert!(
            text.contains("tile.m expected 64, found 128; tile.n expected 32, found 128; tile.k"),
            "{text}"
        );
        // A group only the live side has.
        let r = refusal(vec![
            change("module.a", ABSENT, "1"),
            change("module.b", ABSENT, "2"),
            change("module.c", ABSENT, "3"),
        ]);
        assert!(
            r.to_string()
                .ends_with(": module unexpected: found module.a 1, module.b 2 and 1 more fields"),
            "{r}"
        );
    }
}

/// Why a trace file could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// The file is larger than the decoder accepts; it is refused before
    /// it is read.
    #[error("file is {size} bytes, over the {limit}-byte limit")]
    TooLarge {
        /// The file's size, in bytes.
        size: u64,
        /// The largest size accepted, in bytes.
        limit: u64,
    },
    /// The file ends inside the header.
    #[error("truncated: {needed} bytes needed at offset {offset}, file has {len}")]
    Truncated {
        /// Byte offset of the header field being read.
        offset: u64,
        /// Bytes that field needs.
        needed: u64,
        /// The file's length, in bytes.
        len: u64,
    },
    /// The first 8 bytes are not the `GEMMAUDT` magic.
    #[error("not a gemm-audit trace: {}", not_a_trace(found))]
    BadMagic {
        /// The 8 bytes found instead.
        found: Vec<u8>,
    },
    /// The file was written by a newer gemm-audit than this one.
    #[error(
        "format version {found} is newer than this build reads (up to {supported}); upgrade gemm-audit"
    )]
    NewerVersion {
        /// The format version in the header.
        found: u16,
        /// The newest format version this build reads.
        supported: u16,
    },
    /// The file's format version is older than this build reads.
    #[error("format version {found} is not supported (this build reads {supported})")]
    UnsupportedVersion {
        /// The format version in the header.
        found: u16,
        /// The format version this build writes.
        supported: u16,
    },
    /// The reserved header bytes are not zero.
    #[error("reserved header bytes must be zero, found {found:#06x}")]
    Reserved {
        /// The reserved `u16` as read (little-endian).
        found: u16,
    },
    /// The payload length in the header disagrees with the file's size.
    #[error("payload length {declared} does not match the {actual} bytes present")]
    LengthMismatch {
        /// The payload length the header declares, in bytes.
        declared: u64,
        /// The bytes actually between header and trailer.
        actual: u64,
    },
    /// The payload's SHA-256 differs from the trailer's: the file is
    /// corrupt or was edited.
    #[error("checksum mismatch: header says {expected}, payload hashes to {found}")]
    Checksum {
        /// The SHA-256 stored in the file, in hex.
        expected: String,
        /// The SHA-256 of the payload as read, in hex.
        found: String,
    },
    /// The payload is not a valid encoding of a trace; holds the decoder's
    /// message.
    #[error("payload does not decode: {0}")]
    Decode(String),
    /// The payload decodes but bytes are left over; holds how many.
    #[error("payload has {0} trailing bytes after the trace")]
    TrailingBytes(u64),
    /// The payload decodes but re-encodes to different bytes (e.g. an
    /// overlong integer), so one trace would have two encodings.
    #[error("payload is not in canonical encoding (re-encoding differs)")]
    NonCanonical,
    /// A decoded count or length is over its limit.
    #[error("{what} is {found}, over the limit of {limit}")]
    LimitExceeded {
        /// What was measured: `route count` or `string length`.
        what: &'static str,
        /// The value found.
        found: u64,
        /// The limit (see [`crate::trace::codec::Limits`]).
        limit: u64,
    },
    /// The trace could not be encoded; holds the encoder's message.
    #[error("payload could not be encoded: {0}")]
    Encode(String),
    /// The trace decodes but its parts disagree (e.g. route and
    /// fingerprint counts); holds what disagrees.
    #[error("trace is inconsistent: {0}")]
    Inconsistent(String),
}

/// What a [`GemmRouteRecorder`](crate::recorder::GemmRouteRecorder) is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecorderMode {
    /// Not recording: pushes are refused.
    Idle,
    /// An eager run: storage grows with every push.
    Eager,
    /// A capture: storage is reserved to exactly the manifest's launch
    /// count, and a push beyond it is refused.
    Capture,
}

impl fmt::Display for RecorderMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RecorderMode::Idle => "idle",
            RecorderMode::Eager => "eager",
            RecorderMode::Capture => "capture",
        })
    }
}

/// Why the recorder refused a call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecorderError {
    /// A recording was begun while another one is active.
    #[error("a {active} recording is already active: recordings do not nest")]
    Nested {
        /// The mode of the active recording.
        active: RecorderMode,
    },
    /// A route was pushed while nothing is being recorded.
    #[error("route {gemm:?} pushed while the recorder is idle (begin a recording first)")]
    NotRecording {
        /// The pushed route's GEMM name.
        gemm: String,
    },
    /// A capture pushed more routes than the manifest's launch count.
    #[error(
        "route {gemm:?} pushed beyond the capture's capacity of {capacity} (the eager run launched {capacity} GEMMs)"
    )]
    OverCapacity {
        /// The capacity reserved from the manifest.
        capacity: usize,
        /// The pushed route's GEMM name.
        gemm: String,
    },
    /// A recording was finished as the other mode.
    #[error("finished a {active} recording as {asked}")]
    WrongMode {
        /// The mode the recording was begun in.
        active: RecorderMode,
        /// The mode it was finished as.
        asked: RecorderMode,
    },
    /// The live context changed (a policy flip, another module set) between
    /// the start and the end of a recording.
    #[error("the live context changed while recording: {0}")]
    ContextChanged(Box<Refusal>),
    /// A pushed route that the recording's context cannot serve (a policy
    /// changed while recording, a dispatcher bug): refused at the push, and
    /// the recording cannot finish.
    #[error("route {gemm:?} refused at the push: {refusal}")]
    Unservable {
        /// The pushed route's GEMM name.
        gemm: String,
        /// What the recording's context refuses about it.
        refusal: Box<Refusal>,
    },
    /// A route pushed to a capture from another thread than the one that
    /// began it (CUDA stream capture is per thread).
    #[error(
        "route {gemm:?} pushed from another thread than the one capturing (capture is per thread)"
    )]
    WrongThread {
        /// The pushed route's GEMM name.
        gemm: String,
    },
    /// A capture over capacity or of routes that do not form a launch set.
    #[error("the captured routes do not form a launch set: {0}")]
    LaunchSet(LaunchSetError),
}

/// What the first bytes of a file that is not a trace are, and where a
/// PyTorch profile (JSON, or gzip'd JSON) was given instead, what reads it.
fn not_a_trace(found: &[u8]) -> String {
    let shown: String = found
        .iter()
        .flat_map(|b| std::ascii::escape_default(*b))
        .map(char::from)
        .collect();
    let hint = if found.starts_with(&[0x1f, 0x8b]) {
        " (gzip data: a compressed PyTorch profiler trace is read by `gemm-audit import`)"
    } else if matches!(
        found.iter().find(|b| !b.is_ascii_whitespace()),
        Some(b'{' | b'[')
    ) {
        " (JSON: a PyTorch profiler trace is read by `gemm-audit import`)"
    } else {
        ""
    };
    format!("it begins with \"{shown}\", a trace with \"GEMMAUDT\"{hint}")
}
