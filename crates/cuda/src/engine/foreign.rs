#![allow(unsafe_code)]
//! Fingerprints of device memory another library owns (a PyTorch tensor's
//! storage), computed where it lives by the same chunk kernel as the
//! backend's outputs, so a framework's recorder copies nothing to the host.
//!
//! The memory is named by its device address. Before anything reads it,
//! the driver is asked which allocation holds that address
//! (`cuPointerGetAttribute`): the whole byte range must lie inside one
//! live allocation of the device's primary context (the context the CUDA
//! runtime, and so PyTorch, uses), else the request is refused. That check
//! is what makes [`ForeignFingerprinter::fingerprint`] safe to call with
//! any address.

use crate::error::CudaError;
use crate::fingerprint::DeviceFingerprinter;
use crate::shared::device_count;
use cudarc::driver::{CudaContext, CudaStream, DriverError, sys};
use gemm_audit_model::trace::{FingerprintMode, OutputFingerprint};
use std::fmt;
use std::sync::Arc;

/// The device fingerprinter of one device's primary context, for memory
/// other code allocated there.
pub struct ForeignFingerprinter {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    fingerprinter: DeviceFingerprinter,
}

impl fmt::Debug for ForeignFingerprinter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ForeignFingerprinter")
            .field("ordinal", &self.ctx.ordinal())
            .finish_non_exhaustive()
    }
}

impl ForeignFingerprinter {
    /// Retains the primary context of device `ordinal` (the one the CUDA
    /// runtime uses), makes a stream of its own there and compiles the
    /// chunk kernels (NVRTC must be loadable).
    pub fn open(ordinal: usize) -> Result<ForeignFingerprinter, CudaError> {
        // The driver library and the device first: cudarc panics on a
        // library it cannot load.
        let count = device_count()?;
        if ordinal >= count {
            return Err(CudaError::msg(format!(
                "no CUDA device {ordinal}: this host has {count}"
            )));
        }
        let ctx = CudaContext::new(ordinal).map_err(CudaError::with(&format!(
            "retaining the primary context of device {ordinal}"
        )))?;
        // SAFETY: the slices this type makes are read on its one stream and
        // leaked right after; cudarc's cross-stream events are not needed,
        // and must not be recorded on memory this crate does not own.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx
            .new_stream()
            .map_err(CudaError::with("creating a stream"))?;
        let fingerprinter = DeviceFingerprinter::new(&ctx)?;
        Ok(ForeignFingerprinter {
            ctx,
            stream,
            fingerprinter,
        })
    }

    /// The fingerprint in `mode` of the `len` bytes at device address
    /// `address`, as `OutputFingerprint::with_mode(mode, input_seed, bytes)`
    /// of the same bytes. The owner must have finished writing them (a
    /// device synchronize); they are read on this fingerprinter's own
    /// stream. Refused when the range is not inside one allocation of this
    /// device's primary context.
    pub fn fingerprint(
        &self,
        address: u64,
        len: usize,
        mode: FingerprintMode,
        input_seed: u64,
    ) -> Result<OutputFingerprint, CudaError> {
        if len == 0 {
            return Ok(OutputFingerprint::with_mode(mode, input_seed, &[]));
        }
        self.check_range(address, len)?;
        // SAFETY: check_range found [address, address + len) inside one live
        // allocation of this context, so the view covers mapped device
        // memory; it is only read (by the chunk kernel), and leaked below,
        // so cudarc never frees memory it does not own.
        let slice = unsafe { self.stream.upgrade_device_ptr::<u8>(address, len) };
        let result =
            self.fingerprinter
                .fingerprint_in(mode, &self.stream, &slice.as_view(), input_seed);
        slice.leak();
        result
    }

    /// The strong fingerprints (input seed `input_seed`) of several byte
    /// ranges, `(address, len)`, in order, each as
    /// [`ForeignFingerprinter::fingerprint`] gives it, hashed in one launch
    /// ([`DeviceFingerprinter::fingerprint_many`]): what a recorder of many
    /// outputs calls. Refused, naming the range, when any range is not
    /// inside one allocation of this device's primary context; nothing is
    /// hashed then.
    pub fn fingerprint_many(
        &self,
        ranges: &[(u64, usize)],
        input_seed: u64,
    ) -> Result<Vec<OutputFingerprint>, CudaError> {
        for (i, &(address, len)) in ranges.iter().enumerate() {
            if len > 0 {
                self.check_range(address, len)
                    .map_err(|e| CudaError::msg(format!("range {i}: {e}")))?;
            }
        }
        let slices: Vec<_> = ranges
            .iter()
            .filter(|(_, len)| *len > 0)
            .map(|&(address, len)| {
                // SAFETY: check_range found [address, address + len) inside
                // one live allocation of this context, so the view covers
                // mapped device memory; it is only read (by the chunk kernel),
                // and leaked below, so cudarc never frees memory it does not
                // own.
                unsafe { self.stream.upgrade_device_ptr::<u8>(address, len) }
            })
            .collect();
        let views: Vec<_> = slices.iter().map(|s| s.as_view()).collect();
        let result = self
            .fingerprinter
            .fingerprint_many(&self.stream, &views, input_seed);
        drop(views);
        for slice in slices {
            slice.leak();
        }
        let mut hashed = result?.into_iter();
        Ok(ranges
            .iter()
            .map(|&(_, len)| {
                if len == 0 {
                    OutputFingerprint::of(input_seed, &[])
                } else {
                    hashed.next().expect("one fingerprint per non-empty range")
                }
            })
            .collect())
    }

    /// Refuses a range that is not inside one allocation of this context.
    fn check_range(&self, address: u64, len: usize) -> Result<(), CudaError> {
        self.ctx
            .bind_to_thread()
            .map_err(CudaError::with("binding the context"))?;
        let start: sys::CUdeviceptr = self.attribute(
            address,
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        )?;
        let size: usize = self.attribute(
            address,
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_RANGE_SIZE,
        )?;
        let context: sys::CUcontext = self.attribute(
            address,
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_CONTEXT,
        )?;
        let end = address.checked_add(len as u64);
        let inside = address >= start && end.is_some_and(|e| e <= start + size as u64);
        if !inside {
            return Err(CudaError::msg(format!(
                "{len} bytes at {address:#x} are not inside one allocation \
                 (the allocation holding {address:#x} is {size} bytes at {start:#x})"
            )));
        }
        if !context.is_null() && context != self.ctx.cu_ctx() {
            return Err(CudaError::msg(format!(
                "the memory at {address:#x} belongs to another context than device {}'s primary context",
                self.ctx.ordinal()
            )));
        }
        Ok(())
    }

    /// One pointer attribute of `address`.
    fn attribute<T: Copy + Default>(
        &self,
        address: u64,
        attribute: sys::CUpointer_attribute,
    ) -> Result<T, CudaError> {
        let mut value = T::default();
        // SAFETY: each attribute asked for (range start, range size,
        // context) is written as one value of the type the caller names
        // (CUdeviceptr, size_t, CUcontext), into `value`.
        let status = unsafe {
            sys::cuPointerGetAttribute(
                (&mut value as *mut T).cast::<std::ffi::c_void>(),
                attribute,
                address,
            )
        };
        status.result().map_err(|e: DriverError| {
            CudaError::new(
                format!("asking the driver which allocation holds {address:#x}"),
                e,
            )
        })?;
        Ok(value)
    }
}
