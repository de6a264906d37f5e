//! `audit`: one device or every device, and the artifacts it writes.

use super::*;

pub(super) fn cmd_audit(args: AuditArgs) -> Result<u8> {
    // A bad waiver file is said before the work, not after it.
    let allow = allowances(&args.allow, args.waivers.as_deref())?;
    let (mut devices, note) = open_devices(args.backend, &args.device)?;
    let first = &devices[0].1;
    let mut opts = AuditOptions {
        runs: args.runs as usize,
        control_attempts: args.control_attempts as usize,
        fingerprint_mode: args.fingerprint,
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
        check_workload_runs_here(first, w, opts.runs as u64 + 2, devices.len())?;
    }
    let fault_gemm = opts
        .workloads
        .first()
        .and_then(|w| w.gemms.first())
        .map(|g| g.name.clone());
    plant_fault(&mut devices, &args.device, fault_gemm.as_deref())?;
    if let Some(dir) = &args.golden_dir {
        adopt_goldens(dir, &devices, &opts.workloads);
    }
    if args.device.all() {
        return audit_devices(&args, &allow, &devices, &opts, note);
    }
    let backend = &devices[0].1;
    let mut bar = Bar::new(!args.no_progress);
    let mut report = audit::run_audit(backend, &opts, &mut bar)?;
    drop(bar);
    report.note = note;
    if let Some(dir) = &args.traces {
        write_traces(dir, &report.traces, None)?;
    }
    // Golden drift is a contract row like any other, so every artifact
    // (table, JSON, reports, JUnit) and the exit code agree.
    let drift = match &args.golden_dir {
        Some(dir) => report.compare_with_goldens_allowing(dir, &candidates(&args, true), &allow)?,
        None => Vec::new(),
    };
    let review = settle_candidates(&args, &mut report, &drift)?;
    let unreferenced_found = handle_unreferenced(&args, &report)?;
    match args.format {
        Format::Table => print_audit_table(&mut report),
        Format::Json => outln!(
            "{}",
            gemm_audit::render::json::json_document(
                "audit",
                report.passed(),
                &audit_json(&report, &drift)?
            )
        ),
    }
    print_review(&args, &review);
    write_audit_artifacts(&args, &report, drift)?;
    Ok(if report.passed() && !unreferenced_found {
        EXIT_OK
    } else {
        EXIT_FINDING
    })
}

/// `--review` and `--accept` on the candidates the golden comparison of
/// `report` just kept: returns the review text (empty without `--review`),
/// made before anything is accepted, then installs the candidates.
fn settle_candidates(
    args: &AuditArgs,
    report: &mut audit::AuditReport,
    drift: &[(String, TraceDiff)],
) -> Result<String> {
    let Some(dir) = &args.golden_dir else {
        return Ok(String::new());
    };
    let mut review = String::new();
    if args.review {
        for (i, pending, golden) in report.kept_candidates(dir) {
            let t = &report.traces[i];
            review.push_str(&format!("{} -> {}\n", pending.display(), golden.display()));
            match drift.iter().find(|(w, _)| *w == t.workload) {
                Some((_, d)) if !d.is_empty() => review.push_str(&d.render()),
                _ => review.push_str("  no golden yet: accepting creates it\n"),
            }
        }
        if review.is_empty() {
            review.push_str("no candidates kept: every golden matched\n");
        }
    }
    if args.accept {
        let own = report.own_failures();
        if !own.is_empty() {
            errln!(
                "gemm-audit: not accepting any candidate: this run failed its own contracts ({})",
                sanitize(&own.join(", "))
            );
        }
        for g in report.accept_candidates(dir)? {
            // What was written is said even with -q (on stderr, so a
            // JSON document on stdout stays one document).
            errln!(
                "gemm-audit: accepted this run's trace as {}",
                sanitize(&g.display().to_string())
            );
        }
    }
    Ok(review)
}

/// `--unreferenced` on the goldens of `report`'s device that no workload of
/// the default suite wrote: names, removes or fails on them. True when the
/// audit must fail for them (`fail` and some found).
fn handle_unreferenced(args: &AuditArgs, report: &audit::AuditReport) -> Result<bool> {
    let (Some(dir), Some(first)) = (&args.golden_dir, report.traces.first()) else {
        return Ok(false);
    };
    // A chosen subset of workloads says nothing about the others' goldens.
    if args.check || !args.workloads.is_empty() {
        return Ok(false);
    }
    let written: Vec<&str> = report.traces.iter().map(|t| t.workload.as_str()).collect();
    let found = golden::unreferenced(dir, &first.context.device, &written);
    for path in &found {
        let shown = sanitize(&path.display().to_string()).into_owned();
        match args.unreferenced {
            Unreferenced::Delete => {
                std::fs::remove_file(path).with_context(|| format!("removing {shown}"))?;
                // What was removed is said even with -q.
                errln!("gemm-audit: removed unreferenced golden {shown}");
            }
            Unreferenced::Warn => note!(
                "gemm-audit: unreferenced golden {shown}: no workload of this run writes it (`--unreferenced delete` removes it)"
            ),
            Unreferenced::Fail => {
                errln!("gemm-audit: unreferenced golden {shown}: no workload of this run writes it")
            }
        }
    }
    Ok(args.unreferenced == Unreferenced::Fail && !found.is_empty())
}

/// Prints the `--review` text: after the table, or on stderr beside a JSON
/// document (which stays one document).
fn print_review(args: &AuditArgs, review: &str) {
    if review.is_empty() {
        return;
    }
    match args.format {
        Format::Table => out!("{review}"),
        Format::Json => err!("{}", sanitize(review)),
    }
}

/// Writes every trace of one device into `dir` (`<workload>.gat`, or
/// `<workload>.dev<N>.gat` for device N of `--device all`), replacing old ones.
pub(super) fn write_traces(
    dir: &std::path::Path,
    traces: &[RecordedGemmTrace],
    ordinal: Option<usize>,
) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for t in traces {
        let path = dir.join(format!("{}.gat", golden::file_stem(&t.workload)));
        let path = match ordinal {
            Some(n) => fleet::device_path(&path, n),
            None => path,
        };
        t.write(&path, true)?;
    }
    Ok(())
}

/// Whether this device's golden comparison writes candidates: not with
/// `--check`, and with several devices only for the first (`keep`).
fn candidates(args: &AuditArgs, keep: bool) -> audit::Candidates {
    use gemm_audit::audit::Candidates;
    if args.check {
        Candidates::NotKept("--check writes nothing into the golden folder".into())
    } else if keep {
        Candidates::Keep
    } else {
        Candidates::NotKept("with several devices, the lowest ordinal's is".into())
    }
}

/// The audit's JSON body: the report's rows, cases and matrices, and what a
/// machine needs besides: the environment, each GEMM's timing (and what the
/// clock includes), the wall time, and every golden's differences.
fn audit_json(
    report: &audit::AuditReport,
    drift: &[(String, TraceDiff)],
) -> Result<serde_json::Value> {
    let mut v = serde_json::to_value(report)?;
    let environment: serde_json::Map<String, serde_json::Value> =
        gemm_audit::report::environment(report)
            .into_iter()
            .map(|(k, val)| (k, serde_json::Value::String(val)))
            .collect();
    v["environment"] = serde_json::Value::Object(environment);
    v["timings"] = serde_json::to_value(&report.timings)?;
    v["elapsed_seconds"] = serde_json::json!(report.elapsed_seconds);
    v["drift"] = drift
        .iter()
        .map(|(w, d)| serde_json::json!({ "workload": w, "differences": d.differences }))
        .collect();
    Ok(v)
}

/// `--report` and `--junit` of an audit, and the drift notes.
pub(super) fn write_audit_artifacts(
    args: &AuditArgs,
    report: &audit::AuditReport,
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
        gemm_audit::util::write_atomic(
            path,
            gemm_audit::render::junit::junit(report, &input.drift).as_bytes(),
            true,
        )?;
    }
    // The drift and what to do about it are the finding: shown with -q too.
    for (w, d) in &input.drift {
        if !d.is_empty() {
            errln!(
                "gemm-audit: {} differs from its golden:\n{}",
                sanitize(w),
                sanitize(&d.render())
            );
        }
    }
    if let Some(dir) = &args.golden_dir {
        let kept = report
            .checks
            .iter()
            .filter(|c| {
                c.contract == audit::Contract::GoldenDrift && c.detail.contains("candidate kept as")
            })
            .count();
        if kept > 0 {
            let dir = sanitize(&dir.display().to_string()).into_owned();
            errln!(
                "gemm-audit: {kept} candidate golden(s) kept under {dir}: `gemm-audit review --golden-dir {dir}` shows them, `gemm-audit accept --golden-dir {dir}` makes them the goldens, `gemm-audit reject --golden-dir {dir}` drops them"
            );
        }
    }
    Ok(())
}

/// `audit --device all`: every device audited at once (one worker each),
/// then the `gpu-to-gpu` contract across them.
pub(super) fn audit_devices(
    args: &AuditArgs,
    allow: &[Allowance],
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
    let mut review = String::new();
    for (i, ((label, _), mut report)) in devices.iter().zip(reports).enumerate() {
        report.note = note.clone();
        if let Some(dir) = &args.traces {
            write_traces(dir, &report.traces, Some(label.ordinal))?;
        }
        if let Some(dir) = &args.golden_dir {
            // Devices are in ascending ordinal: only the first keeps a
            // pending candidate, so they do not overwrite each other's.
            let mine =
                report.compare_with_goldens_allowing(dir, &candidates(args, i == 0), allow)?;
            // Only the first device keeps candidates: it is the one whose
            // candidates --review shows and --accept installs.
            if i == 0 {
                review = settle_candidates(args, &mut report, &mine)?;
            }
            for (w, d) in mine {
                drift.push((format!("dev{}.{w}", label.ordinal), d));
            }
        }
        per_device.push((label.clone(), report));
    }
    let unreferenced_found = match per_device.first() {
        Some((_, first)) => handle_unreferenced(args, first)?,
        None => false,
    };
    let fleet = fleet::FleetReport::new(per_device);
    let mut combined = fleet.combined();
    match args.format {
        Format::Table => print_audit_table(&mut combined),
        Format::Json => outln!(
            "{}",
            gemm_audit::render::json::json_document("audit", fleet.passed(), &fleet)
        ),
    }
    print_review(args, &review);
    write_audit_artifacts(args, &combined, drift)?;
    Ok(if fleet.passed() && !unreferenced_found {
        EXIT_OK
    } else {
        EXIT_FINDING
    })
}

/// `compile-kernels`: every module a node of `arch` loads, into the kernel
/// cache the environment names, one line per module.
pub(super) fn cmd_compile_kernels(arch: &str) -> Result<u8> {
    use gemm_audit::backend::cuda::{self, kernel_cache::KernelCache};
    let cache = KernelCache::from_env(|k| std::env::var(k).ok());
    let filled = cuda::fill_kernel_cache(arch, |module| {
        let slow = if module.starts_with("wgmma.cu") {
            " (a minute or more)"
        } else {
            ""
        };
        note!("gemm-audit: compiling {module}{slow}");
    })?;
    for (module, how) in &filled {
        outln!("{module:<18} {how}");
    }
    if let Some(dir) = cache.dir() {
        outln!("kernel cache: {}", dir.display());
    }
    Ok(EXIT_OK)
}
