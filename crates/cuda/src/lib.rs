//! gemm-audit's CUDA backend (`gemm-audit-cuda`): NVIDIA GPUs through
//! cudarc, with CUDA loaded at run time (nothing CUDA is needed to
//! compile). `gemm-audit` re-exports it as `gemm_audit::backend::cuda`,
//! with a stub that says "built without CUDA support" when its `cuda`
//! feature is off.
//!
//! Without this crate's `cuda` feature only [`catalog`] (the kernel
//! families, symbols, geometry and dispatcher: pure logic) is compiled.
//! With it: `nvrtc` (run-time compilation to a cubin), `error` (typed CUDA
//! errors), `identity` (device and driver identity), `module` (loaded
//! NVRTC modules), `fingerprint` (the device SHA-256 chunk kernel), `seed`
//! (seeded operands made on the device),
//! `shared` (the process-wide device state), `launch` (prepared launches
//! and their timing), `device` (the backend: eager runs, capture, replay),
//! `resolve` (GEMM to route), `timing` (benchmark timing), `graph`
//! (capture discipline and graph introspection), `vendor` (cuBLAS /
//! cuBLASLt routes), `embed` (what an engine needs to audit its own
//! launches: see `docs/embedding.md`), `engine_gemm` (vendor GEMMs an
//! engine makes on its own buffers, recorded exactly) and `invariant_gemm`
//! (the batch-invariant wgmma GEMMs an engine calls on its own buffers).
//!
//! This is the workspace's only crate with `unsafe`: each file that needs
//! it allows `unsafe_code` for itself, and every block says why it is
//! sound (SAFETY).

// Pure logic (no CUDA calls): compiled and unit-tested in every build.
pub mod catalog;
// The seeding kernel's formula in Rust, held to the CPU's operands by a
// property test (no GPU needed).
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
mod foreign;
#[cfg(feature = "cuda")]
mod graph;
#[cfg(feature = "cuda")]
mod identity;
#[cfg(feature = "cuda")]
mod invariant_gemm;
#[cfg(feature = "cuda")]
mod launch;
// cublaslt-invariant's choice among timed candidates: pure logic, tested
// in every build.
#[cfg(any(feature = "cuda", test))]
mod lt_choice;
#[cfg(feature = "cuda")]
mod lt_family;
#[cfg(feature = "cuda")]
mod module;
#[cfg(feature = "cuda")]
mod nvrtc;
#[cfg(feature = "cuda")]
mod resolve;
#[cfg(feature = "cuda")]
mod seed;
#[cfg(test)]
mod seed_formula;
#[cfg(feature = "cuda")]
mod shared;
// Timing for the benches: behind `bench`, which the binary never enables.
#[cfg(all(feature = "cuda", feature = "bench"))]
mod timing;
#[cfg(feature = "cuda")]
mod tma;
#[cfg(feature = "cuda")]
mod vendor;
// The bench timing's visit order: pure logic, tested in every build.
#[cfg(any(all(feature = "cuda", feature = "bench"), test))]
mod visit_order;

#[cfg(feature = "cuda")]
pub use device::{CUDA_DEFAULT_POLICY, CudaBackend, CudaGraph, CudaLaunches};
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
pub use foreign::ForeignFingerprinter;
#[cfg(feature = "cuda")]
pub use identity::device_identity;
#[cfg(feature = "cuda")]
pub use invariant_gemm::{InvariantGemm, InvariantGemms};
#[cfg(all(feature = "cuda", feature = "bench"))]
pub use lt_family::LtCandidateTiming;
/// The m values `cublaslt-invariant`'s timed choice times each candidate at.
#[cfg(all(feature = "cuda", feature = "bench"))]
pub const LT_TIMING_M: [u64; 2] = lt_family::TIMING_M;
#[cfg(all(feature = "cuda", feature = "bench"))]
pub use timing::RouteTiming;
#[cfg(feature = "cuda")]
pub use vendor::{
    CUBLAS_SGEMM_SYMBOL, CUBLAS_SYMBOL, CUBLASLT_SYMBOL, FAMILY_MAX_WORKSPACE_BYTES,
    FAMILY_REFERENCE_M, LT_WORKSPACE_BYTES, LtSelection,
};
