//! Argument parsing and the subcommands.

/// `print!` to stdout, ending the process quietly (exit 0, as ripgrep does)
/// when stdout is a closed pipe (`gemm-audit diff a b | head`), instead of
/// panicking.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let text = format!($($arg)*);
        let mut stdout = std::io::stdout().lock();
        if let Err(e) = stdout
            .write_all(crate::cli::sanitize(&text).as_bytes())
            .and_then(|()| stdout.flush())
        {
            crate::cli::stdout_failed(e);
        }
    }};
}

/// `println!` with the closed-pipe handling of [`out!`].
macro_rules! outln {
    () => { out!("\n") };
    ($($arg:tt)*) => {{
        out!($($arg)*);
        out!("\n");
    }};
}

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use gemm_audit::audit::{self, AuditOptions, Progress};
use gemm_audit::backend::{Backend, BackendKind, DeviceLabel, DeviceSelection};
use gemm_audit::diff::{DiffClass, TraceDiff};
use gemm_audit::fleet;
use gemm_audit::golden;
use gemm_audit::recorder::{self, ReplayOutcome};
use gemm_audit::workload::{BUILTINS, Workload};
use gemm_audit::{Error, RecordedGemmTrace};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::path::PathBuf;

/// Success: no finding.
pub const EXIT_OK: u8 = 0;
/// A finding: a violated contract, a refused check, a replay that differs.
pub const EXIT_FINDING: u8 = 1;
/// Bad command line (clap's own code).
#[cfg(test)]
const EXIT_USAGE: u8 = 2;
/// Bad input: unreadable or corrupt trace, unknown or malformed workload,
/// a file that would be overwritten.
pub const EXIT_BAD_INPUT: u8 = 3;
/// The backend is unavailable or failed.
pub const EXIT_BACKEND: u8 = 4;
/// `diff` found disallowed differences: 64 + the sum of their class bits.
pub const EXIT_DIFF_BASE: u8 = 64;

const EXIT_CODES: &str = "\
Exit codes:
  0       success: every contract holds, the check passed, no disallowed difference
  1       finding: a contract is violated, a replay was refused or differs
  2       bad command line
  3       bad input: unreadable, corrupt or non-regular file, unknown or
          malformed workload, work over the budget (--max-gflop,
          --max-memory-gib), an output file that exists (pass --force),
          a device the backend does not have (--device)
  4       backend unavailable or failed
  64+N    diff only: disallowed differences were found; N is the sum of
          identity=1, route=2, numeric=4, structural=8, policy=16";

/// Audit the determinism of GPU matrix multiplies: record which kernel
/// served every GEMM, store it, rebuild and check it, refuse drift before
/// launch, and audit output bits.
#[derive(Debug, Parser)]
#[command(name = "gemm-audit", version, after_help = EXIT_CODES)]
pub struct Args {
    /// Print only results and errors: no progress bars, no notes.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// Also print notes that are usually left out (e.g. why CUDA was not used
    /// when --backend auto fell back to the CPU).
    #[arg(short, long, global = true)]
    pub verbose: bool,
    /// Most compute one command may run, in GFLOP (estimated before any
    /// launch; default 200 on the CPU, 500000 with CUDA).
    #[arg(long, global = true, value_name = "GFLOP")]
    pub max_gflop: Option<f64>,
    /// Most host memory one command may hold, in GiB (estimated before any
    /// allocation; default 8 on the CPU, 32 with CUDA).
    #[arg(long, global = true, value_name = "GIB")]
    pub max_memory_gib: Option<f64>,
    #[command(subcommand)]
    pub command: Command,
}

/// How much the command line says besides results and errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Verbosity {
    Quiet,
    Normal,
    Verbose,
}

static VERBOSITY: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(1);

/// `--max-gflop` and `--max-memory-gib`, when given.
static LIMITS: std::sync::OnceLock<(Option<f64>, Option<f64>)> = std::sync::OnceLock::new();

/// The budget of this command on `backend`: its defaults, raised or lowered
/// by the flags.
fn budget(backend: &Backend) -> gemm_audit::budget::Budget {
    let mut b = gemm_audit::budget::Budget::for_backend(backend.name());
    let (gflop, gib) = LIMITS.get().copied().unwrap_or((None, None));
    if let Some(g) = gflop {
        b.max_gflop = g;
    }
    if let Some(g) = gib {
        b.max_memory_bytes = (g * (1u64 << 30) as f64) as u64;
    }
    b
}

/// Refuses a workload whose estimated cost is over the budget, before any
/// work (`runs` eager runs, plus capture and replay).
fn check_workload_budget(backend: &Backend, w: &Workload, runs: u64) -> Result<()> {
    let shapes = w.gemms.iter().map(|g| {
        (
            gemm_audit::route::GemmShape {
                m: g.m,
                k: g.k,
                n: g.n,
            },
            g.dtype,
        )
    });
    let e = gemm_audit::budget::Estimate::of(shapes, runs);
    budget(backend).check(&format!("workload {}", w.name), &e)?;
    Ok(())
}

fn verbosity() -> Verbosity {
    match VERBOSITY.load(std::sync::atomic::Ordering::Relaxed) {
        0 => Verbosity::Quiet,
        1 => Verbosity::Normal,
        _ => Verbosity::Verbose,
    }
}

/// Prints a note to stderr unless `-q`.
macro_rules! note {
    ($($arg:tt)*) => {
        if crate::cli::verbosity() > crate::cli::Verbosity::Quiet {
            eprintln!("{}", crate::cli::sanitize(&format!($($arg)*)));
        }
    };
}

/// Text for a terminal: control characters (an escape sequence in a kernel
/// name or workload read from a file, say) are shown escaped, never sent
/// raw; newlines and tabs stay.
pub fn sanitize(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
        return std::borrow::Cow::Borrowed(s);
    }
    std::borrow::Cow::Owned(
        s.chars()
            .map(|c| {
                if c.is_control() && c != '\n' && c != '\t' {
                    c.escape_unicode().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect(),
    )
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the built-in suite and print a verdict per contract (the main job).
    ///
    /// Checks run-to-run bit identity, eager vs replay identity, batch
    /// invariance across m, agreement with the CPU scalar-FMA reference,
    /// that the planted nondeterministic control is detected and refused,
    /// and that every route mutation is refused before launch.
    #[command(after_help = EXIT_CODES)]
    Audit(AuditArgs),
    /// Record workloads and write them as golden traces (DIR/<device>/<workload>.gat).
    ///
    /// An existing golden is never replaced without --force; the difference
    /// from it is printed either way.
    #[command(after_help = EXIT_CODES)]
    Bless {
        /// Built-in names or .toml/.json files; default: the audit's suite for the backend.
        #[arg(conflicts_with = "from")]
        workloads: Vec<String>,
        /// Accept these recorded traces (e.g. from a CI machine with the GPU)
        /// as goldens instead of recording here.
        #[arg(long, value_name = "TRACE", num_args = 1..)]
        from: Vec<PathBuf>,
        #[arg(long, value_name = "DIR", default_value = "traces")]
        golden_dir: PathBuf,
        /// Replace existing goldens.
        #[arg(long)]
        force: bool,
        #[arg(long, value_enum, default_value_t = BackendKind::Auto)]
        backend: BackendKind,
        #[command(flatten)]
        device: DeviceArgs,
    },
    /// Compare traces from many devices; name the one that disagrees.
    ///
    /// A deterministic launch whose bits differ from the majority of its
    /// device class names a suspect device. Takes trace files or folders (searched for *.gat). Traces are grouped
    /// by workload and device class; each launch's output fingerprint is put
    /// to a vote. Vendor and atomic routes are reported, never counted as
    /// outliers.
    #[command(after_help = EXIT_CODES)]
    Compare {
        /// Trace files, or folders to search for *.gat files.
        #[arg(required = true)]
        traces: Vec<PathBuf>,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
        /// Also write a JUnit XML file: one case per group and launch.
        #[arg(long, value_name = "FILE")]
        junit: Option<PathBuf>,
    },
    /// Show the candidates `audit --golden-dir` kept beside drifted goldens.
    #[command(after_help = EXIT_CODES)]
    Review {
        /// Only these workloads (default: every pending candidate).
        workloads: Vec<String>,
        #[arg(long, value_name = "DIR", default_value = "traces")]
        golden_dir: PathBuf,
    },
    /// Make pending candidates the goldens (after `review`).
    #[command(after_help = EXIT_CODES)]
    Accept {
        /// Only these workloads (default: every pending candidate).
        workloads: Vec<String>,
        #[arg(long, value_name = "DIR", default_value = "traces")]
        golden_dir: PathBuf,
    },
    /// Drop pending candidates; the goldens stay.
    #[command(after_help = EXIT_CODES)]
    Reject {
        /// Only these workloads (default: every pending candidate).
        workloads: Vec<String>,
        #[arg(long, value_name = "DIR", default_value = "traces")]
        golden_dir: PathBuf,
    },
    /// Run a workload eagerly, capture and replay it, and write its trace.
    #[command(after_help = EXIT_CODES)]
    Record {
        /// A built-in workload name or a .toml/.json workload file.
        workload: String,
        /// Trace file to write (with `--device all`: one per device, named
        /// FILE with `.dev<N>` before its extension, e.g. run.dev1.gat).
        #[arg(short, long, value_name = "FILE")]
        out: PathBuf,
        /// Replace the output file if it exists.
        #[arg(long)]
        force: bool,
        #[arg(long, value_enum, default_value_t = BackendKind::Auto)]
        backend: BackendKind,
        /// Also dump each launch's raw output bytes into this folder (for
        /// `diff --outputs`; with `--device all`, into DIR/dev<N>).
        #[arg(long, value_name = "DIR")]
        outputs: Option<PathBuf>,
        #[command(flatten)]
        device: DeviceArgs,
    },
    /// Rebuild a stored trace's plan and validate it against the live context.
    #[command(after_help = EXIT_CODES)]
    #[command(group(clap::ArgGroup::new("golden_source").args(["golden", "golden_dir"])))]
    Check {
        /// Trace file to check.
        trace: PathBuf,
        /// Also compare with this golden trace (names the first changed route and field).
        #[arg(long, value_name = "FILE", conflicts_with = "golden_dir")]
        golden: Option<PathBuf>,
        /// Find the golden for this trace's workload and device under DIR (DIR/<device>/<workload>.gat).
        #[arg(long, value_name = "DIR")]
        golden_dir: Option<PathBuf>,
        /// Replay the trace and compare output fingerprints.
        #[arg(long)]
        replay: bool,
        /// Difference classes from the golden that pass (comma-separated, as
        /// for `diff`), e.g. `--allow identity` to accept a driver upgrade.
        #[arg(long, value_enum, value_delimiter = ',', requires = "golden_source")]
        allow: Vec<DiffClass>,
        #[arg(long, value_enum, default_value_t = BackendKind::Auto)]
        backend: BackendKind,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
        #[command(flatten)]
        device: DeviceArgs,
    },
    /// Print a trace as a table or as JSON.
    #[command(after_help = EXIT_CODES)]
    Show {
        trace: PathBuf,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// Compare two traces; exit non-zero on any difference not allowed.
    #[command(after_help = EXIT_CODES)]
    Diff {
        golden: PathBuf,
        candidate: PathBuf,
        /// Difference classes that pass (comma-separated).
        #[arg(long, value_enum, value_delimiter = ',')]
        allow: Vec<DiffClass>,
        /// Output dumps of the two traces (`record --outputs`), to count differing elements and ULPs.
        #[arg(long, num_args = 2, value_names = ["GOLDEN_DIR", "CANDIDATE_DIR"])]
        outputs: Vec<PathBuf>,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// List the built-in workloads, or print one as TOML.
    #[command(after_help = EXIT_CODES)]
    Workloads {
        /// Print this built-in workload as a TOML file you can edit.
        #[arg(long, value_name = "NAME")]
        show: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Human-readable table or text.
    Table,
    /// JSON.
    Json,
}

/// The error and its causes on one line, each said once (library errors
/// already name their cause in their message).
pub fn error_message(e: &anyhow::Error) -> String {
    let mut msg = String::new();
    for cause in e.chain() {
        let s = cause.to_string();
        if !msg.contains(&s) {
            if !msg.is_empty() {
                msg.push_str(": ");
            }
            msg.push_str(&s);
        }
    }
    msg
}

/// The exit code of an error that escaped a subcommand.
pub fn exit_code_of(e: &anyhow::Error) -> u8 {
    match e.downcast_ref::<Error>() {
        Some(Error::Backend { .. }) => EXIT_BACKEND,
        Some(Error::Refused(_)) => EXIT_FINDING,
        Some(_) => EXIT_BAD_INPUT,
        None => EXIT_BAD_INPUT,
    }
}

pub fn run(args: Args) -> Result<u8> {
    let level = match (args.quiet, args.verbose) {
        (true, _) => Verbosity::Quiet,
        (false, true) => Verbosity::Verbose,
        (false, false) => Verbosity::Normal,
    };
    VERBOSITY.store(level as u8, std::sync::atomic::Ordering::Relaxed);
    let _ = LIMITS.set((args.max_gflop, args.max_memory_gib));
    match args.command {
        Command::Audit(args) => cmd_audit(args),
        Command::Bless {
            workloads,
            from,
            golden_dir,
            force,
            backend,
            device,
        } if !from.is_empty() => {
            let _ = (workloads, backend, device);
            cmd_bless_from(&from, &golden_dir, force)
        }
        Command::Bless {
            workloads,
            golden_dir,
            force,
            backend,
            device,
            ..
        } => cmd_bless(workloads, &golden_dir, force, backend, &device),
        Command::Compare {
            traces,
            format,
            junit,
        } => cmd_compare(&traces, format, junit.as_deref()),
        Command::Review {
            workloads,
            golden_dir,
        } => cmd_pending(PendingAction::Review, &workloads, &golden_dir),
        Command::Accept {
            workloads,
            golden_dir,
        } => cmd_pending(PendingAction::Accept, &workloads, &golden_dir),
        Command::Reject {
            workloads,
            golden_dir,
        } => cmd_pending(PendingAction::Reject, &workloads, &golden_dir),
        Command::Record {
            workload,
            out,
            force,
            backend,
            outputs,
            device,
        } => cmd_record(&workload, &out, force, backend, outputs.as_deref(), &device),
        Command::Check {
            trace,
            golden,
            golden_dir,
            replay,
            allow,
            backend,
            format,
            device,
        } => cmd_check(
            &trace, golden, golden_dir, replay, &allow, backend, format, &device,
        ),
        Command::Show { trace, format } => cmd_show(&trace, format),
        Command::Diff {
            golden,
            candidate,
            allow,
            format,
            outputs,
        } => cmd_diff(&golden, &candidate, &allow, format, &outputs),
        Command::Workloads { show } => cmd_workloads(show),
    }
}

/// `--device N|all`, shared by `audit`, `record`, `check` and `bless`.
#[derive(Debug, Clone, clap::Args)]
pub struct DeviceArgs {
    /// Device to run on: a CUDA device ordinal, or `all` for every CUDA
    /// device at once (one worker, context and stream each). The CPU
    /// backend is one device, 0.
    #[arg(long, value_name = "N|all", default_value = "0")]
    pub device: DeviceSelection,
    /// Testing only: flip a bit in every output of the first GEMM of the
    /// first workload on this device (`gpu-to-gpu` must name it).
    #[arg(long, hide = true, value_name = "DEVICE")]
    pub plant_fault: Option<usize>,
    /// Testing only: with `--backend cpu --device all`, open N CPU backends
    /// standing in for devices 0..N-1.
    #[arg(long, hide = true, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64))]
    pub cpu_stand_ins: Option<u16>,
}

impl DeviceArgs {
    fn all(&self) -> bool {
        self.device == DeviceSelection::All
    }
}

/// Opens the devices `dev` selects (see [`Backend::open_devices`]); the
/// hidden `--cpu-stand-ins N` opens N CPU backends for `--backend cpu
/// --device all`. Returns the note saying why CUDA was not used, if any.
fn open_devices(
    kind: BackendKind,
    dev: &DeviceArgs,
) -> Result<(gemm_audit::backend::OpenedDevices, Option<String>)> {
    let (devices, note) = match (dev.device, dev.cpu_stand_ins, kind) {
        (DeviceSelection::All, Some(n), BackendKind::Cpu) => (
            (0..n as usize)
                .map(|i| {
                    (
                        DeviceLabel::new("cpu", i),
                        Backend::Cpu(gemm_audit::backend::cpu::CpuBackend::default()),
                    )
                })
                .collect(),
            None,
        ),
        _ => Backend::open_devices(kind, dev.device)?,
    };
    Ok((devices, note))
}

/// Prints why CUDA was not used, for whoever built with CUDA or asks (-v).
fn print_backend_note(note: &Option<String>) {
    if let Some(note) = note {
        if cfg!(feature = "cuda") || verbosity() == Verbosity::Verbose {
            note!("gemm-audit: {note}");
        }
    }
}

/// Plants the hidden `--plant-fault DEVICE` into that device's backend:
/// every output of GEMM `gemm` gets a bit flipped.
fn plant_fault(
    devices: &mut [(DeviceLabel, Backend)],
    dev: &DeviceArgs,
    gemm: Option<&str>,
) -> Result<()> {
    let (Some(target), Some(gemm)) = (dev.plant_fault, gemm) else {
        return Ok(());
    };
    let Some(slot) = devices.iter_mut().find(|(l, _)| l.ordinal == target) else {
        return Err(Error::NoSuchDevice {
            backend: devices
                .first()
                .map(|(l, _)| l.backend.clone())
                .unwrap_or_default(),
            requested: target,
            available: devices
                .iter()
                .map(|(l, _)| l.ordinal.to_string())
                .collect::<Vec<_>>()
                .join(", "),
        }
        .into());
    };
    let placeholder = Backend::Cpu(gemm_audit::backend::cpu::CpuBackend::default());
    let real = std::mem::replace(&mut slot.1, placeholder);
    slot.1 = fleet::plant_fault(real, gemm);
    note!("gemm-audit: planted a fault in GEMM {gemm} on {}", slot.0);
    Ok(())
}

/// The first error of per-device results, naming its device; else the values.
fn all_ok<T>(
    devices: &[(DeviceLabel, Backend)],
    results: Vec<gemm_audit::Result<T>>,
) -> Result<Vec<T>> {
    let mut out = Vec::with_capacity(results.len());
    for ((label, _), r) in devices.iter().zip(results) {
        out.push(r.with_context(|| format!("on {label}"))?);
    }
    Ok(out)
}

fn read_trace(path: &std::path::Path) -> Result<RecordedGemmTrace> {
    Ok(RecordedGemmTrace::read(path)?)
}

/// Progress bar on stderr, one stage at a time.
struct Bar {
    bar: ProgressBar,
}

impl Bar {
    fn new(enabled: bool) -> Self {
        let bar = ProgressBar::with_draw_target(
            Some(0),
            if enabled {
                ProgressDrawTarget::stderr()
            } else {
                ProgressDrawTarget::hidden()
            },
        );
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        Bar { bar }
    }
}

impl Progress for Bar {
    fn stage(&mut self, name: &str, total: usize) {
        self.bar.set_length(total as u64);
        self.bar.set_position(0);
        self.bar.set_message(name.to_string());
    }

    fn advance(&mut self, done: usize) {
        self.bar.set_position(done as u64);
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}

/// Arguments of `audit`.
#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    /// Backend to audit; `auto` uses CUDA when present, else the CPU.
    #[arg(long, value_enum, default_value_t = BackendKind::Auto)]
    pub backend: BackendKind,
    /// Eager runs compared for run-to-run identity (at least 2).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(2..=1000))]
    pub runs: u32,
    /// Most runs of the nondeterministic control before it counts as undetected.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(2..=10000))]
    pub control_attempts: u32,
    /// Workloads to audit (built-in names or .toml/.json files); default: transformer-block and
    /// m-sweep, plus tensor-core-sweep, vendor-sweep and batch-invariant on CUDA.
    #[arg(long = "workload", value_name = "WORKLOAD")]
    pub workloads: Vec<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Do not draw a progress bar (it is hidden anyway when stderr is not a terminal).
    #[arg(long)]
    pub no_progress: bool,
    /// Compare each recorded trace with its golden under this folder (route drift in the report).
    #[arg(long, value_name = "DIR")]
    pub golden_dir: Option<PathBuf>,
    /// Write report.md and a self-contained report.html into this folder.
    #[arg(long, value_name = "DIR")]
    pub report: Option<PathBuf>,
    /// Write JUnit XML (one test case per contract per GEMM) to this file.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Also write every recorded trace into this folder, for `compare`
    /// (<workload>.gat; with `--device all`, <workload>.dev<N>.gat).
    #[arg(long, value_name = "DIR")]
    pub traces: Option<PathBuf>,
    #[command(flatten)]
    pub device: DeviceArgs,
}

fn cmd_audit(args: AuditArgs) -> Result<u8> {
    let (mut devices, note) = open_devices(args.backend, &args.device)?;
    let first = &devices[0].1;
    let mut opts = AuditOptions {
        runs: args.runs as usize,
        control_attempts: args.control_attempts as usize,
        ..AuditOptions::for_backend(first)
    };
    if !args.workloads.is_empty() {
        opts.workloads = args
            .workloads
            .iter()
            .map(|w| Workload::load(w))
            .collect::<Result<_, _>>()?;
    }
    for w in &opts.workloads {
        check_workload_budget(first, w, opts.runs as u64 + 2)?;
    }
    let fault_gemm = opts
        .workloads
        .first()
        .and_then(|w| w.gemms.first())
        .map(|g| g.name.clone());
    plant_fault(&mut devices, &args.device, fault_gemm.as_deref())?;
    if args.device.all() {
        return audit_devices(&args, &devices, &opts, note);
    }
    let backend = &devices[0].1;
    let mut bar = Bar::new(!args.no_progress && verbosity() > Verbosity::Quiet);
    let mut report = audit::run_audit(backend, &opts, &mut bar)?;
    drop(bar);
    report.note = note;
    if let Some(dir) = &args.traces {
        write_traces(dir, &report.traces, None)?;
    }
    // Golden drift is a contract row like any other, so every artifact
    // (table, JSON, reports, JUnit) and the exit code agree.
    let drift = match &args.golden_dir {
        Some(dir) => report.compare_with_goldens(dir)?,
        None => Vec::new(),
    };
    match args.format {
        Format::Table => print_table(&report.to_table()),
        Format::Json => outln!(
            "{}",
            gemm_audit::report::json_document("audit", report.passed(), &report)
        ),
    }
    write_audit_artifacts(&args, &report, drift)?;
    Ok(if report.passed() {
        EXIT_OK
    } else {
        EXIT_FINDING
    })
}

/// Writes every trace of one device into `dir` (`<workload>.gat`, or
/// `<workload>.dev<N>.gat` for device N of `--device all`), replacing old ones.
fn write_traces(
    dir: &std::path::Path,
    traces: &[RecordedGemmTrace],
    ordinal: Option<usize>,
) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for t in traces {
        let path = dir.join(format!("{}.gat", golden_file_stem(&t.workload)));
        let path = match ordinal {
            Some(n) => fleet::device_path(&path, n),
            None => path,
        };
        t.write(&path, true)?;
    }
    Ok(())
}

/// A workload name as a file name: path separators and other odd
/// characters become `-`.
fn golden_file_stem(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// `--report` and `--junit` of an audit, and the drift notes.
fn write_audit_artifacts(
    args: &AuditArgs,
    report: &gemm_audit::audit::AuditReport,
    drift: Vec<(String, TraceDiff)>,
) -> Result<()> {
    let input = gemm_audit::report::ReportInput {
        audit: report,
        drift,
    };
    if let Some(dir) = &args.report {
        gemm_audit::report::write_report(dir, &input)?;
        note!(
            "gemm-audit: report written to {}",
            dir.join("report.html").display()
        );
    }
    if let Some(path) = &args.junit {
        gemm_audit::trace::codec::write_atomic(
            path,
            gemm_audit::report::junit(report).as_bytes(),
            true,
        )?;
    }
    for (w, d) in &input.drift {
        if !d.is_empty() {
            note!("gemm-audit: {w} differs from its golden:\n{}", d.render());
        }
    }
    Ok(())
}

/// `audit --device all`: every device audited at once (one worker each),
/// then the `gpu-to-gpu` contract across them.
fn audit_devices(
    args: &AuditArgs,
    devices: &[(DeviceLabel, Backend)],
    opts: &AuditOptions,
    note: Option<String>,
) -> Result<u8> {
    let names: Vec<String> = devices.iter().map(|(l, _)| l.to_string()).collect();
    note!(
        "gemm-audit: auditing {} device(s) at once: {}",
        devices.len(),
        names.join("; ")
    );
    let results = fleet::on_each_device(devices, |label, backend| {
        let r = audit::run_audit(backend, opts, &mut audit::NoProgress)?;
        note!(
            "gemm-audit: {label}: {} in {:.1} s",
            if r.passed() { "pass" } else { "FAIL" },
            r.elapsed_seconds
        );
        Ok(r)
    });
    let reports = all_ok(devices, results)?;
    let mut per_device = Vec::with_capacity(reports.len());
    let mut drift = Vec::new();
    for (i, ((label, _), mut report)) in devices.iter().zip(reports).enumerate() {
        report.note = note.clone();
        if let Some(dir) = &args.traces {
            write_traces(dir, &report.traces, Some(label.ordinal))?;
        }
        if let Some(dir) = &args.golden_dir {
            // Devices are in ascending ordinal: only the first keeps a
            // pending candidate, so they do not overwrite each other's.
            for (w, d) in report.compare_with_goldens_keeping(dir, i == 0)? {
                drift.push((format!("dev{}.{w}", label.ordinal), d));
            }
        }
        per_device.push((label.clone(), report));
    }
    let fleet = fleet::FleetReport::new(per_device);
    let combined = fleet.combined();
    match args.format {
        Format::Table => print_table(&combined.to_table()),
        Format::Json => outln!(
            "{}",
            gemm_audit::report::json_document("audit", fleet.passed(), &fleet)
        ),
    }
    write_audit_artifacts(args, &combined, drift)?;
    Ok(if fleet.passed() {
        EXIT_OK
    } else {
        EXIT_FINDING
    })
}

fn cmd_bless(
    workloads: Vec<String>,
    dir: &std::path::Path,
    force: bool,
    kind: BackendKind,
    dev: &DeviceArgs,
) -> Result<u8> {
    let (mut devices, note) = open_devices(kind, dev)?;
    print_backend_note(&note);
    let ws: Vec<Workload> = if workloads.is_empty() {
        AuditOptions::for_backend(&devices[0].1).workloads
    } else {
        workloads
            .iter()
            .map(|w| Workload::load(w))
            .collect::<Result<_, _>>()?
    };
    for w in &ws {
        check_workload_budget(&devices[0].1, w, 2)?;
    }
    let fault_gemm = ws
        .first()
        .and_then(|w| w.gemms.first())
        .map(|g| g.name.clone());
    plant_fault(&mut devices, dev, fault_gemm.as_deref())?;
    // Record everything on every device first: nothing is blessed unless
    // every device reproduces its eager run and the devices agree.
    let mut recorded: Vec<(DeviceLabel, RecordedGemmTrace)> = Vec::new();
    for w in &ws {
        let results =
            fleet::on_each_device(&devices, |_, b| recorder::record(b, w, &mut |_, _| {}));
        for ((label, _), rec) in devices.iter().zip(all_ok(&devices, results)?) {
            if !rec.replay.is_identical() {
                return Err(anyhow::anyhow!(
                    "{}: replay did not reproduce the eager run on {label} ({:?}); not blessing it",
                    w.name,
                    rec.replay
                ));
            }
            recorded.push((label.clone(), rec.trace));
        }
    }
    let agreement = fleet::gpu_to_gpu_traces(&recorded);
    if !agreement.passed() {
        for c in agreement
            .checks
            .iter()
            .filter(|c| c.verdict == audit::Verdict::Fail)
        {
            outln!("{}  {}  FAIL  {}", c.contract, c.subject, c.detail);
        }
        eprintln!(
            "gemm-audit: error: the devices disagree on a deterministic route; nothing was blessed"
        );
        return Ok(EXIT_FINDING);
    }
    let mut refused = false;
    let mut done: Vec<(String, String)> = Vec::new();
    for (label, trace) in &recorded {
        // One golden per (workload, device class): the devices agree.
        let key = (
            trace.workload.clone(),
            golden::device_key(&trace.context.device),
        );
        if done.contains(&key) {
            continue;
        }
        done.push(key);
        let out = golden::bless(dir, trace, force)?;
        let what = if devices.len() > 1 {
            format!("{} (from {label})", trace.workload)
        } else {
            trace.workload.clone()
        };
        refused |= print_bless(&what, &out);
    }
    Ok(if refused { EXIT_BAD_INPUT } else { EXIT_OK })
}

/// Accepts traces recorded elsewhere as goldens: the same rules as
/// `bless` (the difference is printed; replacing needs `--force`), and the
/// plan of each must build first.
fn cmd_bless_from(traces: &[PathBuf], dir: &std::path::Path, force: bool) -> Result<u8> {
    let mut refused = false;
    for path in traces {
        let t = read_trace(path)?;
        t.plan().map_err(Error::from)?;
        let out = golden::bless(dir, &t, force)?;
        refused |= print_bless(&path.display().to_string(), &out);
    }
    Ok(if refused { EXIT_BAD_INPUT } else { EXIT_OK })
}

/// Says what `bless` did for `what` (a workload or a trace file); true when
/// it refused to replace an existing golden.
fn print_bless(what: &str, out: &golden::BlessOutcome) -> bool {
    match (&out.replaced, out.written) {
        (None, true) => outln!("blessed {what} -> {}", out.path.display()),
        (Some(d), true) if d.is_empty() => {
            outln!("blessed {what} -> {} (unchanged)", out.path.display())
        }
        (Some(d), true) => out!(
            "blessed {what} -> {}, replacing:\n{}",
            out.path.display(),
            d.render()
        ),
        (Some(d), false) if d.is_empty() => outln!("{} is up to date", out.path.display()),
        (Some(d), false) => {
            out!(
                "not replacing {} (pass --force); it differs by:\n{}",
                out.path.display(),
                d.render()
            );
            return true;
        }
        (None, false) => {
            outln!("not replacing {} (pass --force)", out.path.display());
            return true;
        }
    }
    false
}

/// Trace files named, or found (recursively, *.gat) under named folders.
fn trace_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    fn walk(dir: &std::path::Path, out: &mut Vec<PathBuf>) -> Result<()> {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .flatten()
            .map(|e| e.path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, out)?;
            } else if p.extension().is_some_and(|e| e == "gat") {
                out.push(p);
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            walk(p, &mut out)?;
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

fn cmd_compare(paths: &[PathBuf], format: Format, junit: Option<&std::path::Path>) -> Result<u8> {
    use gemm_audit::compare::{Member, compare};
    let members = trace_files(paths)?
        .into_iter()
        .map(|p| {
            Ok(Member {
                label: p.display().to_string(),
                trace: read_trace(&p)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let c = compare(&members);
    match format {
        Format::Json => outln!(
            "{}",
            gemm_audit::report::json_document("compare", c.agrees(), &c)
        ),
        Format::Table => {
            for g in &c.groups {
                outln!(
                    "{} on {}: {} traces, {}",
                    g.workload,
                    g.device,
                    g.members,
                    if g.agrees() { "agree" } else { "DISAGREE" }
                );
                for l in &g.mismatched {
                    outln!("  left out (another launch set): {l}");
                }
                for l in g.launches.iter().filter(|l| !l.outliers.is_empty()) {
                    outln!(
                        "  launch {} {} ({}): {}/{} agree{}",
                        l.launch,
                        l.gemm,
                        l.contract,
                        l.agree,
                        l.voters,
                        if l.deterministic {
                            ""
                        } else {
                            " (no cross-device promise)"
                        }
                    );
                    for o in &l.outliers {
                        outln!("    outlier {} [{}]", o.label, o.device);
                    }
                }
            }
            outln!("compare: {}", if c.agrees() { "PASS" } else { "FAIL" });
        }
    }
    if let Some(path) = junit {
        gemm_audit::trace::codec::write_atomic(
            path,
            gemm_audit::report::compare_junit(&c).as_bytes(),
            true,
        )?;
    }
    Ok(if c.agrees() { EXIT_OK } else { EXIT_FINDING })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PendingAction {
    Review,
    Accept,
    Reject,
}

/// `review`, `accept` and `reject` of the candidates kept beside drifted goldens.
fn cmd_pending(action: PendingAction, workloads: &[String], dir: &std::path::Path) -> Result<u8> {
    let pending = golden::pending(dir, workloads)?;
    if pending.is_empty() {
        outln!("no pending candidates under {}", dir.display());
        return Ok(EXIT_OK);
    }
    for p in &pending {
        match action {
            PendingAction::Review => {
                outln!("{} -> {}", p.path.display(), p.golden.display());
                match &p.diff {
                    Some(d) if d.is_empty() => outln!("  identical to the golden"),
                    Some(d) => out!("{}", d.render()),
                    None => outln!("  no golden yet: accepting creates it"),
                }
            }
            PendingAction::Accept => {
                golden::accept(p)?;
                outln!("accepted {} -> {}", p.path.display(), p.golden.display());
            }
            PendingAction::Reject => {
                golden::reject(p)?;
                outln!("rejected {}", p.path.display());
            }
        }
    }
    // Pending candidates under review are findings until settled.
    Ok(if action == PendingAction::Review {
        EXIT_FINDING
    } else {
        EXIT_OK
    })
}

fn cmd_record(
    workload: &str,
    out: &std::path::Path,
    force: bool,
    kind: BackendKind,
    outputs: Option<&std::path::Path>,
    dev: &DeviceArgs,
) -> Result<u8> {
    let w = Workload::load(workload)?;
    // Refuse before doing the work, not after.
    if !dev.all() && out.exists() && !force {
        return Err(Error::WouldOverwrite { path: out.into() }.into());
    }
    let (mut devices, note) = open_devices(kind, dev)?;
    print_backend_note(&note);
    check_workload_budget(&devices[0].1, &w, 2)?;
    plant_fault(&mut devices, dev, w.gemms.first().map(|g| g.name.as_str()))?;
    if !dev.all() {
        let bar = if verbosity() > Verbosity::Quiet {
            ProgressBar::new(w.gemms.len() as u64)
        } else {
            ProgressBar::hidden()
        };
        let backend = &devices[0].1;
        let rec = recorder::record(backend, &w, &mut |d, _| bar.set_position(d as u64))?;
        bar.finish_and_clear();
        return write_recording(&w, &rec, backend.name(), None, out, force, outputs);
    }
    let paths: Vec<PathBuf> = devices
        .iter()
        .map(|(l, _)| fleet::device_path(out, l.ordinal))
        .collect();
    if !force {
        if let Some(p) = paths.iter().find(|p| p.exists()) {
            return Err(Error::WouldOverwrite { path: p.clone() }.into());
        }
    }
    let results = fleet::on_each_device(&devices, |_, b| recorder::record(b, &w, &mut |_, _| {}));
    let recs = all_ok(&devices, results)?;
    let mut code = EXIT_OK;
    for (((label, backend), rec), path) in devices.iter().zip(&recs).zip(&paths) {
        let dump = outputs.map(|d| d.join(format!("dev{}", label.ordinal)));
        let c = write_recording(
            &w,
            rec,
            backend.name(),
            Some(label),
            path,
            force,
            dump.as_deref(),
        )?;
        code = code.max(c);
    }
    let traces: Vec<(DeviceLabel, RecordedGemmTrace)> = devices
        .iter()
        .zip(&recs)
        .map(|((l, _), r)| (l.clone(), r.trace.clone()))
        .collect();
    let agreement = fleet::gpu_to_gpu_traces(&traces);
    for c in &agreement.checks {
        outln!("{}  {}  {}  {}", c.contract, c.subject, c.verdict, c.detail);
    }
    if !agreement.passed() {
        code = EXIT_FINDING;
    }
    Ok(code)
}

/// Writes one recording (trace, and output dumps when asked) and says what
/// was recorded; the exit code says whether the replay reproduced it.
fn write_recording(
    w: &Workload,
    rec: &recorder::Recording,
    backend: &str,
    label: Option<&DeviceLabel>,
    out: &std::path::Path,
    force: bool,
    outputs: Option<&std::path::Path>,
) -> Result<u8> {
    rec.trace.write(out, force)?;
    if let Some(dir) = outputs {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for (r, bytes) in rec.trace.routes.iter().zip(&rec.outputs) {
            let path = dir.join(gemm_audit::diff::output_file_name(&r.gemm));
            gemm_audit::trace::codec::write_atomic(&path, bytes, true)?;
        }
    }
    let on = match label {
        Some(l) => format!("{backend} {l}"),
        None => backend.to_string(),
    };
    outln!(
        "recorded {} ({} launches) on {on} -> {}",
        w.name,
        rec.trace.launch_set.launch_count,
        out.display()
    );
    outln!("launch set digest {}", rec.trace.launch_set.ordered_digest);
    Ok(match &rec.replay {
        ReplayOutcome::Identical { launches } => {
            outln!("replay: {launches}/{launches} launches bit-identical to the eager run");
            EXIT_OK
        }
        ReplayOutcome::Differs { launches } => {
            outln!("replay: launches {launches:?} differ from the eager run");
            EXIT_FINDING
        }
        ReplayOutcome::Refused { refusal } => {
            outln!("replay: {refusal}");
            EXIT_FINDING
        }
    })
}

// One parameter per flag of `check`.
#[allow(clippy::too_many_arguments)]
fn cmd_check(
    path: &std::path::Path,
    golden: Option<PathBuf>,
    golden_dir: Option<PathBuf>,
    replay: bool,
    allow: &[DiffClass],
    kind: BackendKind,
    format: Format,
    dev: &DeviceArgs,
) -> Result<u8> {
    let trace = read_trace(path)?;
    let golden = match (golden, golden_dir) {
        (Some(g), _) => Some(g),
        (None, Some(dir)) => {
            let found = golden::find_golden(&dir, &trace)?;
            note!("gemm-audit: golden {}", found.display());
            Some(found)
        }
        (None, None) => None,
    };
    let golden = golden.map(|g| read_trace(&g)).transpose()?;
    // Differences of allowed classes pass: the golden comparison is then
    // made by class instead of refusing the first changed field.
    let accepted = match (&golden, allow.is_empty()) {
        (Some(g), false) => {
            let d = gemm_audit::diff::TraceDiff::between(g, &trace);
            d.disallowed(allow).is_empty().then_some(d)
        }
        _ => None,
    };
    let (mut devices, note) = open_devices(kind, dev)?;
    print_backend_note(&note);
    plant_fault(
        &mut devices,
        dev,
        trace.routes.first().map(|r| r.gemm.as_str()),
    )?;
    if replay {
        let e = gemm_audit::budget::Estimate::of_routes(&trace.routes);
        budget(&devices[0].1).check(&format!("the replay of {}", path.display()), &e)?;
    }
    let compare = if accepted.is_some() {
        None
    } else {
        golden.as_ref()
    };
    let results =
        fleet::on_each_device(&devices, |_, b| recorder::check(b, &trace, compare, replay));
    let mut reports = all_ok(&devices, results)?;
    for report in &mut reports {
        if accepted.is_some() {
            report.golden = Some(Ok(()));
        }
    }
    if let Some(d) = accepted.as_ref().filter(|d| !d.is_empty()) {
        let classes: Vec<String> = d.classes().iter().map(|c| c.to_string()).collect();
        eprintln!(
            "gemm-audit: golden differs only in allowed classes ({}):\n{}",
            classes.join(", "),
            d.render()
        );
    }
    let passed = reports.iter().all(|r| r.passed());
    match (format, dev.all()) {
        (Format::Json, false) => outln!(
            "{}",
            gemm_audit::report::json_document("check", passed, &reports[0])
        ),
        (Format::Json, true) => {
            let per_device: Vec<serde_json::Value> = devices
                .iter()
                .zip(&reports)
                .map(|((l, _), r)| serde_json::json!({ "device": l, "report": r }))
                .collect();
            outln!(
                "{}",
                gemm_audit::report::json_document(
                    "check",
                    passed,
                    &serde_json::json!({ "devices": per_device })
                )
            )
        }
        (Format::Table, all) => {
            for ((label, _), report) in devices.iter().zip(&reports) {
                if all {
                    outln!("on {label}:");
                }
                print_check(path, report, replay);
            }
            if all {
                outln!(
                    "check on {} devices: {}",
                    reports.len(),
                    if passed { "PASS" } else { "FAIL" }
                );
            }
        }
    }
    Ok(if passed { EXIT_OK } else { EXIT_FINDING })
}

/// The table rendering of one device's check.
fn print_check(path: &std::path::Path, report: &recorder::CheckReport, replay: bool) {
    outln!(
        "trace {} ({}, {} launches)",
        path.display(),
        report.workload,
        report.launch_count
    );
    let step = |name: &str, r: &Result<(), gemm_audit::Refusal>| match r {
        Ok(()) => outln!("{name:<12} ok"),
        Err(e) => outln!("{name:<12} {e}"),
    };
    step("plan", &report.plan);
    match &report.validation {
        Some(v) => step("validation", v),
        None => outln!("{:<12} skipped (plan refused)", "validation"),
    }
    if let Some(g) = &report.golden {
        step("golden", g);
    }
    match &report.replay {
        Some(ReplayOutcome::Identical { launches }) => {
            outln!(
                "{:<12} {launches}/{launches} fingerprints identical",
                "replay"
            )
        }
        Some(ReplayOutcome::Differs { launches }) => {
            outln!("{:<12} launches {launches:?} differ", "replay")
        }
        Some(ReplayOutcome::Refused { refusal }) => outln!("{:<12} {refusal}", "replay"),
        None if replay => outln!("{:<12} skipped (refused before launch)", "replay"),
        None => {}
    }
    outln!(
        "{}",
        if report.passed() {
            "check: PASS"
        } else {
            "check: FAIL"
        }
    );
}

/// The table rendering of a trace.
pub fn trace_table(t: &RecordedGemmTrace) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "workload        {} ({})\n",
        t.workload,
        t.workload_digest.short()
    ));
    s.push_str(&format!("device          {}\n", t.context.device.class));
    s.push_str(&format!("policy          {}\n", t.context.policy));
    for m in &t.context.modules {
        s.push_str(&format!(
            "module          {} ({}, {}) by {} {}, {} symbols\n",
            m.kind,
            m.backend,
            m.digest.short(),
            m.compiler.name,
            m.compiler.version,
            m.symbols.len()
        ));
    }
    s.push_str(&format!("context digest  {}\n", t.context.digest()));
    s.push_str(&format!("launches        {}\n", t.launch_set.launch_count));
    s.push_str(&format!(
        "ordered digest  {}\n\n",
        t.launch_set.ordered_digest
    ));
    let rows: Vec<[String; 8]> = t
        .routes
        .iter()
        .zip(&t.fingerprints)
        .enumerate()
        .map(|(i, (r, f))| {
            [
                i.to_string(),
                r.gemm.clone(),
                format!("{} {}", r.op, r.dtype),
                format!("{}x{}x{}", r.shape.m, r.shape.k, r.shape.n),
                r.contract.to_string(),
                r.kernel_symbol.clone(),
                format!("{:?}/{:?}", r.launch.grid, r.launch.block),
                f.sha256.short(),
            ]
        })
        .collect();
    let headers = [
        "#",
        "GEMM",
        "OP",
        "MxKxN",
        "CONTRACT",
        "KERNEL",
        "GRID/BLOCK",
        "OUTPUT",
    ];
    let mut w = headers.map(str::len);
    for r in &rows {
        for (w, c) in w.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                l.push_str(c);
            } else {
                l.push_str(&format!("{c:<width$}  ", width = w[i]));
            }
        }
        l.push('\n');
        l
    };
    s.push_str(&line(headers.to_vec()));
    for r in &rows {
        s.push_str(&line(r.iter().map(String::as_str).collect()));
    }
    s
}

fn cmd_show(path: &std::path::Path, format: Format) -> Result<u8> {
    let trace = read_trace(path)?;
    match format {
        Format::Json => outln!("{}", trace.to_json()),
        Format::Table => out!("{}", trace_table(&trace)),
    }
    Ok(EXIT_OK)
}

fn cmd_diff(
    golden: &std::path::Path,
    candidate: &std::path::Path,
    allow: &[DiffClass],
    format: Format,
    outputs: &[PathBuf],
) -> Result<u8> {
    let g = read_trace(golden)?;
    let c = read_trace(candidate)?;
    let mut d = TraceDiff::between(&g, &c);
    if let [gdir, cdir] = outputs {
        let dirs = [gdir, cdir];
        d.annotate_outputs(&g, |side, gemm| {
            std::fs::read(dirs[side].join(gemm_audit::diff::output_file_name(gemm))).ok()
        });
    }
    let cross_device = g.context.device != c.context.device;
    let portability = gemm_audit::diff::portability(&g, &c);
    match format {
        Format::Json => outln!(
            "{}",
            gemm_audit::report::json_document(
                "diff",
                d.disallowed(allow).is_empty(),
                &serde_json::json!({
                    "differences": d.differences,
                    "cross_device": cross_device,
                    "portability": portability,
                })
            )
        ),
        Format::Table => {
            out!("{}", d.render());
            if cross_device {
                let (gd, cd) = (&g.context.device, &c.context.device);
                let what = if gd.class != cd.class {
                    format!("devices differ ({} vs {})", gd.class, cd.class)
                } else {
                    format!(
                        "device identity differs ({}, driver {} vs {})",
                        gd.class, gd.driver, cd.driver
                    )
                };
                out!(
                    "{what}; {}",
                    gemm_audit::diff::render_portability(&portability)
                );
            }
        }
    }
    let bad = d.disallowed(allow);
    if bad.is_empty() {
        return Ok(EXIT_OK);
    }
    let names: Vec<&str> = bad.iter().map(DiffClass::as_str).collect();
    eprintln!("gemm-audit: disallowed differences: {}", names.join(", "));
    Ok(EXIT_DIFF_BASE + bad.iter().map(DiffClass::exit_bit).sum::<u8>())
}

fn cmd_workloads(show: Option<String>) -> Result<u8> {
    match show {
        Some(name) => {
            let w = Workload::builtin(&name).ok_or_else(|| {
                anyhow::Error::new(Error::Workload {
                    name: name.clone(),
                    reason: format!("no such built-in (built-ins: {})", BUILTINS.join(", ")),
                })
            })?;
            out!(
                "{}",
                toml::to_string(&w).context("rendering the workload as TOML")?
            );
        }
        None => {
            for name in BUILTINS {
                if let Some(w) = Workload::builtin(name) {
                    outln!("{name:<26} {:>3} GEMMs  {}", w.gemms.len(), w.description);
                }
            }
        }
    }
    Ok(EXIT_OK)
}

/// Prints the verdict table: lines cut to the terminal's width (when stdout
/// is a terminal), verdict words coloured unless `NO_COLOR` is set or stdout
/// is not a terminal (anstream strips the colour then).
fn print_table(table: &str) {
    use std::io::{IsTerminal, Write as _};
    let width = std::io::stdout()
        .is_terminal()
        .then(terminal_size::terminal_size)
        .flatten()
        .map(|(w, _)| w.0 as usize);
    let mut text = String::with_capacity(table.len());
    for line in sanitize(table).lines() {
        let line = match width {
            Some(w) if line.chars().count() > w && w > 1 => {
                let cut: String = line.chars().take(w - 1).collect();
                format!("{cut}…")
            }
            _ => line.to_string(),
        };
        let coloured = line
            .replacen("  PASS  ", "  \x1b[32mPASS\x1b[0m  ", 1)
            .replacen("  FAIL  ", "  \x1b[1;31mFAIL\x1b[0m  ", 1)
            .replacen("  INFO  ", "  \x1b[33mINFO\x1b[0m  ", 1);
        let coloured = if let Some(v) = coloured.strip_prefix("verdict: FAIL") {
            format!("verdict: \x1b[1;31mFAIL\x1b[0m{v}")
        } else if let Some(v) = coloured.strip_prefix("verdict: PASS") {
            format!("verdict: \x1b[1;32mPASS\x1b[0m{v}")
        } else {
            coloured
        };
        text.push_str(&coloured);
        text.push('\n');
    }
    let mut out = anstream::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        stdout_failed(e);
    }
}

/// Ends the process when writing to stdout failed: quietly on a closed
/// pipe (the reader has what it wanted), with exit code 1 otherwise.
pub fn stdout_failed(e: std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    eprintln!("gemm-audit: error: writing to stdout: {e}");
    std::process::exit(1);
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Args::command().debug_assert();
    }

    #[test]
    fn usage_exit_code_is_clap_default() {
        let e = Args::try_parse_from(["gemm-audit", "audit", "--runs", "1"]).unwrap_err();
        assert_eq!(e.exit_code(), EXIT_USAGE as i32);
    }
}
