//! Deterministic orders: priority, round-robin, fill-first, lkgp.

use super::{Item, Memory, sorted_by};

/// The listed order.
pub fn priority(items: &[Item]) -> Vec<usize> {
    sorted_by(items, |i| i.index)
}

/// The listed order rotated by a cursor that advances one step per decision.
pub fn round_robin(items: &[Item], key: &str, memory: &mut Memory) -> Vec<usize> {
    let base = priority(items);
    let start = memory.rotate(key, base.len());
    base.iter().cycle().skip(start).take(base.len()).copied().collect()
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
