//! The audit: the built-in suite on one backend, and a verdict per contract.
//!
//! Contracts checked: run-to-run bit identity, eager vs replay identity,
//! batch invariance (row r identical across m), agreement with the CPU
//! scalar-FMA reference, the nondeterministic control detected (and refused
//! by the policy), and the mutation self-check (every tampering refused
//! before launch). A control passes when its planted fault is detected.

use crate::backend::{Backend, GemmBackend};
use crate::diff::{UlpStats, ulp_stats};
use crate::digest::Digest;
use crate::error::Result;
use crate::kernels::TimingClock;
use crate::kernels::{GemmSpec, KernelFamily, RouteChoice};
use crate::mutation::{Mutation, exercise, route_field_tags};
use crate::plan::CapturedGemmGraphPlan;
use crate::recorder::{self, ReplayOutcome};
use crate::route::ResolvedGemmRoute;
use crate::vocab::ContractKind;
use crate::workload::Workload;
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

    /// The contracts that failed other than the golden rows (drift and
    /// coverage), each named once: what `--accept` refuses to bless.
    pub fn own_failures(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .checks
            .iter()
            .filter(|c| c.verdict == Verdict::Fail)
            .filter(|c| c.contract != GOLDEN_DRIFT && c.contract != GOLDEN_COVERAGE)
            .map(|c| c.contract.clone())
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// True when no check failed.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.verdict != Verdict::Fail)
    }

    /// The verdict table as plain text.
    pub fn to_table(&self) -> String {
        self.render_table(None, &|_, _| None)
    }

    /// The verdict table: a summary per workload first, then one row per
    /// check with its verdict in the first column (failures first), then
    /// the overall verdict. `width` (a terminal's columns) wraps the
    /// details; `paint` is given the verdict column's cells (column 0) and
    /// the overall verdict, to colour them.
    pub fn render_table(&self, width: Option<usize>, paint: &crate::render::Paint<'_>) -> String {
        let mut s = format!(
            "gemm-audit: backend {}, {} runs per check\n",
            crate::render::one_line(&self.backend),
            self.runs
        );
        if let Some(n) = &self.note {
            s.push_str(&format!("note: {}\n", crate::render::one_line(n)));
        }
        if let Some(t) = self.traces.first() {
            // Said on every run: what f32 and halves were permitted to do.
            s.push_str(&format!("policy: {}\n", t.context.policy));
        }
        for (workload, [pass, fail, info]) in self.case_counts() {
            s.push_str(&format!(
                "  {}: {pass} GEMM cases pass, {fail} fail, {info} info\n",
                crate::render::one_line(&workload)
            ));
        }
        let mut table = crate::render::Table::new(&["VERDICT", "CONTRACT", "SUBJECT", "DETAIL"]);
        if let Some(w) = width {
            // On a narrow terminal the subject gives way, so the details
            // keep room to wrap in (the verdict is first either way).
            table = table.cap(
                2,
                w.saturating_sub(9 + 25 + 30)
                    .clamp(16, crate::render::MAX_CELL),
            );
        }
        // Failures first; otherwise the order the checks ran in.
        let failed = |c: &&Check| c.verdict == Verdict::Fail;
        for c in self
            .checks
            .iter()
            .filter(failed)
            .chain(self.checks.iter().filter(|c| !failed(c)))
        {
            table.row(&[
                c.verdict.to_string(),
                c.contract.clone(),
                c.subject.clone(),
                c.detail.clone(),
            ]);
        }
        s.push_str(&table.render_painted(width, paint));
        let count = |v| self.checks.iter().filter(|c| c.verdict == v).count();
        let verdict = if self.passed() {
            Verdict::Pass
        } else {
            Verdict::Fail
        }
        .to_string();
        let painted = match paint(0, &verdict) {
            Some((before, after)) => format!("{before}{verdict}{after}"),
            None => verdict,
        };
        s.push_str(&format!(
            "verdict: {painted} ({} pass, {} fail, {} info)\n",
            count(Verdict::Pass),
            count(Verdict::Fail),
            count(Verdict::Info)
        ));
        s
    }

    /// Per workload, in the order first seen: how many of its GEMM cases
    /// passed, failed and were informational.
    pub(crate) fn case_counts(&self) -> Vec<(String, [usize; 3])> {
        let mut out: Vec<(String, [usize; 3])> = Vec::new();
        for c in &self.cases {
            let i = match out.iter().position(|(w, _)| *w == c.workload) {
                Some(i) => i,
                None => {
                    out.push((c.workload.clone(), [0; 3]));
                    out.len() - 1
                }
            };
            let slot = match c.verdict {
                Verdict::Pass => 0,
                Verdict::Fail => 1,
                Verdict::Info => 2,
            };
            out[i].1[slot] += 1;
        }
        out
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
    /// and the batch-invariant cuBLASLt route's sweep, and on devices that
    /// run them (compute capability 9.0) the TMA + wgmma families' sweep
    /// and the invariant ladder's.
    pub fn for_backend(backend: &Backend) -> AuditOptions {
        let mut o = AuditOptions::default();
        if let Some(cuda) = backend.downcast_ref::<crate::backend::cuda::CudaBackend>() {
            let mut names = vec!["tensor-core-sweep", "vendor-sweep", "batch-invariant"];
            if cuda.wgmma_available().is_ok() {
                names.extend(["wgmma-sweep", "ladder-sweep"]);
            }
            o.workloads
                .extend(names.iter().filter_map(|n| Workload::builtin(n)));
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
    /// The whole run, said once before its first stage: `stages` stages of
    /// `launches` launches in all (for a stage count and an estimate).
    fn plan(&mut self, _stages: usize, _launches: usize) {}
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
    // Per workload: record + replay, the reruns, the CPU reference; then
    // the control and the mutation self-check.
    let launches: usize = opts.workloads.iter().map(|w| w.gemms.len()).sum();
    progress.plan(
        opts.workloads.len() * (runs + 1) + 2,
        launches * (runs + 1) + opts.control_attempts + 1,
    );
    for w in &opts.workloads {
        progress.stage(&format!("{}: record + replay", w.name), w.gemms.len());
        // Only what the contracts compare stays on the host (fingerprints
        // cover whole outputs), so no workload needs its outputs in memory.
        let rec = recorder::record_keeping(
            backend,
            w,
            opts.fingerprint_mode,
            &|routes| kept_bytes(w, routes),
            &mut |d, _| progress.advance(d),
        )?;
        replay_check(&mut report, w, &rec.replay, &rec.trace.physical);

        // The fastest of the runs is each launch's time: the first launch
        // of a kernel can include one-time costs (module loading, caches).
        let mut seconds = rec.seconds.clone();
        let mut differing: BTreeMap<usize, UlpStats> = BTreeMap::new();
        let mut partly_kept: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
        for r in 1..runs {
            progress.stage(
                &format!("{}: run {} of {runs}", w.name, r + 1),
                w.gemms.len(),
            );
            // Outputs are held to the recorded fingerprints where they
            // live; only a differing one comes back, for its statistics.
            let again = recorder::eager_rerun(
                backend,
                w,
                &rec.trace.fingerprints,
                rec.trace.fingerprint_mode,
                &mut |d, _| progress.advance(d),
            )?;
            for (i, run) in again.iter().enumerate() {
                if let Some(out) = &run.differing_output {
                    let kept = &rec.outputs[i];
                    // Of an output kept in part, the kept part (a length
                    // change still counts every element).
                    let compared = if kept.len() < out.len() && out.len() == rec.output_lens[i] {
                        partly_kept.insert(i, (kept.len(), out.len()));
                        &out[..kept.len()]
                    } else {
                        out.as_slice()
                    };
                    let st = difference(rec.trace.routes[i].dtype, kept, compared);
                    differing
                        .entry(i)
                        .and_modify(|worst| *worst = worst.worst(st))
                        .or_insert(st);
                }
            }
            for (s, t) in seconds.iter_mut().zip(&again) {
                *s = s.min(t.seconds);
            }
        }
        run_to_run_check(&mut report, w, runs, &differing, &partly_kept);

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

mod contracts;
mod selfcheck;

pub use contracts::display_kernel;
use contracts::*;
use selfcheck::*;

/// The contract name of the golden comparison rows.
pub const GOLDEN_DRIFT: &str = "golden-drift";

/// Whether a golden comparison writes into the golden folder: keeps a
/// candidate for a drifted or missing golden and removes a stale one
/// (`Keep`), or writes nothing there, saying why in the row (`NotKept`: a
/// read-only check, or another device's candidate is kept).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Candidates {
    /// Keep candidates and settle stale ones.
    Keep,
    /// Write nothing into the golden folder, for this reason.
    NotKept(String),
}

/// The run covers every batch-invariance group its golden had: a change
/// that drops a group (one GEMM's dtype changed, say) is a finding, not a
/// quieter PASS.
pub const GOLDEN_COVERAGE: &str = "golden-coverage";

/// The planted nondeterministic control was caught.
pub const NONDETERMINISM_DETECTED: &str = "nondeterminism-detected";
/// The live policy refuses the control's replay before launch.
pub const POLICY_REFUSES_CONTROL: &str = "policy-refuses-control";
/// Route mutations are refused before launch.
pub const MUTATION_REFUSAL: &str = "mutation-refusal";
/// Policy changes are refused by a captured plan before launch.
pub const POLICY_MUTATION_REFUSAL: &str = "policy-mutation-refusal";

/// The contracts that check gemm-audit itself (that the audit detects
/// what it claims), not the GEMMs: reports list them apart.
pub const SELF_CHECKS: [&str; 4] = [
    NONDETERMINISM_DETECTED,
    POLICY_REFUSES_CONTROL,
    MUTATION_REFUSAL,
    POLICY_MUTATION_REFUSAL,
];

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
        self.compare_with_goldens_allowing(dir, &Candidates::Keep, &[])
    }

    /// [`AuditReport::compare_with_goldens`], writing candidates into the
    /// golden folder only as `candidates` says (with several devices, one
    /// device's candidate is kept, so devices do not overwrite each other's
    /// and a lone bad device never proposes a golden), and passing a golden
    /// that differs only in what `allow` lets through (as `diff --allow`
    /// does): its row says which differences were allowed, and no candidate
    /// is kept for it.
    pub fn compare_with_goldens_allowing(
        &mut self,
        dir: &std::path::Path,
        candidates: &Candidates,
        allow: &[crate::diff::Allowance],
    ) -> Result<Vec<(String, crate::diff::TraceDiff)>> {
        let keep_pending = matches!(candidates, Candidates::Keep);
        let mut drift = Vec::new();
        let traces = std::mem::take(&mut self.traces);
        for t in &traces {
            // Keep a candidate for review, as snapshot tools do: for a
            // drifted golden and for a missing one alike.
            let keep = |what: &str| {
                if let Candidates::NotKept(why) = candidates {
                    return format!("candidate not kept ({why})");
                }
                match crate::golden::write_pending(dir, t) {
                    Ok(p) => format!(
                        "candidate kept as {} (review, then accept {what})",
                        p.display()
                    ),
                    Err(e) => format!("the candidate could not be kept: {e}"),
                }
            };
            let (verdict, detail) = match crate::golden::find_golden(dir, t) {
                Err(crate::Error::GoldenMissing {
                    path, available, ..
                }) => (
                    Verdict::Fail,
                    format!(
                        "no golden at {} (present: {available}); {}",
                        path.display(),
                        keep("it to create the golden")
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
                    let outcome = golden_verdict(dir, &path, t, &d, allow, keep_pending, &keep);
                    self.coverage_against(&golden, t);
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

/// The golden-drift verdict of trace `t` against the golden at `path`
/// (`d`, their differences): PASS when identical (settling a stale
/// candidate when `keep_pending`) or when only allowed differences remain;
/// FAIL otherwise, with the candidate kept by `keep`.
fn golden_verdict(
    dir: &std::path::Path,
    path: &std::path::Path,
    t: &crate::RecordedGemmTrace,
    d: &crate::diff::TraceDiff,
    allow: &[crate::diff::Allowance],
    keep_pending: bool,
    keep: &dyn Fn(&str) -> String,
) -> (Verdict, String) {
    let allowed_only = !d.is_empty() && d.not_allowed(allow).next().is_none();
    if allowed_only {
        let names: Vec<String> = allow.iter().map(|a| a.to_string()).collect();
        (
            Verdict::Pass,
            format!(
                "differs from {} only in allowed differences ({}): {}",
                path.display(),
                names.join(", "),
                d.summary()
            ),
        )
    } else if d.is_empty() {
        // A run that matches the golden settles a candidate
        // left by an earlier one, so `accept` cannot revert it.
        let stale = if keep_pending {
            crate::golden::remove_stale_pending(dir, t).ok().flatten()
        } else {
            None
        };
        let note = stale
            .map(|p| format!("; stale candidate {} removed", p.display()))
            .unwrap_or_default();
        (
            Verdict::Pass,
            format!("identical to {}{note}", path.display()),
        )
    } else {
        let classes: Vec<String> = d.classes().iter().map(|c| c.to_string()).collect();
        (
            Verdict::Fail,
            format!(
                "{} differences from {} ({}): {}; {}",
                d.differences.len(),
                path.display(),
                classes.join(", "),
                d.summary(),
                keep("it to replace the golden")
            ),
        )
    }
}

/// A batch-invariance group of a trace: GEMMs of one (op, dtype, k, n,
/// input seed), and the m they were run at.
type CoverageKey = (crate::vocab::GemmOp, crate::vocab::DType, u64, u64, u64);

/// The batch-invariance groups of `t` (those with at least two m): per m,
/// how many GEMMs of the group ran at it (routes of one problem family
/// share a group, so a count, not a set, notices one of them leaving).
fn batch_coverage(t: &crate::RecordedGemmTrace) -> BTreeMap<CoverageKey, BTreeMap<u64, usize>> {
    let mut groups: BTreeMap<CoverageKey, BTreeMap<u64, usize>> = BTreeMap::new();
    for (r, f) in t.routes.iter().zip(&t.fingerprints) {
        let key = (r.op, r.dtype, r.shape.k, r.shape.n, f.input_seed);
        *groups.entry(key).or_default().entry(r.shape.m).or_default() += 1;
    }
    groups.retain(|_, ms| ms.len() >= 2);
    groups
}

impl AuditReport {
    /// The candidates under `dir` of this audit's traces: (index into
    /// `traces`, the pending file, the golden it would become), for each
    /// trace whose pending file exists (after the golden comparison: the
    /// ones this run kept).
    pub fn kept_candidates(
        &self,
        dir: &std::path::Path,
    ) -> Vec<(usize, std::path::PathBuf, std::path::PathBuf)> {
        self.traces
            .iter()
            .enumerate()
            .filter_map(|(i, t)| {
                let golden = crate::golden::golden_path(dir, t);
                let pending = crate::golden::pending_path(&golden);
                std::fs::symlink_metadata(&pending)
                    .is_ok()
                    .then_some((i, pending, golden))
            })
            .collect()
    }

    /// Installs the candidates this audit kept under `dir` (`audit
    /// --accept`, as `cargo insta test --accept` does): each workload whose
    /// golden-drift row failed with its candidate kept gets this run's
    /// trace as its golden (atomically; the candidate file is removed), and
    /// its golden rows (drift and coverage) pass, saying so. Returns the
    /// goldens written. A row that failed without a kept candidate stays
    /// failed. A run that failed any of its own contracts (every row but
    /// the golden ones) accepts nothing: a fault must never become the
    /// golden; its golden rows say so.
    pub fn accept_candidates(&mut self, dir: &std::path::Path) -> Result<Vec<std::path::PathBuf>> {
        let own = self.own_failures();
        if !own.is_empty() {
            let detail = format!(
                "not accepted: this run failed its own contracts ({})",
                own.join(", ")
            );
            for c in &mut self.checks {
                if c.contract == GOLDEN_DRIFT && c.verdict == Verdict::Fail {
                    c.detail = format!("{detail}; {}", c.detail);
                }
            }
            return Ok(Vec::new());
        }
        let mut accepted = Vec::new();
        for (i, pending, golden) in self.kept_candidates(dir) {
            let t = &self.traces[i];
            let drifted = self.checks.iter().any(|c| {
                c.contract == GOLDEN_DRIFT && c.subject == t.workload && c.verdict == Verdict::Fail
            });
            if !drifted {
                continue;
            }
            let bytes = t.to_bytes().map_err(|e| crate::Error::Format {
                path: pending.clone(),
                source: e,
            })?;
            crate::golden::accept(&crate::golden::Pending {
                path: pending,
                golden: golden.clone(),
                trace: t.clone(),
                digest: Digest::sha256(&bytes),
                diff: None,
            })?;
            let detail = format!("accepted: {} now holds this run's trace", golden.display());
            let golden_row =
                |contract: &str| contract == GOLDEN_DRIFT || contract == GOLDEN_COVERAGE;
            for c in &mut self.checks {
                if golden_row(&c.contract) && c.subject == t.workload {
                    c.verdict = Verdict::Pass;
                    c.detail = detail.clone();
                }
            }
            for c in &mut self.cases {
                if golden_row(&c.contract) && c.workload == t.workload {
                    c.verdict = Verdict::Pass;
                    c.detail = detail.clone();
                }
            }
            accepted.push(golden);
        }
        Ok(accepted)
    }

    /// The `golden-coverage` row of `run` against its golden: every
    /// batch-invariance group the golden had, at every m it had, is still
    /// in the run.
    fn coverage_against(
        &mut self,
        golden: &crate::RecordedGemmTrace,
        run: &crate::RecordedGemmTrace,
    ) {
        let (had, has) = (batch_coverage(golden), batch_coverage(run));
        let lost: Vec<String> = had
            .iter()
            .filter_map(|(key, ms)| {
                let now = has.get(key);
                let missing: Vec<u64> = ms
                    .iter()
                    .filter(|(m, count)| now.and_then(|n| n.get(m)).is_none_or(|c| c < count))
                    .map(|(m, _)| *m)
                    .collect();
                let (op, dtype, k, n, _) = key;
                (!missing.is_empty()).then(|| format!("{op} {dtype} k={k} n={n} at m={missing:?}"))
            })
            .collect();
        let (verdict, detail) = if lost.is_empty() {
            (
                Verdict::Pass,
                format!(
                    "every batch-invariance group of the golden is covered ({} groups)",
                    had.len()
                ),
            )
        } else {
            (
                Verdict::Fail,
                format!(
                    "{} of the golden's {} batch-invariance groups lost coverage: {}",
                    lost.len(),
                    had.len(),
                    lost.join("; ")
                ),
            )
        };
        self.row(GOLDEN_COVERAGE, &run.workload, verdict, detail.clone());
        self.case(
            GOLDEN_COVERAGE,
            &run.workload,
            &run.workload,
            verdict,
            detail,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::CpuBackend;

    /// A run that lost a batch-invariance group its golden had (one GEMM's
    /// dtype changed) fails `golden-coverage`, naming the group and m.
    #[test]
    fn lost_batch_coverage_is_a_finding() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../traces/cpu-x86_64/m-sweep.gat");
        let golden = crate::RecordedGemmTrace::read(&path).unwrap();
        let mut r = AuditReport::new("cpu", 2);
        r.coverage_against(&golden, &golden);
        assert_eq!(r.checks[0].verdict, Verdict::Pass, "{:?}", r.checks);
        let mut run = golden.clone();
        let i = run.routes.iter().position(|x| x.shape.m == 8).unwrap();
        run.routes[i].dtype = crate::vocab::DType::Bf16;
        let mut r = AuditReport::new("cpu", 2);
        r.coverage_against(&golden, &run);
        let c = &r.checks[0];
        assert_eq!(
            (c.contract.as_str(), c.verdict),
            (GOLDEN_COVERAGE, Verdict::Fail)
        );
        assert!(
            c.detail.contains("nn f32 k=1024 n=256 at m=[8]"),
            "{}",
            c.detail
        );
        assert_eq!(r.cases.len(), 1);
    }

    /// Failures come first, the verdict is the first column, and on an
    /// 80-column terminal no line of the table passes the edge.
    #[test]
    fn the_verdict_table_puts_failures_first_and_fits_the_terminal() {
        let mut r = AuditReport::new("cpu", 3);
        let check = |verdict, subject: &str| {
            Check {
            contract: "batch-invariance".into(),
            subject: subject.into(),
            verdict,
            detail: "rows differ from m=1 at m=32,64,128 (first at m=32); kernels by m: m=1..16: cpu_split_k_fixed_nn_f32; m=32..128: cpu_tiled32x32_nn_f32".into(),
        }
        };
        r.checks.push(check(
            Verdict::Pass,
            "m-sweep tiled nn f32 k=1024 n=256 m=[1, 2, 4, 8, 16, 32, 64, 128]",
        ));
        r.checks.push(check(Verdict::Fail, "m-sweep policy"));
        let text = r.render_table(Some(80), &|_, _| None);
        let body: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("VERDICT"))
            .collect();
        assert!(body[1].starts_with("FAIL "), "{text}");
        assert!(body.iter().all(|l| l.chars().count() <= 80), "{text}");
        assert!(
            text.ends_with("verdict: FAIL (1 pass, 1 fail, 0 info)\n"),
            "{text}"
        );
        // Painting wraps the verdict cells and the overall verdict only.
        let painted = r.render_table(None, &|c, v| {
            (c == 0).then(|| (format!("<{v}>"), "</>".into()))
        });
        assert!(painted.contains("<FAIL>FAIL</>") && painted.contains("verdict: <FAIL>FAIL</>"));
        assert!(!painted.contains("<VERDICT>"));
    }

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

    /// The audit keeps small outputs whole, the CPU reference's and
    /// contract parity's whole, and of any other large output only the
    /// rows batch invariance compares.
    #[test]
    fn the_audit_keeps_only_what_its_contracts_compare() {
        let w = Workload::from_json(
            r#"{"name": "w", "gemm": [
                {"name": "sweep@1", "op": "nn", "dtype": "f32", "m": 1, "k": 8, "n": 1024, "route": "split-k-fixed:2"},
                {"name": "sweep@4096", "op": "nn", "dtype": "f32", "m": 4096, "k": 8, "n": 1024, "route": "split-k-fixed:2"},
                {"name": "lone", "op": "nn", "dtype": "f32", "m": 4096, "k": 8, "n": 768, "route": "split-k-fixed:2"},
                {"name": "scalar", "op": "nn", "dtype": "f32", "m": 4096, "k": 8, "n": 640, "route": "scalar-fma"},
                {"name": "p1", "op": "nn", "dtype": "f32", "m": 4096, "k": 8, "n": 896, "route": "split-k-fixed:2"},
                {"name": "p2", "op": "nn", "dtype": "f32", "m": 4096, "k": 8, "n": 896, "route": "split-k-fixed:2"}
            ]}"#,
        )
        .unwrap();
        let cpu = CpuBackend::default();
        let mut routes: Vec<_> = w.gemms.iter().map(|g| cpu.resolve(g).unwrap()).collect();
        // p1 and p2: one problem, one contract, two kernels.
        routes[5].kernel_symbol = "another_kernel".into();
        let keep = kept_bytes(&w, &routes);
        assert_eq!(keep[0], usize::MAX, "4 KiB: kept whole");
        assert_eq!(
            keep[1],
            1024 * 4,
            "16 MiB: only the m=1 rows of its M-sweep"
        );
        assert_eq!(keep[2], 0, "12 MiB, compared by no contract");
        assert_eq!(keep[3], usize::MAX, "the CPU reference compares it whole");
        assert_eq!(
            &keep[4..],
            &[usize::MAX, usize::MAX],
            "contract parity compares them whole"
        );
    }

    /// A run-to-run difference in an output kept in part says so.
    #[test]
    fn a_partly_kept_run_to_run_difference_says_what_it_covers() {
        let w = Workload::from_json(
            r#"{"name": "w", "gemm": [
                {"name": "a", "op": "nn", "dtype": "f32", "m": 4096, "k": 8, "n": 1024, "route": "split-k-fixed:2"}
            ]}"#,
        )
        .unwrap();
        let st = UlpStats {
            elements: 1024,
            differing: 0,
            max_ulp: 0,
        };
        let mut report = AuditReport::new("cpu", 2);
        let differing = BTreeMap::from([(0, st)]);
        run_to_run_check(
            &mut report,
            &w,
            2,
            &differing,
            &BTreeMap::from([(0, (4096, 16 << 20))]),
        );
        let case = report.cases.iter().find(|c| c.gemm == "a").unwrap();
        assert_eq!(case.verdict, Verdict::Fail);
        assert!(
            case.detail
                .contains("the statistics cover the first 4096 of 16777216 bytes"),
            "{}",
            case.detail
        );
    }
}
