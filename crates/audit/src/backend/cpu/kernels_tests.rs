//! Tests of the CPU kernels, kept out of `kernels.rs`: the CPU module's
//! identity digests that file, and a test edit must not change it.

use super::*;
use crate::kernels::{
    Problem, element_size, from_storage_bytes, quantize, seeded_a, seeded_b, seeded_value,
    to_storage_bytes,
};
use crate::vocab::DType;

const OPS: [GemmOp; 3] = [GemmOp::Nn, GemmOp::Tn, GemmOp::Nt];
const DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::Bf16];

fn prob(op: GemmOp, m: usize, k: usize, n: usize) -> Problem {
    Problem { op, m, k, n }
}

/// Seeded operands plus the scalar reference for one problem.
fn operands(p: &Problem, dtype: DType) -> (Vec<f32>, Vec<f32>) {
    (seeded_a(p, dtype, 0xA11CE), seeded_b(p, dtype, 0xB0B))
}

fn run_scalar(p: &Problem, a: &[f32], b: &[f32]) -> Vec<f32> {
    let mut c = vec![f32::NAN; p.c_len()];
    scalar_fma(p, a, b, &mut c);
    c
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Logical element accessors straight from the layout table, written
/// independently of `Packed` so the layout is checked, not assumed.
fn a_at(p: &Problem, a: &[f32], i: usize, kk: usize) -> f32 {
    match p.op {
        GemmOp::Nn | GemmOp::Nt => a[i * p.k + kk],
        GemmOp::Tn | GemmOp::Tt => a[kk * p.m + i],
        GemmOp::Unrecorded => panic!("no layout to read"),
    }
}

fn b_at(p: &Problem, b: &[f32], kk: usize, j: usize) -> f32 {
    match p.op {
        GemmOp::Nn | GemmOp::Tn => b[kk * p.n + j],
        GemmOp::Nt | GemmOp::Tt => b[j * p.k + kk],
        GemmOp::Unrecorded => panic!("no layout to read"),
    }
}

/// Check `c` against an f64 product within a k-scaled rounding bound.
fn assert_close_to_f64(p: &Problem, a: &[f32], b: &[f32], c: &[f32]) {
    for i in 0..p.m {
        for j in 0..p.n {
            let (mut exact, mut mag) = (0.0f64, 0.0f64);
            for kk in 0..p.k {
                let prod = a_at(p, a, i, kk) as f64 * b_at(p, b, kk, j) as f64;
                exact += prod;
                mag += prod.abs();
            }
            let tol = (p.k as f64 + 1.0) * f32::EPSILON as f64 * mag + 1e-30;
            let got = c[i * p.n + j] as f64;
            assert!(
                (got - exact).abs() <= tol,
                "{p:?} ({i},{j}): got {got}, f64 {exact}, tol {tol}"
            );
        }
    }
}

#[test]
fn scalar_fma_matches_f64_for_all_ops() {
    // Random non-seeded-lattice values too, so products round.
    for op in OPS {
        for &(m, k, n) in &[(1, 1, 1), (3, 5, 7), (17, 33, 9), (8, 256, 12)] {
            let p = prob(op, m, k, n);
            for dtype in DTYPES {
                let (a, b) = operands(&p, dtype);
                assert_close_to_f64(&p, &a, &b, &run_scalar(&p, &a, &b));
            }
            let a: Vec<f32> = (0..p.a_len()).map(|x| ((x as f32) * 0.37).sin()).collect();
            let b: Vec<f32> = (0..p.b_len()).map(|x| ((x as f32) * 0.11).cos()).collect();
            assert_close_to_f64(&p, &a, &b, &run_scalar(&p, &a, &b));
        }
    }
}

#[test]
fn scalar_fma_is_the_documented_chain() {
    // Nn with the chain spelled out by hand, element by element.
    let p = prob(GemmOp::Nn, 5, 37, 6);
    let (a, b) = operands(&p, DType::F32);
    let c = run_scalar(&p, &a, &b);
    for i in 0..p.m {
        for j in 0..p.n {
            let mut acc = 0.0f32;
            for kk in 0..p.k {
                acc = a[i * p.k + kk].mul_add(b[kk * p.n + j], acc);
            }
            assert_eq!(acc.to_bits(), c[i * p.n + j].to_bits(), "({i},{j})");
        }
    }
}

#[test]
fn k_zero_and_empty_shapes() {
    for op in OPS {
        let p = prob(op, 3, 0, 4);
        let mut c = vec![f32::NAN; 12];
        scalar_fma(&p, &[], &[], &mut c);
        assert!(c.iter().all(|&x| x.to_bits() == 0));
        let mut c = vec![f32::NAN; 12];
        tiled(&p, &[], &[], &mut c, 2, 3, 3);
        assert!(c.iter().all(|&x| x.to_bits() == 0));
        let mut c = vec![f32::NAN; 12];
        split_k_fixed(&p, &[], &[], &mut c, 4);
        assert!(c.iter().all(|&x| x.to_bits() == 0));
        let mut c = vec![f32::NAN; 12];
        split_k_atomic(&p, &[], &[], &mut c, 4);
        assert!(c.iter().all(|&x| x.to_bits() == 0));
        for (m, n) in [(0, 4), (3, 0), (0, 0)] {
            let p = prob(op, m, 5, n);
            let (a, b) = operands(&p, DType::F32);
            scalar_fma(&p, &a, &b, &mut []);
            tiled(&p, &a, &b, &mut [], 0, 0, 0);
            split_k_fixed(&p, &a, &b, &mut [], 0);
            split_k_atomic(&p, &a, &b, &mut [], 0);
        }
    }
}

#[test]
fn layouts_give_bitwise_identical_results() {
    for dtype in DTYPES {
        for &(m, k, n) in &[(1, 7, 3), (13, 65, 17), (32, 128, 8)] {
            let nn = prob(GemmOp::Nn, m, k, n);
            let (a, b) = operands(&nn, dtype);
            let want = bits(&run_scalar(&nn, &a, &b));
            let mut want_split = vec![0.0; nn.c_len()];
            split_k_fixed(&nn, &a, &b, &mut want_split, 3);
            for op in [GemmOp::Tn, GemmOp::Nt] {
                let p = prob(op, m, k, n);
                let (a, b) = operands(&p, dtype);
                assert_eq!(bits(&run_scalar(&p, &a, &b)), want, "{p:?} {dtype:?}");
                let mut c = vec![0.0; p.c_len()];
                tiled(&p, &a, &b, &mut c, 5, 3, 2);
                assert_eq!(bits(&c), want, "tiled {p:?} {dtype:?}");
                split_k_fixed(&p, &a, &b, &mut c, 3);
                assert_eq!(bits(&c), bits(&want_split), "split {p:?} {dtype:?}");
            }
        }
    }
}

#[test]
fn tiled_is_bitwise_scalar() {
    for op in OPS {
        for &(m, k, n) in &[(1, 7, 3), (13, 65, 17), (64, 128, 40)] {
            let p = prob(op, m, k, n);
            let (a, b) = operands(&p, DType::F32);
            let want = bits(&run_scalar(&p, &a, &b));
            for &(tm, tn) in &[(1, 1), (3, 5), (8, 8), (16, 64), (100, 100), (0, 0)] {
                for workers in 0..=4 {
                    let mut c = vec![f32::NAN; p.c_len()];
                    tiled(&p, &a, &b, &mut c, tm, tn, workers);
                    assert_eq!(bits(&c), want, "{p:?} tile {tm}x{tn} workers {workers}");
                }
            }
        }
    }
}

#[test]
fn split_k_fixed_is_deterministic_but_not_scalar() {
    let p = prob(GemmOp::Nn, 32, 1024, 32);
    let (a, b) = operands(&p, DType::F32);
    let mut first = vec![0.0; p.c_len()];
    split_k_fixed(&p, &a, &b, &mut first, 8);
    for _ in 0..2 {
        let mut c = vec![0.0; p.c_len()];
        split_k_fixed(&p, &a, &b, &mut c, 8);
        assert_eq!(bits(&c), bits(&first));
    }
    let scalar = run_scalar(&p, &a, &b);
    let differing = first
        .iter()
        .zip(&scalar)
        .filter(|(x, y)| x.to_bits() != y.to_bits())
        .count();
    assert!(differing > 0, "split-K fold should move at least one bit");
    assert_close_to_f64(&p, &a, &b, &first);
    // One split is the scalar chain itself.
    let mut one = vec![0.0; p.c_len()];
    split_k_fixed(&p, &a, &b, &mut one, 1);
    assert_eq!(bits(&one), bits(&scalar));
    split_k_fixed(&p, &a, &b, &mut one, 0);
    assert_eq!(bits(&one), bits(&scalar));
}

#[test]
fn split_k_fixed_matches_hand_fold() {
    // k = 10, splits = 4: chunks of 3 -> [0,3) [3,6) [6,9) [9,10).
    // splits = 7: chunks of 2 -> five non-empty, two empty.
    // splits = 13 > k: chunks of 1, three empty.
    let p = prob(GemmOp::Nt, 3, 10, 4);
    let (a, b) = operands(&p, DType::F32);
    for splits in [4, 7, 13] {
        let mut c = vec![0.0; p.c_len()];
        split_k_fixed(&p, &a, &b, &mut c, splits);
        let chunk = p.k.div_ceil(splits);
        for i in 0..p.m {
            for j in 0..p.n {
                let mut acc = 0.0f32;
                for s in 0..splits {
                    let mut part = 0.0f32;
                    for kk in (s * chunk).min(p.k)..((s + 1) * chunk).min(p.k) {
                        part = a_at(&p, &a, i, kk).mul_add(b_at(&p, &b, kk, j), part);
                    }
                    acc = if s == 0 { part } else { acc + part };
                }
                assert_eq!(
                    acc.to_bits(),
                    c[i * p.n + j].to_bits(),
                    "splits {splits} ({i},{j})"
                );
            }
        }
    }
}

#[test]
fn split_k_atomic_drifts_and_stays_close() {
    let p = prob(GemmOp::Nn, 64, 1024, 64);
    let (a, b) = operands(&p, DType::F32);
    let mut first = vec![0.0; p.c_len()];
    split_k_atomic(&p, &a, &b, &mut first, 16);
    assert_close_to_f64(&p, &a, &b, &first);
    let scalar = run_scalar(&p, &a, &b);
    for (x, y) in first.iter().zip(&scalar) {
        assert!(
            (x - y).abs() <= 1e-3 * (1.0 + y.abs()),
            "atomic {x} vs scalar {y}"
        );
    }
    let first_bits = bits(&first);
    let mut drifted = false;
    for _ in 1..50 {
        let mut c = vec![0.0; p.c_len()];
        split_k_atomic(&p, &a, &b, &mut c, 16);
        if bits(&c) != first_bits {
            drifted = true;
            break;
        }
    }
    assert!(drifted, "split_k_atomic never drifted in 50 runs");
}

#[test]
fn split_k_atomic_single_split_is_scalar() {
    // With one thread there is one add onto 0.0, which is exact.
    let p = prob(GemmOp::Tn, 9, 77, 11);
    let (a, b) = operands(&p, DType::Bf16);
    let mut c = vec![0.0; p.c_len()];
    split_k_atomic(&p, &a, &b, &mut c, 1);
    assert_eq!(bits(&c), bits(&run_scalar(&p, &a, &b)));
}

#[test]
fn seeded_operands_have_the_prefix_property() {
    for dtype in DTYPES {
        let big = prob(GemmOp::Nn, 64, 48, 16);
        let small = prob(GemmOp::Nn, 8, 48, 16);
        let a64 = seeded_a(&big, dtype, 7);
        let a8 = seeded_a(&small, dtype, 7);
        assert_eq!(bits(&a64[..a8.len()]), bits(&a8));

        let big_t = prob(GemmOp::Tn, 64, 48, 16);
        let small_t = prob(GemmOp::Tn, 8, 48, 16);
        let at64 = seeded_a(&big_t, dtype, 7);
        let at8 = seeded_a(&small_t, dtype, 7);
        for i in 0..8 {
            for kk in 0..48 {
                assert_eq!(
                    a_at(&big_t, &at64, i, kk).to_bits(),
                    a_at(&small_t, &at8, i, kk).to_bits()
                );
                // Same logical element as the Nn layout.
                assert_eq!(
                    a_at(&big_t, &at64, i, kk).to_bits(),
                    a64[i * 48 + kk].to_bits()
                );
            }
        }
        // And so the first rows of C agree too (batch invariance of the reference).
        let b = seeded_b(&big, dtype, 9);
        let c64 = run_scalar(&big, &a64, &b);
        let c8 = run_scalar(&small, &a8, &b);
        assert_eq!(bits(&c64[..c8.len()]), bits(&c8));
    }
}

#[test]
fn seeded_values_are_in_range_quantized_and_varied() {
    let mut distinct = std::collections::BTreeSet::new();
    for dtype in DTYPES {
        for row in 0..32 {
            for col in 0..32 {
                let v = seeded_value(42, row, col, dtype);
                assert!((-1.0..=1.0).contains(&v), "{v}");
                let mut q = [v];
                quantize(dtype, &mut q);
                assert_eq!(q[0].to_bits(), v.to_bits(), "already representable");
                assert_eq!(v.to_bits(), seeded_value(42, row, col, dtype).to_bits());
                if dtype == DType::F32 {
                    assert!(v < 1.0);
                    distinct.insert(v.to_bits());
                }
            }
        }
    }
    assert!(
        distinct.len() > 500,
        "only {} distinct values",
        distinct.len()
    );
    assert_ne!(
        seeded_value(1, 2, 3, DType::F32),
        seeded_value(2, 2, 3, DType::F32)
    );
    assert_ne!(
        seeded_value(1, 2, 3, DType::F32),
        seeded_value(1, 3, 2, DType::F32)
    );
}

#[test]
fn storage_bytes_round_trip() {
    let values = [0.0f32, -0.0, 1.0, -2.5, 0.1, 65504.0, 1e-3, f32::INFINITY];
    for dtype in DTYPES {
        let bytes = to_storage_bytes(dtype, &values);
        assert_eq!(bytes.len(), values.len() * element_size(dtype));
        let back = from_storage_bytes(dtype, &bytes).unwrap();
        let mut q = values;
        quantize(dtype, &mut q);
        assert_eq!(bits(&back), bits(&q), "{dtype:?}");
        // Quantized values survive a second trip unchanged.
        assert_eq!(to_storage_bytes(dtype, &back), bytes);
        assert!(from_storage_bytes(dtype, &bytes[..bytes.len() - 1]).is_none());
    }
    assert_eq!(
        bits(&from_storage_bytes(DType::F32, &to_storage_bytes(DType::F32, &values)).unwrap()),
        bits(&values)
    );
    assert_eq!(to_storage_bytes(DType::F32, &[1.0]), 1.0f32.to_le_bytes());
    assert_eq!(to_storage_bytes(DType::Bf16, &[1.0]), [0x80, 0x3F]);
    assert_eq!(to_storage_bytes(DType::F16, &[1.0]), [0x00, 0x3C]);
    assert_eq!(from_storage_bytes(DType::F16, &[]), Some(vec![]));
}

#[test]
fn bf16_and_f16_round_to_nearest_even() {
    let ulp = 2f32.powi(-7); // bf16 spacing just above 1.0
    let tie_down = 1.0 + 2f32.powi(-8); // halfway between 1 and 1+ulp: even is 1
    let tie_up = 1.0 + 3.0 * 2f32.powi(-8); // halfway between 1+ulp and 1+2ulp: even is 1+2ulp
    let mut v = [tie_down, tie_up];
    quantize(DType::Bf16, &mut v);
    assert_eq!(v, [1.0, 1.0 + 2.0 * ulp]);
    let back = from_storage_bytes(
        DType::Bf16,
        &to_storage_bytes(DType::Bf16, &[tie_down, tie_up]),
    )
    .unwrap();
    assert_eq!(back, vec![1.0, 1.0 + 2.0 * ulp]);
    // f16: spacing above 1.0 is 2^-10.
    let mut h = [1.0 + 2f32.powi(-11), 1.0 + 3.0 * 2f32.powi(-11)];
    quantize(DType::F16, &mut h);
    assert_eq!(h, [1.0, 1.0 + 2.0 * 2f32.powi(-10)]);
    assert_eq!(element_size(DType::F32), 4);
    assert_eq!(element_size(DType::F16), 2);
    assert_eq!(element_size(DType::Bf16), 2);
}

#[test]
#[should_panic(expected = "operand A has the wrong length")]
fn wrong_length_is_a_loud_error() {
    let p = prob(GemmOp::Nn, 2, 3, 4);
    scalar_fma(&p, &[0.0; 5], &[0.0; 12], &mut [0.0; 8]);
}
