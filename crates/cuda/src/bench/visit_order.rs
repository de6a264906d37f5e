//! The order the benchmark timing visits its routes in (`timing.rs`).
//! Pure logic, so unit-tested in every build.

/// The step of round `round` through `n` routes: coprime with `n` (so a
/// round visits each route once) and different from round to round, so a
/// route's predecessor changes. A heavy kernel's power draw moves the
/// clocks of the sample after it: with one fixed order that was a bias of
/// whichever route came next (docs/performance.md).
pub(crate) fn visit_stride(round: usize, n: usize) -> usize {
    if n <= 2 {
        return 1;
    }
    let gcd = |mut a: usize, mut b: usize| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    // The round-th number below n that is coprime with it (cycling; 1 is).
    let coprime: Vec<usize> = (1..n).filter(|&s| gcd(s, n) == 1).collect();
    coprime[round % coprime.len()]
}

#[cfg(test)]
mod tests {
    use super::visit_stride;

    #[test]
    fn every_round_visits_each_route_once_and_predecessors_change() {
        for n in [1usize, 2, 3, 6, 12, 30, 97, 900] {
            let mut before = vec![std::collections::HashSet::new(); n];
            for round in 0..8 {
                let s = visit_stride(round, n);
                let order: Vec<usize> = (0..n).map(|j| (round + j * s) % n).collect();
                let mut seen = order.clone();
                seen.sort_unstable();
                assert_eq!(seen, (0..n).collect::<Vec<_>>(), "n = {n}, round {round}");
                for w in order.windows(2) {
                    before[w[1]].insert(w[0]);
                }
            }
            if n > 6 {
                // Over 8 rounds each route follows at least 3 others.
                assert!(before.iter().skip(1).all(|p| p.len() >= 3), "n = {n}");
            }
        }
    }
}
