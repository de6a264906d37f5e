//! The kernel facts every backend shares, re-exported from the model
//! (`gemm_audit_model::kernels`) at their old path.

pub use gemm_audit_model::kernels::*;
