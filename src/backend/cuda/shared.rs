#![allow(unsafe_code)]
//! What every backend on the device shares (context, stream, the lock that
//! serializes work on it, loaded modules, identities, vendor handles), and
//! the process-wide cache that opens it once.

use super::catalog;
use super::error::CudaError;
use super::fingerprint::DeviceFingerprinter;
use super::identity::device_identity;
use super::module::LoadedModule;
use super::nvrtc;
use super::vendor::Vendor;
use crate::digest::Digest;
use crate::identity::{CompilerIdentity, DeviceIdentity, VolatileMetadata};
use cudarc::driver::sys;
use cudarc::driver::{CudaContext, CudaStream};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

/// What every backend on this device shares: context, stream, modules,
/// identities and vendor handles. One per process (see [`shared`]).
pub(crate) struct Shared {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    /// Serializes work on `stream` across backends and threads.
    lock: Mutex<()>,
    pub gemm: LoadedModule,
    /// The SHA-256 chunk kernel, loaded into `ctx`.
    pub fingerprinter: DeviceFingerprinter,
    pub compiler: CompilerIdentity,
    pub device: DeviceIdentity,
    pub arch: String,
    pub volatile: VolatileMetadata,
    pub vendor: Vendor,
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("device", &self.device)
            .field("arch", &self.arch)
            .field("module", &self.gemm.identity.digest)
            .finish_non_exhaustive()
    }
}

impl Shared {
    /// Holds the stream for the caller's work.
    pub fn lock(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens device 0: context, stream, identity, both NVRTC modules and
    /// the vendor libraries.
    fn open() -> Result<Shared, CudaError> {
        // SAFETY: only checks whether the driver library can be loaded.
        if !unsafe { sys::is_culib_present() } {
            return Err(CudaError::msg(
                "no CUDA driver library (libcuda.so) was found",
            ));
        }
        let count =
            CudaContext::device_count().map_err(CudaError::with("cuInit / device count"))?;
        if count < 1 {
            return Err(CudaError::msg("no CUDA device is present"));
        }
        // SAFETY: only checks whether the NVRTC library can be loaded.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(CudaError::msg(
                "NVRTC (libnvrtc.so) was not found; add the CUDA toolkit's lib64 to LD_LIBRARY_PATH",
            ));
        }
        let ctx = CudaContext::new(0).map_err(CudaError::with("creating a context on device 0"))?;
        // SAFETY: every buffer is used on this backend's one stream (plus a
        // scratch stream that only captures and never runs), and work is
        // serialized by `Shared::lock`, so cudarc's cross-stream events are
        // not needed; they would also put event nodes into captured graphs.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx
            .new_stream()
            .map_err(CudaError::with("creating a stream"))?;
        let (device, mut volatile) = device_identity(&ctx)?;
        let [major, minor] = device
            .compute_capability
            .ok_or_else(|| CudaError::msg("the device reports no compute capability"))?;
        let arch = format!("sm_{major}{minor}");
        let (nv_major, nv_minor) = nvrtc::version()?;
        let options = catalog::compile_options(&arch);
        let compiler = CompilerIdentity {
            name: "nvrtc".into(),
            version: format!("{nv_major}.{nv_minor}"),
            options_digest: catalog::options_digest(&options),
            source_digest: Digest::sha256(catalog::GEMM_SOURCE.as_bytes()),
        };
        let cubin = nvrtc::compile_cubin(catalog::GEMM_SOURCE, "gemm.cu", &options)?;
        let gemm = LoadedModule::load(&ctx, cubin, &catalog::module_symbols(), &compiler, &arch)?;
        let fingerprinter = DeviceFingerprinter::compile(&ctx, &options)?;
        let vendor = Vendor::probe(&arch);
        volatile.insert(
            "cuda.nvrtc_version".into(),
            format!("{nv_major}.{nv_minor}"),
        );
        if let Some(l) = &vendor.cublas {
            volatile.insert("cuda.cublas_version".into(), l.version.clone());
        }
        if let Some(l) = &vendor.cublaslt {
            volatile.insert("cuda.cublaslt_version".into(), l.version.clone());
        }
        volatile.insert("os".into(), std::env::consts::OS.into());
        Ok(Shared {
            ctx,
            stream,
            lock: Mutex::new(()),
            gemm,
            fingerprinter,
            compiler,
            device,
            arch,
            volatile,
            vendor,
        })
    }
}

/// The process-wide device state: compiled once, shared by every backend.
static SHARED: Mutex<Option<Arc<Shared>>> = Mutex::new(None);

/// The process-wide device state, opened on first use. A failure is not
/// cached: the next call tries again.
pub(crate) fn shared() -> Result<Arc<Shared>, CudaError> {
    let mut g = SHARED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(s) = g.as_ref() {
        return Ok(s.clone());
    }
    // cudarc's dynamic loading panics on a missing symbol; report it instead.
    let opened = std::panic::catch_unwind(Shared::open).map_err(|_| {
        CudaError::msg("loading CUDA panicked (a library is missing a symbol: too old a driver?)")
    })?;
    let s = Arc::new(opened?);
    *g = Some(s.clone());
    Ok(s)
}
