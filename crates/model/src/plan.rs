//! `CapturedGemmGraphPlan`: what a captured graph may replay, and the checks
//! that run before anything is launched.

use crate::digest::{Digest, field_changes};
use crate::error::{LaunchSetError, Refusal, RefusalStage};
use crate::identity::{GemmRouteIdentity, ModuleIdentity, Service, SymbolEntry};
use crate::launch_set::{ResolvedGemmLaunchSet, build_resolved_gemm_launch_set};
use crate::pin::check_invariant;
use crate::route::ResolvedGemmRoute;
use crate::vocab::{ContractKind, ModuleKind};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Mutex;

/// What a capture is prepared from: the context, the launch set, and the
/// route capacity a capture must reserve (equal to the launch count).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreparedGemmCaptureManifest {
    /// The live context the eager run was recorded under.
    pub context: GemmRouteIdentity,
    /// Launch count and ordered digest of the eager run's routes.
    pub launch_set: ResolvedGemmLaunchSet,
    /// Routes a capture must reserve room for (the launch count).
    pub route_capacity: u64,
}

impl PreparedGemmCaptureManifest {
    /// The manifest of `routes` recorded under `context`. Refused when the
    /// routes do not form a valid launch set (none, zero grids, ...).
    pub fn from_routes(
        context: GemmRouteIdentity,
        routes: &[ResolvedGemmRoute],
    ) -> Result<Self, LaunchSetError> {
        let launch_set = build_resolved_gemm_launch_set(routes)?;
        Ok(PreparedGemmCaptureManifest {
            context,
            launch_set,
            route_capacity: launch_set.launch_count,
        })
    }
}

/// A plan rebuilt from routes whose launch set matched its manifest.
///
/// Replays go through [`CapturedGemmGraphPlan::with_validated_launch`], which
/// calls the launch closure only when the live context equals the plan's and
/// every route is servable under it.
#[derive(Debug)]
pub struct CapturedGemmGraphPlan {
    manifest: PreparedGemmCaptureManifest,
    routes: Vec<ResolvedGemmRoute>,
    /// The live context the last full validation accepted. A replay under an
    /// equal context skips the route walk.
    accepted: Mutex<Option<GemmRouteIdentity>>,
}

impl CapturedGemmGraphPlan {
    /// Builds a plan. Refused when the route count differs from the
    /// manifest's capacity, or when the launch set rebuilt from `routes`
    /// differs from the manifest's.
    pub fn new(
        manifest: PreparedGemmCaptureManifest,
        routes: Vec<ResolvedGemmRoute>,
    ) -> Result<Self, Refusal> {
        manifest.check_capture_request(manifest.route_capacity)?;
        if routes.len() as u64 != manifest.route_capacity {
            return Err(Refusal::new(
                RefusalStage::PlanConstruction,
                None,
                "launch_count",
                manifest.route_capacity,
                routes.len(),
            ));
        }
        let rebuilt = build_resolved_gemm_launch_set(&routes)
            .map_err(|e| launch_set_refusal(RefusalStage::PlanConstruction, e))?;
        compare_launch_sets(
            RefusalStage::PlanConstruction,
            &manifest.launch_set,
            &rebuilt,
        )?;
        Ok(CapturedGemmGraphPlan {
            manifest,
            routes,
            accepted: Mutex::new(None),
        })
    }

    /// The manifest the plan was built from.
    pub fn manifest(&self) -> &PreparedGemmCaptureManifest {
        &self.manifest
    }

    /// The routes, in enqueue order.
    pub fn routes(&self) -> &[ResolvedGemmRoute] {
        &self.routes
    }

    /// The launch set the routes were checked against.
    pub fn launch_set(&self) -> &ResolvedGemmLaunchSet {
        &self.manifest.launch_set
    }

    /// Walks the whole plan against `live`: the context must equal the
    /// plan's apart from the pins ([`GemmRouteIdentity::same_environment`]),
    /// and every route must be servable, a `vendor-invariant` route under
    /// the live context's pin for its family. Does not touch the cache.
    pub fn validate(&self, live: &GemmRouteIdentity) -> Result<(), Refusal> {
        if !live.same_environment(&self.manifest.context) {
            let unpinned = |c: &GemmRouteIdentity| GemmRouteIdentity {
                pins: Vec::new(),
                ..c.clone()
            };
            return Err(context_refusal(
                RefusalStage::ReplayValidation,
                &unpinned(&self.manifest.context),
                &unpinned(live),
            ));
        }
        let index = ModuleIndex::new(live);
        for (i, route) in self.routes.iter().enumerate() {
            check_servable(live, |k, d| index.get(k, d), i as u64, route)?;
        }
        Ok(())
    }

    /// Calls `launch` only if the replay is valid under `live`. The verdict
    /// is cached per live context, so repeated replays pay one comparison.
    pub fn with_validated_launch<R>(
        &self,
        live: &GemmRouteIdentity,
        label: &str,
        launch: impl FnOnce(&Self) -> R,
    ) -> Result<R, Refusal> {
        {
            // A poisoned lock only means a launch panicked; the cached context is still valid data.
            let cached = self.accepted.lock().unwrap_or_else(|p| p.into_inner());
            if cached.as_ref() == Some(live) {
                drop(cached);
                return Ok(launch(self));
            }
        }
        self.validate(live).map_err(|mut r| {
            r.label = Some(label.to_string());
            r
        })?;
        *self.accepted.lock().unwrap_or_else(|p| p.into_inner()) = Some(live.clone());
        Ok(launch(self))
    }

    /// Compares the plan with a golden manifest: context, launch count and
    /// ordered digest must all be equal. This catches a launch set that was
    /// re-digested after a remove, swap or field change.
    pub fn check_against_golden(
        &self,
        golden: &PreparedGemmCaptureManifest,
    ) -> Result<(), Refusal> {
        self.check_against_golden_parts(&golden.context, &golden.launch_set)
    }

    /// [`Self::check_against_golden`] of a golden's context and launch set.
    pub(crate) fn check_against_golden_parts(
        &self,
        context: &GemmRouteIdentity,
        launch_set: &ResolvedGemmLaunchSet,
    ) -> Result<(), Refusal> {
        if context != &self.manifest.context {
            return Err(context_refusal(
                RefusalStage::GoldenComparison,
                context,
                &self.manifest.context,
            ));
        }
        compare_launch_sets(
            RefusalStage::GoldenComparison,
            launch_set,
            &self.manifest.launch_set,
        )
    }

    /// Checks what a capture produced against the manifest.
    pub fn check_capture_result(&self, captured: &ResolvedGemmLaunchSet) -> Result<(), Refusal> {
        compare_launch_sets(
            RefusalStage::CaptureResult,
            &self.manifest.launch_set,
            captured,
        )
    }
}

impl PreparedGemmCaptureManifest {
    /// Refuses a capture whose reserved route capacity differs from the launch count.
    pub fn check_capture_request(&self, capacity: u64) -> Result<(), Refusal> {
        if capacity != self.launch_set.launch_count {
            return Err(Refusal::new(
                RefusalStage::CaptureRequest,
                None,
                "route_capacity",
                self.launch_set.launch_count,
                capacity,
            ));
        }
        Ok(())
    }
}

pub(crate) fn compare_launch_sets(
    stage: RefusalStage,
    expected: &ResolvedGemmLaunchSet,
    found: &ResolvedGemmLaunchSet,
) -> Result<(), Refusal> {
    if expected.launch_count != found.launch_count {
        return Err(Refusal::new(
            stage,
            None,
            "launch_count",
            expected.launch_count,
            found.launch_count,
        ));
    }
    if expected.ordered_digest != found.ordered_digest {
        return Err(Refusal::new(
            stage,
            None,
            "ordered_digest",
            expected.ordered_digest,
            found.ordered_digest,
        ));
    }
    Ok(())
}

fn launch_set_refusal(stage: RefusalStage, e: LaunchSetError) -> Refusal {
    let (index, field) = match &e {
        LaunchSetError::ZeroGrid { index, .. } => (Some(*index), "launch.grid"),
        LaunchSetError::ZeroBlock { index, .. } => (Some(*index), "launch.block"),
        LaunchSetError::ThreadsMismatch { index, .. } => (Some(*index), "threads"),
        LaunchSetError::ZeroArgumentsDigest { index } => (Some(*index), "launch.arguments_digest"),
        _ => (None, "launch_count"),
    };
    Refusal::new(stage, index, field, "a well-formed launch", e)
}

pub(crate) fn context_refusal(
    stage: RefusalStage,
    expected: &GemmRouteIdentity,
    found: &GemmRouteIdentity,
) -> Refusal {
    // The pins are paired by family, not framed into one field list: a
    // context may hold 65,536 of them.
    let mut changes = field_changes(&expected.environment(), &found.environment());
    for (family, mut c) in crate::pin::changes_by_family(&expected.pins, &found.pins) {
        c.field = match c.field.as_str() {
            "" => format!("pin[{family}]"),
            field => format!("pin[{family}].{field}"),
        };
        changes.push(c);
    }
    // Same fields but different lengths (e.g. a module added) name no field: name the digest.
    Refusal::with_changes(stage, None, changes)
        .unwrap_or_else(|| Refusal::new(stage, None, "context", expected.digest(), found.digest()))
}

/// Loaded modules by (kind, digest), indexed once per validation walk.
struct ModuleIndex<'a> {
    modules: HashMap<(&'a ModuleKind, &'a Digest), &'a ModuleIdentity>,
}

impl<'a> ModuleIndex<'a> {
    fn new(live: &'a GemmRouteIdentity) -> Self {
        let modules = live
            .modules
            .iter()
            .map(|m| ((&m.kind, &m.digest), m))
            .collect();
        ModuleIndex { modules }
    }

    fn get(&self, kind: &ModuleKind, digest: &Digest) -> Option<&'a ModuleIdentity> {
        self.modules.get(&(kind, digest)).copied()
    }
}

/// Whether one route is servable under `live` (the per-route rules of
/// replay validation), as route `index`. Looks modules up without
/// allocating, so a recorder can check every push, also during capture.
pub(crate) fn check_route(
    live: &GemmRouteIdentity,
    index: u64,
    route: &ResolvedGemmRoute,
) -> Result<(), Refusal> {
    check_servable(live, |k, d| live.module(k, d), index, route)
}

/// The first differing field of two framed values, as a refusal of route `i`.
fn first_change<T: crate::digest::Framed>(i: u64, expected: &T, found: &T, whole: &str) -> Refusal {
    let c = field_changes(expected, found);
    let (field, exp, got) = c
        .first()
        .map(|c| (c.field.clone(), c.expected.clone(), c.found.clone()))
        .unwrap_or_else(|| (whole.to_string(), String::new(), String::new()));
    Refusal::new(RefusalStage::ReplayValidation, Some(i), field, exp, got)
}

/// Whether `route` may be replayed under `live`: everything the live
/// policy, the route's module and symbol (its services and declaration)
/// and the live revisions and device say about it, checked without any
/// golden. `docs/design.md` lists the rules in order.
fn check_servable<'a>(
    live: &'a GemmRouteIdentity,
    module_of: impl Fn(&ModuleKind, &Digest) -> Option<&'a ModuleIdentity>,
    i: u64,
    route: &ResolvedGemmRoute,
) -> Result<(), Refusal> {
    let stage = RefusalStage::ReplayValidation;
    let refuse = |field: &str, expected: &dyn std::fmt::Display, found: &dyn std::fmt::Display| {
        Err(Refusal::new(stage, Some(i), field, expected, found))
    };
    for (field, v) in [
        ("shape.m", route.shape.m),
        ("shape.k", route.shape.k),
        ("shape.n", route.shape.n),
    ] {
        if v == 0 {
            // An empty GEMM launches no reduction: nothing to replay or audit.
            return refuse(field, &"at least 1", &v);
        }
    }
    if let Some(expected_kind) = route.backend.module_kind()
        && route.module_kind != expected_kind
    {
        return refuse("module_kind", &expected_kind, &route.module_kind);
    }
    check_policy(live, route)
        .map_err(|(field, expected, found)| Refusal::new(stage, Some(i), field, expected, found))?;
    let Some(module) = module_of(&route.module_kind, &route.artifact_digest) else {
        return refuse(
            "artifact_digest",
            &format!("a loaded {} module", route.module_kind),
            &route.artifact_digest,
        );
    };
    if module.backend != route.backend {
        // A module of this kind and digest serves another backend.
        return refuse("module_kind", &module.backend, &route.backend);
    }
    let Some(symbol) = module.symbol(&route.kernel_symbol) else {
        return refuse(
            "kernel_symbol",
            &"a symbol the live module serves",
            &format!("{:?}", route.kernel_symbol),
        );
    };
    check_symbol(symbol, route)
        .map_err(|(field, expected, found)| Refusal::new(stage, Some(i), field, expected, found))?;
    check_build(module, route)
        .map_err(|(field, expected, found)| Refusal::new(stage, Some(i), field, expected, found))?;
    if route.contract.kind.class() == &ContractKind::VendorInvariant
        && let Some((field, expected, found)) = check_invariant(&live.pins, route)
    {
        return Err(Refusal::new(stage, Some(i), field, expected, found));
    }
    if route.tuning_table_revision != live.revisions.tuning_table {
        return refuse(
            "tuning_table_revision",
            &live.revisions.tuning_table,
            &route.tuning_table_revision,
        );
    }
    if route.schedule_revision != live.revisions.schedule {
        return refuse(
            "schedule_revision",
            &live.revisions.schedule,
            &route.schedule_revision,
        );
    }
    if let Some(t) = &route.tensor_map
        && t.revision != live.revisions.tensor_map
    {
        return refuse(
            "tensor_map.revision",
            &live.revisions.tensor_map,
            &t.revision,
        );
    }
    if route.device != live.device {
        return Err(first_change(i, &live.device, &route.device, "device"));
    }
    Ok(())
}

/// The route was built where its module was: the compilation target, and
/// the compiler (a custom kernel's whole identity; a vendor call's entry
/// point and version, since its options and source digests describe the
/// call's configuration, which the library decides).
fn check_build(module: &ModuleIdentity, route: &ResolvedGemmRoute) -> Result<(), Fault> {
    if route.compilation_target != module.target {
        return Err((
            "compilation_target",
            format!("{:?}", module.target),
            format!("{:?}", route.compilation_target),
        ));
    }
    let (want, got) = (&module.compiler, &route.compiler);
    let vendor = route.backend.is_vendor();
    let pairs = [
        (
            "compiler.name",
            format!("{:?}", want.name),
            format!("{:?}", got.name),
            true,
        ),
        (
            "compiler.version",
            format!("{:?}", want.version),
            format!("{:?}", got.version),
            true,
        ),
        (
            "compiler.options_digest",
            want.options_digest.to_string(),
            got.options_digest.to_string(),
            !vendor,
        ),
        (
            "compiler.source_digest",
            want.source_digest.to_string(),
            got.source_digest.to_string(),
            !vendor,
        ),
    ];
    for (field, w, g, checked) in pairs {
        if checked && w != g {
            return Err((field, w, g));
        }
    }
    Ok(())
}

/// A refused field: its tag, what was expected, what was found.
type Fault = (&'static str, String, String);

/// The live policy's rules: permitted backend and contract (per dtype and
/// tensor cores), operand conversion and output ownership.
fn check_policy(live: &GemmRouteIdentity, route: &ResolvedGemmRoute) -> Result<(), Fault> {
    if !live.permitted_backends.contains(&route.backend) {
        return Err((
            "backend",
            "a backend the live context permits".into(),
            route.backend.to_string(),
        ));
    }
    if !live
        .permitted_contracts
        .contains(route.contract.kind.class())
    {
        return Err((
            "contract.kind",
            "a contract the live context permits".into(),
            route.contract.kind.to_string(),
        ));
    }
    if let Some((field, why)) = live.policy.refuse(
        &route.backend,
        route.dtype,
        &route.contract.kind,
        route.uses_tensor_cores,
    ) {
        let found = match field {
            "backend" => route.backend.to_string(),
            "uses_tensor_cores" => route.uses_tensor_cores.to_string(),
            _ => format!("{} {}", route.dtype, route.contract),
        };
        return Err((field, why.into(), found));
    }
    if let Some(why) = live.policy.refuse_conversion(
        &route.backend,
        route.dtype,
        &route.contract.kind,
        route.operand_conversion,
    ) {
        return Err((
            "operand_conversion",
            why.into(),
            route.operand_conversion.to_string(),
        ));
    }
    if let Some(why) =
        live.policy
            .refuse_ownership(&route.backend, &route.contract.kind, route.output_ownership)
    {
        return Err((
            "output_ownership",
            why.into(),
            route.output_ownership.to_string(),
        ));
    }
    Ok(())
}

/// The symbol's services and declaration, and its resources.
fn check_symbol(symbol: &SymbolEntry, route: &ResolvedGemmRoute) -> Result<(), Fault> {
    if !symbol.serves_route(route) {
        let service = Service::of(route);
        // Name the first field of the route that the symbol serves no
        // variant of: a dtype change names `dtype`, a relabelled symbol
        // names `kernel_symbol`.
        let s = &symbol.serves;
        let field = if !s.iter().any(|s| s.op == service.op) {
            "op"
        } else if !s.iter().any(|s| s.dtype == service.dtype) {
            "dtype"
        } else if !s.iter().any(|s| s.contract == service.contract) {
            "contract.kind"
        } else if !s.iter().any(|s| s.tensor_cores == service.tensor_cores) {
            "uses_tensor_cores"
        } else if !s.iter().any(|s| s.conversion == service.conversion) {
            "operand_conversion"
        } else {
            "kernel_symbol"
        };
        return Err((
            field,
            format!("what {:?} serves", route.kernel_symbol),
            format!(
                "{} {} {} tensor-cores={} {}",
                route.op,
                route.dtype,
                route.contract.kind,
                route.uses_tensor_cores,
                route.operand_conversion
            ),
        ));
    }
    let Some(declaration) = &symbol.declaration else {
        return Err((
            "kernel_symbol",
            "a symbol that declares what it launches (trace format 4; re-record older traces)"
                .into(),
            format!("{:?}, which declares nothing", route.kernel_symbol),
        ));
    };
    if route.backend.is_vendor() != route.vendor.is_some() {
        let say = |b: bool| {
            if b {
                "a vendor block"
            } else {
                "no vendor block"
            }
        };
        return Err((
            "vendor.library_version",
            format!(
                "{} (backend {})",
                say(route.backend.is_vendor()),
                route.backend
            ),
            say(route.vendor.is_some()).into(),
        ));
    }
    if let Some(c) = declaration.contradiction(route) {
        return Err((c.field, c.expected, c.found));
    }
    match &symbol.resources_digest {
        Some(expected) if &route.resources_digest != expected => Err((
            "resources_digest",
            expected.to_string(),
            route.resources_digest.to_string(),
        )),
        None if !route.backend.is_vendor() => Err((
            "resources_digest",
            "a resources digest the symbol declares (every custom kernel has one)".into(),
            format!("{:?}, which declares none", route.kernel_symbol),
        )),
        _ => Ok(()),
    }
}
