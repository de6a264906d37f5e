//! Trace commands: `record`, `check`, `show`, `diff`, `compare` and
//! `workloads`.

use super::*;
use gemm_audit::backend::GemmBackend;

/// Arguments of `compare`.
#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// Trace files, or folders to search for *.gat files.
    #[arg(required = true)]
    pub traces: Vec<PathBuf>,
    /// Output format: a table, or JSON (docs/schema/compare.schema.json).
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Also write a JUnit XML file: one case per group and launch.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Pass a (workload, device class) group with a single trace (by
    /// default one trace compares nothing, and fails).
    #[arg(long)]
    pub allow_single: bool,
}

/// Arguments of `record`.
#[derive(Debug, clap::Args)]
pub struct RecordArgs {
    /// A built-in workload name or a .toml/.json workload file.
    pub workload: String,
    /// Trace file to write (with `--device all`: one per device, named
    /// FILE with `.dev<N>` before its extension, e.g. run.dev1.gat).
    #[arg(short, long, value_name = "FILE")]
    pub out: PathBuf,
    /// Replace the output file if it exists.
    #[arg(long)]
    pub force: bool,
    /// Backend to record on; `auto` uses CUDA when present, else the CPU.
    #[arg(long, value_parser = backend_kind(), default_value = "auto")]
    pub backend: BackendKind,
    /// Also dump each launch's raw output bytes into this folder (for
    /// `diff --outputs`; with `--device all`, into DIR/dev<N>).
    #[arg(long, value_name = "DIR")]
    pub outputs: Option<PathBuf>,
    /// How output fingerprints hash each 4 KiB chunk: `strong`
    /// (SHA-256, collision resistant; the default, and what the
    /// committed goldens hold) or `fast` (NH, at memory speed on a GPU;
    /// finds accidents, not attacks). Goldens compare only within a mode.
    #[arg(long, value_parser = fingerprint_mode(), default_value = "strong")]
    pub fingerprint: FingerprintMode,
    #[command(flatten)]
    pub device: DeviceArgs,
}

/// Arguments of `check`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("golden_source").args(["golden", "golden_dir"])))]
pub struct CheckArgs {
    /// Trace file to check.
    pub trace: PathBuf,
    /// Also compare with this golden trace (names the first changed route and field).
    #[arg(long, value_name = "FILE", conflicts_with = "golden_dir")]
    pub golden: Option<PathBuf>,
    /// Find the golden for this trace's workload and device under DIR (DIR/<device>/<workload>.gat).
    #[arg(long, value_name = "DIR")]
    pub golden_dir: Option<PathBuf>,
    /// Replay the trace and compare output fingerprints.
    #[arg(long)]
    pub replay: bool,
    /// Differences from the golden that pass (comma-separated, as for
    /// `diff`): classes (identity, route, numeric, structural, policy)
    /// or fields, e.g. `--allow device.driver` to accept a driver upgrade
    /// and nothing else.
    #[arg(long, value_parser = values::allowance, value_delimiter = ',', requires = "golden_source")]
    pub allow: Vec<Allowance>,
    /// A checked-in waiver file (TOML `[[waiver]]` or JSON): allowances
    /// with a reason and an expiry date; expired ones are said and not
    /// applied.
    #[arg(long, value_name = "FILE", requires = "golden_source")]
    pub waivers: Option<PathBuf>,
    /// Backend to rebuild and check the plan on; `auto` uses CUDA when
    /// present, else the CPU.
    #[arg(long, value_parser = backend_kind(), default_value = "auto")]
    pub backend: BackendKind,
    /// Output format: a table, or JSON (docs/schema/check.schema.json).
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    #[command(flatten)]
    pub device: DeviceArgs,
}

/// Arguments of `diff`.
#[derive(Debug, clap::Args)]
pub struct DiffArgs {
    /// The trace to compare against (the golden, or the run before).
    pub golden: PathBuf,
    /// The trace whose differences from GOLDEN are classified.
    pub candidate: PathBuf,
    /// Differences that pass (comma-separated): classes (identity,
    /// route, numeric, structural, policy) or fields wherever they
    /// appear (`device.driver`; a trailing `*` matches a prefix, e.g.
    /// `context.module[cublaslt].*`, but never output bits: those pass
    /// only `output_fingerprint` named whole, or `numeric`).
    #[arg(long, value_parser = values::allowance, value_delimiter = ',')]
    pub allow: Vec<Allowance>,
    /// A checked-in waiver file, as for `check`.
    #[arg(long, value_name = "FILE")]
    pub waivers: Option<PathBuf>,
    /// Output dumps of the two traces (`record --outputs`), to count differing elements and ULPs.
    #[arg(long, num_args = 2, value_names = ["GOLDEN_DIR", "CANDIDATE_DIR"])]
    pub outputs: Vec<PathBuf>,
    /// Output format: a table, or JSON (docs/schema/diff.schema.json).
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

pub(super) fn cmd_compare(a: CompareArgs) -> Result<u8> {
    let (paths, format, junit, allow_single) =
        (&a.traces[..], a.format, a.junit.as_deref(), a.allow_single);
    // Streamed: memory does not grow with the number of traces.
    let c = gemm_audit::compare::compare_files(paths)?;
    let passed = if allow_single {
        c.agrees_allowing_single()
    } else {
        c.agrees()
    };
    match format {
        Format::Json => outln!(
            "{}",
            gemm_audit::render::json::json_document("compare", passed, &c)
        ),
        Format::Table => out!(
            "{}",
            gemm_audit::render::compare::compare_text(&c, allow_single)
        ),
    }
    if let Some(path) = junit {
        gemm_audit::util::write_atomic(
            path,
            gemm_audit::render::junit::compare_junit(&c).as_bytes(),
            true,
        )?;
    }
    Ok(if passed { EXIT_OK } else { EXIT_FINDING })
}

pub(super) fn cmd_record(a: RecordArgs) -> Result<u8> {
    let (workload, out, force, kind, outputs, mode, dev) = (
        a.workload.as_str(),
        a.out.as_path(),
        a.force,
        a.backend,
        a.outputs.as_deref(),
        a.fingerprint,
        &a.device,
    );
    let w = Workload::load(workload)?;
    // Refuse before doing the work, not after.
    if !dev.all() && out.exists() && !force {
        return Err(Error::WouldOverwrite { path: out.into() }.into());
    }
    let (mut devices, note) = open_devices(kind, dev)?;
    print_backend_note(&note);
    check_workload_runs_here(&devices[0].1, &w, 2, devices.len())?;
    plant_fault(&mut devices, dev, w.gemms.first().map(|g| g.name.as_str()))?;
    if !dev.all() {
        let bar = if verbosity() > Verbosity::Quiet {
            ProgressBar::new(w.gemms.len() as u64)
        } else {
            ProgressBar::hidden()
        };
        let backend = &devices[0].1;
        let rec = record_one(backend, &w, mode, outputs.is_some(), &mut |d, _| {
            bar.set_position(d as u64)
        })?;
        bar.finish_and_clear();
        return write_recording(&w, &rec, backend.name(), None, out, force, outputs);
    }
    let paths: Vec<PathBuf> = devices
        .iter()
        .map(|(l, _)| fleet::device_path(out, l.ordinal))
        .collect();
    if !force && let Some(p) = paths.iter().find(|p| p.exists()) {
        return Err(Error::WouldOverwrite { path: p.clone() }.into());
    }
    let results = fleet::on_each_device(&devices, |_, b| {
        record_one(b, &w, mode, outputs.is_some(), &mut |_, _| {})
    });
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

/// Records `w`, keeping every output on the host only when `dumps` asks
/// for them (else the outputs are fingerprinted where they live).
fn record_one(
    backend: &Backend,
    w: &Workload,
    mode: FingerprintMode,
    dumps: bool,
    progress: &mut dyn FnMut(usize, usize),
) -> gemm_audit::Result<recorder::Recording> {
    if dumps {
        recorder::record_in(backend, w, mode, progress)
    } else {
        recorder::record_fingerprinted(backend, w, mode, progress)
    }
}

/// Writes one recording (trace, and output dumps when asked) and says what
/// was recorded; the exit code says whether the replay reproduced it.
pub(super) fn write_recording(
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
            gemm_audit::util::write_atomic(&path, bytes, true)?;
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

pub(super) fn cmd_check(a: CheckArgs) -> Result<u8> {
    let allow = &allowances(&a.allow, a.waivers.as_deref())?[..];
    let CheckArgs {
        trace: path,
        golden,
        golden_dir,
        replay,
        backend: kind,
        format,
        device,
        ..
    } = a;
    let (path, dev) = (path.as_path(), &device);
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
    let (mut devices, note) = open_devices(kind, dev)?;
    print_backend_note(&note);
    plant_fault(
        &mut devices,
        dev,
        trace.routes.first().map(|r| r.gemm.as_str()),
    )?;
    if replay {
        let e = on_devices(
            gemm_audit::budget::Estimate::of_routes(&trace.routes),
            devices.len(),
        );
        budget(&devices[0].1).check(
            &what_on(&format!("the replay of {}", path.display()), devices.len()),
            &e,
        )?;
    }
    let results = fleet::on_each_device(&devices, |_, b| {
        recorder::check_golden(b, &trace, golden.as_ref(), allow, replay)
    });
    let checks = all_ok(&devices, results)?;
    let accepted = checks.first().and_then(|c| c.allowed.clone());
    let reports: Vec<recorder::CheckReport> = checks.into_iter().map(|c| c.report).collect();
    if let Some(d) = accepted.as_ref().filter(|d| !d.is_empty()) {
        let classes: Vec<String> = d.classes().iter().map(|c| c.to_string()).collect();
        errln!(
            "gemm-audit: golden differs only in allowed differences ({}):\n{}",
            classes.join(", "),
            d.render()
        );
    }
    let passed = reports.iter().all(|r| r.passed());
    let origin = origin_line(&trace, &devices);
    print_checks(
        path,
        &devices,
        &reports,
        format,
        dev.all(),
        replay,
        origin.as_deref(),
    );
    Ok(if passed { EXIT_OK } else { EXIT_FINDING })
}

/// The checks of every device, as a table or one JSON document.
fn print_checks(
    path: &std::path::Path,
    devices: &[(DeviceLabel, Backend)],
    reports: &[recorder::CheckReport],
    format: Format,
    all_devices: bool,
    replay: bool,
    origin: Option<&str>,
) {
    let passed = reports.iter().all(|r| r.passed());
    match (format, all_devices) {
        (Format::Json, false) => outln!(
            "{}",
            gemm_audit::render::json::json_document("check", passed, &reports[0])
        ),
        (Format::Json, true) => {
            let per_device: Vec<serde_json::Value> = devices
                .iter()
                .zip(reports)
                .map(|((l, _), r)| serde_json::json!({ "device": l, "report": r }))
                .collect();
            outln!(
                "{}",
                gemm_audit::render::json::json_document(
                    "check",
                    passed,
                    &serde_json::json!({ "devices": per_device })
                )
            )
        }
        (Format::Table, all) => {
            for ((label, _), report) in devices.iter().zip(reports) {
                if all {
                    outln!("on {label}:");
                }
                print_check(path, report, replay, origin);
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
}

/// The table rendering of one device's check.
/// `recorded on X, this machine is Y` when the trace was recorded on
/// another device class than the (first) live device: the one-line reason
/// a refusal's long list of changed fields comes from.
fn origin_line(trace: &RecordedGemmTrace, devices: &[(DeviceLabel, Backend)]) -> Option<String> {
    let live = &devices.first()?.1.context().device;
    let recorded = &trace.context.device;
    (recorded.class != live.class).then(|| {
        format!(
            "recorded on {}, this machine is {}",
            recorded.class, live.class
        )
    })
}

pub(super) fn print_check(
    path: &std::path::Path,
    report: &recorder::CheckReport,
    replay: bool,
    origin: Option<&str>,
) {
    outln!(
        "trace {} ({}, {} launches)",
        path.display(),
        report.workload,
        report.launch_count
    );
    // What differs from the golden, first: the lines a person needs.
    if let Some(summary) = &report.summary {
        for line in summary.lines() {
            outln!("{line}");
        }
    } else if let Some(p) = &report.pairing {
        // A passing golden comparison by kernel sequence says so.
        for line in p.lines() {
            outln!("{line}");
        }
    }
    let width = terminal_width();
    let step = |name: &str, r: &Result<(), gemm_audit::Refusal>| match r {
        Ok(()) => outln!("{name:<12} ok"),
        Err(e) => {
            // The origin explains a refused validation, nothing else.
            let origin = origin.filter(|_| name == "validation");
            let lines = gemm_audit::render::refusal::refusal_lines(
                e,
                origin,
                // Lines of a log stay within 100 columns too.
                Some(width.unwrap_or(100)),
                13,
            );
            outln!("{name:<12} {}", lines[0]);
            for l in &lines[1..] {
                outln!("{l}");
            }
        }
    };
    step("plan", &report.plan);
    match (&report.validation, &report.observed) {
        (Some(v), _) => step("validation", v),
        (None, Some(source)) => outln!(
            "{:<12} skipped (observed by {source}: gemm-audit validates and replays only what it launches)",
            "validation"
        ),
        (None, None) => outln!("{:<12} skipped (plan refused)", "validation"),
    }
    if let Some(g) = &report.golden {
        step("golden", g);
    }
    if let Some(n) = report
        .numeric
        .filter(|n| *n != gemm_audit::diff::NumericComparison::Compared)
    {
        outln!("{:<12} {n}", "numeric");
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
        None if replay && report.observed.is_some() => {
            outln!(
                "{:<12} skipped (an observed trace is not replayed)",
                "replay"
            )
        }
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

/// What an observed trace's observation says, as `show` lines.
fn observation_lines(o: &gemm_audit::trace::Observation) -> String {
    let mut s = format!(
        "observed by     {}{}{}\n",
        o.source,
        if o.file.is_empty() {
            String::new()
        } else {
            format!(" ({})", o.file)
        },
        match (o.rank, o.world_size) {
            (Some(r), Some(w)) => format!(", rank {r} of {w}"),
            (Some(r), None) => format!(", rank {r}"),
            _ => String::new(),
        }
    );
    if o.source == "pytorch-profiler" {
        s.push_str(&format!(
            "activities      {} bound, {} beside GEMMs, {} unowned GEMM kernels, {} other, {} unbound ({} events)\n",
            o.bound_kernels, o.beside_gemms, o.unowned_gemm_kernels, o.non_gemm, o.unbound, o.events
        ));
    }
    for n in &o.notes {
        s.push_str(&format!("note            {n}\n"));
    }
    const SHOWN: usize = 5;
    for u in o.unbound_listed.iter().take(SHOWN) {
        s.push_str(&format!("unbound         {u}\n"));
    }
    if o.unbound > SHOWN as u64 {
        s.push_str(&format!(
            "unbound         and {} more (--format json lists the first {})\n",
            o.unbound - SHOWN.min(o.unbound_listed.len()) as u64,
            o.unbound_listed.len()
        ));
    }
    s
}

/// How many of a trace's GEMMs were replayed from a CUDA graph.
fn graph_replays(t: &RecordedGemmTrace) -> usize {
    t.observation
        .as_ref()
        .map_or(0, |o| o.gemms.iter().filter(|g| g.graph.is_some()).count())
}

/// A route's cells of `show`'s table, up to its kernel's geometry.
fn route_cells(
    i: usize,
    r: &gemm_audit::ResolvedGemmRoute,
    o: Option<&gemm_audit::trace::ObservedRoute>,
) -> Vec<String> {
    let shape = match o {
        Some(g) if !g.shapes_recorded => "unrecorded".to_string(),
        Some(g) if g.batch > 1 => {
            format!("{}x{}x{}x{}", g.batch, r.shape.m, r.shape.k, r.shape.n)
        }
        _ => format!("{}x{}x{}", r.shape.m, r.shape.k, r.shape.n),
    };
    // An observed GEMM's kernels are what ran; its symbol is the op.
    // Short names: `--format json` keeps them whole, with digests.
    let short = gemm_audit::render::kernel_name::kernel_display_name;
    let kernel = match (&r.vendor, o) {
        (Some(v), Some(_)) => match v.physical_kernels.as_slice() {
            [] => format!("{} (no GPU kernel)", r.kernel_symbol),
            [k] => short(k),
            [k, rest @ ..] => format!("{} (+{} more)", short(k), rest.len()),
        },
        _ => short(&r.kernel_symbol),
    };
    vec![
        i.to_string(),
        r.gemm.clone(),
        format!("{} {}", r.op, r.dtype),
        shape,
        r.contract.to_string(),
        kernel,
        format!("{:?}/{:?}", r.launch.grid, r.launch.block),
    ]
}

/// The table rendering of a trace.
pub(crate) fn trace_table(t: &RecordedGemmTrace) -> String {
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
    if !t.physical.is_empty() {
        s.push_str(&format!(
            "graph           {} nodes: {}\n",
            t.physical.len(),
            gemm_audit::physical::Coverage::of(&t.physical)
        ));
    }
    s.push_str(&format!("fingerprints    {}\n", t.fingerprint_mode));
    if let Some(o) = &t.observation {
        s.push_str(&observation_lines(o));
    }
    let observed = |i: usize| t.observation.as_ref().and_then(|o| o.gemms.get(i));
    let replayed = graph_replays(t);
    if replayed > 0 {
        s.push_str(&format!(
            "launch          {replayed} of {} GEMMs replayed from a CUDA graph\n",
            t.routes.len()
        ));
    }
    s.push_str(&format!(
        "ordered digest  {}\n\n",
        t.launch_set.ordered_digest
    ));
    let mut headers = vec![
        "#",
        "GEMM",
        "OP",
        "MxKxN",
        "CONTRACT",
        "KERNEL",
        "GRID/BLOCK",
        "OUTPUT",
    ];
    // Which graph replayed each GEMM, only where one did (`-`: eager).
    if replayed > 0 {
        headers.push("GRAPH");
    }
    // Wide caps: vendor kernel symbols are long and a reader of `show`
    // wants them whole; a hostile length is still shortened, never a panic.
    let mut table = (0..headers.len()).fold(gemm_audit::render::Table::new(&headers), |t, i| {
        t.cap(i, 256)
    });
    for (i, (r, f)) in t.routes.iter().zip(&t.fingerprints).enumerate() {
        let o = observed(i);
        let mut row = route_cells(i, r, o);
        row.push(if t.outputs_observed() {
            f.sha256.short()
        } else {
            "-".to_string()
        });
        if replayed > 0 {
            row.push(
                o.and_then(|g| g.graph.clone())
                    .unwrap_or_else(|| "-".into()),
            );
        }
        table.row(&row);
    }
    s.push_str(&table.render(None));
    s
}

pub(super) fn cmd_show(path: &std::path::Path, format: Format) -> Result<u8> {
    let trace = read_trace(path)?;
    match format {
        // Streamed as it is serialized: a large trace is never held as text.
        Format::Json => write_stdout(|w| gemm_audit::render::json::write_show_document(w, &trace)),
        Format::Table => out!("{}", trace_table(&trace)),
    }
    Ok(EXIT_OK)
}

pub(super) fn cmd_diff(a: DiffArgs) -> Result<u8> {
    let allow = &allowances(&a.allow, a.waivers.as_deref())?[..];
    let (golden, candidate, format, outputs) = (
        a.golden.as_path(),
        a.candidate.as_path(),
        a.format,
        &a.outputs[..],
    );
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
            gemm_audit::render::json::diff_document(&g, &c, &d, allow)
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
    let bad = d.disallowed_classes(allow);
    if bad.is_empty() {
        return Ok(EXIT_OK);
    }
    let names: Vec<&str> = bad.iter().map(DiffClass::as_str).collect();
    errln!("gemm-audit: disallowed differences: {}", names.join(", "));
    Ok(EXIT_DIFF_BASE + bad.iter().map(DiffClass::exit_bit).sum::<u8>())
}

pub(super) fn cmd_workloads(show: Option<String>) -> Result<u8> {
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
