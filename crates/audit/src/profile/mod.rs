//! Importing PyTorch profiler (Kineto) traces: the GEMMs a team already
//! recorded, as gemm-audit traces that `diff`, `compare`, the goldens and
//! the census read like any other.
//!
//! A profile is what `torch.profiler` writes (`export_chrome_trace`, or
//! `tensorboard_trace_handler`, one file per rank, `.json` or `.json.gz`).
//! [`import_file`] reads one, binds every GPU activity to the GEMM that
//! launched it (see [`bind`](self) for the rules), and writes what it found
//! as a trace of vendor routes: one route per GEMM op (`aten::mm`,
//! `addmm`, `bmm`, ...) with its op, dtype, shape and layout where the
//! profile recorded them (`record_shapes=True`) and the kernels that
//! served it, plus one route per GEMM kernel no GEMM op owns (a
//! `torch.compile` region, a CUDA-graph replay), named after its region.
//! A profile holds no output bits: the trace's fingerprints are
//! placeholders ([`FingerprintMode::NotObserved`]), and every verb says
//! numeric "not observed".
//!
//! Every activity ends up bound to a GEMM, kept beside one, counted as a
//! convolution kernel, counted as non-GEMM work, or listed as unbound (its
//! launching call is not in the profile): the trace's [`Observation`] says
//! how many of each (convolution kernels in a note). Whether a kernel is
//! GEMM-family, a convolution or other work is decided by one rule,
//! [`KernelClass::of`].

mod bind;
mod classify;
pub mod graph;
mod kineto;
mod ops;
mod triton;

use crate::DeviceIdentity;
use crate::observed::{ObservedFramework, ObservedGemm, ObservedStep};
use crate::trace::{FingerprintMode, Observation, RecordedGemmTrace};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use classify::{KernelClass, splits_k};
pub use ops::gemm_op_names;

/// Why a profile could not be imported. Each names the event or field at
/// fault; nothing is written for a profile that fails.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProfileError {
    /// Reading the file failed (missing, unreadable, not a regular file,
    /// over the size limit).
    #[error(transparent)]
    Read(#[from] crate::Error),
    /// The file is gzip'd but cannot be decompressed (truncated, corrupt).
    #[error("{path}: not a readable gzip stream: {message}")]
    Gzip {
        /// The file.
        path: PathBuf,
        /// The decompressor's message.
        message: String,
    },
    /// Decompressed, the file is over the limit.
    #[error("{path}: over {limit} bytes once decompressed")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit in bytes.
        limit: u64,
    },
    /// The text is not valid JSON.
    #[error("not valid JSON at line {line} column {column}: {message}")]
    Json {
        /// Line of the fault (1-based).
        line: u64,
        /// Column of the fault (1-based).
        column: u64,
        /// What is wrong there.
        message: String,
    },
    /// Valid JSON, but not a PyTorch profiler trace.
    #[error("not a PyTorch profiler trace: {0}")]
    NotKineto(String),
    /// An event lacks a field it needs, or holds a bad value.
    #[error("trace event {index} ({name:?}): {field} {why}")]
    Event {
        /// The event's position among `traceEvents` (0-based).
        index: u64,
        /// Its name (shortened).
        name: String,
        /// The field at fault.
        field: &'static str,
        /// What is wrong with it.
        why: String,
    },
    /// Two launching calls share a correlation id, so the activities
    /// that name it cannot be bound.
    #[error(
        "correlation id {correlation} is used by two launching calls: event {} ({:?}) and event {} ({:?})",
        first.0, first.1, second.0, second.1
    )]
    DuplicateCorrelation {
        /// The id.
        correlation: u64,
        /// The first call: event index and name.
        first: (u64, String),
        /// The second.
        second: (u64, String),
    },
    /// A GPU activity was launched from a range that outlived the GEMM
    /// op it started in (ranges that overlap without nesting), so which
    /// GEMM launched it is ambiguous.
    #[error(
        "ranges overlap without nesting: event {} ({:?}) starts inside GEMM op event {} ({:?}) and outlives it, and launching call event {} ({:?}) falls after the op's end, so its GEMM is ambiguous",
        second.0, second.1, first.0, first.1, launch.0, launch.1
    )]
    Overlap {
        /// The GEMM op: event index and name.
        first: (u64, String),
        /// The range that starts inside it and ends past it.
        second: (u64, String),
        /// The launching call in between.
        launch: (u64, String),
    },
    /// A count is over the importer's limit.
    #[error("more {what} than the limit of {limit}")]
    Limit {
        /// What was counted.
        what: &'static str,
        /// The limit.
        limit: u64,
    },
    /// The profile holds no GEMM: nothing to gate.
    #[error(
        "no GEMM in the profile ({events} events, {kernels} GPU activities): profile the step that runs the model's matrix multiplies"
    )]
    NoGemm {
        /// Events read.
        events: u64,
        /// GPU activities seen.
        kernels: u64,
    },
    /// A `--library` or workload argument is malformed.
    #[error("{0}")]
    Argument(String),
    /// The GEMMs could not be made a trace.
    #[error(transparent)]
    Build(#[from] crate::observed::ObservedError),
    /// The error, in the file it came from.
    #[error("{path}: {source}")]
    InFile {
        /// The profile.
        path: PathBuf,
        /// What is wrong.
        source: Box<ProfileError>,
    },
}

/// Names in messages are cut to this many characters.
const SHOWN_NAME_CHARS: usize = 120;

/// A name for a message: at most [`SHOWN_NAME_CHARS`] characters.
pub(crate) fn shorten_name(s: &str) -> String {
    if s.chars().count() <= SHOWN_NAME_CHARS {
        s.to_string()
    } else {
        let cut: String = s.chars().take(SHOWN_NAME_CHARS).collect();
        format!("{cut}...")
    }
}

/// Largest profile read, decompressed: 4 GiB (the importer holds the text
/// and a compact form of the events it binds, under twice that).
pub const MAX_PROFILE_BYTES: u64 = 4 << 30;

/// Most events in one profile.
pub const MAX_PROFILE_EVENTS: u64 = 100_000_000;

/// How to import.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// The trace's workload name; default: the file's name without its
    /// extensions, tensorboard's timestamp and a rank marker (`rank0`),
    /// so the ranks of one job share a workload.
    pub workload: Option<String>,
    /// Library versions the profile does not record (`cublas` =
    /// `13.1.0`), part of every route's library version.
    pub libraries: BTreeMap<String, String>,
    /// The framework version, where known (a profile does not say).
    pub framework_version: Option<String>,
    /// Largest decompressed profile, in bytes.
    pub max_bytes: u64,
    /// Most events.
    pub max_events: u64,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            workload: None,
            libraries: BTreeMap::new(),
            framework_version: None,
            max_bytes: MAX_PROFILE_BYTES,
            max_events: MAX_PROFILE_EVENTS,
        }
    }
}

/// An imported profile: its trace, whose `observation` counts what was
/// bound.
#[derive(Debug, Clone)]
pub struct ImportedProfile {
    /// The trace (fingerprint mode [`FingerprintMode::NotObserved`]).
    pub trace: RecordedGemmTrace,
    /// Convolution kernels ([`KernelClass::Convolution`]) the profile ran
    /// outside every GEMM op: not GEMMs of the trace, and not in its
    /// `non_gemm` count (the trace's notes say how many).
    pub convolution_kernels: u64,
}

/// Reads the profile at `path` (JSON or gzip'd JSON) and imports it.
pub fn import_file(path: &Path, options: &ImportOptions) -> Result<ImportedProfile, ProfileError> {
    let in_file = |e: ProfileError| match e {
        e @ (ProfileError::Read(_) | ProfileError::Gzip { .. } | ProfileError::TooLarge { .. }) => {
            e
        }
        e => ProfileError::InFile {
            path: path.to_path_buf(),
            source: Box::new(e),
        },
    };
    let text = read_profile(path, options.max_bytes)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // The text and its events are let go before the trace is built, so
    // the two never take memory at once.
    let (step, convolutions) = observed_step(&text, &name, options).map_err(in_file)?;
    drop(text);
    trace_of(&step, convolutions).map_err(in_file)
}

/// The bytes of a profile file, decompressed if it is gzip'd.
pub fn read_profile(path: &Path, max_bytes: u64) -> Result<Vec<u8>, ProfileError> {
    let raw = crate::util::read_regular(path, max_bytes)?;
    if !raw.starts_with(&[0x1f, 0x8b]) {
        return Ok(raw);
    }
    use std::io::Read as _;
    // A gzip member ends with its size modulo 2^32: the exact size for one
    // member under 4 GiB, so the text is read without regrowing its buffer.
    let hint = raw.len().checked_sub(4).map_or(0, |at| {
        u32::from_le_bytes([raw[at], raw[at + 1], raw[at + 2], raw[at + 3]]) as u64
    });
    let mut out = Vec::with_capacity(hint.min(max_bytes).saturating_add(1) as usize);
    flate2::read::MultiGzDecoder::new(raw.as_slice())
        .take(max_bytes.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| ProfileError::Gzip {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
    if out.len() as u64 > max_bytes {
        return Err(ProfileError::TooLarge {
            path: path.to_path_buf(),
            limit: max_bytes,
        });
    }
    Ok(out)
}

/// Imports a profile's JSON text; `file_name` names it in the trace.
pub fn import_bytes(
    text: &[u8],
    file_name: &str,
    options: &ImportOptions,
) -> Result<ImportedProfile, ProfileError> {
    let (step, convolutions) = observed_step(text, file_name, options)?;
    trace_of(&step, convolutions)
}

/// The observed step of a profile's text: parsed, bound, every GEMM
/// described; and how many convolution kernels it ran outside GEMM ops.
fn observed_step(
    text: &[u8],
    file_name: &str,
    options: &ImportOptions,
) -> Result<(ObservedStep, u64), ProfileError> {
    if text.starts_with(&gemm_audit_model::trace::codec::MAGIC) {
        return Err(ProfileError::NotKineto(
            "it is a gemm-audit trace already (`show`, `diff` and `check` read it)".into(),
        ));
    }
    let parsed = kineto::parse(
        text,
        kineto::ParseLimits {
            max_events: options.max_events,
        },
    )?;
    let binding = bind::bind(&parsed, bind::Owners::Ops)?;
    let step = step_of(&parsed, &binding, file_name, options)?;
    Ok((step, binding.convolution_kernels.len() as u64))
}

/// The trace of an observed step whose outputs nobody saw.
fn trace_of(
    step: &ObservedStep,
    convolution_kernels: u64,
) -> Result<ImportedProfile, ProfileError> {
    let trace = step.trace_unobserved()?;
    debug_assert_eq!(trace.fingerprint_mode, FingerprintMode::NotObserved);
    Ok(ImportedProfile {
        trace,
        convolution_kernels,
    })
}

/// The default workload name of a profile file: its name without
/// extensions (`.json`, `.gz`, `.pt.trace`), a tensorboard timestamp
/// (`.1733389812345`) and a rank marker (`rank0`, `rank-1`, `rank_2`).
pub fn default_workload(file_name: &str) -> String {
    let mut s = file_name.to_string();
    for ext in [".gz", ".json", ".trace", ".pt"] {
        if let Some(stripped) = s.strip_suffix(ext) {
            s = stripped.to_string();
        }
    }
    // tensorboard_trace_handler: WORKER.TIMESTAMP
    if let Some((head, tail)) = s.rsplit_once('.')
        && tail.len() >= 10
        && tail.chars().all(|c| c.is_ascii_digit())
    {
        s = head.to_string();
    }
    let lower = s.to_ascii_lowercase();
    if let Some(at) = lower.find("rank") {
        let rest = &s[at + 4..];
        let sep = rest
            .chars()
            .next()
            .filter(|c| matches!(c, '-' | '_'))
            .map_or(0, char::len_utf8);
        let digits = rest[sep..].chars().take_while(char::is_ascii_digit).count();
        if digits > 0 {
            let end = at + 4 + sep + digits;
            let before = s[..at].trim_end_matches(['-', '_', '.']);
            let after = s[end..].trim_start_matches(['-', '_', '.']);
            s = match (before.is_empty(), after.is_empty()) {
                (true, true) => String::new(),
                (true, false) => after.to_string(),
                (false, true) => before.to_string(),
                (false, false) => format!("{before}-{after}"),
            };
        }
    }
    if s.trim().is_empty() {
        "profile".into()
    } else {
        s
    }
}

/// A CUDA version as Kineto writes it (`12040`), as `12.4`.
fn cuda_version(n: kineto::Number) -> Option<String> {
    let v = n.as_u64()?;
    Some(if v >= 1000 {
        format!("{}.{}", v / 1000, (v % 1000) / 10)
    } else {
        v.to_string()
    })
}

/// The note that counts a profile's convolution kernels.
fn convolution_note(n: usize) -> String {
    format!(
        "{n} convolution kernels (cuDNN, CUTLASS: implicit-GEMM convolutions among them) ran outside every GEMM op: counted apart, neither GEMMs of this trace nor in non_gemm"
    )
}

/// The observed step of a bound profile.
fn step_of(
    parsed: &kineto::Parsed<'_>,
    binding: &bind::Binding,
    file_name: &str,
    options: &ImportOptions,
) -> Result<ObservedStep, ProfileError> {
    if binding.gemms.is_empty() {
        let kernels = binding.bound_kernels
            + binding.beside_gemms
            + binding.unowned_gemm_kernels
            + binding.non_gemm
            + binding.convolution_kernels.len() as u64
            + binding.unbound;
        return Err(ProfileError::NoGemm {
            events: parsed.total_events,
            kernels,
        });
    }
    let meta = &parsed.meta;
    let mut libraries = BTreeMap::new();
    for (k, v) in [
        ("cuda-runtime", meta.cuda_runtime_version),
        ("cuda-driver", meta.cuda_driver_version),
        ("hip-runtime", meta.hip_runtime_version),
    ] {
        if let Some(v) = v.and_then(cuda_version) {
            libraries.insert(k.to_string(), v);
        }
    }
    if let Some(v) = meta.cupti_version.and_then(kineto::Number::as_u64) {
        libraries.insert("cupti".into(), v.to_string());
    }
    for (k, v) in &options.libraries {
        libraries.insert(k.clone(), v.clone());
    }
    // The device most GEMMs ran on.
    let mut votes: BTreeMap<i64, usize> = BTreeMap::new();
    for g in &binding.gemms {
        if let Some(d) = g.device {
            *votes.entry(d).or_default() += 1;
        }
    }
    let main_device = votes
        .iter()
        .max_by_key(|(d, n)| (**n, std::cmp::Reverse(**d)))
        .map(|(d, _)| *d)
        .or_else(|| binding.devices.first().copied());
    let device = match main_device {
        Some(d) => {
            let props = meta
                .device_properties
                .iter()
                .find(|p| p.id.and_then(kineto::Number::as_u64) == u64::try_from(d).ok())
                .or(meta.device_properties.first());
            let num = |n: Option<kineto::Number>| n.and_then(kineto::Number::as_u64);
            DeviceIdentity {
                class: props
                    .and_then(|p| p.name.clone())
                    .unwrap_or_else(|| "unrecorded GPU".into()),
                compute_capability: props.and_then(|p| {
                    Some([
                        u32::try_from(num(p.compute_major)?).ok()?,
                        u32::try_from(num(p.compute_minor)?).ok()?,
                    ])
                }),
                multiprocessors: props
                    .and_then(|p| num(p.num_sms))
                    .and_then(|v| u32::try_from(v).ok())
                    .unwrap_or(0),
                driver: libraries
                    .get("cuda-driver")
                    .map_or_else(|| "unrecorded".into(), |v| format!("cuda {v}")),
            }
        }
        None => DeviceIdentity {
            class: "cpu".into(),
            compute_capability: None,
            multiprocessors: 0,
            driver: "none".into(),
        },
    };
    let mut per_name: BTreeMap<String, u64> = BTreeMap::new();
    let mut without_shapes: Vec<String> = Vec::new();
    // Triton template launches: how many, and why some have no shapes.
    let mut templates = 0usize;
    let mut templates_without: Vec<String> = Vec::new();
    let mut gemms = Vec::with_capacity(binding.gemms.len());
    for g in &binding.gemms {
        // `template`: a region GEMM launched by a Triton template, whose
        // launch range records its arguments (see `triton`).
        let (op_name, layout, why, region, template) = match &g.owner {
            bind::Owner::Op(ev) => {
                let e = &parsed.events[*ev];
                match bind::layout_of(e) {
                    Ok(l) => (e.name.to_string(), l, None, None, false),
                    Err(why) => (
                        e.name.to_string(),
                        ops::Layout::unrecorded(),
                        Some(why.to_string()),
                        None,
                        false,
                    ),
                }
            }
            bind::Owner::Region(label) => {
                let launch = (g.range)
                    .filter(|_| !crate::trace::graph_launch_region(label))
                    .and_then(|r| triton::layout_of(&parsed.events[r]));
                let template = launch.is_some();
                let (layout, why) = match launch {
                    Some(Ok(l)) => (l, None),
                    Some(Err(why)) => (ops::Layout::unrecorded(), Some(why.to_string())),
                    None => (ops::Layout::unrecorded(), None),
                };
                (label.clone(), layout, why, Some(label.clone()), template)
            }
            bind::Owner::Annotation(i) => (
                format!("annotation {i}"),
                ops::Layout::unrecorded(),
                None,
                None,
                false,
            ),
        };
        let op_name = crate::observed::bounded_name(&op_name).into_owned();
        let n = per_name.entry(op_name.clone()).or_default();
        let name = format!("{op_name}#{n}");
        *n += 1;
        let shapes_recorded = (region.is_none() || template) && why.is_none();
        templates += usize::from(template);
        if let Some(why) = why {
            let list = if template {
                &mut templates_without
            } else {
                &mut without_shapes
            };
            list.push(format!("{name}: {why}"));
        }
        gemms.push(ObservedGemm {
            name,
            op_name,
            op: layout.op,
            dtype: layout.dtype,
            m: layout.m,
            k: layout.k,
            n: layout.n,
            batch: layout.batch,
            lda: layout.lda,
            ldb: layout.ldb,
            ldc: layout.ldc,
            kernels: g.kernels.clone(),
            beside: g.beside.clone(),
            device: Some(
                g.device
                    .map_or_else(|| "cpu".into(), |d| format!("cuda:{d}")),
            ),
            graph: g.replay.clone().or_else(|| {
                region
                    .as_deref()
                    .filter(|l| crate::trace::graph_launch_region(l))
                    .map(str::to_string)
            }),
            region,
            shapes_recorded,
            facts: layout.facts,
        });
    }
    let dist = meta.distributed.as_ref();
    let num = |n: Option<kineto::Number>| n.and_then(kineto::Number::as_u64);
    let mut notes = Vec::new();
    let owned = gemms.iter().filter(|g| g.region.is_none()).count();
    let unshaped = gemms
        .iter()
        .filter(|g| g.region.is_none() && !g.shapes_recorded)
        .count();
    if unshaped > 0 {
        notes.push(format!(
            "{unshaped} of {owned} GEMM ops have no recorded shapes (profile with record_shapes=True)"
        ));
        const SHOWN: usize = 8;
        let more = without_shapes.len().saturating_sub(SHOWN);
        notes.extend(without_shapes.into_iter().take(SHOWN));
        if more > 0 {
            notes.push(format!("and {more} more without shapes"));
        }
    }
    notes.extend(triton::notes(templates, templates_without));
    if !binding.convolution_kernels.is_empty() {
        notes.push(convolution_note(binding.convolution_kernels.len()));
    }
    notes.extend(binding.notes.iter().cloned());
    if binding.devices.len() > 1 {
        notes.push(format!(
            "GPU work ran on devices {:?}; the trace's device is cuda:{}",
            binding.devices,
            main_device.unwrap_or(0)
        ));
    }
    notes.truncate(crate::trace::MAX_LISTED);
    let observation = Observation {
        source: "pytorch-profiler".into(),
        file: crate::observed::bounded_name(file_name).into_owned(),
        rank: dist.and_then(|d| num(d.rank)),
        world_size: dist.and_then(|d| num(d.world_size)),
        events: parsed.total_events,
        bound_kernels: binding.bound_kernels,
        beside_gemms: binding.beside_gemms,
        unowned_gemm_kernels: binding.unowned_gemm_kernels,
        non_gemm: binding.non_gemm,
        unbound: binding.unbound,
        unbound_listed: binding.unbound_listed.clone(),
        gemms: Vec::new(),
        notes,
    };
    let workload = options
        .workload
        .clone()
        .unwrap_or_else(|| default_workload(file_name));
    Ok(ObservedStep {
        workload,
        framework: ObservedFramework {
            name: "torch".into(),
            version: options
                .framework_version
                .clone()
                .unwrap_or_else(|| "unrecorded".into()),
            libraries,
            state: BTreeMap::new(),
        },
        device,
        gemms,
        observation: Some(observation),
        volatile: BTreeMap::new(),
    })
}

/// What one of the Python recorder's ranges launched.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BoundRange {
    /// The kernels it launched, in order.
    pub kernels: Vec<crate::observed::ObservedKernel>,
    /// Copies, fills and child-op kernels beside them.
    pub beside: Vec<crate::observed::ObservedKernel>,
    /// The device its first kernel ran on.
    pub device: Option<i64>,
}

/// What the Python recorder's profile binds to its `PREFIX<index>` ranges,
/// and the non-GEMM kernels.
#[derive(Debug, Clone, Default)]
pub struct AnnotatedBinding {
    /// Per recorder index.
    pub gemms: BTreeMap<u64, BoundRange>,
    /// GEMM kernels no recorded op owns, each a GEMM of the region that
    /// launched it (a CUDA-graph replay, a `torch.compile` region calling
    /// cuBLAS or a Triton template outside aten dispatch), in launch
    /// order: what the dispatch mode cannot see. Their shapes are not in
    /// the profile.
    pub regions: Vec<BoundRegion>,
    /// Kernels bound to no recorded op and to no region (their names),
    /// convolution kernels left out.
    pub other_kernels: Vec<String>,
    /// Convolution kernels ([`KernelClass::Convolution`]) bound to no
    /// recorded op (their names): neither GEMMs nor other kernels.
    pub convolution_kernels: Vec<String>,
    /// Activities whose launching call the profile does not hold.
    pub unbound: Vec<String>,
}

/// A GEMM of a region (see [`AnnotatedBinding::regions`]).
#[derive(Debug, Clone)]
pub struct BoundRegion {
    /// The region: `cudaGraphLaunch in CompiledFunction`, or the innermost
    /// range around the launch.
    pub label: String,
    /// What it launched.
    pub launch: BoundRange,
}

/// Binds a profile's activities to the recorder's `prefix<index>` ranges
/// (the one binder for imported profiles and the recorder).
pub fn bind_annotated(text: &[u8], prefix: &str) -> Result<AnnotatedBinding, ProfileError> {
    let parsed = kineto::parse(
        text,
        kineto::ParseLimits {
            max_events: MAX_PROFILE_EVENTS,
        },
    )?;
    let binding = bind::bind(&parsed, bind::Owners::Annotations(prefix))?;
    let mut out = AnnotatedBinding {
        other_kernels: binding.non_gemm_kernels.clone(),
        convolution_kernels: binding.convolution_kernels.clone(),
        unbound: binding.unbound_listed.clone(),
        ..AnnotatedBinding::default()
    };
    for g in binding.gemms {
        if let bind::Owner::Annotation(i) = g.owner {
            out.gemms.insert(
                i,
                BoundRange {
                    kernels: g.kernels,
                    beside: g.beside,
                    device: g.device,
                },
            );
        } else if let bind::Owner::Region(label) = g.owner {
            out.regions.push(BoundRegion {
                label,
                launch: BoundRange {
                    kernels: g.kernels,
                    beside: g.beside,
                    device: g.device,
                },
            });
        } else {
            out.other_kernels
                .extend(g.kernels.iter().map(|k| k.name.clone()));
        }
    }
    Ok(out)
}
