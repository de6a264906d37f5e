//! The CUDA backend. Built with the `cuda` feature it drives NVIDIA GPUs
//! through cudarc (CUDA is loaded at run time, so nothing CUDA is needed to
//! compile); without it, a stub answers "built without CUDA support", so
//! the backend enum needs no `cfg`.
//!
//! With the feature: [`catalog`] (kernel families, symbols, geometry,
//! dispatcher; pure logic), `nvrtc` (run-time compilation to a cubin),
//! `error` (typed CUDA errors), `identity` (device and driver identity),
//! `module` (loaded NVRTC modules), `fingerprint` (the device SHA-256
//! chunk kernel), `shared` (the process-wide device state), `launch`
//! (prepared launches and their timing), `device` (the backend: eager
//! runs, capture, replay), `resolve` (GEMM to route), `timing` (benchmark
//! timing), `graph` (capture discipline and graph introspection) and
//! `vendor` (cuBLAS / cuBLASLt routes), `embed` (what an engine needs
//! to audit its own launches: see `docs/embedding.md`) and `engine_gemm`
//! (vendor GEMMs an engine makes on its own buffers, recorded exactly). Every `unsafe` of the crate lives
//! in these files, each of which allows `unsafe_code` for itself.

#[cfg(not(feature = "cuda"))]
mod stub;
#[cfg(not(feature = "cuda"))]
pub use stub::{CudaBackend, CudaGraph};

// Pure logic (no CUDA calls): compiled and unit-tested in every build.
pub mod catalog;
#[cfg(feature = "cuda")]
mod device;
#[cfg(feature = "cuda")]
mod embed;
#[cfg(feature = "cuda")]
mod engine_gemm;
#[cfg(feature = "cuda")]
mod error;
#[cfg(feature = "cuda")]
mod fingerprint;
#[cfg(feature = "cuda")]
mod graph;
#[cfg(feature = "cuda")]
mod identity;
#[cfg(feature = "cuda")]
mod launch;
#[cfg(feature = "cuda")]
mod module;
#[cfg(feature = "cuda")]
mod nvrtc;
#[cfg(feature = "cuda")]
mod resolve;
#[cfg(feature = "cuda")]
mod shared;
#[cfg(feature = "cuda")]
mod timing;
#[cfg(feature = "cuda")]
mod tma;
#[cfg(feature = "cuda")]
mod vendor;

#[cfg(feature = "cuda")]
pub use device::{CUDA_DEFAULT_POLICY, CudaBackend, CudaGraph};
#[cfg(feature = "cuda")]
pub use embed::{
    CudaCaptureStream, check_blas_math_mode, compilation_target, cublaslt_version,
    function_resources, introspect, launch_config, lt_vendor_route, nvcc_compiler_identity,
    nvrtc_compiler_identity, set_blas_math_mode, vendor_modules,
};
#[cfg(feature = "cuda")]
pub use engine_gemm::{CudarcElement, CudarcGemm, VendorApi, VendorGemm, VendorGemms};
#[cfg(feature = "cuda")]
pub use error::{CudaCause, CudaError};
#[cfg(feature = "cuda")]
pub use fingerprint::DeviceFingerprinter;
#[cfg(feature = "cuda")]
pub use identity::device_identity;
#[cfg(feature = "cuda")]
#[doc(hidden)]
pub use timing::RouteTiming;
#[cfg(feature = "cuda")]
pub use vendor::{
    CUBLAS_SGEMM_SYMBOL, CUBLAS_SYMBOL, CUBLASLT_SYMBOL, FAMILY_MAX_WORKSPACE_BYTES,
    FAMILY_REFERENCE_M, LT_WORKSPACE_BYTES, LtSelection,
};
