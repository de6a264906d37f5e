//! The CUDA backend: the `gemm-audit-cuda` crate, re-exported here. Built
//! without the `cuda` feature, a stub answers "built without CUDA support",
//! so the backend enum needs no `cfg`; the catalog (pure logic) is there in
//! every build.

#[cfg(feature = "cuda")]
pub use gemm_audit_cuda::{
    CUBLAS_SGEMM_SYMBOL, CUBLAS_SYMBOL, CUBLASLT_SYMBOL, CUDA_DEFAULT_POLICY, CudaBackend,
    CudaCaptureStream, CudaCause, CudaError, CudaGraph, CudaLaunches, CudarcElement, CudarcGemm,
    DeviceFingerprinter, FAMILY_MAX_WORKSPACE_BYTES, FAMILY_REFERENCE_M, ForeignFingerprinter,
    InvariantGemm, InvariantGemms, LT_WORKSPACE_BYTES, LtSelection, VendorApi, VendorGemm,
    VendorGemms, check_blas_math_mode, compilation_target, cublaslt_version, device_identity,
    function_resources, introspect, launch_config, lt_vendor_route, nvcc_compiler_identity,
    nvrtc_compiler_identity, set_blas_math_mode, vendor_modules,
};
#[cfg(all(feature = "cuda", feature = "bench"))]
pub use gemm_audit_cuda::{
    LT_TIMING_M, LtBestTiming, LtCandidateTiming, RouteTiming, cold_copies, interleaved_runs,
};
pub use gemm_audit_cuda::{catalog, kernel_cache, shipped};

#[cfg(not(feature = "cuda"))]
mod stub;
#[cfg(not(feature = "cuda"))]
pub use stub::{CudaBackend, CudaGraph, CudaLaunches, fill_kernel_cache};

/// Compiles every NVRTC module a device of `arch` (`sm_90`) loads into the
/// kernel cache ahead of any run (`gemm-audit compile-kernels`): NVRTC
/// needs no GPU, so an image can be built with its cache filled.
/// `before_compile` is told each module it compiles, before the compile
/// (`wgmma.cu for sm_90a with NVRTC 13.0.48 (CL-36260728)`). Returns each module
/// (`wgmma.cu.sm_90a`) and how its cubin was obtained (`shipped` ones are
/// not stored). See `gemm_audit_cuda::fill_kernel_cache`.
#[cfg(feature = "cuda")]
pub fn fill_kernel_cache(
    arch: &str,
    before_compile: impl FnMut(&str),
) -> crate::Result<Vec<(String, kernel_cache::Outcome)>> {
    Ok(gemm_audit_cuda::fill_kernel_cache(arch, before_compile)?)
}
