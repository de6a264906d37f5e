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
pub use stub::{CudaBackend, CudaGraph, CudaLaunches};
