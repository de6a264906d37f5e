//! The TMA tensor maps the wgmma kernels read their operands through:
//! what each map encodes ([`TensorMapSpec`]), the maps of a route (dense or
//! strided), the strides they accept and their identity digest.

use super::{CudaKernel, strides, wgmma_tile};
use gemm_audit_model::digest::{Digest, DigestWriter, FieldValue};
use gemm_audit_model::route::{GemmShape, GemmStrides};
use gemm_audit_model::vocab::{DType, GemmOp};

/// One TMA tensor map as the wgmma kernels read an operand: everything
/// `cuTensorMapEncodeTiled` is given except the base address (which is a
/// device address, so neither digested nor recorded). Every map is
/// two-dimensional, 2-byte elements, element strides 1, no interleave,
/// 128-byte swizzle, 256-byte L2 promotion and zero fill out of bounds
/// (rows past m and the k tail read as +0.0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorMapSpec {
    /// `"A"` or `"B"`.
    pub operand: &'static str,
    /// Element type (bf16 or f16).
    pub dtype: DType,
    /// Extent of the contiguous dimension, then of the strided one, in
    /// elements.
    pub dims: [u64; 2],
    /// Bytes from one row (step of the strided dimension) to the next.
    pub row_stride_bytes: u64,
    /// The box one TMA load copies: elements of the contiguous dimension
    /// (64 = one 128-byte swizzle row; 32, the narrow rung's MN-major B,
    /// one 64-byte row; TN's A on a 64-row rung at m <= 32 8, 16 or 32,
    /// see [`tn_a_box_cols`]), then rows.
    pub box_dims: [u32; 2],
}

/// The encoding settings every wgmma tensor map shares (digested with
/// each map, so a change of them changes every route's tensor-map digest).
pub const TENSOR_MAP_SETTINGS: [&str; 5] = [
    "element-strides=1,1",
    "interleave=none",
    "swizzle=box-row-bytes",
    "l2-promotion=256B",
    "oob-fill=zero",
];

impl TensorMapSpec {
    /// Bytes of one box row, which is also the map's swizzle span (128,
    /// 64 or 32; 16 is no swizzle; the kernels' shared-memory descriptors
    /// assume the same).
    pub fn swizzle_bytes(&self) -> u64 {
        self.box_dims[0] as u64 * gemm_audit_model::kernels::element_size(self.dtype) as u64
    }
}

/// The two tensor maps (A then B) a wgmma kernel reads on one problem.
/// A K-major operand (A of nn/nt, B of nt) is loaded as boxes of 64 k x
/// rows; an MN-major one (A of tn, B of nn/tn) as boxes of 64 m or n x 64 k
/// (kernels/wgmma.cu issues several per stage).
pub fn tensor_maps(
    kernel: CudaKernel,
    op: GemmOp,
    dtype: DType,
    shape: GemmShape,
) -> [TensorMapSpec; 2] {
    tensor_maps_strided(kernel, op, dtype, shape, strides(op, shape))
}

/// [`tensor_maps`] over operands stored with leading dimensions
/// `strides.lda` and `strides.ldb` (elements from one stored row to the
/// next; dense storage gives the same maps as [`tensor_maps`]). The
/// strides are not checked here: [`wgmma_strides`] does.
pub fn tensor_maps_strided(
    kernel: CudaKernel,
    op: GemmOp,
    dtype: DType,
    shape: GemmShape,
    strides: GemmStrides,
) -> [TensorMapSpec; 2] {
    let GemmShape { m, k, n } = shape;
    let map = |operand, dims: [u64; 2], box_dims| TensorMapSpec {
        operand,
        dtype,
        dims,
        row_stride_bytes: if operand == "A" {
            strides.lda
        } else {
            strides.ldb
        } * 2,
        box_dims,
    };
    let (bm, bn) = wgmma_tile(kernel);
    let a = if op == GemmOp::Tn {
        map("A", [m, k], [tn_a_box_cols(kernel, m), 64])
    } else if kernel.is_ladder() && m < bm as u64 {
        // The ladder loads only the rows below one tile, rounded up to 8
        // (kernels/wgmma.cu `a_rows`).
        map("A", [k, m], [64, m.next_multiple_of(8) as u32])
    } else {
        map("A", [k, m], [64, bm])
    };
    let b = if op == GemmOp::Nt {
        map("B", [k, n], [64, bn])
    } else {
        // MN-major B: 64-wide boxes, or one 32-wide box (64-byte rows).
        map("B", [n, k], [bn.min(64), 64])
    };
    [a, b]
}

/// m values per k row of TN's A box: 8, 16 or 32 on the ladder's 64-row
/// rungs where the problem has no more rows (16-, 32- or 64-byte rows,
/// that swizzle, none for 16), else 64 (128-byte rows). A 64-wide box at
/// m = 8 is seven eighths TMA zero fill, which cost the rung as much as
/// full boxes. kernels/wgmma.cu `ladder_entry` picks the same width.
pub fn tn_a_box_cols(kernel: CudaKernel, m: u64) -> u32 {
    match (kernel.is_ladder(), wgmma_tile(kernel).0, m) {
        (true, 64, ..=8) => 8,
        (true, 64, 9..=16) => 16,
        (true, 64, 17..=32) => 32,
        _ => 64,
    }
}

/// Checks leading dimensions for the wgmma kernels: A, B and C may be
/// stored with rows further apart than dense (a view into a wider buffer).
/// A and B: each at least its stored row's extent and a multiple of 8
/// elements (TMA row strides are multiples of 16 bytes). C: at least n and
/// even (the kernels store 2 elements, 4 bytes, at a time).
pub fn wgmma_strides(
    op: GemmOp,
    shape: GemmShape,
    strides: GemmStrides,
) -> Result<(), StrideError> {
    let dense = GemmStrides::dense(op, shape);
    if strides.ldc < dense.ldc
        || !strides.ldc.is_multiple_of(2)
        || strides.ldc > u64::from(u32::MAX)
    {
        return Err(StrideError::Ldc {
            ldc: strides.ldc,
            n: dense.ldc,
        });
    }
    for (which, ld, extent) in [
        ("lda", strides.lda, dense.lda),
        ("ldb", strides.ldb, dense.ldb),
    ] {
        if ld < extent {
            return Err(StrideError::Short {
                which,
                ld,
                extent,
                op,
            });
        }
        if ld % 8 != 0 {
            return Err(StrideError::Unaligned { which, ld });
        }
    }
    Ok(())
}

/// Leading dimensions the wgmma kernels cannot read ([`wgmma_strides`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StrideError {
    /// ldc below n, odd, or over 32 bits.
    #[error(
        "ldc = {ldc} must be at least n = {n} and even (the wgmma kernels store two elements at a time, 32-bit row strides)"
    )]
    Ldc {
        /// The ldc given.
        ldc: u64,
        /// The shape's n (the dense ldc).
        n: u64,
    },
    /// lda or ldb shorter than the operand's stored row.
    #[error("{which} = {ld} is less than the stored row's {extent} elements ({op})")]
    Short {
        /// `lda` or `ldb`.
        which: &'static str,
        /// Its value.
        ld: u64,
        /// The stored row's length, in elements.
        extent: u64,
        /// The op.
        op: GemmOp,
    },
    /// lda or ldb not a multiple of 8 elements.
    #[error("{which} = {ld} is not a multiple of 8 (TMA row strides are multiples of 16 bytes)")]
    Unaligned {
        /// `lda` or `ldb`.
        which: &'static str,
        /// Its value.
        ld: u64,
    },
}

/// The tensor-map identity of a wgmma route: a digest of both maps'
/// encoding parameters and [`TENSOR_MAP_SETTINGS`].
pub fn tensor_map_digest(maps: &[TensorMapSpec; 2]) -> Digest {
    let mut w = DigestWriter::new("gemm-audit/tensor-map/v1");
    let settings: Vec<String> = TENSOR_MAP_SETTINGS.iter().map(|s| s.to_string()).collect();
    w.field("settings", FieldValue::StrList(&settings));
    for t in maps {
        w.field("operand", FieldValue::Str(t.operand));
        w.field("dtype", FieldValue::Str(&t.dtype.to_string()));
        w.field("dims.0", FieldValue::U64(t.dims[0]));
        w.field("dims.1", FieldValue::U64(t.dims[1]));
        w.field("row_stride_bytes", FieldValue::U64(t.row_stride_bytes));
        w.field("box", FieldValue::U32x3([t.box_dims[0], t.box_dims[1], 1]));
    }
    w.finish()
}

#[cfg(test)]
mod stride_error_tests {
    use super::*;

    #[test]
    fn stride_errors_name_the_leading_dimension() {
        let s = GemmShape {
            m: 64,
            k: 128,
            n: 256,
        };
        let dense = GemmStrides::dense(GemmOp::Nn, s);
        let e = wgmma_strides(GemmOp::Nn, s, GemmStrides { ldb: 260, ..dense }).unwrap_err();
        assert_eq!(
            e,
            StrideError::Unaligned {
                which: "ldb",
                ld: 260
            }
        );
        assert!(e.to_string().starts_with("ldb = 260 "), "{e}");
        let e = wgmma_strides(GemmOp::Nn, s, GemmStrides { ldc: 257, ..dense }).unwrap_err();
        assert!(e.to_string().starts_with("ldc = 257 "), "{e}");
        let e = wgmma_strides(GemmOp::Nn, s, GemmStrides { lda: 64, ..dense }).unwrap_err();
        assert!(e.to_string().starts_with("lda = 64 is less than"), "{e}");
    }
}
