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
use std::hash::BuildHasher;
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

/// A pin: its key (session, provider), where it goes, when it lapses, and its key's hash (kept,
/// so that growing the table or the index never hashes a key again).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pin {
    session: String,
    provider: String,
    connection: String,
    expires_at: Instant,
    hash: u64,
}

impl Pin {
    fn is(&self, session: &str, provider: &str) -> bool {
        self.session == session && self.provider == provider
    }
}

/// The hash of a pin's key (fixed, so that runs repeat).
fn key_hash(session: &str, provider: &str) -> u64 {
    FxBuildHasher.hash_one((session, provider))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Use {
    last: Instant,
    consecutive: u32,
}

/// Pins kept, by default, before the soonest-expiring are dropped to make room (lapsed ones
/// first, then the soonest-expiring 1/[`MAKE_ROOM`] of them at once, so that a new pin at the
/// cap does not cost a pass over every pin); `[resilience.session_affinity] max_pins` sets it.
pub const MAX_PINS: usize = 100_000;
/// At the cap, a pass drops lapsed pins, or else this fraction of them.
const MAKE_ROOM: usize = 64;
/// Undrained events kept.
const EVENT_CAP: usize = 4096;

/// Every pin and the connections' recent use.
#[derive(Debug, Clone)]
pub struct Affinity {
    /// Hashed by key: a lookup costs the same among a few pins or a hundred thousand.
    pins: hashbrown::HashTable<Pin>,
    /// The key hashes of the pins to each connection, so that a failed account's pins go
    /// without a pass over every pin. Hashes, not keys: building it copies no string (with
    /// 100 000 pins restored at start-up, copying the keys was half of restoring them).
    by_connection: hashbrown::HashMap<String, hashbrown::HashSet<u64, FxBuildHasher>, FxBuildHasher>,
    uses: BTreeMap<String, Use>,
    last_connection: Option<String>,
    events: VecDeque<PinEvent>,
    /// Most pins kept.
    max: usize,
}

impl Default for Affinity {
    fn default() -> Self {
        Affinity {
            pins: hashbrown::HashTable::new(),
            by_connection: hashbrown::HashMap::default(),
            uses: BTreeMap::new(),
            last_connection: None,
            events: VecDeque::new(),
            max: MAX_PINS,
        }
    }
}

impl Affinity {
    /// No pins; at most [`MAX_PINS`] kept.
    pub fn new() -> Self {
        Affinity::default()
    }

    /// Keeps at most `n` pins (at least one): above a lowered cap, the next new pin drops the
    /// soonest-ending down to it.
    pub fn set_max_pins(&mut self, n: usize) {
        self.max = n.max(1);
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
            .filter(|p| now < p.expires_at)
            .map(|p| (p.session.clone(), p.provider.clone(), p.connection.clone(), p.expires_at - now))
            .collect();
        out.sort_unstable_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        out
    }

    /// Removes a pin without an event (another replica dropped it); whether one was there.
    pub fn unpin(&mut self, session: &str, provider: &str) -> bool {
        self.take(session, provider).is_some()
    }

    /// Sets a pin (replacing its key's), keeping the connection index.
    fn put(&mut self, pin: Pin) {
        let hash = pin.hash;
        self.by_connection.entry_ref(pin.connection.as_str()).or_default().insert(hash);
        let old = match self.pins.entry(hash, |p| p.is(&pin.session, &pin.provider), |p| p.hash) {
            hashbrown::hash_table::Entry::Occupied(mut e) => Some(std::mem::replace(e.get_mut(), pin)),
            hashbrown::hash_table::Entry::Vacant(e) => {
                e.insert(pin);
                None
            }
        };
        if let Some(old) = old {
            self.unindex(&old.connection, hash);
        }
    }

    /// Removes a pin, keeping the connection index.
    fn take(&mut self, session: &str, provider: &str) -> Option<Pin> {
        let hash = key_hash(session, provider);
        let (pin, _) = self.pins.find_entry(hash, |p| p.is(session, provider)).ok()?.remove();
        self.unindex(&pin.connection, hash);
        Some(pin)
    }

    /// Forgets that a pin with `hash` goes to `connection`, unless another still does (two keys
    /// may share a hash). The table offers every pin whose hash shares a few bits with `hash`,
    /// so each search here compares the whole hash first.
    fn unindex(&mut self, connection: &str, hash: u64) {
        if self.pins.find(hash, |p| p.hash == hash && p.connection == connection).is_some() {
            return;
        }
        if let Some(hashes) = self.by_connection.get_mut(connection) {
            hashes.remove(&hash);
            if hashes.is_empty() {
                self.by_connection.remove(connection);
            }
        }
    }

    /// At the cap: drops lapsed pins, or else the soonest-expiring 1/[`MAKE_ROOM`] (and any
    /// above a lowered cap), each with an event.
    fn make_room(&mut self, now: Instant) {
        let mut by_end: Vec<(Instant, &str, &str)> =
            self.pins.iter().map(|p| (p.expires_at, p.session.as_str(), p.provider.as_str())).collect();
        by_end.sort_unstable();
        let lapsed = by_end.iter().take_while(|(end, _, _)| *end <= now).count();
        let n = if lapsed > 0 { lapsed } else { (by_end.len() / MAKE_ROOM).max(1) };
        // Above a lowered cap: down to it at once, with room for the new pin.
        let n = n.max((by_end.len() + 1).saturating_sub(self.max));
        let gone: Vec<(String, String)> =
            by_end.into_iter().take(n).map(|(_, s, p)| (s.to_owned(), p.to_owned())).collect();
        for (session, provider) in gone {
            if let Some(pin) = self.take(&session, &provider) {
                self.push(PinEvent::Dropped { session: pin.session, provider: pin.provider });
            }
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
        let hash = key_hash(session, provider);
        if let Some(pin) = self.pins.find_mut(hash, |p| p.is(session, provider))
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
        if let Some(old) = self.take(session, provider) {
            self.push(PinEvent::Dropped { session: old.session, provider: old.provider });
        }
        let i = self.least_recently_used(pool);
        if self.pins.len() >= self.max {
            self.make_room(now);
        }
        let pin = Pin {
            session: session.to_owned(),
            provider: provider.to_owned(),
            connection: pool[i].to_owned(),
            expires_at: now + ttl,
            hash,
        };
        self.push(PinEvent::Set {
            session: pin.session.clone(),
            provider: pin.provider.clone(),
            connection: pin.connection.clone(),
            expires_at: pin.expires_at,
        });
        self.put(pin);
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
        let Some(hashes) = self.by_connection.remove(connection) else { return 0 };
        let mut gone: Vec<(String, String)> = Vec::with_capacity(hashes.len());
        for hash in hashes {
            while let Ok(e) = self.pins.find_entry(hash, |p| p.hash == hash && p.connection == connection) {
                let (pin, _) = e.remove();
                gone.push((pin.session, pin.provider));
            }
        }
        // In session order, so that the events (and what is persisted) repeat run after run.
        gone.sort_unstable();
        let n = gone.len();
        for (session, provider) in gone {
            self.push(PinEvent::Dropped { session, provider });
        }
        n
    }

    /// Restores a persisted pin (or another replica's) with `remaining` of its TTL, replacing
    /// the session's pin on that provider. Returns whether it was kept (not when lapsed, nor
    /// when it would be a new pin beyond `max_pins`).
    pub fn restore(
        &mut self,
        now: Instant,
        session: &str,
        provider: &str,
        connection: &str,
        remaining: Duration,
    ) -> bool {
        if remaining.is_zero() || (self.pins.len() >= self.max && self.find(session, provider).is_none()) {
            return false;
        }
        self.put_for(now, session.to_owned(), provider.to_owned(), connection.to_owned(), remaining);
        true
    }

    /// Restores persisted pins at start-up: (session, provider, connection, time left), as
    /// [`Affinity::restore`] would one by one, without copying what it is given.
    pub fn restore_all(&mut self, now: Instant, pins: impl Iterator<Item = (String, String, String, Duration)>) {
        let most = pins.size_hint();
        self.pins.reserve(most.1.unwrap_or(most.0).min(self.max), |p| p.hash);
        for (session, provider, connection, remaining) in pins {
            if remaining.is_zero() || (self.pins.len() >= self.max && self.find(&session, &provider).is_none()) {
                continue;
            }
            self.put_for(now, session, provider, connection, remaining);
        }
    }

    fn put_for(&mut self, now: Instant, session: String, provider: String, connection: String, remaining: Duration) {
        let ms = u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX);
        let hash = key_hash(&session, &provider);
        self.put(Pin { session, provider, connection, expires_at: crate::types::after(now, ms), hash });
    }

    fn find(&self, session: &str, provider: &str) -> Option<&Pin> {
        self.pins.find(key_hash(session, provider), |p| p.is(session, provider))
    }

    /// The connection `session` is pinned to on `provider`, if the pin is fresh.
    pub fn pinned(&self, now: Instant, session: &str, provider: &str) -> Option<&str> {
        let pin = self.find(session, provider)?;
        (now < pin.expires_at).then_some(pin.connection.as_str())
    }

    /// Fresh pins.
    pub fn len(&self, now: Instant) -> usize {
        self.pins.iter().filter(|p| now < p.expires_at).count()
    }

    /// Whether no fresh pin exists (the tests' question; the gateway asks `len`).
    #[cfg(test)]
    pub fn is_empty(&self, now: Instant) -> bool {
        self.len(now) == 0
    }

    /// Drops lapsed pins (no event: a lapsed pin is ignored wherever it is stored).
    pub fn sweep(&mut self, now: Instant) {
        self.pins.retain(|p| now < p.expires_at);
        let pins = &self.pins;
        for (connection, hashes) in &mut self.by_connection {
            hashes.retain(|h| pins.find(*h, |p| p.hash == *h && p.connection == *connection).is_some());
        }
        self.by_connection.retain(|_, keys| !keys.is_empty());
    }
}

#[cfg(test)]
#[path = "affinity_tests.rs"]
mod tests;
