//! Routing strategies (M15): the order in which eligible options are tried.
//!
//! One function, [`rank`], orders a list of [`Item`]s for a [`Strategy`]. The engine calls it
//! twice per decision: once over a combo's targets (the combo's `strategy`), then over the
//! connections inside each target's provider (the provider's `connection_strategy`). Every
//! strategy returns a complete order, so the request falls back along it; exclusions
//! (breakers, cooldowns, lockouts) are applied before ranking, so no strategy can pick an
//! excluded option. Randomised strategies draw from the caller's seeded RNG only.
//!
//! Families, one file each: [`simple`] (priority, round-robin, fill-first, lkgp),
//! [`random`] (random, strict-random, weighted), [`load`] (p2c, least-used), [`quota`]
//! (reset-aware, reset-window, headroom), [`score`] (cost-optimized, context-optimized,
//! cache-optimized, auto).

pub mod load;
pub mod quota;
pub mod random;
pub mod score;
pub mod simple;

mod item;
pub use item::{Ask, Item, Memory, Quota, stable_hash};

use rand_chacha::ChaCha8Rng;

/// How to order options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash, PartialOrd, Ord)]
pub enum Strategy {
    /// In the listed order (the default).
    #[default]
    Priority,
    /// A random order weighted by each option's `weight`.
    Weighted,
    /// Rotate the first choice through the options, one step per decision.
    RoundRobin,
    /// In the listed order, but an option whose reported quota is used up goes last.
    FillFirst,
    /// Power of two choices: of two random options the less loaded goes first.
    P2c,
    /// A shuffled deck per combo: every option comes first once before any repeats.
    Random,
    /// An independent uniform draw per decision (repeats allowed).
    StrictRandom,
    /// The fewest requests in flight first, then the fewest dispatched so far.
    LeastUsed,
    /// The lowest declared cost first (options without a cost last).
    CostOptimized,
    /// The shortest quota window first, options nearly out of quota last.
    ResetAware,
    /// The soonest quota reset first.
    ResetWindow,
    /// The most remaining quota first.
    Headroom,
    /// The last option that succeeded for this combo first, then the listed order.
    Lkgp,
    /// The smallest context window that fits the request first.
    ContextOptimized,
    /// A rendezvous hash of the prompt prefix: one prompt keeps one option while it is eligible.
    CacheOptimized,
    /// A multi-factor score: health, headroom, latency, cost, load (see [`score::auto`]).
    Auto,
    /// Among a provider's connections only (M7): deficit round robin over each connection's
    /// `max_concurrent`, with power of two choices; a saturated connection goes last.
    QuotaShare,
}

impl Strategy {
    /// Every strategy, in documentation order.
    pub const ALL: [Strategy; 16] = [
        Strategy::Priority,
        Strategy::Weighted,
        Strategy::RoundRobin,
        Strategy::FillFirst,
        Strategy::P2c,
        Strategy::Random,
        Strategy::StrictRandom,
        Strategy::LeastUsed,
        Strategy::CostOptimized,
        Strategy::ResetAware,
        Strategy::ResetWindow,
        Strategy::Headroom,
        Strategy::Lkgp,
        Strategy::ContextOptimized,
        Strategy::CacheOptimized,
        Strategy::Auto,
    ];

    /// The strategies a provider may use among its connections (`connection_strategy`).
    pub const FOR_CONNECTIONS: [Strategy; 9] = [
        Strategy::Priority,
        Strategy::Weighted,
        Strategy::FillFirst,
        Strategy::RoundRobin,
        Strategy::P2c,
        Strategy::Random,
        Strategy::LeastUsed,
        Strategy::StrictRandom,
        Strategy::QuotaShare,
    ];

    /// The config name.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Priority => "priority",
            Strategy::Weighted => "weighted",
            Strategy::RoundRobin => "round-robin",
            Strategy::FillFirst => "fill-first",
            Strategy::P2c => "p2c",
            Strategy::Random => "random",
            Strategy::StrictRandom => "strict-random",
            Strategy::LeastUsed => "least-used",
            Strategy::CostOptimized => "cost-optimized",
            Strategy::ResetAware => "reset-aware",
            Strategy::ResetWindow => "reset-window",
            Strategy::Headroom => "headroom",
            Strategy::Lkgp => "lkgp",
            Strategy::ContextOptimized => "context-optimized",
            Strategy::CacheOptimized => "cache-optimized",
            Strategy::Auto => "auto",
            Strategy::QuotaShare => "quota-share",
        }
    }

    /// Parses a config name or one of the reference gateway's aliases (`usage`,
    /// `weekly-reset`, `reset-window-order`, `context`).
    pub fn parse(name: &str) -> Option<Strategy> {
        let alias = match name {
            "usage" => "least-used",
            "weekly-reset" | "reset-window-order" => "reset-window",
            "context" => "context-optimized",
            other => other,
        };
        Strategy::ALL.into_iter().chain([Strategy::QuotaShare]).find(|s| s.as_str() == alias)
    }

    /// Whether it reads traffic and quota state (load, dispatch counts, reported quotas,
    /// health, latency); the others order by position, weight, cost or hash alone, so the
    /// engine need not look that state up for them.
    pub fn reads_usage(self) -> bool {
        matches!(
            self,
            Strategy::FillFirst
                | Strategy::P2c
                | Strategy::LeastUsed
                | Strategy::ResetAware
                | Strategy::ResetWindow
                | Strategy::Headroom
                | Strategy::Auto
                | Strategy::QuotaShare
        )
    }

    /// Whether a provider may use it among its connections.
    pub fn for_connections(self) -> bool {
        Strategy::FOR_CONNECTIONS.contains(&self)
    }
}

/// Orders `items` for `strategy`: returns positions into `items`, each exactly once.
pub fn rank(
    strategy: Strategy,
    items: &[Item],
    ask: &Ask,
    key: &str,
    memory: &mut Memory,
    rng: &mut ChaCha8Rng,
) -> Vec<usize> {
    if items.len() <= 1 {
        return (0..items.len()).collect();
    }
    match strategy {
        Strategy::Priority => simple::priority(items),
        Strategy::RoundRobin => simple::round_robin(items, key, memory),
        Strategy::FillFirst => simple::fill_first(items),
        Strategy::Lkgp => simple::lkgp(items),
        Strategy::Weighted => random::weighted(items, rng),
        Strategy::Random => random::deck(items, memory.deck(key), rng),
        Strategy::StrictRandom => random::strict(items, rng),
        Strategy::P2c => load::p2c(items, rng),
        Strategy::LeastUsed => load::least_used(items),
        Strategy::ResetAware => quota::reset_aware(items),
        Strategy::ResetWindow => quota::reset_window(items),
        Strategy::Headroom => quota::headroom(items),
        Strategy::CostOptimized => score::cost(items),
        Strategy::ContextOptimized => score::context(items, ask),
        Strategy::CacheOptimized => score::cache(items, ask),
        Strategy::Auto => score::auto(items),
        Strategy::QuotaShare => load::quota_share(items, memory.deficits(key), rng),
    }
}

#[cfg(test)]
mod tests;
