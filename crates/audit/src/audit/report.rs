//! The audit's result: the verdict table, the per-GEMM cases, the
//! batch-invariance matrices and the timings.

use super::Contract;
use crate::diff::UlpStats;
use crate::kernels::TimingClock;
use serde::Serialize;
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
    pub contract: Contract,
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
    pub contract: Contract,
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
            .filter(|c| !c.contract.is_golden())
            .map(|c| c.contract.to_string())
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// True when no check failed.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.verdict != Verdict::Fail)
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

impl AuditReport {
    pub(super) fn row(
        &mut self,
        contract: Contract,
        subject: impl Into<String>,
        verdict: Verdict,
        detail: impl Into<String>,
    ) {
        self.checks.push(Check {
            contract,
            subject: subject.into(),
            verdict,
            detail: detail.into(),
        });
    }

    pub(super) fn case(
        &mut self,
        contract: Contract,
        workload: &str,
        gemm: &str,
        verdict: Verdict,
        detail: impl Into<String>,
    ) {
        self.cases.push(Case {
            contract,
            workload: workload.into(),
            gemm: gemm.into(),
            verdict,
            detail: detail.into(),
        });
    }
}
