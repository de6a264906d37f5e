//! The CUDA backend: the `gemm-audit-cuda` crate, re-exported here. Built
//! without the `cuda` feature, a stub answers "built without CUDA support",
//! so the backend enum needs no `cfg`; the catalog (pure logic) is there in
//! every build.

pub use gemm_audit_cuda::catalog;
#[cfg(feature = "cuda")]
pub use gemm_audit_cuda::*;

#[cfg(not(feature = "cuda"))]
mod stub;
#[cfg(not(feature = "cuda"))]
pub use stub::{CudaBackend, CudaGraph, CudaLaunches};
