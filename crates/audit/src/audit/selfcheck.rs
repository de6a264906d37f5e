//! The audit checking itself: the planted nondeterministic control must be
//! caught and refused, and every tampering of a route or of the policy must
//! be refused before launch.

use super::*;

/// The nondeterministic control must drift (detected within the attempts),
/// and the live policy must refuse to replay it.
pub(super) fn control_checks(
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
        contract: Contract::NondeterminismDetected,
        subject: format!(
            "{} ({})",
            w.name,
            RouteChoice::Kernel(KernelFamily::SplitKAtomic(16))
        ),
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
        contract: Contract::PolicyRefusesControl,
        subject: w.name.clone(),
        verdict,
        detail,
    };
    for c in [drift, policy] {
        report.case(
            c.contract,
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
pub(super) fn policy_mutation_check(
    report: &mut AuditReport,
    backend: &Backend,
    trace: &crate::RecordedGemmTrace,
) -> Result<()> {
    use crate::policy::{F32Policy, HalfPolicy, PolicyMode};
    const C: Contract = Contract::PolicyMutationRefusal;
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

/// Every named mutation kind, and a change of every route field of one
/// route of each kind the trace holds (custom, vendor, vendor-invariant),
/// on a real trace: each must be refused before launch, and every
/// policy-visible field change by `guard` alone (replay validation, no
/// golden). `golden` is recorded apart from `trace` (its routes resolved
/// again), so the golden comparison judges the trace, not itself; the
/// untouched trace must pass both, or every refusal would say nothing.
pub(crate) fn mutation_check(
    report: &mut AuditReport,
    live: &crate::GemmRouteIdentity,
    trace: &crate::RecordedGemmTrace,
    golden: &crate::RecordedGemmTrace,
    guard: Guard<'_>,
) {
    let n = trace.routes.len();
    let mut mutations = Mutation::kinds(0, n.saturating_sub(1));
    // One route of each kind: each kind's policy-visible fields must be
    // refused by the guard alone.
    let mut targets: Vec<(usize, RouteKind)> = Vec::new();
    for (i, r) in trace.routes.iter().enumerate() {
        let kind = RouteKind::of(r);
        if !targets.iter().any(|(_, k)| *k == kind) {
            targets.push((i, kind));
        }
    }
    for (i, _) in &targets {
        mutations.extend(
            route_field_tags()
                .into_iter()
                .map(|t| Mutation::Field(*i, t)),
        );
    }
    let untouched = exercise_against(trace, golden, live, trace.routes.clone(), guard);
    if let Some(r) = untouched.validation.as_ref().or(untouched.golden.as_ref()) {
        report.row(
            Contract::MutationRefusal,
            trace.workload.clone(),
            Verdict::Fail,
            format!(
                "the untouched trace is refused, so no refusal of a change means anything: {r}"
            ),
        );
        return;
    }
    let mut accepted = Vec::new();
    let mut guard_missed = Vec::new();
    let (mut tried, mut at_construction, mut at_validation, mut at_golden) = (0, 0, 0, 0);
    let mut policy_visible = 0;
    for m in &mutations {
        let mut routes = trace.routes.clone();
        if !m.apply(&mut routes) || routes == trace.routes {
            continue;
        }
        tried += 1;
        let o = exercise_against(trace, golden, live, routes, guard);
        at_construction += o.construction.is_some() as usize;
        at_validation += o.validation.is_some() as usize;
        at_golden += o.golden.is_some() as usize;
        let refused = o.refused_before_launch();
        if !refused {
            accepted.push(m.name());
        }
        if let Mutation::Field(i, tag) = m
            && let Some((_, kind)) = targets.iter().find(|(t, _)| t == i)
            && crate::route::classify(tag).is_some_and(|c| c.on(*kind).is_policy())
        {
            policy_visible += 1;
            if o.validation.is_none() {
                guard_missed.push(m.name());
            }
        }
        let (v, d) = if refused {
            (
                Verdict::Pass,
                format!("refused before launch: {}", o.first_refusal()),
            )
        } else {
            (Verdict::Fail, "accepted".to_string())
        };
        report.case(Contract::MutationRefusal, &trace.workload, &m.name(), v, d);
    }
    let kinds: Vec<&str> = targets.iter().map(|(_, k)| k.name()).collect();
    let (verdict, detail) = if !accepted.is_empty() {
        (Verdict::Fail, format!("accepted: {}", accepted.join(", ")))
    } else if !guard_missed.is_empty() {
        (
            Verdict::Fail,
            format!(
                "policy-visible changes left to the golden (replay validation alone let them through): {}",
                guard_missed.join(", ")
            ),
        )
    } else {
        (
            Verdict::Pass,
            format!(
                "{tried}/{tried} mutations refused before launch (plan construction {at_construction}, re-digested: validation {at_validation}, golden {at_golden}); the guard alone refused {policy_visible}/{policy_visible} policy-visible field changes of {} routes",
                kinds.join(", ")
            ),
        )
    };
    report.row(
        Contract::MutationRefusal,
        trace.workload.clone(),
        verdict,
        detail,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Refusal;
    use crate::backend::cpu::CpuBackend;

    /// A recorded CPU trace, a golden resolved apart from it, and the live
    /// context.
    fn recorded() -> (Backend, crate::RecordedGemmTrace, crate::RecordedGemmTrace) {
        let backend = Backend::new(CpuBackend::default());
        let w = Workload::builtin("transformer-block").unwrap();
        let trace = recorder::record(&backend, &w, &mut |_, _| {})
            .unwrap()
            .trace;
        let golden = independent_golden(&backend, &w, &trace).unwrap();
        (backend, trace, golden)
    }

    fn row(report: &AuditReport) -> &Check {
        report
            .checks
            .iter()
            .find(|c| c.contract == Contract::MutationRefusal)
            .expect("a mutation-refusal row")
    }

    /// The real guard: every tampering refused, every policy-visible
    /// change by the guard alone.
    #[test]
    fn the_row_passes_with_the_guard() {
        let (backend, trace, golden) = recorded();
        let mut report = AuditReport::new("cpu", 2);
        let live = backend.live_context();
        mutation_check(
            &mut report,
            &live,
            &trace,
            &golden,
            &CapturedGemmGraphPlan::validate,
        );
        let r = row(&report);
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.detail);
        assert!(
            r.detail
                .contains("policy-visible field changes of custom routes"),
            "{}",
            r.detail
        );
    }

    /// A guard with one check removed (the output-ownership rule: its
    /// refusals are dropped) fails the row, naming the field the guard no
    /// longer refuses: the row judges the guard, not the golden.
    #[test]
    fn the_row_fails_when_a_guard_check_is_removed() {
        let (backend, trace, golden) = recorded();
        let live = backend.live_context();
        let weakened = |plan: &CapturedGemmGraphPlan, live: &crate::GemmRouteIdentity| {
            plan.validate(live).or_else(|r: Refusal| {
                if r.to_string().contains("output_ownership") {
                    Ok(())
                } else {
                    Err(r)
                }
            })
        };
        let mut report = AuditReport::new("cpu", 2);
        mutation_check(&mut report, &live, &trace, &golden, &weakened);
        let r = row(&report);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.detail);
        assert!(r.detail.contains("output_ownership"), "{}", r.detail);
    }

    /// A workload recorded under a policy of its own (cublas-fast here) is
    /// tampered with and judged under that policy's live context, not the
    /// backend's default: otherwise its untouched trace is refused and the
    /// row fails for the audit's own mistake.
    #[test]
    fn a_workload_under_its_own_policy_is_judged_under_it() {
        let backend = Backend::new(CpuBackend::default());
        let mut w = Workload::builtin("transformer-block").unwrap();
        w.name = "transformer-block-fast".into();
        w.policy = Some(crate::policy::PolicyMode::CublasFast);
        let opts = AuditOptions {
            workloads: vec![w],
            runs: 2,
            control_attempts: 4,
            ..AuditOptions::default()
        };
        let report = run_audit(&backend, &opts, &mut NoProgress).unwrap();
        let r = row(&report);
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.detail);
    }

    /// A golden that is not the trace's (another workload's routes) makes
    /// the untouched trace fail the golden comparison: the row fails
    /// instead of counting refusals that would refuse anything.
    #[test]
    fn the_row_fails_when_the_untouched_trace_is_refused() {
        let (backend, trace, _) = recorded();
        let other = Workload::builtin("m-sweep").unwrap();
        let other = recorder::record(&backend, &other, &mut |_, _| {})
            .unwrap()
            .trace;
        let mut report = AuditReport::new("cpu", 2);
        let live = backend.live_context();
        mutation_check(
            &mut report,
            &live,
            &trace,
            &other,
            &CapturedGemmGraphPlan::validate,
        );
        let r = row(&report);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.detail);
        assert!(
            r.detail.contains("untouched trace is refused"),
            "{}",
            r.detail
        );
    }
}
