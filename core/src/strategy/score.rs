//! Scored orders: cost-optimized, context-optimized, cache-optimized, auto.

use super::item::{Ask, Item, mix, ord_f64, sorted_by};
use super::quota::UNKNOWN_HEADROOM;
use std::cmp::Reverse;

/// The lowest declared cost first; options without a cost after all that have one.
pub fn cost(items: &[Item]) -> Vec<usize> {
    sorted_by(items, |i| (i.cost.is_none(), i.cost.map_or(0, ord_f64)))
}

/// Options whose declared context window fits the request first, the smallest fitting window
/// first (the large ones stay free for requests that need them); then options with no
/// declared window; options too small for the request last.
pub fn context(items: &[Item], ask: &Ask) -> Vec<usize> {
    sorted_by(items, |i| match i.context_window {
        Some(w) if w >= ask.context_tokens => (0, w),
        None => (1, 0),
        Some(w) => (2, u64::MAX - w),
    })
}

/// Rendezvous (highest-random-weight) hashing of the prompt prefix: each option scores
/// `mix(prefix ^ id)`, highest first. A prompt keeps its option while that option is
/// eligible, and when one option drops out only its prompts move.
pub fn cache(items: &[Item], ask: &Ask) -> Vec<usize> {
    sorted_by(items, |i| Reverse(mix(ask.prefix_hash ^ mix(i.id))))
}

/// Weights of the `auto` score; they sum to 1.
pub const AUTO_WEIGHTS: AutoWeights =
    AutoWeights { health: 0.30, headroom: 0.25, latency: 0.15, cost: 0.15, load: 0.15 };

/// The factors of the `auto` score.
#[derive(Debug, Clone, Copy)]
pub struct AutoWeights {
    /// Breaker health (closed 1.0, degraded 0.7, half-open 0.5).
    pub health: f64,
    /// Remaining quota share (0.5 when never reported).
    pub headroom: f64,
    /// `1 ÷ (1 + seconds to first byte)` (1.0 when unmeasured, so a new option gets tried).
    pub latency: f64,
    /// Cheapest declared cost ÷ this option's (1.0 when no costs are declared, 0.5 for an
    /// option without a cost among options with one).
    pub cost: f64,
    /// 1 ÷ (1 + requests in flight).
    pub load: f64,
}

/// The `auto` score of each item, in item order.
pub fn auto_scores(items: &[Item]) -> Vec<f64> {
    let w = AUTO_WEIGHTS;
    let best_cost = items.iter().filter_map(|i| i.cost).filter(|c| *c > 0.0).fold(f64::INFINITY, f64::min);
    let any_cost = items.iter().any(|i| i.cost.is_some());
    items
        .iter()
        .map(|i| {
            let latency = match i.latency_ms {
                Some(l) if l.is_finite() && l > 0.0 => 1.0 / (1.0 + l / 1000.0),
                _ => 1.0,
            };
            let cost = match i.cost {
                Some(c) if c > 0.0 && best_cost.is_finite() => (best_cost / c).min(1.0),
                Some(_) => 1.0,
                None if any_cost => 0.5,
                None => 1.0,
            };
            w.health * i.health
                + w.headroom * i.quota.remaining.unwrap_or(UNKNOWN_HEADROOM).clamp(0.0, 1.0)
                + w.latency * latency
                + w.cost * cost
                + w.load / (1.0 + f64::from(i.load))
        })
        .collect()
}

/// The highest `auto` score first.
pub fn auto(items: &[Item]) -> Vec<usize> {
    let scores = auto_scores(items);
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by(|&a, &b| ord_f64(scores[b]).cmp(&ord_f64(scores[a])).then(items[a].index.cmp(&items[b].index)));
    order
}
