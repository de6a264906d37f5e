//! The CUDA backend: device, NVRTC module, routes, eager runs, capture,
//! introspection and validated replay.
//!
//! Default policy ([`CUDA_DEFAULT_POLICY`]): deterministic mode, tensor
//! cores permitted (the mma routes), f32 policy `tf32` and half policy
//! `streamk`, i.e. deterministic but not scalar-exact contracts (fixed
//! split-K) are permitted for every dtype, as on the CPU backend, so the
//! built-in workloads (which use fixed split-K on f32) replay. No TF32
//! kernel exists here, so the f32 policy only admits fixed split-K.

use super::catalog::{self, CudaKernel, Geometry};
use super::graph;
use super::nvrtc;
use super::vendor::{Api, Handles, Vendor, VendorCall};
use crate::backend::cpu::kernels::{self as cpu_kernels, Problem};
use crate::digest::{Digest, DigestWriter, FieldValue};
use crate::error::{Error, Result};
use crate::identity::{
    CompilerIdentity, DeviceIdentity, GemmRouteIdentity, ModuleIdentity, Revisions,
    VolatileMetadata,
};
use crate::launch_set::build_resolved_gemm_launch_set;
use crate::physical::{NodeKind, PhysicalNode};
use crate::plan::CapturedGemmGraphPlan;
use crate::policy::{F32Policy, GemmPolicy, HalfPolicy, PolicyMode};
use crate::route::{
    DType, GemmOp, GemmShape, LaunchConfig, ModuleKind, NumericContract, OperandConversion,
    OutputOwnership, PhysicalBackend, ResolvedGemmRoute, TileShape,
};
use crate::trace::{FINGERPRINT_CHUNK_BYTES, OutputFingerprint, PreparedGemmCaptureManifest};
use crate::workload::{GemmSpec, RouteChoice};
use cudarc::driver::sys;
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaGraph as RawGraph, CudaModule, CudaSlice, CudaStream,
    LaunchConfig as CuLaunch, PushKernelArg,
};
use cudarc::nvrtc::Ptx;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

/// The CUDA backend's default policy (see the module documentation).
pub const CUDA_DEFAULT_POLICY: GemmPolicy = GemmPolicy {
    mode: PolicyMode::Deterministic,
    tensor_cores: true,
    f32: F32Policy::Tf32,
    half: HalfPolicy::StreamK,
};

/// B's seed is the launch seed plus this, exactly as on the CPU backend.
const B_SEED_OFFSET: u64 = 0x9e37_79b9_7f4a_7c15;

/// A backend error naming CUDA.
pub(crate) fn cuda_err(reason: impl Into<String>) -> Error {
    Error::Backend {
        backend: "cuda".into(),
        reason: reason.into(),
    }
}

/// The driver as it changes bits: the kernel-module version (e.g.
/// `580.159.04`, read from `/proc/driver/nvidia/version` on Linux) and the
/// CUDA driver API version it implements. A driver upgrade usually keeps the
/// API version, so the module version is what makes it visible.
fn driver_identity(api: i32) -> String {
    let api = format!("{}.{}", api / 1000, (api % 1000) / 10);
    let module = std::fs::read_to_string("/proc/driver/nvidia/version")
        .ok()
        .and_then(|s| {
            // "NVRM version: NVIDIA UNIX [Open ]Kernel Module for x86_64  580.159.04  Release Build ..."
            let line = s.lines().find(|l| l.contains("Kernel Module"))?;
            line.split_whitespace()
                .find(|w| w.contains('.') && w.chars().all(|c| c.is_ascii_digit() || c == '.'))
                .map(str::to_string)
        });
    match module {
        Some(m) => format!("{m} (CUDA {api})"),
        None => format!("unknown kernel module (CUDA {api})"),
    }
}

fn drv(what: &str) -> impl FnOnce(cudarc::driver::DriverError) -> Error + '_ {
    move |e| cuda_err(format!("{what}: {e}"))
}

/// One compiled NVRTC module: identity, functions and their resources.
#[derive(Debug)]
pub(crate) struct LoadedModule {
    pub identity: ModuleIdentity,
    functions: HashMap<String, (CudaFunction, Digest)>,
    _module: Arc<CudaModule>,
}

impl LoadedModule {
    fn load(
        ctx: &Arc<CudaContext>,
        cubin: Vec<u8>,
        symbols: &[String],
        compiler: &CompilerIdentity,
        arch: &str,
    ) -> std::result::Result<LoadedModule, String> {
        let digest = Digest::sha256(&cubin);
        let module = ctx
            .load_module(Ptx::from_binary(cubin))
            .map_err(|e| format!("loading the cubin: {e}"))?;
        let mut functions = HashMap::new();
        for s in symbols {
            let f = module
                .load_function(s)
                .map_err(|e| format!("kernel {s} is missing from the module: {e}"))?;
            let mut w = DigestWriter::new("gemm-audit/cuda-resources/v1");
            for (tag, v) in [
                ("registers", f.num_regs()),
                ("static_shared_bytes", f.shared_size_bytes()),
                ("local_bytes", f.local_size_bytes()),
                ("const_bytes", f.const_size_bytes()),
                ("max_threads_per_block", f.max_threads_per_block()),
                ("binary_version", f.binary_version()),
            ] {
                let v = v.map_err(|e| format!("attributes of {s}: {e}"))?;
                w.field(tag, FieldValue::U64(v as i64 as u64));
            }
            functions.insert(s.clone(), (f, w.finish()));
        }
        let resources: HashMap<String, Digest> = functions
            .iter()
            .map(|(s, (_, d))| (s.clone(), *d))
            .collect();
        Ok(LoadedModule {
            identity: ModuleIdentity::new(
                PhysicalBackend::CudaNvrtc,
                ModuleKind::Nvrtc,
                digest,
                compiler.clone(),
                arch,
                catalog::module_entries(&resources),
            ),
            functions,
            _module: module,
        })
    }

    fn function(&self, symbol: &str) -> Result<&(CudaFunction, Digest)> {
        self.functions
            .get(symbol)
            .ok_or_else(|| cuda_err(format!("kernel {symbol:?} is not in the loaded module")))
    }
}

/// What every backend on this device shares: context, stream, modules,
/// identities and vendor handles. One per process (see [`shared`]).
pub(crate) struct Shared {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    /// Serializes work on `stream` across backends and threads.
    lock: Mutex<()>,
    pub gemm: LoadedModule,
    sha: CudaFunction,
    pub compiler: CompilerIdentity,
    pub device: DeviceIdentity,
    pub arch: String,
    pub volatile: VolatileMetadata,
    pub vendor: Vendor,
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("device", &self.device)
            .field("arch", &self.arch)
            .field("module", &self.gemm.identity.digest)
            .finish_non_exhaustive()
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn open() -> std::result::Result<Shared, String> {
        // SAFETY: only checks whether the driver library can be loaded.
        if !unsafe { sys::is_culib_present() } {
            return Err("no CUDA driver library (libcuda.so) was found".into());
        }
        let count =
            CudaContext::device_count().map_err(|e| format!("cuInit / device count: {e}"))?;
        if count < 1 {
            return Err("no CUDA device is present".into());
        }
        // SAFETY: only checks whether the NVRTC library can be loaded.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(
                "NVRTC (libnvrtc.so) was not found; add the CUDA toolkit's lib64 to LD_LIBRARY_PATH"
                    .into(),
            );
        }
        let ctx =
            CudaContext::new(0).map_err(|e| format!("creating a context on device 0: {e}"))?;
        // SAFETY: every buffer is used on this backend's one stream (plus a
        // scratch stream that only captures and never runs), and work is
        // serialized by `Shared::lock`, so cudarc's cross-stream events are
        // not needed; they would also put event nodes into captured graphs.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx
            .new_stream()
            .map_err(|e| format!("creating a stream: {e}"))?;
        let (major, minor) = ctx
            .compute_capability()
            .map_err(|e| format!("compute capability: {e}"))?;
        let sms = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(|e| format!("multiprocessor count: {e}"))?;
        let name = ctx.name().map_err(|e| format!("device name: {e}"))?;
        let mut driver = 0i32;
        // SAFETY: `driver` is valid for one write.
        unsafe { sys::cuDriverGetVersion(&mut driver) }
            .result()
            .map_err(|e| format!("cuDriverGetVersion: {e}"))?;
        let device = DeviceIdentity {
            class: name.clone(),
            compute_capability: Some([major as u32, minor as u32]),
            multiprocessors: sms as u32,
            driver: driver_identity(driver),
        };
        let arch = format!("sm_{major}{minor}");
        let (nv_major, nv_minor) = nvrtc::version()?;
        let options = catalog::compile_options(&arch);
        let compiler = CompilerIdentity {
            name: "nvrtc".into(),
            version: format!("{nv_major}.{nv_minor}"),
            options_digest: catalog::options_digest(&options),
            source_digest: Digest::sha256(catalog::GEMM_SOURCE.as_bytes()),
        };
        let cubin = nvrtc::compile_cubin(catalog::GEMM_SOURCE, "gemm.cu", &options)?;
        let gemm = LoadedModule::load(&ctx, cubin, &catalog::module_symbols(), &compiler, &arch)?;
        let sha_cubin = nvrtc::compile_cubin(catalog::SHA256_SOURCE, "sha256.cu", &options)?;
        let sha_module = ctx
            .load_module(Ptx::from_binary(sha_cubin))
            .map_err(|e| format!("loading the fingerprint cubin: {e}"))?;
        let sha = sha_module
            .load_function("sha256_chunks")
            .map_err(|e| format!("fingerprint kernel: {e}"))?;
        let vendor = Vendor::probe(&arch);
        let mut volatile = VolatileMetadata::new();
        volatile.insert("cuda.device.name".into(), name);
        if let Ok(u) = ctx.uuid() {
            let hex: String = u
                .bytes
                .iter()
                .map(|b| format!("{:02x}", *b as u8))
                .collect();
            volatile.insert("cuda.device.uuid".into(), hex);
        }
        let mut bus = [0 as std::ffi::c_char; 32];
        // SAFETY: `bus` has room for the 32 bytes passed as its length.
        if unsafe { sys::cuDeviceGetPCIBusId(bus.as_mut_ptr(), bus.len() as i32, ctx.cu_device()) }
            .result()
            .is_ok()
        {
            // SAFETY: the driver wrote a NUL-terminated id into `bus`.
            volatile.insert("cuda.device.pci_bus_id".into(), unsafe {
                nvrtc::c_string(bus.as_ptr())
            });
        }
        if let Ok(mem) = ctx.total_mem() {
            volatile.insert("cuda.device.total_memory_bytes".into(), mem.to_string());
        }
        if let Ok(clock) = ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CLOCK_RATE) {
            volatile.insert("cuda.device.clock_khz".into(), clock.to_string());
        }
        volatile.insert("cuda.driver_api_version".into(), driver.to_string());
        volatile.insert(
            "cuda.nvrtc_version".into(),
            format!("{nv_major}.{nv_minor}"),
        );
        if let Some(l) = &vendor.cublas {
            volatile.insert("cuda.cublas_version".into(), l.version.clone());
        }
        if let Some(l) = &vendor.cublaslt {
            volatile.insert("cuda.cublaslt_version".into(), l.version.clone());
        }
        volatile.insert("os".into(), std::env::consts::OS.into());
        Ok(Shared {
            ctx,
            stream,
            lock: Mutex::new(()),
            gemm,
            sha,
            compiler,
            device,
            arch,
            volatile,
            vendor,
        })
    }
}

/// The process-wide device state: compiled once, shared by every backend.
static SHARED: Mutex<Option<Arc<Shared>>> = Mutex::new(None);

fn shared() -> std::result::Result<Arc<Shared>, String> {
    let mut g = SHARED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(s) = g.as_ref() {
        return Ok(s.clone());
    }
    // cudarc's dynamic loading panics on a missing symbol; report it instead.
    let opened = std::panic::catch_unwind(Shared::open)
        .map_err(|_| "loading CUDA panicked (a library is missing a symbol: too old a driver?)")?;
    let s = Arc::new(opened?);
    *g = Some(s.clone());
    Ok(s)
}

/// A CUDA device (device 0) under one policy.
#[derive(Debug, Clone)]
pub struct CudaBackend {
    shared: Arc<Shared>,
    context: GemmRouteIdentity,
}

impl CudaBackend {
    /// Opens device 0: loads the driver, compiles the kernels with NVRTC
    /// (once per process), finds cuBLAS/cuBLASLt. The error names what is
    /// missing; this never panics.
    pub fn open() -> Result<Self> {
        let shared = shared().map_err(cuda_err)?;
        let context = context_of(&shared, CUDA_DEFAULT_POLICY);
        Ok(CudaBackend { shared, context })
    }

    /// The same device (context, stream, modules) under another policy.
    pub fn with_policy(&self, policy: GemmPolicy) -> CudaBackend {
        CudaBackend {
            shared: self.shared.clone(),
            context: context_of(&self.shared, policy),
        }
    }

    /// The live context replays are validated against.
    pub fn context(&self) -> &GemmRouteIdentity {
        &self.context
    }

    /// Per-card facts (UUID, bus id, memory, clock, library versions): never digested.
    pub fn volatile(&self) -> VolatileMetadata {
        self.shared.volatile.clone()
    }

    /// The compilation target, e.g. `sm_90`.
    pub fn arch(&self) -> &str {
        &self.shared.arch
    }

    /// Resolves a GEMM to the route this backend launches.
    pub fn resolve(&self, spec: &GemmSpec) -> Result<ResolvedGemmRoute> {
        let shape = GemmShape {
            m: spec.m,
            k: spec.k,
            n: spec.n,
        };
        let policy = self.context.policy;
        let kernel = match spec.route {
            RouteChoice::Policy => {
                let split_ok = policy
                    .refuse_contract(spec.dtype, &crate::route::ContractKind::SplitKFixed)
                    .is_none();
                catalog::dispatch(spec.dtype, spec.m, spec.k, policy.tensor_cores, split_ok)
            }
            RouteChoice::ScalarFma => CudaKernel::ScalarFma,
            RouteChoice::Tiled => CudaKernel::Tiled,
            RouteChoice::SplitKFixed(s) => CudaKernel::SplitKFixed(s),
            RouteChoice::SplitKAtomic(s) => CudaKernel::SplitKAtomic(s),
            RouteChoice::MmaLarge => CudaKernel::MmaLarge,
            RouteChoice::MmaSmall => CudaKernel::MmaSmall,
            RouteChoice::Cublas => return self.resolve_vendor(spec, shape, Api::Blas),
            RouteChoice::CublasLt => return self.resolve_vendor(spec, shape, Api::Lt),
        };
        if !kernel.supports(spec.dtype) {
            return Err(cuda_err(format!(
                "GEMM {:?}: route {} needs bf16 or f16 (tensor cores), not {}",
                spec.name, spec.route, spec.dtype
            )));
        }
        self.nvrtc_route(&spec.name, spec.op, spec.dtype, shape, kernel)
    }

    /// The route of an NVRTC kernel on one problem.
    pub fn nvrtc_route(
        &self,
        gemm: &str,
        op: GemmOp,
        dtype: DType,
        shape: GemmShape,
        kernel: CudaKernel,
    ) -> Result<ResolvedGemmRoute> {
        let g: Geometry = kernel
            .geometry(shape)
            .map_err(|e| cuda_err(format!("GEMM {gemm:?}: {e}")))?;
        let symbol = kernel.symbol(op, dtype);
        let (_, resources) = self.shared.gemm.function(&symbol)?;
        let strides = catalog::strides(op, shape);
        let (kind, ownership) = kernel.contract();
        let (family, ishape) = kernel.instruction();
        Ok(ResolvedGemmRoute {
            gemm: gemm.to_string(),
            op,
            dtype,
            backend: PhysicalBackend::CudaNvrtc,
            contract: NumericContract {
                kind,
                splits: kernel.splits(),
            },
            instruction_family: family.into(),
            instruction_shape: ishape.into(),
            uses_tensor_cores: kernel.is_mma(),
            operand_conversion: OperandConversion::ExactWiden,
            output_ownership: ownership,
            kernel_symbol: symbol.clone(),
            module_kind: ModuleKind::Nvrtc,
            compilation_target: self.shared.arch.clone(),
            artifact_digest: self.shared.gemm.identity.digest,
            compiler: self.shared.compiler.clone(),
            device: self.shared.device.clone(),
            device_capabilities: kernel.capabilities(dtype),
            shape,
            strides,
            tile: g.tile,
            bk: g.bk,
            stages: 1,
            threads: g.threads,
            launch: LaunchConfig {
                grid: g.grid,
                block: g.block,
                dynamic_shared_bytes: 0,
                arguments_digest: catalog::arguments_digest(
                    &symbol,
                    shape,
                    strides,
                    kernel.splits(),
                ),
            },
            tensor_map: None,
            resources_digest: *resources,
            tuning_table_revision: catalog::TUNING_TABLE_REVISION,
            schedule_revision: catalog::SCHEDULE_REVISION,
            vendor: None,
        })
    }

    fn resolve_vendor(
        &self,
        spec: &GemmSpec,
        shape: GemmShape,
        api: Api,
    ) -> Result<ResolvedGemmRoute> {
        let fast = match self.context.policy.mode {
            PolicyMode::CublasFast => true,
            PolicyMode::CublasPedantic => false,
            PolicyMode::Deterministic => {
                return Err(cuda_err(format!(
                    "GEMM {:?}: route {} needs policy cublas-fast or cublas-pedantic",
                    spec.name, spec.route
                )));
            }
        };
        let sh = &self.shared;
        let lib = sh.vendor.library(api)?.clone();
        let _lock = sh.lock();
        let handles = sh.vendor.handles(sh)?;
        let h = handles.get();
        let call = VendorCall::new(h, api, spec.dtype, spec.op, shape, fast)?;
        // Physical kernels: run the call once eagerly (loads its kernels outside
        // any capture), then capture it once on the scratch stream and read the graph.
        let elem = cpu_kernels::element_size(spec.dtype);
        let alloc = |n: u64| {
            sh.stream
                .alloc_zeros::<u8>((n as usize).max(1) * elem)
                .map_err(drv("allocating vendor operands"))
        };
        let a = alloc(shape.m * shape.k)?;
        let b = alloc(shape.k * shape.n)?;
        let mut c = alloc(shape.m * shape.n)?;
        call.enqueue(h, &sh.stream, &a, &b, &mut c)?;
        sh.stream.synchronize().map_err(drv("vendor warm-up"))?;
        let raw = graph::capture(&h.scratch, || {
            call.enqueue(h, &h.scratch, &a, &b, &mut c)
                .map_err(|e| e.to_string())
        })
        .map_err(|e| {
            cuda_err(format!(
                "capturing {} for GEMM {:?}: {e}",
                api.symbol(),
                spec.name
            ))
        })?;
        let nodes = graph::introspect(&raw).map_err(cuda_err)?;
        drop(raw);
        sh.stream.synchronize().map_err(drv("vendor capture"))?;
        let kernels: Vec<&PhysicalNode> = nodes
            .iter()
            .filter(|n| n.kind == NodeKind::Kernel)
            .collect();
        let Some(main) = kernels.first() else {
            return Err(cuda_err(format!(
                "{} captured no kernel for GEMM {:?}",
                api.symbol(),
                spec.name
            )));
        };
        let mut vendor = call.vendor_route(&lib.version);
        vendor.physical_kernels = kernels.iter().filter_map(|n| n.symbol.clone()).collect();
        let mut resources = DigestWriter::new("gemm-audit/vendor-resources/v1");
        for n in &kernels {
            resources.field("kernel", FieldValue::Str(n.symbol.as_deref().unwrap_or("")));
            resources.field("grid", FieldValue::U32x3(n.grid));
            resources.field("block", FieldValue::U32x3(n.block));
            resources.field("shared_bytes", FieldValue::U32(n.shared_bytes));
        }
        let threads: u32 = main.block.iter().product();
        let numerics = call.numerics.clone();
        let library_digest = {
            let mut w = DigestWriter::new("gemm-audit/vendor-library/v1");
            w.field("version", FieldValue::Str(&lib.version));
            w.finish()
        };
        Ok(ResolvedGemmRoute {
            gemm: spec.name.clone(),
            op: spec.op,
            dtype: spec.dtype,
            backend: match api {
                Api::Blas => PhysicalBackend::Cublas,
                Api::Lt => PhysicalBackend::CublasLt,
            },
            contract: NumericContract {
                kind: numerics.contract.clone(),
                splits: call
                    .lt
                    .as_ref()
                    .map_or(1, |p| p.attrs.split_k.clamp(1, u32::MAX as i64) as u32),
            },
            instruction_family: "vendor-defined".into(),
            instruction_shape: "vendor-defined".into(),
            uses_tensor_cores: numerics.tensor_cores,
            operand_conversion: numerics.conversion,
            output_ownership: OutputOwnership::VendorDefined,
            kernel_symbol: api.symbol().into(),
            module_kind: lib.module.kind,
            compilation_target: sh.arch.clone(),
            artifact_digest: lib.module.digest,
            compiler: CompilerIdentity {
                name: api.symbol().into(),
                version: lib.version.clone(),
                options_digest: numerics.digest(api),
                source_digest: library_digest,
            },
            device: sh.device.clone(),
            device_capabilities: vec![format!("vendor:{}", api.symbol())],
            shape,
            strides: catalog::strides(spec.op, shape),
            tile: TileShape { m: 0, n: 0, k: 0 },
            bk: 0,
            stages: 0,
            threads,
            launch: LaunchConfig {
                grid: main.grid,
                block: main.block,
                dynamic_shared_bytes: main.shared_bytes,
                arguments_digest: call.arguments_digest(),
            },
            tensor_map: None,
            resources_digest: resources.finish(),
            tuning_table_revision: catalog::TUNING_TABLE_REVISION,
            schedule_revision: catalog::SCHEDULE_REVISION,
            vendor: Some(vendor),
        })
    }

    /// Runs one route eagerly on inputs seeded by `seed` (the CPU backend's
    /// seeding); returns the output storage bytes.
    pub fn run(&self, route: &ResolvedGemmRoute, seed: u64) -> Result<Vec<u8>> {
        let sh = &self.shared;
        let _lock = sh.lock();
        let handles = self.vendor_handles(route)?;
        let mut launch = Prepared::new(sh, handles.as_ref().map(|h| h.get()), route, seed)?;
        launch.enqueue(sh, handles.as_ref().map(|h| h.get()), &sh.stream)?;
        sh.stream.synchronize().map_err(drv("kernel"))?;
        launch.download(sh)
    }

    /// Runs one route eagerly and fingerprints its output on the device
    /// (the output is not copied back).
    pub fn run_fingerprinted(
        &self,
        route: &ResolvedGemmRoute,
        seed: u64,
    ) -> Result<OutputFingerprint> {
        let sh = &self.shared;
        let _lock = sh.lock();
        let handles = self.vendor_handles(route)?;
        let mut launch = Prepared::new(sh, handles.as_ref().map(|h| h.get()), route, seed)?;
        launch.enqueue(sh, handles.as_ref().map(|h| h.get()), &sh.stream)?;
        let chunks = device_chunk_digests(sh, &launch.c, launch.out_bytes)?;
        Ok(OutputFingerprint::from_chunk_digests(
            seed,
            launch.out_bytes as u64,
            &chunks,
        ))
    }

    /// The output fingerprint of `bytes`, computed on the device (uploads
    /// them first). Equals `OutputFingerprint::of(input_seed, bytes)`.
    pub fn fingerprint(&self, input_seed: u64, bytes: &[u8]) -> Result<OutputFingerprint> {
        let sh = &self.shared;
        let _lock = sh.lock();
        let buf = if bytes.is_empty() {
            sh.stream.alloc_zeros::<u8>(4)
        } else {
            sh.stream.clone_htod(bytes)
        }
        .map_err(drv("upload"))?;
        let chunks = device_chunk_digests(sh, &buf, bytes.len())?;
        Ok(OutputFingerprint::from_chunk_digests(
            input_seed,
            bytes.len() as u64,
            &chunks,
        ))
    }

    fn vendor_handles(
        &self,
        route: &ResolvedGemmRoute,
    ) -> Result<Option<super::vendor::HandlesGuard<'_>>> {
        if route.backend.is_vendor() {
            Ok(Some(self.shared.vendor.handles(&self.shared)?))
        } else {
            Ok(None)
        }
    }

    /// Captures `routes` into a graph prepared from `manifest`: inputs are
    /// uploaded and outputs allocated first (storage reserved to the
    /// manifest's route capacity), then the launches are captured on this
    /// backend's own stream, the graph is instantiated, uploaded and walked
    /// into physical nodes, and the captured launch set must equal the
    /// manifest's.
    pub fn capture(
        &self,
        manifest: &PreparedGemmCaptureManifest,
        routes: &[ResolvedGemmRoute],
        seeds: &[u64],
    ) -> Result<CudaGraph> {
        manifest.check_capture_request(routes.len() as u64)?;
        if seeds.len() != routes.len() {
            return Err(cuda_err(format!(
                "{} input seeds for {} routes",
                seeds.len(),
                routes.len()
            )));
        }
        let sh = &self.shared;
        let _lock = sh.lock();
        let any_vendor = routes.iter().any(|r| r.backend.is_vendor());
        let handles = if any_vendor {
            Some(sh.vendor.handles(sh)?)
        } else {
            None
        };
        let h = handles.as_ref().map(|g| g.get());
        let capacity = manifest.route_capacity as usize;
        let mut launches = Vec::with_capacity(capacity);
        for (route, &seed) in routes.iter().zip(seeds) {
            launches.push(Prepared::new(sh, h, route, seed)?);
        }
        let mut captured: Vec<ResolvedGemmRoute> = Vec::with_capacity(capacity);
        let raw = graph::capture(&sh.stream, || {
            for (launch, route) in launches.iter_mut().zip(routes) {
                launch
                    .enqueue(sh, h, &sh.stream)
                    .map_err(|e| format!("route {:?}: {e}", route.gemm))?;
                captured.push(route.clone());
            }
            Ok(())
        })
        .map_err(|e| cuda_err(format!("graph capture: {e}")))?;
        let physical = graph::introspect(&raw).map_err(cuda_err)?;
        let set = build_resolved_gemm_launch_set(&captured)?;
        let plan = CapturedGemmGraphPlan::new(manifest.clone(), captured)?;
        plan.check_capture_result(&set)?;
        drop(handles);
        Ok(CudaGraph {
            raw,
            launches,
            plan,
            physical,
            shared: sh.clone(),
        })
    }

    /// Replays a graph only through its plan's validation against this
    /// backend's live context; a refusal launches nothing.
    pub fn replay(&self, graph: &CudaGraph, label: &str) -> Result<Vec<Vec<u8>>> {
        self.check_graph(graph)?;
        graph
            .plan
            .with_validated_launch(&self.context, label, |_| {
                let _lock = self.shared.lock();
                graph.launch_and_wait()?;
                graph
                    .launches
                    .iter()
                    .map(|l| l.download(&self.shared))
                    .collect::<Result<Vec<_>>>()
            })
            .map_err(Error::from)?
    }

    /// Launches a graph through validation without copying outputs back.
    #[doc(hidden)]
    pub fn launch_validated(&self, graph: &CudaGraph, label: &str) -> Result<()> {
        self.check_graph(graph)?;
        graph
            .plan
            .with_validated_launch(&self.context, label, |_| {
                let _lock = self.shared.lock();
                graph.launch_and_wait()
            })
            .map_err(Error::from)?
    }

    /// Launches a graph WITHOUT validation. Only for measuring what
    /// validation costs.
    #[doc(hidden)]
    pub fn launch_unvalidated(&self, graph: &CudaGraph) -> Result<()> {
        self.check_graph(graph)?;
        let _lock = self.shared.lock();
        graph.launch_and_wait()
    }

    fn check_graph(&self, graph: &CudaGraph) -> Result<()> {
        if !Arc::ptr_eq(&self.shared, &graph.shared) {
            return Err(cuda_err("graph was captured on another device context"));
        }
        Ok(())
    }

    /// Times `routes` against each other, for benchmarks. Each route is
    /// prepared once (inputs seeded by `seed`, buffers allocated), launched
    /// once to warm up and timed over three launches to pick how many
    /// launches make one sample of about `sample_secs` (1 to 1000). With
    /// `graphed`, those launches are captured into one graph and a sample
    /// is one graph launch, so per-launch CPU overhead cannot hide short
    /// kernels; a route whose capture fails falls back to eager launches
    /// (reported in its [`RouteTiming`]). A sample is CUDA events around
    /// its launches, divided by their count. After `warmup` untimed rounds,
    /// `samples` rounds take one sample of every route, each round starting
    /// at the next route, so drift affects every route alike.
    #[doc(hidden)]
    pub fn time_routes(
        &self,
        routes: &[ResolvedGemmRoute],
        seed: u64,
        graphed: bool,
        warmup: usize,
        samples: usize,
        sample_secs: f64,
    ) -> Result<Vec<RouteTiming>> {
        const MAX_LAUNCHES: f64 = 1000.0;
        let sh = &self.shared;
        let _lock = sh.lock();
        let handles = if routes.iter().any(|r| r.backend.is_vendor()) {
            Some(sh.vendor.handles(sh)?)
        } else {
            None
        };
        let h = handles.as_ref().map(|g| g.get());
        let mut launches = routes
            .iter()
            .map(|r| Prepared::new(sh, h, r, seed))
            .collect::<Result<Vec<_>>>()?;
        let timer = EventTimer::new(sh)?;
        let mut timings = Vec::with_capacity(launches.len());
        // Declared after `launches`, so dropped first: a graph must not
        // outlive the buffers its launches use.
        let mut graphs: Vec<Option<RawGraph>> = Vec::with_capacity(launches.len());
        for launch in &mut launches {
            launch.enqueue(sh, h, &sh.stream)?;
            let per_launch = time_launches(sh, &timer, h, launch, None, 3)?;
            let count = (sample_secs / per_launch.max(1e-7))
                .round()
                .clamp(1.0, MAX_LAUNCHES) as u32;
            let (graph, capture_error) = if graphed {
                match graph::capture(&sh.stream, || {
                    for _ in 0..count {
                        launch
                            .enqueue(sh, h, &sh.stream)
                            .map_err(|e| e.to_string())?;
                    }
                    Ok(())
                }) {
                    Ok(g) => (Some(g), None),
                    Err(e) => (None, Some(e)),
                }
            } else {
                (None, None)
            };
            timings.push(RouteTiming {
                launches: count,
                graphed: graph.is_some(),
                capture_error,
                samples: Vec::with_capacity(samples),
            });
            graphs.push(graph);
        }
        let n = launches.len();
        for round in 0..warmup + samples {
            for j in 0..n {
                let i = (round + j) % n;
                let secs = time_launches(
                    sh,
                    &timer,
                    h,
                    &mut launches[i],
                    graphs[i].as_ref(),
                    timings[i].launches,
                )?;
                if round >= warmup {
                    timings[i].samples.push(secs);
                }
            }
        }
        drop(graphs);
        Ok(timings)
    }

    /// Alternating samples of fingerprinting `bytes` device bytes (the
    /// SHA-256 chunk kernel) and of copying them device to device, for
    /// benchmarks: seconds per operation, each sample CUDA events around
    /// `ops` back-to-back operations, after `warmup` untimed samples of
    /// each. The buffers are allocated once.
    #[doc(hidden)]
    pub fn time_fingerprint_and_copy(
        &self,
        bytes: usize,
        ops: u32,
        warmup: usize,
        samples: usize,
    ) -> Result<(Vec<f64>, Vec<f64>)> {
        let sh = &self.shared;
        let _lock = sh.lock();
        let bytes = bytes.max(4);
        let src = sh.stream.alloc_zeros::<u8>(bytes).map_err(drv("alloc"))?;
        let mut dst = sh.stream.alloc_zeros::<u8>(bytes).map_err(drv("alloc"))?;
        let chunks = bytes.div_ceil(FINGERPRINT_CHUNK_BYTES);
        let mut out = sh
            .stream
            .alloc_zeros::<u8>(chunks * 32)
            .map_err(drv("alloc"))?;
        let timer = EventTimer::new(sh)?;
        let ops = ops.max(1);
        let (mut fp, mut copy) = (Vec::with_capacity(samples), Vec::with_capacity(samples));
        for i in 0..warmup + samples {
            let mut fp_sample = || {
                timer.time(sh, || {
                    for _ in 0..ops {
                        launch_sha(sh, &src, bytes, &mut out)?;
                    }
                    Ok(())
                })
            };
            let mut copy_sample = || {
                timer.time(sh, || {
                    for _ in 0..ops {
                        sh.stream
                            .memcpy_dtod(&src, &mut dst)
                            .map_err(drv("memcpy_dtod"))?;
                    }
                    Ok(())
                })
            };
            // Swap the order every other sample.
            let (f, c) = if i % 2 == 0 {
                let f = fp_sample()?;
                (f, copy_sample()?)
            } else {
                let c = copy_sample()?;
                (fp_sample()?, c)
            };
            if i >= warmup {
                fp.push(f / f64::from(ops));
                copy.push(c / f64::from(ops));
            }
        }
        Ok((fp, copy))
    }
}

/// Per-launch times of one route, from [`CudaBackend::time_routes`].
#[doc(hidden)]
#[derive(Debug, Clone)]
pub struct RouteTiming {
    /// Launches per sample.
    pub launches: u32,
    /// Whether a sample was one launch of a graph of the launches (else
    /// eager back-to-back launches).
    pub graphed: bool,
    /// Why capturing the launches failed, when it did.
    pub capture_error: Option<String>,
    /// Seconds per launch, one entry per sample.
    pub samples: Vec<f64>,
}

/// Two timing events on the backend's stream.
struct EventTimer {
    start: CudaEvent,
    end: CudaEvent,
}

impl EventTimer {
    fn new(sh: &Shared) -> Result<EventTimer> {
        let timing = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        Ok(EventTimer {
            start: sh.ctx.new_event(timing).map_err(drv("event"))?,
            end: sh.ctx.new_event(timing).map_err(drv("event"))?,
        })
    }

    /// Seconds between events recorded before and after what `enqueue`
    /// puts on the stream; waits for it to finish.
    fn time(&self, sh: &Shared, enqueue: impl FnOnce() -> Result<()>) -> Result<f64> {
        self.start.record(&sh.stream).map_err(drv("event record"))?;
        enqueue()?;
        self.end.record(&sh.stream).map_err(drv("event record"))?;
        let ms = self
            .start
            .elapsed_ms(&self.end)
            .map_err(drv("event elapsed"))?;
        Ok(f64::from(ms) / 1e3)
    }
}

/// Seconds per launch of `launch`: one launch of `graph` (which holds
/// `count` launches of it), or `count` eager launches.
fn time_launches(
    sh: &Shared,
    timer: &EventTimer,
    h: Option<&Handles>,
    launch: &mut Prepared,
    graph: Option<&RawGraph>,
    count: u32,
) -> Result<f64> {
    let count = count.max(1);
    let secs = match graph {
        Some(g) => timer.time(sh, || g.launch().map_err(drv("graph launch")))?,
        None => timer.time(sh, || {
            for _ in 0..count {
                launch.enqueue(sh, h, &sh.stream)?;
            }
            Ok(())
        })?,
    };
    Ok(secs / f64::from(count))
}

/// The context of `shared` under `policy`.
fn context_of(shared: &Shared, policy: GemmPolicy) -> GemmRouteIdentity {
    let mut modules = vec![shared.gemm.identity.clone()];
    if let Some(l) = &shared.vendor.cublas {
        modules.push(l.module.clone());
    }
    if let Some(l) = &shared.vendor.cublaslt {
        modules.push(l.module.clone());
    }
    GemmRouteIdentity::new(
        policy,
        modules,
        shared.device.clone(),
        Revisions {
            tuning_table: catalog::TUNING_TABLE_REVISION,
            schedule: catalog::SCHEDULE_REVISION,
            tensor_map: 0,
        },
    )
}

/// What a prepared launch runs.
#[derive(Debug)]
enum Target {
    Nvrtc {
        kernel: CudaKernel,
        func: CudaFunction,
        geometry: Geometry,
    },
    Vendor(VendorCall),
}

/// One launch with its device buffers: inputs uploaded, output allocated,
/// everything decided, so enqueueing (eagerly or under capture) only
/// launches.
#[derive(Debug)]
struct Prepared {
    target: Target,
    shape: GemmShape,
    a: CudaSlice<u8>,
    b: CudaSlice<u8>,
    c: CudaSlice<u8>,
    /// Split-K atomic scratch (f32 per output) and per-tile counters; zero
    /// between launches.
    scratch: Option<(CudaSlice<f32>, CudaSlice<u32>)>,
    out_bytes: usize,
}

impl Prepared {
    fn new(
        sh: &Shared,
        h: Option<&Handles>,
        route: &ResolvedGemmRoute,
        seed: u64,
    ) -> Result<Prepared> {
        let shape = route.shape;
        let GemmShape { m, k, n } = shape;
        for (what, x, y) in [("A", m, k), ("B", k, n), ("C", m, n)] {
            if x.checked_mul(y)
                .is_none_or(|e| e > crate::workload::MAX_ELEMENTS)
            {
                return Err(cuda_err(format!(
                    "route {:?}: operand {what} is too large ({x} x {y})",
                    route.gemm
                )));
            }
        }
        if route.device != sh.device {
            return Err(cuda_err(format!(
                "route {:?} was resolved for {:?}, this device is {:?}",
                route.gemm, route.device.class, sh.device.class
            )));
        }
        let target = if route.backend.is_vendor() {
            let api = match route.backend {
                PhysicalBackend::Cublas => Api::Blas,
                _ => Api::Lt,
            };
            let lib = sh.vendor.library(api)?;
            let want = route.vendor.as_ref().ok_or_else(|| {
                cuda_err(format!(
                    "vendor route {:?} has no vendor identity",
                    route.gemm
                ))
            })?;
            if route.kernel_symbol != api.symbol()
                || route.artifact_digest != lib.module.digest
                || want.library_version != lib.version
            {
                return Err(cuda_err(format!(
                    "route {:?}: {} {} is not the loaded {}",
                    route.gemm, route.kernel_symbol, want.library_version, lib.version
                )));
            }
            let fast = match &route.contract.kind {
                crate::route::ContractKind::VendorFast => true,
                crate::route::ContractKind::VendorPedantic => false,
                other => {
                    return Err(cuda_err(format!(
                        "route {:?}: contract {other} is not a vendor contract",
                        route.gemm
                    )));
                }
            };
            let h = h.ok_or_else(|| cuda_err("vendor handles are not open"))?;
            let call = VendorCall::new(h, api, route.dtype, route.op, shape, fast)?;
            if call.arguments_digest() != route.launch.arguments_digest {
                return Err(cuda_err(format!(
                    "route {:?}: vendor arguments differ",
                    route.gemm
                )));
            }
            let mut now = call.vendor_route(&lib.version);
            now.physical_kernels = want.physical_kernels.clone();
            if &now != want {
                return Err(cuda_err(format!(
                    "route {:?}: the {} heuristic now picks algorithm {} tile {} split-k {} (recorded {} tile {} split-k {})",
                    route.gemm,
                    lib.version,
                    now.algorithm_id,
                    now.tile_id,
                    now.split_k,
                    want.algorithm_id,
                    want.tile_id,
                    want.split_k
                )));
            }
            Target::Vendor(call)
        } else {
            if route.backend != PhysicalBackend::CudaNvrtc {
                return Err(cuda_err(format!(
                    "route {:?}: backend {} does not run on CUDA",
                    route.gemm, route.backend
                )));
            }
            let kernel = CudaKernel::from_route(route)
                .map_err(|e| cuda_err(format!("route {:?}: {e}", route.gemm)))?;
            if route.artifact_digest != sh.gemm.identity.digest {
                return Err(cuda_err(format!(
                    "route {:?}: artifact {} is not the loaded module {}",
                    route.gemm,
                    route.artifact_digest.short(),
                    sh.gemm.identity.digest.short()
                )));
            }
            let (func, _) = sh.gemm.function(&route.kernel_symbol)?;
            let geometry = kernel
                .geometry(shape)
                .map_err(|e| cuda_err(format!("route {:?}: {e}", route.gemm)))?;
            Target::Nvrtc {
                kernel,
                func: func.clone(),
                geometry,
            }
        };
        let problem = Problem {
            op: route.op,
            m: m as usize,
            k: k as usize,
            n: n as usize,
        };
        let a = cpu_kernels::to_storage_bytes(
            route.dtype,
            &cpu_kernels::seeded_a(&problem, route.dtype, seed),
        );
        let b = cpu_kernels::to_storage_bytes(
            route.dtype,
            &cpu_kernels::seeded_b(&problem, route.dtype, seed.wrapping_add(B_SEED_OFFSET)),
        );
        let upload = |bytes: &[u8]| {
            if bytes.is_empty() {
                sh.stream.alloc_zeros::<u8>(4)
            } else {
                sh.stream.clone_htod(bytes)
            }
            .map_err(drv("uploading operands"))
        };
        let a = upload(&a)?;
        let b = upload(&b)?;
        let out_bytes = (m * n) as usize * cpu_kernels::element_size(route.dtype);
        let c = sh
            .stream
            .alloc_zeros::<u8>(out_bytes.max(4))
            .map_err(drv("allocating the output"))?;
        let scratch = match &target {
            Target::Nvrtc {
                kernel: CudaKernel::SplitKAtomic(_),
                geometry,
                ..
            } => {
                let tiles = geometry.grid[0] as usize * geometry.grid[1] as usize;
                Some((
                    sh.stream
                        .alloc_zeros::<f32>(((m * n) as usize).max(1))
                        .map_err(drv("allocating split-K scratch"))?,
                    sh.stream
                        .alloc_zeros::<u32>(tiles.max(1))
                        .map_err(drv("allocating split-K counters"))?,
                ))
            }
            _ => None,
        };
        Ok(Prepared {
            target,
            shape,
            a,
            b,
            c,
            scratch,
            out_bytes,
        })
    }

    /// Enqueues the launch on `stream` (eagerly, or under capture).
    fn enqueue(
        &mut self,
        sh: &Shared,
        h: Option<&Handles>,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        let Prepared {
            target,
            shape,
            a,
            b,
            c,
            scratch,
            ..
        } = self;
        if shape.m == 0 || shape.n == 0 {
            return Ok(());
        }
        match target {
            Target::Vendor(call) => {
                let h = h.ok_or_else(|| cuda_err("vendor handles are not open"))?;
                call.enqueue(h, stream, a, b, c)
            }
            Target::Nvrtc {
                kernel,
                func,
                geometry,
            } => {
                let (m, k, n) = (shape.m as u32, shape.k as u32, shape.n as u32);
                let splits = kernel.splits();
                let cfg = CuLaunch {
                    grid_dim: (geometry.grid[0], geometry.grid[1], geometry.grid[2]),
                    block_dim: (geometry.block[0], geometry.block[1], geometry.block[2]),
                    shared_mem_bytes: 0,
                };
                let mut lb = stream.launch_builder(func);
                lb.arg(&*a).arg(&*b).arg(&mut *c).arg(&m).arg(&k).arg(&n);
                match (*kernel, scratch.as_mut()) {
                    (CudaKernel::SplitKFixed(_), _) => {
                        lb.arg(&splits);
                    }
                    (CudaKernel::SplitKAtomic(_), Some((s, counters))) => {
                        lb.arg(&mut *s).arg(&mut *counters).arg(&splits);
                    }
                    (CudaKernel::SplitKAtomic(_), None) => {
                        return Err(cuda_err("split-K atomic launch without scratch"));
                    }
                    _ => {}
                }
                let _ = sh;
                // SAFETY: the argument list matches the kernel's signature in
                // kernels/gemm.cu (A, B, C, m, k, n[, scratch, counters][, splits]);
                // A, B and C hold the dense operands of `shape` for the route's op
                // and dtype, scratch m*n f32 and counters one u32 per block tile,
                // so every index the kernel computes is in bounds.
                unsafe { lb.launch(cfg) }
                    .map(|_| ())
                    .map_err(|e| cuda_err(format!("launching {}: {e}", kernel.family())))
            }
        }
    }

    fn download(&self, sh: &Shared) -> Result<Vec<u8>> {
        let mut v = sh.stream.clone_dtoh(&self.c).map_err(drv("download"))?;
        v.truncate(self.out_bytes);
        Ok(v)
    }
}

/// Launches the SHA-256 chunk kernel over the first `len` bytes of `buf`
/// into `out` (32 bytes per chunk).
fn launch_sha(sh: &Shared, buf: &CudaSlice<u8>, len: usize, out: &mut CudaSlice<u8>) -> Result<()> {
    let chunks = len.div_ceil(FINGERPRINT_CHUNK_BYTES);
    if chunks == 0 {
        return Ok(());
    }
    if buf.len() < len || out.len() < chunks * 32 {
        return Err(cuda_err("fingerprint buffers are too small"));
    }
    let threads = 128u32;
    let blocks = (chunks as u64).div_ceil(threads as u64);
    let blocks = u32::try_from(blocks).map_err(|_| cuda_err("buffer too large to fingerprint"))?;
    let cfg = CuLaunch {
        grid_dim: (blocks, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    };
    let len64 = len as u64;
    let chunk_bytes = FINGERPRINT_CHUNK_BYTES as u32;
    let chunks64 = chunks as u64;
    let mut lb = sh.stream.launch_builder(&sh.sha);
    lb.arg(buf)
        .arg(&len64)
        .arg(&chunk_bytes)
        .arg(&chunks64)
        .arg(&mut *out);
    // SAFETY: matches `sha256_chunks(const u8*, u64, u32, u64, u8*)`; `buf`
    // holds at least `len` bytes (device allocations are 256-byte aligned, so
    // the kernel's 4-byte loads are aligned) and `out` 32 bytes per chunk.
    unsafe { lb.launch(cfg) }
        .map(|_| ())
        .map_err(|e| cuda_err(format!("launching sha256_chunks: {e}")))
}

/// Per-chunk SHA-256 digests of the first `len` bytes of `buf`, computed on
/// the device and copied back (32 bytes per 4096-byte chunk).
fn device_chunk_digests(sh: &Shared, buf: &CudaSlice<u8>, len: usize) -> Result<Vec<Digest>> {
    let chunks = len.div_ceil(FINGERPRINT_CHUNK_BYTES);
    if chunks == 0 {
        return Ok(Vec::new());
    }
    let mut out = sh
        .stream
        .alloc_zeros::<u8>(chunks * 32)
        .map_err(drv("allocating digests"))?;
    launch_sha(sh, buf, len, &mut out)?;
    let host = sh
        .stream
        .clone_dtoh(&out)
        .map_err(drv("downloading digests"))?;
    Ok(host
        .chunks_exact(32)
        .map(|c| {
            let mut d = [0u8; 32];
            d.copy_from_slice(c);
            Digest(d)
        })
        .collect())
}

/// A captured CUDA graph: the instantiated, uploaded graph, the buffers its
/// launches use, the plan replays are validated against, and the nodes the
/// graph really holds.
pub struct CudaGraph {
    // Declared first: the graph is destroyed before the buffers it uses.
    raw: RawGraph,
    launches: Vec<Prepared>,
    plan: CapturedGemmGraphPlan,
    physical: Vec<PhysicalNode>,
    shared: Arc<Shared>,
}

impl fmt::Debug for CudaGraph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaGraph")
            .field("launches", &self.launches.len())
            .field("physical", &self.physical)
            .finish_non_exhaustive()
    }
}

impl CudaGraph {
    /// The plan replays are checked against.
    pub fn plan(&self) -> &CapturedGemmGraphPlan {
        &self.plan
    }

    /// The graph's nodes in capture order (not yet bound to routes).
    pub fn physical(&self) -> Vec<PhysicalNode> {
        self.physical.clone()
    }

    fn launch_and_wait(&self) -> Result<()> {
        self.raw.launch().map_err(drv("graph launch"))?;
        self.shared
            .stream
            .synchronize()
            .map_err(drv("graph replay"))
    }
}
