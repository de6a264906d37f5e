#![allow(unsafe_code)]
//! Device and driver identity: what the digests see (device class,
//! compute capability, multiprocessors, driver) and the per-card facts they
//! never see (ordinal, PCI bus id, UUID, memory, clock, driver API version).

use crate::error::CudaError;
use crate::nvrtc;
use cudarc::driver::CudaContext;
use cudarc::driver::sys;
use gemm_audit_model::DeviceIdentity;
use gemm_audit_model::identity::VolatileMetadata;
use std::sync::Arc;

/// The identity of the device of `ctx` (any ordinal) and its volatile
/// metadata.
///
/// [`DeviceIdentity`] holds only what two interchangeable cards share
/// (name as device class, compute capability, multiprocessor count, driver
/// identity), so routes recorded on one card validate on another of its
/// class. What tells the cards apart goes into the volatile metadata, which
/// is never digested: `cuda.device.ordinal`, `cuda.device.name`,
/// `cuda.device.uuid`, `cuda.device.pci_bus_id`,
/// `cuda.device.total_memory_bytes`, `cuda.device.clock_khz` and
/// `cuda.driver_api_version` (the UUID, bus id, memory and clock only where
/// the driver answers).
pub fn device_identity(
    ctx: &Arc<CudaContext>,
) -> Result<(DeviceIdentity, VolatileMetadata), CudaError> {
    let (major, minor) = ctx
        .compute_capability()
        .map_err(CudaError::with("compute capability"))?;
    let sms = ctx
        .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        .map_err(CudaError::with("multiprocessor count"))?;
    let name = ctx.name().map_err(CudaError::with("device name"))?;
    let driver = driver_api_version()?;
    let device = DeviceIdentity {
        class: name.clone(),
        compute_capability: Some([major as u32, minor as u32]),
        multiprocessors: sms as u32,
        driver: driver_identity(driver),
    };
    let mut volatile = VolatileMetadata::new();
    volatile.insert("cuda.device.ordinal".into(), ctx.ordinal().to_string());
    volatile.insert("cuda.device.name".into(), name);
    if let Ok(u) = ctx.uuid() {
        let hex: String = u
            .bytes
            .iter()
            .map(|b| format!("{:02x}", *b as u8))
            .collect();
        volatile.insert("cuda.device.uuid".into(), hex);
    }
    if let Some(bus) = pci_bus_id(ctx) {
        volatile.insert("cuda.device.pci_bus_id".into(), bus);
    }
    if let Ok(mem) = ctx.total_mem() {
        volatile.insert("cuda.device.total_memory_bytes".into(), mem.to_string());
    }
    if let Ok(clock) = ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CLOCK_RATE) {
        volatile.insert("cuda.device.clock_khz".into(), clock.to_string());
    }
    volatile.insert("cuda.driver_api_version".into(), driver.to_string());
    Ok((device, volatile))
}

/// The compilation target of the device of `ctx`, e.g. `sm_90`.
pub(crate) fn arch(ctx: &Arc<CudaContext>) -> Result<String, CudaError> {
    let (major, minor) = ctx
        .compute_capability()
        .map_err(CudaError::with("compute capability"))?;
    Ok(format!("sm_{major}{minor}"))
}

/// The CUDA driver API version, e.g. 13000 for CUDA 13.0.
fn driver_api_version() -> Result<i32, CudaError> {
    let mut driver = 0i32;
    // SAFETY: `driver` is valid for one write.
    unsafe { sys::cuDriverGetVersion(&mut driver) }
        .result()
        .map_err(CudaError::with("cuDriverGetVersion"))?;
    Ok(driver)
}

/// The PCI bus id of the device of `ctx` (e.g. `0000:19:00.0`), where the
/// driver answers.
fn pci_bus_id(ctx: &Arc<CudaContext>) -> Option<String> {
    let mut bus = [0 as std::ffi::c_char; 32];
    // SAFETY: `bus` has room for the 32 bytes passed as its length.
    unsafe { sys::cuDeviceGetPCIBusId(bus.as_mut_ptr(), bus.len() as i32, ctx.cu_device()) }
        .result()
        .ok()?;
    // The driver NUL-terminates within the length it was given; keep a NUL
    // at the end regardless, so the read below stays inside `bus`.
    bus[bus.len() - 1] = 0;
    // SAFETY: `bus` is NUL-terminated (last byte forced to zero) and lives
    // across the call.
    Some(unsafe { nvrtc::c_string(bus.as_ptr()) })
}

/// The driver as it changes bits: the kernel-module version (e.g.
/// `580.159.04`, read from `/proc/driver/nvidia/version` on Linux) and the
/// CUDA driver API version it implements. A driver upgrade usually keeps the
/// API version, so the module version is what makes it visible.
fn driver_identity(api: i32) -> String {
    let api = format!("{}.{}", api / 1000, (api % 1000) / 10);
    let module = std::fs::read_to_string("/proc/driver/nvidia/version")
        .ok()
        .and_then(|s| {
            // "NVRM version: NVIDIA UNIX [Open ]Kernel Module for x86_64  580.159.04  Release Build ..."
            let line = s.lines().find(|l| l.contains("Kernel Module"))?;
            line.split_whitespace()
                .find(|w| w.contains('.') && w.chars().all(|c| c.is_ascii_digit() || c == '.'))
                .map(str::to_string)
        });
    match module {
        Some(m) => format!("{m} (CUDA {api})"),
        None => format!("unknown kernel module (CUDA {api})"),
    }
}
