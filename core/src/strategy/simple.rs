//! Deterministic orders: priority, round-robin, fill-first, lkgp.

use super::item::{Item, Memory, sorted_by};

/// The listed order.
pub fn priority(items: &[Item]) -> Vec<usize> {
    sorted_by(items, |i| i.index)
}

/// The listed order rotated by a cursor that advances one step per decision.
pub fn round_robin(items: &[Item], key: &str, memory: &mut Memory) -> Vec<usize> {
    let base = priority(items);
    let start = memory.rotate(key, base.len());
    let mut out = Vec::with_capacity(base.len());
    extend_rotated(&mut out, &base, start);
    out
}

/// Appends `items` to `out` starting at `start` (taken round the length) and wrapping round.
pub(crate) fn extend_rotated<T: Copy>(out: &mut Vec<T>, items: &[T], start: usize) {
    let (head, tail) = items.split_at(start % items.len().max(1));
    // One reservation and a copy loop (a handful of keys: cheaper than two `memcpy` calls).
    out.extend(tail.iter().chain(head).copied());
}

/// The listed order, except that an option whose upstream reported its quota used up goes
/// last: each option is used until its quota is gone, then the next.
pub fn fill_first(items: &[Item]) -> Vec<usize> {
    sorted_by(items, |i| (i.quota.remaining.is_some_and(|r| r <= 0.0), i.index))
}

/// The option that last succeeded first, then the listed order.
pub fn lkgp(items: &[Item]) -> Vec<usize> {
    sorted_by(items, |i| (!i.last_good, i.index))
}

#[cfg(test)]
mod tests {
    use super::extend_rotated;

    #[test]
    fn a_rotation_is_the_cycled_list_from_its_start() {
        for len in 0..6usize {
            let items: Vec<usize> = (10..10 + len).collect();
            for start in 0..13 {
                let mut out = vec![99];
                extend_rotated(&mut out, &items, start);
                let cycled: Vec<usize> = items.iter().cycle().skip(start).take(len).copied().collect();
                assert_eq!(out[1..], cycled[..], "len {len}, start {start}");
                assert_eq!(out[0], 99, "appended, not replaced");
            }
        }
    }
}
