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

use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::time::Duration;

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

/// What an upstream last reported of one quota, kept per connection.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Quota {
    /// Remaining share of the quota, 0.0 – 1.0.
    pub remaining: Option<f64>,
    /// Time until it resets.
    pub resets_in: Option<Duration>,
    /// The length of its window.
    pub window: Option<Duration>,
}

/// What a strategy knows of one option (a combo target or a connection).
#[derive(Debug, Clone, Copy)]
pub struct Item {
    /// Position in the configured list (ties break by it, lowest first).
    pub index: usize,
    /// A stable hash of the option's name (rendezvous hashing, lkgp).
    pub id: u64,
    /// Weight for `weighted` (0 never wins while others have weight).
    pub weight: u32,
    /// Declared cost (any unit, lower is cheaper).
    pub cost: Option<f64>,
    /// Declared context window in tokens.
    pub context_window: Option<u64>,
    /// Requests in flight now.
    pub load: u32,
    /// Requests dispatched so far.
    pub used: u64,
    /// The reported quota.
    pub quota: Quota,
    /// Breaker health: 1.0 closed, 0.7 degraded, 0.5 half-open.
    pub health: f64,
    /// Smoothed time to first byte, when measured.
    pub latency_ms: Option<f64>,
    /// Whether this option succeeded last for this combo.
    pub last_good: bool,
    /// Requests it may run at once (a connection's `max_concurrent`), if limited.
    pub capacity: Option<u32>,
}

impl Default for Item {
    fn default() -> Self {
        Item {
            index: 0,
            id: 0,
            weight: 1,
            cost: None,
            context_window: None,
            load: 0,
            used: 0,
            quota: Quota::default(),
            health: 1.0,
            latency_ms: None,
            last_good: false,
            capacity: None,
        }
    }
}

/// What a strategy knows of the request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ask {
    /// Estimated prompt size in tokens.
    pub context_tokens: u64,
    /// Hash of the prompt's prefix (system prompt and first user turn).
    pub prefix_hash: u64,
    /// Tools the request offers.
    pub tools: u32,
}

/// Cursors and decks kept between decisions, per combo (or provider) key.
#[derive(Debug, Clone, Default)]
pub struct Memory {
    cursors: BTreeMap<String, usize>,
    decks: BTreeMap<String, Vec<u64>>,
    deficits: BTreeMap<String, BTreeMap<u64, i64>>,
}

/// Keys remembered before the oldest state is dropped (a bound, not a tuning knob).
const MEMORY_CAP: usize = 10_000;

impl Memory {
    /// The start position of a rotation among `len` options for `key`, the cursor advanced:
    /// [`simple::round_robin`] uses it over items, the engine directly over a provider's keys.
    pub fn rotate(&mut self, key: &str, len: usize) -> usize {
        let cursor = slot(&mut self.cursors, key);
        let start = *cursor % len.max(1);
        *cursor = cursor.wrapping_add(1);
        start
    }

    fn deficits(&mut self, key: &str) -> &mut BTreeMap<u64, i64> {
        slot(&mut self.deficits, key)
    }

    fn deck(&mut self, key: &str) -> &mut Vec<u64> {
        slot(&mut self.decks, key)
    }
}

/// The entry for `key`, created on first use (allocating the key only then); the map is
/// cleared when it reaches [`MEMORY_CAP`] keys.
fn slot<'m, V: Default>(map: &'m mut BTreeMap<String, V>, key: &str) -> &'m mut V {
    if !map.contains_key(key) {
        if map.len() >= MEMORY_CAP {
            map.clear();
        }
        map.insert(key.to_owned(), V::default());
    }
    map.get_mut(key).unwrap_or_else(|| unreachable!("inserted above"))
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

/// Positions sorted by `key` (stable: ties keep the listed order).
pub(crate) fn sorted_by<K: Ord>(items: &[Item], key: impl Fn(&Item) -> K) -> Vec<usize> {
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by(|&a, &b| key(&items[a]).cmp(&key(&items[b])).then(items[a].index.cmp(&items[b].index)));
    order
}

/// Every position but `first`, in the listed order.
pub(crate) fn priority_rest(items: &[Item], first: usize) -> Vec<usize> {
    simple::priority(items).into_iter().filter(|p| *p != first).collect()
}

/// A float as a totally ordered key (NaN last).
pub(crate) fn ord_f64(x: f64) -> i64 {
    if x.is_nan() { i64::MAX } else { (x * 1_000_000.0).round() as i64 }
}

/// FNV-1a, 64 bit: a stable hash for names and prompt prefixes (same value on every platform
/// and every run, unlike the standard library's seeded hasher).
pub fn stable_hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// A 64-bit mix (splitmix64's finaliser) for combining two hashes.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests;
