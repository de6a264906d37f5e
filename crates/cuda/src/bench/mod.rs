//! Timing for the benches (the `bench` feature; the binary never enables
//! it), and the visit order that keeps their samples fair.

#[cfg(all(feature = "cuda", feature = "bench"))]
pub(crate) mod lt_best;
#[cfg(all(feature = "cuda", feature = "bench"))]
pub(crate) mod timing;
pub(crate) mod visit_order;

/// Operand copies a cold timing rotates through for weights of
/// `weight_bytes` on a device with `l2_bytes` of L2: enough that the other
/// copies streamed between two uses of one copy hold at least twice the
/// L2, so its weights come from memory every time; at least `min`.
#[cfg_attr(
    not(all(feature = "cuda", feature = "bench")),
    allow(dead_code, unreachable_pub)
)]
pub fn cold_copies(weight_bytes: u64, l2_bytes: u64, min: usize) -> usize {
    let others = (2 * l2_bytes).div_ceil(weight_bytes.max(1));
    (others as usize + 1).max(min)
}

/// The interleaved runs that time routes whose prepared operands take
/// `bytes[i]` each, within `budget` bytes of device memory: all routes in
/// one run when they fit (a shared clock and visit order), else one run
/// per `keys[i]` (a problem family), in order of first appearance.
#[cfg_attr(
    not(all(feature = "cuda", feature = "bench")),
    allow(dead_code, unreachable_pub)
)]
pub fn interleaved_runs<K: PartialEq>(keys: &[K], bytes: &[u64], budget: u64) -> Vec<Vec<usize>> {
    if bytes.iter().sum::<u64>() <= budget {
        return vec![(0..keys.len()).collect()];
    }
    let mut runs: Vec<(&K, Vec<usize>)> = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        match runs.iter_mut().find(|(key, _)| *key == k) {
            Some((_, run)) => run.push(i),
            None => runs.push((k, vec![i])),
        }
    }
    runs.into_iter().map(|(_, run)| run).collect()
}

#[cfg(test)]
mod tests {
    use super::{cold_copies, interleaved_runs};

    #[test]
    fn routes_share_one_run_unless_they_exceed_the_memory() {
        let keys = ["a", "b", "a", "c", "b"];
        let bytes = [10, 20, 10, 5, 20];
        assert_eq!(
            interleaved_runs(&keys, &bytes, 65),
            vec![vec![0, 1, 2, 3, 4]]
        );
        assert_eq!(
            interleaved_runs(&keys, &bytes, 64),
            vec![vec![0, 2], vec![1, 4], vec![3]]
        );
        assert_eq!(
            interleaved_runs::<&str>(&[], &[], 0),
            vec![Vec::<usize>::new()]
        );
    }

    #[test]
    fn cold_copies_exceed_the_l2_for_every_shape() {
        let l2 = 50 << 20;
        // 4096 x 4096 bf16 (32 MiB): 4 others = 128 MiB >= 100 MiB.
        assert_eq!(cold_copies(32 << 20, l2, 2), 5);
        assert_eq!(cold_copies(32 << 20, l2, 6), 6);
        // The n = 1024 KV projection (8 MiB): 13 others = 104 MiB; six
        // copies (40 MiB of others) would stay in the L2.
        assert_eq!(cold_copies(8 << 20, l2, 6), 14);
        for w in [1u64 << 20, 8 << 20, 16 << 20, 28 << 20, 112 << 20] {
            let c = cold_copies(w, l2, 6) as u64;
            assert!((c - 1) * w >= 2 * l2, "{w}: {c}");
        }
    }
}
