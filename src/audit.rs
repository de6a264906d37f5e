//! The audit: the built-in suite on one backend, and a verdict per contract.
//!
//! Contracts checked: run-to-run bit identity, eager vs replay identity,
//! batch invariance (row r identical across m), agreement with the CPU
//! scalar-FMA reference, the nondeterministic control detected (and refused
//! by the policy), and the mutation self-check (every tampering refused
//! before launch). A control passes when its planted fault is detected.

use crate::backend::Backend;
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
    pub verdict: Verdict,
    pub detail: String,
}

/// The audit's result.
#[derive(Debug, Clone, Serialize)]
pub struct AuditReport {
    pub backend: String,
    /// Why another backend than the one asked for is used, if so.
    pub note: Option<String>,
    pub runs: usize,
    pub checks: Vec<Check>,
}

impl AuditReport {
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
        let mut widths = headers.map(str::len);
        for r in &rows {
            for (w, cell) in widths.iter_mut().zip(r.iter()).take(3) {
                *w = (*w).max(cell.len());
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
        }
    }
}

/// Progress of a long audit: a stage name and launches done of total.
pub trait Progress {
    fn stage(&mut self, name: &str, total: usize);
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
    let mut checks = Vec::new();
    let mut first_trace = None;
    for w in &opts.workloads {
        progress.stage(&format!("{}: record + replay", w.name), w.gemms.len());
        let rec = recorder::record(backend, w, &mut |d, _| progress.advance(d))?;
        checks.push(replay_check(&w.name, &rec.replay));

        let mut differing: HashSet<usize> = HashSet::new();
        for r in 1..runs {
            progress.stage(
                &format!("{}: run {} of {runs}", w.name, r + 1),
                w.gemms.len(),
            );
            let again = recorder::eager_run(backend, w, &mut |d, _| progress.advance(d))?;
            for (i, f) in again.fingerprints().iter().enumerate() {
                if rec.trace.fingerprints.get(i) != Some(f) {
                    differing.insert(i);
                }
            }
        }
        checks.push(run_to_run_check(w, runs, &differing));

        progress.stage(&format!("{}: CPU reference", w.name), w.gemms.len());
        checks.push(reference_check(
            backend,
            w,
            &rec.trace.routes,
            &rec.outputs,
            progress,
        )?);
        checks.extend(batch_invariance_checks(w, &rec.trace.routes, &rec.outputs));
        if first_trace.is_none() {
            first_trace = Some(rec.trace);
        }
    }
    checks.extend(control_checks(backend, opts, progress)?);
    if let Some(trace) = first_trace {
        progress.stage("mutation self-check", 1);
        checks.push(mutation_check(backend, &trace));
    }
    Ok(AuditReport {
        backend: backend.name().into(),
        note: None,
        runs,
        checks,
    })
}

fn replay_check(workload: &str, outcome: &ReplayOutcome) -> Check {
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
    Check {
        contract: "eager-vs-replay".into(),
        subject: workload.into(),
        verdict,
        detail,
    }
}

fn run_to_run_check(w: &Workload, runs: usize, differing: &HashSet<usize>) -> Check {
    let n = w.gemms.len();
    let (verdict, detail) = if differing.is_empty() {
        (
            Verdict::Pass,
            format!("{n}/{n} GEMMs bit-identical over {runs} runs"),
        )
    } else {
        let mut names: Vec<&str> = differing
            .iter()
            .map(|&i| w.gemms[i].name.as_str())
            .collect();
        names.sort();
        (
            Verdict::Fail,
            format!(
                "{} of {n} GEMMs changed bits between runs: {}",
                names.len(),
                names.join(", ")
            ),
        )
    };
    Check {
        contract: "run-to-run".into(),
        subject: w.name.clone(),
        verdict,
        detail,
    }
}

fn reference_check(
    backend: &Backend,
    w: &Workload,
    routes: &[ResolvedGemmRoute],
    outputs: &[Vec<u8>],
    progress: &mut dyn Progress,
) -> Result<Check> {
    let mut compared = 0;
    let mut other_contract = 0;
    let mut mismatched = Vec::new();
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
        }
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
                "{} of {compared} differ from the CPU reference: {}",
                mismatched.len(),
                mismatched.join(", ")
            ),
        )
    };
    if other_contract > 0 {
        detail.push_str(&format!(
            "; {other_contract} under other contracts not compared"
        ));
    }
    Ok(Check {
        contract: "cpu-reference".into(),
        subject: w.name.clone(),
        verdict,
        detail,
    })
}

/// GEMMs that share op, dtype, k, n, route choice and seed, at different m,
/// form an M-sweep: their first rows must agree if the route promises it.
fn batch_invariance_checks(
    w: &Workload,
    routes: &[ResolvedGemmRoute],
    outputs: &[Vec<u8>],
) -> Vec<Check> {
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
    let mut checks = Vec::new();
    for ((op, dtype, k, n, route, _), mut members) in groups {
        let ms: HashSet<u64> = members.iter().map(|&i| w.gemms[i].m).collect();
        if ms.len() < 2 {
            continue;
        }
        members.sort_by_key(|&i| w.gemms[i].m);
        let spec: &GemmSpec = &w.gemms[members[0]];
        let elem = crate::backend::cpu::kernels::element_size(spec.dtype) as u64;
        let row_bytes = (n * elem) as usize;
        // Row r of every member against row r of the largest-m member.
        let largest = *members.last().unwrap_or(&members[0]);
        let mut first_diff: Option<(u64, u64, u64)> = None; // (row, m, largest m)
        for &i in &members[..members.len() - 1] {
            let m = w.gemms[i].m;
            for r in 0..m {
                let a = outputs[i].get((r as usize) * row_bytes..(r as usize + 1) * row_bytes);
                let b =
                    outputs[largest].get((r as usize) * row_bytes..(r as usize + 1) * row_bytes);
                if a != b {
                    first_diff = first_diff.or(Some((r, m, w.gemms[largest].m)));
                    break;
                }
            }
        }
        let mut mlist: Vec<u64> = ms.into_iter().collect();
        mlist.sort();
        let kernels: Vec<String> = members
            .iter()
            .map(|&i| format!("m={}:{}", w.gemms[i].m, routes[i].contract))
            .collect();
        let mut distinct_contracts: Vec<String> = members
            .iter()
            .map(|&i| routes[i].contract.to_string())
            .collect();
        distinct_contracts.dedup();
        let promised = spec.route.promises_batch_invariance();
        let subject = format!("{} {route} {op} {dtype} k={k} n={n} m={mlist:?}", w.name);
        let (verdict, detail) = match (first_diff, promised) {
            (None, true) => (
                Verdict::Pass,
                format!(
                    "rows identical across m ({})",
                    distinct_contracts.join(", ")
                ),
            ),
            (None, false) => (
                Verdict::Info,
                format!("rows identical across m, not promised by {route}"),
            ),
            (Some((r, m, big)), true) => (
                Verdict::Fail,
                format!(
                    "row {r} differs between m={m} and m={big} although {route} promises invariance"
                ),
            ),
            (Some((r, m, big)), false) => (
                Verdict::Info,
                format!(
                    "deterministic but NOT batch invariant: row {r} differs between m={m} and m={big}; kernels {}",
                    kernels.join(" ")
                ),
            ),
        };
        checks.push(Check {
            contract: "batch-invariance".into(),
            subject,
            verdict,
            detail,
        });
    }
    checks
}

/// The nondeterministic control must drift (detected within the attempts),
/// and the live policy must refuse to replay it.
fn control_checks(
    backend: &Backend,
    opts: &AuditOptions,
    progress: &mut dyn Progress,
) -> Result<Vec<Check>> {
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
    Ok(vec![drift, policy])
}

/// Every named mutation kind, and a change of every route field, on a real
/// trace: each must be refused before launch.
fn mutation_check(backend: &Backend, trace: &crate::RecordedGemmTrace) -> Check {
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
        if !o.refused_before_launch() {
            accepted.push(m.name());
        }
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
    Check {
        contract: "mutation-refusal".into(),
        subject: trace.workload.clone(),
        verdict,
        detail,
    }
}
