#![allow(unsafe_code)]
//! What every backend on the device shares (context, stream, the lock that
//! serializes work on it, loaded modules, identities, vendor handles), and
//! the process-wide cache that opens it once.

use crate::blas::Vendor;
use crate::catalog::{self, CudaFamily};
use crate::error::CudaError;
use crate::fingerprint::DeviceFingerprinter;
use crate::identity::device_identity;
use crate::module::LoadedModule;
use crate::nvrtc;
use crate::seed::DeviceSeeder;
use cudarc::driver::sys;
use cudarc::driver::{CudaContext, CudaStream};
use gemm_audit_model::DeviceIdentity;
use gemm_audit_model::identity::VolatileMetadata;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

/// What every backend on this device shares: context, stream, modules,
/// identities and vendor handles. One per device ordinal per process (see
/// [`shared`]).
pub(crate) struct Shared {
    /// The CUDA device ordinal this state was opened on.
    pub ordinal: usize,
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    /// Serializes work on `stream` across backends and threads.
    lock: Mutex<()>,
    pub gemm: LoadedModule,
    /// The TMA + wgmma module (compute capability 9.0 only), or why this
    /// device has none.
    pub wgmma: Result<LoadedModule, catalog::WgmmaUnavailable>,
    /// The SHA-256 chunk kernel, loaded into `ctx`.
    pub fingerprinter: DeviceFingerprinter,
    /// The seeded-operand kernel, loaded into `ctx`.
    pub seeder: DeviceSeeder,
    pub device: DeviceIdentity,
    pub arch: String,
    pub volatile: VolatileMetadata,
    pub vendor: Vendor,
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("ordinal", &self.ordinal)
            .field("device", &self.device)
            .field("arch", &self.arch)
            .field("module", &self.gemm.identity.digest)
            .finish_non_exhaustive()
    }
}

impl Shared {
    /// Holds the stream for the caller's work.
    pub(crate) fn lock(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens device `ordinal`: context, stream, identity, both NVRTC
    /// modules and the vendor libraries.
    fn open(ordinal: usize) -> Result<Shared, CudaError> {
        let count = device_count()?;
        if count < 1 {
            return Err(CudaError::msg("no CUDA device is present"));
        }
        if ordinal >= count {
            return Err(CudaError::msg(format!(
                "no CUDA device {ordinal}: this host has {count} (ordinals 0 to {})",
                count - 1
            )));
        }
        nvrtc::ensure_loaded()?;
        let ctx = CudaContext::new(ordinal).map_err(CudaError::with(&format!(
            "creating a context on device {ordinal}"
        )))?;
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
        let nvrtc_version = nvrtc::nvrtc_version()?;
        let gemm = LoadedModule::compile(&ctx, catalog::CudaModule::Gemm, &arch, &nvrtc_version)?;
        let wgmma = load_wgmma(&ctx, &arch, &nvrtc_version);
        let fingerprinter = DeviceFingerprinter::compile(&ctx, &catalog::compile_options(&arch))?;
        let seeder = DeviceSeeder::compile(&ctx, &catalog::compile_options(&arch))?;
        let vendor = Vendor::probe(&arch);
        volatile.insert("cuda.nvrtc_version".into(), nvrtc_version);
        volatile.insert("cuda.nvrtc_build".into(), nvrtc::nvrtc_build()?);
        let (cache_dir, compiled) = nvrtc::cache_report();
        volatile.insert("cuda.kernel_cache".into(), cache_dir);
        for (module, how) in compiled {
            volatile.insert(format!("cuda.kernel_cache.{module}"), how);
        }
        if let Some(l) = &vendor.cublas {
            volatile.insert("cuda.cublas_version".into(), l.version.clone());
        }
        if let Some(l) = &vendor.cublaslt {
            volatile.insert("cuda.cublaslt_version".into(), l.version.clone());
        }
        volatile.insert("os".into(), std::env::consts::OS.into());
        Ok(Shared {
            ordinal,
            ctx,
            stream,
            lock: Mutex::new(()),
            gemm,
            wgmma,
            fingerprinter,
            seeder,
            device,
            arch,
            volatile,
            vendor,
        })
    }

    /// The loaded module that exports `kernel`'s family; the error says
    /// why this device has none.
    pub(crate) fn module_of(
        &self,
        kernel: catalog::CudaKernel,
    ) -> Result<&LoadedModule, catalog::FamilyUnavailable> {
        match kernel.module() {
            catalog::CudaModule::Gemm => Ok(&self.gemm),
            catalog::CudaModule::Wgmma => {
                self.wgmma
                    .as_ref()
                    .map_err(|why| catalog::FamilyUnavailable {
                        family: kernel.symbol_family(),
                        why: why.clone(),
                    })
            }
        }
    }
}

/// The wgmma module, built for `sm_90a` (the architecture-specific target
/// that wgmma and `setmaxnreg` need) on compute capability 9.0 devices. Any
/// other device, or an NVRTC that cannot build it, gets the reason instead:
/// the routes that need it are then refused with that reason.
fn load_wgmma(
    ctx: &Arc<CudaContext>,
    arch: &str,
    nvrtc_version: &str,
) -> Result<LoadedModule, catalog::WgmmaUnavailable> {
    let Some(target) = catalog::wgmma_target(arch) else {
        return Err(catalog::WgmmaUnavailable::Architecture {
            arch: arch.to_string(),
        });
    };
    LoadedModule::compile(ctx, catalog::CudaModule::Wgmma, target, nvrtc_version)
        .map_err(|e| catalog::WgmmaUnavailable::Build(e.to_string()))
}

/// How many CUDA devices the driver reports. An error says what is missing
/// (the driver library, or a driver that fails to initialize).
pub(crate) fn device_count() -> Result<usize, CudaError> {
    // SAFETY: only checks whether the driver library can be loaded.
    if !unsafe { sys::is_culib_present() } {
        return Err(CudaError::msg(
            "no CUDA driver library (libcuda.so) was found",
        ));
    }
    // cudarc's dynamic loading panics on a missing symbol; report it instead.
    let count = std::panic::catch_unwind(CudaContext::device_count)
        .map_err(|_| {
            CudaError::msg(
                "loading CUDA panicked (a library is missing a symbol: too old a driver?)",
            )
        })?
        .map_err(CudaError::with("cuInit / device count"))?;
    Ok(usize::try_from(count).unwrap_or(0))
}

/// One device's slot: opened once, then shared by every backend on it.
type Slot = Arc<Mutex<Option<Arc<Shared>>>>;

/// The process-wide device states, one slot per ordinal: compiled once per
/// device, shared by every backend on it. Each slot has its own lock, so
/// several devices open concurrently (one worker thread each).
static SHARED: Mutex<BTreeMap<usize, Slot>> = Mutex::new(BTreeMap::new());

/// The process-wide state of device `ordinal`, opened on first use. A
/// failure is not cached: the next call tries again.
pub(crate) fn shared(ordinal: usize) -> Result<Arc<Shared>, CudaError> {
    let slot = SHARED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(ordinal)
        .or_default()
        .clone();
    let mut g = slot.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(s) = g.as_ref() {
        return Ok(s.clone());
    }
    // cudarc's dynamic loading panics on a missing symbol; report it instead.
    let opened = std::panic::catch_unwind(|| Shared::open(ordinal)).map_err(|_| {
        CudaError::msg("loading CUDA panicked (a library is missing a symbol: too old a driver?)")
    })?;
    let s = Arc::new(opened?);
    *g = Some(s.clone());
    Ok(s)
}
