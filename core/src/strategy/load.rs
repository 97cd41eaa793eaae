//! Load-aware orders: p2c, least-used and the quota-share gate.

use super::item::{Item, sorted_by};
use rand::RngExt;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

/// Power of two choices: two distinct random options, the less loaded first (then the fewer
/// dispatched, then the listed order), the other second, the rest by load.
pub fn p2c(items: &[Item], rng: &mut ChaCha8Rng) -> Vec<usize> {
    let a = rng.random_range(0..items.len());
    let mut b = rng.random_range(0..items.len() - 1);
    if b >= a {
        b += 1;
    }
    let key = |p: usize| (items[p].load, items[p].used, items[p].index);
    let (first, second) = if key(b) < key(a) { (b, a) } else { (a, b) };
    let mut out = vec![first, second];
    let rest: Vec<usize> = least_used(items).into_iter().filter(|p| *p != first && *p != second).collect();
    out.extend(rest);
    out
}

/// The fewest requests in flight first, then the fewest dispatched so far, then the listed
/// order.
pub fn least_used(items: &[Item]) -> Vec<usize> {
    sorted_by(items, |i| (i.load, i.used, i.index))
}

/// Whether an option is at its capacity.
fn saturated(i: &Item) -> bool {
    i.capacity.is_some_and(|c| i.load >= c)
}

/// Load as a share of capacity, in millionths (unlimited options count their load alone).
fn utilisation(i: &Item) -> u64 {
    let cap = u64::from(i.capacity.unwrap_or(1).max(1));
    u64::from(i.load) * 1_000_000 / cap
}

/// M7 quota share: deficit round robin over capacities with power of two choices. Every
/// decision credits each option its capacity (`max_concurrent`, 1 when unlimited); of two
/// random options with room, the one with more credit goes first and pays the sum of all
/// capacities. Over many decisions each option leads in proportion to its capacity, and a
/// saturated option is only moved last, never removed (fail-open).
pub fn quota_share(items: &[Item], deficits: &mut BTreeMap<u64, i64>, rng: &mut ChaCha8Rng) -> Vec<usize> {
    let quantum = |i: &Item| i64::from(i.capacity.unwrap_or(1).max(1));
    let total: i64 = items.iter().map(quantum).sum();
    // Forget options no longer offered, and keep credit bounded.
    deficits.retain(|id, _| items.iter().any(|i| i.id == *id));
    for i in items {
        let d = deficits.entry(i.id).or_insert(0);
        *d = (*d + quantum(i)).clamp(-4 * total, 4 * total);
    }
    let open: Vec<usize> = (0..items.len()).filter(|&p| !saturated(&items[p])).collect();
    let pool: Vec<usize> = if open.is_empty() { (0..items.len()).collect() } else { open };
    let first = if pool.len() == 1 {
        pool[0]
    } else {
        let a = pool[rng.random_range(0..pool.len())];
        let mut b = pool[rng.random_range(0..pool.len() - 1)];
        if b == a {
            b = pool[pool.len() - 1];
        }
        let key = |p: usize| {
            let i = &items[p];
            (std::cmp::Reverse(deficits.get(&i.id).copied().unwrap_or(0)), utilisation(i), i.index)
        };
        if key(b) < key(a) { b } else { a }
    };
    if let Some(d) = deficits.get_mut(&items[first].id) {
        *d -= total;
    }
    let rest = sorted_by(items, |i| (saturated(i), utilisation(i), i.index));
    let mut out = vec![first];
    out.extend(rest.into_iter().filter(|p| *p != first));
    out
}
