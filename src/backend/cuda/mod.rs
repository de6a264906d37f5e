//! The CUDA backend. Built with the `cuda` feature it drives NVIDIA GPUs
//! through cudarc (CUDA is loaded at run time); without it, a stub answers
//! "built without CUDA support", so the backend enum needs no `cfg`.

#[cfg(not(feature = "cuda"))]
mod stub;
#[cfg(not(feature = "cuda"))]
pub use stub::{CudaBackend, CudaGraph};
