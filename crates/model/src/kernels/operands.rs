//! A GEMM's operands as every backend sees them: the problem's shape and
//! storage layout, the bytes of each dtype, and the seeded inputs. One
//! definition, so the CPU reference and every device backend seed and
//! store the same bits (a fingerprint recorded on one compares with
//! another's).

use crate::vocab::{DType, GemmOp};
use half::{bf16, f16};

/// This file's text: the CPU reference module's identity digests it with
/// its kernels, since the storage rounding here is part of every output.
pub const OPERANDS_SOURCE: &[u8] = include_bytes!("operands.rs");

/// Shape of one GEMM: `C[m,n] = A'[m,k] * B'[k,n]`, with the storage layout of
/// A and B chosen by `op`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Problem {
    /// Which operand (if any) is stored transposed.
    pub op: GemmOp,
    /// Rows of C (and of the logical A').
    pub m: usize,
    /// Reduction length.
    pub k: usize,
    /// Columns of C (and of the logical B').
    pub n: usize,
}

impl Problem {
    /// Number of elements of A in storage (`m * k` for every op).
    pub fn a_len(&self) -> usize {
        self.m * self.k
    }

    /// Number of elements of B in storage (`k * n` for every op).
    pub fn b_len(&self) -> usize {
        self.k * self.n
    }

    /// Number of elements of C (`m * n`).
    pub fn c_len(&self) -> usize {
        self.m * self.n
    }
}

/// Bytes per stored element of `dtype` (0 for [`DType::Unrecorded`]).
pub fn element_size(dtype: DType) -> usize {
    match dtype {
        DType::F64 => 8,
        DType::F32 => 4,
        DType::F16 | DType::Bf16 => 2,
        DType::F8e4m3 | DType::F8e5m2 | DType::I8 => 1,
        DType::Unrecorded => 0,
    }
}

/// Round f32 values to the storage dtype with round-to-nearest-even
/// (`half::{f16, bf16}::from_f32` are RNE) and return little-endian storage
/// bytes. F32 is stored as is. Only the dtypes a backend runs
/// ([`DType::ALL`]) have seeded storage: the others give no bytes.
pub fn to_storage_bytes(dtype: DType, values: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() * element_size(dtype));
    match dtype {
        DType::F32 => values
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        DType::F16 => values
            .iter()
            .for_each(|&v| out.extend_from_slice(&f16::from_f32(v).to_bits().to_le_bytes())),
        DType::Bf16 => values
            .iter()
            .for_each(|&v| out.extend_from_slice(&bf16::from_f32(v).to_bits().to_le_bytes())),
        _ => {}
    }
    out
}

/// Inverse of `to_storage_bytes`: exact widening of little-endian storage
/// bytes to f32. `None` if `bytes.len()` is not a multiple of the element
/// size, or for a dtype no backend runs.
pub fn from_storage_bytes(dtype: DType, bytes: &[u8]) -> Option<Vec<f32>> {
    if !dtype.is_runnable() || !bytes.len().is_multiple_of(element_size(dtype)) {
        return None;
    }
    let values = match dtype {
        DType::F32 => bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        DType::F16 => bytes
            .chunks_exact(2)
            .map(|b| f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32())
            .collect(),
        DType::Bf16 => bytes
            .chunks_exact(2)
            .map(|b| bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32())
            .collect(),
        _ => return None,
    };
    Some(values)
}

/// Round one value to `dtype` (RNE) and widen it back (unchanged for a
/// dtype no backend runs: it has no seeded storage).
fn quantize_one(dtype: DType, v: f32) -> f32 {
    match dtype {
        DType::F16 => f16::from_f32(v).to_f32(),
        DType::Bf16 => bf16::from_f32(v).to_f32(),
        _ => v,
    }
}

/// Round each value to `dtype` and back, in place: exactly what storing then
/// loading does, so reference inputs match what a device kernel reads.
pub fn quantize(dtype: DType, values: &mut [f32]) {
    if dtype != DType::F32 {
        values.iter_mut().for_each(|v| *v = quantize_one(dtype, *v));
    }
}

/// splitmix64 finaliser: a cheap, well-mixed 64-bit bijection.
fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Bits of the hash kept for a seeded value. 24 bits gives multiples of 2^-23
/// in [-1, 1), a full f32 significand: f32 products are then inexact, so an
/// FMA chain and a separate multiply-then-add give different bits and the
/// audit can tell them apart. For f16/bf16 the value is rounded (RNE) to the
/// dtype, whose products are exact in f32 anyway.
const SEEDED_BITS: u32 = 24;

/// Deterministic seeded value of logical element `(row, col)` of a matrix.
///
/// A splitmix64-style hash of `(seed, row, col)` is mapped to a multiple of
/// 2^-23 in [-1, 1), then quantized to `dtype` (f16/bf16 rounding can reach
/// exactly ±1). The value does not depend on the matrix's dimensions, so the
/// first `r` rows of an M=64 operand equal an M=r operand, which the
/// batch-invariance audits need.
pub fn seeded_value(seed: u64, row: u64, col: u64, dtype: DType) -> f32 {
    let h = splitmix64(splitmix64(splitmix64(seed) ^ row) ^ col);
    let half_range = 1i64 << (SEEDED_BITS - 1);
    let q = (h >> (64 - SEEDED_BITS)) as i64 - half_range;
    quantize_one(dtype, q as f32 / half_range as f32)
}

/// Operand A (logical `m x k`) in its storage layout for `p.op`, with
/// `A'(i,kk) = seeded_value(seed, i, kk, dtype)`; empty for a layout no
/// backend runs.
pub fn seeded_a(p: &Problem, dtype: DType, seed: u64) -> Vec<f32> {
    if !p.op.is_runnable() {
        return Vec::new();
    }
    let mut a = vec![0.0f32; p.a_len()];
    for i in 0..p.m {
        for kk in 0..p.k {
            let idx = match p.op {
                GemmOp::Tn | GemmOp::Tt => kk * p.m + i,
                _ => i * p.k + kk,
            };
            a[idx] = seeded_value(seed, i as u64, kk as u64, dtype);
        }
    }
    a
}

/// Operand B (logical `k x n`) in its storage layout for `p.op`, with
/// `B'(kk,j) = seeded_value(seed, kk, j, dtype)`; empty for a layout no
/// backend runs.
pub fn seeded_b(p: &Problem, dtype: DType, seed: u64) -> Vec<f32> {
    if !p.op.is_runnable() {
        return Vec::new();
    }
    let mut b = vec![0.0f32; p.b_len()];
    for kk in 0..p.k {
        for j in 0..p.n {
            let idx = match p.op {
                GemmOp::Nt | GemmOp::Tt => j * p.k + kk,
                _ => kk * p.n + j,
            };
            b[idx] = seeded_value(seed, kk as u64, j as u64, dtype);
        }
    }
    b
}
