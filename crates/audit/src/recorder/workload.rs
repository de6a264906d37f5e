//! Recording: run a workload eagerly, build its trace, capture it, replay
//! it through the plan, and compare. Checking: rebuild a stored trace's
//! plan, validate it against the live context, and optionally replay it.

use crate::backend::{Backend, CheckedRun, GemmBackend};
use crate::kernels::TimingClock;
use crate::physical::{self, PhysicalNode};
use crate::plan::CapturedGemmGraphPlan;
use crate::route::ResolvedGemmRoute;
use crate::trace::{FingerprintMode, OutputFingerprint, RecordedGemmTrace};
use crate::workload::Workload;
use crate::{Error, Refusal, RefusalStage, Result};
use serde::Serialize;

/// Routes, seeds and outputs of one eager run.
#[derive(Debug, Clone)]
pub struct EagerRun {
    /// The route each GEMM resolved to, in launch order.
    pub routes: Vec<ResolvedGemmRoute>,
    /// The input seed of each launch (the GEMM's own, else the workload's).
    pub seeds: Vec<u64>,
    /// Each launch's output C, in the storage bytes of its dtype.
    pub outputs: Vec<Vec<u8>>,
    /// Time of each launch in seconds, as measured by `clock` (volatile;
    /// never compared).
    pub seconds: Vec<f64>,
    /// What the times include.
    pub clock: TimingClock,
}

impl EagerRun {
    /// Output fingerprints (strong), one per launch.
    pub fn fingerprints(&self) -> Vec<OutputFingerprint> {
        self.fingerprints_in(FingerprintMode::Strong)
    }

    /// Output fingerprints in `mode`, one per launch.
    pub fn fingerprints_in(&self, mode: FingerprintMode) -> Vec<OutputFingerprint> {
        OutputFingerprint::all_with_mode(mode, &self.seeds, &self.outputs)
    }
}

/// Runs every GEMM of `workload` once, in order. `progress(done, total)` is
/// called after each launch.
pub fn eager_run(
    backend: &Backend,
    workload: &Workload,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<EagerRun> {
    let scoped = backend.for_workload(workload);
    eager_run_on(scoped.as_ref().unwrap_or(backend), workload, progress)
}

/// [`eager_run`] on a backend already scoped to the workload's policy.
fn eager_run_on(
    backend: &Backend,
    workload: &Workload,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<EagerRun> {
    // Growable storage: the eager run decides the launch count.
    let mut run = EagerRun {
        routes: Vec::new(),
        seeds: Vec::new(),
        outputs: Vec::new(),
        seconds: Vec::new(),
        clock: TimingClock::HostWall,
    };
    each_launch(backend, workload, progress, |_, route, seed| {
        let timed = backend.run_timed(&route, seed)?;
        run.outputs.push(timed.output);
        run.seconds.push(timed.seconds);
        run.clock = timed.clock;
        run.routes.push(route);
        run.seeds.push(seed);
        Ok(())
    })?;
    Ok(run)
}

/// Resolves every GEMM of `workload` in order and calls `launch(i,
/// route, seed)` with its input seed (the GEMM's own, else the
/// workload's); `progress(done, total)` after each.
fn each_launch(
    backend: &Backend,
    workload: &Workload,
    progress: &mut dyn FnMut(usize, usize),
    mut launch: impl FnMut(usize, ResolvedGemmRoute, u64) -> Result<()>,
) -> Result<()> {
    let total = workload.gemms.len();
    for (i, spec) in workload.gemms.iter().enumerate() {
        let route = backend.resolve(spec)?;
        launch(i, route, spec.input_seed(workload.seed))?;
        progress(i + 1, total);
    }
    Ok(())
}

/// Runs every GEMM of `workload` once more, in order, holding launch `i`'s
/// output to `expected[i]` (fingerprints in `mode`): only differing outputs
/// come back ([`CheckedRun`]). A launch past the end of `expected` counts
/// as differing. `progress(done, total)` is called after each launch.
pub fn eager_rerun(
    backend: &Backend,
    workload: &Workload,
    expected: &[OutputFingerprint],
    mode: FingerprintMode,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<CheckedRun>> {
    let scoped = backend.for_workload(workload);
    let backend = scoped.as_ref().unwrap_or(backend);
    let mut runs = Vec::with_capacity(workload.gemms.len());
    each_launch(backend, workload, progress, |i, route, seed| {
        runs.push(match expected.get(i) {
            Some(want) => backend.run_checked(&route, seed, mode, want)?,
            None => {
                let t = backend.run_timed(&route, seed)?;
                CheckedRun {
                    seconds: t.seconds,
                    clock: t.clock,
                    differing_output: Some(t.output),
                }
            }
        });
        Ok(())
    })?;
    Ok(runs)
}

/// How a replay compared with the eager fingerprints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "outcome")]
pub enum ReplayOutcome {
    /// Every launch's output equals its recorded fingerprint.
    Identical {
        /// How many launches were replayed.
        launches: usize,
    },
    /// These launches' outputs differ from their recorded fingerprints.
    Differs {
        /// Indices (in launch order) of the launches that differ.
        launches: Vec<usize>,
    },
    /// The replay was refused before launch.
    Refused {
        /// What was refused, where, and what changed.
        refusal: Refusal,
    },
}

impl ReplayOutcome {
    fn compare(expected: &[OutputFingerprint], replayed: &[OutputFingerprint]) -> ReplayOutcome {
        let differing: Vec<usize> = expected
            .iter()
            .zip(replayed)
            .enumerate()
            .filter(|(_, (f, r))| f != r)
            .map(|(i, _)| i)
            .collect();
        if differing.is_empty() && expected.len() == replayed.len() {
            ReplayOutcome::Identical {
                launches: replayed.len(),
            }
        } else {
            ReplayOutcome::Differs {
                launches: differing,
            }
        }
    }

    /// True when the replay ran and matched.
    pub fn is_identical(&self) -> bool {
        matches!(self, ReplayOutcome::Identical { .. })
    }
}

/// A recorded workload: its trace, the eager outputs, and the replay outcome.
#[derive(Debug, Clone)]
pub struct Recording {
    /// The trace recorded, with the captured graph's nodes bound to its
    /// routes.
    pub trace: RecordedGemmTrace,
    /// Each eager launch's output C, in the storage bytes of its dtype;
    /// from [`record_keeping`], only its kept first bytes.
    pub outputs: Vec<Vec<u8>>,
    /// Each eager launch's output length in bytes (more than its
    /// `outputs` entry holds when only a prefix was kept).
    pub output_lens: Vec<usize>,
    /// Time of each eager launch in seconds, as measured by `clock`.
    pub seconds: Vec<f64>,
    /// What the times include.
    pub clock: TimingClock,
    /// How the validated replay of the captured graph compared with the
    /// eager outputs.
    pub replay: ReplayOutcome,
}

/// Records `workload`: eager run, trace and manifest, capture reserved to the
/// manifest's launch count, validated replay, fingerprint comparison.
/// Fingerprints are strong ([`record_in`] chooses).
pub fn record(
    backend: &Backend,
    workload: &Workload,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Recording> {
    record_in(backend, workload, FingerprintMode::Strong, progress)
}

/// [`record`] with fingerprints in `mode`.
pub fn record_in(
    backend: &Backend,
    workload: &Workload,
    mode: FingerprintMode,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Recording> {
    let scoped = backend.for_workload(workload);
    let backend = scoped.as_ref().unwrap_or(backend);
    let run = eager_run_on(backend, workload, progress)?;
    let fingerprints = run.fingerprints_in(mode);
    let output_lens = run.outputs.iter().map(Vec::len).collect();
    finish_recording(
        backend,
        workload,
        mode,
        run.routes,
        fingerprints,
        Kept {
            outputs: run.outputs,
            output_lens,
            seconds: run.seconds,
            clock: run.clock,
        },
    )
}

/// [`record_in`], keeping on the host only the first `keep(routes)[i]`
/// bytes of launch `i`'s output (fingerprints cover the whole outputs,
/// computed where they live: [`GemmBackend::run_keeping`]). `keep` sees
/// every route, resolved before anything runs; the audit keeps what its
/// contracts compare, so a workload's outputs need not fit in host memory.
pub fn record_keeping(
    backend: &Backend,
    workload: &Workload,
    mode: FingerprintMode,
    keep: &dyn Fn(&[ResolvedGemmRoute]) -> Vec<usize>,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Recording> {
    let scoped = backend.for_workload(workload);
    let backend = scoped.as_ref().unwrap_or(backend);
    let routes = workload
        .gemms
        .iter()
        .map(|g| backend.resolve(g))
        .collect::<Result<Vec<_>>>()?;
    let keep = keep(&routes);
    let total = routes.len();
    let mut fingerprints = Vec::with_capacity(total);
    let mut kept = Kept {
        outputs: Vec::with_capacity(total),
        output_lens: Vec::with_capacity(total),
        seconds: Vec::with_capacity(total),
        clock: TimingClock::HostWall,
    };
    for (i, (route, spec)) in routes.iter().zip(&workload.gemms).enumerate() {
        let seed = spec.input_seed(workload.seed);
        let run = backend.run_keeping(route, seed, mode, keep.get(i).copied().unwrap_or(0))?;
        fingerprints.push(run.fingerprint);
        kept.outputs.push(run.kept);
        kept.output_lens.push(run.output_len);
        kept.seconds.push(run.seconds);
        kept.clock = run.clock;
        progress(i + 1, total);
    }
    finish_recording(backend, workload, mode, routes, fingerprints, kept)
}

/// [`record_keeping`] keeping no output on the host: the trace only, its
/// fingerprints computed where the outputs live (for `record` without
/// output dumps, and `bless`).
pub fn record_fingerprinted(
    backend: &Backend,
    workload: &Workload,
    mode: FingerprintMode,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Recording> {
    record_keeping(backend, workload, mode, &|r| vec![0; r.len()], progress)
}

/// What a recording keeps of its eager launches.
struct Kept {
    outputs: Vec<Vec<u8>>,
    output_lens: Vec<usize>,
    seconds: Vec<f64>,
    clock: TimingClock,
}

/// The trace of an eager run on `backend` (already scoped to the
/// workload), its capture and validated replay.
fn finish_recording(
    backend: &Backend,
    workload: &Workload,
    mode: FingerprintMode,
    routes: Vec<ResolvedGemmRoute>,
    fingerprints: Vec<OutputFingerprint>,
    kept: Kept,
) -> Result<Recording> {
    let mut trace = RecordedGemmTrace::new(
        workload.name.clone(),
        workload.digest(),
        // The pins of this trace's own families: what ran before in the
        // process is not this workload's.
        backend.live_context().into_owned().pinned_for(&routes),
        routes,
        fingerprints,
        backend.volatile(),
    )?
    .in_mode(mode);
    let (replay, nodes) = capture_and_replay(backend, &trace, "record")?;
    trace.physical = nodes;
    Ok(Recording {
        trace,
        outputs: kept.outputs,
        output_lens: kept.output_lens,
        seconds: kept.seconds,
        clock: kept.clock,
        replay,
    })
}

/// Captures `trace`'s routes, binds the graph's nodes to them (and, when
/// the trace already holds a physical trace, requires the same nodes), then
/// replays through the plan. A refusal is an outcome, not an error. Returns
/// the outcome and the bound nodes (empty when refused before binding).
pub fn capture_and_replay(
    backend: &Backend,
    trace: &RecordedGemmTrace,
    label: &str,
) -> Result<(ReplayOutcome, Vec<PhysicalNode>)> {
    let refused = |refusal: Refusal| Ok((ReplayOutcome::Refused { refusal }, Vec::new()));
    // Placeholder fingerprints (an imported profile, or a trace relabelled
    // so) would compare equal to a replay fingerprinted the same way: that
    // compares nothing, so it is refused, never called identical.
    if !trace.outputs_observed() {
        return refused(Refusal::new(
            RefusalStage::ReplayValidation,
            None,
            "fingerprint_mode",
            "strong or fast (observed outputs)",
            format!(
                "{} (placeholder fingerprints: no output bits to compare a replay with)",
                trace.fingerprint_mode
            ),
        ));
    }
    let seeds: Vec<u64> = trace.fingerprints.iter().map(|f| f.input_seed).collect();
    let graph = match backend.capture(&trace.manifest(), &trace.routes, &seeds) {
        Ok(g) => g,
        Err(Error::Refused(refusal)) => return refused(*refusal),
        Err(e) => return Err(e),
    };
    let mut nodes = graph.physical().to_vec();
    if let Err(r) = physical::bind(&trace.context, &trace.routes, &mut nodes) {
        return refused(r);
    }
    if !trace.physical.is_empty()
        && let Err(r) = physical::check_against(&trace.physical, &nodes)
    {
        return refused(r);
    }
    match backend.replay_fingerprinted(&graph, label, trace.fingerprint_mode) {
        Ok(replayed) => Ok((
            ReplayOutcome::compare(&trace.fingerprints, &replayed),
            nodes,
        )),
        Err(Error::Refused(refusal)) => refused(*refusal),
        Err(e) => Err(e),
    }
}

/// The differences of `trace` from `golden` when every one of them is
/// allowed (classes or fields in `allow`, as `diff --allow` judges): the
/// golden comparison then passes by class instead of refusing the first
/// changed field. `None` when nothing is allowed or something disallowed
/// differs (the comparison is then made field by field, and refuses).
pub fn allowed_golden_differences(
    golden: &RecordedGemmTrace,
    trace: &RecordedGemmTrace,
    allow: &[crate::diff::Allowance],
) -> Option<crate::diff::TraceDiff> {
    if allow.is_empty() {
        return None;
    }
    let d = crate::diff::TraceDiff::between(golden, trace);
    d.disallowed_classes(allow).is_empty().then_some(d)
}

/// What `check` found for a stored trace.
#[derive(Debug, Clone, Serialize)]
pub struct CheckReport {
    /// The stored trace's workload name.
    pub workload: String,
    /// Launches in the stored trace's launch set.
    pub launch_count: u64,
    /// Plan construction: the trace's routes against its own launch set.
    #[serde(serialize_with = "step")]
    pub plan: Result<(), Refusal>,
    /// Validation of the plan against the live context.
    #[serde(serialize_with = "optional_step")]
    pub validation: Option<Result<(), Refusal>>,
    /// Comparison with a golden trace, when one was given.
    #[serde(serialize_with = "optional_step")]
    pub golden: Option<Result<(), Refusal>>,
    /// Replay and fingerprint comparison, when asked for.
    pub replay: Option<ReplayOutcome>,
    /// What observed the trace's GEMMs, when gemm-audit did not run them
    /// (an imported profile, the PyTorch recorder): such a trace is not
    /// validated against the live context or replayed here, only compared.
    pub observed: Option<String>,
    /// Whether the golden comparison compared outputs (`None` without a
    /// golden).
    pub numeric: Option<crate::diff::NumericComparison>,
    /// What differs from the golden, when the golden comparison failed:
    /// libraries, kernels, output bits (the `diff` document's `summary`).
    pub summary: Option<crate::diff::DiffOverview>,
    /// How the golden comparison paired GEMMs without op identity (a
    /// graph-replay profile's) by kernel sequence, where it did; its
    /// verdict is then the diff's.
    pub pairing: Option<crate::diff::SequencePairing>,
}

/// A step as JSON: `{"status": "ok"}` or `{"status": "refused", "refusal": {...}}`.
#[derive(Serialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
enum StepJson<'a> {
    Ok,
    Refused { refusal: &'a Refusal },
}

impl<'a> From<&'a Result<(), Refusal>> for StepJson<'a> {
    fn from(r: &'a Result<(), Refusal>) -> Self {
        match r {
            Ok(()) => StepJson::Ok,
            Err(refusal) => StepJson::Refused { refusal },
        }
    }
}

fn step<S: serde::Serializer>(r: &Result<(), Refusal>, s: S) -> Result<S::Ok, S::Error> {
    StepJson::from(r).serialize(s)
}

fn optional_step<S: serde::Serializer>(
    r: &Option<Result<(), Refusal>>,
    s: S,
) -> Result<S::Ok, S::Error> {
    r.as_ref().map(StepJson::from).serialize(s)
}

impl CheckReport {
    /// True when every step that ran accepted the trace.
    pub fn passed(&self) -> bool {
        self.plan.is_ok()
            && self.validation.as_ref().is_none_or(|v| v.is_ok())
            && self.golden.as_ref().is_none_or(|g| g.is_ok())
            && self.replay.as_ref().is_none_or(|r| r.is_identical())
    }
}

/// The golden comparison of outputs: the trace's fingerprints must be the
/// golden's, exactly as `diff` judges them (same mode, same digests), so a
/// trace whose routes match but whose outputs drifted fails the gate.
fn outputs_against_golden(
    golden: &RecordedGemmTrace,
    trace: &RecordedGemmTrace,
    diff: &crate::diff::TraceDiff,
) -> std::result::Result<(), Refusal> {
    // Outputs of another fingerprint mode cannot be compared: that is not
    // a pass.
    if golden.fingerprint_mode != trace.fingerprint_mode {
        let hint = if golden.outputs_observed() && trace.outputs_observed() {
            "record in the golden's mode"
        } else {
            "one trace holds no output bits (an imported profile)"
        };
        return Err(Refusal::new(
            RefusalStage::GoldenComparison,
            None,
            "fingerprint_mode",
            golden.fingerprint_mode,
            format!("{} (outputs not compared: {hint})", trace.fingerprint_mode),
        ));
    }
    let mut numeric = diff
        .differences
        .iter()
        .filter(|d| d.class == crate::diff::DiffClass::Numeric);
    let Some(first) = numeric.next() else {
        return Ok(());
    };
    let more = numeric.count();
    let found = match more {
        0 => first.change.found.clone(),
        n => format!("{} (and {n} more output differences)", first.change.found),
    };
    Err(Refusal::new(
        RefusalStage::GoldenComparison,
        first.route_index.map(|i| i as u64),
        first.change.field.clone(),
        &first.change.expected,
        found,
    ))
}

/// The golden comparison as the diff judges it: the first difference
/// refuses (naming how many more there are), none passes.
fn differences_verdict(diff: &crate::diff::TraceDiff) -> std::result::Result<(), Refusal> {
    let Some(first) = diff.differences.first() else {
        return Ok(());
    };
    let field = match &first.gemm {
        Some(g) => format!("{} ({g})", first.change.field),
        None => first.change.field.clone(),
    };
    let found = match diff.differences.len() - 1 {
        0 => first.change.found.clone(),
        n => format!("{} (and {n} more differences)", first.change.found),
    };
    Err(Refusal::new(
        RefusalStage::GoldenComparison,
        first.route_index.map(|i| i as u64),
        field,
        &first.change.expected,
        found,
    ))
}

/// What observed `trace`, when it is a step of another framework that no
/// backend here can launch: it carries an observation and every route is
/// an engine's vendor route. An observation on a trace of gemm-audit's own
/// routes changes nothing (it is validated as any other).
fn observed_elsewhere(trace: &RecordedGemmTrace) -> Option<String> {
    let o = trace.observation.as_ref()?;
    trace
        .routes
        .iter()
        .all(|r| {
            matches!(
                r.backend,
                crate::vocab::PhysicalBackend::Engine { vendor: true, .. }
            )
        })
        .then(|| o.source.clone())
}

/// What [`check_golden`] found: the check, and, where the golden differed
/// only in allowed differences, those differences (the check then passed
/// the golden by class instead of refusing the first changed field).
#[derive(Debug)]
pub struct GoldenCheck {
    /// The check.
    pub report: CheckReport,
    /// The golden's differences, all allowed; `None` when none was
    /// allowed, or no golden was given.
    pub allowed: Option<crate::diff::TraceDiff>,
}

/// `check` as the command line and the Python package run it: `trace`
/// against `golden` (if given) where the differences `allow` names pass,
/// and replayed if `replay`.
pub fn check_golden(
    backend: &Backend,
    trace: &RecordedGemmTrace,
    golden: Option<&RecordedGemmTrace>,
    allow: &[crate::diff::Allowance],
    replay: bool,
) -> Result<GoldenCheck> {
    let allowed = golden.and_then(|g| allowed_golden_differences(g, trace, allow));
    let compare_with = if allowed.is_some() { None } else { golden };
    let mut report = check(backend, trace, compare_with, replay)?;
    if allowed.is_some() {
        report.golden = Some(Ok(()));
    }
    Ok(GoldenCheck { report, allowed })
}

/// Rebuilds `trace`'s plan, validates it against `backend`'s live context,
/// compares it with `golden` if given (routes, then output fingerprints,
/// as `diff` judges them), and replays it if `replay`. Stops at the first
/// refusal: nothing refused is launched.
pub fn check(
    backend: &Backend,
    trace: &RecordedGemmTrace,
    golden: Option<&RecordedGemmTrace>,
    replay: bool,
) -> Result<CheckReport> {
    // The trace's policy mode picks vendor or custom kernels; every other
    // policy bit, and everything else in the context, is the live one's.
    let mode = trace.context.policy.mode;
    let scoped = (mode != backend.context().policy.mode)
        .then(|| backend.with_policy(backend.context().policy.with_mode(mode)));
    let backend = scoped.as_ref().unwrap_or(backend);
    let mut report = CheckReport {
        workload: trace.workload.clone(),
        launch_count: trace.launch_set.launch_count,
        plan: Ok(()),
        validation: None,
        golden: None,
        replay: None,
        observed: observed_elsewhere(trace),
        numeric: golden.map(|g| crate::diff::NumericComparison::of(g, trace)),
        summary: None,
        pairing: None,
    };
    let plan = match CapturedGemmGraphPlan::from_trace(trace) {
        Ok(p) => p,
        Err(r) => {
            report.plan = Err(r);
            return Ok(report);
        }
    };
    // An observed trace ran in another framework: nothing here can replay
    // it, so it is compared, never validated or launched.
    let valid = if report.observed.is_some() {
        false
    } else {
        // The trace's pins are adopted where this backend could choose them
        // too; its routes are then judged against the live pins.
        backend.adopt_pins(&trace.context.pins);
        let validation = plan.validate(&backend.live_context());
        let valid = validation.is_ok();
        report.validation = Some(validation);
        valid
    };
    if let Some(g) = golden {
        let diff = crate::diff::TraceDiff::between(g, trace);
        // GEMMs paired by kernel sequence have no names or shapes on one
        // side, so the plan's route-by-route comparison would refuse the
        // first of them: the diff judges them instead.
        let verdict = match &diff.pairing {
            Some(_) => differences_verdict(&diff),
            None => plan.check_against_golden_trace(g),
        }
        .and_then(|()| outputs_against_golden(g, trace, &diff));
        report.pairing = diff.pairing.clone();
        if verdict.is_err() && !diff.is_empty() {
            report.summary = Some(diff.overview());
        }
        report.golden = Some(verdict);
    }
    if replay && valid && report.golden.as_ref().is_none_or(|g| g.is_ok()) {
        report.replay = Some(capture_and_replay(backend, trace, "check")?.0);
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::CpuBackend;

    /// A rerun brings back exactly the outputs whose fingerprints differ
    /// from the expected ones (and those past the end of the list), each
    /// equal to what the eager run made.
    #[test]
    fn a_rerun_returns_only_the_outputs_that_differ() {
        let backend = Backend::new(CpuBackend::default());
        let w = Workload::builtin("m-sweep").unwrap();
        let run = eager_run(&backend, &w, &mut |_, _| {}).unwrap();
        for mode in [FingerprintMode::Strong, FingerprintMode::Fast] {
            let mut expected = run.fingerprints_in(mode);
            let same = eager_rerun(&backend, &w, &expected, mode, &mut |_, _| {}).unwrap();
            assert_eq!(same.len(), w.gemms.len());
            assert!(same.iter().all(|r| r.differing_output.is_none()));
            expected[2].sha256 = crate::digest::Digest::sha256(b"not this output");
            expected.truncate(w.gemms.len() - 1);
            let mut seen = 0;
            let rerun = eager_rerun(&backend, &w, &expected, mode, &mut |d, _| seen = d).unwrap();
            assert_eq!(seen, w.gemms.len());
            let differing: Vec<usize> = rerun
                .iter()
                .enumerate()
                .filter_map(|(i, r)| r.differing_output.as_ref().map(|_| i))
                .collect();
            assert_eq!(differing, [2, w.gemms.len() - 1]);
            for i in differing {
                assert_eq!(rerun[i].differing_output.as_ref(), Some(&run.outputs[i]));
            }
        }
    }

    /// Recording while keeping prefixes gives the same trace as keeping
    /// whole outputs, and each kept prefix is the start of the output.
    #[test]
    fn a_recording_that_keeps_prefixes_has_the_same_trace() {
        let backend = Backend::new(CpuBackend::default());
        let w = Workload::builtin("m-sweep").unwrap();
        let whole = record(&backend, &w, &mut |_, _| {}).unwrap();
        let keep = |routes: &[ResolvedGemmRoute]| (0..routes.len()).map(|i| i * 8).collect();
        let kept =
            record_keeping(&backend, &w, FingerprintMode::Strong, &keep, &mut |_, _| {}).unwrap();
        assert_eq!(kept.trace.fingerprints, whole.trace.fingerprints);
        assert_eq!(kept.trace.routes, whole.trace.routes);
        assert!(kept.replay.is_identical());
        for (i, (k, full)) in kept.outputs.iter().zip(&whole.outputs).enumerate() {
            assert_eq!(kept.output_lens[i], full.len());
            assert_eq!(k.as_slice(), &full[..(i * 8).min(full.len())]);
        }
    }
}
