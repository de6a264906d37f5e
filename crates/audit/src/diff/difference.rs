//! The differences found between two traces, and their renderings.

use super::{Allowance, DiffClass, LaunchChange, NumericComparison};
use crate::digest::FieldChange;
use serde::Serialize;
use std::collections::BTreeSet;

/// One difference between two traces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Difference {
    /// What kind of change it is (decides whether `--allow` passes it).
    pub class: DiffClass,
    /// Route index in the golden trace, for per-route differences.
    pub route_index: Option<usize>,
    /// The GEMM's name, for per-route differences.
    pub gemm: Option<String>,
    /// The field that changed: its tag, the golden's value and the
    /// candidate's.
    #[serde(flatten)]
    pub change: FieldChange,
}

impl Difference {
    /// Where the difference is: `route 3 (qkv@b8)`, `(gemm)` or `trace`.
    pub fn location(&self) -> String {
        match (&self.route_index, &self.gemm) {
            (Some(i), Some(g)) => format!("route {i} ({g})"),
            (None, Some(g)) => format!("({g})"),
            _ => "trace".into(),
        }
    }
}

/// All differences between a golden and a candidate trace.
#[derive(Debug, Clone, Serialize)]
pub struct TraceDiff {
    /// Every difference found, in the order compared: trace-level fields
    /// first, then the routes.
    pub differences: Vec<Difference>,
    /// Whether the outputs were compared at all.
    pub numeric: NumericComparison,
    /// How many GEMM pairs' outputs were compared (0 when `numeric` is
    /// not `Compared`): "identical" is said only of bits compared.
    pub outputs_compared: usize,
    /// How GEMMs without op identity (a graph replay's) were paired by
    /// kernel sequence, where they were ([`super::SequencePairing`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pairing: Option<super::SequencePairing>,
    /// Paired GEMMs launched eagerly on one side and replayed from a CUDA
    /// graph on the other (`None` when none were): informational, never a
    /// difference.
    pub launch: Option<LaunchChange>,
}

impl TraceDiff {
    /// The classes found.
    pub fn classes(&self) -> BTreeSet<DiffClass> {
        self.differences.iter().map(|d| d.class).collect()
    }

    /// The classes found that `allow` does not pass.
    pub fn disallowed(&self, allow: &[DiffClass]) -> BTreeSet<DiffClass> {
        self.classes()
            .into_iter()
            .filter(|c| !allow.contains(c))
            .collect()
    }

    /// The differences no allowance in `allow` lets through.
    pub fn not_allowed<'a>(
        &'a self,
        allow: &'a [Allowance],
    ) -> impl Iterator<Item = &'a Difference> + 'a {
        self.differences
            .iter()
            .filter(move |d| !allow.iter().any(|a| a.allows(d)))
    }

    /// The classes of the differences `allow` does not let through.
    pub fn disallowed_classes(&self, allow: &[Allowance]) -> BTreeSet<DiffClass> {
        self.not_allowed(allow).map(|d| d.class).collect()
    }

    /// True when the traces agree in everything compared.
    pub fn is_empty(&self) -> bool {
        self.differences.is_empty()
    }

    /// What an empty diff may claim: `no differences` only when the
    /// outputs were compared; otherwise that the routes agree and the bits
    /// were not observed (or not compared). Every sink says this, never
    /// "identical", for traces without observed outputs.
    pub fn agreement(&self) -> &'static str {
        match self.numeric {
            NumericComparison::Compared => "no differences",
            NumericComparison::NotObserved => {
                "no route differences; output bits not observed (a trace holds no output bits)"
            }
            NumericComparison::ModesDiffer => {
                "no route differences; output bits not compared (fingerprint modes differ)"
            }
        }
    }

    /// What the pairing by kernel sequence says, where GEMMs were paired
    /// so (no lines otherwise): every sink prints these beside its
    /// verdict, an empty diff's too.
    pub fn pairing_lines(&self) -> Vec<String> {
        self.pairing
            .as_ref()
            .map(super::SequencePairing::lines)
            .unwrap_or_default()
    }

    /// One line for people: what changed per GEMM, the kernel and contract
    /// before and after where they changed and whether the output changed
    /// (`down@b8: split-k-fixed/4 -> scalar-fma, output changed`), the
    /// first few GEMMs and how many more; trace-level changes as fields.
    pub fn summary(&self) -> String {
        const SHOWN: usize = 3;
        let mut groups: Vec<(String, Vec<&Difference>)> = Vec::new();
        for d in &self.differences {
            let key = d.gemm.clone().unwrap_or_else(|| "trace".into());
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, v)) => v.push(d),
                None => groups.push((key, vec![d])),
            }
        }
        let mut parts: Vec<String> = groups
            .iter()
            .take(SHOWN)
            .map(|(gemm, ds)| {
                let mut what: Vec<String> = Vec::new();
                const NAMED: [&str; 3] = ["contract.kind", "contract.splits", "kernel_symbol"];
                for field in NAMED {
                    if let Some(d) = ds.iter().find(|d| d.change.field == field) {
                        let value =
                            |v: &str| crate::render::shorten(v.trim_matches('"'), 40).into_owned();
                        what.push(format!(
                            "{} -> {}",
                            value(&d.change.expected),
                            value(&d.change.found)
                        ));
                    }
                }
                if ds.iter().any(|d| d.class == DiffClass::Numeric) {
                    what.push("output changed".into());
                }
                let others: Vec<&str> = ds
                    .iter()
                    .filter(|d| d.class != DiffClass::Numeric)
                    .map(|d| d.change.field.as_str())
                    .filter(|f| !NAMED.contains(f))
                    .collect();
                match others.len() {
                    0 => {}
                    n if n <= 3 => what.push(others.join(", ")),
                    n => what.push(format!(
                        "{}, and {} more fields",
                        others[..3].join(", "),
                        n - 3
                    )),
                }
                format!("{gemm}: {}", what.join(", "))
            })
            .collect();
        if groups.len() > SHOWN {
            parts.push(format!("and {} more", groups.len() - SHOWN));
        }
        parts.join("; ")
    }

    /// A reviewable text rendering: the overview first ([`super::DiffOverview`]:
    /// libraries, knobs, kernels, output bits, how to accept), then every
    /// difference, grouped: a change shared by many routes is one group
    /// naming how many, a module's or pin's fields one group.
    pub fn render(&self) -> String {
        if self.differences.is_empty() {
            let mut s = format!("{}\n", self.agreement());
            for line in self.pairing.iter().flat_map(|p| p.labelled_lines()) {
                s.push_str(&format!("  {line}\n"));
            }
            for line in self.launch.iter().flat_map(LaunchChange::lines) {
                s.push_str(&format!("launch: {line}\n"));
            }
            return s;
        }
        let mut s = String::new();
        for line in self.overview().lines() {
            s.push_str(&line);
            s.push('\n');
        }
        s.push('\n');
        for group in self.groups() {
            s.push_str(&group);
        }
        let counts: Vec<String> = DiffClass::ALL
            .iter()
            .map(|c| (c, self.differences.iter().filter(|d| d.class == *c).count()))
            .filter(|(_, n)| *n > 0)
            .map(|(c, n)| format!("{n} {c}"))
            .collect();
        s.push_str(&format!(
            "{} differences: {}\n",
            self.differences.len(),
            counts.join(", ")
        ));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit;

    /// The one-line summary names each changed GEMM with its kernel change
    /// and whether its output changed.
    #[test]
    fn the_summary_says_what_changed_per_gemm() {
        let t = testkit::sample_trace(5);
        let mut c = t.clone();
        c.routes[1].kernel_symbol = "other_kernel".into();
        c.fingerprints[1].sha256.0[0] ^= 1;
        c.fingerprints[3].sha256.0[0] ^= 1;
        c.launch_set = crate::build_resolved_gemm_launch_set(&c.routes).unwrap();
        let d = TraceDiff::between(&t, &c);
        let s = d.summary();
        let g1 = &t.routes[1].gemm;
        let g3 = &t.routes[3].gemm;
        assert!(
            s.contains(&format!(
                "{g1}: {} -> other_kernel, output changed",
                t.routes[1].kernel_symbol
            )),
            "{s}"
        );
        assert!(s.contains(&format!("{g3}: output changed")), "{s}");
        assert!(!s.contains('"'), "{s}");
    }
}
