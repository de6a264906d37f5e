//! `CapturedGemmGraphPlan`: what a captured graph may replay, and the checks
//! that run before anything is launched.

use crate::digest::{Digest, field_changes};
use crate::error::{LaunchSetError, Refusal, RefusalStage};
use crate::identity::GemmRouteIdentity;
use crate::launch_set::{ResolvedGemmLaunchSet, build_resolved_gemm_launch_set};
use crate::route::{ModuleKind, ResolvedGemmRoute};
use crate::trace::{PreparedGemmCaptureManifest, RecordedGemmTrace};
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

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

    /// Builds the plan of a recorded trace (its own manifest and routes).
    pub fn from_trace(trace: &RecordedGemmTrace) -> Result<Self, Refusal> {
        Self::new(trace.manifest(), trace.routes.clone())
    }

    pub fn manifest(&self) -> &PreparedGemmCaptureManifest {
        &self.manifest
    }

    pub fn routes(&self) -> &[ResolvedGemmRoute] {
        &self.routes
    }

    pub fn launch_set(&self) -> &ResolvedGemmLaunchSet {
        &self.manifest.launch_set
    }

    /// Walks the whole plan against `live`: the context must equal the
    /// plan's, and every route must be servable. Does not touch the cache.
    pub fn validate(&self, live: &GemmRouteIdentity) -> Result<(), Refusal> {
        if live != &self.manifest.context {
            return Err(context_refusal(
                RefusalStage::ReplayValidation,
                &self.manifest.context,
                live,
            ));
        }
        let index = ModuleIndex::new(live);
        for (i, route) in self.routes.iter().enumerate() {
            check_servable(live, &index, i as u64, route)?;
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
        if golden.context != self.manifest.context {
            return Err(context_refusal(
                RefusalStage::GoldenComparison,
                &golden.context,
                &self.manifest.context,
            ));
        }
        compare_launch_sets(
            RefusalStage::GoldenComparison,
            &golden.launch_set,
            &self.manifest.launch_set,
        )
    }

    /// Like [`Self::check_against_golden`], but with the golden routes at
    /// hand, so a refusal names the first differing route and its fields.
    pub fn check_against_golden_trace(&self, golden: &RecordedGemmTrace) -> Result<(), Refusal> {
        for (i, (g, c)) in golden.routes.iter().zip(&self.routes).enumerate() {
            if let Some(r) = Refusal::with_changes(
                RefusalStage::GoldenComparison,
                Some(i as u64),
                field_changes(g, c),
            ) {
                return Err(r);
            }
        }
        self.check_against_golden(&golden.manifest())
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

fn compare_launch_sets(
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

fn context_refusal(
    stage: RefusalStage,
    expected: &GemmRouteIdentity,
    found: &GemmRouteIdentity,
) -> Refusal {
    // Same fields but different lengths (e.g. a module added) name no field: name the digest.
    Refusal::with_changes(stage, None, field_changes(expected, found))
        .unwrap_or_else(|| Refusal::new(stage, None, "context", expected.digest(), found.digest()))
}

/// Symbols served by each loaded module, indexed once per validation walk.
struct ModuleIndex<'a> {
    symbols: HashMap<(ModuleKind, &'a Digest), HashSet<&'a str>>,
}

impl<'a> ModuleIndex<'a> {
    fn new(live: &'a GemmRouteIdentity) -> Self {
        let symbols = live
            .modules
            .iter()
            .map(|m| {
                (
                    (m.kind, &m.digest),
                    m.symbols.iter().map(String::as_str).collect(),
                )
            })
            .collect();
        ModuleIndex { symbols }
    }
}

fn check_servable(
    live: &GemmRouteIdentity,
    index: &ModuleIndex<'_>,
    i: u64,
    route: &ResolvedGemmRoute,
) -> Result<(), Refusal> {
    let stage = RefusalStage::ReplayValidation;
    let expected_kind = route.backend.module_kind();
    if route.module_kind != expected_kind {
        return Err(Refusal::new(
            stage,
            Some(i),
            "module_kind",
            expected_kind,
            route.module_kind,
        ));
    }
    if !live.permitted_backends.contains(&route.backend) {
        return Err(Refusal::new(
            stage,
            Some(i),
            "backend",
            "a backend the live context permits",
            route.backend,
        ));
    }
    if !live.permitted_contracts.contains(&route.contract.kind) {
        return Err(Refusal::new(
            stage,
            Some(i),
            "contract.kind",
            "a contract the live context permits",
            route.contract.kind,
        ));
    }
    if let Some((field, why)) = live.policy.refuse_route(route) {
        let found = match field {
            "backend" => route.backend.to_string(),
            "uses_tensor_cores" => route.uses_tensor_cores.to_string(),
            _ => format!("{} {}", route.dtype, route.contract),
        };
        return Err(Refusal::new(stage, Some(i), field, why, found));
    }
    let Some(symbols) = index
        .symbols
        .get(&(route.module_kind, &route.artifact_digest))
    else {
        return Err(Refusal::new(
            stage,
            Some(i),
            "artifact_digest",
            format!("a loaded {} module", route.module_kind),
            route.artifact_digest,
        ));
    };
    if !symbols.contains(route.kernel_symbol.as_str()) {
        return Err(Refusal::new(
            stage,
            Some(i),
            "kernel_symbol",
            "a symbol the live module serves",
            format!("{:?}", route.kernel_symbol),
        ));
    }
    if route.device != live.device {
        let c = field_changes(&live.device, &route.device);
        let (field, exp, found) = c
            .first()
            .map(|c| (c.field.clone(), c.expected.clone(), c.found.clone()))
            .unwrap_or_else(|| ("device".into(), String::new(), String::new()));
        return Err(Refusal::new(stage, Some(i), field, exp, found));
    }
    // Vendor routes carry the library's identity in `vendor`; custom kernels
    // must come from the live compiler.
    if !route.backend.is_vendor() && route.compiler != live.compiler {
        let c = field_changes(&live.compiler, &route.compiler);
        let (field, exp, found) = c
            .first()
            .map(|c| (c.field.clone(), c.expected.clone(), c.found.clone()))
            .unwrap_or_else(|| ("compiler".into(), String::new(), String::new()));
        return Err(Refusal::new(stage, Some(i), field, exp, found));
    }
    Ok(())
}
