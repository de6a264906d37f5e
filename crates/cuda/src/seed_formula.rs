//! The arithmetic of the device seeding kernel (`kernels/seed.cu`), step
//! for step in Rust and without the `half` crate, so that a CPU property
//! test holds the formula written for the device to the model's
//! `seeded_value` and storage layout on every machine, GPU or not. The
//! kernel itself makes the operands; a GPU test holds its bytes to the
//! CPU's. A test also checks that `seed.cu` still spells the constants used
//! here, so the two cannot drift apart unnoticed.

use gemm_audit_model::vocab::DType;

/// splitmix64 as `seed.cu` writes it.
fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The storage bits (`f32` bits, or the 16 bits of f16/bf16 widened) that
/// `seed_operand` writes at storage index `idx` of a `rows x cols` operand.
pub(crate) fn storage_bits(
    idx: u64,
    rows: u64,
    cols: u64,
    seed: u64,
    transposed: bool,
    dtype: DType,
) -> u32 {
    let (r, c) = if transposed {
        let c = idx / rows;
        (idx - c * rows, c)
    } else {
        let r = idx / cols;
        (r, idx - r * cols)
    };
    let h = splitmix64(splitmix64(splitmix64(seed) ^ r) ^ c);
    let q = (h >> 40) as i64 - (1i64 << 23);
    let v = q as i32 as f32 * 1.192_092_9e-7_f32;
    match dtype {
        DType::F32 => v.to_bits(),
        DType::F16 => u32::from(f16_bits_rne(v)),
        DType::Bf16 => u32::from(bf16_bits_rne(v)),
        // The seed kernel stores only the runnable dtypes (it refuses the rest).
        _ => v.to_bits(),
    }
}

/// `cvt.rn.bf16.f32` of a finite value: round to nearest even on the low
/// 16 bits.
fn bf16_bits_rne(v: f32) -> u16 {
    let b = v.to_bits();
    ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) as u16
}

/// `cvt.rn.f16.f32` of a value of magnitude at most 1 (no overflow):
/// round to nearest even at f16's quantum, subnormals included.
fn f16_bits_rne(v: f32) -> u16 {
    let b = v.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let a = b & 0x7FFF_FFFF;
    if a == 0 {
        return sign;
    }
    // Seeded values are multiples of 2^-23: never f32 subnormals.
    let exp = (a >> 23) as i32 - 127;
    let significand = u64::from((a & 0x7F_FFFF) | 0x80_0000);
    // The f16 quantum: 2^(exp - 10) for normals, 2^-24 below 2^-14.
    let quantum = if exp >= -14 { exp - 10 } else { -24 };
    let drop = (quantum - (exp - 23)) as u32;
    let kept = significand >> drop;
    let rest = significand & ((1 << drop) - 1);
    let half = 1 << (drop - 1);
    let rounded = if rest > half || (rest == half && kept & 1 == 1) {
        kept + 1
    } else {
        kept
    };
    if exp >= -14 {
        // A carry to 2^11 moves to the next binade.
        let (m, e) = if rounded == 1 << 11 {
            (1 << 10, exp + 1)
        } else {
            (rounded, exp)
        };
        sign | (((e + 15) as u16) << 10) | (m as u16 & 0x3FF)
    } else {
        // A subnormal that rounds up to 2^10 is the smallest normal: the
        // same encoding.
        sign | rounded as u16
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gemm_audit_model::kernels::{B_SEED_OFFSET, Problem, seeded_a, seeded_b, to_storage_bytes};
    use gemm_audit_model::vocab::GemmOp;
    use proptest::prelude::*;

    fn element_bits(bytes: &[u8], dtype: DType, i: usize) -> u32 {
        match dtype {
            DType::F32 => u32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap()),
            _ => u32::from(u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]])),
        }
    }

    fn dtype() -> impl Strategy<Value = DType> {
        prop_oneof![Just(DType::F32), Just(DType::F16), Just(DType::Bf16)]
    }

    fn op() -> impl Strategy<Value = GemmOp> {
        prop_oneof![Just(GemmOp::Nn), Just(GemmOp::Tn), Just(GemmOp::Nt)]
    }

    proptest! {
        /// Every element of A and B the kernel's formula makes equals the
        /// CPU reference's seeded operand in storage, for random shapes,
        /// ops, dtypes and seeds.
        #[test]
        fn the_device_formula_makes_the_cpu_operands(
            seed in any::<u64>(),
            m in 1usize..40,
            k in 1usize..40,
            n in 1usize..40,
            op in op(),
            dtype in dtype(),
        ) {
            let p = Problem { op, m, k, n };
            let a = to_storage_bytes(dtype, &seeded_a(&p, dtype, seed));
            for i in 0..p.a_len() {
                let want = element_bits(&a, dtype, i);
                let got = storage_bits(i as u64, m as u64, k as u64, seed, op == GemmOp::Tn, dtype);
                prop_assert_eq!(got, want, "A[{}] of {} {} {}x{}x{}", i, op, dtype, m, k, n);
            }
            let b_seed = seed.wrapping_add(B_SEED_OFFSET);
            let b = to_storage_bytes(dtype, &seeded_b(&p, dtype, b_seed));
            for i in 0..p.b_len() {
                let want = element_bits(&b, dtype, i);
                let got = storage_bits(i as u64, k as u64, n as u64, b_seed, op == GemmOp::Nt, dtype);
                prop_assert_eq!(got, want, "B[{}] of {} {} {}x{}x{}", i, op, dtype, m, k, n);
            }
        }

        /// The roundings alone, on every multiple of 2^-23 the hash can
        /// give (f16 subnormals, ties and binade carries included), agree
        /// with `half`'s round-to-nearest-even.
        #[test]
        fn the_roundings_are_round_to_nearest_even(q in -(1i32 << 23)..=(1i32 << 23)) {
            let v = q as f32 * 1.192_092_9e-7_f32;
            prop_assert_eq!(f16_bits_rne(v), half::f16::from_f32(v).to_bits());
            prop_assert_eq!(bf16_bits_rne(v), half::bf16::from_f32(v).to_bits());
        }
    }

    /// The kernel still spells the constants the formula above uses.
    #[test]
    fn the_kernel_spells_the_same_formula() {
        let src = crate::catalog::SEED_SOURCE;
        for needle in [
            "0x9E3779B97F4A7C15ull",
            "0xBF58476D1CE4E5B9ull",
            "0x94D049BB133111EBull",
            "(z ^ (z >> 30))",
            "(z ^ (z >> 27))",
            "z ^ (z >> 31)",
            "splitmix64(splitmix64(s ^ r) ^ c)",
            "(i64)(h >> 40) - (1ll << 23)",
            "(float)(int)q * 1.1920928955078125e-7f",
            "c = idx / rows;",
            "r = idx / cols;",
            "cvt.rn.f16.f32",
            "cvt.rn.bf16.f32",
        ] {
            assert!(
                src.contains(needle),
                "seed.cu no longer contains {needle:?}"
            );
        }
        assert_eq!(1.192_092_9e-7_f32, 2f32.powi(-23));
    }
}
