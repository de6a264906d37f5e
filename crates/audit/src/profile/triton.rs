//! The GEMMs of Triton templates (`torch.compile`'s inductor, `max-autotune`):
//! inductor's launcher wraps each Triton kernel launch in a `cpu_op` range
//! named after the kernel, whose `args` record the kernel's tensor
//! arguments (`Input Dims`, `Input Strides`, `Input type`), its backend
//! (`kernel_backend`: `triton`) and its launch configuration (`num_warps`,
//! `num_stages`). A template GEMM's kernel is a GEMM of that region; this
//! module reads its shape from those arguments.
//!
//! The rule: the output C is the last 2-D tensor argument (m x n); A is a
//! 2-D argument other than C whose first extent is m (its second is k); B
//! is a 2-D argument other than A and C of extents {k, n}: `[k, n]` is B as
//! stored, `[n, k]` is B transposed. Transposition and leading dimensions
//! then follow the strides as for an aten op ([`ops::gemm_layout`]); the
//! dtype is A's. 1-D arguments (a bias) and scalars take no part. Where the
//! arguments give no such (A, B, C), or more than one, the GEMM stays
//! unrecorded and the trace's notes say why.

use super::kineto::Event;
use super::ops::{self, Inputs, Layout, LayoutError};

/// The prefix of the kernels (and so of the launch ranges) inductor
/// generates: ranges so named keep their `args` when a profile is read.
const TRITON_PREFIX: &str = "triton_";

/// The prefix of inductor's template kernels (GEMMs, convolutions).
const TEMPLATE_PREFIX: &str = "triton_tem_";

/// Whether a `cpu_op` range of this name may be a Triton launch, so its
/// `args` are kept (inductor names every kernel it generates `triton_*`).
pub(crate) fn may_be_launch(name: &str) -> bool {
    name.starts_with(TRITON_PREFIX)
}

/// Why a Triton launch range's arguments give no GEMM.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TritonLayoutError {
    /// The range's recorded arguments do not parse (the field and the
    /// parser's message).
    #[error("{0}")]
    Inputs(String),
    /// No tensor argument was recorded (`record_shapes=False`?).
    #[error("the profile recorded no shapes for its arguments (record_shapes=False?)")]
    NoShapes,
    /// No 2-D argument to be the output.
    #[error("no 2-D tensor argument to be the output (argument shapes {0:?})")]
    NoOutput(Vec<Vec<i64>>),
    /// Not exactly one (A, B) fits the output.
    #[error(
        "{count} readings of (A, B) fit the output {c:?} (argument shapes {shapes:?}): the arguments are not one GEMM"
    )]
    NotOneGemm {
        /// How many readings fit (0, or 2 and more).
        count: usize,
        /// The output's shape.
        c: Vec<i64>,
        /// Every argument's shape.
        shapes: Vec<Vec<i64>>,
    },
    /// The reading is not a GEMM (an empty extent).
    #[error(transparent)]
    Layout(#[from] LayoutError),
}

/// One reading of the arguments: A's position, B's, and whether B is
/// recorded as `[n, k]`.
type Reading = (usize, usize, bool);

/// The GEMM of a Triton launch range, or why its arguments give none;
/// `None` when `e` is not a Triton template launch (its `kernel_backend`
/// is not `triton` and its name does not start with `triton_tem_`).
pub(crate) fn layout_of(e: &Event<'_>) -> Option<Result<Layout, TritonLayoutError>> {
    let raw = e.inputs()?;
    let launch = raw.launch();
    let backend = launch.backend.as_deref();
    if backend != Some("triton") && !e.name.starts_with(TEMPLATE_PREFIX) {
        return None;
    }
    Some(match raw.parse() {
        Ok(args) => {
            let inputs = super::bind::inputs(&args);
            template_layout(&inputs).map(|mut l| {
                for (k, v) in [
                    ("num_warps", launch.num_warps),
                    ("num_stages", launch.num_stages),
                ] {
                    if let Some(v) = v {
                        l.facts.insert(format!("triton.{k}"), v);
                    }
                }
                l
            })
        }
        Err(why) => Err(TritonLayoutError::Inputs(why)),
    })
}

/// The trace's notes on `launches` Triton template GEMMs, of which those
/// in `without` (`NAME: why`) have no shapes: none when all have them.
pub(crate) fn notes(launches: usize, without: Vec<String>) -> Vec<String> {
    if without.is_empty() {
        return Vec::new();
    }
    const SHOWN: usize = 8;
    let more = without.len().saturating_sub(SHOWN);
    let mut out = vec![format!(
        "{} of {launches} Triton template GEMMs have no shapes: their launch ranges' arguments are not one GEMM",
        without.len()
    )];
    out.extend(without.into_iter().take(SHOWN));
    if more > 0 {
        out.push(format!(
            "and {more} more Triton template GEMMs without shapes"
        ));
    }
    out
}

/// The GEMM of a template's tensor arguments, by the module's rule.
fn template_layout(inputs: &Inputs<'_>) -> Result<Layout, TritonLayoutError> {
    if inputs.dims.iter().all(Option::is_none) {
        return Err(TritonLayoutError::NoShapes);
    }
    let shapes: Vec<Vec<i64>> = inputs
        .dims
        .iter()
        .map(|d| d.clone().unwrap_or_default())
        .collect();
    let two_d: Vec<usize> = (0..shapes.len())
        .filter(|&i| shapes[i].len() == 2)
        .collect();
    let Some(&c) = two_d.last() else {
        return Err(TritonLayoutError::NoOutput(shapes));
    };
    let (m, n) = (shapes[c][0], shapes[c][1]);
    let mut readings: Vec<Reading> = Vec::new();
    for &a in two_d.iter().filter(|&&a| a != c && shapes[a][0] == m) {
        let k = shapes[a][1];
        for &b in two_d.iter().filter(|&&b| b != c && b != a) {
            if shapes[b] == [k, n] {
                readings.push((a, b, false));
            }
            if shapes[b] == [n, k] {
                readings.push((a, b, true));
            }
        }
    }
    let [(a, b, b_is_nk)] = readings[..] else {
        return Err(TritonLayoutError::NotOneGemm {
            count: readings.len(),
            c: shapes[c].clone(),
            shapes,
        });
    };
    // B as the logical [k, n] operand: a `[n, k]` argument is its
    // transpose, the same storage with the strides swapped.
    let stride = |i: usize| {
        inputs
            .strides
            .as_ref()
            .and_then(|s| s.get(i).cloned().flatten())
    };
    let flip = |v: Vec<i64>| if b_is_nk { vec![v[1], v[0]] } else { v };
    let b_strides = stride(b).filter(|s| s.len() == 2).map(flip);
    let ty = |i: usize| inputs.types.get(i).copied().unwrap_or("");
    let pair = Inputs {
        dims: vec![Some(shapes[a].clone()), Some(flip(shapes[b].clone()))],
        strides: match (stride(a), b_strides) {
            (Some(sa), Some(sb)) => Some(vec![Some(sa), Some(sb)]),
            _ => None,
        },
        types: vec![ty(a), ty(b)],
        concrete: Vec::new(),
    };
    let mut layout = ops::gemm_layout(&pair, 0, 1, None)?;
    if !ty(c).is_empty() && ty(c) != ty(a) {
        layout.facts.insert("type.c", ty(c));
    }
    Ok(layout)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::ops::tests::inputs;
    use crate::vocab::{DType, GemmOp};

    #[test]
    fn the_output_is_the_last_matrix_and_b_may_be_recorded_transposed() {
        // inductor's addmm template: bias, x [m, k], weight [n, k], out.
        let l = template_layout(&inputs(
            &[&[512], &[8, 256], &[512, 256], &[8, 512], &[]],
            &[&[1], &[256, 1], &[256, 1], &[512, 1], &[]],
            &[
                "c10::BFloat16",
                "c10::BFloat16",
                "c10::BFloat16",
                "float",
                "Scalar",
            ],
        ))
        .unwrap();
        assert_eq!(
            (l.op, l.dtype, l.m, l.k, l.n, l.batch, l.lda, l.ldb, l.ldc),
            (GemmOp::Nt, DType::Bf16, 8, 256, 512, 1, 256, 256, 512)
        );
        assert_eq!(l.facts.get("type.c"), Some("float"));
        // B recorded as stored [k, n], A recorded transposed.
        let l = template_layout(&inputs(
            &[&[8, 64], &[64, 32], &[8, 32]],
            &[&[1, 8], &[32, 1], &[32, 1]],
            &["c10::Half"; 3],
        ))
        .unwrap();
        assert_eq!(
            (l.op, l.dtype, l.m, l.k, l.n),
            (GemmOp::Tn, DType::F16, 8, 64, 32)
        );
    }

    /// The events of a profile of the given `cpu_op` ranges.
    fn ranges(ops: &[serde_json::Value]) -> Vec<u8> {
        let events: Vec<serde_json::Value> = ops
            .iter()
            .enumerate()
            .map(|(i, op)| {
                let mut e = serde_json::json!({
                    "ph": "X", "cat": "cpu_op", "pid": 1, "tid": 1,
                    "ts": 10.0 * i as f64, "dur": 5.0,
                });
                e["name"] = op["name"].clone();
                e["args"] = op["args"].clone();
                e
            })
            .collect();
        serde_json::to_vec(&serde_json::json!({ "traceEvents": events })).unwrap()
    }

    #[test]
    fn a_launch_range_gives_its_configuration_and_other_ranges_none() {
        let args = serde_json::json!({
            "kernel_backend": "triton", "num_warps": 8, "num_stages": "4",
            "Input Dims": [[64, 32], [32, 16], [64, 16]],
            "Input Strides": [[32, 1], [16, 1], [16, 1]],
            "Input type": ["c10::BFloat16", "c10::BFloat16", "c10::BFloat16"],
        });
        let text = ranges(&[
            serde_json::json!({"name": "triton_tem_fused_mm_0", "args": args}),
            // Backend triton, any name inductor gives.
            serde_json::json!({"name": "triton_mm_7", "args": args}),
            // A pointwise kernel of another backend, and no args at all.
            serde_json::json!({"name": "triton_poi_fused_0",
                               "args": {"kernel_backend": "cuda", "Input Dims": [[4, 4]]}}),
            serde_json::json!({"name": "triton_tem_fused_mm_1", "args": {}}),
            serde_json::json!({"name": "aten::relu", "args": args}),
        ]);
        let limits = super::super::kineto::ParseLimits { max_events: 100 };
        let parsed = super::super::kineto::parse(&text, limits).unwrap();
        let of = |name: &str| {
            let e = parsed.events.iter().find(|e| e.name == name).unwrap();
            layout_of(e)
        };
        for name in ["triton_tem_fused_mm_0", "triton_mm_7"] {
            let l = of(name).unwrap().unwrap();
            assert_eq!(
                (l.op, l.dtype, l.m, l.k, l.n),
                (GemmOp::Nn, DType::Bf16, 64, 32, 16)
            );
            assert_eq!(l.facts.get("triton.num_warps"), Some("8"));
            assert_eq!(l.facts.get("triton.num_stages"), Some("4"));
        }
        assert!(of("triton_poi_fused_0").is_none());
        assert_eq!(
            of("triton_tem_fused_mm_1").unwrap().unwrap_err(),
            TritonLayoutError::NoShapes
        );
        assert!(of("aten::relu").is_none());
    }

    #[test]
    fn arguments_that_are_not_one_gemm_say_so() {
        // Square: A and B could swap, and B could be either way round.
        let e = template_layout(&inputs(
            &[&[64, 64], &[64, 64], &[64, 64]],
            &[&[64, 1], &[64, 1], &[64, 1]],
            &["float"; 3],
        ))
        .unwrap_err();
        assert!(
            matches!(e, TritonLayoutError::NotOneGemm { count: 4, .. }),
            "{e}"
        );
        let e = template_layout(&inputs(
            &[&[8, 64], &[32, 16], &[8, 32]],
            &[&[64, 1], &[16, 1], &[32, 1]],
            &["float"; 3],
        ))
        .unwrap_err();
        assert!(e.to_string().starts_with("0 readings of (A, B)"), "{e}");
        let e = template_layout(&inputs(&[&[2, 8, 64], &[64]], &[], &["float"; 2])).unwrap_err();
        assert!(matches!(e, TritonLayoutError::NoOutput(_)), "{e}");
        let none = Inputs::default();
        assert_eq!(
            template_layout(&none).unwrap_err(),
            TritonLayoutError::NoShapes
        );
    }
}
