//! The audit: the built-in suite on one backend, and a verdict per contract.
//!
//! Contracts checked: run-to-run bit identity, eager vs replay identity,
//! batch invariance (row r identical across m), agreement with the CPU
//! scalar-FMA reference, the nondeterministic control detected (and refused
//! by the policy), and the mutation self-check (every tampering refused
//! before launch). A control passes when its planted fault is detected.

use crate::backend::{Backend, TimingClock};
use crate::diff::{UlpStats, ulp_stats};
use crate::digest::Digest;
use crate::error::Result;
use crate::mutation::{Mutation, exercise, route_field_tags};
use crate::plan::CapturedGemmGraphPlan;
use crate::recorder::{self, ReplayOutcome};
use crate::route::{ContractKind, ResolvedGemmRoute};
use crate::workload::{GemmSpec, RouteChoice, Workload};
use serde::Serialize;
use std::collections::{BTreeMap, HashSet};
use std::fmt;

/// A check's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// The contract holds (for a control: its fault was detected).
    Pass,
    /// The contract is violated (for a control: its fault went unseen).
    Fail,
    /// A fact reported, not a promise: e.g. a dispatcher that is not batch invariant.
    Info,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Info => "INFO",
        })
    }
}

/// One row of the verdict table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// The contract, e.g. `run-to-run`.
    pub contract: String,
    /// What it was checked on, e.g. a workload or an M-sweep group.
    pub subject: String,
    /// Whether the contract held.
    pub verdict: Verdict,
    /// One line for people: the evidence behind the verdict (counts, the
    /// first GEMM that differs, ...).
    pub detail: String,
}

/// One contract checked on one GEMM (a JUnit test case).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Case {
    /// The contract, e.g. `run-to-run` (the JUnit test suite it is listed in).
    pub contract: String,
    /// The workload the GEMM belongs to.
    pub workload: String,
    /// The GEMM (or M-sweep group, or control) the case is about.
    pub gemm: String,
    /// Whether the contract held for this GEMM.
    pub verdict: Verdict,
    /// One line for people: why this verdict.
    pub detail: String,
}

/// One cell of a batch-invariance matrix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MatrixCell {
    /// The member's workload-level GEMM name.
    pub gemm: String,
    /// The member's batch size (rows of C).
    pub m: u64,
    /// Rows shared with the smallest-m member are bit-identical to it.
    pub identical: bool,
    /// How those shared rows differ from the smallest-m member's (elements
    /// and the largest ULP distance); None when identical.
    pub difference: Option<UlpStats>,
    /// The numeric contract of the member's route, e.g. `split-k-fixed/4`.
    pub contract: String,
    /// The kernel that ran: the route's symbol, or for a vendor route the
    /// physical kernels seen in its graph, joined by ` + `.
    pub kernel: String,
}

/// An M-sweep group's rows compared across batch sizes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BatchMatrix {
    /// The workload the group belongs to.
    pub workload: String,
    /// e.g. `policy nn f32 k=1024 n=256`.
    pub group: String,
    /// Whether the group's route promises batch invariance.
    pub promised: bool,
    /// One cell per member GEMM, in ascending m.
    pub cells: Vec<MatrixCell>,
}

/// The audit's result.
#[derive(Debug, Clone, Serialize)]
pub struct AuditReport {
    /// The backend audited: `cpu`, `cuda` or an engine's name.
    pub backend: String,
    /// Why another backend than the one asked for is used, if so.
    pub note: Option<String>,
    /// Eager runs compared per run-to-run check (at least 2).
    pub runs: usize,
    /// The verdict table: one row per contract and subject.
    pub checks: Vec<Check>,
    /// Per-GEMM cases behind the rows (JUnit test cases).
    pub cases: Vec<Case>,
    /// Batch-invariance matrices of the M-sweep groups.
    pub matrices: Vec<BatchMatrix>,
    /// The traces recorded for each audited workload.
    #[serde(skip)]
    pub traces: Vec<crate::RecordedGemmTrace>,
    /// Eager wall time of each recorded launch (machine-dependent: kept out
    /// of the JSON so it stays comparable; the HTML report charts it).
    #[serde(skip)]
    pub timings: Vec<Timing>,
    /// Wall time of the whole audit, in seconds (kept out of the JSON).
    #[serde(skip)]
    pub elapsed_seconds: f64,
}

/// Time of one eager launch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Timing {
    /// The workload the launch belongs to.
    pub workload: String,
    /// The GEMM's workload-level name.
    pub gemm: String,
    /// The numeric contract of its route, e.g. `scalar-fma`.
    pub contract: String,
    /// The fastest of the audit's eager launches, in seconds.
    pub seconds: f64,
    /// What the time includes (on CUDA: the kernels alone, by CUDA events).
    pub clock: TimingClock,
}

impl AuditReport {
    /// An empty report of `backend` with `runs` runs per check.
    pub fn new(backend: &str, runs: usize) -> Self {
        AuditReport {
            backend: backend.into(),
            note: None,
            runs,
            checks: Vec::new(),
            cases: Vec::new(),
            matrices: Vec::new(),
            traces: Vec::new(),
            timings: Vec::new(),
            elapsed_seconds: 0.0,
        }
    }

    /// True when no check failed.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.verdict != Verdict::Fail)
    }

    /// The verdict table.
    pub fn to_table(&self) -> String {
        let headers = ["CONTRACT", "SUBJECT", "VERDICT", "DETAIL"];
        let rows: Vec<[String; 4]> = self
            .checks
            .iter()
            .map(|c| {
                [
                    c.contract.clone(),
                    c.subject.clone(),
                    c.verdict.to_string(),
                    c.detail.clone(),
                ]
            })
            .collect();
        // Widths are capped: a long name (from a trace file, say) must
        // neither panic the formatter nor push the table off the screen;
        // longer cells simply overflow their column.
        const MAX_WIDTH: usize = 96;
        let mut widths = headers.map(str::len);
        for r in &rows {
            for (w, cell) in widths.iter_mut().zip(r.iter()).take(3) {
                *w = (*w).max(cell.chars().count().min(MAX_WIDTH));
            }
        }
        let mut s = format!(
            "gemm-audit: backend {}, {} runs per check\n",
            self.backend, self.runs
        );
        if let Some(n) = &self.note {
            s.push_str(&format!("note: {n}\n"));
        }
        let line = |cells: [&str; 4]| {
            format!(
                "{:<w0$}  {:<w1$}  {:<w2$}  {}\n",
                cells[0],
                cells[1],
                cells[2],
                cells[3],
                w0 = widths[0],
                w1 = widths[1],
                w2 = widths[2]
            )
        };
        s.push_str(&line(headers));
        for r in &rows {
            s.push_str(&line([&r[0], &r[1], &r[2], &r[3]]));
        }
        let count = |v| self.checks.iter().filter(|c| c.verdict == v).count();
        s.push_str(&format!(
            "verdict: {} ({} pass, {} fail, {} info)\n",
            if self.passed() { "PASS" } else { "FAIL" },
            count(Verdict::Pass),
            count(Verdict::Fail),
            count(Verdict::Info)
        ));
        s
    }
}

/// Audit settings.
#[derive(Debug, Clone)]
pub struct AuditOptions {
    /// Eager runs compared for run-to-run identity (at least 2).
    pub runs: usize,
    /// Most runs of the nondeterministic control before calling it undetected.
    pub control_attempts: usize,
    /// The workloads audited (the control is always run).
    pub workloads: Vec<Workload>,
    /// How the recorded traces' fingerprints hash their chunks.
    pub fingerprint_mode: crate::FingerprintMode,
}

impl AuditOptions {
    /// The suite for a backend: the CPU runs the transformer block and the
    /// M-sweep; CUDA adds the tensor-core tile families, the vendor sweep
    /// and the batch-invariant cuBLASLt route's sweep.
    pub fn for_backend(backend: &Backend) -> AuditOptions {
        let mut o = AuditOptions::default();
        if matches!(backend, Backend::Cuda(_)) {
            o.workloads.extend(
                ["tensor-core-sweep", "vendor-sweep", "batch-invariant"]
                    .iter()
                    .filter_map(|n| Workload::builtin(n)),
            );
        }
        o
    }
}

impl Default for AuditOptions {
    fn default() -> Self {
        AuditOptions {
            runs: 3,
            control_attempts: 32,
            workloads: ["transformer-block", "m-sweep"]
                .iter()
                .filter_map(|n| Workload::builtin(n))
                .collect(),
            fingerprint_mode: crate::FingerprintMode::Strong,
        }
    }
}

/// Progress of a long audit: a stage name and launches done of total.
pub trait Progress {
    /// Starts a stage named `name` of `total` steps (launches).
    fn stage(&mut self, name: &str, total: usize);
    /// `done` steps of the current stage are finished (a running count,
    /// not an increment).
    fn advance(&mut self, done: usize);
}

/// A [`Progress`] that shows nothing.
pub struct NoProgress;

impl Progress for NoProgress {
    fn stage(&mut self, _: &str, _: usize) {}
    fn advance(&mut self, _: usize) {}
}

/// Runs the audit on `backend`.
pub fn run_audit(
    backend: &Backend,
    opts: &AuditOptions,
    progress: &mut dyn Progress,
) -> Result<AuditReport> {
    let runs = opts.runs.max(2);
    let mut report = AuditReport::new(backend.name(), runs);
    let started = std::time::Instant::now();
    for w in &opts.workloads {
        progress.stage(&format!("{}: record + replay", w.name), w.gemms.len());
        let rec = recorder::record_in(backend, w, opts.fingerprint_mode, &mut |d, _| {
            progress.advance(d)
        })?;
        replay_check(&mut report, w, &rec.replay);

        // The fastest of the runs is each launch's time: the first launch
        // of a kernel can include one-time costs (module loading, caches).
        let mut seconds = rec.seconds.clone();
        let mut differing: BTreeMap<usize, UlpStats> = BTreeMap::new();
        for r in 1..runs {
            progress.stage(
                &format!("{}: run {} of {runs}", w.name, r + 1),
                w.gemms.len(),
            );
            let again = recorder::eager_run(backend, w, &mut |d, _| progress.advance(d))?;
            for (i, f) in again
                .fingerprints_in(rec.trace.fingerprint_mode)
                .iter()
                .enumerate()
            {
                if rec.trace.fingerprints.get(i) != Some(f) {
                    let st = difference(
                        rec.trace.routes[i].dtype,
                        &rec.outputs[i],
                        &again.outputs[i],
                    );
                    differing
                        .entry(i)
                        .and_modify(|worst| *worst = worst.worst(st))
                        .or_insert(st);
                }
            }
            for (s, t) in seconds.iter_mut().zip(&again.seconds) {
                *s = s.min(*t);
            }
        }
        run_to_run_check(&mut report, w, runs, &differing);

        progress.stage(&format!("{}: CPU reference", w.name), w.gemms.len());
        reference_check(
            &mut report,
            backend,
            w,
            &rec.trace.routes,
            &rec.outputs,
            progress,
        )?;
        batch_invariance_checks(&mut report, w, &rec.trace.routes, &rec.outputs);
        contract_parity_checks(&mut report, w, &rec.trace.routes, &rec.outputs);
        for (r, secs) in rec.trace.routes.iter().zip(&seconds) {
            report.timings.push(Timing {
                workload: w.name.clone(),
                gemm: r.gemm.clone(),
                contract: r.contract.to_string(),
                seconds: *secs,
                clock: rec.clock,
            });
        }
        report.traces.push(rec.trace);
    }
    control_checks(&mut report, backend, opts, progress)?;
    if let Some(trace) = report.traces.first().cloned() {
        progress.stage("mutation self-check", 1);
        mutation_check(&mut report, backend, &trace);
        policy_mutation_check(&mut report, backend, &trace)?;
    }
    report.elapsed_seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

impl AuditReport {
    fn row(
        &mut self,
        contract: &str,
        subject: impl Into<String>,
        verdict: Verdict,
        detail: impl Into<String>,
    ) {
        self.checks.push(Check {
            contract: contract.into(),
            subject: subject.into(),
            verdict,
            detail: detail.into(),
        });
    }

    fn case(
        &mut self,
        contract: &str,
        workload: &str,
        gemm: &str,
        verdict: Verdict,
        detail: impl Into<String>,
    ) {
        self.cases.push(Case {
            contract: contract.into(),
            workload: workload.into(),
            gemm: gemm.into(),
            verdict,
            detail: detail.into(),
        });
    }
}

fn replay_check(report: &mut AuditReport, w: &Workload, outcome: &ReplayOutcome) {
    const C: &str = "eager-vs-replay";
    let (verdict, detail) = match outcome {
        ReplayOutcome::Identical { launches } => (
            Verdict::Pass,
            format!(
                "{launches}/{launches} launches replayed bit-identical through the validated plan"
            ),
        ),
        ReplayOutcome::Differs { launches } => (
            Verdict::Fail,
            format!("launches {launches:?} differ from the eager run"),
        ),
        ReplayOutcome::Refused { refusal } => (Verdict::Fail, format!("replay refused: {refusal}")),
    };
    for (i, g) in w.gemms.iter().enumerate() {
        let (v, d) = match outcome {
            ReplayOutcome::Identical { .. } => (Verdict::Pass, "replay bit-identical".to_string()),
            ReplayOutcome::Differs { launches } if !launches.contains(&i) => {
                (Verdict::Pass, "replay bit-identical".to_string())
            }
            ReplayOutcome::Differs { .. } => (
                Verdict::Fail,
                "replay output differs from eager".to_string(),
            ),
            ReplayOutcome::Refused { refusal } => {
                (Verdict::Fail, format!("replay refused: {refusal}"))
            }
        };
        report.case(C, &w.name, &g.name, v, d);
    }
    report.row(C, &w.name, verdict, detail);
}

fn run_to_run_check(
    report: &mut AuditReport,
    w: &Workload,
    runs: usize,
    differing: &BTreeMap<usize, UlpStats>,
) {
    const C: &str = "run-to-run";
    let n = w.gemms.len();
    for (i, g) in w.gemms.iter().enumerate() {
        let (v, d) = if let Some(st) = differing.get(&i) {
            (
                Verdict::Fail,
                format!("output bits changed within {runs} runs ({st})"),
            )
        } else {
            (Verdict::Pass, format!("bit-identical over {runs} runs"))
        };
        report.case(C, &w.name, &g.name, v, d);
    }
    let (verdict, detail) = if differing.is_empty() {
        (
            Verdict::Pass,
            format!("{n}/{n} GEMMs bit-identical over {runs} runs"),
        )
    } else {
        let mut names: Vec<&str> = differing
            .keys()
            .map(|&i| w.gemms[i].name.as_str())
            .collect();
        names.sort();
        let worst = differing
            .values()
            .copied()
            .reduce(UlpStats::worst)
            .expect("not empty");
        (
            Verdict::Fail,
            format!(
                "{} of {n} GEMMs changed bits between runs: {} (worst: {worst})",
                names.len(),
                names.join(", ")
            ),
        )
    };
    report.row(C, &w.name, verdict, detail);
}

fn reference_check(
    report: &mut AuditReport,
    backend: &Backend,
    w: &Workload,
    routes: &[ResolvedGemmRoute],
    outputs: &[Vec<u8>],
    progress: &mut dyn Progress,
) -> Result<()> {
    const C: &str = "cpu-reference";
    let mut compared = 0;
    let mut other_contract = 0;
    let mut mismatched = Vec::new();
    let mut worst: Option<UlpStats> = None;
    for (i, (route, out)) in routes.iter().zip(outputs).enumerate() {
        progress.advance(i + 1);
        if route.contract.kind != ContractKind::ScalarFma {
            other_contract += 1;
            continue;
        }
        compared += 1;
        let reference = backend.reference(route, w.gemms[i].input_seed(w.seed))?;
        if &reference != out {
            mismatched.push(route.gemm.clone());
            let st = difference(route.dtype, &reference, out);
            worst = Some(worst.map_or(st, |w| w.worst(st)));
            report.case(
                C,
                &w.name,
                &route.gemm,
                Verdict::Fail,
                format!("differs from the CPU scalar-FMA reference ({st})"),
            );
        } else {
            report.case(
                C,
                &w.name,
                &route.gemm,
                Verdict::Pass,
                "equals the CPU scalar-FMA reference bit for bit",
            );
        }
    }
    if compared == 0 {
        report.row(
            C,
            &w.name,
            Verdict::Info,
            format!("no GEMM under the scalar-FMA contract; {other_contract} under other contracts not compared"),
        );
        return Ok(());
    }
    let (verdict, mut detail) = if mismatched.is_empty() {
        (
            Verdict::Pass,
            format!(
                "{compared}/{compared} scalar-FMA-contract outputs equal the CPU reference bit for bit"
            ),
        )
    } else {
        (
            Verdict::Fail,
            format!(
                "{} of {compared} differ from the CPU reference: {} (worst: {})",
                mismatched.len(),
                mismatched.join(", "),
                worst.expect("a mismatch was counted")
            ),
        )
    };
    if other_contract > 0 {
        detail.push_str(&format!(
            "; {other_contract} under other contracts not compared"
        ));
    }
    report.row(C, &w.name, verdict, detail);
    Ok(())
}

/// GEMMs that share op, dtype, k, n, route choice and seed, at different m,
/// form an M-sweep: each member's rows must equal the smallest-m member's
/// rows if the route promises batch invariance.
fn batch_invariance_checks(
    report: &mut AuditReport,
    w: &Workload,
    routes: &[ResolvedGemmRoute],
    outputs: &[Vec<u8>],
) {
    const C: &str = "batch-invariance";
    type Key = (String, String, u64, u64, String, u64);
    let mut groups: BTreeMap<Key, Vec<usize>> = BTreeMap::new();
    for (i, g) in w.gemms.iter().enumerate() {
        let key = (
            g.op.to_string(),
            g.dtype.to_string(),
            g.k,
            g.n,
            g.route.to_string(),
            g.input_seed(w.seed),
        );
        groups.entry(key).or_default().push(i);
    }
    for ((op, dtype, k, n, route, _), mut members) in groups {
        let distinct_m: HashSet<u64> = members.iter().map(|&i| w.gemms[i].m).collect();
        if distinct_m.len() < 2 {
            continue;
        }
        members.sort_by_key(|&i| w.gemms[i].m);
        let spec: &GemmSpec = &w.gemms[members[0]];
        let row_bytes = n as usize * crate::backend::cpu::kernels::element_size(spec.dtype);
        // Rows 0..m_min of every member against the smallest-m member (the M=1 case when present).
        let base = members[0];
        let shared = (w.gemms[base].m as usize * row_bytes).min(outputs[base].len());
        let promised = spec.route.promises_batch_invariance();
        let group = format!("{route} {op} {dtype} k={k} n={n}");
        let mut cells = Vec::new();
        let mut first_diff = None;
        for &i in &members {
            let rows = |j: usize| outputs[j].get(..shared).unwrap_or(&outputs[j]);
            let identical = rows(i) == rows(base);
            if !identical && first_diff.is_none() {
                first_diff = Some(w.gemms[i].m);
            }
            let diff = (!identical).then(|| difference(spec.dtype, rows(base), rows(i)));
            cells.push(MatrixCell {
                gemm: w.gemms[i].name.clone(),
                m: w.gemms[i].m,
                identical,
                difference: diff,
                contract: routes[i].contract.to_string(),
                kernel: physical_kernel(&routes[i]),
            });
            let (v, d) = match (identical, promised) {
                (true, _) => (
                    Verdict::Pass,
                    format!("rows equal the m={} rows", w.gemms[base].m),
                ),
                (false, true) => (
                    Verdict::Fail,
                    format!(
                        "rows differ from the m={} rows ({})",
                        w.gemms[base].m,
                        diff.expect("set when not identical")
                    ),
                ),
                (false, false) => (
                    Verdict::Info,
                    format!(
                        "rows differ from the m={} rows ({}; not promised by {route})",
                        w.gemms[base].m,
                        diff.expect("set when not identical")
                    ),
                ),
            };
            report.case(C, &w.name, &w.gemms[i].name, v, d);
        }
        let mut ms: Vec<u64> = distinct_m.into_iter().collect();
        ms.sort();
        let mut contracts: Vec<String> = cells.iter().map(|c| c.contract.clone()).collect();
        contracts.dedup();
        let base_m = w.gemms[base].m;
        let (verdict, detail) = match (first_diff, promised) {
            (None, true) => (
                Verdict::Pass,
                format!("rows identical across m ({})", contracts.join(", ")),
            ),
            (None, false) => (
                Verdict::Info,
                format!("rows identical across m, not promised by {route}"),
            ),
            (Some(m), true) => (
                Verdict::Fail,
                format!(
                    "rows of m={m} differ from m={base_m} although {route} promises invariance"
                ),
            ),
            (Some(m), false) => {
                let differing: Vec<String> = cells
                    .iter()
                    .filter(|c| !c.identical)
                    .map(|c| c.m.to_string())
                    .collect();
                // Call it deterministic only when run-to-run held for every
                // member: a message must not contradict that verdict.
                let unstable: Vec<String> = members
                    .iter()
                    .filter(|&&i| {
                        report.cases.iter().any(|c| {
                            c.contract == "run-to-run"
                                && c.workload == w.name
                                && c.gemm == w.gemms[i].name
                                && c.verdict == Verdict::Fail
                        })
                    })
                    .map(|&i| w.gemms[i].m.to_string())
                    .collect();
                let what = if unstable.is_empty() {
                    "deterministic but NOT batch invariant".to_string()
                } else {
                    format!(
                        "NOT batch invariant, and not deterministic either (run-to-run differs at m={})",
                        unstable.join(",")
                    )
                };
                (
                    Verdict::Info,
                    format!(
                        "{what}: rows differ from m={base_m} at m={} (first at m={m}); kernels by m: {}",
                        differing.join(","),
                        kernel_runs(&cells)
                    ),
                )
            }
        };
        report.row(C, format!("{} {group} m={ms:?}", w.name), verdict, detail);
        report.matrices.push(BatchMatrix {
            workload: w.name.clone(),
            group,
            promised,
            cells,
        });
    }
}

/// How two outputs of `dtype` differ; a size mismatch (which a backend
/// bug could cause) counts every element of the longer one as differing.
fn difference(dtype: crate::route::DType, a: &[u8], b: &[u8]) -> UlpStats {
    ulp_stats(dtype, a, b).unwrap_or_else(|| {
        let elements =
            (a.len().max(b.len()) / crate::backend::cpu::kernels::element_size(dtype)) as u64;
        UlpStats {
            elements,
            differing: elements,
            max_ulp: u64::MAX,
        }
    })
}

/// A kernel symbol for people: C++ symbols (cuBLAS, CUTLASS) demangled and
/// cut before their parameter list (`cublasLt::splitKreduce_kernel<32, 16,
/// ...>`); anything else as it is.
pub fn display_kernel(symbol: &str) -> String {
    if symbol.contains(" + ") {
        // A vendor call's kernels, joined.
        return symbol
            .split(" + ")
            .map(display_kernel)
            .collect::<Vec<_>>()
            .join(" + ");
    }
    let Ok(sym) = cpp_demangle::Symbol::new(symbol) else {
        return symbol.to_string();
    };
    let Ok(full) = sym.demangle() else {
        return symbol.to_string();
    };
    let full = full.strip_prefix("void ").unwrap_or(&full);
    // Cut at the first '(' outside template arguments.
    let mut depth = 0i32;
    for (i, c) in full.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            '(' if depth <= 0 && i > 0 => return full[..i].to_string(),
            _ => {}
        }
    }
    full.to_string()
}

/// At most `n` characters of `s`, with `...` when cut (on a character
/// boundary: symbols from files can hold any UTF-8).
fn shorten(s: &str, n: usize) -> String {
    if s.chars().count() > n {
        format!(
            "{}...",
            s.chars().take(n.saturating_sub(3)).collect::<String>()
        )
    } else {
        s.to_string()
    }
}

/// Consecutive batch sizes that ran the same kernel(s), e.g.
/// `m=1..16: A + B; m=64..4096: C`, with symbols demangled and shortened.
fn kernel_runs(cells: &[MatrixCell]) -> String {
    let short = |k: &str| {
        k.split(" + ")
            .map(|s| shorten(&display_kernel(s), 64))
            .collect::<Vec<_>>()
            .join(" + ")
    };
    let mut runs: Vec<(u64, u64, &str)> = Vec::new();
    for c in cells {
        match runs.last_mut() {
            Some((_, hi, k)) if *k == c.kernel => *hi = c.m,
            _ => runs.push((c.m, c.m, &c.kernel)),
        }
    }
    runs.iter()
        .map(|(lo, hi, k)| {
            if lo == hi {
                format!("m={lo}: {}", short(k))
            } else {
                format!("m={lo}..{hi}: {}", short(k))
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The kernel a report names for a route: the physical kernels a vendor
/// call became, or the custom kernel's symbol.
fn physical_kernel(r: &ResolvedGemmRoute) -> String {
    match &r.vendor {
        Some(v) if !v.physical_kernels.is_empty() => v.physical_kernels.join(" + "),
        _ => r.kernel_symbol.clone(),
    }
}

/// GEMMs of the same problem (op, dtype, shape, seed) served under the same
/// numeric contract by different kernels (tiled vs scalar, the dispatcher's
/// pick vs the fixed route, the large vs the small tensor-core tile family)
/// must give the same bits: the contract, not the kernel, decides them.
fn contract_parity_checks(
    report: &mut AuditReport,
    w: &Workload,
    routes: &[ResolvedGemmRoute],
    outputs: &[Vec<u8>],
) {
    const C: &str = "contract-parity";
    let portable = |k: &ContractKind| {
        matches!(
            k,
            ContractKind::ScalarFma
                | ContractKind::SplitKFixed
                | ContractKind::TensorCoreTileParity
        )
    };
    // (op, dtype, m, k, n, seed, contract)
    type Problem = (String, String, u64, u64, u64, u64, String);
    let mut groups: BTreeMap<Problem, Vec<usize>> = BTreeMap::new();
    for (i, (g, r)) in w.gemms.iter().zip(routes).enumerate() {
        if !portable(&r.contract.kind) {
            continue;
        }
        let key = (
            g.op.to_string(),
            g.dtype.to_string(),
            g.m,
            g.k,
            g.n,
            g.input_seed(w.seed),
            r.contract.to_string(),
        );
        groups.entry(key).or_default().push(i);
    }
    let mut pairs = 0;
    let mut kernels: Vec<String> = Vec::new();
    let mut broken = Vec::new();
    for members in groups.values() {
        let distinct: HashSet<&str> = members
            .iter()
            .map(|&i| routes[i].kernel_symbol.as_str())
            .collect();
        if members.len() < 2 || distinct.len() < 2 {
            continue;
        }
        let base = members[0];
        for &i in &members[1..] {
            pairs += 1;
            let same = outputs[i] == outputs[base];
            let what = format!(
                "{} vs {}",
                routes[i].kernel_symbol, routes[base].kernel_symbol
            );
            if !kernels.contains(&routes[i].contract.to_string()) {
                kernels.push(routes[i].contract.to_string());
            }
            if same {
                report.case(
                    C,
                    &w.name,
                    &w.gemms[i].name,
                    Verdict::Pass,
                    format!("bit-identical to {} ({what})", w.gemms[base].name),
                );
            } else {
                broken.push(format!("{} vs {}", w.gemms[i].name, w.gemms[base].name));
                report.case(
                    C,
                    &w.name,
                    &w.gemms[i].name,
                    Verdict::Fail,
                    format!("differs from {} ({what})", w.gemms[base].name),
                );
            }
        }
    }
    if pairs == 0 {
        return;
    }
    let (verdict, detail) = if broken.is_empty() {
        (
            Verdict::Pass,
            format!(
                "{pairs}/{pairs} same-problem pairs on different kernels bit-identical under {}",
                kernels.join(", ")
            ),
        )
    } else {
        (
            Verdict::Fail,
            format!(
                "{} of {pairs} pairs differ under one contract: {}",
                broken.len(),
                broken.join(", ")
            ),
        )
    };
    report.row(C, &w.name, verdict, detail);
}

/// The nondeterministic control must drift (detected within the attempts),
/// and the live policy must refuse to replay it.
fn control_checks(
    report: &mut AuditReport,
    backend: &Backend,
    opts: &AuditOptions,
    progress: &mut dyn Progress,
) -> Result<()> {
    let w = Workload::builtin("nondeterministic-control").expect("built-in control exists");
    let attempts = opts.control_attempts.max(2);
    progress.stage("nondeterministic control", attempts);
    let mut seen: Vec<Digest> = Vec::new();
    let mut first = None;
    let mut used = 0;
    for a in 0..attempts {
        let run = recorder::eager_run(backend, &w, &mut |_, _| {})?;
        used = a + 1;
        progress.advance(used);
        for f in run.fingerprints() {
            if !seen.contains(&f.sha256) {
                seen.push(f.sha256);
            }
        }
        if first.is_none() {
            first = Some(run);
        }
        if seen.len() >= 2 {
            break;
        }
    }
    let detected = seen.len() >= 2;
    let drift = Check {
        contract: "nondeterminism-detected".into(),
        subject: format!("{} ({})", w.name, RouteChoice::SplitKAtomic(16)),
        verdict: if detected {
            Verdict::Pass
        } else {
            Verdict::Fail
        },
        detail: if detected {
            format!(
                "planted drift caught: {} distinct outputs in {used} runs",
                seen.len()
            )
        } else {
            format!("planted drift NOT caught: 1 distinct output in {used} runs")
        },
    };
    let run = first.expect("at least one control run");
    let trace = crate::RecordedGemmTrace::new(
        w.name.clone(),
        w.digest(),
        backend.context().clone(),
        run.routes.clone(),
        run.fingerprints(),
        Default::default(),
    )?;
    let refusal = CapturedGemmGraphPlan::from_trace(&trace).map(|p| p.validate(backend.context()));
    let (verdict, detail) = match refusal {
        Ok(Err(r)) => (Verdict::Pass, format!("replay refused before launch: {r}")),
        Ok(Ok(())) => (
            Verdict::Fail,
            "the live policy accepted a nondeterministic route".into(),
        ),
        Err(r) => (Verdict::Fail, format!("plan could not be built: {r}")),
    };
    let policy = Check {
        contract: "policy-refuses-control".into(),
        subject: w.name.clone(),
        verdict,
        detail,
    };
    for c in [drift, policy] {
        report.case(
            &c.contract,
            &w.name,
            &w.gemms[0].name,
            c.verdict,
            c.detail.clone(),
        );
        report.checks.push(c);
    }
    Ok(())
}

/// A captured graph of a real trace, replayed under live contexts whose
/// policy was changed one setting at a time: each replay must be refused by
/// the plan before the launch closure runs.
fn policy_mutation_check(
    report: &mut AuditReport,
    backend: &Backend,
    trace: &crate::RecordedGemmTrace,
) -> Result<()> {
    use crate::policy::{F32Policy, HalfPolicy, PolicyMode};
    const C: &str = "policy-mutation-refusal";
    let seeds: Vec<u64> = trace.fingerprints.iter().map(|f| f.input_seed).collect();
    let graph = backend.capture(&trace.manifest(), &trace.routes, &seeds)?;
    let p = trace.context.policy;
    let mutations = [
        (
            "tensor-cores",
            crate::GemmPolicy {
                tensor_cores: !p.tensor_cores,
                ..p
            },
        ),
        (
            "f32",
            crate::GemmPolicy {
                f32: if p.f32 == F32Policy::Exact {
                    F32Policy::Tf32
                } else {
                    F32Policy::Exact
                },
                ..p
            },
        ),
        (
            "half",
            crate::GemmPolicy {
                half: if p.half == HalfPolicy::Tiled {
                    HalfPolicy::StreamK
                } else {
                    HalfPolicy::Tiled
                },
                ..p
            },
        ),
        (
            "mode",
            p.with_mode(if p.mode == PolicyMode::Deterministic {
                PolicyMode::CublasPedantic
            } else {
                PolicyMode::Deterministic
            }),
        ),
    ];
    let mut refused = 0;
    for (name, policy) in &mutations {
        let live = backend.with_policy(*policy);
        let mut launched = false;
        let outcome = graph
            .plan()
            .with_validated_launch(live.context(), "policy-mutation", |_| launched = true);
        let ok = outcome.is_err() && !launched;
        refused += ok as usize;
        let detail = match &outcome {
            Err(r) => format!("refused before launch: {r}"),
            Ok(()) => "accepted: the launch closure ran".into(),
        };
        report.case(
            C,
            &trace.workload,
            name,
            if ok { Verdict::Pass } else { Verdict::Fail },
            detail,
        );
    }
    let n = mutations.len();
    let (verdict, detail) = if refused == n {
        (
            Verdict::Pass,
            format!(
                "{n}/{n} policy changes (tensor cores, f32, half, mode) refused by the captured plan before launch"
            ),
        )
    } else {
        (
            Verdict::Fail,
            format!(
                "{} of {n} policy changes were accepted by the captured plan",
                n - refused
            ),
        )
    };
    report.row(C, trace.workload.clone(), verdict, detail);
    Ok(())
}

/// Every named mutation kind, and a change of every route field, on a real
/// trace: each must be refused before launch.
fn mutation_check(report: &mut AuditReport, backend: &Backend, trace: &crate::RecordedGemmTrace) {
    let n = trace.routes.len();
    let mut mutations = Mutation::kinds(0, n.saturating_sub(1));
    mutations.extend(
        route_field_tags()
            .into_iter()
            .map(|t| Mutation::Field(n / 2, t)),
    );
    let mut accepted = Vec::new();
    let (mut tried, mut at_construction, mut at_validation, mut at_golden) = (0, 0, 0, 0);
    for m in &mutations {
        let mut routes = trace.routes.clone();
        if !m.apply(&mut routes) || routes == trace.routes {
            continue;
        }
        tried += 1;
        let o = exercise(trace, backend.context(), routes);
        at_construction += o.construction.is_some() as usize;
        at_validation += o.validation.is_some() as usize;
        at_golden += o.golden.is_some() as usize;
        let refused = o.refused_before_launch();
        if !refused {
            accepted.push(m.name());
        }
        let (v, d) = if refused {
            (
                Verdict::Pass,
                format!("refused before launch: {}", o.first_refusal()),
            )
        } else {
            (Verdict::Fail, "accepted".to_string())
        };
        report.case("mutation-refusal", &trace.workload, &m.name(), v, d);
    }
    let (verdict, detail) = if accepted.is_empty() {
        (
            Verdict::Pass,
            format!(
                "{tried}/{tried} mutations refused before launch (plan construction {at_construction}, re-digested: validation {at_validation}, golden {at_golden})"
            ),
        )
    } else {
        (Verdict::Fail, format!("accepted: {}", accepted.join(", ")))
    };
    report.row("mutation-refusal", trace.workload.clone(), verdict, detail);
}

/// The contract name of the golden comparison rows.
pub const GOLDEN_DRIFT: &str = "golden-drift";

impl AuditReport {
    /// Compares every audited workload's trace with its golden under `dir`
    /// and adds one `golden-drift` row (and JUnit case) per workload, so the
    /// table, the JSON, the reports, the JUnit file and the exit code all
    /// carry the same verdict: PASS when identical, FAIL when it differs
    /// (naming the difference classes) or when the golden is missing (saying
    /// how to create it). Returns the differences, for the report's drift
    /// section. Only unreadable goldens are errors.
    pub fn compare_with_goldens(
        &mut self,
        dir: &std::path::Path,
    ) -> Result<Vec<(String, crate::diff::TraceDiff)>> {
        self.compare_with_goldens_keeping(dir, true)
    }

    /// [`AuditReport::compare_with_goldens`], keeping a drifted candidate
    /// as the pending file only when `keep_pending`: with several devices,
    /// one device's candidate is kept (the lowest ordinal's), so devices do
    /// not overwrite each other's and a lone bad device never proposes a
    /// golden.
    pub fn compare_with_goldens_keeping(
        &mut self,
        dir: &std::path::Path,
        keep_pending: bool,
    ) -> Result<Vec<(String, crate::diff::TraceDiff)>> {
        let mut drift = Vec::new();
        let traces = std::mem::take(&mut self.traces);
        for t in &traces {
            let (verdict, detail) = match crate::golden::find_golden(dir, t) {
                Err(crate::Error::GoldenMissing {
                    path, available, ..
                }) => (
                    Verdict::Fail,
                    format!(
                        "no golden at {} (present: {available}); `gemm-audit bless {} --golden-dir {}` creates it",
                        path.display(),
                        t.workload,
                        dir.display()
                    ),
                ),
                Err(e) => {
                    self.traces = traces;
                    return Err(e);
                }
                Ok(path) => {
                    let golden = match crate::RecordedGemmTrace::read(&path) {
                        Ok(g) => g,
                        Err(e) => {
                            self.traces = traces;
                            return Err(e);
                        }
                    };
                    let d = crate::diff::TraceDiff::between(&golden, t);
                    let outcome = if d.is_empty() {
                        (Verdict::Pass, format!("identical to {}", path.display()))
                    } else {
                        let classes: Vec<String> =
                            d.classes().iter().map(|c| c.to_string()).collect();
                        // Keep the candidate for review, as snapshot tools do.
                        let kept = if !keep_pending {
                            "candidate not kept (with several devices, the lowest ordinal's is)"
                                .to_string()
                        } else {
                            match crate::golden::write_pending(dir, t) {
                                Ok(p) => format!("candidate kept as {}", p.display()),
                                Err(e) => format!("the candidate could not be kept: {e}"),
                            }
                        };
                        (
                            Verdict::Fail,
                            format!(
                                "{} differences from {} ({}); {kept}; `gemm-audit review` shows it, `accept` or `reject` settles it",
                                d.differences.len(),
                                path.display(),
                                classes.join(", ")
                            ),
                        )
                    };
                    drift.push((t.workload.clone(), d));
                    outcome
                }
            };
            self.row(GOLDEN_DRIFT, &t.workload, verdict, detail.clone());
            self.case(GOLDEN_DRIFT, &t.workload, &t.workload, verdict, detail);
        }
        self.traces = traces;
        Ok(drift)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::CpuBackend;

    /// A batch-invariance row never calls GEMMs deterministic when their
    /// run-to-run check failed.
    #[test]
    fn kernels_are_demangled_and_shortened_on_character_boundaries() {
        assert_eq!(
            display_kernel(
                "_ZN8cublasLt19splitKreduce_kernelILi32ELi16EiffffLb0EfffLb1ELb0ELb0ELb0EEEvNS_18cublasSplitKParamsIT4_EEPKT2_PKT8_PT7_PT3_PKS2_SF_PKT9_S6_PSG_PvlPS2_PiSL_SL_SF_SF_SF_SF_SF_"
            ),
            "cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, false, float, float, float, true, false, false, false>"
        );
        assert_eq!(display_kernel("gemm_tiled_nn_f32"), "gemm_tiled_nn_f32");
        assert_eq!(
            display_kernel(
                "_ZN7cutlass7Kernel2I42cutlass_80_simt_sgemm_128x32_8x5_nn_align1EEvNT_6ParamsE + gemm_x"
            ),
            "cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1> + gemm_x"
        );
        assert_eq!(shorten("ééééé", 4), "é...");
        assert_eq!(shorten("abc", 4), "abc");
    }

    #[test]
    fn batch_invariance_does_not_contradict_run_to_run() {
        let w = Workload::from_json(
            r#"{"name": "w", "gemm": [
                {"name": "a@1", "op": "nn", "dtype": "f32", "m": 1, "k": 64, "n": 4, "route": "split-k-atomic:4"},
                {"name": "a@2", "op": "nn", "dtype": "f32", "m": 2, "k": 64, "n": 4, "route": "split-k-atomic:4"}
            ]}"#,
        )
        .unwrap();
        let cpu = CpuBackend::default();
        let routes: Vec<_> = w.gemms.iter().map(|g| cpu.resolve(g).unwrap()).collect();
        // Row 0 differs between m=1 and m=2.
        let outputs = vec![vec![0u8; 16], vec![1u8; 32]];
        let row = |report: &AuditReport| {
            report
                .checks
                .iter()
                .find(|c| c.contract == "batch-invariance")
                .unwrap()
                .detail
                .clone()
        };
        let mut report = AuditReport::new("cpu", 2);
        batch_invariance_checks(&mut report, &w, &routes, &outputs);
        assert!(row(&report).starts_with("deterministic but NOT batch invariant"));

        let mut report = AuditReport {
            checks: Vec::new(),
            matrices: Vec::new(),
            ..report
        };
        report.case(
            "run-to-run",
            "w",
            "a@2",
            Verdict::Fail,
            "2 distinct outputs",
        );
        batch_invariance_checks(&mut report, &w, &routes, &outputs);
        let d = row(&report);
        assert!(!d.contains("deterministic but"), "{d}");
        assert!(
            d.contains("not deterministic either (run-to-run differs at m=2)"),
            "{d}"
        );
    }
}
