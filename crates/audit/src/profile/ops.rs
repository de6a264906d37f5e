//! The GEMM-family ops of PyTorch, and the GEMM an op computes from the
//! shapes, strides and types the profiler recorded (`record_shapes=True`).

use crate::observed::Facts;
use crate::vocab::{DType, GemmOp};

/// How an op takes part in GEMMs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpKind {
    /// An op that runs one GEMM (or a batch of them): the positions of A,
    /// B and, where it takes one, C among its inputs.
    Gemm {
        a: usize,
        b: usize,
        c: Option<usize>,
    },
    /// An op that reaches a GEMM through another op (`linear`,
    /// `matmul`, `einsum`): it owns kernels only when no GEMM op inside it
    /// launched them.
    Composite,
}

/// The aten GEMM-family ops: the op's name without the `aten::` prefix
/// and a trailing `_` (in-place variants are the same GEMM).
const GEMM_OPS: [(&str, usize, usize, Option<usize>); 14] = [
    ("mm", 0, 1, None),
    ("bmm", 0, 1, None),
    ("mv", 0, 1, None),
    ("_scaled_mm", 0, 1, None),
    ("_int_mm", 0, 1, None),
    ("_grouped_mm", 0, 1, None),
    ("_scaled_grouped_mm", 0, 1, None),
    ("addmm", 1, 2, Some(0)),
    ("_addmm_activation", 1, 2, Some(0)),
    ("baddbmm", 1, 2, Some(0)),
    ("addbmm", 1, 2, Some(0)),
    ("addmv", 1, 2, Some(0)),
    ("addr", 1, 2, Some(0)),
    ("_mixed_mm", 0, 1, None),
];

/// Ops that reach GEMMs through other ops.
const COMPOSITE_OPS: [&str; 4] = ["linear", "matmul", "einsum", "bilinear"];

/// The kind of the op named `name`, if it takes part in GEMMs.
pub(crate) fn op_kind(name: &str) -> Option<OpKind> {
    let base = name.strip_prefix("aten::")?;
    let base = base.strip_suffix('_').unwrap_or(base);
    if let Some((_, a, b, c)) = GEMM_OPS.iter().find(|(n, ..)| *n == base) {
        return Some(OpKind::Gemm {
            a: *a,
            b: *b,
            c: *c,
        });
    }
    COMPOSITE_OPS.contains(&base).then_some(OpKind::Composite)
}

/// The op names recorded as GEMM-family ops, for documentation and tests.
pub fn gemm_op_names() -> Vec<String> {
    GEMM_OPS
        .iter()
        .map(|(n, ..)| format!("aten::{n}"))
        .chain(COMPOSITE_OPS.iter().map(|n| format!("aten::{n}")))
        .collect()
}

/// The dtype of a profile's `Input type` string (torch's scalar type
/// names), [`DType::Unrecorded`] for any other.
pub(crate) fn dtype_of(t: &str) -> DType {
    match t {
        "float" => DType::F32,
        "c10::Half" | "Half" => DType::F16,
        "c10::BFloat16" | "BFloat16" => DType::Bf16,
        "double" => DType::F64,
        "c10::Float8_e4m3fn" | "Float8_e4m3fn" => DType::F8e4m3,
        "c10::Float8_e5m2" | "Float8_e5m2" => DType::F8e5m2,
        "signed char" | "int8_t" => DType::I8,
        _ => DType::Unrecorded,
    }
}

/// What a GEMM op's recorded inputs say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Inputs<'a> {
    pub dims: Vec<Option<Vec<i64>>>,
    pub strides: Option<Vec<Option<Vec<i64>>>>,
    pub types: Vec<&'a str>,
    pub concrete: Vec<&'a str>,
}

/// The GEMM an op computes, as far as its inputs say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    pub op: GemmOp,
    pub dtype: DType,
    pub m: u64,
    pub k: u64,
    pub n: u64,
    pub batch: u64,
    pub lda: u64,
    pub ldb: u64,
    pub ldc: u64,
    /// Other facts that can change its bits (types of B and C, `alpha`
    /// and `beta`, C's shape).
    pub facts: Facts,
}

impl Layout {
    /// A GEMM of which nothing was recorded.
    pub(crate) fn unrecorded() -> Layout {
        Layout {
            op: GemmOp::Unrecorded,
            dtype: DType::Unrecorded,
            m: 0,
            k: 0,
            n: 0,
            batch: 1,
            lda: 0,
            ldb: 0,
            ldc: 0,
            facts: Facts::default(),
        }
    }
}

/// Why an op's recorded inputs describe no GEMM (the shapes recorded).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LayoutError {
    /// No shapes were recorded for the operands.
    #[error("the profile recorded no shapes for its operands (record_shapes=False?)")]
    NoShapes,
    /// A or B is not a matrix or a batch of them.
    #[error("operands of shapes {a:?} and {b:?} are not matrices or batches of them")]
    NotMatrices { a: Vec<i64>, b: Vec<i64> },
    /// A's columns are not B's rows.
    #[error("inner extents differ: A {a:?}, B {b:?}")]
    InnerExtents { a: Vec<i64>, b: Vec<i64> },
    /// m, k, n or the batch is zero (or negative).
    #[error("an empty GEMM: A {a:?}, B {b:?}")]
    Empty { a: Vec<i64>, b: Vec<i64> },
    /// `aten::linear`'s input and weight do not multiply.
    #[error("input {input:?} and weight {weight:?} are not a linear layer")]
    NotLinear { input: Vec<i64>, weight: Vec<i64> },
    /// `aten::linear` with an empty extent.
    #[error("an empty linear layer: input {input:?}, weight {weight:?}")]
    EmptyLinear { input: Vec<i64>, weight: Vec<i64> },
}

fn positive(v: i64) -> Option<u64> {
    u64::try_from(v).ok().filter(|&x| x > 0)
}

/// `(transposed, leading dimension)` of the last two dims of an operand
/// stored row-major: rows contiguous, or columns contiguous.
fn matrix(shape: &[i64], strides: &[i64]) -> (bool, u64) {
    let (rows, cols) = (shape[shape.len() - 2], shape[shape.len() - 1]);
    let (s_row, s_col) = (strides[strides.len() - 2], strides[strides.len() - 1]);
    let ld = |s: i64, e: i64| s.max(e).max(0) as u64;
    if s_col == 1 || cols == 1 {
        (false, ld(s_row, cols))
    } else if s_row == 1 || rows == 1 {
        (true, ld(s_col, rows))
    } else {
        (false, s_row.max(0) as u64)
    }
}

/// The GEMM of a GEMM op with inputs `a`, `b` (and `c`) at the given
/// positions, or why its inputs do not describe one.
pub(crate) fn gemm_layout(
    inputs: &Inputs<'_>,
    a: usize,
    b: usize,
    c: Option<usize>,
) -> Result<Layout, LayoutError> {
    let dim = |i: usize| inputs.dims.get(i).cloned().flatten();
    let (Some(mut ad), Some(mut bd)) = (dim(a), dim(b)) else {
        return Err(LayoutError::NoShapes);
    };
    let stride = |i: usize| {
        inputs
            .strides
            .as_ref()
            .and_then(|s| s.get(i).cloned().flatten())
    };
    let (mut as_, mut bs) = (stride(a), stride(b));
    // mv / addmv: B is a vector (k,), a k x 1 matrix.
    if bd.len() == 1 {
        bd = vec![bd[0], 1];
        bs = bs.map(|s| vec![s.first().copied().unwrap_or(1), 1]);
    }
    if ad.len() == 1 {
        ad = vec![1, ad[0]];
        as_ = as_.map(|s| vec![1, s.first().copied().unwrap_or(1)]);
    }
    if ad.len() < 2 || bd.len() < 2 || ad.len() > 3 || bd.len() > 3 {
        return Err(LayoutError::NotMatrices { a: ad, b: bd });
    }
    let batch = if ad.len() == 3 {
        ad[0]
    } else if bd.len() == 3 {
        bd[0]
    } else {
        1
    };
    let (m, k) = (ad[ad.len() - 2], ad[ad.len() - 1]);
    let (k2, n) = (bd[bd.len() - 2], bd[bd.len() - 1]);
    if k != k2 {
        return Err(LayoutError::InnerExtents { a: ad, b: bd });
    }
    let (Some(m), Some(k), Some(n), Some(batch)) =
        (positive(m), positive(k), positive(n), positive(batch))
    else {
        return Err(LayoutError::Empty { a: ad, b: bd });
    };
    let ty = |i: usize| inputs.types.get(i).copied().unwrap_or("");
    let mut facts = Facts::default();
    let dtype = dtype_of(ty(a));
    if dtype == DType::Unrecorded && !ty(a).is_empty() {
        facts.insert("type.a", ty(a));
    }
    if ty(b) != ty(a) {
        facts.insert("type.b", ty(b));
    }
    if let Some(c) = c {
        if let Some(cd) = dim(c) {
            facts.insert("shape.c", format!("{cd:?}"));
        }
        if !ty(c).is_empty() && ty(c) != ty(a) {
            facts.insert("type.c", ty(c));
        }
    }
    // Scalars the op was called with (`beta`, `alpha`), where recorded.
    for (i, v) in inputs.concrete.iter().enumerate() {
        if !v.is_empty() {
            facts.insert(format!("input.{i}"), *v);
        }
    }
    let (op, lda, ldb) = match (&as_, &bs) {
        (Some(sa), Some(sb)) if sa.len() == ad.len() && sb.len() == bd.len() => {
            let (at, lda) = matrix(&ad, sa);
            let (bt, ldb) = matrix(&bd, sb);
            let op = match (at, bt) {
                (false, false) => GemmOp::Nn,
                (true, false) => GemmOp::Tn,
                (false, true) => GemmOp::Nt,
                (true, true) => GemmOp::Tt,
            };
            (op, lda, ldb)
        }
        _ => (GemmOp::Unrecorded, 0, 0),
    };
    Ok(Layout {
        op,
        dtype,
        m,
        k,
        n,
        batch,
        lda,
        ldb,
        ldc: n,
        facts,
    })
}

/// The GEMM of `aten::linear(input, weight, bias)`: `input [..., k]`
/// times `weight [n, k]` stored transposed.
pub(crate) fn linear_layout(inputs: &Inputs<'_>) -> Result<Layout, LayoutError> {
    let dim = |i: usize| inputs.dims.get(i).cloned().flatten();
    let (Some(x), Some(w)) = (dim(0), dim(1)) else {
        return Err(LayoutError::NoShapes);
    };
    if x.is_empty() || w.len() != 2 || x[x.len() - 1] != w[1] {
        return Err(LayoutError::NotLinear {
            input: x,
            weight: w,
        });
    }
    let m = x[..x.len() - 1]
        .iter()
        .try_fold(1i64, |acc, &d| acc.checked_mul(d));
    let (Some(m), Some(k), Some(n)) = (m.and_then(positive), positive(w[1]), positive(w[0])) else {
        return Err(LayoutError::EmptyLinear {
            input: x,
            weight: w,
        });
    };
    let ty = inputs.types.first().copied().unwrap_or("");
    let mut facts = Facts::default();
    if dim(2).is_some() {
        facts.insert("bias", "yes");
    }
    Ok(Layout {
        op: GemmOp::Nt,
        dtype: dtype_of(ty),
        m,
        k,
        n,
        batch: 1,
        lda: k,
        ldb: k,
        ldc: n,
        facts,
    })
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Recorded inputs of matrices with these dims, strides and types.
    pub(in crate::profile) fn inputs(
        dims: &[&[i64]],
        strides: &[&[i64]],
        types: &[&'static str],
    ) -> Inputs<'static> {
        Inputs {
            dims: dims.iter().map(|d| Some(d.to_vec())).collect(),
            strides: Some(strides.iter().map(|s| Some(s.to_vec())).collect()),
            types: types.to_vec(),
            concrete: Vec::new(),
        }
    }

    #[test]
    fn layouts_follow_the_strides() {
        // addmm(bias, x, w.t()): B stored transposed, as nn.Linear does.
        let l = gemm_layout(
            &inputs(
                &[&[128], &[8, 64], &[64, 128]],
                &[&[1], &[64, 1], &[1, 64]],
                &["float", "float", "float"],
            ),
            1,
            2,
            Some(0),
        )
        .unwrap();
        assert_eq!(
            (l.op, l.dtype, l.m, l.k, l.n, l.lda, l.ldb),
            (GemmOp::Nt, DType::F32, 8, 64, 128, 64, 64)
        );
        assert_eq!(l.facts.get("shape.c"), Some("[128]"));
        // A transposed, both transposed.
        let tn = inputs(
            &[&[3, 4], &[4, 5]],
            &[&[1, 3], &[5, 1]],
            &["c10::BFloat16"; 2],
        );
        assert_eq!(gemm_layout(&tn, 0, 1, None).unwrap().op, GemmOp::Tn);
        let tt = inputs(&[&[3, 4], &[4, 5]], &[&[1, 3], &[1, 4]], &["c10::Half"; 2]);
        let l = gemm_layout(&tt, 0, 1, None).unwrap();
        assert_eq!((l.op, l.dtype), (GemmOp::Tt, DType::F16));
        // bmm: the batch from A.
        let b = inputs(
            &[&[2, 3, 4], &[2, 4, 5]],
            &[&[12, 4, 1], &[20, 5, 1]],
            &["float"; 2],
        );
        let l = gemm_layout(&b, 0, 1, None).unwrap();
        assert_eq!((l.batch, l.m, l.k, l.n, l.op), (2, 3, 4, 5, GemmOp::Nn));
        // mv: B is a vector.
        let v = inputs(&[&[512, 1024], &[1024]], &[&[1024, 1], &[1]], &["float"; 2]);
        let l = gemm_layout(&v, 0, 1, None).unwrap();
        assert_eq!((l.m, l.k, l.n), (512, 1024, 1));
    }

    #[test]
    fn what_is_not_recorded_says_so() {
        let no_strides = Inputs {
            dims: vec![Some(vec![8, 64]), Some(vec![64, 16])],
            strides: None,
            types: vec!["c10::Float8_e4m3fn", "c10::Float8_e4m3fn"],
            concrete: Vec::new(),
        };
        let l = gemm_layout(&no_strides, 0, 1, None).unwrap();
        assert_eq!(
            (l.op, l.dtype, l.lda),
            (GemmOp::Unrecorded, DType::F8e4m3, 0)
        );
        let none = Inputs::default();
        assert!(
            gemm_layout(&none, 0, 1, None)
                .unwrap_err()
                .to_string()
                .contains("no shapes")
        );
        let bad = inputs(&[&[8, 64], &[32, 16]], &[&[64, 1], &[16, 1]], &["float"; 2]);
        assert!(
            gemm_layout(&bad, 0, 1, None)
                .unwrap_err()
                .to_string()
                .contains("inner extents")
        );
        let odd = inputs(
            &[&[8, 64], &[64, 16]],
            &[&[64, 1], &[16, 1]],
            &["c10::ComplexFloat"; 2],
        );
        let l = gemm_layout(&odd, 0, 1, None).unwrap();
        assert_eq!(l.dtype, DType::Unrecorded);
        assert_eq!(l.facts.get("type.a"), Some("c10::ComplexFloat"));
    }

    #[test]
    fn layout_errors_name_the_shapes() {
        let bad = inputs(&[&[8, 64], &[32, 16]], &[&[64, 1], &[16, 1]], &["float"; 2]);
        let e = gemm_layout(&bad, 0, 1, None).unwrap_err();
        assert_eq!(
            e,
            LayoutError::InnerExtents {
                a: vec![8, 64],
                b: vec![32, 16]
            }
        );
        assert_eq!(e.to_string(), "inner extents differ: A [8, 64], B [32, 16]");
        let cube = inputs(&[&[2, 2, 8, 64], &[64, 16]], &[], &["float"; 2]);
        let e = gemm_layout(&cube, 0, 1, None).unwrap_err().to_string();
        assert!(e.contains("[2, 2, 8, 64]"), "{e}");
        let empty = inputs(&[&[0, 64], &[64, 16]], &[], &["float"; 2]);
        let e = gemm_layout(&empty, 0, 1, None).unwrap_err().to_string();
        assert!(e.contains("A [0, 64]"), "{e}");
        let not_linear = inputs(&[&[4, 32], &[128, 64]], &[], &["float"; 2]);
        let e = linear_layout(&not_linear).unwrap_err().to_string();
        assert!(e.contains("input [4, 32] and weight [128, 64]"), "{e}");
    }

    #[test]
    fn op_kinds() {
        assert_eq!(
            op_kind("aten::addmm_"),
            Some(OpKind::Gemm {
                a: 1,
                b: 2,
                c: Some(0)
            })
        );
        assert_eq!(op_kind("aten::linear"), Some(OpKind::Composite));
        assert_eq!(op_kind("aten::add"), None);
        assert_eq!(op_kind("mm"), None, "only aten ops");
        let l = linear_layout(&inputs(
            &[&[4, 8, 64], &[128, 64], &[128]],
            &[],
            &["float"; 3],
        ))
        .unwrap();
        assert_eq!((l.m, l.k, l.n, l.op), (32, 64, 128, GemmOp::Nt));
    }
}
