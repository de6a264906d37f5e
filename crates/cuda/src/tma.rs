#![allow(unsafe_code)]
//! TMA tensor maps for the wgmma kernels, encoded with the driver's
//! `cuTensorMapEncodeTiled` from a [`TensorMapSpec`] (what the route's
//! tensor-map identity digests) and an operand's device address.

use crate::catalog::TensorMapSpec;
use crate::error::CudaError;
use cudarc::driver::DeviceRepr;
use cudarc::driver::sys;
use gemm_audit_model::vocab::DType;
use std::mem::MaybeUninit;

/// A `CUtensorMap` as a kernel argument: the wgmma kernels take it by
/// value (`const __grid_constant__ TensorMap`, 128 opaque bytes).
#[derive(Clone, Copy)]
#[repr(transparent)]
pub(super) struct TensorMapArg(sys::CUtensorMap);

impl std::fmt::Debug for TensorMapArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The opaque bytes hold a device address: not worth printing.
        f.write_str("TensorMapArg(..)")
    }
}

// SAFETY: `CUtensorMap` is a `#[repr(C)]` plain-old-data struct of 128
// bytes, exactly the kernel parameter's size and layout; the driver copies
// it into the launch's parameter buffer.
unsafe impl DeviceRepr for TensorMapArg {}

/// Encodes `spec` over the operand at device address `base`. The settings
/// are [`crate::catalog::TENSOR_MAP_SETTINGS`] (element strides 1, no
/// interleave, the swizzle of one box row (128, 64 or 32 bytes; none for
/// 16), 256-byte L2 promotion, zero fill); keep the two in step.
pub(super) fn encode(
    spec: &TensorMapSpec,
    base: sys::CUdeviceptr,
) -> Result<TensorMapArg, CudaError> {
    use sys::CUtensorMapDataType as T;
    let dtype = match spec.dtype {
        DType::Bf16 => T::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        DType::F16 => T::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        other => {
            return Err(CudaError::msg(format!(
                "the wgmma kernels read bf16 or f16 operands, not {other}"
            )));
        }
    };
    use sys::CUtensorMapSwizzle as S;
    let swizzle = match spec.swizzle_bytes() {
        128 => S::CU_TENSOR_MAP_SWIZZLE_128B,
        64 => S::CU_TENSOR_MAP_SWIZZLE_64B,
        32 => S::CU_TENSOR_MAP_SWIZZLE_32B,
        16 => S::CU_TENSOR_MAP_SWIZZLE_NONE,
        other => {
            return Err(CudaError::msg(format!(
                "tensor map of operand {}: a box row of {other} bytes has no swizzle the wgmma kernels read",
                spec.operand
            )));
        }
    };
    let dims: [u64; 2] = spec.dims;
    let strides: [u64; 1] = [spec.row_stride_bytes];
    let boxes: [u32; 2] = spec.box_dims;
    let element_strides: [u32; 2] = [1, 1];
    let mut map = MaybeUninit::<sys::CUtensorMap>::zeroed();
    // SAFETY: `map` is valid for one write of a CUtensorMap; the driver
    // reads `rank` (2) entries of `dims`, `boxes` and `element_strides` and
    // rank - 1 entries of `strides`, all live local arrays of those
    // lengths. `base` is only recorded in the map, not dereferenced.
    unsafe {
        sys::cuTensorMapEncodeTiled(
            map.as_mut_ptr(),
            dtype,
            2,
            base as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            element_strides.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            swizzle,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    }
    .result()
    .map_err(|e| {
        CudaError::new(
            format!(
                "cuTensorMapEncodeTiled for operand {} ({} dims {:?}, row stride {} bytes, box {:?})",
                spec.operand, spec.dtype, spec.dims, spec.row_stride_bytes, spec.box_dims
            ),
            e,
        )
    })?;
    // SAFETY: the driver filled the map (it returned success).
    Ok(TensorMapArg(unsafe { map.assume_init() }))
}
