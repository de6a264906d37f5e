//! The audit against goldens: the golden-drift and golden-coverage rows,
//! and accepting the candidates a run kept.

use super::{AuditReport, Contract, Verdict};
use crate::Result;
use crate::digest::Digest;
use std::collections::BTreeMap;

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
            self.row(Contract::GoldenDrift, &t.workload, verdict, detail.clone());
            self.case(
                Contract::GoldenDrift,
                &t.workload,
                &t.workload,
                verdict,
                detail,
            );
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
        let detail = match d.numeric {
            crate::diff::NumericComparison::Compared => {
                format!("identical to {}{note}", path.display())
            }
            _ => format!(
                "routes identical to {} (output bits not observed){note}",
                path.display()
            ),
        };
        (Verdict::Pass, detail)
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
/// A batch-invariance group as a trace shows it: backend and numeric
/// contract (what the route promises), op, dtype, k, n and input seed. The
/// route is part of the key, so a route edit moves the GEMMs it touches
/// out of their group, and the golden's group says it lost them.
type CoverageKey = (
    String,
    String,
    crate::vocab::GemmOp,
    crate::vocab::DType,
    u64,
    u64,
    u64,
);

/// The batch-invariance groups of `t` (those with at least two m): per m,
/// how many GEMMs of the group ran at it (routes of one problem family
/// share a group, so a count, not a set, notices one of them leaving).
fn batch_coverage(t: &crate::RecordedGemmTrace) -> BTreeMap<CoverageKey, BTreeMap<u64, usize>> {
    let mut groups: BTreeMap<CoverageKey, BTreeMap<u64, usize>> = BTreeMap::new();
    for (r, f) in t.routes.iter().zip(&t.fingerprints) {
        let key = (
            r.backend.to_string(),
            r.contract.to_string(),
            r.op,
            r.dtype,
            r.shape.k,
            r.shape.n,
            f.input_seed,
        );
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
                if c.contract == Contract::GoldenDrift && c.verdict == Verdict::Fail {
                    c.detail = format!("{detail}; {}", c.detail);
                }
            }
            return Ok(Vec::new());
        }
        let mut accepted = Vec::new();
        for (i, pending, golden) in self.kept_candidates(dir) {
            let t = &self.traces[i];
            let drifted = self.checks.iter().any(|c| {
                c.contract == Contract::GoldenDrift
                    && c.subject == t.workload
                    && c.verdict == Verdict::Fail
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
            for c in &mut self.checks {
                if c.contract.is_golden() && c.subject == t.workload {
                    c.verdict = Verdict::Pass;
                    c.detail = detail.clone();
                }
            }
            for c in &mut self.cases {
                if c.contract.is_golden() && c.workload == t.workload {
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
                let (backend, contract, op, dtype, k, n, _) = key;
                (!missing.is_empty()).then(|| {
                    format!("{backend} {contract} {op} {dtype} k={k} n={n} at m={missing:?}")
                })
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
        self.row(
            Contract::GoldenCoverage,
            &run.workload,
            verdict,
            detail.clone(),
        );
        self.case(
            Contract::GoldenCoverage,
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

    /// The golden-drift verdict (the audit's table, JSON, JUnit and HTML
    /// rows) of a run whose golden holds no observed outputs passes on
    /// routes and says the bits were not observed; with observed outputs
    /// it says identical.
    #[test]
    fn an_unobserved_golden_is_never_called_identical() {
        let mut t = crate::testkit::sample_trace(3);
        let dir = std::path::Path::new("g");
        let path = dir.join("w.gat");
        let verdict = |t: &crate::RecordedGemmTrace| {
            let d = crate::diff::TraceDiff::between(t, t);
            golden_verdict(dir, &path, t, &d, &[], false, &|_| String::new())
        };
        let (v, detail) = verdict(&t);
        assert_eq!(v, Verdict::Pass);
        assert!(detail.starts_with("identical to"), "{detail}");
        t.fingerprint_mode = crate::FingerprintMode::NotObserved;
        for f in &mut t.fingerprints {
            *f = crate::OutputFingerprint::not_observed(f.bytes);
        }
        let (v, detail) = verdict(&t);
        assert_eq!(v, Verdict::Pass);
        assert!(detail.contains("output bits not observed"), "{detail}");
        assert!(!detail.starts_with("identical"), "{detail}");
    }

    /// A run that lost a batch-invariance group its golden had (one GEMM's
    /// dtype changed) fails `golden-coverage`, naming the group and m.
    #[test]
    fn a_route_edit_loses_coverage_of_its_group() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../traces/cpu-x86_64/m-sweep.gat");
        let golden = crate::RecordedGemmTrace::read(&path).unwrap();
        // The same problem family, one m served under another contract.
        let mut run = golden.clone();
        let i = run
            .routes
            .iter()
            .position(|x| {
                x.shape.m == 8 && x.contract.kind == crate::vocab::ContractKind::ScalarFma
            })
            .unwrap();
        run.routes[i].contract.kind = crate::vocab::ContractKind::SplitKFixed;
        run.routes[i].contract.splits = 4;
        let mut r = AuditReport::new("cpu", 2);
        r.coverage_against(&golden, &run);
        let c = &r.checks[0];
        assert_eq!(c.verdict, Verdict::Fail, "{}", c.detail);
        assert!(
            c.detail.contains("scalar-fma") && c.detail.contains("m=[8]"),
            "{}",
            c.detail
        );
    }

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
            (c.contract, c.verdict),
            (Contract::GoldenCoverage, Verdict::Fail)
        );
        assert!(
            c.detail.contains("nn f32 k=1024 n=256 at m=[8]"),
            "{}",
            c.detail
        );
        assert_eq!(r.cases.len(), 1);
    }
}
