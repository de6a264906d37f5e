//! gemm-audit's CUDA backend (`gemm-audit-cuda`): NVIDIA GPUs through
//! cudarc, with CUDA loaded at run time (nothing CUDA is needed to
//! compile). `gemm-audit` re-exports it as `gemm_audit::backend::cuda`,
//! with a stub that says "built without CUDA support" when its `cuda`
//! feature is off.
//!
//! Without this crate's `cuda` feature only [`catalog`] (the kernel
//! families, symbols, geometry and dispatcher: pure logic) and
//! [`kernel_cache`] (the persistent compiled-kernel cache, with the cubins
//! [`shipped`] with the crate) are compiled.
//! With it, by area:
//! - the device: `nvrtc` (run-time compilation to a cubin), `module`
//!   (loaded modules), `launch` (prepared launches), `tma` (tensor maps),
//!   `seed` (seeded operands made on the device), `graph` (capture
//!   discipline and introspection), `resolve` (GEMM to route), `shared`
//!   (the process-wide device state), `identity`, `error`, `fingerprint`
//!   (the device chunk digests) and `device` (the backend: eager runs,
//!   capture, replay);
//! - `blas`: cuBLAS and cuBLASLt routes, and `cublaslt-invariant`'s
//!   family and timed choice (`blas::lt_family`; the rule, pure logic, is
//!   `lt_choice`);
//! - `engine`: what an engine calls on its own buffers: `embed` (auditing
//!   its own launches: see `docs/embedding.md`), `gemm` (vendor GEMMs,
//!   recorded exactly), `invariant` (the batch-invariant wgmma GEMMs) and
//!   `foreign` (fingerprints of outputs that live in another framework);
//! - `bench` (with the `bench` feature only): timing for the benches.
//!
//! This is the workspace's only crate with `unsafe`: each file that needs
//! it allows `unsafe_code` for itself, and every block says why it is
//! sound (SAFETY).

// Pure logic (no CUDA calls): compiled and unit-tested in every build.
pub mod catalog;
pub mod kernel_cache;
pub mod shipped;
// The seeding kernel's formula in Rust, held to the CPU's operands by a
// property test (no GPU needed).
#[cfg(any(all(feature = "cuda", feature = "bench"), test))]
mod bench;
#[cfg(feature = "cuda")]
mod blas;
#[cfg(feature = "cuda")]
mod device;
#[cfg(feature = "cuda")]
mod engine;
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
// cublaslt-invariant's choice among timed candidates: pure logic, tested
// in every build.
#[cfg(any(feature = "cuda", test))]
mod lt_choice;
#[cfg(feature = "cuda")]
mod module;
#[cfg(feature = "cuda")]
mod nvrtc;
#[cfg(feature = "cuda")]
mod resolve;
#[cfg(feature = "cuda")]
mod seed;
// The seeding kernel's formula in Rust, held to the CPU's operands by a
// property test (no GPU needed).
#[cfg(test)]
mod seed_formula;
#[cfg(feature = "cuda")]
mod shared;
#[cfg(feature = "cuda")]
mod tma;

#[cfg(all(feature = "cuda", feature = "bench"))]
pub use bench::lt_best::LtBestTiming;
#[cfg(all(feature = "cuda", feature = "bench"))]
pub use bench::{cold_copies, interleaved_runs};
#[cfg(all(feature = "cuda", feature = "bench"))]
pub use blas::lt_family::LtCandidateTiming;
#[cfg(feature = "cuda")]
pub use device::{CUDA_DEFAULT_POLICY, CudaBackend, CudaGraph, CudaLaunches};
#[cfg(feature = "cuda")]
pub use engine::embed::{
    CudaCaptureStream, check_blas_math_mode, compilation_target, cublaslt_version,
    function_resources, introspect, launch_config, lt_vendor_route, nvcc_compiler_identity,
    nvrtc_compiler_identity, set_blas_math_mode, vendor_modules,
};
#[cfg(feature = "cuda")]
pub use engine::foreign::ForeignFingerprinter;
#[cfg(feature = "cuda")]
pub use engine::gemm::{CudarcElement, CudarcGemm, VendorApi, VendorGemm, VendorGemms};
#[cfg(feature = "cuda")]
pub use engine::invariant::{InvariantGemm, InvariantGemms};
#[cfg(feature = "cuda")]
pub use error::{CudaCause, CudaError};
#[cfg(feature = "cuda")]
pub use fingerprint::DeviceFingerprinter;
#[cfg(feature = "cuda")]
pub use identity::device_identity;
#[cfg(feature = "cuda")]
pub use nvrtc::{
    compile_uncached as nvrtc_compile, fill_kernel_cache, fill_kernel_cache_in, nvrtc_build,
    nvrtc_version,
};
/// The m values `cublaslt-invariant`'s timed choice times each candidate at.
#[cfg(all(feature = "cuda", feature = "bench"))]
pub const LT_TIMING_M: [u64; 2] = blas::lt_family::TIMING_M;
#[cfg(all(feature = "cuda", feature = "bench"))]
pub use bench::timing::RouteTiming;
#[cfg(feature = "cuda")]
pub use blas::{
    CUBLAS_SGEMM_SYMBOL, CUBLAS_SYMBOL, CUBLASLT_SYMBOL, FAMILY_MAX_WORKSPACE_BYTES,
    FAMILY_REFERENCE_M, LT_WORKSPACE_BYTES, LtSelection,
};
