//! Session affinity pins (M5): (session, provider) → connection, for a TTL.
//!
//! `choose` is called with the provider's eligible connections in the order routing would try
//! them. A fresh pin whose connection is among them wins and is touched; a pin to a connection
//! that is not eligible (cooling, terminal, locked, tried and failed in this request) is
//! dropped, and the least recently used eligible connection is pinned instead: one never used
//! first (in routing order), then the oldest use, then the fewest consecutive uses. A
//! connection-level failure evicts every pin to that connection. Changes leave as
//! [`PinEvent`]s for the shell to persist.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

/// A pin changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PinEvent {
    /// Set, moved or refreshed.
    Set {
        /// Session key.
        session: String,
        /// Provider id.
        provider: String,
        /// Connection id.
        connection: String,
        /// When it lapses.
        expires_at: Instant,
    },
    /// Removed.
    Dropped {
        /// Session key.
        session: String,
        /// Provider id.
        provider: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Pin {
    connection: String,
    expires_at: Instant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Use {
    last: Instant,
    consecutive: u32,
}

/// Pins kept before the soonest-expiring is dropped to make room.
pub const MAX_PINS: usize = 100_000;
/// Undrained events kept.
const EVENT_CAP: usize = 4096;

/// Every pin and the connections' recent use.
#[derive(Debug, Clone, Default)]
pub struct Affinity {
    pins: BTreeMap<(String, String), Pin>,
    uses: BTreeMap<String, Use>,
    last_connection: Option<String>,
    events: VecDeque<PinEvent>,
}

impl Affinity {
    /// No pins.
    pub fn new() -> Self {
        Affinity::default()
    }

    fn push(&mut self, e: PinEvent) {
        if self.events.len() >= EVENT_CAP {
            self.events.pop_front();
        }
        self.events.push_back(e);
    }

    /// The next change, oldest first.
    pub fn poll_event(&mut self) -> Option<PinEvent> {
        self.events.pop_front()
    }

    /// Changes not yet drained.
    pub fn pending_events(&self) -> usize {
        self.events.len()
    }

    /// Takes the undrained changes after the first `n` (those made since
    /// [`Affinity::pending_events`] said `n`).
    pub fn take_events_after(&mut self, n: usize) -> Vec<PinEvent> {
        if n >= self.events.len() { Vec::new() } else { self.events.split_off(n).into() }
    }

    /// Every fresh pin as (session, provider, connection, time left).
    pub fn pins(&self, now: Instant) -> Vec<(String, String, String, Duration)> {
        self.pins
            .iter()
            .filter(|(_, p)| now < p.expires_at)
            .map(|((s, pr), p)| (s.clone(), pr.clone(), p.connection.clone(), p.expires_at - now))
            .collect()
    }

    /// Removes a pin without an event (another replica dropped it); whether one was there.
    pub fn unpin(&mut self, session: &str, provider: &str) -> bool {
        self.pins.remove(&(session.to_owned(), provider.to_owned())).is_some()
    }

    /// The position in `pool` (eligible connections, in routing order) that serves
    /// `session` on `provider`, pinning it for `ttl`; `None` with a zero TTL or an empty pool
    /// (routing then decides alone).
    pub fn choose(
        &mut self,
        now: Instant,
        session: &str,
        provider: &str,
        pool: &[&str],
        ttl: Duration,
    ) -> Option<usize> {
        if ttl.is_zero() || pool.is_empty() {
            return None;
        }
        let key = (session.to_owned(), provider.to_owned());
        if let Some(pin) = self.pins.get_mut(&key)
            && now < pin.expires_at
            && let Some(i) = pool.iter().position(|c| *c == pin.connection)
        {
            // Touch; persist only when half the TTL has gone, not on every request.
            let refresh = pin.expires_at.saturating_duration_since(now) < ttl / 2;
            pin.expires_at = now + ttl;
            if refresh {
                let e = PinEvent::Set {
                    session: key.0,
                    provider: key.1,
                    connection: pool[i].to_owned(),
                    expires_at: now + ttl,
                };
                self.push(e);
            }
            return Some(i);
        }
        if self.pins.remove(&key).is_some() {
            self.push(PinEvent::Dropped { session: key.0.clone(), provider: key.1.clone() });
        }
        let i = self.least_recently_used(pool);
        if self.pins.len() >= MAX_PINS
            && let Some(oldest) = self.pins.iter().min_by_key(|(_, p)| p.expires_at).map(|(k, _)| k.clone())
        {
            self.pins.remove(&oldest);
            self.push(PinEvent::Dropped { session: oldest.0, provider: oldest.1 });
        }
        let pin = Pin { connection: pool[i].to_owned(), expires_at: now + ttl };
        self.push(PinEvent::Set {
            session: key.0.clone(),
            provider: key.1.clone(),
            connection: pin.connection.clone(),
            expires_at: pin.expires_at,
        });
        self.pins.insert(key, pin);
        Some(i)
    }

    fn least_recently_used(&self, pool: &[&str]) -> usize {
        let mut best = 0;
        for (i, c) in pool.iter().enumerate() {
            let rank = |c: &str| match self.uses.get(c) {
                None => (0u8, None, 0u32),
                Some(u) => (1u8, Some(u.last), u.consecutive),
            };
            if rank(c) < rank(pool[best]) {
                best = i;
            }
        }
        best
    }

    /// Records that a request was dispatched to `connection` (the LRU order).
    pub fn used(&mut self, now: Instant, connection: &str) {
        let again = self.last_connection.as_deref() == Some(connection);
        match self.uses.get_mut(connection) {
            Some(u) => {
                u.last = now;
                u.consecutive = if again { u.consecutive.saturating_add(1) } else { 1 };
            }
            None => {
                if self.uses.len() >= MAX_PINS {
                    self.uses.clear();
                }
                self.uses.insert(connection.to_owned(), Use { last: now, consecutive: 1 });
            }
        }
        if !again {
            self.last_connection = Some(connection.to_owned());
        }
    }

    /// Drops every pin to `connection` (it failed at the account level). Returns how many.
    pub fn evict_connection(&mut self, connection: &str) -> usize {
        let gone: Vec<(String, String)> =
            self.pins.iter().filter(|(_, p)| p.connection == connection).map(|(k, _)| k.clone()).collect();
        for k in &gone {
            self.pins.remove(k);
            self.push(PinEvent::Dropped { session: k.0.clone(), provider: k.1.clone() });
        }
        gone.len()
    }

    /// Restores a persisted pin (or another replica's) with `remaining` of its TTL, replacing
    /// the session's pin on that provider.
    pub fn restore(&mut self, now: Instant, session: &str, provider: &str, connection: &str, remaining: Duration) {
        let key = (session.to_owned(), provider.to_owned());
        if remaining.is_zero() || (self.pins.len() >= MAX_PINS && !self.pins.contains_key(&key)) {
            return;
        }
        let ms = u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX);
        let pin = Pin { connection: connection.to_owned(), expires_at: crate::types::after(now, ms) };
        self.pins.insert(key, pin);
    }

    /// The connection `session` is pinned to on `provider`, if the pin is fresh.
    pub fn pinned(&self, now: Instant, session: &str, provider: &str) -> Option<&str> {
        self.pins
            .iter()
            .find(|((s, p), pin)| s == session && p == provider && now < pin.expires_at)
            .map(|(_, pin)| pin.connection.as_str())
    }

    /// Fresh pins.
    pub fn len(&self, now: Instant) -> usize {
        self.pins.values().filter(|p| now < p.expires_at).count()
    }

    /// Whether no fresh pin exists.
    pub fn is_empty(&self, now: Instant) -> bool {
        self.len(now) == 0
    }

    /// Drops lapsed pins (no event: a lapsed pin is ignored wherever it is stored).
    pub fn sweep(&mut self, now: Instant) {
        self.pins.retain(|_, p| now < p.expires_at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::t0;

    const TTL: Duration = Duration::from_secs(600);

    fn drain(a: &mut Affinity) -> Vec<PinEvent> {
        std::iter::from_fn(|| a.poll_event()).collect()
    }

    #[test]
    fn a_fresh_pin_wins_and_lapses_after_its_ttl() {
        let now = t0();
        let mut a = Affinity::new();
        assert_eq!(a.choose(now, "s", "p", &["k1", "k2"], TTL), Some(0));
        a.used(now, "k1");
        // Routing now prefers k2 first; the pin keeps k1.
        assert_eq!(a.choose(now, "s", "p", &["k2", "k1"], TTL), Some(1));
        assert!(matches!(drain(&mut a).as_slice(), [PinEvent::Set { connection, .. }] if connection == "k1"));
        // Past the TTL the pin is gone: the least recently used (never used: k2) is pinned.
        let later = now + TTL + Duration::from_secs(1);
        assert_eq!(a.choose(later, "s", "p", &["k1", "k2"], TTL), Some(1));
        assert_eq!(a.pinned(later, "s", "p"), Some("k2"));
        // A zero TTL turns affinity off.
        assert_eq!(a.choose(later, "t", "p", &["k1"], Duration::ZERO), None);
    }

    #[test]
    fn a_pin_to_an_ineligible_connection_is_replaced_by_the_least_recently_used() {
        let now = t0();
        let mut a = Affinity::new();
        for (i, k) in ["k1", "k2", "k3"].into_iter().enumerate() {
            a.used(now + Duration::from_secs(i as u64), k);
        }
        a.restore(now, "s", "p", "k3", TTL);
        // k3 is not eligible now: the pin moves to the least recently used of the others (k1).
        assert_eq!(a.choose(now + Duration::from_secs(5), "s", "p", &["k2", "k1"], TTL), Some(1));
        let ev = drain(&mut a);
        assert!(matches!(&ev[0], PinEvent::Dropped { session, .. } if session == "s"), "{ev:?}");
        assert!(matches!(&ev[1], PinEvent::Set { connection, .. } if connection == "k1"), "{ev:?}");
    }

    #[test]
    fn an_account_failure_evicts_every_pin_to_it() {
        let now = t0();
        let mut a = Affinity::new();
        a.choose(now, "s1", "p", &["k1", "k2"], TTL);
        a.choose(now, "s2", "q", &["k1"], TTL);
        drain(&mut a);
        assert_eq!(a.evict_connection("k1"), 2);
        assert_eq!(drain(&mut a).len(), 2);
        assert!(a.is_empty(now));
        // Sessions are pinned per provider.
        a.choose(now, "s", "p", &["k1"], TTL);
        a.choose(now, "s", "q", &["k9"], TTL);
        assert_eq!((a.pinned(now, "s", "p"), a.pinned(now, "s", "q")), (Some("k1"), Some("k9")));
    }

    #[test]
    fn touching_persists_only_after_half_the_ttl() {
        let now = t0();
        let mut a = Affinity::new();
        a.choose(now, "s", "p", &["k1"], TTL);
        drain(&mut a);
        a.choose(now + Duration::from_secs(60), "s", "p", &["k1"], TTL);
        assert!(drain(&mut a).is_empty());
        a.choose(now + Duration::from_secs(400), "s", "p", &["k1"], TTL);
        assert_eq!(drain(&mut a).len(), 1);
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Whatever happens, `choose` picks from the pool it was given, and a session keeps
            /// its connection while that connection stays in the pool and the pin is fresh.
            #[test]
            fn picks_stay_in_the_pool_and_stick(ops in proptest::collection::vec((0u8..4, 0usize..4, 1u64..400), 1..80)) {
                let conns = ["k0", "k1", "k2", "k3"];
                let mut a = Affinity::new();
                let mut now = t0();
                let mut last: Option<&str> = None;
                for (op, n, dt) in ops {
                    now += Duration::from_secs(dt);
                    match op {
                        0 => { a.evict_connection(conns[n]); last = None; }
                        1 => a.used(now, conns[n]),
                        _ => {
                            let pool: Vec<&str> = conns.iter().copied().filter(|c| *c != conns[n] || op == 2).collect();
                            let fresh = a.pinned(now, "s", "p").map(str::to_owned);
                            let i = a.choose(now, "s", "p", &pool, TTL).expect("a pick");
                            prop_assert!(i < pool.len());
                            if let (Some(f), Some(prev)) = (fresh.as_deref(), last)
                                && pool.contains(&f) {
                                prop_assert_eq!(pool[i], prev);
                            }
                            last = Some(pool[i]);
                        }
                    }
                }
            }
        }
    }
}
