//! What an engine needs to audit its own CUDA GEMM launches: a capturable
//! wrapper of its own cudarc stream, graph introspection of any captured
//! graph, compiler and library identities, and route parts from a cudarc
//! launch configuration and from cuBLASLt algorithm attributes.
//!
//! Device identity ([`crate::device_identity`]) and device-side output
//! fingerprints ([`crate::DeviceFingerprinter`]) complete the set.

use crate::blas::{self as vendor, Vendor};
use crate::error::CudaError;
use cudarc::cublaslt::sys as lt;
use cudarc::driver::sys;
use cudarc::driver::{CudaGraph, CudaStream};
use gemm_audit_model::CompilerIdentity;
use gemm_audit_model::digest::Digest;
use gemm_audit_model::identity::ModuleIdentity;
use gemm_audit_model::physical::PhysicalNode;
use gemm_audit_model::recorder::CaptureStream;
use gemm_audit_model::route::{LaunchConfig, ResolvedGemmRoute, VendorRoute};
use gemm_audit_model::vocab::{ContractKind, DType, PhysicalBackend};
use std::sync::Arc;

/// The engine's own stream, capturable by [`gemm_audit_model::recorder::capture`].
///
/// Beginning a capture refuses the legacy default stream (it cannot be
/// captured) and synchronizes the stream first; the capture is
/// thread-local, so work other threads enqueue on their own streams is not
/// swept in. The graph is instantiated at the end and uploaded before the
/// first replay.
#[derive(Debug, Clone)]
pub struct CudaCaptureStream(pub Arc<CudaStream>);

impl CudaCaptureStream {
    /// Wraps the engine's stream.
    pub fn new(stream: Arc<CudaStream>) -> Self {
        CudaCaptureStream(stream)
    }

    /// The wrapped stream.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.0
    }
}

impl CaptureStream for CudaCaptureStream {
    type Graph = CudaGraph;
    type Error = CudaError;

    fn begin_capture(&self) -> Result<(), CudaError> {
        if self.0.cu_stream().is_null() {
            return Err(CudaError::msg(
                "refusing to capture the legacy default stream: capture on a stream you created",
            ));
        }
        self.0
            .synchronize()
            .map_err(CudaError::with("synchronize before capture"))?;
        self.0
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(CudaError::with("begin capture"))
    }

    fn end_capture(&self) -> Result<CudaGraph, CudaError> {
        self.0
            .end_capture(sys::CUgraphInstantiate_flags(0))
            .map_err(CudaError::with("end capture / instantiate"))?
            .ok_or_else(|| CudaError::msg("the capture produced no graph"))
    }

    fn upload(&self, graph: &CudaGraph) -> Result<(), CudaError> {
        graph.upload().map_err(CudaError::with("graph upload"))
    }
}

/// The nodes of any captured cudarc graph, in topological order: each
/// kernel node's symbol, grid, block and dynamic shared bytes, and the
/// kind of every other node. Bind them to the declared routes with
/// [`gemm_audit_model::physical::bind`] to see that what was captured is what was
/// recorded (a vendor call that became split-K plus a reduce shows there).
pub fn introspect(graph: &CudaGraph) -> Result<Vec<PhysicalNode>, CudaError> {
    crate::graph::introspect(graph)
}

/// The route's launch part from a cudarc launch configuration and the
/// pointer-free digest of the arguments
/// ([`gemm_audit_model::ArgumentsDigest`]).
pub fn launch_config(cfg: &cudarc::driver::LaunchConfig, arguments_digest: Digest) -> LaunchConfig {
    LaunchConfig {
        grid: [cfg.grid_dim.0, cfg.grid_dim.1, cfg.grid_dim.2],
        block: [cfg.block_dim.0, cfg.block_dim.1, cfg.block_dim.2],
        dynamic_shared_bytes: cfg.shared_mem_bytes,
        arguments_digest,
    }
}

/// The identity of NVRTC as the compiler of `source` with `options`: the
/// version the loaded NVRTC reports, the options in order, the source.
pub fn nvrtc_compiler_identity(
    options: &[&str],
    source: &str,
) -> Result<CompilerIdentity, CudaError> {
    Ok(CompilerIdentity::new(
        "nvrtc",
        crate::nvrtc::nvrtc_version()?,
        options,
        source.as_bytes(),
    ))
}

/// The identity of a build-time nvcc as the compiler of `source`:
/// `release` is what `nvcc --version` printed (e.g. `13.0, V13.0.48`),
/// `flags` the command-line flags in order.
pub fn nvcc_compiler_identity(release: &str, flags: &[&str], source: &[u8]) -> CompilerIdentity {
    CompilerIdentity::new("nvcc", release, flags, source)
}

/// The resources of a loaded kernel, as a symbol declares them
/// ([`gemm_audit_model::identity::SymbolEntry::with_resources`]): a digest of what the
/// driver reports about `f` (registers, static shared, local and constant
/// bytes, most threads per block, binary version). The same digest the
/// CUDA backend declares for its own kernels.
pub fn function_resources(
    symbol: &str,
    f: &cudarc::driver::CudaFunction,
) -> Result<Digest, CudaError> {
    crate::module::resources_digest(symbol, f)
}

/// Sets a cuBLAS handle's math mode to what a route's contract requires
/// for `dtype` (pedantic: `CUBLAS_PEDANTIC_MATH`; fast: TF32 tensor-op math
/// for f32, the default math for halves), as the CUDA backend sets its own.
pub fn set_blas_math_mode(
    blas: &cudarc::cublas::CudaBlas,
    dtype: DType,
    contract: &ContractKind,
) -> Result<(), CudaError> {
    let mode = vendor::Numerics::of(dtype, contract.class() == &ContractKind::VendorFast).blas_math;
    vendor::set_math_mode(blas, mode)
}

/// Refuses `route` (a cuBLAS call) when the math mode read back from the
/// handle it runs on is not the one its contract requires for its dtype,
/// or when the handle allows atomics (`cublasSetAtomicsMode`: results
/// then depend on the order atomics land in, which no vendor contract
/// promises): an engine (or a library it calls) that changed either would
/// otherwise run such a call under its contract unnoticed. Not a cuBLAS
/// route: nothing to check.
pub fn check_blas_math_mode(
    blas: &cudarc::cublas::CudaBlas,
    route: &ResolvedGemmRoute,
) -> Result<(), gemm_audit_model::Error> {
    if route.backend != PhysicalBackend::Cublas {
        return Ok(());
    }
    if vendor::atomics_allowed(blas)? {
        return Err(gemm_audit_model::Refusal::new(
            gemm_audit_model::RefusalStage::Recording,
            None,
            "contract.kind",
            format!("{} with atomics not allowed", route.contract.kind),
            "a handle that allows atomics (cublasSetAtomicsMode)".to_string(),
        )
        .into());
    }
    let mode = vendor::math_mode(blas)?;
    let want = vendor::Numerics::of(
        route.dtype,
        route.contract.kind.class() == &ContractKind::VendorFast,
    )
    .blas_math;
    if mode == want {
        return Ok(());
    }
    Err(gemm_audit_model::Refusal::new(
        gemm_audit_model::RefusalStage::Recording,
        None,
        "contract.kind",
        format!(
            "{} {} (math mode {want:?})",
            route.contract.kind, route.dtype
        ),
        format!("the handle's math mode {mode:?}"),
    )
    .into())
}

/// The compilation target of the device behind `ctx`, e.g. `sm_90`.
pub fn compilation_target(ctx: &Arc<cudarc::driver::CudaContext>) -> Result<String, CudaError> {
    crate::identity::arch(ctx)
}

/// The loaded cuBLAS and cuBLASLt libraries as modules, for a context's
/// module set: each is identified by its version, and its one symbol
/// (`cublasGemmEx`, `cublasLtMatmul`) serves every op and dtype under the
/// vendor contracts. `target` is the device's compilation target.
pub fn vendor_modules(target: &str) -> Vec<ModuleIdentity> {
    let v = Vendor::probe(target);
    [v.cublas, v.cublaslt]
        .into_iter()
        .flatten()
        .map(|l| l.module)
        .collect()
}

/// The version string of the loaded cuBLASLt (e.g. `cuBLASLt 13.1.0`, or
/// `cuBLASLt 13.1.0 [NVIDIA_TF32_OVERRIDE=0]` with a determinism knob set:
/// see [`crate::catalog::version_with_knobs`]), if the library is present.
pub fn cublaslt_version() -> Option<String> {
    Vendor::probe("").cublaslt.map(|l| l.version)
}

/// What cuBLASLt chose, from the algorithm the engine passed to
/// `cublasLtMatmul`: algorithm, tile, split-K count, reduction scheme,
/// stages, swizzle, inner and cluster shape, and the workspace size the
/// heuristic asked for. `physical_kernels` is left empty: fill it from
/// [`introspect`] of the captured graph.
pub fn lt_vendor_route(
    algo: &lt::cublasLtMatmulAlgo_t,
    library_version: &str,
    workspace_bytes: u64,
) -> VendorRoute {
    use lt::cublasLtMatmulAlgoConfigAttributes_t as A;
    let get = |attr| vendor::algo_attribute(algo, attr);
    VendorRoute {
        library_version: library_version.to_string(),
        algorithm_id: get(A::CUBLASLT_ALGO_CONFIG_ID).unwrap_or(-1),
        tile_id: get(A::CUBLASLT_ALGO_CONFIG_TILE_ID).unwrap_or(-1),
        split_k: get(A::CUBLASLT_ALGO_CONFIG_SPLITK_NUM).unwrap_or(-1),
        reduction_scheme: get(A::CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME).unwrap_or(-1),
        stages_id: get(A::CUBLASLT_ALGO_CONFIG_STAGES_ID).unwrap_or(-1),
        swizzle: get(A::CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING).unwrap_or(-1),
        inner_shape_id: get(A::CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID),
        cluster_shape_id: get(A::CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
        workspace_bytes,
        physical_kernels: Vec::new(),
    }
}
