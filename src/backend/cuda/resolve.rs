//! Resolving a GEMM to the route the CUDA backend launches: an NVRTC kernel
//! (by policy or as asked) or a vendor call, whose physical kernels are read
//! from a capture of the call.

use super::catalog::{self, CudaKernel, Geometry};
use super::device::CudaBackend;
use super::error::{cuda_err, drv};
use super::graph;
use super::vendor::{Api, LtSelection, VendorCall};
use crate::backend::common;
use crate::digest::{DigestWriter, FieldValue};
use crate::error::Result;
use crate::identity::CompilerIdentity;
use crate::physical::{NodeKind, PhysicalNode};
use crate::policy::PolicyMode;
use crate::route::{
    DType, GemmOp, GemmShape, LaunchConfig, ModuleKind, NumericContract, OperandConversion,
    OutputOwnership, PhysicalBackend, ResolvedGemmRoute, TensorMapIdentity, TileShape,
};
use crate::workload::{GemmSpec, RouteChoice};

impl CudaBackend {
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
            RouteChoice::WgmmaLarge => CudaKernel::WgmmaLarge,
            RouteChoice::WgmmaSmall => CudaKernel::WgmmaSmall,
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
        kernel
            .serves_shape(op, shape)
            .map_err(|e| cuda_err(format!("GEMM {gemm:?}: {e}")))?;
        let g: Geometry = kernel
            .geometry(shape)
            .map_err(|e| cuda_err(format!("GEMM {gemm:?}: {e}")))?;
        let symbol = kernel.symbol(op, dtype);
        let (_, resources) = module.function(&symbol)?;
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
            compilation_target: module.identity.target.clone(),
            artifact_digest: module.identity.digest,
            compiler: module.identity.compiler.clone(),
            device: self.shared.device.clone(),
            device_capabilities: kernel.capabilities(dtype),
            shape,
            strides,
            tile: g.tile,
            bk: g.bk,
            stages: g.stages,
            threads: g.threads,
            launch: LaunchConfig {
                grid: g.grid,
                block: g.block,
                dynamic_shared_bytes: g.dynamic_shared_bytes,
                arguments_digest: catalog::arguments_digest(
                    &symbol,
                    shape,
                    strides,
                    kernel.splits(),
                ),
            },
            tensor_map: kernel.is_wgmma().then(|| TensorMapIdentity {
                revision: catalog::TENSOR_MAP_REVISION,
                digest: catalog::tensor_map_digest(&catalog::tensor_maps(kernel, op, dtype, shape)),
            }),
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
        let call = VendorCall::new(h, api, spec.dtype, spec.op, shape, fast, selection)?;
        // Physical kernels: run the call once eagerly (loads its kernels outside
        // any capture), then capture it once on the scratch stream and read the graph.
        let elem = common::element_size(spec.dtype);
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
            e.context(format_args!(
                "capturing {} for GEMM {:?}",
                api.symbol(),
                spec.name
            ))
        })?;
        let nodes = graph::introspect(&raw)?;
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
                options_digest: numerics.digest(api, selection),
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
}
