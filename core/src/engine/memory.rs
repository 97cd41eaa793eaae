//! What the engine keeps beside its state machines: the traffic routing reads (requests in
//! flight and dispatched, the last good target, latency, reported quotas, learned tool
//! limits) and the buffers `select` reuses. The engine's fields; its impl blocks elsewhere
//! read and write them.

use crate::quota::QuotaReport;
use rustc_hash::FxHashMap;
use std::hash::Hash;

/// What routing remembers of traffic beside each connection's place (which keeps its requests
/// in flight and dispatched, see `slots`): the last good target per route key, smoothed latency
/// per provider, reported quotas per connection and learned tool limits per provider/model.
/// Bounded: each map is cleared when it reaches [`USAGE_CAP`] keys (ids come from config, so this
/// only guards against misuse).
#[derive(Debug, Clone, Default)]
pub(super) struct Usage {
    pub(super) last_good: FxHashMap<String, (String, String)>,
    pub(super) latency_ms: FxHashMap<String, f64>,
    pub(super) quotas: FxHashMap<String, QuotaReport>,
    pub(super) tool_limits: FxHashMap<(String, String), u32>,
}

const USAGE_CAP: usize = 10_000;

/// One connection's requests: in flight now, and dispatched since the engine started.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Traffic {
    pub(super) in_flight: u32,
    pub(super) dispatched: u64,
}

pub(super) fn bounded_insert<K: Hash + Eq, V>(map: &mut FxHashMap<K, V>, key: K, value: V) {
    if map.len() >= USAGE_CAP {
        map.clear();
    }
    map.insert(key, value);
}

/// Buffers `select` keeps between decisions; their contents mean nothing outside one call.
#[derive(Debug, Clone, Default)]
pub(super) struct Scratch {
    pub(super) eligible: Vec<usize>,
    pub(super) order: Vec<usize>,
}
