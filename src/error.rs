//! The library's error type. The binary maps it to exit codes.

use crate::digest::FieldChange;
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
    Recorder(#[from] crate::recorder::RecorderError),
    /// A trace file is malformed.
    #[error("{path}: {source}")]
    Format { path: PathBuf, source: FormatError },
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A file exists and no overwrite was asked for.
    #[error("{path} already exists; pass --force to replace it")]
    WouldOverwrite { path: PathBuf },
    /// No golden trace exists for a workload on a device class.
    #[error(
        "no golden for workload {workload:?} on device {device:?}: expected {path} (goldens present: {available})"
    )]
    GoldenMissing {
        path: PathBuf,
        workload: String,
        device: String,
        available: String,
    },
    /// A workload is unknown or malformed.
    #[error("workload {name}: {reason}")]
    Workload { name: String, reason: String },
    /// The backend is unavailable or failed. `reason` says everything (the
    /// cause included); `source`, when present, is the typed cause (for
    /// CUDA, a `CudaError` whose own source is the cudarc error).
    #[error("backend {backend}: {reason}")]
    Backend {
        backend: String,
        reason: String,
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
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// A backend error with no typed cause.
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

    pub(crate) fn workload(name: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Workload {
            name: name.into(),
            reason: reason.into(),
        }
    }
}

/// Result alias of the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a launch set was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchSetError {
    #[error("a launch set must hold at least one launch")]
    Empty,
    #[error("more routes pushed than the {declared} declared")]
    TooManyRoutes { declared: u64 },
    #[error("finished with {pushed} of {declared} declared routes")]
    Short { declared: u64, pushed: u64 },
    #[error("route {index}: zero grid dimension {grid:?}")]
    ZeroGrid { index: u64, grid: [u32; 3] },
    #[error("route {index}: zero block dimension {block:?}")]
    ZeroBlock { index: u64, block: [u32; 3] },
    #[error(
        "route {index}: block has {block_threads} threads but the route declares {route_threads}"
    )]
    ThreadsMismatch {
        index: u64,
        block_threads: u64,
        route_threads: u32,
    },
    #[error("route {index}: arguments digest is the all-zero placeholder")]
    ZeroArgumentsDigest { index: u64 },
}

/// Where in the record → capture → replay flow a refusal happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
}

impl fmt::Display for RefusalStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RefusalStage::PlanConstruction => "plan construction",
            RefusalStage::CaptureRequest => "capture request",
            RefusalStage::ReplayValidation => "replay validation",
            RefusalStage::CaptureResult => "capture result",
            RefusalStage::GoldenComparison => "golden comparison",
        })
    }
}

/// A refusal that names what changed: where, which route, which field, the
/// expected value and the one found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
pub struct Refusal {
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
    pub(crate) fn new(
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
            changes: vec![FieldChange {
                field: field.into(),
                expected: expected.to_string(),
                found: found.to_string(),
            }],
        }
    }

    /// A refusal naming several changed fields. `None` when `changes` is empty.
    pub(crate) fn with_changes(
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
        for (i, c) in self.changes.iter().enumerate() {
            let sep = if i == 0 { ": " } else { "; " };
            write!(
                f,
                "{sep}{} expected {}, found {}",
                c.field, c.expected, c.found
            )?;
        }
        Ok(())
    }
}

/// Why a trace file could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    #[error("file is {size} bytes, over the {limit}-byte limit")]
    TooLarge { size: u64, limit: u64 },
    #[error("truncated: {needed} bytes needed at offset {offset}, file has {len}")]
    Truncated { offset: u64, needed: u64, len: u64 },
    #[error("not a gemm-audit trace (bad magic {found:02x?})")]
    BadMagic { found: Vec<u8> },
    #[error(
        "format version {found} is newer than this build reads (up to {supported}); upgrade gemm-audit"
    )]
    NewerVersion { found: u16, supported: u16 },
    #[error("format version {found} is not supported (this build reads {supported})")]
    UnsupportedVersion { found: u16, supported: u16 },
    #[error("reserved header bytes must be zero, found {found:#06x}")]
    Reserved { found: u16 },
    #[error("payload length {declared} does not match the {actual} bytes present")]
    LengthMismatch { declared: u64, actual: u64 },
    #[error("checksum mismatch: header says {expected}, payload hashes to {found}")]
    Checksum { expected: String, found: String },
    #[error("payload does not decode: {0}")]
    Decode(String),
    #[error("payload has {0} trailing bytes after the trace")]
    TrailingBytes(u64),
    #[error("payload is not in canonical encoding (re-encoding differs)")]
    NonCanonical,
    #[error("{what} is {found}, over the limit of {limit}")]
    LimitExceeded {
        what: &'static str,
        found: u64,
        limit: u64,
    },
    #[error("payload could not be encoded: {0}")]
    Encode(String),
    #[error("trace is inconsistent: {0}")]
    Inconsistent(String),
}
