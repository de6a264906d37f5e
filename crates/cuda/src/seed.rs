#![allow(unsafe_code)]
//! Seeded operands made on the device (`kernels/seed.cu`): the same
//! integer hash and the same exact mapping as the model's
//! `kernels::seeded_value`, so an operand made here has the storage bytes
//! the CPU reference makes, without generating it on one host thread and
//! uploading it from pageable memory.

use crate::catalog;
use crate::error::CudaError;
use crate::nvrtc;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::Ptx;
use gemm_audit_model::kernels::{self, B_SEED_OFFSET, Problem};
use gemm_audit_model::vocab::{DType, GemmOp};
use std::fmt;
use std::sync::Arc;

/// Threads per block of the seeding kernel.
const THREADS: u32 = 256;
/// Blocks of the seeding kernel at most (it loops over the rest).
const MAX_BLOCKS: u64 = 8192;

/// Which operand of a GEMM (A or B), its logical shape and its storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OperandSpec {
    rows: u64,
    cols: u64,
    /// Stored column-major (element (r, c) at `c * rows + r`).
    transposed: bool,
    /// The operand's own seed (B's is offset by [`B_SEED_OFFSET`]).
    seed: u64,
    dtype: DType,
}

impl OperandSpec {
    /// A and B of `p` in `dtype` for input seed `seed`, laid out as the
    /// model's `seeded_a` / `seeded_b` lay them out.
    pub(crate) fn of(p: &Problem, dtype: DType, seed: u64) -> [OperandSpec; 2] {
        [
            OperandSpec {
                rows: p.m as u64,
                cols: p.k as u64,
                transposed: p.op == GemmOp::Tn,
                seed,
                dtype,
            },
            OperandSpec {
                rows: p.k as u64,
                cols: p.n as u64,
                transposed: p.op == GemmOp::Nt,
                seed: seed.wrapping_add(B_SEED_OFFSET),
                dtype,
            },
        ]
    }

    fn elements(&self) -> u64 {
        self.rows * self.cols
    }
}

/// The seeding kernel, compiled and loaded once for one context.
pub(crate) struct DeviceSeeder {
    func: CudaFunction,
}

impl fmt::Debug for DeviceSeeder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceSeeder").finish_non_exhaustive()
    }
}

impl DeviceSeeder {
    /// Compiles `seed.cu` with `options` and loads it into `ctx`.
    pub(crate) fn compile(ctx: &Arc<CudaContext>, options: &[String]) -> Result<Self, CudaError> {
        let cubin = nvrtc::compile_cubin(catalog::SEED_SOURCE, "seed.cu", options)?;
        let func = ctx
            .load_module(Ptx::from_binary(cubin))
            .map_err(CudaError::with("loading the seeding cubin"))?
            .load_function("seed_operand")
            .map_err(CudaError::with("seeding kernel"))?;
        Ok(DeviceSeeder { func })
    }

    /// A new device buffer holding `spec`'s storage bytes, made by work
    /// enqueued on `stream` (not waited for). An empty operand gets a
    /// 4-byte zeroed buffer, so every operand has an address.
    pub(crate) fn operand(
        &self,
        stream: &Arc<CudaStream>,
        spec: &OperandSpec,
    ) -> Result<CudaSlice<u8>, CudaError> {
        let len = spec.elements();
        let bytes = usize::try_from(len)
            .ok()
            .and_then(|l| l.checked_mul(kernels::element_size(spec.dtype)))
            .ok_or_else(|| CudaError::msg("operand too large to seed"))?;
        if bytes == 0 {
            return stream
                .alloc_zeros::<u8>(4)
                .map_err(CudaError::with("allocating an empty operand"));
        }
        // SAFETY: the kernel below writes every one of the `len` elements
        // (`bytes` bytes) before any other work on `stream` reads them.
        let mut out = unsafe { stream.alloc::<u8>(bytes) }
            .map_err(CudaError::with("allocating an operand"))?;
        let blocks = len.div_ceil(u64::from(THREADS)).min(MAX_BLOCKS) as u32;
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let transposed = u32::from(spec.transposed);
        let dtype: u32 = match spec.dtype {
            DType::F32 => 0,
            DType::F16 => 1,
            DType::Bf16 => 2,
            other => {
                return Err(CudaError::msg(format!(
                    "dtype {other} is only read from profiles: no operand of it is seeded"
                )));
            }
        };
        let mut lb = stream.launch_builder(&self.func);
        lb.arg(&mut out)
            .arg(&spec.rows)
            .arg(&spec.cols)
            .arg(&spec.seed)
            .arg(&transposed)
            .arg(&dtype);
        // SAFETY: matches `seed_operand(u8*, u64, u64, u64, u32, u32)`;
        // `out` holds `rows * cols` elements of the dtype's size (computed
        // above), which is exactly what the kernel writes; the function was
        // loaded into the context `stream` belongs to (one per device).
        unsafe { lb.launch(cfg) }.map_err(CudaError::with("launching seed_operand"))?;
        Ok(out)
    }
}
