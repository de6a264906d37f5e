//! Goldens: `bless` (here or `--from` traces recorded elsewhere) and the
//! pending-candidate review (`review`, `accept`, `reject`).

use super::*;
use gemm_audit::pin::VendorPin;

/// Arguments of `bless`.
#[derive(Debug, clap::Args)]
pub struct BlessArgs {
    /// Built-in names or .toml/.json files; default: the audit's suite for the backend.
    #[arg(conflicts_with = "from")]
    pub workloads: Vec<String>,
    /// Accept these recorded traces (e.g. from a CI machine with the GPU)
    /// as goldens instead of recording here.
    #[arg(long, value_name = "TRACE", num_args = 1..)]
    pub from: Vec<PathBuf>,
    /// Where the goldens are written: DIR/<device>/<workload>.gat.
    #[arg(long, value_name = "DIR", default_value = "traces")]
    pub golden_dir: PathBuf,
    /// Replace existing goldens.
    #[arg(long)]
    pub force: bool,
    /// Backend to record the goldens on; `auto` uses CUDA when present,
    /// else the CPU.
    #[arg(long, value_parser = backend_kind(), default_value = "auto")]
    pub backend: BackendKind,
    /// How output fingerprints hash each 4 KiB chunk: `strong`
    /// (SHA-256, collision resistant; the default, and what the
    /// committed goldens hold) or `fast` (NH, at memory speed on a GPU;
    /// finds accidents, not attacks). Goldens compare only within a mode.
    #[arg(long, value_parser = fingerprint_mode(), default_value = "strong")]
    pub fingerprint: FingerprintMode,
    #[command(flatten)]
    pub device: DeviceArgs,
}

/// Arguments of `review`, `accept` and `reject`.
#[derive(Debug, clap::Args)]
pub struct PendingArgs {
    /// Only these workloads, or these pending files by path (one
    /// candidate of a workload pending on several devices); default: every
    /// pending candidate.
    pub workloads: Vec<String>,
    /// Where the goldens and the candidates pending beside them are
    /// (DIR/<device>/).
    #[arg(long, value_name = "DIR", default_value = "traces")]
    pub golden_dir: PathBuf,
    /// accept only: install a candidate only if its digest (as `review`
    /// printed it; 12 hex digits or more) is one of these, so a candidate a
    /// later run put in its place is refused, not installed unseen.
    #[arg(long, value_name = "DIGEST")]
    pub expect: Vec<String>,
    /// Output format: a table, or JSON.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

pub(super) fn cmd_bless(a: BlessArgs) -> Result<u8> {
    if !a.from.is_empty() {
        return cmd_bless_from(&a.from, &a.golden_dir, a.force);
    }
    let BlessArgs {
        workloads,
        golden_dir,
        force,
        backend: kind,
        fingerprint: mode,
        device,
        ..
    } = a;
    let (dir, dev) = (golden_dir.as_path(), &device);
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
        check_workload_runs_here(&devices[0].1, w, 2, devices.len())?;
    }
    let fault_gemm = ws
        .first()
        .and_then(|w| w.gemms.first())
        .map(|g| g.name.clone());
    plant_fault(&mut devices, dev, fault_gemm.as_deref())?;
    adopt_goldens(dir, &devices, &ws);
    // Record everything on every device first: nothing is blessed unless
    // every device reproduces its eager run and the devices agree.
    let mut recorded: Vec<(DeviceLabel, RecordedGemmTrace)> = Vec::new();
    for w in &ws {
        let results = fleet::on_each_device(&devices, |_, b| {
            recorder::record_fingerprinted(b, w, mode, &mut |_, _| {})
        });
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
        errln!(
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

/// Lets each device's backend adopt what the goldens under `dir` recorded
/// and resolving would choose afresh (`cublaslt-invariant`'s timed
/// configuration), where the device still offers it: a golden pins such a
/// choice for the gate and for a re-bless, so timing noise cannot move a
/// route. A golden that is missing or unreadable pins nothing here (the
/// golden comparison reports it).
pub(super) fn adopt_goldens(
    dir: &std::path::Path,
    devices: &[(DeviceLabel, Backend)],
    workloads: &[Workload],
) {
    for (_, b) in devices {
        for w in workloads {
            let path = golden::golden_path_for(dir, &b.context().device, &w.name);
            if let Ok(golden) = RecordedGemmTrace::read(&path) {
                // A golden older than format 6 records its pins only in
                // its routes; the backend adopts those of the family-fixed
                // selection and ignores the rest.
                let pins: Vec<VendorPin> = if golden.context.pins.is_empty() {
                    golden.routes.iter().filter_map(VendorPin::of).collect()
                } else {
                    golden.context.pins.clone()
                };
                b.adopt_pins(&pins);
            }
        }
    }
}

/// Says what `bless` did for `what` (a workload or a trace file); true when
/// it refused to replace an existing golden.
pub(super) fn print_bless(what: &str, out: &golden::BlessOutcome) -> bool {
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

/// `review`, `accept` and `reject` of the candidates kept beside drifted
/// goldens (the library's `golden::settle`, rendered).
pub(super) fn cmd_pending(action: golden::Settle, a: PendingArgs) -> Result<u8> {
    if !a.expect.is_empty() && action != golden::Settle::Accept {
        anyhow::bail!("--expect applies to accept only");
    }
    let settled = golden::settle(&a.golden_dir, &a.workloads, action, &a.expect)?;
    if a.format == Format::Json {
        outln!(
            "{}",
            gemm_audit::render::json::json_document("settle", settled.passed(), &settled)
        );
    } else {
        print_settled(&settled);
    }
    Ok(if settled.errors() {
        EXIT_BAD_INPUT
    } else if settled.passed() {
        EXIT_OK
    } else {
        EXIT_FINDING
    })
}

/// The table rendering of what `review`, `accept` or `reject` did.
fn print_settled(s: &golden::Settled) {
    if s.candidates.is_empty() && s.unusable.is_empty() {
        outln!("no pending candidates under {}", s.golden_dir.display());
        return;
    }
    for c in &s.candidates {
        match &c.outcome {
            golden::Outcome::Pending => {
                outln!(
                    "{} -> {} (digest {})",
                    c.path.display(),
                    c.golden.display(),
                    &c.digest[..16]
                );
                if c.new_golden {
                    outln!("  no golden yet: accepting creates it with:");
                    for line in trace_table(&c.trace).lines() {
                        outln!("    {line}");
                    }
                } else {
                    let d = TraceDiff {
                        differences: c.differences.clone(),
                        numeric: c
                            .numeric
                            .unwrap_or(gemm_audit::diff::NumericComparison::Compared),
                        outputs_compared: c.outputs_compared,
                        pairing: None,
                        launch: c.launch,
                    };
                    for line in d.render().lines() {
                        outln!("  {line}");
                    }
                }
            }
            golden::Outcome::Accepted => outln!(
                "accepted {} -> {} (digest {})",
                c.path.display(),
                c.golden.display(),
                &c.digest[..16]
            ),
            golden::Outcome::Rejected => outln!("rejected {}", c.path.display()),
            golden::Outcome::Refused(why) => errln!(
                "gemm-audit: error: not accepting {}: {}",
                sanitize(&c.path.display().to_string()),
                sanitize(why)
            ),
        }
    }
    if s.action == golden::Settle::Review && !s.candidates.is_empty() {
        outln!(
            "settle with `gemm-audit accept --golden-dir {} --expect DIGEST` (the digests above) or `reject`",
            s.golden_dir.display()
        );
    }
    for u in &s.unusable {
        if u.removed {
            outln!("removed unusable {}", u.path.display());
        } else {
            errln!("gemm-audit: error: {}", sanitize(&u.error));
        }
    }
}
