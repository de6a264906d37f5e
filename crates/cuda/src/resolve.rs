//! Resolving a GEMM to the route the CUDA backend launches: an NVRTC kernel
//! (by policy or as asked) or a vendor call, whose physical kernels are read
//! from a capture of the call.

use crate::blas::{Api, LtSelection, VendorCall};
use crate::catalog::{self, CudaFamily, CudaKernel};
use crate::device::CudaBackend;
use crate::error::{cuda_err, drv};
use crate::graph;
use cudarc::driver::CudaStream;
use gemm_audit_model::Result;
use gemm_audit_model::digest::{Digest, DigestWriter, FieldValue};
use gemm_audit_model::identity::{GemmRouteIdentity, ModuleIdentity};
use gemm_audit_model::kernels;
use gemm_audit_model::kernels::{GemmSpec, RouteChoice};
use gemm_audit_model::physical::{NodeKind, PhysicalNode};
use gemm_audit_model::pin::VendorPin;
use gemm_audit_model::policy::PolicyMode;
use gemm_audit_model::route::{
    GemmShape, GemmStrides, LaunchConfig, NumericContract, ResolvedGemmRoute, TileShape,
    VendorRoute,
};
use gemm_audit_model::vocab::{DType, GemmOp, OperandConversion, OutputOwnership};
use gemm_audit_model::{CompilerIdentity, DeviceIdentity};
use std::borrow::Cow;
use std::sync::Arc;

impl CudaBackend {
    /// [`gemm_audit_model::backend::GemmBackend::adopt_pins`]: recorded
    /// `cublaslt-invariant` pins (cuBLASLt, this library version) whose
    /// configuration the live library still offers become this backend's
    /// choices for their families, so resolving them again does not
    /// re-time them. Returns how many were adopted.
    pub(crate) fn adopt_family_pins(&self, pins: &[VendorPin]) -> usize {
        let sh = &self.shared;
        let Ok(lib) = sh.vendor.library(Api::Lt) else {
            return 0;
        };
        let _lock = sh.lock();
        let Ok(handles) = sh.vendor.handles(sh) else {
            return 0;
        };
        pins.iter()
            .filter(|p| {
                p.family.backend == gemm_audit_model::vocab::PhysicalBackend::CublasLt
                    && p.family.library_version == lib.version
                    && crate::blas::lt_family::adopt_pin(handles.get(), p).is_ok()
            })
            .count()
    }

    /// The live context: the backend's context with the family
    /// configurations pinned so far (none before vendor handles open).
    /// Borrowed when nothing is pinned, so a replay of custom kernels
    /// clones nothing.
    pub(crate) fn context_with_pins(&self) -> Cow<'_, GemmRouteIdentity> {
        let sh = &self.shared;
        let pins = match (sh.vendor.library(Api::Lt), sh.vendor.open_handles()) {
            (Ok(lib), Some(h)) => {
                crate::blas::lt_family::pins(h.get(), &lib.version).unwrap_or_default()
            }
            _ => Vec::new(),
        };
        if pins.is_empty() {
            Cow::Borrowed(&self.context)
        } else {
            Cow::Owned(self.context.clone().with_pins(pins))
        }
    }

    /// Resolves a GEMM to the route this backend launches.
    pub(crate) fn resolve_spec(&self, spec: &GemmSpec) -> Result<ResolvedGemmRoute> {
        let shape = GemmShape {
            m: spec.m,
            k: spec.k,
            n: spec.n,
        };
        let policy = self.context.policy;
        let kernel = match spec.route {
            RouteChoice::Policy => {
                let split_ok = policy
                    .refuse_contract(
                        spec.dtype,
                        &gemm_audit_model::vocab::ContractKind::SplitKFixed,
                    )
                    .is_none();
                catalog::dispatch(spec.dtype, spec.m, spec.k, policy.tensor_cores, split_ok)
            }
            RouteChoice::Kernel(family) => family.for_shape(spec.k, spec.n),
            RouteChoice::BatchInvariant => {
                RouteChoice::ladder_rung(spec.op, spec.m, spec.k, spec.n)
            }
            RouteChoice::Cublas => {
                return self.resolve_vendor(spec, shape, Api::Blas, LtSelection::Heuristic);
            }
            RouteChoice::CublasLt => {
                return self.resolve_vendor(spec, shape, Api::Lt, LtSelection::Heuristic);
            }
            RouteChoice::CublasLtInvariant => {
                return self.resolve_vendor(spec, shape, Api::Lt, LtSelection::FamilyFixed);
            }
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
        let module = self
            .shared
            .module_of(kernel)
            .map_err(|e| cuda_err(format!("GEMM {gemm:?}: {e}")))?;
        let symbol = kernel.symbol(op, dtype);
        let (_, resources) = module.function(&symbol)?;
        catalog::nvrtc_route(
            &self.context,
            &module.identity,
            *resources,
            gemm,
            (op, dtype, shape),
            kernel,
        )
        .map_err(|e| cuda_err(format!("GEMM {gemm:?}: {e}")))
    }

    fn resolve_vendor(
        &self,
        spec: &GemmSpec,
        shape: GemmShape,
        api: Api,
        selection: LtSelection,
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
        let call = VendorCall::new(h, api, spec.dtype, spec.op, shape, fast, selection, None)?;
        planned_route(
            h,
            &sh.stream,
            &call,
            selection,
            spec.name.clone(),
            &lib.module,
            &sh.device,
            &sh.arch,
        )
    }
}

/// The route of a planned vendor call: the call is probed (run on `warm`
/// and captured on the handles' scratch stream, on scratch operands) for
/// the kernels it launches, then its route assembled.
#[allow(clippy::too_many_arguments)] // the parts of a route, each named once
pub(super) fn planned_route(
    h: &crate::blas::Handles,
    warm: &Arc<CudaStream>,
    call: &VendorCall,
    selection: LtSelection,
    gemm: String,
    module: &ModuleIdentity,
    device: &DeviceIdentity,
    arch: &str,
) -> Result<ResolvedGemmRoute> {
    let shape = call.shape;
    let elem = kernels::element_size(call.dtype);
    let alloc = |n: u64| {
        warm.alloc_zeros::<u8>((n as usize).max(1) * elem)
            .map_err(drv("allocating vendor probe operands"))
    };
    let a = alloc(shape.m * shape.k)?;
    let b = alloc(shape.k * shape.n)?;
    // The probe's runs write their own C.
    let c = std::sync::Mutex::new(alloc(shape.m * shape.n)?);
    let kernels = probe_kernels(warm, &h.scratch, call.api.symbol(), &gemm, |s| {
        let mut c = c.lock().unwrap_or_else(|p| p.into_inner());
        call.enqueue(h, s, &a, &b, &mut c)
    })?;
    let mut vendor = call.vendor_route(&module.compiler.version);
    vendor.physical_kernels = kernels.iter().filter_map(|n| n.symbol.clone()).collect();
    vendor_route(VendorParts {
        gemm,
        op: call.op,
        dtype: call.dtype,
        shape,
        strides: catalog::strides(call.op, shape),
        module,
        symbol: call.api.symbol(),
        contract: NumericContract {
            kind: call.numerics.contract.clone(),
            splits: call
                .lt
                .as_ref()
                .map_or(1, |p| p.attrs.split_k.clamp(1, u32::MAX as i64) as u32),
        },
        uses_tensor_cores: call.numerics.tensor_cores,
        operand_conversion: call.numerics.conversion,
        options_digest: call.numerics.digest(call.api, selection),
        arguments_digest: call.arguments_digest(),
        vendor,
        kernels: &kernels,
        device,
        arch,
    })
}

/// The kernels one vendor call launches: `enqueue` runs once eagerly on
/// `warm` (the library loads its kernels outside any capture), then is
/// captured once on `on` and the graph read back (never launched). Refused
/// when the capture holds no kernel.
pub(super) fn probe_kernels(
    warm: &Arc<CudaStream>,
    on: &Arc<CudaStream>,
    symbol: &str,
    gemm: &str,
    enqueue: impl Fn(&Arc<CudaStream>) -> Result<()>,
) -> Result<Vec<PhysicalNode>> {
    enqueue(warm)?;
    warm.synchronize().map_err(drv("vendor warm-up"))?;
    let raw = graph::capture(on, || enqueue(on))
        .map_err(|e| e.context(format_args!("capturing {symbol} for GEMM {gemm:?}")))?;
    let nodes = graph::introspect(&raw)?;
    drop(raw);
    on.synchronize().map_err(drv("vendor capture"))?;
    let kernels: Vec<PhysicalNode> = nodes
        .into_iter()
        .filter(|n| n.kind == NodeKind::Kernel)
        .collect();
    if kernels.is_empty() {
        return Err(cuda_err(format!(
            "{symbol} captured no kernel for GEMM {gemm:?}"
        )));
    }
    Ok(kernels)
}

/// Everything a vendor route is made of, decided before it is built.
pub(super) struct VendorParts<'a> {
    pub gemm: String,
    pub op: GemmOp,
    pub dtype: DType,
    pub shape: GemmShape,
    pub strides: GemmStrides,
    /// The library's pseudo-module (kind, digest, version).
    pub module: &'a ModuleIdentity,
    pub symbol: &'a str,
    pub contract: NumericContract,
    pub uses_tensor_cores: bool,
    pub operand_conversion: OperandConversion,
    pub options_digest: Digest,
    pub arguments_digest: Digest,
    /// The algorithm's fields, physical kernels filled in.
    pub vendor: VendorRoute,
    /// The probed kernels (at least one): the first gives the launch.
    pub kernels: &'a [PhysicalNode],
    pub device: &'a DeviceIdentity,
    pub arch: &'a str,
}

/// The route of one vendor call: what the library launched stands in for
/// the launch geometry and resources (the first kernel's grid and block,
/// every kernel's name and geometry digested).
pub(super) fn vendor_route(p: VendorParts<'_>) -> Result<ResolvedGemmRoute> {
    let Some(main) = p.kernels.first() else {
        return Err(cuda_err(format!("{} launched no kernel", p.symbol)));
    };
    let mut resources = DigestWriter::new("gemm-audit/vendor-resources/v1");
    for n in p.kernels {
        resources.field("kernel", FieldValue::Str(n.symbol.as_deref().unwrap_or("")));
        resources.field("grid", FieldValue::U32x3(n.grid));
        resources.field("block", FieldValue::U32x3(n.block));
        resources.field("shared_bytes", FieldValue::U32(n.shared_bytes));
    }
    let version = &p.module.compiler.version;
    let library_digest = {
        let mut w = DigestWriter::new("gemm-audit/vendor-library/v1");
        w.field("version", FieldValue::Str(version));
        w.finish()
    };
    Ok(ResolvedGemmRoute {
        gemm: p.gemm,
        op: p.op,
        dtype: p.dtype,
        backend: p.module.backend.clone(),
        contract: p.contract,
        instruction_family: "vendor-defined".into(),
        instruction_shape: "vendor-defined".into(),
        uses_tensor_cores: p.uses_tensor_cores,
        operand_conversion: p.operand_conversion,
        output_ownership: OutputOwnership::VendorDefined,
        kernel_symbol: p.symbol.into(),
        module_kind: p.module.kind.clone(),
        compilation_target: p.arch.to_string(),
        artifact_digest: p.module.digest,
        // The library is the compiler, named as its module names it (after
        // the module's first entry point, whichever symbol is called).
        compiler: CompilerIdentity {
            name: p.module.compiler.name.clone(),
            version: version.clone(),
            options_digest: p.options_digest,
            source_digest: library_digest,
        },
        device: p.device.clone(),
        device_capabilities: vec![format!("vendor:{}", p.symbol)],
        shape: p.shape,
        strides: p.strides,
        tile: TileShape { m: 0, n: 0, k: 0 },
        bk: 0,
        stages: 0,
        threads: main.block.iter().product(),
        launch: LaunchConfig {
            grid: main.grid,
            block: main.block,
            dynamic_shared_bytes: main.shared_bytes,
            arguments_digest: p.arguments_digest,
        },
        tensor_map: None,
        resources_digest: resources.finish(),
        tuning_table_revision: catalog::TUNING_TABLE_REVISION,
        schedule_revision: catalog::SCHEDULE_REVISION,
        vendor: Some(p.vendor),
    })
}
