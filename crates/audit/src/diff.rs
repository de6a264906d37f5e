//! Comparing two traces: launch set, context, per-route field changes and
//! fingerprint changes, each sorted into a class that `--allow` can pass.

use crate::digest::{FieldChange, field_changes};
use crate::trace::RecordedGemmTrace;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

/// What kind of difference a change is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DiffClass {
    /// Driver, toolkit, library, compiler, device or artifact identity changed.
    Identity,
    /// The kernel, tile, split, launch geometry or vendor algorithm changed.
    Route,
    /// Output fingerprints changed.
    Numeric,
    /// Launch count, order, GEMM set, shapes or the workload changed.
    Structural,
    /// The policy or a numeric contract changed.
    Policy,
}

impl DiffClass {
    /// Every class.
    pub const ALL: [DiffClass; 5] = [
        DiffClass::Identity,
        DiffClass::Route,
        DiffClass::Numeric,
        DiffClass::Structural,
        DiffClass::Policy,
    ];

    /// The class's stable name, as `--allow` takes it and JSON writes it.
    pub fn as_str(&self) -> &'static str {
        match self {
            DiffClass::Identity => "identity",
            DiffClass::Route => "route",
            DiffClass::Numeric => "numeric",
            DiffClass::Structural => "structural",
            DiffClass::Policy => "policy",
        }
    }

    /// Bit of this class in `diff`'s exit status (see the CLI's `--help`).
    pub fn exit_bit(&self) -> u8 {
        match self {
            DiffClass::Identity => 1,
            DiffClass::Route => 2,
            DiffClass::Numeric => 4,
            DiffClass::Structural => 8,
            DiffClass::Policy => 16,
        }
    }

    /// The class of a changed field, by its tag.
    pub fn of_field(tag: &str) -> DiffClass {
        let prefix = tag.split('.').next().unwrap_or(tag);
        if tag == "contract.splits" {
            return DiffClass::Route;
        }
        match prefix {
            "policy"
            | "permitted_backends"
            | "permitted_contracts"
            | "contract"
            | "operand_conversion" => DiffClass::Policy,
            "compiler"
            | "device"
            | "artifact_digest"
            | "module"
            | "modules"
            | "compilation_target"
            | "device_capabilities"
            | "revisions" => DiffClass::Identity,
            "vendor" if tag == "vendor.library_version" => DiffClass::Identity,
            "gemm" | "op" | "dtype" | "shape" | "strides" => DiffClass::Structural,
            _ => DiffClass::Route,
        }
    }
}

/// The differences of two contexts, paired by name: every field outside
/// the modules by its tag, and the modules by their kind (the n-th module
/// of a kind with the n-th of the same kind), so contexts with different
/// module sets never compare one module's fields with another's.
fn context_changes(
    golden: &crate::identity::GemmRouteIdentity,
    candidate: &crate::identity::GemmRouteIdentity,
) -> Vec<(DiffClass, FieldChange)> {
    type Typed = (&'static str, String, serde_json::Value);
    let outside = |c: &crate::identity::GemmRouteIdentity| -> Vec<Typed> {
        crate::digest::typed_field_list(c)
            .into_iter()
            .filter(|(t, _, _)| !t.starts_with("module.") && *t != "modules.count")
            .collect()
    };
    let mut out = Vec::new();
    let (a, b) = (outside(golden), outside(candidate));
    for (tag, av, aj) in &a {
        let bv = b.iter().find(|(t, _, _)| t == tag);
        if bv.map(|(_, v, _)| v) != Some(av) {
            let (found, fj) = match bv {
                Some((_, v, j)) => (v.clone(), j.clone()),
                None => ("(absent)".to_string(), serde_json::Value::Null),
            };
            out.push((
                DiffClass::of_field(tag),
                FieldChange {
                    field: format!("context.{tag}"),
                    expected: av.clone(),
                    found,
                    typed: Some(Box::new([aj.clone(), fj])),
                },
            ));
        }
    }
    fn keyed(
        c: &crate::identity::GemmRouteIdentity,
    ) -> Vec<(String, &crate::identity::ModuleIdentity)> {
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        c.modules
            .iter()
            .map(|m| {
                let kind = m.kind.to_string();
                let n = seen.entry(kind.clone()).or_default();
                let key = if *n == 0 {
                    kind.clone()
                } else {
                    format!("{kind}#{n}")
                };
                *n += 1;
                (key, m)
            })
            .collect()
    }
    let (ga, cb) = (keyed(golden), keyed(candidate));
    for (key, gm) in &ga {
        match cb.iter().find(|(k, _)| k == key) {
            Some((_, cm)) => {
                for c in field_changes(*gm, *cm) {
                    let class = DiffClass::of_field(&c.field);
                    let field = c.field.strip_prefix("module.").unwrap_or(&c.field);
                    let field = format!("context.module[{key}].{field}");
                    out.push((class, FieldChange { field, ..c }));
                }
            }
            None => out.push((
                DiffClass::Identity,
                FieldChange::text(
                    format!("context.module[{key}]"),
                    format!("{} {}", gm.backend, gm.digest.short()),
                    "(absent)",
                ),
            )),
        }
    }
    for (key, cm) in &cb {
        if !ga.iter().any(|(k, _)| k == key) {
            out.push((
                DiffClass::Identity,
                FieldChange::text(
                    format!("context.module[{key}]"),
                    "(absent)",
                    format!("{} {}", cm.backend, cm.digest.short()),
                ),
            ));
        }
    }
    out
}

impl fmt::Display for DiffClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What `--allow` lets through: a whole class of differences, or one
/// field wherever it appears (`device.driver` matches the trace's
/// `context.device.driver` and every route's `device.driver`; a trailing
/// `*` matches a prefix, e.g. `context.module[cublaslt].*`). "A driver
/// upgrade only" is `--allow device.driver`; `--allow identity` would also
/// pass a rebuilt kernel or another device class.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Allowance {
    /// Every difference of this class.
    Class(DiffClass),
    /// Differences of this field (see the type's documentation).
    Field(String),
}

/// The fields that carry output bits: only an allowance naming one whole
/// passes its differences.
pub const OUTPUT_FIELDS: [&str; 1] = ["output_fingerprint"];

/// The fields a difference names outside the routes and the context.
const TRACE_FIELDS: [&str; 8] = [
    "workload",
    "workload_digest",
    "fingerprint_mode",
    "launch_count",
    "gemm",
    "launch_order",
    "input_seed",
    "output_fingerprint",
];

impl Allowance {
    /// A class name (`identity`, `route`, ...) or a field tag (letters,
    /// digits and `_.-[]`, optionally ending in `*`).
    pub fn parse(s: &str) -> Result<Allowance, String> {
        if let Some(c) = DiffClass::ALL.iter().find(|c| c.as_str() == s) {
            return Ok(Allowance::Class(*c));
        }
        let body = s.strip_suffix('*').unwrap_or(s);
        let prefix = s.ends_with('*');
        let field_char = |c: char| c.is_ascii_alphanumeric() || "_.-[]#".contains(c);
        // A field is one a difference can name: a route field, anything
        // under the trace's context or its graph, or a trace-level field.
        let known = |tag: &str| {
            let matches = |t: &str| if prefix { t.starts_with(tag) } else { t == tag };
            ["context.", "graph.", "launch_set."]
                .iter()
                .any(|p| tag.starts_with(p))
                || TRACE_FIELDS.iter().any(|t| matches(t))
                || crate::route::ResolvedGemmRoute::field_tags()
                    .iter()
                    .any(|t| matches(t))
        };
        if body.is_empty() || !body.chars().all(field_char) || !known(body) {
            let classes: Vec<&str> = DiffClass::ALL.iter().map(|c| c.as_str()).collect();
            return Err(format!(
                "{s:?} is neither a difference class ({}) nor a field a difference names (e.g. device.driver, kernel_symbol, context.module[cublaslt].*)",
                classes.join(", ")
            ));
        }
        Ok(Allowance::Field(s.to_string()))
    }

    /// Whether this allowance lets `d` through. Output bits
    /// ([`OUTPUT_FIELDS`]) pass only an allowance that names their field
    /// whole (or the `numeric` class): no pattern (`o*`, `out*`) waives
    /// them by accident.
    pub fn allows(&self, d: &Difference) -> bool {
        match self {
            Allowance::Class(c) => d.class == *c,
            Allowance::Field(f) => {
                // The field itself or any tail of it that starts at a dot:
                // `device.driver` is also the context's `context.device.driver`.
                let field = d.change.field.as_str();
                let tails = || {
                    std::iter::once(field)
                        .chain(field.match_indices('.').map(|(i, _)| &field[i + 1..]))
                };
                match f.strip_suffix('*') {
                    Some(_) if tails().any(|t| OUTPUT_FIELDS.contains(&t)) => false,
                    Some(prefix) => tails().any(|t| t.starts_with(prefix)),
                    None => tails().any(|t| t == f),
                }
            }
        }
    }
}

/// An allowance checked in with its reason and an expiry date: a team
/// says once, in review, why a difference is accepted and until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiver {
    /// What it lets through.
    pub allow: Allowance,
    /// Why (never empty).
    pub reason: String,
    /// The last day it applies, `YYYY-MM-DD` (UTC); none: no expiry.
    pub expires: Option<String>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct WaiverFile {
    waiver: Vec<WaiverEntry>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct WaiverEntry {
    field: Option<String>,
    class: Option<String>,
    reason: String,
    expires: Option<String>,
}

impl Waiver {
    /// The waivers of a file's parsed contents (`[[waiver]]` entries with
    /// `field` or `class`, `reason` and optionally `expires`), or what is
    /// wrong with the first bad entry.
    fn from_file(file: WaiverFile) -> Result<Vec<Waiver>, String> {
        file.waiver
            .into_iter()
            .enumerate()
            .map(|(i, e)| {
                let at = |what: String| format!("waiver {}: {what}", i + 1);
                let allow = match (e.field, e.class) {
                    (Some(f), None) => Allowance::parse(&f).map_err(at)?,
                    (None, Some(c)) => match Allowance::parse(&c).map_err(at)? {
                        a @ Allowance::Class(_) => a,
                        Allowance::Field(_) => return Err(at(format!("{c:?} is not a class"))),
                    },
                    _ => return Err(at("needs exactly one of `field` and `class`".into())),
                };
                if e.reason.trim().is_empty() {
                    return Err(at("needs a reason".into()));
                }
                if let Some(d) = &e.expires
                    && !is_date(d)
                {
                    return Err(at(format!("expires {d:?} is not a date YYYY-MM-DD")));
                }
                Ok(Waiver {
                    allow,
                    reason: e.reason,
                    expires: e.expires,
                })
            })
            .collect()
    }

    /// Waivers from JSON (`{"waiver": [{"field": ..., "reason": ..., "expires": ...}]}`).
    pub fn parse_json(text: &str) -> Result<Vec<Waiver>, String> {
        let file: WaiverFile = serde_json::from_str(text).map_err(|e| e.to_string())?;
        Waiver::from_file(file)
    }

    /// Waivers from TOML (`[[waiver]]` tables).
    #[cfg(feature = "toml")]
    pub fn parse_toml(text: &str) -> Result<Vec<Waiver>, String> {
        let file: WaiverFile = toml::from_str(text).map_err(|e| e.to_string())?;
        Waiver::from_file(file)
    }

    /// Whether it still applies on `today` (`YYYY-MM-DD`).
    pub fn applies_on(&self, today: &str) -> bool {
        self.expires.as_deref().is_none_or(|last| today <= last)
    }
}

/// `YYYY-MM-DD` with a month 01-12 and a day 01-31.
fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && digits(0..4)
        && digits(5..7)
        && digits(8..10)
        && (1..=12).contains(&s[5..7].parse::<u32>().unwrap_or(0))
        && (1..=31).contains(&s[8..10].parse::<u32>().unwrap_or(0))
}

impl fmt::Display for Allowance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Allowance::Class(c) => c.fmt(f),
            Allowance::Field(s) => f.write_str(s),
        }
    }
}

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

/// Whether two traces' outputs were compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NumericComparison {
    /// Both traces hold output fingerprints of one mode: compared.
    Compared,
    /// A trace holds no output bits (an imported profile): the routes
    /// were compared, the outputs could not be. Never a pass of the bits.
    NotObserved,
    /// The traces' fingerprints are of different modes: not compared
    /// (a structural difference says so).
    ModesDiffer,
}

impl fmt::Display for NumericComparison {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NumericComparison::Compared => "compared",
            NumericComparison::NotObserved => "not observed",
            NumericComparison::ModesDiffer => "not compared (fingerprint modes differ)",
        })
    }
}

impl NumericComparison {
    /// How `golden`'s and `candidate`'s outputs compare, by their modes.
    pub fn of(golden: &RecordedGemmTrace, candidate: &RecordedGemmTrace) -> NumericComparison {
        if !golden.outputs_observed() || !candidate.outputs_observed() {
            NumericComparison::NotObserved
        } else if golden.fingerprint_mode != candidate.fingerprint_mode {
            NumericComparison::ModesDiffer
        } else {
            NumericComparison::Compared
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
}

impl TraceDiff {
    /// Compares `golden` with `candidate`. Volatile metadata is ignored.
    /// Routes are paired by GEMM name when names are unique, else by index.
    pub fn between(golden: &RecordedGemmTrace, candidate: &RecordedGemmTrace) -> TraceDiff {
        let mut out = Differences(Vec::new());
        let comparable = out.trace_fields(golden, candidate);
        let pairs = pair_routes(golden, candidate);
        out.routes(golden, candidate, &pairs, comparable);
        out.graphs(golden, candidate, &pairs);
        // Equal routes and fingerprints can still hide a launch-set digest
        // difference only if the trace is inconsistent; name it if so.
        if out.0.is_empty() && golden.launch_set != candidate.launch_set {
            out.push(
                DiffClass::Structural,
                None,
                None,
                "launch_set.ordered_digest",
                golden.launch_set.ordered_digest.to_string(),
                candidate.launch_set.ordered_digest.to_string(),
            );
        }
        TraceDiff {
            differences: out.0,
            numeric: NumericComparison::of(golden, candidate),
        }
    }

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

    /// A reviewable text rendering, one difference a line.
    pub fn render(&self) -> String {
        let not_observed = (self.numeric == NumericComparison::NotObserved).then_some(
            "numeric: not observed (a profile holds no output bits: routes compared, outputs not)\n",
        );
        if self.differences.is_empty() {
            return match not_observed {
                Some(n) => format!("no route differences\n{n}"),
                None => "no differences\n".into(),
            };
        }
        let mut s = String::new();
        for d in &self.differences {
            s.push_str(&format!(
                "[{}] {}: {}: {} -> {}\n",
                d.class,
                d.location(),
                d.change.field,
                d.change.expected,
                d.change.found
            ));
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
        s.push_str(not_observed.unwrap_or_default());
        s
    }
}

/// Whether one numeric contract gave the same bits on two devices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Portability {
    /// The contract, e.g. `scalar-fma` or `split-k-fixed/4`.
    pub contract: String,
    /// GEMMs run under this contract in both traces.
    pub pairs: usize,
    /// Of those, how many gave equal fingerprints.
    pub equal: usize,
}

impl Portability {
    /// True when every pair agreed.
    pub fn portable(&self) -> bool {
        self.equal == self.pairs
    }
}

/// For GEMMs (paired by name) that ran under the same numeric contract in
/// both traces, whether their fingerprints agree: the contracts that are
/// device-portable and the ones that are not.
pub fn portability(golden: &RecordedGemmTrace, candidate: &RecordedGemmTrace) -> Vec<Portability> {
    let pairs = pair_routes(golden, candidate);
    let mut by: BTreeMap<String, Portability> = Default::default();
    for (g, c) in pairs.matched {
        let (gr, cr) = (&golden.routes[g], &candidate.routes[c]);
        if gr.contract != cr.contract {
            continue;
        }
        let (Some(gf), Some(cf)) = (golden.fingerprints.get(g), candidate.fingerprints.get(c))
        else {
            continue;
        };
        if gf.input_seed != cf.input_seed
            || gr.shape != cr.shape
            || gr.dtype != cr.dtype
            || gr.op != cr.op
        {
            continue;
        }
        let key = gr.contract.to_string();
        let e = by.entry(key.clone()).or_insert(Portability {
            contract: key,
            pairs: 0,
            equal: 0,
        });
        e.pairs += 1;
        e.equal += (gf.sha256 == cf.sha256) as usize;
    }
    by.into_values().collect()
}

/// Renders a portability report.
pub fn render_portability(p: &[Portability]) -> String {
    if p.is_empty() {
        return "portability: no GEMM ran under the same contract in both traces\n".into();
    }
    let mut s = String::from("portability by numeric contract:\n");
    for x in p {
        s.push_str(&format!(
            "  {:<28} {} ({}/{} GEMMs bit-identical across the two traces)\n",
            x.contract,
            if x.portable() {
                "portable"
            } else {
                "NOT portable"
            },
            x.equal,
            x.pairs
        ));
    }
    s
}

/// Element-level comparison of two outputs of `dtype`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct UlpStats {
    /// Elements compared.
    pub elements: u64,
    /// Elements whose bits differ.
    pub differing: u64,
    /// Largest distance in units in the last place (NaNs count as u64::MAX).
    pub max_ulp: u64,
}

impl UlpStats {
    /// The worse of two comparisons: the larger count and distance.
    pub fn worst(self, other: UlpStats) -> UlpStats {
        UlpStats {
            elements: self.elements.max(other.elements),
            differing: self.differing.max(other.differing),
            max_ulp: self.max_ulp.max(other.max_ulp),
        }
    }
}

impl fmt::Display for UlpStats {
    /// `3 of 4096 elements differ, max 2 ulp` (`max NaN or size` when a
    /// side is NaN or the sizes differ).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of {} elements differ, max ",
            self.differing, self.elements
        )?;
        if self.max_ulp == u64::MAX {
            f.write_str("NaN or size")
        } else {
            write!(f, "{} ulp", self.max_ulp)
        }
    }
}

/// Compares two outputs element by element. None when sizes differ or are
/// not a whole number of elements.
pub fn ulp_stats(dtype: crate::vocab::DType, a: &[u8], b: &[u8]) -> Option<UlpStats> {
    use crate::vocab::DType;
    let size = crate::kernels::element_size(dtype);
    if !dtype.is_runnable() || a.len() != b.len() || !a.len().is_multiple_of(size) {
        return None;
    }
    // Map float bits onto a line where adjacent floats are adjacent integers.
    fn ordered(bits: u64, sign: u64) -> i128 {
        if bits & sign != 0 {
            -((bits & !sign) as i128)
        } else {
            bits as i128
        }
    }
    let mut st = UlpStats {
        elements: (a.len() / size) as u64,
        differing: 0,
        max_ulp: 0,
    };
    for (x, y) in a.chunks_exact(size).zip(b.chunks_exact(size)) {
        if x == y {
            continue;
        }
        st.differing += 1;
        let (bx, by, sign, nan) = match dtype {
            DType::F32 => {
                let (u, v) = (
                    u32::from_le_bytes(x.try_into().ok()?),
                    u32::from_le_bytes(y.try_into().ok()?),
                );
                (
                    u as u64,
                    v as u64,
                    1u64 << 31,
                    f32::from_bits(u).is_nan() || f32::from_bits(v).is_nan(),
                )
            }
            DType::F16 | DType::Bf16 => {
                let (u, v) = (
                    u16::from_le_bytes(x.try_into().ok()?),
                    u16::from_le_bytes(y.try_into().ok()?),
                );
                let is_nan = |h: u16| match dtype {
                    DType::F16 => half::f16::from_bits(h).is_nan(),
                    _ => half::bf16::from_bits(h).is_nan(),
                };
                (u as u64, v as u64, 1u64 << 15, is_nan(u) || is_nan(v))
            }
            _ => return None,
        };
        let d = if nan {
            u64::MAX
        } else {
            (ordered(bx, sign) - ordered(by, sign)).unsigned_abs() as u64
        };
        st.max_ulp = st.max_ulp.max(d);
    }
    Some(st)
}

impl TraceDiff {
    /// Adds element counts and ULP distances to numeric differences whose
    /// outputs `load(side, gemm)` can supply (side 0 = golden, 1 = candidate).
    pub fn annotate_outputs(
        &mut self,
        golden: &RecordedGemmTrace,
        load: impl Fn(usize, &str) -> Option<Vec<u8>>,
    ) {
        for d in &mut self.differences {
            if d.class != DiffClass::Numeric {
                continue;
            }
            let (Some(i), Some(g)) = (d.route_index, d.gemm.clone()) else {
                continue;
            };
            let Some(route) = golden.routes.get(i) else {
                continue;
            };
            if let (Some(a), Some(b)) = (load(0, &g), load(1, &g))
                && let Some(st) = ulp_stats(route.dtype, &a, &b)
            {
                d.change.found.push_str(&format!(" ({st})"));
            }
        }
    }
}

/// The file an output dump of `gemm` is written to under a directory.
pub fn output_file_name(gemm: &str) -> String {
    let safe: String = gemm
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.@".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    // A name that had to change gets 8 hex digits of its SHA-256, so
    // distinct GEMMs (`x/y`, `x y`, `x:y`) never share a file; `.` and `..`
    // are never file names of their own.
    if safe == gemm && safe != "." && safe != ".." {
        format!("{safe}.bin")
    } else {
        let digest = crate::Digest::sha256(gemm.as_bytes()).to_string();
        format!("{safe}-{}.bin", &digest[..8])
    }
}

struct Pairs {
    matched: Vec<(usize, usize)>,
    missing: Vec<usize>,
    added: Vec<usize>,
}

/// The differences of one comparison, in the order they are found.
struct Differences(Vec<Difference>);

/// A change of a count or index, typed as numbers in JSON.
fn typed_number(field: &str, expected: u64, found: u64) -> FieldChange {
    FieldChange {
        typed: Some(Box::new([expected.into(), found.into()])),
        ..FieldChange::text(field, expected.to_string(), found.to_string())
    }
}

impl Differences {
    fn push_change(
        &mut self,
        class: DiffClass,
        route_index: Option<usize>,
        gemm: Option<&str>,
        change: FieldChange,
    ) {
        self.0.push(Difference {
            class,
            route_index,
            gemm: gemm.map(str::to_string),
            change,
        })
    }

    fn push(
        &mut self,
        class: DiffClass,
        route_index: Option<usize>,
        gemm: Option<&str>,
        field: &str,
        expected: String,
        found: String,
    ) {
        self.0.push(Difference {
            class,
            route_index,
            gemm: gemm.map(str::to_string),
            change: FieldChange::text(field, expected, found),
        })
    }

    /// The trace-level fields: workload, context, fingerprint mode and
    /// launch count. Returns whether the outputs are comparable (the two
    /// fingerprint modes agree).
    fn trace_fields(&mut self, golden: &RecordedGemmTrace, candidate: &RecordedGemmTrace) -> bool {
        if golden.workload != candidate.workload {
            self.push(
                DiffClass::Structural,
                None,
                None,
                "workload",
                golden.workload.clone(),
                candidate.workload.clone(),
            );
        }
        if golden.workload_digest != candidate.workload_digest {
            self.push(
                DiffClass::Structural,
                None,
                None,
                "workload_digest",
                golden.workload_digest.to_string(),
                candidate.workload_digest.to_string(),
            );
        }
        for (class, change) in context_changes(&golden.context, &candidate.context) {
            self.push_change(class, None, None, change);
        }
        // Fingerprints of different modes never compare equal: say so once
        // instead of reporting every launch as numerically different.
        // Placeholders (nothing observed) are never compared.
        let same_mode = golden.fingerprint_mode == candidate.fingerprint_mode;
        let comparable = same_mode && golden.outputs_observed();
        if !same_mode {
            let hint = if golden.outputs_observed() && candidate.outputs_observed() {
                format!(
                    "record both in one mode, e.g. --fingerprint {}",
                    golden.fingerprint_mode
                )
            } else {
                "one trace holds no output bits (an imported profile)".to_string()
            };
            self.push(
                DiffClass::Structural,
                None,
                None,
                "fingerprint_mode",
                golden.fingerprint_mode.to_string(),
                format!(
                    "{} (outputs not compared: {hint})",
                    candidate.fingerprint_mode
                ),
            );
        }
        if golden.launch_set.launch_count != candidate.launch_set.launch_count {
            let (g, c) = (
                golden.launch_set.launch_count,
                candidate.launch_set.launch_count,
            );
            self.push_change(
                DiffClass::Structural,
                None,
                None,
                typed_number("launch_count", g, c),
            );
        }
        comparable
    }

    /// Missing, added and reordered GEMMs, then each paired route's fields
    /// and output fingerprint.
    fn routes(
        &mut self,
        golden: &RecordedGemmTrace,
        candidate: &RecordedGemmTrace,
        pairs: &Pairs,
        comparable: bool,
    ) {
        for p in &pairs.missing {
            self.push(
                DiffClass::Structural,
                Some(*p),
                Some(&golden.routes[*p].gemm),
                "gemm",
                "present".into(),
                "missing".into(),
            );
        }
        for p in &pairs.added {
            let r = &candidate.routes[*p];
            self.push(
                DiffClass::Structural,
                None,
                Some(&r.gemm),
                "gemm",
                "absent".into(),
                format!("added at index {p}"),
            );
        }
        for &(g, c) in &pairs.matched {
            let gr = &golden.routes[g];
            let cr = &candidate.routes[c];
            if g != c {
                let change = typed_number("launch_order", g as u64, c as u64);
                self.push_change(DiffClass::Structural, Some(g), Some(&gr.gemm), change);
            }
            for ch in field_changes(gr, cr) {
                self.push_change(DiffClass::of_field(&ch.field), Some(g), Some(&gr.gemm), ch);
            }
            let (gf, cf) = (golden.fingerprints.get(g), candidate.fingerprints.get(c));
            if let (Some(gf), Some(cf)) = (gf, cf) {
                if gf.input_seed != cf.input_seed {
                    let change = typed_number("input_seed", gf.input_seed, cf.input_seed);
                    self.push_change(DiffClass::Structural, Some(g), Some(&gr.gemm), change);
                } else if comparable && (gf.sha256 != cf.sha256 || gf.bytes != cf.bytes) {
                    self.push(
                        DiffClass::Numeric,
                        Some(g),
                        Some(&gr.gemm),
                        "output_fingerprint",
                        gf.sha256.to_string(),
                        cf.sha256.to_string(),
                    );
                }
            }
        }
    }

    /// The captured graphs: the step's own nodes in order, then each paired
    /// GEMM's nodes; another kernel, split or node sequence is route drift
    /// (order and set changes are structural, in `routes`).
    fn graphs(&mut self, golden: &RecordedGemmTrace, candidate: &RecordedGemmTrace, pairs: &Pairs) {
        use crate::physical::PhysicalNode;
        if !golden.physical.is_empty() && !candidate.physical.is_empty() {
            // Each trace's nodes grouped by the route they are bound to, once:
            // pairing costs nodes + routes, not their product.
            type ByRoute = HashMap<Option<u64>, Vec<PhysicalNode>>;
            let group = |t: &RecordedGemmTrace| -> ByRoute {
                let mut by: ByRoute = HashMap::new();
                for n in &t.physical {
                    by.entry(n.route_index).or_default().push(PhysicalNode {
                        route_index: None,
                        ..n.clone()
                    });
                }
                by
            };
            let (gby, cby) = (group(golden), group(candidate));
            let nodes_of = |by: &ByRoute, i: Option<usize>| -> Vec<PhysicalNode> {
                by.get(&i.map(|i| i as u64)).cloned().unwrap_or_default()
            };
            let render = |n: Option<&PhysicalNode>| {
                n.map_or_else(|| "(none)".to_string(), PhysicalNode::summary)
            };
            // The step's own nodes (auxiliary kernels and memory nodes,
            // bound to no route), in order: a swapped or replaced auxiliary
            // kernel is drift too.
            let (gu, cu) = (nodes_of(&gby, None), nodes_of(&cby, None));
            for k in 0..gu.len().max(cu.len()) {
                if gu.get(k) != cu.get(k) {
                    self.push(
                        DiffClass::Route,
                        None,
                        None,
                        &format!("graph.unbound_node[{k}]"),
                        render(gu.get(k)),
                        render(cu.get(k)),
                    );
                }
            }
            for &(g, c) in &pairs.matched {
                let (gn, cn) = (nodes_of(&gby, Some(g)), nodes_of(&cby, Some(c)));
                for k in 0..gn.len().max(cn.len()) {
                    if gn.get(k) != cn.get(k) {
                        self.push(
                            DiffClass::Route,
                            Some(g),
                            Some(&golden.routes[g].gemm),
                            &format!("graph.node[{k}]"),
                            render(gn.get(k)),
                            render(cn.get(k)),
                        );
                    }
                }
            }
        }
        if golden.physical.is_empty() != candidate.physical.is_empty() {
            let count = |t: &RecordedGemmTrace| match t.physical.len() {
                0 => "no captured graph".to_string(),
                n => format!("{n} graph nodes"),
            };
            self.push(
                DiffClass::Route,
                None,
                None,
                "graph.nodes",
                count(golden),
                count(candidate),
            );
        }
    }
}

fn pair_routes(golden: &RecordedGemmTrace, candidate: &RecordedGemmTrace) -> Pairs {
    let unique = |t: &RecordedGemmTrace| {
        let mut seen = std::collections::HashSet::new();
        t.routes.iter().all(|r| seen.insert(r.gemm.as_str()))
    };
    if unique(golden) && unique(candidate) {
        let index: HashMap<&str, usize> = candidate
            .routes
            .iter()
            .enumerate()
            .map(|(i, r)| (r.gemm.as_str(), i))
            .collect();
        let mut matched = Vec::new();
        let mut missing = Vec::new();
        for (g, r) in golden.routes.iter().enumerate() {
            match index.get(r.gemm.as_str()) {
                Some(&c) => matched.push((g, c)),
                None => missing.push(g),
            }
        }
        let golden_names: std::collections::HashSet<&str> =
            golden.routes.iter().map(|r| r.gemm.as_str()).collect();
        let added = candidate
            .routes
            .iter()
            .enumerate()
            .filter(|(_, r)| !golden_names.contains(r.gemm.as_str()))
            .map(|(i, _)| i)
            .collect();
        Pairs {
            matched,
            missing,
            added,
        }
    } else {
        let n = golden.routes.len().min(candidate.routes.len());
        Pairs {
            matched: (0..n).map(|i| (i, i)).collect(),
            missing: (n..golden.routes.len()).collect(),
            added: (n..candidate.routes.len()).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit;

    #[test]
    fn ulp_distances() {
        use crate::vocab::DType;
        let a: Vec<u8> = [1.0f32, 2.0, -1.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let b: Vec<u8> = [1.0f32, f32::from_bits(2.0f32.to_bits() + 3), -1.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let st = ulp_stats(DType::F32, &a, &b).unwrap();
        assert_eq!((st.elements, st.differing, st.max_ulp), (3, 1, 3));
        // Across zero: +0 and -smallest are one ulp apart on each side of zero.
        let p: Vec<u8> = f32::from_bits(1).to_le_bytes().to_vec();
        let n: Vec<u8> = (-f32::from_bits(1)).to_le_bytes().to_vec();
        assert_eq!(ulp_stats(DType::F32, &p, &n).unwrap().max_ulp, 2);
        let h1 = half::bf16::from_f32(1.0).to_le_bytes();
        let h2 = half::bf16::from_bits(half::bf16::from_f32(1.0).to_bits() + 1).to_le_bytes();
        assert_eq!(ulp_stats(DType::Bf16, &h1, &h2).unwrap().max_ulp, 1);
        assert_eq!(st.to_string(), "1 of 3 elements differ, max 3 ulp");
        let worse = UlpStats {
            elements: 3,
            differing: 2,
            max_ulp: u64::MAX,
        };
        assert_eq!(st.worst(worse), worse);
        assert_eq!(worse.to_string(), "2 of 3 elements differ, max NaN or size");
        assert!(ulp_stats(DType::F32, &a, &a[..4]).is_none());
    }

    #[test]
    fn identical_traces_have_no_differences() {
        let t = testkit::sample_trace(5);
        let mut other = t.clone();
        other.volatile.insert("host".into(), "elsewhere".into());
        assert!(TraceDiff::between(&t, &other).is_empty());
    }

    #[test]
    fn waivers_need_a_reason_a_date_and_one_target() {
        let ok = r#"{"waiver": [
            {"field": "device.driver", "reason": "driver 580 rollout", "expires": "2027-01-31"},
            {"class": "identity", "reason": "new cards"}
        ]}"#;
        let w = Waiver::parse_json(ok).unwrap();
        assert_eq!(w[0].allow, Allowance::Field("device.driver".into()));
        assert_eq!(w[1].allow, Allowance::Class(DiffClass::Identity));
        assert!(w[0].applies_on("2027-01-31") && !w[0].applies_on("2027-02-01"));
        assert!(w[1].applies_on("2999-12-31"));
        for bad in [
            r#"{"waiver": [{"field": "device.driver", "reason": " "}]}"#,
            r#"{"waiver": [{"field": "device.driver", "reason": "r", "expires": "2027-13-01"}]}"#,
            r#"{"waiver": [{"field": "device.driver", "class": "identity", "reason": "r"}]}"#,
            r#"{"waiver": [{"reason": "r"}]}"#,
            r#"{"waiver": [{"field": "nosuch.field", "reason": "r"}]}"#,
            r#"{"waiver": [{"class": "device.driver", "reason": "r"}]}"#,
            r#"{"waiver": [{"field": "device.driver", "reason": "r", "until": "x"}]}"#,
        ] {
            assert!(Waiver::parse_json(bad).is_err(), "{bad}");
        }
    }

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

    #[test]
    fn classes_are_assigned() {
        let t = testkit::sample_trace(5);
        let rebuild = |routes: Vec<_>, fps| {
            RecordedGemmTrace::new(
                &t.workload,
                t.workload_digest,
                t.context.clone(),
                routes,
                fps,
                t.volatile.clone(),
            )
            .unwrap()
        };
        let mut routes = t.routes.clone();
        routes[1].kernel_symbol.push('x');
        let d = TraceDiff::between(&t, &rebuild(routes, t.fingerprints.clone()));
        assert_eq!(
            d.classes().into_iter().collect::<Vec<_>>(),
            vec![DiffClass::Route]
        );
        assert_eq!(d.differences[0].route_index, Some(1));

        let mut routes = t.routes.clone();
        routes[2].device.driver = "590.1".into();
        let d = TraceDiff::between(&t, &rebuild(routes, t.fingerprints.clone()));
        assert_eq!(
            d.classes().into_iter().collect::<Vec<_>>(),
            vec![DiffClass::Identity]
        );

        let mut fps = t.fingerprints.clone();
        fps[0].sha256.0[0] ^= 1;
        let d = TraceDiff::between(&t, &rebuild(t.routes.clone(), fps));
        assert_eq!(
            d.classes().into_iter().collect::<Vec<_>>(),
            vec![DiffClass::Numeric]
        );
        assert!(d.disallowed(&[DiffClass::Numeric]).is_empty());

        let mut routes = t.routes.clone();
        routes.swap(0, 3);
        let mut fps = t.fingerprints.clone();
        fps.swap(0, 3);
        let d = TraceDiff::between(&t, &rebuild(routes, fps));
        assert_eq!(
            d.classes().into_iter().collect::<Vec<_>>(),
            vec![DiffClass::Structural]
        );

        let mut routes = t.routes.clone();
        routes.pop();
        let mut fps = t.fingerprints.clone();
        fps.pop();
        let d = TraceDiff::between(&t, &rebuild(routes, fps));
        assert!(d.render().contains("missing"));

        let mut routes = t.routes.clone();
        routes[0].contract.kind = crate::vocab::ContractKind::Tf32;
        let d = TraceDiff::between(&t, &rebuild(routes, t.fingerprints.clone()));
        assert_eq!(
            d.classes().into_iter().collect::<Vec<_>>(),
            vec![DiffClass::Policy]
        );
    }
}
