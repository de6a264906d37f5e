//! gemm-audit's Python extension (`gemm_audit._native`): thin bindings
//! over the Rust library, so Python reads, diffs, checks and compares
//! traces with the same code, and gets the same JSON documents, as the
//! command line. The Python package (`gemm_audit`) turns the documents
//! into dicts.

use gemm_audit::RecordedGemmTrace;
use gemm_audit::backend::{Backend, BackendKind};
use gemm_audit::diff::{Allowance, TraceDiff};
use gemm_audit::{compare as comparing, golden as goldens, recorder, render};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use std::path::PathBuf;

create_exception!(
    _native,
    GemmAuditError,
    PyException,
    "A gemm-audit error: an unreadable or corrupt trace, a missing golden, a bad argument."
);

fn fail(e: impl std::fmt::Display) -> PyErr {
    GemmAuditError::new_err(e.to_string())
}

fn read(path: &std::path::Path) -> PyResult<RecordedGemmTrace> {
    RecordedGemmTrace::read(path).map_err(fail)
}

fn allowances(allow: &[String]) -> PyResult<Vec<Allowance>> {
    allow
        .iter()
        .map(|a| Allowance::parse(a).map_err(fail))
        .collect()
}

/// The `show` document of the trace file at `path` (JSON text).
#[pyfunction]
fn read_trace(path: PathBuf) -> PyResult<String> {
    Ok(render::json::show_document(&read(&path)?))
}

/// The `diff` document of `candidate` against `golden` (JSON text); its
/// verdict passes when every difference is of a class or field in `allow`.
#[pyfunction]
#[pyo3(signature = (golden, candidate, allow = Vec::new()))]
fn diff(golden: PathBuf, candidate: PathBuf, allow: Vec<String>) -> PyResult<String> {
    let allow = allowances(&allow)?;
    let (g, c) = (read(&golden)?, read(&candidate)?);
    let d = TraceDiff::between(&g, &c);
    Ok(render::json::diff_document(&g, &c, &d, &allow))
}

/// The `check` document of the trace at `trace` (JSON text): its plan
/// rebuilt, validated against the live context of `backend` (`cpu`,
/// `cuda` or `auto`), and compared with `golden` (a file) or with its
/// golden under `golden_dir`, `allow` passing allowed differences.
#[pyfunction]
#[pyo3(signature = (trace, golden = None, golden_dir = None, allow = Vec::new(), backend = "cpu"))]
fn check(
    trace: PathBuf,
    golden: Option<PathBuf>,
    golden_dir: Option<PathBuf>,
    allow: Vec<String>,
    backend: &str,
) -> PyResult<String> {
    let allow = allowances(&allow)?;
    let t = read(&trace)?;
    let golden = match (golden, golden_dir) {
        (Some(g), _) => Some(read(&g)?),
        (None, Some(dir)) => Some(read(&goldens::find_golden(&dir, &t).map_err(fail)?)?),
        (None, None) => None,
    };
    let kind: BackendKind = backend.parse().map_err(fail)?;
    let (b, _note) = Backend::open(kind).map_err(fail)?;
    let r = recorder::check_golden(&b, &t, golden.as_ref(), &allow, false)
        .map_err(fail)?
        .report;
    Ok(render::json::json_document("check", r.passed(), &r))
}

/// The `compare` document of the trace files `traces`, or of the `*.gat`
/// files under folders among them (JSON text): one group per workload,
/// each device one vote; with `allow_single` a group of one trace passes.
/// Finding no trace is an error, never a pass.
#[pyfunction]
#[pyo3(signature = (traces, allow_single = false))]
fn compare(traces: Vec<PathBuf>, allow_single: bool) -> PyResult<String> {
    let members = comparing::trace_files(&traces)
        .map_err(fail)?
        .iter()
        .map(|p| {
            Ok(comparing::Member {
                label: p.display().to_string(),
                trace: read(p)?,
                device: None,
            })
        })
        .collect::<PyResult<Vec<_>>>()?;
    let c = comparing::compare(&members);
    let passed = if allow_single {
        c.agrees_allowing_single()
    } else {
        c.agrees()
    };
    Ok(render::json::json_document("compare", passed, &c))
}

/// Where the golden of the trace at `trace` lives under `golden_dir`
/// (`DIR/<device>/<workload>.gat`), whether or not it exists.
#[pyfunction]
fn golden_path(trace: PathBuf, golden_dir: PathBuf) -> PyResult<String> {
    let t = read(&trace)?;
    Ok(goldens::golden_path(&golden_dir, &t).display().to_string())
}

/// Keeps the trace at `trace` as the candidate of its golden under
/// `golden_dir` (`<workload>.gat.pending`, as `audit` keeps one), for
/// `gemm-audit review` / `accept` / `reject`. Returns its path.
#[pyfunction]
fn keep_candidate(trace: PathBuf, golden_dir: PathBuf) -> PyResult<String> {
    let t = read(&trace)?;
    let p = goldens::write_pending(&golden_dir, &t).map_err(fail)?;
    Ok(p.display().to_string())
}

/// Removes a candidate of the trace's golden left by an earlier run (a
/// run that matches the golden settles it, as `audit` does). Returns the
/// removed file, if there was one.
#[pyfunction]
fn remove_stale_candidate(trace: PathBuf, golden_dir: PathBuf) -> PyResult<Option<String>> {
    let t = read(&trace)?;
    let p = goldens::remove_stale_pending(&golden_dir, &t).map_err(fail)?;
    Ok(p.map(|p| p.display().to_string()))
}

/// Writes the trace of an observed step (`step`: the JSON of
/// `gemm_audit::observed::ObservedStep`; `outputs[i]`: GEMM `i`'s output
/// storage bytes) to `path`; an existing file is refused unless
/// `overwrite`. Returns the `show` document of the written trace.
#[pyfunction]
#[pyo3(signature = (step, outputs, path, overwrite = false))]
fn write_observed(
    step: &str,
    outputs: Vec<Vec<u8>>,
    path: PathBuf,
    overwrite: bool,
) -> PyResult<String> {
    let step = gemm_audit::observed::ObservedStep::from_json(step).map_err(fail)?;
    write_trace(step.trace(&outputs).map_err(fail)?, &path, overwrite)
}

/// Writes `trace` to `path` (refusing an existing file unless
/// `overwrite`) and returns its `show` document.
fn write_trace(
    trace: RecordedGemmTrace,
    path: &std::path::Path,
    overwrite: bool,
) -> PyResult<String> {
    trace.write(path, overwrite).map_err(fail)?;
    Ok(render::json::show_document(&trace))
}

/// [`write_observed`] with each output's fingerprint computed already
/// (`fingerprints[i]`: the JSON of GEMM `i`'s strong fingerprint, input
/// seed 0, as [`DeviceFingerprints::fingerprint`] returns it).
#[pyfunction]
#[pyo3(signature = (step, fingerprints, path, overwrite = false))]
fn write_observed_fingerprinted(
    step: &str,
    fingerprints: Vec<String>,
    path: PathBuf,
    overwrite: bool,
) -> PyResult<String> {
    let step = gemm_audit::observed::ObservedStep::from_json(step).map_err(fail)?;
    let fingerprints = fingerprints
        .iter()
        .map(|f| serde_json::from_str(f).map_err(|e| fail(format!("fingerprint {f:?}: {e}"))))
        .collect::<PyResult<Vec<gemm_audit::OutputFingerprint>>>()?;
    write_trace(
        step.trace_fingerprinted(fingerprints).map_err(fail)?,
        &path,
        overwrite,
    )
}

/// Fingerprints of device memory other code owns (a PyTorch tensor's
/// storage), computed on the device by gemm-audit's chunk kernel: nothing
/// is copied to the host. Opening it needs a CUDA device and NVRTC.
#[cfg(feature = "cuda")]
#[pyclass]
struct DeviceFingerprints(gemm_audit::backend::cuda::ForeignFingerprinter);

#[cfg(feature = "cuda")]
#[pymethods]
impl DeviceFingerprints {
    /// Opens the fingerprinter on the primary context of device `ordinal`.
    #[new]
    fn new(ordinal: usize) -> PyResult<Self> {
        Ok(DeviceFingerprints(
            gemm_audit::backend::cuda::ForeignFingerprinter::open(ordinal).map_err(fail)?,
        ))
    }

    /// The JSON of the strong fingerprint (input seed 0) of the `nbytes`
    /// bytes at device address `address`, which must lie inside one
    /// allocation of the device (else `GemmAuditError`) and be written
    /// already (synchronize first).
    fn fingerprint(&self, address: u64, nbytes: usize) -> PyResult<String> {
        let f = self
            .0
            .fingerprint(address, nbytes, gemm_audit::FingerprintMode::Strong, 0)
            .map_err(fail)?;
        serde_json::to_string(&f).map_err(fail)
    }

    /// [`DeviceFingerprints::fingerprint`] of several `(address, nbytes)`
    /// ranges at once, in order: their chunks are hashed in one launch,
    /// so many small outputs cost about as much as one. Any range outside
    /// one allocation of the device refuses the whole call, naming it.
    fn fingerprint_many(&self, ranges: Vec<(u64, usize)>) -> PyResult<Vec<String>> {
        self.0
            .fingerprint_many(&ranges, 0)
            .map_err(fail)?
            .iter()
            .map(|f| serde_json::to_string(f).map_err(fail))
            .collect()
    }
}

/// The strong fingerprint (input seed 0) of `data`, as JSON: what
/// [`DeviceFingerprints::fingerprint`] returns for the same bytes.
#[pyfunction]
fn fingerprint_bytes(data: Vec<u8>) -> PyResult<String> {
    serde_json::to_string(&gemm_audit::OutputFingerprint::of(0, &data)).map_err(fail)
}

/// Imports the PyTorch profiler trace at `path` (`.json` or `.json.gz`)
/// as `gemm-audit import` does; writes it to `out` when given (an existing
/// file is refused unless `overwrite`). Returns the `show` document.
#[pyfunction]
#[pyo3(signature = (path, out = None, workload = None, libraries = std::collections::BTreeMap::new(), torch_version = None, overwrite = false))]
fn import_profile(
    path: PathBuf,
    out: Option<PathBuf>,
    workload: Option<String>,
    libraries: std::collections::BTreeMap<String, String>,
    torch_version: Option<String>,
    overwrite: bool,
) -> PyResult<String> {
    let options = gemm_audit::profile::ImportOptions {
        workload,
        libraries,
        framework_version: torch_version,
        ..Default::default()
    };
    let imported = gemm_audit::profile::import_file(&path, &options).map_err(fail)?;
    match out {
        Some(out) => write_trace(imported.trace, &out, overwrite),
        None => Ok(render::json::show_document(&imported.trace)),
    }
}

/// The census document (`gemm-audit census --format json`) of profiles
/// and traces.
#[pyfunction]
fn census(paths: Vec<PathBuf>) -> PyResult<String> {
    let mut traces = Vec::with_capacity(paths.len());
    for p in &paths {
        let trace = match RecordedGemmTrace::read(p) {
            Ok(t) => t,
            Err(gemm_audit::Error::Format {
                source: gemm_audit::FormatError::BadMagic { .. },
                ..
            }) => {
                gemm_audit::profile::import_file(p, &Default::default())
                    .map_err(fail)?
                    .trace
            }
            Err(e) => return Err(fail(e)),
        };
        traces.push((p.display().to_string(), trace));
    }
    let refs: Vec<(String, &RecordedGemmTrace)> =
        traces.iter().map(|(l, t)| (l.clone(), t)).collect();
    let c = gemm_audit::census::census(&refs);
    Ok(render::json::json_document(
        "census",
        c.flagged().next().is_none(),
        &c,
    ))
}

/// Bound ranges as the Python side reads them: `{index: {"kernels",
/// "beside", "device"}}`.
fn bound_gemms_json(
    gemms: &std::collections::BTreeMap<u64, gemm_audit::profile::BoundRange>,
) -> serde_json::Map<String, serde_json::Value> {
    gemms
        .iter()
        .map(|(i, g)| {
            (
                i.to_string(),
                serde_json::json!({"kernels": g.kernels, "beside": g.beside, "device": g.device}),
            )
        })
        .collect()
}

/// Binds the GPU activities of a profiler trace (its JSON text) to the
/// recorder's `prefix<index>` ranges, with the importer's binder. Returns
/// JSON: `{"gemms": {index: {"kernels": [...], "beside": [...], "device":
/// n}}, "regions": [...], "other_kernels": [...], "convolution_kernels":
/// [...], "unbound": [...]}`.
#[pyfunction]
fn bind_profile(text: &[u8], prefix: &str) -> PyResult<String> {
    let b = gemm_audit::profile::bind_annotated(text, prefix).map_err(fail)?;
    let gemms = bound_gemms_json(&b.gemms);
    let regions: Vec<serde_json::Value> = b
        .regions
        .iter()
        .map(|r| {
            serde_json::json!({
                "label": r.label,
                "kernels": r.launch.kernels,
                "beside": r.launch.beside,
                "device": r.launch.device,
            })
        })
        .collect();
    serde_json::to_string(&serde_json::json!({
        "gemms": gemms,
        "regions": regions,
        "other_kernels": b.other_kernels,
        "convolution_kernels": b.convolution_kernels,
        "unbound": b.unbound,
    }))
    .map_err(fail)
}

/// The launching calls made while each CUDA graph was captured (the
/// recorder's `capture_prefix<index>` ranges), in order, each with the
/// GEMM range (`op_prefix<index>`) it was launched from. Returns JSON:
/// `{capture: [{"call", "owner", "direct"}]}`.
#[pyfunction]
fn graph_captures(text: &[u8], op_prefix: &str, capture_prefix: &str) -> PyResult<String> {
    let c = gemm_audit::profile::graph::captured_launches(text, op_prefix, capture_prefix)
        .map_err(fail)?;
    serde_json::to_string(&c).map_err(fail)
}

/// Binds each replay (the recorder's `replay_prefix<index>` ranges) to
/// the launching calls of its capture (`captures`: JSON `{replay:
/// [launch, ...]}`, as [`graph_captures`] gave them). Returns JSON:
/// `{replay: {"gemms": {index: {"kernels", "beside", "device"}},
/// "unowned_gemm_kernels": [...], "convolution_kernels": [...], "other":
/// [...]}}`; a replay that ran another number of activities than its
/// capture launched is an error naming both counts.
#[pyfunction]
fn bind_graph_replays(text: &[u8], replay_prefix: &str, captures: &str) -> PyResult<String> {
    use gemm_audit::profile::graph;
    let captures: std::collections::BTreeMap<u64, Vec<graph::CapturedLaunch>> =
        serde_json::from_str(captures).map_err(fail)?;
    let replayed = graph::replayed_activities(text, replay_prefix).map_err(fail)?;
    let mut out = serde_json::Map::new();
    for (k, launches) in &captures {
        let activities = replayed.get(k).map_or(&[][..], Vec::as_slice);
        let b = graph::bind_replay(launches, activities)
            .map_err(|e| fail(format!("replay {k}: {e}")))?;
        let gemms = bound_gemms_json(&b.gemms);
        out.insert(
            k.to_string(),
            serde_json::json!({
                "gemms": gemms,
                "unowned_gemm_kernels": b.unowned_gemm_kernels,
                "convolution_kernels": b.convolution_kernels,
                "other": b.other,
            }),
        );
    }
    serde_json::to_string(&out).map_err(fail)
}

/// What a kernel is, by its name, under the one rule the importer, the
/// census and the recorder share (`gemm_audit::profile::KernelClass`):
/// `gemm`, `gemm-reduce`, `attention`, `convolution` or `other`.
#[pyfunction]
fn kernel_class(name: &str) -> &'static str {
    gemm_audit::profile::KernelClass::of(name).as_str()
}

/// Runs the `gemm-audit` command line on `argv` (the first is the
/// program's name) and returns its exit code: the package's `gemm-audit`
/// command. The interpreter's lock is released while it runs.
#[pyfunction]
fn cli_main(py: Python<'_>, argv: Vec<String>) -> u8 {
    py.allow_threads(|| gemm_audit_cli::main_with(argv))
}

/// Reviews, accepts or rejects the pending candidates under `golden_dir`
/// (`action`: `review`, `accept` or `reject`) whose workload is in
/// `workloads` (all when empty); `expect` (accept only) lists the digests
/// `review` showed. Returns the `settle` document.
#[pyfunction]
#[pyo3(signature = (golden_dir, action, workloads = Vec::new(), expect = Vec::new()))]
fn settle(
    golden_dir: PathBuf,
    action: &str,
    workloads: Vec<String>,
    expect: Vec<String>,
) -> PyResult<String> {
    let action = match action {
        "review" => goldens::Settle::Review,
        "accept" => goldens::Settle::Accept,
        "reject" => goldens::Settle::Reject,
        other => {
            return Err(fail(format!(
                "action {other:?}: expected \"review\", \"accept\" or \"reject\""
            )));
        }
    };
    if !expect.is_empty() && action != goldens::Settle::Accept {
        return Err(fail("expect applies to accept only"));
    }
    let s = goldens::settle(&golden_dir, &workloads, action, &expect).map_err(fail)?;
    Ok(render::json::json_document("settle", s.passed(), &s))
}

/// Makes the traces at `traces` goldens under `golden_dir`, as `gemm-audit
/// bless --from` does: an existing golden is replaced only with `force`
/// (its difference is reported either way), and each trace's plan must
/// build first. Returns the `bless` document.
#[pyfunction]
#[pyo3(signature = (traces, golden_dir, force = false))]
fn bless_from(traces: Vec<PathBuf>, golden_dir: PathBuf, force: bool) -> PyResult<String> {
    let mut entries = Vec::new();
    let mut refused = false;
    for path in &traces {
        let t = read(path)?;
        t.plan().map_err(fail)?;
        let out = goldens::bless(&golden_dir, &t, force).map_err(fail)?;
        refused |= !out.written;
        entries.push(serde_json::json!({
            "trace": path,
            "golden": out.path,
            "written": out.written,
            "replaced": out.replaced.is_some(),
            "differences": out.replaced.map(|d| d.differences).unwrap_or_default(),
        }));
    }
    Ok(render::json::json_document(
        "bless",
        !refused,
        &serde_json::json!({ "goldens": entries }),
    ))
}

/// The differences of `candidate` from `golden` as `gemm-audit diff`
/// prints them (text).
#[pyfunction]
fn diff_text(golden: PathBuf, candidate: PathBuf) -> PyResult<String> {
    let (g, c) = (read(&golden)?, read(&candidate)?);
    Ok(TraceDiff::between(&g, &c).render())
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("GemmAuditError", m.py().get_type::<GemmAuditError>())?;
    m.add_function(wrap_pyfunction!(read_trace, m)?)?;
    m.add_function(wrap_pyfunction!(diff, m)?)?;
    m.add_function(wrap_pyfunction!(check, m)?)?;
    m.add_function(wrap_pyfunction!(compare, m)?)?;
    m.add_function(wrap_pyfunction!(golden_path, m)?)?;
    m.add_function(wrap_pyfunction!(keep_candidate, m)?)?;
    m.add_function(wrap_pyfunction!(remove_stale_candidate, m)?)?;
    m.add_function(wrap_pyfunction!(diff_text, m)?)?;
    m.add_function(wrap_pyfunction!(write_observed, m)?)?;
    m.add_function(wrap_pyfunction!(write_observed_fingerprinted, m)?)?;
    m.add_function(wrap_pyfunction!(fingerprint_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(import_profile, m)?)?;
    m.add_function(wrap_pyfunction!(census, m)?)?;
    m.add_function(wrap_pyfunction!(bind_profile, m)?)?;
    m.add_function(wrap_pyfunction!(kernel_class, m)?)?;
    m.add_function(wrap_pyfunction!(graph_captures, m)?)?;
    m.add_function(wrap_pyfunction!(bind_graph_replays, m)?)?;
    m.add_function(wrap_pyfunction!(cli_main, m)?)?;
    m.add_function(wrap_pyfunction!(settle, m)?)?;
    m.add_function(wrap_pyfunction!(bless_from, m)?)?;
    #[cfg(feature = "cuda")]
    m.add_class::<DeviceFingerprints>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
