//! One way to spread independent host work over the machine's cores.

/// `f` of every item, in item order, computed on up to every host core.
/// Workers take items one at a time, so uneven costs balance; with one
/// core (or one item) it is a plain loop. A panic in `f` is resumed.
pub fn map_in_order<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(items.len());
    if threads < 2 {
        return items.iter().map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let (f, next) = (&f, &next);
    let mut done: Vec<(usize, R)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(move || {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(item) = items.get(i) else { break };
                        mine.push((i, f(item)));
                    }
                    mine
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}

#[cfg(test)]
mod tests {
    use super::map_in_order;

    /// Results come back in item order whatever order the workers finish
    /// in (uneven costs), for no item, one, and many.
    #[test]
    fn results_keep_the_item_order() {
        let items: Vec<u64> = (0..97).collect();
        let got = map_in_order(&items, |&x| {
            // Uneven work: later items are cheaper than earlier ones.
            let mut acc = x;
            for _ in 0..(100 - x) * 1000 {
                acc = acc.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            (x, acc)
        });
        assert_eq!(got.iter().map(|(x, _)| *x).collect::<Vec<_>>(), items);
        assert!(map_in_order(&[] as &[u64], |&x| x).is_empty());
        assert_eq!(map_in_order(&[7u64], |&x| x + 1), vec![8]);
    }
}
