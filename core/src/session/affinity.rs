//! Session affinity pins (M5): (session, provider) → connection, for a TTL.
//!
//! `choose` is called with the provider's eligible connections in the order routing would try
//! them. A fresh pin whose connection is among them wins and is touched; a pin to a connection
//! that is not eligible (cooling, terminal, locked, tried and failed in this request) is
//! dropped, and the least recently used eligible connection is pinned instead: one never used
//! first (in routing order), then the oldest use, then the fewest consecutive uses. A
//! connection-level failure evicts every pin to that connection. Changes leave as
//! [`PinEvent`]s for the shell to persist.

use rustc_hash::FxBuildHasher;
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

/// Pins kept before the soonest-expiring are dropped to make room (lapsed ones first, then
/// the soonest-expiring 1/[`MAKE_ROOM`] of them at once, so that a new pin at the cap does not
/// cost a pass over every pin).
pub const MAX_PINS: usize = 100_000;
/// At the cap, a pass drops lapsed pins, or else this fraction of them.
const MAKE_ROOM: usize = 64;
/// Undrained events kept.
const EVENT_CAP: usize = 4096;

/// A pin's key, borrowed: it hashes and compares as the owned `(session, provider)`, so that a
/// lookup allocates nothing.
#[derive(Hash)]
struct Key<'a>(&'a str, &'a str);

impl hashbrown::Equivalent<(String, String)> for Key<'_> {
    fn equivalent(&self, key: &(String, String)) -> bool {
        self.0 == key.0 && self.1 == key.1
    }
}

/// Every pin and the connections' recent use.
#[derive(Debug, Clone, Default)]
pub struct Affinity {
    /// Hashed (with a fixed hasher, so runs repeat): a lookup costs the same among a few pins
    /// or a hundred thousand.
    pins: hashbrown::HashMap<(String, String), Pin, FxBuildHasher>,
    /// The pins to each connection, so that a failed account's pins go without a pass over
    /// every pin.
    by_connection: hashbrown::HashMap<String, hashbrown::HashSet<(String, String), FxBuildHasher>, FxBuildHasher>,
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

    /// Every fresh pin as (session, provider, connection, time left), by session and provider.
    pub fn pins(&self, now: Instant) -> Vec<(String, String, String, Duration)> {
        let mut out: Vec<_> = self
            .pins
            .iter()
            .filter(|(_, p)| now < p.expires_at)
            .map(|((s, pr), p)| (s.clone(), pr.clone(), p.connection.clone(), p.expires_at - now))
            .collect();
        out.sort_unstable_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        out
    }

    /// Removes a pin without an event (another replica dropped it); whether one was there.
    pub fn unpin(&mut self, session: &str, provider: &str) -> bool {
        let Some((key, _)) = self.pins.get_key_value(&Key(session, provider)) else { return false };
        let key = key.clone();
        self.take(&key).is_some()
    }

    /// Sets a pin, keeping the connection index.
    fn put(&mut self, key: (String, String), pin: Pin) {
        let old = self.pins.insert(key.clone(), pin);
        let Some(connection) = self.pins.get(&key).map(|p| p.connection.as_str()) else { return };
        if let Some(old) = old
            && old.connection != connection
            && let Some(keys) = self.by_connection.get_mut(&old.connection)
        {
            keys.remove(&key);
            if keys.is_empty() {
                self.by_connection.remove(&old.connection);
            }
        }
        self.by_connection.entry_ref(connection).or_default().insert(key);
    }

    /// Removes a pin, keeping the connection index.
    fn take(&mut self, key: &(String, String)) -> Option<Pin> {
        let pin = self.pins.remove(key)?;
        self.unindex(&pin.connection, key);
        Some(pin)
    }

    fn unindex(&mut self, connection: &str, key: &(String, String)) {
        if let Some(keys) = self.by_connection.get_mut(connection) {
            keys.remove(key);
            if keys.is_empty() {
                self.by_connection.remove(connection);
            }
        }
    }

    /// At the cap: drops lapsed pins, or else the soonest-expiring 1/[`MAKE_ROOM`], each with
    /// an event.
    fn make_room(&mut self, now: Instant) {
        let mut by_end: Vec<(Instant, (String, String))> =
            self.pins.iter().map(|(k, p)| (p.expires_at, k.clone())).collect();
        by_end.sort();
        let lapsed = by_end.iter().take_while(|(end, _)| *end <= now).count();
        let n = if lapsed > 0 { lapsed } else { (by_end.len() / MAKE_ROOM).max(1) };
        for (_, key) in by_end.into_iter().take(n) {
            self.take(&key);
            self.push(PinEvent::Dropped { session: key.0, provider: key.1 });
        }
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
        if let Some(pin) = self.pins.get_mut(&Key(session, provider))
            && now < pin.expires_at
            && let Some(i) = pool.iter().position(|c| *c == pin.connection)
        {
            // Touch; persist only when half the TTL has gone, not on every request.
            let refresh = pin.expires_at.saturating_duration_since(now) < ttl / 2;
            pin.expires_at = now + ttl;
            if refresh {
                let e = PinEvent::Set {
                    session: session.to_owned(),
                    provider: provider.to_owned(),
                    connection: pool[i].to_owned(),
                    expires_at: now + ttl,
                };
                self.push(e);
            }
            return Some(i);
        }
        let key = (session.to_owned(), provider.to_owned());
        if self.take(&key).is_some() {
            self.push(PinEvent::Dropped { session: key.0.clone(), provider: key.1.clone() });
        }
        let i = self.least_recently_used(pool);
        if self.pins.len() >= MAX_PINS {
            self.make_room(now);
        }
        let pin = Pin { connection: pool[i].to_owned(), expires_at: now + ttl };
        self.push(PinEvent::Set {
            session: key.0.clone(),
            provider: key.1.clone(),
            connection: pin.connection.clone(),
            expires_at: pin.expires_at,
        });
        self.put(key, pin);
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
        let Some(gone) = self.by_connection.remove(connection) else { return 0 };
        // In session order, so that the events (and what is persisted) repeat run after run.
        let mut gone: Vec<(String, String)> = gone.into_iter().collect();
        gone.sort_unstable();
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
        self.put(key, pin);
    }

    /// Restores persisted pins at start-up: (session, provider, connection, time left), as
    /// [`Affinity::restore`] would one by one, without copying what it is given.
    pub fn restore_all(
        &mut self,
        now: Instant,
        pins: impl ExactSizeIterator<Item = (String, String, String, Duration)>,
    ) {
        self.pins.reserve(pins.len().min(MAX_PINS));
        // The index is built after, each connection's set at its final size.
        let mut moved: Vec<(String, (String, String))> = Vec::new();
        for (session, provider, connection, remaining) in pins {
            let key = (session, provider);
            if remaining.is_zero() || (self.pins.len() >= MAX_PINS && !self.pins.contains_key(&key)) {
                continue;
            }
            let ms = u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX);
            let pin = Pin { connection, expires_at: crate::types::after(now, ms) };
            match self.pins.entry(key) {
                hashbrown::hash_map::Entry::Occupied(mut e) => {
                    let old = std::mem::replace(e.get_mut(), pin);
                    moved.push((old.connection, e.key().clone()));
                }
                hashbrown::hash_map::Entry::Vacant(e) => {
                    e.insert(pin);
                }
            }
        }
        for (connection, key) in moved {
            if self.pins.get(&key).is_some_and(|p| p.connection != connection) {
                self.unindex(&connection, &key);
            }
        }
        let mut counts: hashbrown::HashMap<&str, usize, FxBuildHasher> = hashbrown::HashMap::default();
        for pin in self.pins.values() {
            *counts.entry(pin.connection.as_str()).or_default() += 1;
        }
        for (connection, n) in counts {
            let keys = self.by_connection.entry_ref(connection).or_default();
            keys.reserve(n.saturating_sub(keys.len()));
        }
        for (key, pin) in &self.pins {
            if let Some(keys) = self.by_connection.get_mut(pin.connection.as_str()) {
                keys.insert(key.clone());
            }
        }
    }

    /// The connection `session` is pinned to on `provider`, if the pin is fresh.
    pub fn pinned(&self, now: Instant, session: &str, provider: &str) -> Option<&str> {
        let pin = self.pins.get(&Key(session, provider))?;
        (now < pin.expires_at).then_some(pin.connection.as_str())
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
        let pins = &self.pins;
        for keys in self.by_connection.values_mut() {
            keys.retain(|k| pins.contains_key(k));
        }
        self.by_connection.retain(|_, keys| !keys.is_empty());
    }
}

#[cfg(test)]
#[path = "affinity_tests.rs"]
mod tests;
