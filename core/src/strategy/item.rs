//! What every strategy reads: a target's item (its traits and what its upstream reported),
//! the request's ask, the memory strategies keep between requests, and the small orderings and
//! hashes they share. Imports nothing of the strategies, which all import it.

use std::collections::BTreeMap;
use std::time::Duration;

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
    /// Each key's place in `turns`.
    cursors: ByKey<usize>,
    /// Each key with its rotation cursor.
    turns: Vec<(String, usize)>,
    /// The place in `turns` last rotated: a provider's keys are rotated on every pick, so the
    /// next rotation is nearly always of the same key (compared before any hashing).
    last: usize,
    decks: ByKey<Vec<u64>>,
    deficits: ByKey<BTreeMap<u64, i64>>,
}

/// State per key, looked up by `&str` (never iterated, so the order of a hash map is fine).
type ByKey<V> = hashbrown::HashMap<String, V, rustc_hash::FxBuildHasher>;

/// Keys remembered before the oldest state is dropped (a bound, not a tuning knob).
const MEMORY_CAP: usize = 10_000;

impl Memory {
    /// The start position of a rotation among `len` options for `key`, the cursor advanced:
    /// [`super::simple::round_robin`] uses it over items, the engine directly over a provider's keys.
    pub fn rotate(&mut self, key: &str, len: usize) -> usize {
        let cursor = self.cursor(key);
        let start = *cursor % len.max(1);
        *cursor = cursor.wrapping_add(1);
        start
    }

    /// `key`'s rotation cursor (0 at first), to read or move: the engine keeps there the
    /// position after a provider's key last picked.
    pub fn cursor(&mut self, key: &str) -> &mut usize {
        let at = match self.turns.get(self.last) {
            Some((k, _)) if k == key => self.last,
            _ => {
                if self.cursors.len() >= MEMORY_CAP && !self.cursors.contains_key(key) {
                    self.cursors.clear();
                    self.turns.clear();
                }
                let turns = &mut self.turns;
                let at = *self.cursors.entry_ref(key).or_insert_with(|| {
                    turns.push((key.to_owned(), 0));
                    turns.len() - 1
                });
                self.last = at;
                at
            }
        };
        &mut self.turns[at].1
    }

    pub(super) fn deficits(&mut self, key: &str) -> &mut BTreeMap<u64, i64> {
        slot(&mut self.deficits, key)
    }

    pub(super) fn deck(&mut self, key: &str) -> &mut Vec<u64> {
        slot(&mut self.decks, key)
    }
}

/// The entry for `key`, created on first use (allocating the key only then); the map is
/// cleared when it reaches [`MEMORY_CAP`] keys.
fn slot<'m, V: Default>(map: &'m mut ByKey<V>, key: &str) -> &'m mut V {
    if map.len() >= MEMORY_CAP && !map.contains_key(key) {
        map.clear();
    }
    map.entry_ref(key).or_default()
}

/// Positions sorted by `key` (stable: ties keep the listed order).
pub(crate) fn sorted_by<K: Ord>(items: &[Item], key: impl Fn(&Item) -> K) -> Vec<usize> {
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by(|&a, &b| key(&items[a]).cmp(&key(&items[b])).then(items[a].index.cmp(&items[b].index)));
    order
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
