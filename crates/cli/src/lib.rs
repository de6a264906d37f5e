//! The `gemm-audit` command line as a library: argument parsing (clap),
//! the subcommands, the documented exit codes and terminal output. The
//! `gemm-audit` binary and the Python package's `gemm-audit` command run
//! [`main_with`]; everything they do is the `gemm_audit` library's.

// The doc comments of the argument types are clap's `--help` text, written
// for a terminal (`DIR/<device>/<workload>.gat`), not for rustdoc's HTML.
#![allow(rustdoc::invalid_html_tags, rustdoc::broken_intra_doc_links)]

/// `print!` to stdout, ending the process quietly (exit 0, as ripgrep does)
/// when stdout is a closed pipe (`gemm-audit diff a b | head`), instead of
/// panicking.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if !crate::stdout_closed() {
            let text = format!($($arg)*);
            let mut stdout = std::io::stdout().lock();
            if let Err(e) = stdout
                .write_all(crate::sanitize(&text).as_bytes())
                .and_then(|()| stdout.flush())
            {
                crate::stdout_failed(e);
            }
        }
    }};
}

/// `println!` with the closed-pipe handling of [`out!`].
/// Writes one line to stderr. A closed stderr (`gemm-audit diff a b 2>&1 |
/// head -1`) is not an error of the command: what failed to be said there
/// is dropped, and the exit code still carries the verdict. (`eprintln!`
/// panics on a closed stderr, exiting 101.)
macro_rules! errln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let text = format!($($arg)*);
        let _ = writeln!(std::io::stderr().lock(), "{}", text);
    }};
}

/// [`errln!`] without the newline.
macro_rules! err {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let text = format!($($arg)*);
        let _ = write!(std::io::stderr().lock(), "{}", text);
    }};
}

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
use gemm_audit::backend::GemmBackend;
use gemm_audit::backend::{Backend, BackendKind, DeviceLabel, DeviceSelection};
use gemm_audit::diff::{Allowance, DiffClass, TraceDiff};
use gemm_audit::fleet;
use gemm_audit::golden;
use gemm_audit::recorder::{self, ReplayOutcome};
use gemm_audit::workload::{BUILTINS, Workload};
use gemm_audit::{Error, FingerprintMode, RecordedGemmTrace};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::path::PathBuf;

mod exit;
mod values;
pub use exit::{
    EXIT_BACKEND, EXIT_BAD_INPUT, EXIT_CODES, EXIT_DIFF_BASE, EXIT_FINDING, EXIT_OK, EXIT_USAGE,
    error_message, exit_code_of,
};
use values::{backend_kind, fingerprint_mode};

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
    #[arg(long, global = true, value_name = "GFLOP", value_parser = values::budget_limit)]
    pub max_gflop: Option<f64>,
    /// Most host memory one command may hold, in GiB (estimated before any
    /// allocation; default 8 on the CPU, 32 with CUDA).
    #[arg(long, global = true, value_name = "GIB", value_parser = values::budget_limit)]
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

/// Refuses, before any work, a workload the CPU backend cannot run (a
/// route that needs CUDA: that, not its compute, is the reason), and one
/// whose estimated cost is over the budget (`runs` eager runs, plus
/// capture and replay) on `devices` devices at once: their host memory
/// adds up (compute does not: they run in parallel).
fn check_workload_runs_here(
    backend: &Backend,
    w: &Workload,
    runs: u64,
    devices: usize,
) -> Result<()> {
    // Only the CPU's routes resolve without work: the CUDA backend's may
    // time cuBLASLt candidates, so it resolves once, in the run itself.
    if backend
        .downcast_ref::<gemm_audit::backend::cpu::CpuBackend>()
        .is_some()
    {
        let own = backend.for_workload(w);
        let b = own.as_ref().unwrap_or(backend);
        for g in &w.gemms {
            b.resolve(g)?;
        }
    }
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
    let e = on_devices(gemm_audit::budget::Estimate::of(shapes, runs), devices);
    budget(backend).check(&what_on(&format!("workload {}", w.name), devices), &e)?;
    Ok(())
}

/// An estimate for one device, for `devices` devices working at once.
fn on_devices(mut e: gemm_audit::budget::Estimate, devices: usize) -> gemm_audit::budget::Estimate {
    e.memory_bytes = e.memory_bytes.saturating_mul(devices.max(1) as u64);
    e
}

/// `what`, saying how many devices when more than one.
fn what_on(what: &str, devices: usize) -> String {
    if devices > 1 {
        format!("{what} on {devices} devices at once")
    } else {
        what.to_string()
    }
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
        if crate::verbosity() > crate::Verbosity::Quiet {
            errln!("{}", crate::sanitize(&format!($($arg)*)));
        }
    };
}

/// Text for a terminal: control characters (an escape sequence in a kernel
/// name or workload read from a file, say) and bidirectional overrides are
/// shown escaped, never sent raw; newlines and tabs stay
/// ([`gemm_audit::render::terminal_text`]).
pub fn sanitize(s: &str) -> std::borrow::Cow<'_, str> {
    gemm_audit::render::terminal_text(s)
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
    Bless(BlessArgs),
    /// Compare traces from many devices; name the one that disagrees.
    ///
    /// A deterministic launch whose bits differ from the majority of its
    /// device class names a suspect device. Takes trace files or folders (searched for *.gat). Traces are grouped
    /// by workload and device class; each launch's output fingerprint is put
    /// to a vote. Vendor and atomic routes are reported, never counted as
    /// outliers.
    #[command(after_help = EXIT_CODES)]
    Compare(CompareArgs),
    /// Show the candidates `audit --golden-dir` kept beside drifted goldens.
    #[command(after_help = EXIT_CODES)]
    Review(PendingArgs),
    /// Make pending candidates the goldens (after `review`).
    #[command(after_help = EXIT_CODES)]
    Accept(PendingArgs),
    /// Drop pending candidates; the goldens stay.
    #[command(after_help = EXIT_CODES)]
    Reject(PendingArgs),
    /// Run a workload eagerly, capture and replay it, and write its trace.
    #[command(after_help = EXIT_CODES)]
    Record(RecordArgs),
    /// Rebuild a stored trace's plan and validate it against the live context.
    #[command(after_help = EXIT_CODES)]
    Check(CheckArgs),
    /// Print a trace as a table or as JSON.
    #[command(after_help = EXIT_CODES)]
    Show {
        /// Trace file to show.
        trace: PathBuf,
        /// Output format: a table, or JSON (docs/schema/show.schema.json).
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// Compare two traces; exit non-zero on any difference not allowed.
    #[command(after_help = EXIT_CODES)]
    Diff(DiffArgs),
    /// Read PyTorch profiler traces; write one gemm-audit trace per file.
    ///
    /// Binds every GPU kernel to the GEMM op that launched it (by
    /// correlation id, on whichever thread launched it), records each GEMM
    /// with its op, dtype, shape and layout where the profile has them
    /// (take it with record_shapes=True), keeps GEMM kernels no GEMM op
    /// owns (torch.compile regions, CUDA-graph replays) as GEMMs of their
    /// region, and counts the rest. A profile holds no output bits:
    /// `diff`, `check --golden` and `compare` say numeric "not observed".
    /// See docs/profiles.md.
    #[command(after_help = EXIT_CODES)]
    Import(ImportArgs),
    /// Which kernels served which batch size m, per GEMM family.
    ///
    /// Groups the GEMMs of profiles or traces by (op, layout, dtype, k, n)
    /// and lists per m the kernels and grids that served it. Flags every
    /// family whose kernel changes with m (a batch-invariance risk), that
    /// was served two ways at one m, or that used a split-K or reduce
    /// kernel (a reduction order that may depend on m). Exits 1 when a
    /// family is flagged.
    #[command(after_help = EXIT_CODES)]
    Census(CensusArgs),
    /// Compile the CUDA kernels into the kernel cache ahead of time (no GPU needed).
    ///
    /// A node whose NVRTC release has no cubins shipped with gemm-audit
    /// compiles its kernels in its first process (a minute or more for
    /// wgmma.cu). Run this where the node's image is built, with the NVRTC
    /// library the node will load and GEMM_AUDIT_KERNEL_CACHE naming the
    /// cache directory it will use: its first run then compiles nothing. A
    /// module the node admits from the shipped cubins is reported `shipped`
    /// and not stored. Needs a build with CUDA support.
    #[command(after_help = EXIT_CODES)]
    CompileKernels {
        /// The nodes' architecture: sm_ and their compute capability (sm_90
        /// for the H100 and H200).
        #[arg(long, value_name = "ARCH", default_value = "sm_90", value_parser = values::gpu_arch)]
        arch: String,
    },
    /// List the built-in workloads, or print one as TOML.
    #[command(after_help = EXIT_CODES)]
    Workloads {
        /// Print this built-in workload as a TOML file you can edit.
        #[arg(long, value_name = "NAME")]
        show: Option<String>,
    },
}

/// What `audit --golden-dir` does with goldens no workload wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Unreferenced {
    /// Name them on stderr.
    Warn,
    /// Remove them, saying which.
    Delete,
    /// Name them and make the audit a finding (exit 1).
    Fail,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Human-readable table or text.
    Table,
    /// JSON.
    Json,
}

/// Runs the command line on `args` (the first is the program's name) and
/// returns its exit code. Help and version print and return 0; a bad
/// command line prints clap's message and returns 2; an error that ends a
/// command prints one line and returns its documented code.
pub fn main_with<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let args = match Args::try_parse_from(args) {
        Ok(args) => args,
        Err(e) => {
            let _ = e.print();
            return u8::try_from(e.exit_code()).unwrap_or(EXIT_USAGE);
        }
    };
    match run(args) {
        Ok(code) => code,
        Err(e) => {
            errln!("gemm-audit: error: {}", sanitize(&error_message(&e)));
            exit_code_of(&e)
        }
    }
}

/// Runs one parsed command line; an error that ends it is returned for
/// the caller to print (see [`main_with`]).
pub fn run(args: Args) -> Result<u8> {
    let level = match (args.quiet, args.verbose) {
        (true, _) => Verbosity::Quiet,
        (false, true) => Verbosity::Verbose,
        (false, false) => Verbosity::Normal,
    };
    VERBOSITY.store(level as u8, std::sync::atomic::Ordering::Relaxed);
    let _ = LIMITS.set((args.max_gflop, args.max_memory_gib));
    // A compile takes a minute or more on a node that has neither the
    // shipped cubins' NVRTC nor a filled kernel cache: said before it.
    gemm_audit::backend::cuda::kernel_cache::set_compile_notice(|m| note!("gemm-audit: {m}"));
    match args.command {
        Command::Audit(a) => cmd_audit(a),
        Command::Bless(a) => cmd_bless(a),
        Command::Compare(a) => cmd_compare(a),
        Command::Review(a) => cmd_pending(golden::Settle::Review, a),
        Command::Accept(a) => cmd_pending(golden::Settle::Accept, a),
        Command::Reject(a) => cmd_pending(golden::Settle::Reject, a),
        Command::Record(a) => cmd_record(a),
        Command::Check(a) => cmd_check(a),
        Command::Show { trace, format } => cmd_show(&trace, format),
        Command::Diff(a) => cmd_diff(a),
        Command::CompileKernels { arch } => cmd_compile_kernels(&arch),
        Command::Workloads { show } => cmd_workloads(show),
        Command::Import(a) => cmd_import(a),
        Command::Census(a) => cmd_census(a),
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
                        Backend::new(gemm_audit::backend::cpu::CpuBackend::default()),
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
    if let Some(note) = note
        && (cfg!(feature = "cuda") || verbosity() == Verbosity::Verbose)
    {
        note!("gemm-audit: {note}");
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
    let placeholder = Backend::new(gemm_audit::backend::cpu::CpuBackend::default());
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

/// The allowances of `--allow` and of the waivers in `--waivers FILE` that
/// still apply today; an expired waiver is said on stderr and not applied.
fn allowances(allow: &[Allowance], waivers: Option<&std::path::Path>) -> Result<Vec<Allowance>> {
    let mut out = allow.to_vec();
    let Some(path) = waivers else {
        return Ok(out);
    };
    let bytes = gemm_audit::util::read_regular(path, 1 << 20)?;
    let text = std::str::from_utf8(&bytes)
        .map_err(|_| anyhow::anyhow!("{}: waiver file is not UTF-8", path.display()))?;
    let parsed = if path.extension().is_some_and(|e| e == "json") {
        gemm_audit::diff::Waiver::parse_json(text)
    } else {
        gemm_audit::diff::Waiver::parse_toml(text)
    }
    .map_err(|e| anyhow::anyhow!("{}: {}", path.display(), sanitize(&e.to_string())))?;
    let today = gemm_audit::report::today_utc();
    for w in parsed {
        if w.applies_on(&today) {
            out.push(w.allow);
        } else {
            errln!(
                "gemm-audit: waiver for {} expired on {} ({}): not applied",
                w.allow,
                w.expires.as_deref().unwrap_or_default(),
                sanitize(&w.reason)
            );
        }
    }
    Ok(out)
}

fn read_trace(path: &std::path::Path) -> Result<RecordedGemmTrace> {
    Ok(RecordedGemmTrace::read(path)?)
}

/// Progress of a long command. On a terminal, one bar per stage with the
/// stage's number; elsewhere (a CI log), one line per finished stage with
/// its number, launches, duration and the elapsed time, so a log shows
/// where a 5-minute audit is instead of staying silent.
struct Bar {
    bar: ProgressBar,
    lines: bool,
    started: std::time::Instant,
    stage: Option<(usize, String, usize, std::time::Instant)>,
    count: usize,
    /// Stages and launches of the whole run, when the command said.
    planned: Option<(usize, usize)>,
    /// Launches of the stages finished so far.
    launches_done: usize,
}

impl Bar {
    /// A bar on a terminal (not with -q), one line per stage in a log
    /// (with -q too: a CI job is never silent for minutes); nothing when
    /// not `enabled` (`--no-progress`).
    fn new(enabled: bool) -> Self {
        use std::io::IsTerminal;
        let terminal = std::io::stderr().is_terminal();
        let bar = ProgressBar::with_draw_target(
            Some(0),
            if enabled && terminal && verbosity() > Verbosity::Quiet {
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
        Bar {
            bar,
            lines: enabled && !terminal,
            started: std::time::Instant::now(),
            stage: None,
            count: 0,
            planned: None,
            launches_done: 0,
        }
    }

    /// `i` or `i/N` when the number of stages is known.
    fn numbered(&self, i: usize) -> String {
        match self.planned {
            Some((stages, _)) => format!("{i}/{stages}"),
            None => i.to_string(),
        }
    }

    /// Prints the line of the stage that just ended (not on a terminal),
    /// with an estimate of the time left from the launches still to run.
    fn finish_stage(&mut self) {
        if let Some((i, name, total, start)) = self.stage.take() {
            self.launches_done += total;
            if self.lines {
                let elapsed = self.started.elapsed().as_secs_f64();
                let left = match self.planned {
                    Some((_, all)) if self.launches_done > 0 && all > self.launches_done => {
                        let rest = (all - self.launches_done) as f64;
                        format!(
                            ", about {:.0} s left",
                            elapsed * rest / self.launches_done as f64
                        )
                    }
                    _ => String::new(),
                };
                errln!(
                    "gemm-audit: stage {} done: {} ({total} launches) in {:.1} s, {elapsed:.1} s elapsed{left}",
                    self.numbered(i),
                    sanitize(&name),
                    start.elapsed().as_secs_f64(),
                );
            }
        }
    }
}

impl Progress for Bar {
    fn plan(&mut self, stages: usize, launches: usize) {
        self.planned = Some((stages, launches));
    }

    fn stage(&mut self, name: &str, total: usize) {
        self.finish_stage();
        self.count += 1;
        self.stage = Some((
            self.count,
            name.to_string(),
            total,
            std::time::Instant::now(),
        ));
        self.bar.set_length(total as u64);
        self.bar.set_position(0);
        let numbered = self.numbered(self.count);
        self.bar.set_message(format!("stage {numbered}: {name}"));
    }

    fn advance(&mut self, done: usize) {
        self.bar.set_position(done as u64);
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.finish_stage();
        self.bar.finish_and_clear();
    }
}

/// Arguments of `audit`.
#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    /// Backend to audit; `auto` uses CUDA when present, else the CPU.
    #[arg(long, value_parser = backend_kind(), default_value = "auto")]
    pub backend: BackendKind,
    /// How output fingerprints hash each 4 KiB chunk: `strong` (SHA-256,
    /// the default, and what the committed goldens hold) or `fast` (NH, at
    /// memory speed on a GPU; finds accidents, not attacks).
    #[arg(long, value_parser = fingerprint_mode(), default_value = "strong")]
    pub fingerprint: FingerprintMode,
    /// Eager runs compared for run-to-run identity (at least 2).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(2..=1000))]
    pub runs: u32,
    /// Most runs of the nondeterministic control before it counts as undetected.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(2..=10000))]
    pub control_attempts: u32,
    /// Workloads to audit (built-in names or .toml/.json files); default: transformer-block and
    /// m-sweep, plus tensor-core-sweep, vendor-sweep and batch-invariant on CUDA, and
    /// wgmma-sweep and ladder-sweep on compute capability 9.0.
    #[arg(long = "workload", value_name = "WORKLOAD")]
    pub workloads: Vec<String>,
    /// Output format: a table, or JSON (docs/schema/audit.schema.json).
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// No progress at all: neither the bar on a terminal nor the one line
    /// per stage in a log (which -q keeps).
    #[arg(long)]
    pub no_progress: bool,
    /// Compare each recorded trace with its golden under this folder (route drift in the report).
    #[arg(long, value_name = "DIR")]
    pub golden_dir: Option<PathBuf>,
    /// Compare with the goldens but write nothing into the golden folder
    /// (no candidate kept, no stale one removed): for read-only checkouts.
    #[arg(long, requires = "golden_dir")]
    pub check: bool,
    /// After comparing, print each candidate this run kept with its
    /// differences from the golden (what `review` prints); needs
    /// --golden-dir.
    #[arg(long, requires = "golden_dir", conflicts_with = "check")]
    pub review: bool,
    /// Accept every candidate this run keeps, in one go: each drifted or
    /// missing golden becomes this run's trace (as `accept` would) and its
    /// golden rows pass, saying so; other failures still fail. For a
    /// deliberate change on a developer's machine, not for CI. Needs
    /// --golden-dir.
    #[arg(long, requires = "golden_dir", conflicts_with = "check")]
    pub accept: bool,
    /// Goldens of this device that no workload of the default suite writes
    /// (left by a removed workload): `warn` names them, `delete` removes
    /// them, `fail` makes the audit a finding. Only with the default suite
    /// (no --workload) and --golden-dir; never with --check.
    #[arg(long, value_enum, default_value_t = Unreferenced::Warn, requires = "golden_dir")]
    pub unreferenced: Unreferenced,
    /// Differences from the goldens that pass, as for `diff` (classes or
    /// fields, e.g. `--allow device.driver`); needs --golden-dir.
    #[arg(long, value_parser = values::allowance, value_delimiter = ',', requires = "golden_dir")]
    pub allow: Vec<Allowance>,
    /// A checked-in waiver file, as for `check`; needs --golden-dir.
    #[arg(long, value_name = "FILE", requires = "golden_dir")]
    pub waivers: Option<PathBuf>,
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

mod audit_cmd;
mod golden_cmd;
mod profile_cmd;
mod trace_cmd;

use audit_cmd::*;
use golden_cmd::*;
use profile_cmd::*;
use trace_cmd::*;

/// Prints the verdict table: lines cut to the terminal's width (when stdout
/// is a terminal), verdict words coloured unless `NO_COLOR` is set or stdout
/// is not a terminal (anstream strips the colour then).
fn print_audit_table(report: &mut audit::AuditReport) {
    use std::io::Write as _;
    let width = terminal_width();
    // Notes obey -q; the report keeps its note for JSON and the artifacts.
    let note = if verbosity() == Verbosity::Quiet {
        report.note.take()
    } else {
        None
    };
    // Verdicts in colour; anstream drops the colour where the terminal or
    // the environment does not want it.
    let paint = |column: usize, cell: &str| {
        let code = match (column, cell) {
            (0, "PASS") => "\x1b[32m",
            (0, "FAIL") => "\x1b[1;31m",
            (0, "INFO") => "\x1b[33m",
            _ => return None,
        };
        Some((code.to_string(), "\x1b[0m".to_string()))
    };
    let text = gemm_audit::render::audit::audit_table(report, width, &paint);
    if note.is_some() {
        report.note = note;
    }
    if stdout_closed() {
        return;
    }
    let mut out = anstream::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        stdout_failed(e);
    }
}

/// The terminal's width, when stdout is one.
fn terminal_width() -> Option<usize> {
    use std::io::IsTerminal;
    std::io::stdout()
        .is_terminal()
        .then(terminal_size::terminal_size)
        .flatten()
        .map(|(w, _)| w.0 as usize)
}

/// Set once stdout's reader has gone (`gemm-audit diff a b | head -1`).
static STDOUT_CLOSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// True when stdout's reader has gone: nothing more is written there.
pub fn stdout_closed() -> bool {
    STDOUT_CLOSED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Writes to stdout through `write` (buffered, then a newline), with the
/// closed-pipe handling of [`out!`]; for documents too large to build as
/// text first.
pub(crate) fn write_stdout(write: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>) {
    use std::io::Write as _;
    if stdout_closed() {
        return;
    }
    let mut w = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    if let Err(e) = write(&mut w)
        .and_then(|()| w.write_all(b"\n"))
        .and_then(|()| w.flush())
    {
        stdout_failed(e);
    }
}

/// When writing to stdout failed. On a closed pipe (the reader has what it
/// wanted) the command stops writing but finishes, so its exit code is
/// still the verdict (`diff a b | head -1` exits 68 on a numeric finding);
/// any other failure ends the process with exit code 1.
pub fn stdout_failed(e: std::io::Error) {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        STDOUT_CLOSED.store(true, std::sync::atomic::Ordering::Relaxed);
        return;
    }
    errln!("gemm-audit: error: writing to stdout: {e}");
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

    /// `--help` explains every argument of every command: one added
    /// without a doc comment fails here, naming it.
    #[test]
    fn every_argument_has_help() {
        fn walk(cmd: &clap::Command, path: &str, bare: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if id != "help" && id != "version" && arg.get_help().is_none() {
                    bare.push(format!("{path} {id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), bare);
            }
        }
        let mut bare = Vec::new();
        walk(&Args::command(), "gemm-audit", &mut bare);
        assert!(bare.is_empty(), "arguments without help: {bare:?}");
    }

    #[test]
    fn usage_exit_code_is_clap_default() {
        let e = Args::try_parse_from(["gemm-audit", "audit", "--runs", "1"]).unwrap_err();
        assert_eq!(e.exit_code(), EXIT_USAGE as i32);
    }
}
