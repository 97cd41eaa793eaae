//! Randomised orders from the caller's seeded RNG: weighted, random (a deck), strict-random.

use super::item::{Item, ord_f64};
use super::simple;
use rand::RngExt;
use rand_chacha::ChaCha8Rng;

/// A random order weighted by `weight` (Efraimidis–Spirakis: each option draws
/// `-ln(u) / weight`, smallest first), so the first choice is option `i` with probability
/// `weight_i / Σ weight`. Weight 0 goes last.
pub fn weighted(items: &[Item], rng: &mut ChaCha8Rng) -> Vec<usize> {
    let mut keyed: Vec<(bool, i64, usize)> = items
        .iter()
        .enumerate()
        .map(|(pos, it)| {
            // u in (0, 1]: ln never sees 0.
            let u = 1.0 - rng.random::<f64>();
            let key = if it.weight == 0 { f64::INFINITY } else { -u.ln() / f64::from(it.weight) };
            (it.weight == 0, ord_f64(key.min(1e12)), pos)
        })
        .collect();
    keyed.sort_by(|a, b| (a.0, a.1, items[a.2].index).cmp(&(b.0, b.1, items[b.2].index)));
    keyed.into_iter().map(|k| k.2).collect()
}

/// A shuffled deck per key: the first choice is drawn from the options not yet drawn in this
/// round, so over `n` decisions with every option eligible each comes first once. The rest
/// follow in a random order.
pub fn deck(items: &[Item], deck: &mut Vec<u64>, rng: &mut ChaCha8Rng) -> Vec<usize> {
    let mut open: Vec<usize> = (0..items.len()).filter(|&p| deck.contains(&items[p].id)).collect();
    if open.is_empty() {
        deck.clear();
        deck.extend(items.iter().map(|i| i.id));
        open = (0..items.len()).collect();
    }
    let first = open[rng.random_range(0..open.len())];
    deck.retain(|id| *id != items[first].id);
    let mut rest: Vec<usize> = (0..items.len()).filter(|&p| p != first).collect();
    shuffle(&mut rest, rng);
    let mut out = vec![first];
    out.extend(rest);
    out
}

/// An independent uniform draw per decision (repeats allowed), the rest shuffled.
pub fn strict(items: &[Item], rng: &mut ChaCha8Rng) -> Vec<usize> {
    let first = rng.random_range(0..items.len());
    let mut rest = priority_rest(items, first);
    shuffle(&mut rest, rng);
    let mut out = vec![first];
    out.extend(rest);
    out
}

/// Fisher–Yates.
pub(crate) fn shuffle(v: &mut [usize], rng: &mut ChaCha8Rng) {
    for i in (1..v.len()).rev() {
        let j = rng.random_range(0..=i);
        v.swap(i, j);
    }
}

/// Every position but `first`, in the listed order.
fn priority_rest(items: &[Item], first: usize) -> Vec<usize> {
    simple::priority(items).into_iter().filter(|p| *p != first).collect()
}
