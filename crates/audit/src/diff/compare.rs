//! How two traces are compared: trace-level fields, the context, the
//! routes paired by name and the captured graphs.

use super::sequence::{self, SequencePairing};
use super::{DiffClass, Difference, NumericComparison, TraceDiff};
use crate::digest::{FieldChange, field_changes};
use crate::trace::RecordedGemmTrace;
use std::collections::{BTreeMap, HashMap};

impl TraceDiff {
    /// Compares `golden` with `candidate`. Volatile metadata is ignored.
    /// Routes are paired by GEMM name when names are unique, else by index.
    pub fn between(golden: &RecordedGemmTrace, candidate: &RecordedGemmTrace) -> TraceDiff {
        let mut out = Differences(Vec::new());
        let mut pairs = pair_routes(golden, candidate);
        let comparable = out.trace_fields(golden, candidate, &mut pairs.sequence);
        let compared = out.routes(golden, candidate, &mut pairs, comparable);
        out.graphs(golden, candidate, &pairs);
        // Equal routes and fingerprints can still hide a launch-set digest
        // difference only if the trace is inconsistent; name it if so (a
        // launch set of GEMMs paired by kernel sequence frames the names
        // and shapes one side lacks).
        if out.0.is_empty() && pairs.sequence.is_none() && golden.launch_set != candidate.launch_set
        {
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
            outputs_compared: compared,
            launch: super::LaunchChange::of(golden, candidate, &pairs),
            pairing: pairs.sequence,
        }
    }
}

/// The differences of two contexts, paired by name: every field outside
/// the modules and pins by its tag, the modules by their kind (the n-th
/// module of a kind with the n-th of the same kind), and the pins by their
/// family, so contexts with different module or pin sets never compare one
/// module's or pin's fields with another's.
fn context_changes(
    golden: &crate::identity::GemmRouteIdentity,
    candidate: &crate::identity::GemmRouteIdentity,
) -> Vec<(DiffClass, FieldChange)> {
    type Typed = (&'static str, String, serde_json::Value);
    let outside = |c: &crate::identity::GemmRouteIdentity| -> Vec<Typed> {
        // The environment only: pins are paired by family below, never
        // framed into one list (a context may hold 65,536 of them).
        crate::digest::typed_field_list(&c.environment())
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
    out.extend(pin_changes(&golden.pins, &candidate.pins));
    out
}

/// The differences of two contexts' pins, paired by family both ways
/// ([`crate::pin::changes_by_family`]): a configuration that changed names
/// its field, a family pinned on one side only is absent on the other, and
/// a family pinned twice on either side is reported as such. Route class:
/// a pin says which configuration runs.
fn pin_changes(
    golden: &[crate::pin::VendorPin],
    candidate: &[crate::pin::VendorPin],
) -> Vec<(DiffClass, FieldChange)> {
    crate::pin::changes_by_family(golden, candidate)
        .into_iter()
        .map(|(family, c)| {
            let field = match c.field.as_str() {
                "" => format!("context.pin[{family}]"),
                field => format!("context.pin[{family}].{field}"),
            };
            (DiffClass::Route, FieldChange { field, ..c })
        })
        .collect()
}

pub(super) struct Pairs {
    /// Pairs by name (or by index where names repeat), then by kernel
    /// sequence (the last `by_sequence` of them).
    pub(super) matched: Vec<(usize, usize)>,
    /// How many of `matched`, at its end, were paired by kernel sequence.
    by_sequence: usize,
    missing: Vec<usize>,
    added: Vec<usize>,
    /// What the pairing by kernel sequence found, where it applied.
    sequence: Option<SequencePairing>,
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
    /// fingerprint modes agree). Where GEMMs were paired by kernel
    /// sequence (`sequence`), what follows from one side lacking GEMM
    /// names and shapes is no difference: the workload digest (it frames
    /// them), the launch count (the pairing counts GEMMs and replays) and
    /// modules that differ only in the symbols they declare (one per op
    /// name), which `sequence` then says.
    fn trace_fields(
        &mut self,
        golden: &RecordedGemmTrace,
        candidate: &RecordedGemmTrace,
        sequence: &mut Option<SequencePairing>,
    ) -> bool {
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
        if golden.workload_digest != candidate.workload_digest && sequence.is_none() {
            self.push(
                DiffClass::Structural,
                None,
                None,
                "workload_digest",
                golden.workload_digest.to_string(),
                candidate.workload_digest.to_string(),
            );
        }
        let mut context = context_changes(&golden.context, &candidate.context);
        if let Some(p) = sequence.as_mut()
            && sequence::only_declarations_differ(&context)
        {
            p.declarations = Some(format!(
                "declarations differ only by op names: {} is a {}",
                p.side, p.source
            ));
            context.clear();
        }
        for (class, change) in context {
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
        if golden.launch_set.launch_count != candidate.launch_set.launch_count && sequence.is_none()
        {
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
    /// and output fingerprint. Returns how many pairs' outputs were
    /// compared.
    fn routes(
        &mut self,
        golden: &RecordedGemmTrace,
        candidate: &RecordedGemmTrace,
        pairs: &mut Pairs,
        comparable: bool,
    ) -> usize {
        let mut compared = 0;
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
        let first_by_sequence = pairs.matched.len() - pairs.by_sequence;
        let pairing = &mut pairs.sequence;
        for (k, &(g, c)) in pairs.matched.iter().enumerate() {
            let gr = &golden.routes[g];
            let cr = &candidate.routes[c];
            let by_sequence = k >= first_by_sequence;
            let mut changes = field_changes(gr, cr);
            // A pair by kernel sequence is named by its GEMM with
            // identity, and compared in what both sides observed.
            let gemm = match (pairing.as_mut(), by_sequence) {
                (Some(p), true) => {
                    changes.retain(|ch| sequence::observed_by_both(&ch.field, gr, cr));
                    if !changes.is_empty() {
                        p.differing += 1;
                        if p.first_differing.is_none() {
                            p.first_differing =
                                Some(sequence::first_differing(p.side, gr, cr, &changes));
                        }
                    }
                    match p.side {
                        sequence::Side::Candidate => &gr.gemm,
                        sequence::Side::Golden => &cr.gemm,
                    }
                }
                _ => &gr.gemm,
            };
            if g != c && !by_sequence {
                let change = typed_number("launch_order", g as u64, c as u64);
                self.push_change(DiffClass::Structural, Some(g), Some(gemm), change);
            }
            for ch in changes {
                self.push_change(DiffClass::of_field(&ch.field), Some(g), Some(gemm), ch);
            }
            let (gf, cf) = (golden.fingerprints.get(g), candidate.fingerprints.get(c));
            if let (Some(gf), Some(cf)) = (gf, cf) {
                if gf.input_seed != cf.input_seed {
                    let change = typed_number("input_seed", gf.input_seed, cf.input_seed);
                    self.push_change(DiffClass::Structural, Some(g), Some(gemm), change);
                    continue;
                }
                compared += comparable as usize;
                if comparable && (gf.sha256 != cf.sha256 || gf.bytes != cf.bytes) {
                    self.push(
                        DiffClass::Numeric,
                        Some(g),
                        Some(gemm),
                        "output_fingerprint",
                        gf.sha256.to_string(),
                        cf.sha256.to_string(),
                    );
                }
            }
        }
        compared
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

/// Pairs the routes of two traces: by GEMM name where names are unique on
/// both sides, else by index; then, where one side's unpaired routes are
/// all GEMMs without op identity (a graph replay's), the unpaired routes
/// by kernel sequence ([`sequence`]).
pub(super) fn pair_routes(golden: &RecordedGemmTrace, candidate: &RecordedGemmTrace) -> Pairs {
    let (matched, missing, added) = pair_by_name(golden, candidate);
    match sequence::align(golden, candidate, &missing, &added) {
        Some(a) => {
            let by_sequence = a.pairs.len();
            let mut matched = matched;
            matched.extend(a.pairs);
            Pairs {
                matched,
                by_sequence,
                missing: a.missing,
                added: a.added,
                sequence: Some(a.pairing),
            }
        }
        None => Pairs {
            matched,
            by_sequence: 0,
            missing,
            added,
            sequence: None,
        },
    }
}

/// (pairs, golden routes unpaired, candidate routes unpaired), by name
/// where names are unique on both sides, else by index.
type ByName = (Vec<(usize, usize)>, Vec<usize>, Vec<usize>);

fn pair_by_name(golden: &RecordedGemmTrace, candidate: &RecordedGemmTrace) -> ByName {
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
        (matched, missing, added)
    } else {
        let n = golden.routes.len().min(candidate.routes.len());
        (
            (0..n).map(|i| (i, i)).collect(),
            (n..golden.routes.len()).collect(),
            (n..candidate.routes.len()).collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit;

    #[test]
    fn identical_traces_have_no_differences() {
        let t = testkit::sample_trace(5);
        let mut other = t.clone();
        other.volatile.insert("host".into(), "elsewhere".into());
        assert!(TraceDiff::between(&t, &other).is_empty());
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

    /// Pins are paired by family: equal pin lists give no difference (their
    /// fields share tags, so pairing by tag would compare every pin with
    /// the first), a changed configuration names its family and field, and
    /// a family pinned on one side only is named absent.
    #[test]
    fn pins_are_compared_by_family() {
        use crate::pin::VendorPin;
        let mut g = testkit::sample_trace(2);
        let mut pins: Vec<VendorPin> = (0..3)
            .map(|i| {
                let mut r = testkit::sample_vendor_route(i);
                r.shape.n = 1024 * (i + 1);
                VendorPin::of(&r).unwrap()
            })
            .collect();
        g.context = g.context.clone().with_pins(pins.clone());
        let same = g.clone();
        assert!(TraceDiff::between(&g, &same).is_empty());
        let original = pins.clone();
        let mut changed = g.clone();
        pins[1].tile_id += 1;
        changed.context = changed.context.clone().with_pins(pins.clone());
        let d = TraceDiff::between(&g, &changed);
        let fields: Vec<&str> = d
            .differences
            .iter()
            .map(|x| x.change.field.as_str())
            .collect();
        assert_eq!(fields.len(), 1, "{fields:?}");
        assert!(fields[0].starts_with("context.pin[") && fields[0].ends_with("].tile_id"));
        assert!(
            fields[0].contains(&format!("n={}", pins[1].family.n)),
            "{}",
            fields[0]
        );
        let mut fewer = g.clone();
        fewer.context = fewer.context.clone().with_pins(original[..2].to_vec());
        let d = TraceDiff::between(&g, &fewer);
        assert_eq!(d.differences.len(), 1);
        assert_eq!(d.differences[0].change.found, "(absent)");
    }

    /// A context with a second, conflicting pin for one family (the reader
    /// refuses such a file; a value built in memory may hold one) differs
    /// from one with the family pinned once, whichever side has the
    /// duplicate: one difference naming the family and both pins.
    #[test]
    fn a_duplicate_pin_is_reported_on_either_side() {
        use crate::pin::VendorPin;
        let pin = VendorPin::of(&testkit::sample_vendor_route(0)).unwrap();
        let mut conflicting = pin.clone();
        conflicting.algorithm_id += 1;
        let mut once = testkit::sample_trace(2);
        once.context.pins = vec![pin.clone()];
        let mut twice = once.clone();
        twice.context.pins.push(conflicting.clone());
        for (g, c, side) in [(&twice, &once, "golden"), (&once, &twice, "candidate")] {
            let d = TraceDiff::between(g, c);
            assert_eq!(d.differences.len(), 1, "{side}: {}", d.render());
            let change = &d.differences[0].change;
            assert_eq!(
                change.field,
                format!("context.pin[{}]", pin.family),
                "{side}"
            );
            let (dup, single) = if side == "golden" {
                (&change.expected, &change.found)
            } else {
                (&change.found, &change.expected)
            };
            assert!(dup.starts_with("pinned 2 times"), "{side}: {dup}");
            for p in [&pin, &conflicting] {
                assert!(
                    dup.contains(&format!("algorithm {}", p.algorithm_id)),
                    "{dup}"
                );
            }
            assert_eq!(
                single,
                &format!(
                    "algorithm {} tile {} stages {}",
                    pin.algorithm_id, pin.tile_id, pin.stages_id
                )
            );
            assert_eq!(d.differences[0].class, DiffClass::Route);
        }
        // The duplicate is reported even against itself.
        assert_eq!(TraceDiff::between(&twice, &twice).differences.len(), 1);
    }
}
