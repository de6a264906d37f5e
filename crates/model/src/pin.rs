//! Vendor configurations pinned per problem family: what the
//! `vendor-invariant` contract promises, and the live context's record of
//! which configuration each family runs.
//!
//! A vendor library picks its kernels per call, so a vendor route's
//! algorithm, tile, stages and the rest are the library's choice: any value
//! is servable, and only a golden can call a change one. A route under the
//! `vendor-invariant` contract is different: the backend pinned one
//! configuration for the route's whole family (op, dtype, k, n) so the
//! bits do not depend on m. The promise (no split-K, no reduction scheme,
//! a workspace too small to hold a partial sum) is checked against the
//! route's vendor block, and the configuration against the live context's
//! [`VendorPin`] for the family, before anything launches.

use crate::digest::{Digest, FieldValue, FieldVisitor, Framed};
use crate::route::{ResolvedGemmRoute, VendorRoute};
use crate::vocab::{DType, GemmOp, PhysicalBackend};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Most workspace a `vendor-invariant` call may be given, in bytes. Some
/// split-free library kernels ask for a few bytes (a tile-scheduler
/// counter); 64 bytes cannot hold the partial sums of any tile (the
/// smallest, 64x8 f32, takes 2 KiB), so no split of the reduction can hide
/// in it.
pub const VENDOR_INVARIANT_MAX_WORKSPACE_BYTES: u64 = 64;

/// The one split a `vendor-invariant` call runs.
pub const VENDOR_INVARIANT_SPLIT_K: i64 = 1;

/// The reduction scheme a `vendor-invariant` call reports: none (cuBLASLt's
/// `CUBLASLT_REDUCTION_SCHEME_NONE`).
pub const VENDOR_INVARIANT_REDUCTION_SCHEME: i64 = 0;

/// A problem family: the routes one pinned configuration serves.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PinFamily {
    /// The vendor backend.
    pub backend: PhysicalBackend,
    /// Library name and version, as the routes' vendor block reports it.
    pub library_version: String,
    /// Logical op.
    pub op: GemmOp,
    /// Storage dtype.
    pub dtype: DType,
    /// Reduction length.
    pub k: u64,
    /// Output columns.
    pub n: u64,
    /// The call configuration (compute type, math mode, selection), as the
    /// routes' `compiler.options_digest`.
    pub options_digest: Digest,
}

impl PinFamily {
    /// The family of a route with a vendor block; `None` without one.
    pub fn of(route: &ResolvedGemmRoute) -> Option<PinFamily> {
        let v = route.vendor.as_ref()?;
        Some(PinFamily {
            backend: route.backend.clone(),
            library_version: v.library_version.clone(),
            op: route.op,
            dtype: route.dtype,
            k: route.shape.k,
            n: route.shape.n,
            options_digest: route.compiler.options_digest,
        })
    }
}

impl fmt::Display for PinFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} k={} n={} on {} ({})",
            self.op, self.dtype, self.k, self.n, self.backend, self.library_version
        )
    }
}

/// One family's pinned configuration: every field of a vendor block that
/// selects what runs, for every m of the family.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct VendorPin {
    /// The family it serves.
    pub family: PinFamily,
    /// Algorithm id.
    pub algorithm_id: i64,
    /// Tile id.
    pub tile_id: i64,
    /// Pipeline stages id.
    pub stages_id: i64,
    /// Block swizzling.
    pub swizzle: i64,
    /// Inner shape id, where the library exposes it.
    pub inner_shape_id: Option<i64>,
    /// Cluster shape id, where the library exposes it.
    pub cluster_shape_id: Option<i64>,
}

/// A pinned-configuration field that differs: its route field tag, the
/// pin's value, the route's.
pub(crate) type PinFault = (&'static str, String, String);

impl VendorPin {
    /// The configuration `route` runs, as a pin of its family; `None` for
    /// a route without a vendor block.
    pub fn of(route: &ResolvedGemmRoute) -> Option<VendorPin> {
        Some(VendorPin::pinning(
            PinFamily::of(route)?,
            route.vendor.as_ref()?,
        ))
    }

    /// `family` pinned to the configuration `v` records.
    pub fn pinning(family: PinFamily, v: &VendorRoute) -> VendorPin {
        VendorPin {
            family,
            algorithm_id: v.algorithm_id,
            tile_id: v.tile_id,
            stages_id: v.stages_id,
            swizzle: v.swizzle,
            inner_shape_id: v.inner_shape_id,
            cluster_shape_id: v.cluster_shape_id,
        }
    }

    /// The vendor block of a call in this configuration: one split, no
    /// reduction scheme, and no workspace or kernels recorded yet.
    pub fn vendor_route(&self) -> VendorRoute {
        VendorRoute {
            library_version: self.family.library_version.clone(),
            algorithm_id: self.algorithm_id,
            tile_id: self.tile_id,
            split_k: VENDOR_INVARIANT_SPLIT_K,
            reduction_scheme: VENDOR_INVARIANT_REDUCTION_SCHEME,
            stages_id: self.stages_id,
            swizzle: self.swizzle,
            inner_shape_id: self.inner_shape_id,
            cluster_shape_id: self.cluster_shape_id,
            workspace_bytes: 0,
            physical_kernels: Vec::new(),
        }
    }

    /// The first field of `v` that is not this pin's configuration.
    pub(crate) fn difference(&self, v: &VendorRoute) -> Option<PinFault> {
        let opt = |o: Option<i64>| o.map_or_else(|| "none".to_string(), |x| x.to_string());
        let pairs = [
            (
                "vendor.algorithm_id",
                self.algorithm_id.to_string(),
                v.algorithm_id.to_string(),
            ),
            (
                "vendor.tile_id",
                self.tile_id.to_string(),
                v.tile_id.to_string(),
            ),
            (
                "vendor.stages_id",
                self.stages_id.to_string(),
                v.stages_id.to_string(),
            ),
            (
                "vendor.swizzle",
                self.swizzle.to_string(),
                v.swizzle.to_string(),
            ),
            (
                "vendor.inner_shape_id",
                opt(self.inner_shape_id),
                opt(v.inner_shape_id),
            ),
            (
                "vendor.cluster_shape_id",
                opt(self.cluster_shape_id),
                opt(v.cluster_shape_id),
            ),
        ];
        pairs.into_iter().find(|(_, pin, route)| pin != route)
    }
}

impl Framed for VendorPin {
    fn visit_fields<V: FieldVisitor>(&self, v: &mut V) {
        let f = &self.family;
        v.field("pin.backend", FieldValue::Str(&f.backend.to_string()));
        v.field("pin.library_version", FieldValue::Str(&f.library_version));
        v.field("pin.op", FieldValue::Str(f.op.as_str()));
        v.field("pin.dtype", FieldValue::Str(f.dtype.as_str()));
        v.field("pin.k", FieldValue::U64(f.k));
        v.field("pin.n", FieldValue::U64(f.n));
        v.field("pin.options_digest", FieldValue::Digest(&f.options_digest));
        v.field("pin.algorithm_id", FieldValue::I64(self.algorithm_id));
        v.field("pin.tile_id", FieldValue::I64(self.tile_id));
        v.field("pin.stages_id", FieldValue::I64(self.stages_id));
        v.field("pin.swizzle", FieldValue::I64(self.swizzle));
        let opt = |o: Option<i64>| o.map_or(FieldValue::Absent, FieldValue::I64);
        v.field("pin.inner_shape_id", opt(self.inner_shape_id));
        v.field("pin.cluster_shape_id", opt(self.cluster_shape_id));
    }
}

/// One family's pins on two sides of a comparison: every pin of the
/// family on each side (more than one is a duplicate, which the reader
/// refuses but a value built in memory may hold).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PinPair<'p, 'a> {
    /// The family.
    pub family: &'a PinFamily,
    /// Its pins on the first (expected, golden) side.
    pub expected: &'p [&'a VendorPin],
    /// Its pins on the second (found, candidate) side.
    pub found: &'p [&'a VendorPin],
}

impl<'a> PinPair<'_, 'a> {
    /// The one pin of each side, where each side pins the family once.
    pub fn single(&self) -> Option<(&'a VendorPin, &'a VendorPin)> {
        match (self.expected, self.found) {
            ([e], [f]) => Some((e, f)),
            _ => None,
        }
    }
}

/// Pairs two pin lists by family, both ways, in family order: `each` sees
/// every family pinned on either side once, with all of its pins on each
/// side. Sorts references and walks both lists together: `O(n log n)`,
/// one pointer per pin and nothing per pin field, so contexts of
/// [`crate::trace::MAX_PINS`] pins compare in proportion to their size.
pub fn pair_by_family<'a>(
    expected: &'a [VendorPin],
    found: &'a [VendorPin],
    mut each: impl FnMut(PinPair<'_, 'a>),
) {
    let sorted = |pins: &'a [VendorPin]| {
        let mut v: Vec<&'a VendorPin> = pins.iter().collect();
        // Stable: a family's pins keep their order (already sorted: linear).
        v.sort_by(|a, b| a.family.cmp(&b.family));
        v
    };
    let (e, f) = (sorted(expected), sorted(found));
    let run = |v: &[&'a VendorPin], at: usize, family: &PinFamily| {
        v[at..].iter().take_while(|p| &p.family == family).count()
    };
    let (mut i, mut j) = (0, 0);
    while i < e.len() || j < f.len() {
        let family = match (e.get(i), f.get(j)) {
            (Some(a), Some(b)) => (&a.family).min(&b.family),
            (Some(a), None) => &a.family,
            (None, Some(b)) => &b.family,
            (None, None) => break,
        };
        let (n, m) = (run(&e, i, family), run(&f, j, family));
        each(PinPair {
            family,
            expected: &e[i..i + n],
            found: &f[j..j + m],
        });
        i += n;
        j += m;
    }
}

/// What a side holds for one family, for a comparison: its configuration,
/// `(absent)`, or every configuration of a family pinned more than once.
pub fn describe(pins: &[&VendorPin]) -> String {
    let config = |p: &VendorPin| {
        format!(
            "algorithm {} tile {} stages {}",
            p.algorithm_id, p.tile_id, p.stages_id
        )
    };
    match pins {
        [] => crate::digest::ABSENT.to_string(),
        [p] => config(p),
        more => format!(
            "pinned {} times (one pin per family): {}",
            more.len(),
            more.iter()
                .map(|p| config(p))
                .collect::<Vec<_>>()
                .join("; ")
        ),
    }
}

/// The differences of two pin lists, paired by family both ways
/// ([`pair_by_family`]): each with the family's display key and, for a
/// family pinned once on each side, the changed field (`algorithm_id`, ...);
/// otherwise no field and what each side holds ([`describe`]): absent on
/// one side, or pinned more than once on either.
pub fn changes_by_family(
    expected: &[VendorPin],
    found: &[VendorPin],
) -> Vec<(String, crate::digest::FieldChange)> {
    let mut out = Vec::new();
    pair_by_family(expected, found, |pair| {
        let key = pair.family.to_string();
        match pair.single() {
            Some((e, f)) => {
                for mut c in crate::digest::field_changes(e, f) {
                    if let Some(field) = c.field.strip_prefix("pin.") {
                        c.field = field.to_string();
                    }
                    out.push((key.clone(), c));
                }
            }
            None => out.push((
                key,
                crate::digest::FieldChange::text(
                    String::new(),
                    describe(pair.expected),
                    describe(pair.found),
                ),
            )),
        }
    });
    out
}

/// Refuses pins that are not one per family in family order (what
/// [`crate::identity::GemmRouteIdentity::with_pins`] builds), naming the
/// first family out of place.
pub(crate) fn check_order(pins: &[VendorPin]) -> Result<(), crate::error::FormatError> {
    for w in pins.windows(2) {
        let (a, b) = (&w[0].family, &w[1].family);
        let why = match a.cmp(b) {
            std::cmp::Ordering::Less => continue,
            std::cmp::Ordering::Equal => "is pinned twice (one pin per family)",
            std::cmp::Ordering::Greater => "is out of order (pins are sorted by family)",
        };
        return Err(crate::error::FormatError::Inconsistent(format!(
            "the context's pin of {b} {why}"
        )));
    }
    Ok(())
}

/// Why `route` (under the `vendor-invariant` contract) breaks the
/// contract's promise or runs another configuration than `pins` holds for
/// its family: the field, what was expected, what was found.
pub(crate) fn check_invariant(pins: &[VendorPin], route: &ResolvedGemmRoute) -> Option<PinFault> {
    let Some(v) = &route.vendor else {
        return Some((
            "vendor.library_version",
            "a vendor block (the vendor-invariant contract is a vendor library's)".into(),
            "no vendor block".into(),
        ));
    };
    if v.split_k != VENDOR_INVARIANT_SPLIT_K {
        return Some((
            "vendor.split_k",
            format!("{VENDOR_INVARIANT_SPLIT_K} (vendor-invariant runs no split-K)"),
            v.split_k.to_string(),
        ));
    }
    if v.reduction_scheme != VENDOR_INVARIANT_REDUCTION_SCHEME {
        return Some((
            "vendor.reduction_scheme",
            format!(
                "{VENDOR_INVARIANT_REDUCTION_SCHEME} (none: vendor-invariant reduces nothing across blocks)"
            ),
            v.reduction_scheme.to_string(),
        ));
    }
    if v.workspace_bytes > VENDOR_INVARIANT_MAX_WORKSPACE_BYTES {
        return Some((
            "vendor.workspace_bytes",
            format!(
                "at most {VENDOR_INVARIANT_MAX_WORKSPACE_BYTES} (too small for any partial sum)"
            ),
            v.workspace_bytes.to_string(),
        ));
    }
    let family = PinFamily::of(route)?;
    let Some(pin) = pins.iter().find(|p| p.family == family) else {
        return Some((
            "vendor.algorithm_id",
            format!("the configuration the live context pins for {family}"),
            "no pin for the family".into(),
        ));
    };
    pin.difference(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invariant_route() -> ResolvedGemmRoute {
        let mut r = crate::testkit::sample_vendor_route(0);
        r.contract.kind = crate::vocab::ContractKind::VendorInvariant;
        if let Some(v) = r.vendor.as_mut() {
            v.workspace_bytes = 4;
        }
        r
    }

    #[test]
    fn a_route_of_the_pinned_configuration_keeps_the_promise() {
        let r = invariant_route();
        let pin = VendorPin::of(&r).unwrap();
        assert_eq!(check_invariant(&[pin], &r), None);
    }

    #[test]
    fn each_broken_promise_and_each_other_configuration_is_named() {
        let clean = invariant_route();
        let pin = VendorPin::of(&clean).unwrap();
        type Change = fn(&mut VendorRoute);
        let cases: [(&str, Change); 9] = [
            ("vendor.split_k", |v| v.split_k = 2),
            ("vendor.reduction_scheme", |v| v.reduction_scheme = 1),
            ("vendor.workspace_bytes", |v| v.workspace_bytes = 65),
            ("vendor.algorithm_id", |v| v.algorithm_id += 1),
            ("vendor.tile_id", |v| v.tile_id += 1),
            ("vendor.stages_id", |v| v.stages_id += 1),
            ("vendor.swizzle", |v| v.swizzle = 1),
            ("vendor.inner_shape_id", |v| v.inner_shape_id = None),
            ("vendor.cluster_shape_id", |v| v.cluster_shape_id = Some(3)),
        ];
        for (field, change) in cases {
            let mut r = clean.clone();
            change(r.vendor.as_mut().unwrap());
            let fault = check_invariant(std::slice::from_ref(&pin), &r);
            assert_eq!(fault.map(|f| f.0), Some(field));
        }
        // Another family (k) has no pin: refused, naming the family.
        let mut other = clean.clone();
        other.shape.k += 8;
        let (field, expected, _) = check_invariant(&[pin], &other).unwrap();
        assert_eq!(field, "vendor.algorithm_id");
        assert!(
            expected.contains(&format!("k={}", other.shape.k)),
            "{expected}"
        );
    }

    fn pins(n: u64) -> Vec<VendorPin> {
        (0..n)
            .map(|i| {
                let mut r = crate::testkit::sample_vendor_route(i);
                r.shape.n = 1024 * (i + 1);
                VendorPin::of(&r).unwrap()
            })
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect()
    }

    /// A context's pins are one per family in family order: a trace with a
    /// second (conflicting) pin for one family, or out of order, is refused
    /// by the reader, naming the family, and never written.
    #[test]
    fn the_reader_refuses_duplicate_and_unsorted_pins() {
        use crate::error::FormatError;
        use crate::trace::codec;
        let mut t = crate::testkit::sample_trace(2);
        t.context.pins = pins(3);
        assert!(crate::RecordedGemmTrace::from_bytes(&t.to_bytes().unwrap()).is_ok());
        let mut conflicting = t.context.pins[1].clone();
        conflicting.algorithm_id += 1;
        let mut twice = t.clone();
        twice.context.pins.insert(2, conflicting);
        let mut unsorted = t.clone();
        unsorted.context.pins.swap(1, 2);
        for (bad, family, why) in [
            (twice, &t.context.pins[1].family, "pinned twice"),
            (unsorted, &t.context.pins[1].family, "out of order"),
        ] {
            let forged = codec::seal(&codec::encode_payload(&bad).unwrap());
            for e in [
                crate::RecordedGemmTrace::from_bytes(&forged).unwrap_err(),
                bad.to_bytes().unwrap_err(),
            ] {
                let FormatError::Inconsistent(msg) = &e else {
                    panic!("{e:?}");
                };
                assert!(
                    msg.contains(why) && msg.contains(&family.to_string()),
                    "{msg}"
                );
            }
        }
    }

    /// Pairing by family goes both ways: a family on one side only, and a
    /// family pinned twice on either side, each come once, with every pin.
    #[test]
    fn pins_pair_by_family_both_ways() {
        let p = pins(3);
        let mut dup = p[1].clone();
        dup.tile_id += 1;
        let golden = vec![p[2].clone(), p[0].clone(), p[1].clone(), dup.clone()];
        let candidate = vec![p[1].clone(), p[2].clone()];
        let mut seen = Vec::new();
        pair_by_family(&golden, &candidate, |pair| {
            seen.push((pair.family.clone(), pair.expected.len(), pair.found.len()));
        });
        let expect: Vec<_> = vec![
            (p[0].family.clone(), 1, 0),
            (p[1].family.clone(), 2, 1),
            (p[2].family.clone(), 1, 1),
        ];
        assert_eq!(seen, expect);
        // The other direction: the same families, sides swapped.
        let mut back = Vec::new();
        pair_by_family(&candidate, &golden, |pair| {
            back.push((pair.family.clone(), pair.found.len(), pair.expected.len()));
        });
        assert_eq!(back, expect);
        let changes = changes_by_family(&candidate, &golden);
        let dup_change = changes
            .iter()
            .find(|(family, _)| family == &p[1].family.to_string())
            .map(|(_, c)| c)
            .unwrap();
        assert!(
            dup_change.found.starts_with("pinned 2 times"),
            "{dup_change:?}"
        );
        assert_eq!(dup_change.field, "");
    }

    /// The context digest hashes field by field: the same digest as
    /// framing the whole context at once.
    #[test]
    fn the_streamed_context_digest_is_the_framed_one() {
        let ctx = crate::testkit::context().with_pins(pins(3));
        assert_eq!(
            ctx.digest(),
            crate::digest::framed_digest(crate::identity::CONTEXT_DOMAIN, &ctx)
        );
    }
}
