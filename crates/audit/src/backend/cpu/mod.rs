//! The CPU reference backend: real GEMM kernels in Rust (see [`kernels`]),
//! their routes and module set, and a CPU "graph" whose replays go only
//! through [`crate::plan::CapturedGemmGraphPlan::with_validated_launch`].

pub mod kernels;
mod stream;

pub use stream::{CpuStream, CpuStreamError, CpuStreamGraph};

use crate::GemmRouteBuilder;
use crate::backend::{CapturedLaunches, GemmBackend, GemmGraph};
use crate::declaration::{BkRule, SplitRule, SymbolDeclaration};
use crate::digest::{Digest, DigestWriter, FieldValue};
use crate::identity::{
    GemmRouteIdentity, ModuleIdentity, Revisions, SymbolEntry, VolatileMetadata,
};
use crate::kernels::{
    DISPATCH_SPLITS, GemmSpec, KernelFamily, Problem, RouteChoice, RouteFamilyError,
    TUNING_TABLE_REVISION, to_storage_bytes,
};
use crate::physical::kernel_nodes;
use crate::policy::GemmPolicy;
use crate::route::{GemmShape, GemmStrides, ResolvedGemmRoute, TileShape};
use crate::vocab::{ContractKind, DType, GemmOp, ModuleKind, OperandConversion, PhysicalBackend};
use crate::{CompilerIdentity, DeviceIdentity};
use crate::{Error, Refusal, Result};

/// Worker threads of the tiled and fixed split-K kernels. Fixed, not the
/// machine's core count, so routes (and goldens) are the same everywhere.
pub const WORKERS: u32 = 4;
/// Output tile of the tiled and fixed split-K kernels.
pub const TILE: u32 = 32;
/// Revision of the kernels' work schedule (tile order, worker assignment).
pub const SCHEDULE_REVISION: u32 = 1;

/// The kernels' source: its digest is part of the compiler identity, so an
/// edited kernel is a different artifact.
const KERNEL_SOURCE: &[u8] = include_bytes!("kernels.rs");
/// Revision of the CPU kernels' numerics, the CPU compiler's version in
/// every CPU route. `KERNEL_SOURCE` (the kernels without their tests,
/// which live in `kernels_tests.rs`) changes with every edit; bump this
/// when the kernels' arithmetic changes without their text doing so.
pub const CPU_KERNELS_REVISION: &str = "1";

/// A kernel of the CPU module: one of the [`KernelFamily`]s it serves
/// (scalar FMA, tiled, fixed and atomic split-K; the tensor-core families
/// are CUDA only). What a family promises is [`KernelFamily`]'s; what is
/// the CPU's own (symbol spelling, workers, tile) is here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CpuKernel(KernelFamily);

/// The families the CPU module serves, with the family part of their
/// symbols.
const CPU_FAMILIES: [(KernelFamily, &str); 4] = [
    (KernelFamily::ScalarFma, "scalar_fma"),
    (KernelFamily::Tiled, "tiled32x32"),
    (KernelFamily::SplitKFixed(1), "split_k_fixed"),
    (KernelFamily::SplitKAtomic(1), "split_k_atomic"),
];

/// The CPU module's symbol of `family` for one op and dtype.
fn cpu_symbol(family: KernelFamily, op: GemmOp, dtype: DType) -> String {
    format!("cpu_{}_{}_{}", CpuKernel::symbol_part(family), op, dtype)
}

/// A kernel family the CPU module has no kernel of (the family asked for).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("route {0} needs the CUDA backend")]
pub struct NoCpuKernel(pub KernelFamily);

/// Why [`CpuKernel::from_route`] refused a stored route.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CpuRouteError {
    /// The route was produced by another backend (the route's backend).
    #[error("backend {0} is not the CPU reference")]
    Backend(PhysicalBackend),
    /// The route names no CPU kernel, or one whose contract, dtype or
    /// split count it contradicts.
    #[error(transparent)]
    Family(#[from] RouteFamilyError),
}

impl CpuKernel {
    /// The scalar-FMA reference kernel.
    pub const SCALAR_FMA: CpuKernel = CpuKernel(KernelFamily::ScalarFma);
    /// The tiled kernel.
    pub const TILED: CpuKernel = CpuKernel(KernelFamily::Tiled);

    /// The CPU kernel of `family`; refused (naming the family) when the
    /// CPU module has none.
    pub fn new(family: KernelFamily) -> std::result::Result<CpuKernel, NoCpuKernel> {
        if CPU_FAMILIES.iter().any(|(f, _)| f.name() == family.name()) {
            Ok(CpuKernel(family))
        } else {
            Err(NoCpuKernel(family))
        }
    }

    /// The kernel's family.
    pub fn family(&self) -> KernelFamily {
        self.0
    }

    fn symbol_part(family: KernelFamily) -> &'static str {
        CPU_FAMILIES
            .iter()
            .find(|(f, _)| f.name() == family.name())
            .map_or("none", |(_, part)| part)
    }

    /// The kernel symbol for one op and dtype.
    pub fn symbol(&self, op: GemmOp, dtype: DType) -> String {
        cpu_symbol(self.0, op, dtype)
    }

    /// The kernel a stored route names. Refuses routes this backend did not
    /// produce or whose fields disagree with the symbol.
    pub fn from_route(route: &ResolvedGemmRoute) -> std::result::Result<CpuKernel, CpuRouteError> {
        if route.backend != PhysicalBackend::CpuReference {
            return Err(CpuRouteError::Backend(route.backend.clone()));
        }
        let families = CPU_FAMILIES.map(|(f, _)| f);
        let family = KernelFamily::of_route(&families, route, cpu_symbol)?;
        Ok(CpuKernel(family))
    }

    /// Output tile and threads per task of the family (the atomic control
    /// runs one thread per split: `None`).
    fn tile_and_threads(&self) -> (TileShape, Option<u32>) {
        let square = TileShape {
            m: TILE,
            n: TILE,
            k: 1,
        };
        let one = TileShape { m: 1, n: 1, k: 1 };
        match self.0 {
            KernelFamily::Tiled | KernelFamily::SplitKFixed(_) => (square, Some(WORKERS)),
            KernelFamily::SplitKAtomic(_) => (one, None),
            // Scalar FMA (`new` admits no other family).
            _ => (one, Some(1)),
        }
    }

    /// The resources of the family: its workers and tile. The same for
    /// every split count, so one symbol declares them.
    fn resources(&self) -> Digest {
        let (tile, threads) = self.tile_and_threads();
        let mut w = DigestWriter::new("gemm-audit/cpu-resources/v1");
        match threads {
            Some(t) => w.field("workers", FieldValue::U32(t)),
            None => w.field("workers", FieldValue::Str("one per split")),
        }
        w.field("tile", FieldValue::U32x3([tile.m, tile.n, tile.k]));
        w.finish()
    }

    /// What the family's symbols launch.
    fn declaration(&self) -> SymbolDeclaration {
        let (_, ownership) = self.0.contract();
        let splits = if self.0.is_split() {
            SplitRule::GridZ
        } else {
            SplitRule::Unsplit
        };
        SymbolDeclaration::new("scalar-fma", "1x1x1", ownership, splits, BkRule::PerSplit)
            .with_tile(self.tile_and_threads().0, 1)
            .with_capabilities(vec!["f32-fused-multiply-add".into()])
    }

    /// Runs the kernel; returns f32 accumulators (not yet rounded to dtype).
    fn execute(&self, p: &Problem, a: &[f32], b: &[f32]) -> Vec<f32> {
        let mut c = vec![0.0f32; p.c_len()];
        match self.0 {
            KernelFamily::Tiled => kernels::tiled(
                p,
                a,
                b,
                &mut c,
                TILE as usize,
                TILE as usize,
                WORKERS as usize,
            ),
            KernelFamily::SplitKFixed(s) => kernels::split_k_fixed(p, a, b, &mut c, s as usize),
            KernelFamily::SplitKAtomic(s) => kernels::split_k_atomic(p, a, b, &mut c, s as usize),
            // Scalar FMA (`new` admits no other family).
            _ => kernels::scalar_fma(p, a, b, &mut c),
        }
        c
    }
}

/// Every symbol the CPU module serves, with what it serves, sorted.
pub fn module_symbols() -> Vec<SymbolEntry> {
    let mut out = Vec::new();
    for k in CPU_FAMILIES.map(|(f, _)| CpuKernel(f)) {
        let (contract, _) = k.0.contract();
        for op in GemmOp::ALL {
            for dtype in DType::ALL {
                out.push(
                    SymbolEntry::new(k.symbol(*op, *dtype))
                        .serving(&[*op], &[*dtype], &contract, false)
                        .with_resources(k.resources())
                        .declaring(k.declaration()),
                );
            }
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

fn compiler_identity() -> CompilerIdentity {
    let mut options = DigestWriter::new("gemm-audit/cpu-options/v1");
    options.field("accumulate", FieldValue::Str("f32"));
    options.field(
        "fma",
        FieldValue::Str("f32::mul_add (fused, round-to-nearest-even)"),
    );
    options.field("output", FieldValue::Str("round-to-nearest-even to dtype"));
    options.field("workers", FieldValue::U32(WORKERS));
    options.field("tile", FieldValue::U32(TILE));
    CompilerIdentity {
        name: "gemm-audit-cpu".into(),
        // The kernels' own revision, not the crate's version: a release
        // that leaves `kernels.rs` alone must not red every CPU golden.
        version: CPU_KERNELS_REVISION.into(),
        options_digest: options.finish(),
        source_digest: kernel_source_digest(),
    }
}

/// The kernels' text and the operand storage and seeding they share with
/// every backend (`gemm_audit_model::kernels::operands`).
fn kernel_source_digest() -> Digest {
    Digest::sha256(&[KERNEL_SOURCE, crate::kernels::OPERANDS_SOURCE].concat())
}

fn module_digest(compiler: &CompilerIdentity, symbols: &[String]) -> Digest {
    let mut w = DigestWriter::new("gemm-audit/cpu-module/v1");
    w.frame(compiler);
    w.field("symbols", FieldValue::StrList(symbols));
    w.finish()
}

/// The CPU device identity: architecture only. Model and core count are
/// volatile metadata (they do not change the bits of these kernels).
pub fn device_identity() -> DeviceIdentity {
    DeviceIdentity {
        class: format!("cpu/{}", std::env::consts::ARCH),
        compute_capability: None,
        multiprocessors: 0,
        driver: "none".into(),
    }
}

/// Facts about this machine kept as volatile metadata.
pub fn volatile_metadata() -> VolatileMetadata {
    let mut v = VolatileMetadata::new();
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    v.insert("cpu.model".into(), model);
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    v.insert("cpu.logical_cores".into(), cores.to_string());
    v.insert("cpu.features".into(), cpu_features());
    v.insert("os".into(), std::env::consts::OS.into());
    v
}

fn cpu_features() -> String {
    #[cfg(target_arch = "x86_64")]
    {
        let mut f = Vec::new();
        if std::arch::is_x86_feature_detected!("fma") {
            f.push("fma");
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            f.push("avx2");
        }
        if std::arch::is_x86_feature_detected!("avx512f") {
            f.push("avx512f");
        }
        if std::arch::is_x86_feature_detected!("sha") {
            f.push("sha");
        }
        f.join(",")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        String::new()
    }
}

/// The CPU reference backend.
#[derive(Debug, Clone)]
pub struct CpuBackend {
    context: GemmRouteIdentity,
}

impl Default for CpuBackend {
    fn default() -> Self {
        CpuBackend::new(GemmPolicy::CPU_DEFAULT)
    }
}

impl CpuBackend {
    /// A CPU backend under `policy`.
    pub fn new(policy: GemmPolicy) -> Self {
        let compiler = compiler_identity();
        let symbols = module_symbols();
        let names: Vec<String> = symbols.iter().map(|s| s.name.clone()).collect();
        let module = ModuleIdentity::new(
            PhysicalBackend::CpuReference,
            ModuleKind::CpuReference,
            module_digest(&compiler, &names),
            compiler,
            std::env::consts::ARCH,
            symbols,
        );
        let context = GemmRouteIdentity::new(
            policy,
            vec![module],
            device_identity(),
            Revisions {
                tuning_table: TUNING_TABLE_REVISION,
                schedule: SCHEDULE_REVISION,
                tensor_map: 0,
            },
        );
        CpuBackend { context }
    }

    /// The kernel the shape-based dispatcher picks: fixed split-K for small
    /// m and long k (when the policy permits it for the dtype), tiled
    /// otherwise. Like a vendor heuristic, deterministic but not batch invariant.
    pub fn dispatch(&self, dtype: DType, m: u64, k: u64) -> CpuKernel {
        let split_ok = self
            .context
            .policy
            .refuse_contract(dtype, &ContractKind::SplitKFixed)
            .is_none();
        if crate::kernels::dispatch_split_k(m, k, split_ok) {
            CpuKernel(KernelFamily::SplitKFixed(DISPATCH_SPLITS))
        } else {
            CpuKernel::TILED
        }
    }

    /// The route of `kernel` on one problem.
    pub fn route(
        &self,
        gemm: &str,
        op: GemmOp,
        dtype: DType,
        shape: GemmShape,
        kernel: CpuKernel,
    ) -> Result<ResolvedGemmRoute> {
        let GemmShape { m, k, n } = shape;
        let (kind, ownership) = kernel.0.contract();
        let splits = kernel.0.splits();
        let strides = GemmStrides::dense(op, shape);
        let tiles = |x: u64| x.div_ceil(TILE as u64).min(u32::MAX as u64) as u32;
        let (tile, threads) = kernel.tile_and_threads();
        let (threads, grid) = match (kernel.0, threads) {
            // The atomic control: one thread per split.
            (_, None) => (splits, [1, 1, splits]),
            // One task per output element.
            (KernelFamily::ScalarFma, Some(t)) => (t, [n as u32, m as u32, 1]),
            // One task per output tile (and split).
            (_, Some(t)) => (t, [tiles(n), tiles(m), splits]),
        };
        let symbol = kernel.symbol(op, dtype);
        let arguments_digest = crate::kernels::gemm_arguments_digest(
            "gemm-audit/cpu-arguments/v1",
            &symbol,
            shape,
            strides,
            splits,
        );
        // The module's declaration of the symbol fills in the rest
        // (instruction, ownership, tile, k block, stages, capabilities,
        // resources), and the builder refuses a route that contradicts it.
        GemmRouteBuilder::new(&self.context, &self.context.modules[0], &symbol, gemm)
            .problem(op, dtype, shape)
            .contract(kind, splits)
            .numerics(OperandConversion::ExactWiden, ownership)
            .tile(
                tile,
                k.div_ceil(splits as u64).min(u32::MAX as u64) as u32,
                1,
            )
            .launch(grid, [threads, 1, 1], 0, arguments_digest)
            .build()
            .map_err(|e| Error::backend("cpu", format!("GEMM {gemm:?}: {e}")))
    }
}

impl GemmBackend for CpuBackend {
    type Launches = CpuLaunches;

    fn name(&self) -> &str {
        "cpu"
    }

    fn context(&self) -> &GemmRouteIdentity {
        &self.context
    }

    fn volatile(&self) -> VolatileMetadata {
        volatile_metadata()
    }

    fn with_policy(&self, policy: GemmPolicy) -> CpuBackend {
        CpuBackend::new(policy)
    }

    /// Resolves a GEMM to its route. Tensor-core and vendor routes exist
    /// only on the CUDA backend.
    fn resolve(&self, spec: &GemmSpec) -> Result<ResolvedGemmRoute> {
        let kernel = match spec.route {
            RouteChoice::Policy => self.dispatch(spec.dtype, spec.m, spec.k),
            RouteChoice::Kernel(family) => CpuKernel::new(family)
                .map_err(|e| Error::backend("cpu", format!("GEMM {:?}: {e}", spec.name)))?,
            other @ (RouteChoice::Cublas
            | RouteChoice::CublasLt
            | RouteChoice::CublasLtInvariant
            | RouteChoice::BatchInvariant) => {
                return Err(Error::backend(
                    "cpu",
                    format!("GEMM {:?}: route {other} needs the CUDA backend", spec.name),
                ));
            }
        };
        self.route(
            &spec.name,
            spec.op,
            spec.dtype,
            GemmShape {
                m: spec.m,
                k: spec.k,
                n: spec.n,
            },
            kernel,
        )
    }

    /// Runs one route eagerly on inputs seeded by `seed`; returns the output
    /// in storage bytes.
    fn run(&self, route: &ResolvedGemmRoute, seed: u64) -> Result<Vec<u8>> {
        let launch = CpuLaunch::prepare(route, seed)?;
        Ok(launch.execute())
    }

    /// [`GemmBackend::run`], timing the kernel alone on the host clock (the
    /// inputs are seeded before the clock starts).
    fn run_timed(
        &self,
        route: &ResolvedGemmRoute,
        seed: u64,
    ) -> Result<crate::kernels::TimedOutput> {
        let launch = CpuLaunch::prepare(route, seed)?;
        let (a, b) = launch.inputs();
        let start = std::time::Instant::now();
        let output = launch.execute_on(&a, &b);
        Ok(crate::kernels::TimedOutput {
            output,
            seconds: start.elapsed().as_secs_f64(),
            clock: crate::kernels::TimingClock::HostKernel,
        })
    }

    fn capture_launches(
        &self,
        routes: &[ResolvedGemmRoute],
        seeds: &[u64],
    ) -> Result<CapturedLaunches<CpuLaunches>> {
        let launches = routes
            .iter()
            .zip(seeds)
            .map(|(route, &seed)| CpuLaunch::prepare(route, seed))
            .collect::<Result<Vec<_>>>()?;
        Ok(CapturedLaunches {
            launches: CpuLaunches(launches),
            routes: routes.to_vec(),
            physical: kernel_nodes(routes),
        })
    }

    fn launch(&self, launches: &CpuLaunches) -> Result<Vec<Vec<u8>>> {
        Ok(launches.execute_all())
    }
}

/// The scalar-FMA reference output of `route`'s problem (any backend's
/// route) on the inputs seeded by `seed`, computed on the CPU.
pub fn reference_output(route: &ResolvedGemmRoute, seed: u64) -> Result<Vec<u8>> {
    let problem = checked_problem(route)?;
    let launch = CpuLaunch {
        kernel: CpuKernel::SCALAR_FMA,
        problem,
        dtype: route.dtype,
        seed,
    };
    Ok(launch.execute())
}

/// One frozen launch of a CPU graph: kernel, problem and inputs.
#[derive(Debug, Clone)]
/// One launch, decided. Its operands are seeded when it executes, not when
/// it is prepared: a captured graph of many GEMMs then holds one GEMM's
/// operands at a time, which is what the memory budget assumes.
struct CpuLaunch {
    kernel: CpuKernel,
    problem: Problem,
    dtype: DType,
    seed: u64,
}

/// The problem of `route`, refused when an operand exceeds the limit.
fn checked_problem(route: &ResolvedGemmRoute) -> Result<Problem> {
    let GemmShape { m, k, n } = route.shape;
    for (what, a, b) in [("A", m, k), ("B", k, n), ("C", m, n)] {
        if a.checked_mul(b)
            .is_none_or(|e| e > crate::kernels::MAX_ELEMENTS)
        {
            return Err(Error::backend(
                "cpu",
                format!(
                    "route {:?}: operand {what} is too large ({a} x {b})",
                    route.gemm
                ),
            ));
        }
    }
    Ok(Problem {
        op: route.op,
        m: m as usize,
        k: k as usize,
        n: n as usize,
    })
}

impl CpuLaunch {
    fn prepare(route: &ResolvedGemmRoute, seed: u64) -> Result<CpuLaunch> {
        // A route this backend would not have produced (a symbol relabelled
        // to a kernel of another family, say) is refused before launch, as
        // a finding, not a backend failure.
        let kernel = CpuKernel::from_route(route).map_err(|reason| {
            Error::from(Refusal::new(
                crate::RefusalStage::ReplayValidation,
                None,
                "kernel_symbol",
                "a route the CPU reference backend produces",
                format!("route {:?}: {reason}", route.gemm),
            ))
        })?;
        let problem = checked_problem(route)?;
        Ok(CpuLaunch {
            kernel,
            problem,
            dtype: route.dtype,
            seed,
        })
    }

    /// The seeded operands A and B.
    fn inputs(&self) -> (Vec<f32>, Vec<f32>) {
        crate::kernels::seeded_inputs(&self.problem, self.dtype, self.seed)
    }

    /// Runs the kernel on `a` and `b`; returns C in storage bytes.
    fn execute_on(&self, a: &[f32], b: &[f32]) -> Vec<u8> {
        let c = self.kernel.execute(&self.problem, a, b);
        to_storage_bytes(self.dtype, &c)
    }

    fn execute(&self) -> Vec<u8> {
        let (a, b) = self.inputs();
        self.execute_on(&a, &b)
    }
}

/// A captured CPU graph: the frozen launch list and the plan it may replay.
pub type CpuGraph = GemmGraph<CpuLaunches>;

/// The launches of a CPU graph, frozen at capture.
#[derive(Debug)]
pub struct CpuLaunches(Vec<CpuLaunch>);

impl CpuLaunches {
    fn execute_all(&self) -> Vec<Vec<u8>> {
        self.0.iter().map(CpuLaunch::execute).collect()
    }

    /// Runs the launches WITHOUT validation. Only for measuring what
    /// validation costs (the `bench` feature; never in the binary).
    #[cfg(feature = "bench")]
    pub fn replay_unvalidated(&self) -> Vec<Vec<u8>> {
        self.execute_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PreparedGemmCaptureManifest;
    use crate::launch_set::build_resolved_gemm_launch_set;
    use crate::workload::Workload;

    #[test]
    fn every_resolved_route_is_served_by_the_module() {
        let cpu = CpuBackend::default();
        let module = &cpu.context().modules[0];
        for name in crate::workload::BUILTINS {
            for g in Workload::builtin(name).unwrap().gemms {
                let cuda_only = g.route.is_vendor()
                    || g.route == RouteChoice::BatchInvariant
                    || g.route.family().is_some_and(|f| f.is_mma());
                if cuda_only {
                    let e = cpu.resolve(&g).unwrap_err().to_string();
                    assert!(e.contains("needs the CUDA backend"), "{e}");
                    continue;
                }
                let r = cpu.resolve(&g).unwrap();
                // Served, and for exactly this route's op, dtype and contract.
                let entry = module.symbol(&r.kernel_symbol).expect("symbol served");
                assert!(
                    entry.serves(&crate::identity::Service::of(&r)),
                    "{}",
                    r.kernel_symbol
                );
                // And the route is what the symbol declares it launches.
                let declared = entry.declaration.as_ref().expect("declared");
                assert_eq!(declared.contradiction(&r), None, "{}", r.kernel_symbol);
                assert_eq!(entry.resources_digest, Some(r.resources_digest));
                assert!(
                    cpu.context()
                        .module(&r.module_kind, &r.artifact_digest)
                        .is_some()
                );
                assert_eq!(
                    CpuKernel::from_route(&r).unwrap().symbol(r.op, r.dtype),
                    r.kernel_symbol
                );
            }
        }
    }

    #[test]
    fn dispatcher_depends_on_m() {
        let cpu = CpuBackend::default();
        assert_eq!(
            cpu.dispatch(DType::Bf16, 1, 512),
            CpuKernel(KernelFamily::SplitKFixed(DISPATCH_SPLITS))
        );
        assert_eq!(cpu.dispatch(DType::Bf16, 64, 512), CpuKernel::TILED);
        // f32 under the exact policy never splits.
        let exact = CpuBackend::new(GemmPolicy {
            f32: crate::F32Policy::Exact,
            ..GemmPolicy::CPU_DEFAULT
        });
        assert_eq!(exact.dispatch(DType::F32, 1, 512), CpuKernel::TILED);
        assert_eq!(
            cpu.dispatch(DType::F32, 1, 512),
            CpuKernel(KernelFamily::SplitKFixed(DISPATCH_SPLITS))
        );
    }

    #[test]
    fn graph_replays_what_ran_eagerly_and_refuses_other_contexts() {
        let cpu = CpuBackend::default();
        let w = Workload::builtin("m-sweep").unwrap();
        let routes: Vec<_> = w
            .gemms
            .iter()
            .take(4)
            .map(|g| cpu.resolve(g).unwrap())
            .collect();
        let seeds = vec![7u64; routes.len()];
        let eager: Vec<_> = routes.iter().map(|r| cpu.run(r, 7).unwrap()).collect();
        let set = build_resolved_gemm_launch_set(&routes).unwrap();
        let manifest = PreparedGemmCaptureManifest {
            context: cpu.context().clone(),
            launch_set: set,
            route_capacity: set.launch_count,
        };
        let graph = cpu.capture(&manifest, &routes, &seeds).unwrap();
        assert_eq!(cpu.replay(&graph, "t").unwrap(), eager);
        let other = CpuBackend::new(GemmPolicy {
            half: crate::HalfPolicy::Tiled,
            ..GemmPolicy::CPU_DEFAULT
        });
        match other.replay(&graph, "t") {
            Err(Error::Refused(refusal)) => assert_eq!(refusal.change().field, "policy.half"),
            other => panic!("expected a refusal, got {other:?}"),
        }
        // A capture request short of the manifest's count is refused.
        assert!(cpu.capture(&manifest, &routes[..3], &seeds[..3]).is_err());
    }

    #[test]
    fn tampered_route_cannot_pick_a_kernel() {
        let cpu = CpuBackend::default();
        let spec = &Workload::builtin("m-sweep").unwrap().gemms[0];
        let mut r = cpu.resolve(spec).unwrap();
        r.kernel_symbol = "cpu_split_k_atomic_nn_bf16".into();
        assert!(CpuKernel::from_route(&r).is_err());
    }

    #[test]
    fn cpu_kernel_errors_name_the_bad_value() {
        let e = CpuKernel::new(KernelFamily::MmaLarge).unwrap_err();
        assert_eq!(e, NoCpuKernel(KernelFamily::MmaLarge));
        assert!(e.to_string().contains("route mma-large "), "{e}");
        let cpu = CpuBackend::default();
        let spec = &Workload::builtin("m-sweep").unwrap().gemms[0];
        let mut r = cpu.resolve(spec).unwrap();
        r.backend = PhysicalBackend::CudaNvrtc;
        let e = CpuKernel::from_route(&r).unwrap_err();
        assert_eq!(e, CpuRouteError::Backend(PhysicalBackend::CudaNvrtc));
        assert!(e.to_string().contains("cuda-nvrtc"), "{e}");
        r.backend = PhysicalBackend::CpuReference;
        r.kernel_symbol = "cpu_nosuch_nn_f32".into();
        let e = CpuKernel::from_route(&r).unwrap_err().to_string();
        assert!(e.contains("\"cpu_nosuch_nn_f32\""), "{e}");
    }
}

#[cfg(test)]
mod identity_tests {
    use super::*;

    /// The CPU module's identity is the kernels' text and revision: no
    /// test code in the digested file, no crate version in the compiler.
    #[test]
    fn the_cpu_identity_digests_the_kernels_alone() {
        let source = std::str::from_utf8(KERNEL_SOURCE).unwrap();
        assert!(
            !source.contains("#[test]"),
            "tests in the digested kernels.rs"
        );
        let c = compiler_identity();
        assert_eq!(c.version, CPU_KERNELS_REVISION);
        assert_eq!(c.source_digest, kernel_source_digest());
        let operands = crate::kernels::OPERANDS_SOURCE;
        assert!(!std::str::from_utf8(operands).unwrap().contains("#[test]"));
    }
}
