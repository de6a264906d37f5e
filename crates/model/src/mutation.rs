//! Route mutations, and the check that every one is refused before launch.
//!
//! Used by the audit's self-check, the property tests and the fuzz targets,
//! so all three exercise the same refusal path a user's replay takes.

use crate::digest::Digest;
use crate::error::Refusal;
use crate::identity::GemmRouteIdentity;
use crate::launch_set::build_resolved_gemm_launch_set;
use crate::plan::CapturedGemmGraphPlan;
use crate::plan::PreparedGemmCaptureManifest;
use crate::route::ResolvedGemmRoute;
use crate::trace::RecordedGemmTrace;
use std::cell::Cell;

/// One way to tamper with a route list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mutation {
    /// Drop route `i`.
    Remove(usize),
    /// Exchange routes `i` and `j`.
    Swap(usize, usize),
    /// Rename the kernel symbol of route `i`.
    Symbol(usize),
    /// Change the module kind of route `i`.
    ModuleKind(usize),
    /// Change the dtype of route `i`.
    DType(usize),
    /// Change the arguments digest of route `i`.
    ArgumentsDigest(usize),
    /// Change (or add) the tensor-map digest of route `i`.
    TensorMapDigest(usize),
    /// Change the identity field named `tag` of route `i`.
    Field(usize, &'static str),
}

impl Mutation {
    /// The named kinds the audit self-check runs, against route `i` (and `j` for swaps).
    pub fn kinds(i: usize, j: usize) -> Vec<Mutation> {
        vec![
            Mutation::Remove(i),
            Mutation::Swap(i, j),
            Mutation::Symbol(i),
            Mutation::ModuleKind(i),
            Mutation::DType(i),
            Mutation::ArgumentsDigest(i),
            Mutation::TensorMapDigest(i),
        ]
    }

    /// Short name for reports.
    pub fn name(&self) -> String {
        match self {
            Mutation::Remove(_) => "remove".into(),
            Mutation::Swap(..) => "swap".into(),
            Mutation::Symbol(_) => "symbol".into(),
            Mutation::ModuleKind(_) => "module-kind".into(),
            Mutation::DType(_) => "dtype".into(),
            Mutation::ArgumentsDigest(_) => "arguments-digest".into(),
            Mutation::TensorMapDigest(_) => "tensor-map-digest".into(),
            Mutation::Field(_, tag) => format!("field {tag}"),
        }
    }

    /// Applies the mutation. Indices wrap modulo the route count; returns
    /// false when nothing could change (empty list, or a field unknown).
    pub fn apply(&self, routes: &mut Vec<ResolvedGemmRoute>) -> bool {
        if routes.is_empty() {
            return false;
        }
        let n = routes.len();
        match *self {
            Mutation::Remove(i) => {
                routes.remove(i % n);
                true
            }
            Mutation::Swap(i, j) => {
                routes.swap(i % n, j % n);
                true
            }
            Mutation::Symbol(i) => mutate_field(&mut routes[i % n], "kernel_symbol"),
            Mutation::ModuleKind(i) => mutate_field(&mut routes[i % n], "module_kind"),
            Mutation::DType(i) => mutate_field(&mut routes[i % n], "dtype"),
            Mutation::ArgumentsDigest(i) => {
                mutate_field(&mut routes[i % n], "launch.arguments_digest")
            }
            Mutation::TensorMapDigest(i) => mutate_field(&mut routes[i % n], "tensor_map.digest"),
            Mutation::Field(i, tag) => mutate_field(&mut routes[i % n], tag),
        }
    }
}

/// Every identity field tag of a route, in framing order.
pub fn route_field_tags() -> Vec<&'static str> {
    ResolvedGemmRoute::field_tags()
}

/// Changes a digest, never into the all-zero placeholder (which the builder
/// refuses before the change could reach the digest check).
fn flip(d: &mut Digest, by: u64) {
    let at = (by % 32) as usize;
    d.0[at] ^= (by % 255) as u8 + 1;
    if d.is_zero() {
        d.0[0] = 0x02;
    }
}

fn bump_str(s: &mut String, by: u64) {
    for _ in 0..=(by % 3) {
        s.push('\'');
    }
}

/// `x` changed by a nonzero amount picked by `by` (0: by one).
fn bump32(x: u32, by: u64) -> u32 {
    x.wrapping_add((by % u32::MAX as u64) as u32 + 1)
}

fn bump64(x: u64, by: u64) -> u64 {
    x.wrapping_add(by.wrapping_add(1).max(1))
}

fn bump_i64(x: i64, by: u64) -> i64 {
    // Never a multiple of 2^64: the value always changes.
    x.wrapping_add(by.wrapping_add(1).max(1) as i64)
}

/// Changes the field named `tag` to a different value. Returns false for an
/// unknown tag, so a field added to the framing without a mutation here
/// makes the property tests fail.
pub fn mutate_field(r: &mut ResolvedGemmRoute, tag: &str) -> bool {
    mutate_field_by(r, tag, 0)
}

/// Changes the field named `tag` to a different value picked by `by`: 0
/// is the smallest change (what [`mutate_field`] makes), larger values
/// step further, cycle enums, or remove an optional group. The same `by`
/// always picks the same value, and every `by` changes the field. Returns
/// false for an unknown tag.
// Over 100 lines: one match arm per route field tag, the whole table in
// one place so a new field shows as one missing arm.
pub fn mutate_field_by(r: &mut ResolvedGemmRoute, tag: &str, by: u64) -> bool {
    use crate::route::*;
    use crate::vocab::{
        ContractKind, DType, GemmOp, ModuleKind, OperandConversion, OutputOwnership,
        PhysicalBackend,
    };
    fn next<T: Clone + PartialEq>(all: &[T], x: T, by: u64) -> T {
        let i = all.iter().position(|v| *v == x).unwrap_or(0);
        let step = 1 + (by % (all.len() as u64 - 1).max(1)) as usize;
        all[(i + step) % all.len()].clone()
    }
    match tag {
        "gemm" => bump_str(&mut r.gemm, by),
        "op" => r.op = next(GemmOp::ALL, r.op, by),
        "dtype" => r.dtype = next(DType::ALL, r.dtype, by),
        "backend" => r.backend = next(PhysicalBackend::ALL, r.backend.clone(), by),
        "contract.kind" => r.contract.kind = next(ContractKind::ALL, r.contract.kind.clone(), by),
        "contract.splits" => r.contract.splits = bump32(r.contract.splits, by),
        "instruction_family" => bump_str(&mut r.instruction_family, by),
        "instruction_shape" => bump_str(&mut r.instruction_shape, by),
        "uses_tensor_cores" => r.uses_tensor_cores = !r.uses_tensor_cores,
        "operand_conversion" => {
            r.operand_conversion = next(OperandConversion::ALL, r.operand_conversion, by)
        }
        "output_ownership" => {
            r.output_ownership = next(OutputOwnership::ALL, r.output_ownership, by)
        }
        "kernel_symbol" => bump_str(&mut r.kernel_symbol, by),
        "module_kind" => r.module_kind = next(ModuleKind::ALL, r.module_kind.clone(), by),
        "compilation_target" => bump_str(&mut r.compilation_target, by),
        "artifact_digest" => flip(&mut r.artifact_digest, by),
        "compiler.name" => bump_str(&mut r.compiler.name, by),
        "compiler.version" => bump_str(&mut r.compiler.version, by),
        "compiler.options_digest" => flip(&mut r.compiler.options_digest, by),
        "compiler.source_digest" => flip(&mut r.compiler.source_digest, by),
        "device.class" => bump_str(&mut r.device.class, by),
        "device.compute_capability" => {
            r.device.compute_capability = match r.device.compute_capability {
                Some([a, b]) => Some([a, bump32(b, by)]),
                None => Some([(by % 10) as u32, 0]),
            }
        }
        "device.multiprocessors" => r.device.multiprocessors = bump32(r.device.multiprocessors, by),
        "device.driver" => bump_str(&mut r.device.driver, by),
        "device_capabilities" => {
            if by % 2 == 1 && !r.device_capabilities.is_empty() {
                r.device_capabilities.pop();
            } else {
                r.device_capabilities.push(format!("extra{}", by % 7));
            }
        }
        "shape.m" => r.shape.m = bump64(r.shape.m, by),
        "shape.k" => r.shape.k = bump64(r.shape.k, by),
        "shape.n" => r.shape.n = bump64(r.shape.n, by),
        "strides.lda" => r.strides.lda = bump64(r.strides.lda, by),
        "strides.ldb" => r.strides.ldb = bump64(r.strides.ldb, by),
        "strides.ldc" => r.strides.ldc = bump64(r.strides.ldc, by),
        "tile.m" => r.tile.m = bump32(r.tile.m, by),
        "tile.n" => r.tile.n = bump32(r.tile.n, by),
        "tile.k" => r.tile.k = bump32(r.tile.k, by),
        "bk" => r.bk = bump32(r.bk, by),
        "stages" => r.stages = bump32(r.stages, by),
        // Keep block threads equal to route threads so the builder accepts the
        // launch and the change reaches the digest.
        "threads" => {
            let t = bump32(r.threads, by);
            r.threads = if t == 0 { r.threads.wrapping_add(2) } else { t };
            r.launch.block = [r.threads, 1, 1];
        }
        "launch.grid" => {
            let at = (by % 3) as usize;
            let g = bump32(r.launch.grid[at], by);
            r.launch.grid[at] = if g == 0 {
                r.launch.grid[at].wrapping_add(2)
            } else {
                g
            };
        }
        "launch.block" => {
            // Another shape; the route's threads follow so the builder still
            // accepts the launch and the change reaches the digest.
            let [x, y, z] = r.launch.block;
            r.launch.block = if x != y {
                [y, x, z]
            } else {
                [x, y.saturating_mul(2), z]
            };
            r.threads = r.launch.block_threads().min(u32::MAX as u64) as u32;
        }
        "launch.dynamic_shared_bytes" => {
            r.launch.dynamic_shared_bytes = bump32(r.launch.dynamic_shared_bytes, by)
        }
        "launch.arguments_digest" => flip(&mut r.launch.arguments_digest, by),
        "tensor_map.revision" | "tensor_map.digest" => match &mut r.tensor_map {
            Some(t) if tag == "tensor_map.revision" => t.revision = bump32(t.revision, by),
            // Removing the map changes its digest too.
            Some(_) if by % 4 == 3 => r.tensor_map = None,
            Some(t) => flip(&mut t.digest, by),
            None => {
                r.tensor_map = Some(TensorMapIdentity {
                    revision: (by % 3) as u32,
                    digest: Digest([1; 32]),
                })
            }
        },
        "resources_digest" => flip(&mut r.resources_digest, by),
        "tuning_table_revision" => r.tuning_table_revision = bump32(r.tuning_table_revision, by),
        "schedule_revision" => r.schedule_revision = bump32(r.schedule_revision, by),
        t if t.starts_with("vendor.") => return mutate_vendor(r, t, by),
        _ => return false,
    }
    true
}

fn mutate_vendor(r: &mut ResolvedGemmRoute, tag: &str, by: u64) -> bool {
    if !crate::route::VENDOR_TAGS.contains(&tag) {
        return false;
    }
    if r.vendor.is_some() && by % 5 == 4 {
        // Removing the block changes every vendor field.
        r.vendor = None;
        return true;
    }
    // Absent before: add a vendor block, then change the named field in it
    // too, so every vendor.* tag names a real change of that field.
    let v = r.vendor.get_or_insert_with(|| crate::route::VendorRoute {
        library_version: "synthetic".into(),
        algorithm_id: 0,
        tile_id: 0,
        split_k: 0,
        reduction_scheme: 0,
        stages_id: 0,
        swizzle: 0,
        inner_shape_id: None,
        cluster_shape_id: None,
        workspace_bytes: 0,
        physical_kernels: Vec::new(),
    });
    match tag {
        "vendor.library_version" => bump_str(&mut v.library_version, by),
        "vendor.algorithm_id" => v.algorithm_id = bump_i64(v.algorithm_id, by),
        "vendor.tile_id" => v.tile_id = bump_i64(v.tile_id, by),
        "vendor.split_k" => v.split_k = bump_i64(v.split_k, by),
        "vendor.reduction_scheme" => v.reduction_scheme = bump_i64(v.reduction_scheme, by),
        "vendor.stages_id" => v.stages_id = bump_i64(v.stages_id, by),
        "vendor.swizzle" => v.swizzle = bump_i64(v.swizzle, by),
        "vendor.inner_shape_id" => {
            v.inner_shape_id = Some(v.inner_shape_id.map_or(0, |x| bump_i64(x, by)))
        }
        "vendor.cluster_shape_id" => {
            v.cluster_shape_id = Some(v.cluster_shape_id.map_or(0, |x| bump_i64(x, by)))
        }
        "vendor.workspace_bytes" => v.workspace_bytes = bump64(v.workspace_bytes, by),
        "vendor.physical_kernels" => v.physical_kernels.push(format!("extra_kernel{}", by % 5)),
        _ => return false,
    }
    true
}

/// Applies a mutation chosen by three fuzzer bytes (kind, i, j): the
/// fuzz targets' mutator, so only with the `testkit` feature.
#[cfg(feature = "testkit")]
pub fn apply_bytes(routes: &mut Vec<ResolvedGemmRoute>, chunk: &[u8]) {
    let b = |k: usize| chunk.get(k).copied().unwrap_or(0) as usize;
    let tags = route_field_tags();
    let m = match b(0) % 8 {
        0 => Mutation::Remove(b(1)),
        1 => Mutation::Swap(b(1), b(2)),
        2 => Mutation::Symbol(b(1)),
        3 => Mutation::ModuleKind(b(1)),
        4 => Mutation::DType(b(1)),
        5 => Mutation::ArgumentsDigest(b(1)),
        6 => Mutation::TensorMapDigest(b(1)),
        _ => Mutation::Field(b(1), tags[b(2) % tags.len()]),
    };
    m.apply(routes);
}

/// What happened to one tampered route list on its way to a replay.
#[derive(Debug, Clone, Default)]
pub struct MutationOutcome {
    /// Plan construction against the golden manifest.
    pub construction: Option<Refusal>,
    /// The builder's refusal when re-digesting the tampered routes.
    pub redigest: Option<String>,
    /// Replay validation of the re-digested plan against the live context.
    pub validation: Option<Refusal>,
    /// Comparison of the re-digested plan with the golden trace.
    pub golden: Option<Refusal>,
    /// Whether any launch closure was called.
    pub launched: bool,
}

impl MutationOutcome {
    /// True when the change was refused before any launch.
    pub fn refused_before_launch(&self) -> bool {
        !self.launched
            && self.construction.is_some()
            && (self.redigest.is_some() || self.validation.is_some() || self.golden.is_some())
    }

    /// The first refusal, as text.
    pub fn first_refusal(&self) -> String {
        self.construction
            .as_ref()
            .map(|r| r.to_string())
            .or_else(|| self.redigest.clone())
            .or_else(|| self.validation.as_ref().map(|r| r.to_string()))
            .or_else(|| self.golden.as_ref().map(|r| r.to_string()))
            .unwrap_or_else(|| "accepted".into())
    }
}

/// Runs `routes` (tampered copies of `golden`'s) through both attacks: a
/// plan against the golden manifest, and a plan whose launch set was
/// re-digested to match, then guarded replays. Launch closures only record
/// that they were called.
pub fn exercise(
    golden: &RecordedGemmTrace,
    live: &GemmRouteIdentity,
    routes: Vec<ResolvedGemmRoute>,
) -> MutationOutcome {
    exercise_against(
        golden,
        golden,
        live,
        routes,
        &CapturedGemmGraphPlan::validate,
    )
}

/// A replay guard: [`CapturedGemmGraphPlan::validate`], or a stand-in a
/// self-test weakens to show that a check's absence is seen.
pub type Guard<'a> = &'a dyn Fn(&CapturedGemmGraphPlan, &GemmRouteIdentity) -> Result<(), Refusal>;

/// [`exercise`] with `routes` tampered from `source`'s, judged against a
/// separately recorded `golden` and by `guard` as replay validation: the
/// re-digested plan's `validation` is `guard`'s verdict alone, and the
/// guarded replay launches only when the golden comparison, `guard` and
/// the real validation all accept.
pub fn exercise_against(
    source: &RecordedGemmTrace,
    golden: &RecordedGemmTrace,
    live: &GemmRouteIdentity,
    routes: Vec<ResolvedGemmRoute>,
    guard: Guard<'_>,
) -> MutationOutcome {
    let launched = Cell::new(false);
    let mut out = MutationOutcome::default();
    match CapturedGemmGraphPlan::new(source.manifest(), routes.clone()) {
        Ok(plan) => {
            if guard(&plan, live).is_ok() {
                let _ = plan.with_validated_launch(live, "mutation", |_| launched.set(true));
            }
        }
        Err(r) => out.construction = Some(r),
    }
    match build_resolved_gemm_launch_set(&routes) {
        Err(e) => out.redigest = Some(e.to_string()),
        Ok(set) => {
            let manifest = PreparedGemmCaptureManifest {
                context: source.context.clone(),
                launch_set: set,
                route_capacity: set.launch_count,
            };
            match CapturedGemmGraphPlan::new(manifest, routes) {
                Err(r) => out.validation = Some(r),
                Ok(plan) => {
                    out.validation = guard(&plan, live).err();
                    out.golden = plan.check_against_golden_trace(golden).err();
                    // The guarded replay: golden comparison, then validated launch.
                    if out.golden.is_none() && out.validation.is_none() {
                        let _ =
                            plan.with_validated_launch(live, "mutation", |_| launched.set(true));
                    }
                }
            }
        }
    }
    out.launched = launched.get();
    out
}
