//! The outputs of two traces: whether they were compared, and how far
//! two outputs are apart element by element (ULP statistics).

use super::{DiffClass, TraceDiff};
use crate::trace::RecordedGemmTrace;
use serde::Serialize;
use std::fmt;

/// Whether two traces' outputs were compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NumericComparison {
    /// Both traces hold output fingerprints of one mode: compared.
    Compared,
    /// A trace holds no output bits (an imported profile): the routes
    /// were compared, the outputs could not be. Never a pass of the bits.
    NotObserved,
    /// The traces' fingerprints are of different modes: not compared
    /// (a structural difference says so).
    ModesDiffer,
}

impl fmt::Display for NumericComparison {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NumericComparison::Compared => "compared",
            NumericComparison::NotObserved => "not observed",
            NumericComparison::ModesDiffer => "not compared (fingerprint modes differ)",
        })
    }
}

impl NumericComparison {
    /// How `golden`'s and `candidate`'s outputs compare, by their modes.
    pub fn of(golden: &RecordedGemmTrace, candidate: &RecordedGemmTrace) -> NumericComparison {
        if !golden.outputs_observed() || !candidate.outputs_observed() {
            NumericComparison::NotObserved
        } else if golden.fingerprint_mode != candidate.fingerprint_mode {
            NumericComparison::ModesDiffer
        } else {
            NumericComparison::Compared
        }
    }
}

/// Element-level comparison of two outputs of `dtype`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct UlpStats {
    /// Elements compared.
    pub elements: u64,
    /// Elements whose bits differ.
    pub differing: u64,
    /// Largest distance in units in the last place (NaNs count as u64::MAX).
    pub max_ulp: u64,
}

impl UlpStats {
    /// The worse of two comparisons: the larger count and distance.
    pub fn worst(self, other: UlpStats) -> UlpStats {
        UlpStats {
            elements: self.elements.max(other.elements),
            differing: self.differing.max(other.differing),
            max_ulp: self.max_ulp.max(other.max_ulp),
        }
    }
}

impl fmt::Display for UlpStats {
    /// `3 of 4096 elements differ, max 2 ulp` (`max NaN or size` when a
    /// side is NaN or the sizes differ).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of {} elements differ, max ",
            self.differing, self.elements
        )?;
        if self.max_ulp == u64::MAX {
            f.write_str("NaN or size")
        } else {
            write!(f, "{} ulp", self.max_ulp)
        }
    }
}

/// Compares two outputs element by element. None when sizes differ or are
/// not a whole number of elements.
pub fn ulp_stats(dtype: crate::vocab::DType, a: &[u8], b: &[u8]) -> Option<UlpStats> {
    use crate::vocab::DType;
    let size = crate::kernels::element_size(dtype);
    if !dtype.is_runnable() || a.len() != b.len() || !a.len().is_multiple_of(size) {
        return None;
    }
    // Map float bits onto a line where adjacent floats are adjacent integers.
    fn ordered(bits: u64, sign: u64) -> i128 {
        if bits & sign != 0 {
            -((bits & !sign) as i128)
        } else {
            bits as i128
        }
    }
    let mut st = UlpStats {
        elements: (a.len() / size) as u64,
        differing: 0,
        max_ulp: 0,
    };
    for (x, y) in a.chunks_exact(size).zip(b.chunks_exact(size)) {
        if x == y {
            continue;
        }
        st.differing += 1;
        let (bx, by, sign, nan) = match dtype {
            DType::F32 => {
                let (u, v) = (
                    u32::from_le_bytes(x.try_into().ok()?),
                    u32::from_le_bytes(y.try_into().ok()?),
                );
                (
                    u as u64,
                    v as u64,
                    1u64 << 31,
                    f32::from_bits(u).is_nan() || f32::from_bits(v).is_nan(),
                )
            }
            DType::F16 | DType::Bf16 => {
                let (u, v) = (
                    u16::from_le_bytes(x.try_into().ok()?),
                    u16::from_le_bytes(y.try_into().ok()?),
                );
                let is_nan = |h: u16| match dtype {
                    DType::F16 => half::f16::from_bits(h).is_nan(),
                    _ => half::bf16::from_bits(h).is_nan(),
                };
                (u as u64, v as u64, 1u64 << 15, is_nan(u) || is_nan(v))
            }
            _ => return None,
        };
        let d = if nan {
            u64::MAX
        } else {
            (ordered(bx, sign) - ordered(by, sign)).unsigned_abs() as u64
        };
        st.max_ulp = st.max_ulp.max(d);
    }
    Some(st)
}

impl TraceDiff {
    /// Adds element counts and ULP distances to numeric differences whose
    /// outputs `load(side, gemm)` can supply (side 0 = golden, 1 = candidate).
    pub fn annotate_outputs(
        &mut self,
        golden: &RecordedGemmTrace,
        load: impl Fn(usize, &str) -> Option<Vec<u8>>,
    ) {
        for d in &mut self.differences {
            if d.class != DiffClass::Numeric {
                continue;
            }
            let (Some(i), Some(g)) = (d.route_index, d.gemm.clone()) else {
                continue;
            };
            let Some(route) = golden.routes.get(i) else {
                continue;
            };
            if let (Some(a), Some(b)) = (load(0, &g), load(1, &g))
                && let Some(st) = ulp_stats(route.dtype, &a, &b)
            {
                d.change.found.push_str(&format!(" ({st})"));
            }
        }
    }
}

/// The file an output dump of `gemm` is written to under a directory.
pub fn output_file_name(gemm: &str) -> String {
    let safe: String = gemm
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.@".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    // A name that had to change gets 8 hex digits of its SHA-256, so
    // distinct GEMMs (`x/y`, `x y`, `x:y`) never share a file; `.` and `..`
    // are never file names of their own.
    if safe == gemm && safe != "." && safe != ".." {
        format!("{safe}.bin")
    } else {
        let digest = crate::Digest::sha256(gemm.as_bytes()).to_string();
        format!("{safe}-{}.bin", &digest[..8])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ulp_distances() {
        use crate::vocab::DType;
        let a: Vec<u8> = [1.0f32, 2.0, -1.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let b: Vec<u8> = [1.0f32, f32::from_bits(2.0f32.to_bits() + 3), -1.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let st = ulp_stats(DType::F32, &a, &b).unwrap();
        assert_eq!((st.elements, st.differing, st.max_ulp), (3, 1, 3));
        // Across zero: +0 and -smallest are one ulp apart on each side of zero.
        let p: Vec<u8> = f32::from_bits(1).to_le_bytes().to_vec();
        let n: Vec<u8> = (-f32::from_bits(1)).to_le_bytes().to_vec();
        assert_eq!(ulp_stats(DType::F32, &p, &n).unwrap().max_ulp, 2);
        let h1 = half::bf16::from_f32(1.0).to_le_bytes();
        let h2 = half::bf16::from_bits(half::bf16::from_f32(1.0).to_bits() + 1).to_le_bytes();
        assert_eq!(ulp_stats(DType::Bf16, &h1, &h2).unwrap().max_ulp, 1);
        assert_eq!(st.to_string(), "1 of 3 elements differ, max 3 ulp");
        let worse = UlpStats {
            elements: 3,
            differing: 2,
            max_ulp: u64::MAX,
        };
        assert_eq!(st.worst(worse), worse);
        assert_eq!(worse.to_string(), "2 of 3 elements differ, max NaN or size");
        assert!(ulp_stats(DType::F32, &a, &a[..4]).is_none());
    }
}
