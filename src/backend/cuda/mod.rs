//! The CUDA backend. Built with the `cuda` feature it drives NVIDIA GPUs
//! through cudarc (CUDA is loaded at run time, so nothing CUDA is needed to
//! compile); without it, a stub answers "built without CUDA support", so
//! the backend enum needs no `cfg`.
//!
//! With the feature: [`catalog`] (kernel families, symbols, geometry,
//! dispatcher; pure logic), `nvrtc` (run-time compilation to a cubin),
//! `device` (the backend: context, routes, eager runs, capture, replay,
//! device fingerprints), `graph` (capture discipline and graph
//! introspection) and `vendor` (cuBLAS / cuBLASLt routes). Every `unsafe`
//! of the crate lives in these files.

#[cfg(not(feature = "cuda"))]
mod stub;
#[cfg(not(feature = "cuda"))]
pub use stub::{CudaBackend, CudaGraph};

// Pure logic (no CUDA calls): compiled and unit-tested in every build.
pub mod catalog;
#[cfg(feature = "cuda")]
mod device;
#[cfg(feature = "cuda")]
mod graph;
#[cfg(feature = "cuda")]
mod nvrtc;
#[cfg(feature = "cuda")]
mod vendor;

#[cfg(feature = "cuda")]
pub use device::{CUDA_DEFAULT_POLICY, CudaBackend, CudaGraph};
#[cfg(feature = "cuda")]
pub use vendor::{CUBLAS_SYMBOL, CUBLASLT_SYMBOL};
