//! Every route field, classified by who can refuse a change of it.
//!
//! *Policy-visible* fields are judged by replay validation alone, against
//! the live policy, the route's symbol (what it serves and declares) and
//! the live context: a change is refused before launch, without a golden.
//! *Bounded* fields are judged by the guard only against a declared bound;
//! a change within it needs the golden. *Launch identity* fields describe
//! this launch (its problem, layout, geometry, argument values, the vendor
//! library's per-call choice): every value is servable, so only the golden
//! comparison can say a change is one. The class is a fact about the field
//! and its rule, written here once; `docs/design.md` carries the same table
//! and the tests check the guard against it, never the other way round.
//!
//! Routes of a vendor library differ from custom kernels' in what can be
//! declared: one entry point serves every op, and the library picks the
//! kernels, tile and split-K per call. So each field has a class per
//! [`RouteKind`]; a vendor route under the `vendor-invariant` contract
//! runs its family's pinned configuration, so the library's per-call
//! choice becomes the guard's to check ([`crate::pin`]).

use crate::route::ResolvedGemmRoute;
use crate::vocab::ContractKind;

/// Who refuses a change of one route field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldClass {
    /// The guard alone refuses every change; the text names the rule.
    Policy(&'static str),
    /// The guard refuses values outside a declared bound; the golden
    /// refuses a change within it. The text names the bound.
    Bounded(&'static str),
    /// Only the golden comparison refuses a change; the text says why the
    /// guard cannot judge it.
    Identity(&'static str),
}

impl FieldClass {
    /// True for [`FieldClass::Policy`].
    pub fn is_policy(&self) -> bool {
        matches!(self, FieldClass::Policy(_))
    }

    /// The rule or reason.
    pub fn why(&self) -> &'static str {
        match self {
            FieldClass::Policy(s) | FieldClass::Bounded(s) | FieldClass::Identity(s) => s,
        }
    }

    /// `policy-visible`, `bounded` or `launch identity`.
    pub fn name(&self) -> &'static str {
        match self {
            FieldClass::Policy(_) => "policy-visible",
            FieldClass::Bounded(_) => "bounded",
            FieldClass::Identity(_) => "launch identity",
        }
    }
}

/// The kinds of route whose fields are classified apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteKind {
    /// A custom kernel's route (CPU, NVRTC, an engine's fixed kernels).
    Custom,
    /// A vendor library's route whose configuration the library picks per
    /// call (cuBLAS, cuBLASLt, an engine's vendor backend).
    Vendor,
    /// A vendor library's route under the `vendor-invariant` contract: one
    /// configuration pinned per problem family.
    VendorInvariant,
}

impl RouteKind {
    /// The kind of `route`.
    pub fn of(route: &ResolvedGemmRoute) -> RouteKind {
        if !route.backend.is_vendor() {
            RouteKind::Custom
        } else if route.contract.kind.class() == &ContractKind::VendorInvariant {
            RouteKind::VendorInvariant
        } else {
            RouteKind::Vendor
        }
    }

    /// `custom`, `vendor` or `vendor-invariant`.
    pub fn name(&self) -> &'static str {
        match self {
            RouteKind::Custom => "custom",
            RouteKind::Vendor => "vendor",
            RouteKind::VendorInvariant => "vendor-invariant",
        }
    }
}

/// One route field's classes, per [`RouteKind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldClassification {
    /// The field tag, as [`super::ResolvedGemmRoute::field_tags`] names it.
    pub tag: &'static str,
    /// On a custom kernel's route (CPU, NVRTC, an engine's fixed kernels).
    pub custom: FieldClass,
    /// On a vendor library's route (cuBLAS, cuBLASLt, an engine's vendor backend).
    pub vendor: FieldClass,
    /// On a vendor library's route under the `vendor-invariant` contract.
    pub invariant: FieldClass,
}

impl FieldClassification {
    /// The class on a route of `kind`.
    pub fn on(&self, kind: RouteKind) -> FieldClass {
        match kind {
            RouteKind::Custom => self.custom,
            RouteKind::Vendor => self.vendor,
            RouteKind::VendorInvariant => self.invariant,
        }
    }
}

use FieldClass::{Bounded as B, Identity as I, Policy as P};

const SERVICE: &str =
    "the symbol serves the route's (op, dtype, contract, tensor cores, conversion)";
const SYMBOL: &str = "the route's symbol declares it (SymbolDeclaration)";
const MODULE: &str = "equal to the loaded module's (kind, digest, backend, target, compiler)";
const DEVICE: &str = "equal to the live device's";
const REVISION: &str = "equal to the live context's revision";
const NO_VENDOR: &str = "a custom kernel's route has no vendor block";
const CHOICE: &str = "the library's choice for this call, recorded from it; any value is servable";

const PINNED: &str = "equal to the live context's pin for the route's family (op, dtype, k, n, library, options): refused before launch";
const PINNED_LAUNCH: &str = "the pinned configuration's launch at this m, recorded from the captured graph; the configuration deciding it is pinned";

macro_rules! classes {
    ($($tag:literal => $custom:expr, $vendor:expr $(, $invariant:expr)?;)+) => {
        /// Every route field's classes, in framing order. A field with two
        /// classes has the vendor one on `vendor-invariant` routes too.
        pub const FIELD_CLASSES: &[FieldClassification] = &[
            $(FieldClassification {
                tag: $tag,
                custom: $custom,
                vendor: $vendor,
                invariant: classes!(@or $vendor $(, $invariant)?),
            }),+
        ];
    };
    (@or $vendor:expr) => { $vendor };
    (@or $vendor:expr, $invariant:expr) => { $invariant };
}

classes! {
    "gemm" => I("the workload's name for the GEMM, for people; it changes no bit"), I("the workload's name for the GEMM");
    "op" => P(SERVICE), I("one entry point serves every op: the op is an argument of the call (in the arguments digest)");
    "dtype" => P(SERVICE), B("the service: f32 and the half types differ in contract, tensor cores or conversion; f16 and bf16 are served alike");
    "backend" => P("permitted by the live policy, and the module's backend"), P("permitted by the live policy, and the module's backend");
    "contract.kind" => P("permitted by the live policy for the dtype, and served by the symbol"), P("permitted by the live policy, served by the symbol, and the contract of the call's declared configuration");
    "contract.splits" => P("the symbol's split rule: 1, the grid's z, or ceil(k / splits) = bk (two counts sharing one k block, possible only when k < splits squared, need the golden)"), P("equal to max(1, vendor.split_k)");
    "instruction_family" => P(SYMBOL), P(SYMBOL);
    "instruction_shape" => P(SYMBOL), P(SYMBOL);
    "uses_tensor_cores" => P("permitted by the live policy, and served by the symbol"), P("permitted by the live policy, and served by the symbol");
    "operand_conversion" => P("permitted by the live policy (tf32 rounding needs f32 policy tf32), and served by the symbol"), P("permitted by the live policy, and served by the symbol");
    "output_ownership" => P("permitted by the live policy (atomics by none), and declared by the symbol"), P("vendor-defined, as the symbol declares");
    "kernel_symbol" => P("served by the loaded module; another symbol differs in what it serves or declares"), P("served by the loaded module");
    "module_kind" => P(MODULE), P(MODULE);
    "compilation_target" => P(MODULE), P(MODULE);
    "artifact_digest" => P(MODULE), P(MODULE);
    "compiler.name" => P(MODULE), P("the library entry point the module names");
    "compiler.version" => P(MODULE), P("the library version the module names");
    "compiler.options_digest" => P(MODULE), P("one of the call configurations (compute type, math mode, selection) the symbol declares for the route's dtype and contract");
    "compiler.source_digest" => P(MODULE), I("the library's digest as the call reports it");
    "device.class" => P(DEVICE), P(DEVICE);
    "device.compute_capability" => P(DEVICE), P(DEVICE);
    "device.multiprocessors" => P(DEVICE), P(DEVICE);
    "device.driver" => P(DEVICE), P(DEVICE);
    "device_capabilities" => P(SYMBOL), P(SYMBOL);
    "shape.m" => B("at least 1 (an empty GEMM reduces nothing)"), B("at least 1 (an empty GEMM reduces nothing)");
    "shape.k" => B("at least 1; where the k block is one split's, tied to bk"), B("at least 1 (an empty GEMM reduces nothing)");
    "shape.n" => B("at least 1 (an empty GEMM reduces nothing)"), B("at least 1 (an empty GEMM reduces nothing)");
    "strides.lda" => I("the caller's layout: any leading dimension is servable"), I("the caller's layout");
    "strides.ldb" => I("the caller's layout: any leading dimension is servable"), I("the caller's layout");
    "strides.ldc" => I("the caller's layout: any leading dimension is servable"), I("the caller's layout");
    "tile.m" => P(SYMBOL), P("the symbol declares 0 (the library does not say)");
    "tile.n" => P(SYMBOL), P("the symbol declares 0 (the library does not say)");
    "tile.k" => P(SYMBOL), P("the symbol declares 0 (the library does not say)");
    "bk" => P("the symbol's k block: fixed, or one split's (ceil(k / splits))"), P("the symbol declares 0 (the library does not say)");
    "stages" => P(SYMBOL), P("the symbol declares 0 (the library does not say)");
    "threads" => I("the launch's block size (the launch-set builder holds them equal)"), I(CHOICE), I(PINNED_LAUNCH);
    "launch.grid" => I("follows from the shape and tile (the persistent wgmma kernels: and the route's SM count); the split rule reads its z where it says so"), I(CHOICE);
    "launch.block" => I("the launch's own; its thread count must equal threads"), I(CHOICE), I(PINNED_LAUNCH);
    "launch.dynamic_shared_bytes" => I("the launch's own"), I(CHOICE), I(PINNED_LAUNCH);
    "launch.arguments_digest" => I("the argument values: only the backend that launched can recompute them"), I("the call's argument values");
    "tensor_map.revision" => P("present only where the symbol declares tensor maps, then equal to the live revision"), P("a vendor entry point declares no tensor map");
    "tensor_map.digest" => B("present exactly where the symbol declares tensor maps; the value is recomputed by the backend before launch (the CUDA backend does), not by the guard"), P("a vendor entry point declares no tensor map");
    "resources_digest" => P("equal to the resources the symbol declares (every custom kernel declares them)"), I("the library picks the kernels per call: digested from the captured graph's kernels");
    "tuning_table_revision" => P(REVISION), P(REVISION);
    "schedule_revision" => P(REVISION), P(REVISION);
    "vendor.library_version" => P(NO_VENDOR), P("the library version the symbol declares");
    "vendor.algorithm_id" => P(NO_VENDOR), I(CHOICE), P(PINNED);
    "vendor.tile_id" => P(NO_VENDOR), I(CHOICE), P(PINNED);
    "vendor.split_k" => P(NO_VENDOR), P("within what the symbol permits, and equal to contract.splits (at least 1)"), P("1: the vendor-invariant contract runs no split-K (and equal to contract.splits)");
    "vendor.reduction_scheme" => P(NO_VENDOR), B("one of the schemes the symbol permits"), P("none (0): the vendor-invariant contract reduces nothing across blocks");
    "vendor.stages_id" => P(NO_VENDOR), I(CHOICE), P(PINNED);
    "vendor.swizzle" => P(NO_VENDOR), I(CHOICE), P(PINNED);
    "vendor.inner_shape_id" => P(NO_VENDOR), I(CHOICE), P(PINNED);
    "vendor.cluster_shape_id" => P(NO_VENDOR), I(CHOICE), P(PINNED);
    "vendor.workspace_bytes" => P(NO_VENDOR), B("at most the workspace the symbol permits"), B("at most 64 bytes, too small for any partial sum (the library asks a few bytes at some m)");
    "vendor.physical_kernels" => P(NO_VENDOR), I("the kernels seen in the captured graph: physical binding checks them against the graph, not the guard");
}

/// The classification of `tag`, if it is a route field.
pub fn classify(tag: &str) -> Option<&'static FieldClassification> {
    FIELD_CLASSES.iter().find(|c| c.tag == tag)
}

/// The policy-visible field tags of a route of `kind`, in framing order.
pub fn policy_visible(kind: RouteKind) -> impl Iterator<Item = &'static str> {
    FIELD_CLASSES
        .iter()
        .filter(move |c| c.on(kind).is_policy())
        .map(|c| c.tag)
}

/// The classification as a Markdown table (field, then one column per
/// [`RouteKind`]), as `docs/design.md` carries it.
pub fn markdown_table() -> String {
    let cell = |c: FieldClass| format!("{}: {}", c.name(), c.why());
    let mut out = String::from(
        "| field | on a custom kernel's route | on a vendor library's route | on a vendor-invariant route |\n| --- | --- | --- | --- |\n",
    );
    for c in FIELD_CLASSES {
        // The invariant column repeats the vendor one where they agree.
        let invariant = if c.invariant == c.vendor {
            "as on a vendor route".to_string()
        } else {
            cell(c.invariant)
        };
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            c.tag,
            cell(c.custom),
            cell(c.vendor),
            invariant
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `docs/design.md` carries this very table: the doc cannot drift from
    /// the classification the tests check the guard against.
    #[test]
    fn the_design_doc_carries_the_classification() {
        let doc = include_str!("../../../../docs/design.md");
        assert!(
            doc.contains(&markdown_table()),
            "docs/design.md does not carry route::markdown_table(); paste it:\n{}",
            markdown_table()
        );
    }

    #[test]
    fn every_framed_field_is_classified_once_in_framing_order() {
        let tags = ResolvedGemmRoute::field_tags();
        let classified: Vec<&str> = FIELD_CLASSES.iter().map(|c| c.tag).collect();
        // A field added to the framing without a class fails here.
        assert_eq!(classified, tags);
    }

    #[test]
    fn every_class_says_why() {
        for c in FIELD_CLASSES {
            for class in [c.custom, c.vendor, c.invariant] {
                assert!(class.why().len() > 10, "{}: {:?}", c.tag, class);
            }
        }
    }
}
