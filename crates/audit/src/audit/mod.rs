//! The audit: the built-in suite on one backend, and a verdict per contract.
//!
//! Contracts checked: run-to-run bit identity, eager vs replay identity,
//! batch invariance (row r identical across m), agreement with the CPU
//! scalar-FMA reference, the nondeterministic control detected (and refused
//! by the policy), and the mutation self-check (every tampering refused
//! before launch). A control passes when its planted fault is detected.

use crate::Result;
use crate::backend::{Backend, GemmBackend};
use crate::diff::{UlpStats, ulp_stats};
use crate::digest::Digest;
use crate::kernels::{GemmSpec, KernelFamily, RouteChoice};
use crate::mutation::{Guard, Mutation, exercise_against, route_field_tags};
use crate::plan::CapturedGemmGraphPlan;
use crate::recorder::{self, ReplayOutcome};
use crate::route::ResolvedGemmRoute;
use crate::route::RouteKind;
use crate::vocab::ContractKind;
use crate::workload::Workload;
use std::collections::{BTreeMap, HashSet};

mod contract;
mod contracts;
mod golden;
mod options;
mod report;
mod selfcheck;

pub use contract::{Contract, UnknownContract};
pub use contracts::display_kernel;
use contracts::*;
pub use golden::Candidates;
pub use options::{AuditOptions, NoProgress, Progress};
pub use report::{AuditReport, BatchMatrix, Case, Check, MatrixCell, Timing, Verdict};
use selfcheck::*;

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
    let chosen = mutation_traces(&report.traces);
    progress.stage("mutation self-check", chosen.len());
    for (done, trace) in chosen.iter().enumerate() {
        let w = opts
            .workloads
            .iter()
            .find(|w| w.name == trace.workload)
            .expect("every trace is of an audited workload");
        // The live context the trace was recorded under: the workload's
        // policy, this backend's modules, device and pins.
        let scoped = backend.for_workload(w);
        let live = scoped.as_ref().unwrap_or(backend).live_context();
        let golden = independent_golden(backend, w, trace)?;
        mutation_check(
            &mut report,
            &live,
            trace,
            &golden,
            &CapturedGemmGraphPlan::validate,
        );
        progress.advance(done + 1);
    }
    if let Some(trace) = report.traces.first().cloned() {
        policy_mutation_check(&mut report, backend, &trace)?;
    }
    report.elapsed_seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// The traces the mutation self-check tampers with: the first, and the
/// first holding each kind of route ([`RouteKind`]) not yet covered, so
/// every kind's policy-visible fields are tried.
fn mutation_traces(traces: &[crate::RecordedGemmTrace]) -> Vec<crate::RecordedGemmTrace> {
    let mut covered: Vec<RouteKind> = Vec::new();
    let mut out = Vec::new();
    for (i, t) in traces.iter().enumerate() {
        let kinds: Vec<RouteKind> = t.routes.iter().map(RouteKind::of).collect();
        if i == 0 || kinds.iter().any(|k| !covered.contains(k)) {
            covered.extend(kinds);
            out.push(t.clone());
        }
    }
    out
}

/// A golden for `trace` recorded apart from it: every GEMM of `w`
/// resolved again on `backend` (under the workload's policy), the context
/// taken live, the outputs' fingerprints the trace's (tampering changes
/// routes, not outputs).
fn independent_golden(
    backend: &Backend,
    w: &Workload,
    trace: &crate::RecordedGemmTrace,
) -> Result<crate::RecordedGemmTrace> {
    let scoped = backend.for_workload(w);
    let b = scoped.as_ref().unwrap_or(backend);
    let routes = w
        .gemms
        .iter()
        .map(|g| b.resolve(g))
        .collect::<Result<Vec<ResolvedGemmRoute>>>()?;
    Ok(crate::RecordedGemmTrace::new(
        w.name.clone(),
        w.digest(),
        b.live_context().into_owned().pinned_for(&routes),
        routes,
        trace.fingerprints.clone(),
        b.volatile(),
    )?
    .in_mode(trace.fingerprint_mode))
}
