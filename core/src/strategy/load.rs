//! Load-aware orders: p2c and least-used.

use super::{Item, sorted_by};
use rand::RngExt;
use rand_chacha::ChaCha8Rng;

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
