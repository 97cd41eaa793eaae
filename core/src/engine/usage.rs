//! What routing remembers of traffic, per connection, provider and route: requests in flight
//! and dispatched, the last good target, smoothed latency, reported quotas and learned tool
//! limits.

use super::memory::bounded_insert;
use super::{Candidate, Engine};
use std::time::{Duration, Instant};

/// Smoothing of the latency average (weight of the newest sample).
const LATENCY_ALPHA: f64 = 0.2;

impl Engine {
    /// Requests in flight on a connection.
    pub fn in_flight(&self, connection: &str) -> u32 {
        self.conns.traffic_of(connection).in_flight
    }

    /// Requests in flight on `c`'s connection.
    pub(super) fn in_flight_of(&self, c: &Candidate<'_>) -> u32 {
        self.conns.traffic(c).in_flight
    }

    /// Requests dispatched to `c`'s connection so far.
    pub(super) fn dispatched_count(&self, c: &Candidate<'_>) -> u64 {
        self.conns.traffic(c).dispatched
    }

    pub(super) fn finished(&mut self, c: &Candidate<'_>) {
        let t = self.conns.traffic_mut(c);
        t.in_flight = t.in_flight.saturating_sub(1);
    }

    /// Remembers that `c` served route `key` well (lkgp).
    pub fn note_success(&mut self, key: &str, c: &Candidate<'_>) {
        match self.usage.last_good.get_mut(key) {
            Some((p, m)) if p == c.provider && m == c.model => {}
            Some(slot) => *slot = (c.provider.to_owned(), c.model.to_owned()),
            None => {
                bounded_insert(&mut self.usage.last_good, key.to_owned(), (c.provider.to_owned(), c.model.to_owned()))
            }
        }
    }

    /// The last target that served route `key` well, as (provider, model).
    pub fn last_good(&self, key: &str) -> Option<(&str, &str)> {
        self.usage.last_good.get(key).map(|(p, m)| (p.as_str(), m.as_str()))
    }

    /// Feeds a measured time to first byte of `provider` into its smoothed latency.
    pub fn observe_latency(&mut self, provider: &str, latency: Duration) {
        let ms = latency.as_secs_f64() * 1000.0;
        match self.usage.latency_ms.get_mut(provider) {
            Some(avg) => *avg += LATENCY_ALPHA * (ms - *avg),
            None => bounded_insert(&mut self.usage.latency_ms, provider.to_owned(), ms),
        }
    }

    /// Reads the quota headers of a response from `connection` (any status).
    pub fn observe_quota(&mut self, now: Instant, connection: &str, headers: &[(&str, &str)], wall_now_ms: u64) {
        if let Some(r) = crate::quota::parse(headers, now, wall_now_ms) {
            match self.usage.quotas.get_mut(connection) {
                Some(q) => *q = r,
                None => bounded_insert(&mut self.usage.quotas, connection.to_owned(), r),
            }
        }
    }

    /// The quota last reported for `connection`, as read at `now`.
    pub fn quota(&self, now: Instant, connection: &str) -> Option<crate::strategy::Quota> {
        self.usage.quotas.get(connection).map(|q| q.at(now))
    }

    /// Records that `provider`/`model` accepts at most `limit` tools (M16 dynamic tool-limit
    /// detection); a lower limit learned later replaces it.
    pub fn note_tool_limit(&mut self, provider: &str, model: &str, limit: u32) {
        let key = (provider.to_owned(), model.to_owned());
        match self.usage.tool_limits.get_mut(&key) {
            Some(l) => *l = (*l).min(limit),
            None => bounded_insert(&mut self.usage.tool_limits, key, limit),
        }
    }

    /// The tool limit learned for `provider`/`model`, if any.
    pub fn tool_limit(&self, provider: &str, model: &str) -> Option<u32> {
        self.usage.tool_limits.iter().find(|((p, m), _)| p == provider && m == model).map(|(_, l)| *l)
    }
}
