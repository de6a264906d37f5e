//! Typed CUDA errors: what failed, with the cudarc error that caused it.
//!
//! Every error of the CUDA backend reaches the library as
//! [`Error::Backend`] for backend `cuda`, whose
//! `source` is a [`CudaError`]; its own `source` is the cudarc error
//! (driver, NVRTC, cuBLAS or cuBLASLt) when one caused it, so callers can
//! downcast to e.g. [`cudarc::driver::DriverError`]. The backend error's
//! reason still reads `what: cause`, so messages are unchanged.

use gemm_audit_model::Error;
use std::fmt;

/// The cudarc error behind a [`CudaError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CudaCause {
    /// A CUDA driver API call failed.
    #[error(transparent)]
    Driver(#[from] cudarc::driver::DriverError),
    /// An NVRTC call failed.
    #[error(transparent)]
    Nvrtc(#[from] cudarc::nvrtc::result::NvrtcError),
    /// A cuBLAS call failed.
    #[error(transparent)]
    Blas(#[from] cudarc::cublas::result::CublasError),
    /// A cuBLASLt call failed.
    #[error(transparent)]
    Lt(#[from] cudarc::cublaslt::result::CublasError),
}

impl CudaCause {
    /// The cudarc error itself, as an error trait object.
    fn as_error(&self) -> &(dyn std::error::Error + 'static) {
        match self {
            CudaCause::Driver(e) => e,
            CudaCause::Nvrtc(e) => e,
            CudaCause::Blas(e) => e,
            CudaCause::Lt(e) => e,
        }
    }
}

/// A CUDA operation that failed: `Display` says what failed; `source()` is
/// the cudarc error (not the [`CudaCause`] wrapper), when one caused it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaError {
    what: String,
    source: Option<CudaCause>,
}

impl CudaError {
    /// `what` failed because of `cause`.
    pub fn new(what: impl Into<String>, cause: impl Into<CudaCause>) -> Self {
        CudaError {
            what: what.into(),
            source: Some(cause.into()),
        }
    }

    /// `what` failed, with no cudarc error behind it.
    pub fn msg(what: impl Into<String>) -> Self {
        CudaError {
            what: what.into(),
            source: None,
        }
    }

    /// A `map_err` adapter: `what` failed because of the cudarc error given.
    pub fn with<E: Into<CudaCause>>(what: &str) -> impl FnOnce(E) -> CudaError + '_ {
        move |e| CudaError::new(what, e)
    }

    /// What failed.
    pub fn what(&self) -> &str {
        &self.what
    }

    /// The cudarc error, when one caused this.
    pub fn cause(&self) -> Option<&CudaCause> {
        self.source.as_ref()
    }

    /// The same error with `context: ` put before what failed.
    pub fn context(mut self, context: impl fmt::Display) -> Self {
        self.what = format!("{context}: {}", self.what);
        self
    }

    /// What failed and its cause on one line (`what: cause`, the cause
    /// left out when `what` already names it).
    pub fn message(&self) -> String {
        match &self.source {
            Some(c) => {
                let c = c.to_string();
                if self.what.contains(&c) {
                    self.what.clone()
                } else {
                    format!("{}: {c}", self.what)
                }
            }
            None => self.what.clone(),
        }
    }
}

impl fmt::Display for CudaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.what)
    }
}

impl std::error::Error for CudaError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_ref().map(CudaCause::as_error)
    }
}

impl From<CudaError> for Error {
    /// A backend error for `cuda` whose reason is [`CudaError::message`] and
    /// whose source is the [`CudaError`].
    fn from(e: CudaError) -> Self {
        Error::backend_caused("cuda", e.message(), e)
    }
}

/// A backend error naming CUDA, with no cudarc error behind it.
pub(crate) fn cuda_err(reason: impl Into<String>) -> Error {
    CudaError::msg(reason).into()
}

/// A `map_err` adapter: `what` failed because of the cudarc error given.
pub(crate) fn drv<E: Into<CudaCause>>(what: &str) -> impl FnOnce(E) -> Error + '_ {
    move |e| CudaError::new(what, e).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn backend_error_keeps_the_message_and_the_typed_cause() {
        // A cuBLAS status formats without calling into CUDA (a driver error
        // asks the driver for its text), so this runs without a GPU.
        use cudarc::cublas::{result::CublasError, sys::cublasStatus_t};
        let cause = CublasError(cublasStatus_t::CUBLAS_STATUS_ALLOC_FAILED);
        let e: Error = CudaError::new("cublasCreate", cause).into();
        assert_eq!(
            e.to_string(),
            format!("backend cuda: cublasCreate: {cause:?}")
        );
        let Error::Backend {
            backend, source, ..
        } = &e
        else {
            panic!("not a backend error: {e:?}");
        };
        assert_eq!(backend, "cuda");
        let cuda = source
            .as_deref()
            .and_then(|s| s.downcast_ref::<CudaError>())
            .expect("a CudaError source");
        assert_eq!(cuda.what(), "cublasCreate");
        assert_eq!(cuda.cause(), Some(&CudaCause::Blas(cause)));
        let blas = cuda
            .source()
            .and_then(|s| s.downcast_ref::<CublasError>())
            .expect("the cuBLAS error as the CudaError's source");
        assert_eq!(*blas, cause);
        assert!(blas.source().is_none());
    }

    #[test]
    fn message_says_what_then_why_once() {
        use cudarc::nvrtc::{result::NvrtcError, sys::nvrtcResult};
        let cause = NvrtcError(nvrtcResult::NVRTC_ERROR_COMPILATION);
        let e = CudaError::new("nvrtcVersion", cause);
        assert_eq!(e.to_string(), "nvrtcVersion");
        assert_eq!(e.message(), format!("nvrtcVersion: {cause:?}"));
        let named = CudaError::new(format!("compiling ({cause:?}) failed"), cause);
        assert_eq!(named.message(), format!("compiling ({cause:?}) failed"));
        let plain = cuda_err("no CUDA device is present");
        assert_eq!(plain.to_string(), "backend cuda: no CUDA device is present");
        assert_eq!(
            CudaError::msg("begin capture")
                .context("graph capture")
                .to_string(),
            "graph capture: begin capture"
        );
    }
}
