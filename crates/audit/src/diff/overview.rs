//! The few lines a person reads first when two traces differ: which
//! libraries and knobs changed (once, not per route), whether any kernel
//! changed, whether any output bit changed, and how to accept it. Derived
//! from the differences alone, so every sink (text, JSON, Python) says the
//! same.

use super::groups::ordered_groups;
use super::{DiffClass, Difference, NumericComparison, TraceDiff};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// GEMM names listed before "and N more".
const FIRST: usize = 3;

/// One change of the context (a library, the driver, the device, a knob),
/// said once for every route it reaches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContextChange {
    /// What changed: a module (`engine:torch-blas`), `driver`, `device`,
    /// or a knob's field (`policy.tensor_cores`).
    pub what: String,
    /// The golden's value (for a library, only the components that changed).
    pub expected: String,
    /// The candidate's value.
    pub found: String,
    /// Routes whose identity it changed, where the differences say so.
    pub routes: Option<usize>,
}

/// The GEMMs served by another kernel or configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KernelChanges {
    /// GEMMs with a route difference (kernel, tile, split-K, geometry,
    /// vendor algorithm, graph nodes).
    pub gemms: usize,
    /// The first few, each with what changed (`qkv@b8: kernel a -> b`).
    pub first: Vec<String>,
}

/// What is known of the output bits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "bits", rename_all = "kebab-case")]
pub enum OutputBits {
    /// Both traces hold observed outputs and none of those compared
    /// differs.
    Identical {
        /// GEMM pairs whose outputs were compared.
        gemms: usize,
    },
    /// These GEMMs' outputs differ.
    Differ {
        /// How many GEMMs.
        gemms: usize,
        /// The first few by name.
        first: Vec<String>,
    },
    /// A trace holds no observed outputs (an imported profile): nothing is
    /// said about bits.
    NotObserved,
    /// The fingerprint modes differ, or no GEMM of one trace has a
    /// counterpart run on the same inputs in the other: no outputs were
    /// compared.
    NotCompared,
}

impl std::fmt::Display for OutputBits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OutputBits::Identical { gemms } => write!(f, "identical in {gemms} GEMMs"),
            OutputBits::Differ { gemms, first } => {
                write!(f, "differ in {gemms} GEMMs ({})", listed(first, *gemms))
            }
            OutputBits::NotObserved => f.write_str(
                "not observed (a trace holds no output bits: routes compared, outputs not)",
            ),
            OutputBits::NotCompared => f.write_str(
                "not compared (no GEMM pair ran on the same inputs in one fingerprint mode)",
            ),
        }
    }
}

/// The overview of a diff: what `render` prints first and the JSON
/// `summary`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DiffOverview {
    /// Libraries, driver and device that changed, each once.
    pub libraries: Vec<ContextChange>,
    /// Other context fields that changed: policy, permitted sets,
    /// revisions, pins.
    pub knobs: Vec<ContextChange>,
    /// GEMMs served by another kernel or configuration.
    pub kernels: KernelChanges,
    /// The output bits.
    pub outputs: OutputBits,
    /// Structural and policy changes of the step (GEMMs missing, added,
    /// moved or reshaped; another contract), one line each.
    pub structure: Vec<String>,
    /// The difference classes found, for `--allow`.
    pub classes: Vec<DiffClass>,
    /// How GEMMs without op identity were paired by kernel sequence, where
    /// they were (null otherwise).
    pub pairing: Option<super::SequencePairing>,
    /// Paired GEMMs launched eagerly on one side and replayed from a CUDA
    /// graph on the other: informational, never a difference or a class.
    pub launch: Option<super::LaunchChange>,
}

impl TraceDiff {
    /// The overview of these differences (see [`DiffOverview`]).
    pub fn overview(&self) -> DiffOverview {
        let (libraries, knobs) = context_changes(&self.differences);
        DiffOverview {
            libraries,
            knobs,
            kernels: kernel_changes(&self.differences),
            outputs: output_bits(self),
            structure: structure(&self.differences),
            classes: self.classes().into_iter().collect(),
            pairing: self.pairing.clone(),
            launch: self.launch,
        }
    }
}

impl DiffOverview {
    /// The headline: `libraries changed: engine:torch-blas; kernels
    /// unchanged; output bits not observed`.
    pub fn headline(&self) -> String {
        let libraries = match self.libraries.len() {
            0 => "no library changed".to_string(),
            _ => {
                let names: Vec<&str> = self.libraries.iter().map(|c| c.what.as_str()).collect();
                format!("libraries changed: {}", names.join(", "))
            }
        };
        let kernels = match self.kernels.gemms {
            0 => "kernels unchanged".to_string(),
            n => format!("kernels changed in {n} GEMMs"),
        };
        let bits = match &self.outputs {
            OutputBits::Identical { gemms } => format!("output bits identical in {gemms} GEMMs"),
            OutputBits::Differ { gemms, .. } => format!("output bits differ in {gemms} GEMMs"),
            OutputBits::NotObserved => "output bits not observed".to_string(),
            OutputBits::NotCompared => "output bits not compared".to_string(),
        };
        let mut parts = vec![libraries];
        if !self.knobs.is_empty() {
            parts.push(format!("{} knobs changed", self.knobs.len()));
        }
        if !self.structure.is_empty() {
            parts.push("the step's structure changed".into());
        }
        parts.push(kernels);
        parts.push(bits);
        parts.join("; ")
    }

    /// The overview as text lines (no trailing newline): the headline,
    /// then one line per library, knob and kind of change, then how to
    /// accept it.
    pub fn lines(&self) -> Vec<String> {
        let mut out = vec![self.headline()];
        for c in &self.libraries {
            out.push(format!("  library   {}", change_line(c)));
        }
        for c in &self.knobs {
            out.push(format!("  knob      {}", change_line(c)));
        }
        for s in &self.structure {
            out.push(format!("  structure {s}"));
        }
        out.extend(pairing_lines(self));
        for l in self.launch.iter().flat_map(super::LaunchChange::lines) {
            out.push(format!("  launch    {l}"));
        }
        out.push(match self.kernels.gemms {
            0 => "  kernels   unchanged".to_string(),
            n => format!(
                "  kernels   changed in {n} GEMMs: {}",
                listed(&self.kernels.first, n)
            ),
        });
        out.push(format!("  outputs   {}", self.outputs));
        if !self.classes.is_empty() {
            let classes: Vec<&str> = self.classes.iter().map(DiffClass::as_str).collect();
            out.push(format!(
                "  accept    if expected: --allow {} (this run), or keep the candidate as the golden: `gemm-audit review`, then `gemm-audit accept --expect DIGEST`",
                classes.join(",")
            ));
        }
        out
    }
}

/// The pairing by kernel sequence, where it applied: `  pairing   paired
/// 3 GEMMs by kernel sequence (...)`.
fn pairing_lines(o: &DiffOverview) -> impl Iterator<Item = String> + '_ {
    o.pairing
        .iter()
        .flat_map(|p| p.labelled_lines())
        .map(|l| format!("  {l}"))
}

fn change_line(c: &ContextChange) -> String {
    let routes = match c.routes {
        Some(1) => " (1 route)".to_string(),
        Some(n) => format!(" ({n} routes)"),
        None => String::new(),
    };
    format!("{}: {} -> {}{routes}", c.what, c.expected, c.found)
}

/// `a, b, c and 4 more`.
fn listed(first: &[String], total: usize) -> String {
    let mut s = first.join(", ");
    if total > first.len() {
        s.push_str(&format!(" and {} more", total - first.len()));
    }
    s
}

/// `context.module[KEY].rest` as (KEY, rest).
fn module_field(field: &str) -> Option<(&str, &str)> {
    let rest = field.strip_prefix("context.module[")?;
    let end = rest.find(']')?;
    Some((&rest[..end], rest[end + 1..].trim_start_matches('.')))
}

/// The components of a version list that changed: `torch 2.11.0, onednn
/// 3.10.2` against `torch 2.15.0, onednn 3.10.2` is (`torch 2.11.0`,
/// `torch 2.15.0`). Components are `name version` items separated by
/// commas or semicolons, and `key=value` knobs; where nothing pairs by
/// name, the whole values.
fn changed_components(expected: &str, found: &str) -> (String, String) {
    let unquote = |s: &str| s.trim().trim_matches('"').to_string();
    let (e, f) = (unquote(expected), unquote(found));
    // `name version` items split by `, ` or `; `, and `key=value` knobs
    // (a recorder's state) each an item of its own.
    let items = |s: &str| -> Vec<(String, String)> {
        s.split("; ")
            .flat_map(|part| part.split(", "))
            .flat_map(|item| {
                let knobs = item.contains('=');
                let parts: Vec<&str> = if knobs {
                    item.split(' ').collect()
                } else {
                    vec![item]
                };
                parts.into_iter().map(|item| {
                    let name = match item.split_once('=') {
                        Some((k, _)) => k,
                        None => item.rsplit_once(' ').map_or(item, |(n, _)| n),
                    };
                    (name.to_string(), item.to_string())
                })
            })
            .collect()
    };
    let (ei, fi) = (items(&e), items(&f));
    let mut old = Vec::new();
    let mut new = Vec::new();
    for (name, item) in &ei {
        match fi.iter().find(|(n, _)| n == name) {
            Some((_, other)) if other == item => {}
            Some((_, other)) => {
                old.push(item.clone());
                new.push(other.clone());
            }
            None => {
                old.push(item.clone());
                new.push("(absent)".to_string());
            }
        }
    }
    for (name, item) in &fi {
        if !ei.iter().any(|(n, _)| n == name) {
            old.push("(absent)".to_string());
            new.push(item.clone());
        }
    }
    if old.is_empty() {
        return (e, f);
    }
    (old.join(", "), new.join(", "))
}

/// How many routes each (field, expected, found) change reaches, counted
/// once over the differences.
struct RouteCounts<'a>(HashMap<(&'a str, &'a str, &'a str), usize>);

impl<'a> RouteCounts<'a> {
    fn of(ds: &'a [Difference]) -> Self {
        let mut counts = HashMap::new();
        for d in ds.iter().filter(|d| d.gemm.is_some()) {
            let key = (
                d.change.field.as_str(),
                d.change.expected.as_str(),
                d.change.found.as_str(),
            );
            *counts.entry(key).or_insert(0) += 1;
        }
        RouteCounts(counts)
    }

    /// Routes whose difference in `field` goes from `expected` to `found`.
    fn get(&self, field: &str, expected: &str, found: &str) -> usize {
        self.0.get(&(field, expected, found)).copied().unwrap_or(0)
    }
}

/// The context's changes, split into libraries (modules, driver, device,
/// vendor library versions) and knobs (everything else in the context).
fn context_changes(ds: &[Difference]) -> (Vec<ContextChange>, Vec<ContextChange>) {
    let context: Vec<&Difference> = ds
        .iter()
        .filter(|d| d.gemm.is_none() && d.change.field.starts_with("context."))
        .collect();
    let counts = RouteCounts::of(ds);
    let mut libraries = Vec::new();
    let mut knobs = Vec::new();
    // Pins are one knob, however many families changed.
    let mut pins: Vec<&str> = Vec::new();
    // Each module once: its version where that changed, else its digest.
    let mut modules: BTreeMap<&str, Vec<&Difference>> = BTreeMap::new();
    for d in &context {
        match module_field(&d.change.field) {
            Some((key, _)) => modules.entry(key).or_default().push(d),
            None if d.change.field.starts_with("context.pin[") => {
                let family = super::groups::owner(&d.change.field);
                if pins.last() != Some(&family) {
                    pins.push(family);
                }
            }
            None => {
                let field = d.change.field.trim_start_matches("context.");
                let (what, library) = match field {
                    "device.driver" => ("driver".to_string(), true),
                    "device.class" => ("device".to_string(), true),
                    f if f.starts_with("device.") => (f.to_string(), true),
                    f => (f.to_string(), false),
                };
                let c = ContextChange {
                    what,
                    expected: d.change.expected.clone(),
                    found: d.change.found.clone(),
                    routes: Some(counts.get(field, &d.change.expected, &d.change.found))
                        .filter(|n| *n > 0),
                };
                if library { &mut libraries } else { &mut knobs }.push(c);
            }
        }
    }
    for (key, fields) in modules {
        let find = |rest: &str| {
            fields
                .iter()
                .find(|d| module_field(&d.change.field) == Some((key, rest)))
        };
        // Routes served by the module carry its digest as their artifact.
        let routes = find("digest")
            .map(|d| counts.get("artifact_digest", &d.change.expected, &d.change.found))
            .filter(|n| *n > 0);
        let (expected, found) = match (find("compiler.name"), find("compiler.version"), find("")) {
            (_, _, Some(whole)) => (whole.change.expected.clone(), whole.change.found.clone()),
            (name, Some(v), None) => {
                let (e, f) = changed_components(&v.change.expected, &v.change.found);
                match name {
                    Some(n) => (
                        format!("{} {e}", n.change.expected.trim_matches('"')),
                        format!("{} {f}", n.change.found.trim_matches('"')),
                    ),
                    None => (e, f),
                }
            }
            (Some(n), None, None) => (n.change.expected.clone(), n.change.found.clone()),
            (None, None, None) => {
                let what: Vec<&str> = fields
                    .iter()
                    .filter_map(|d| module_field(&d.change.field).map(|(_, r)| r))
                    .collect();
                (
                    "as recorded".to_string(),
                    format!("changed ({})", what.join(", ")),
                )
            }
        };
        libraries.push(ContextChange {
            what: key.to_string(),
            expected,
            found,
            routes,
        });
    }
    // A vendor library version seen only on the routes (no module says it).
    if libraries.is_empty() {
        let mut seen: Vec<(&str, &str)> = Vec::new();
        for d in ds
            .iter()
            .filter(|d| d.gemm.is_some() && d.change.field == "vendor.library_version")
        {
            let pair = (d.change.expected.as_str(), d.change.found.as_str());
            if !seen.contains(&pair) {
                seen.push(pair);
                let (expected, found) = changed_components(pair.0, pair.1);
                libraries.push(ContextChange {
                    what: "vendor library".into(),
                    expected,
                    found,
                    routes: Some(counts.get("vendor.library_version", pair.0, pair.1)),
                });
            }
        }
    }
    if !pins.is_empty() {
        let names: Vec<String> = pins
            .iter()
            .take(FIRST)
            .map(|p| {
                p.trim_start_matches("context.pin[")
                    .trim_end_matches(']')
                    .to_string()
            })
            .collect();
        knobs.push(ContextChange {
            what: "pins".into(),
            expected: "as pinned".into(),
            found: format!(
                "changed in {} families ({})",
                pins.len(),
                listed(&names, pins.len())
            ),
            routes: None,
        });
    }
    (libraries, knobs)
}

/// GEMMs with a route difference, in the order found.
fn kernel_changes(ds: &[Difference]) -> KernelChanges {
    let gemms = ordered_groups(
        ds.iter()
            .filter(|d| d.class == DiffClass::Route && d.gemm.is_some()),
        |d| d.gemm.as_deref().unwrap_or_default(),
    );
    let first = gemms
        .iter()
        .take(FIRST)
        .map(
            |(g, v)| match v.iter().find(|d| d.change.field == "kernel_symbol") {
                Some(k) => {
                    let short = |v: &str| {
                        crate::render::kernel_name::kernel_display_name(v.trim_matches('"'))
                    };
                    format!(
                        "{g}: {} -> {}",
                        short(&k.change.expected),
                        short(&k.change.found)
                    )
                }
                None => {
                    let fields: Vec<&str> = v.iter().map(|d| d.change.field.as_str()).collect();
                    format!("{g}: {}", crate::render::shorten(&fields.join(", "), 60))
                }
            },
        )
        .collect();
    KernelChanges {
        gemms: gemms.len(),
        first,
    }
}

fn output_bits(d: &TraceDiff) -> OutputBits {
    match d.numeric {
        NumericComparison::NotObserved => OutputBits::NotObserved,
        NumericComparison::ModesDiffer => OutputBits::NotCompared,
        NumericComparison::Compared => {
            let names: Vec<&str> = ordered_groups(
                d.differences
                    .iter()
                    .filter(|x| x.class == DiffClass::Numeric),
                |x| x.gemm.as_deref().unwrap_or("trace"),
            )
            .into_iter()
            .map(|(name, _)| name)
            .collect();
            match names.len() {
                0 if d.outputs_compared == 0 => OutputBits::NotCompared,
                0 => OutputBits::Identical {
                    gemms: d.outputs_compared,
                },
                n => OutputBits::Differ {
                    gemms: n,
                    first: names.iter().take(FIRST).map(|s| s.to_string()).collect(),
                },
            }
        }
    }
}

/// Structural and policy changes, one line per field: per-GEMM fields
/// counted over GEMMs, step-level ones with their values.
fn structure(ds: &[Difference]) -> Vec<String> {
    let mut per_field: Vec<(String, Vec<&str>)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::new();
    for d in ds
        .iter()
        .filter(|d| matches!(d.class, DiffClass::Structural | DiffClass::Policy))
        .filter(|d| !d.change.field.starts_with("context."))
    {
        match d.gemm.as_deref() {
            Some(g) => {
                let key = match (d.change.field.as_str(), d.change.expected.as_str()) {
                    ("gemm", "present") => "GEMMs missing".to_string(),
                    ("gemm", _) => "GEMMs added".to_string(),
                    ("launch_order", _) => "GEMMs moved in launch order".to_string(),
                    (f, _) => format!("{f} changed in"),
                };
                match index.get(&key) {
                    Some(&i) => per_field[i].1.push(g),
                    None => {
                        index.insert(key.clone(), per_field.len());
                        per_field.push((key, vec![g]));
                    }
                }
            }
            None => out.push(format!(
                "{}: {} -> {}",
                d.change.field,
                crate::render::shorten(&d.change.expected, 60),
                crate::render::shorten(&d.change.found, 60)
            )),
        }
    }
    for (key, mut gemms) in per_field {
        gemms.dedup();
        let first: Vec<String> = gemms.iter().take(FIRST).map(|s| s.to_string()).collect();
        let n = gemms.len();
        let line = match key.strip_suffix(" changed in") {
            Some(field) => format!("{field} changed in {n} GEMMs: {}", listed(&first, n)),
            None => format!("{n} {key}: {}", listed(&first, n)),
        };
        out.push(line);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::FieldChange;

    fn diff(differences: Vec<Difference>) -> TraceDiff {
        TraceDiff {
            differences,
            numeric: NumericComparison::Compared,
            outputs_compared: 1,
            pairing: None,
            launch: None,
        }
    }

    /// However many pin families and routes changed, the overview stays a
    /// few lines: pins are one knob, a change shared by routes one line.
    #[test]
    fn many_pins_and_routes_stay_a_few_lines() {
        let mut ds = Vec::new();
        for f in 0..5000 {
            ds.push(Difference {
                class: DiffClass::Route,
                route_index: None,
                gemm: None,
                change: FieldChange::text(format!("context.pin[fam{f}].algorithm_id"), "66", "67"),
            });
        }
        for r in 0..5000 {
            ds.push(Difference {
                class: DiffClass::Identity,
                route_index: Some(r),
                gemm: Some(format!("g{r}")),
                change: FieldChange::text("device.driver", "\"a\"", "\"b\""),
            });
        }
        ds.push(Difference {
            class: DiffClass::Identity,
            route_index: None,
            gemm: None,
            change: FieldChange::text("context.device.driver", "\"a\"", "\"b\""),
        });
        let o = diff(ds).overview();
        assert_eq!(o.knobs.len(), 1, "{:?}", o.knobs);
        assert_eq!(o.knobs[0].what, "pins");
        assert_eq!(
            o.knobs[0].found,
            "changed in 5000 families (fam0, fam1, fam2 and 4997 more)"
        );
        assert_eq!(o.libraries.len(), 1);
        assert_eq!(o.libraries[0].what, "driver");
        assert_eq!(o.libraries[0].routes, Some(5000));
        assert!(o.lines().len() <= 6, "{:#?}", o.lines());
    }
}
