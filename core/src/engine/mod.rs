//! The engine: every resilience layer composed for routing, as one synchronous value.
//!
//! The shell asks it to pick a connection among candidates, dispatches, and reports the
//! outcome; the engine classifies, updates the breaker, the connection, the lockouts and the
//! provider cooldown tracker, and says what the client should see. Production and simulation
//! call the same methods.

use crate::breaker::registry::BreakerRegistry;
use crate::breaker::{Admission, BreakerState, Outcome, Ticket};
use crate::classify::{ConnectionEffect, Decision, ErrorInput, classify, classify_transport};
use crate::connection::{Applied, Availability, ConnectionSnapshot, ConnectionState};
use crate::lockout::ModelLockouts;
use crate::provider_cooldown::ProviderCooldownTracker;
use crate::session::Affinity;
use crate::settings::ResilienceSettings;
use crate::strategy::Memory;
use crate::types::{Reason, TerminalState};
use crate::usage_limit::Lanes;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rustc_hash::FxHashSet;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use crate::exclusion::{Exclusion, ExclusionReason, Refusal, Selection, refusal};

pub use crate::strategy::Strategy;
pub use candidate::{Candidate, Route, Traits};

pub use outcome::{AttemptOutcome, OutcomeKind};

use derived::Derived;
pub use event::Event;

/// The engine.
#[derive(Debug, Clone)]
pub struct Engine {
    settings: ResilienceSettings,
    derived: Derived,
    breakers: BreakerRegistry,
    conns: slots::Slots,
    lockouts: ModelLockouts,
    tracker: ProviderCooldownTracker,
    memory: Memory,
    connection_memory: Memory,
    usage: Usage,
    affinity: Affinity,
    lanes: Lanes,
    rng: ChaCha8Rng,
    events: VecDeque<Event>,
    /// Interned ids, so that events name providers and models without allocating on every
    /// failure (a connection with a place in `conns` is named by the place's copy of its id).
    ids: FxHashSet<Arc<str>>,
    /// Changes collected for other replicas, when sharing (see [`shared`]).
    outbox: Option<Vec<change::Pending>>,
    /// Buffers `select` reuses, so that a decision allocates nothing when a candidate is picked.
    scratch: memory::Scratch,
}

/// Cap on undrained events.
const EVENT_CAP: usize = 4096;

impl Engine {
    /// An engine with validated settings and a seed for its RNG.
    pub fn new(settings: ResilienceSettings, seed: u64) -> Self {
        let mut affinity = Affinity::new();
        affinity.set_max_pins(usize::try_from(settings.session_affinity.max_pins).unwrap_or(1));
        Engine {
            derived: Derived::new(&settings),
            settings,
            breakers: BreakerRegistry::default(),
            conns: slots::Slots::default(),
            lockouts: ModelLockouts::new(),
            tracker: ProviderCooldownTracker::new(),
            memory: Memory::default(),
            connection_memory: Memory::default(),
            usage: Usage::default(),
            affinity,
            lanes: Lanes::new(),
            rng: ChaCha8Rng::seed_from_u64(seed),
            events: VecDeque::new(),
            ids: FxHashSet::default(),
            outbox: None,
            scratch: memory::Scratch::default(),
        }
    }

    /// The settings.
    pub fn settings(&self) -> &ResilienceSettings {
        &self.settings
    }

    /// Replaces the settings (already validated); state is kept.
    pub fn set_settings(&mut self, settings: ResilienceSettings) {
        self.derived = Derived::new(&settings);
        self.affinity.set_max_pins(usize::try_from(settings.session_affinity.max_pins).unwrap_or(1));
        self.settings = settings;
    }

    /// The place of connection `id` in the engine's tables, and the engine's copy of the id: a
    /// candidate that carries both (`slot`, and `connection` borrowed from that copy) is found
    /// without hashing its id. Stays valid for the engine's life; resolve once per config.
    pub fn slot(&mut self, id: &str) -> (Slot, Arc<str>) {
        self.conns.slot(id)
    }

    /// The breakers.
    pub fn breakers(&self) -> &BreakerRegistry {
        &self.breakers
    }

    /// The breakers, mutably (restore, reset).
    pub fn breakers_mut(&mut self) -> &mut BreakerRegistry {
        &mut self.breakers
    }

    /// A connection's state (a fresh one if never seen).
    pub fn connection(&self, id: &str) -> ConnectionState {
        self.conns.get(id).cloned().unwrap_or_default()
    }

    /// Every connection seen, in id order.
    pub fn connections(&self) -> impl Iterator<Item = (&str, &ConnectionState)> {
        let mut all: Vec<(&str, &ConnectionState)> = self.conns.iter().collect();
        all.sort_unstable_by_key(|(k, _)| *k);
        all.into_iter()
    }

    /// Restores a persisted connection state.
    pub fn restore_connection(&mut self, id: &str, snap: &ConnectionSnapshot, now: Instant) {
        self.conns.insert(id, ConnectionState::restore(snap, now));
    }

    /// Operator reset of one connection.
    pub fn reset_connection(&mut self, id: &str) {
        if self.conns.remove(id).is_some() {
            // The place stays, with the engine's copy of the id the events name.
            let connection = self.conns.slot(id).1;
            self.push(Event::ConnectionRecovered { connection });
        }
    }

    /// The session pins (M5).
    pub fn affinity(&self) -> &Affinity {
        &self.affinity
    }

    /// The session pins, mutably (restore).
    pub fn affinity_mut(&mut self) -> &mut Affinity {
        &mut self.affinity
    }

    /// The model lockouts.
    pub fn lockouts(&self) -> &ModelLockouts {
        &self.lockouts
    }

    /// The next event, oldest first.
    pub fn poll_event(&mut self) -> Option<Event> {
        if let Some(t) = self.breakers.poll_event() {
            self.collect_transition(&t);
            return Some(Event::Breaker(t));
        }
        if let Some(e) = self.events.pop_front() {
            return Some(e);
        }
        if let Some(p) = self.affinity.poll_event() {
            if self.is_sharing() {
                self.collect(change::Pending::Pin(p.clone()));
            }
            return Some(Event::Pin(p));
        }
        let (id, change) = self.lanes.poll_change()?;
        Some(Event::Lane { connection: self.intern(&id), change })
    }

    /// The earliest instant at which some state changes by itself. Test-only: every state
    /// recovers lazily, when it is next read, so the gateway never sleeps on it.
    #[cfg(test)]
    pub fn poll_timeout(&self, now: Instant) -> Option<Instant> {
        let conn = self.conns.iter().filter_map(|(_, c)| c.rate_limited_until(now)).min();
        [self.breakers.poll_timeout(), conn, self.lockouts.poll_timeout(now), self.lanes.poll_timeout(now)]
            .into_iter()
            .flatten()
            .min()
    }

    /// Drops expired bookkeeping (lockouts past their window, idle tracker records).
    pub fn sweep(&mut self, now: Instant) {
        self.lockouts.sweep(now, &self.derived.lockout);
        self.affinity.sweep(now);
        self.lanes.sweep(now);
        self.tracker.sweep(now, &self.derived.provider_cooldown);
    }

    fn push(&mut self, e: Event) {
        if self.events.len() >= EVENT_CAP {
            self.events.pop_front();
        }
        self.events.push_back(e);
    }

    /// Why a candidate is not eligible at `now`, if it is not. Reads only.
    pub fn exclusion(&self, now: Instant, c: &Candidate<'_>) -> Option<(ExclusionReason, Duration)> {
        self.breaker_exclusion(now, c.provider).or_else(|| self.account_exclusion(now, c))
    }

    /// Whether `provider`'s breaker refuses at `now`, and for how long.
    fn breaker_exclusion(&self, now: Instant, provider: &str) -> Option<(ExclusionReason, Duration)> {
        let b = self.breakers.get(provider)?;
        (!b.can_execute(now)).then(|| (ExclusionReason::CircuitOpen, b.retry_after(now)))
    }

    /// Re-checks an admitted attempt just before it is sent (after waiting for a queue slot):
    /// excluded if the breaker opened meanwhile (or half-opened and this is no probe), or if the
    /// connection, provider window or model lockout now excludes it. The attempt's own probe
    /// slot does not count against it.
    pub fn recheck(&self, now: Instant, c: &Candidate<'_>, ticket: Ticket) -> Option<(ExclusionReason, Duration)> {
        if let Some(b) = self.breakers.get(c.provider) {
            match b.state(now) {
                BreakerState::Open => return Some((ExclusionReason::CircuitOpen, b.retry_after(now))),
                BreakerState::HalfOpen if !ticket.is_probe() => {
                    return Some((ExclusionReason::CircuitOpen, Duration::ZERO));
                }
                _ => {}
            }
        }
        // An expired connection's one retry was taken when it was selected; let it through.
        match self.account_exclusion(now, c) {
            Some((ExclusionReason::Terminal(TerminalState::Expired), _)) => None,
            other => other,
        }
    }

    fn account_exclusion(&self, now: Instant, c: &Candidate<'_>) -> Option<(ExclusionReason, Duration)> {
        self.connection_exclusion(now, c, self.provider_cooldown(now, c))
    }

    /// The provider-wide part of a candidate's provider cooldown (the same for every key of
    /// the provider).
    pub(crate) fn provider_cooldown(&self, now: Instant, c: &Candidate<'_>) -> Duration {
        let pc = &self.derived.provider_cooldown;
        if pc.enabled { self.tracker.remaining(now, pc, c.class, c.provider, None) } else { Duration::ZERO }
    }

    /// [`Self::account_exclusion`] given the provider-wide cooldown (`provider_cooldown`).
    pub(crate) fn connection_exclusion(
        &self,
        now: Instant,
        c: &Candidate<'_>,
        provider_cooldown: Duration,
    ) -> Option<(ExclusionReason, Duration)> {
        let pc = &self.derived.provider_cooldown;
        if pc.enabled {
            let r = provider_cooldown.max(self.tracker.remaining(now, pc, c.class, c.provider, Some(c.connection)));
            if !r.is_zero() {
                return Some((ExclusionReason::ProviderCooldown, r));
            }
        }
        if let Some(state) = self.conns.of(c) {
            match state.availability(now) {
                Availability::Available => {}
                Availability::CoolingDown { remaining, .. } => return Some((ExclusionReason::Unavailable, remaining)),
                Availability::Terminal { state, retry_in } => {
                    return Some((ExclusionReason::Terminal(state), retry_in.unwrap_or(Duration::ZERO)));
                }
            }
        }
        if let Some((remaining, _)) = self.lockouts.remaining(now, c.provider, c.connection, c.model, c.family) {
            return Some((ExclusionReason::ModelLockout, remaining));
        }
        None
    }

    /// Reports an attempt's outcome. `same_provider_next` is true inside a combo when the next
    /// target is on the same provider (a provider-level failure is then not counted).
    /// `profile` is the provider's rule profile (usually its id). Returns the decision for an
    /// upstream failure.
    #[allow(clippy::too_many_arguments)]
    pub fn record(
        &mut self,
        now: Instant,
        c: &Candidate<'_>,
        profile: &str,
        ticket: Ticket,
        outcome: AttemptOutcome<'_>,
        same_provider_next: bool,
        disable_cooling: bool,
        wall_now_ms: Option<u64>,
    ) -> Option<Decision> {
        self.finished(c);
        let bcfg = self.derived.breaker(c.class);
        match outcome {
            AttemptOutcome::Success => {
                let breaker = self.breakers.get_or_insert(c.provider, bcfg, now);
                breaker.handle_outcome(now, ticket, Outcome::Success);
                breaker.forget_failure_of(now, c.connection);
                let conn = self.connection_mut(c);
                let had_errors = *conn != ConnectionState::default();
                conn.record_success();
                if had_errors {
                    let connection = self.conns.id(c);
                    self.push(Event::ConnectionRecovered { connection });
                }
                self.decay_lockouts(now, c);

                self.tracker.record_success(c.provider, None);
                self.tracker.record_success(c.provider, Some(c.connection));
                None
            }
            AttemptOutcome::Neutral => {
                self.breakers.get_or_insert(c.provider, bcfg, now).handle_outcome(now, ticket, Outcome::Ignored);
                None
            }
            AttemptOutcome::Transport | AttemptOutcome::TooSlow => {
                let mut d = classify_transport();
                if matches!(outcome, AttemptOutcome::TooSlow) {
                    d.status = 504;
                    d.reason = Reason::ServerError;
                }
                self.apply(now, c, ticket, &d, "", same_provider_next, disable_cooling);
                Some(d)
            }
            AttemptOutcome::Egress => {
                let level = self.conns.of(c).map_or(0, |s| s.level_for(now));
                let d = crate::classify::classify_egress(self.derived.profile(c.class), level);
                self.apply(now, c, ticket, &d, "", false, disable_cooling);
                Some(d)
            }
            AttemptOutcome::Upstream { status, headers, body } => {
                let level = self.conns.of(c).map_or(0, |s| s.level_for(now));
                let input = ErrorInput {
                    provider: profile,
                    provider_id: c.provider,
                    format: c.traits.format,
                    class: c.class,
                    status,
                    headers,
                    body,
                    backoff_level: level,
                    wall_now_ms,
                    until_daily_reset: wall_now_ms.map(|w| c.traits.daily_reset.until_midnight(w)),
                };
                let mut d = classify(&input, self.derived.profile(c.class), &self.settings.error_rules);
                self.apply(now, c, ticket, &d, body, same_provider_next, disable_cooling);
                self.tell_what_was_recorded(now, c, &mut d);
                Some(d)
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn apply(
        &mut self,
        now: Instant,
        c: &Candidate<'_>,
        ticket: Ticket,
        d: &Decision,
        message: &str,
        same_provider_next: bool,
        disable_cooling: bool,
    ) {
        let bcfg = self.derived.breaker(c.class);
        let breaker_outcome = if d.trips_breaker && !same_provider_next {
            Outcome::Failure { connection: Some(c.connection) }
        } else {
            Outcome::Ignored
        };
        self.breakers.get_or_insert(c.provider, bcfg, now).handle_outcome(now, ticket, breaker_outcome);
        if self.outbox.is_some() && matches!(breaker_outcome, Outcome::Failure { .. }) {
            let (provider, connection) = (self.intern(c.provider), self.conns.id(c));
            self.collect(change::Pending::Failure { provider, connection });
        }
        let pc = &self.derived.provider_cooldown;
        if pc.enabled {
            if d.trips_breaker {
                self.tracker.record_failure(now, pc, c.class, c.provider, None);
            } else if d.connection != ConnectionEffect::None {
                self.tracker.record_failure(now, pc, c.class, c.provider, Some(c.connection));
            }
        }
        // The connection's place, found once for its state, its events and its lockout.
        let place = self.conns.place(c);
        let applied = self.conns.state_at(place).record_failure(now, d, message, disable_cooling);
        if matches!(applied, Applied::Cooldown { .. } | Applied::Terminal(_)) {
            // M5: sessions pinned to a key that failed at the account level move on.
            self.affinity.evict_connection(c.connection);
        }
        match applied {
            Applied::Cooldown { until, level } => {
                let connection = self.conns.id_at(place);
                self.push(Event::ConnectionCooldown { connection, until, level, reason: d.reason })
            }
            Applied::Terminal(state) => {
                let connection = self.conns.id_at(place);
                self.push(Event::ConnectionTerminal { connection, state })
            }
            Applied::Unchanged => {}
        }
        if self.outbox.is_some() && applied != Applied::Unchanged {
            let connection = self.conns.id_at(place);
            self.collect(change::Pending::Connection { connection, reason: d.reason });
        }
        self.maybe_lock(now, c, place, d);
    }

    fn intern(&mut self, id: &str) -> Arc<str> {
        intern_in(&mut self.ids, id)
    }

    fn connection_mut(&mut self, c: &Candidate<'_>) -> &mut ConnectionState {
        self.conns.of_mut(c)
    }

    /// The breaker state of a provider at `now` (closed if never seen).
    pub fn breaker_state(&self, now: Instant, provider: &str) -> BreakerState {
        self.breakers.get(provider).map_or(BreakerState::Closed, |b| b.state(now))
    }
}

/// `id` from `ids`, added on first use (up to 100 000 ids; past that a fresh copy).
fn intern_in(ids: &mut FxHashSet<Arc<str>>, id: &str) -> Arc<str> {
    if let Some(a) = ids.get(id) {
        return Arc::clone(a);
    }
    let a: Arc<str> = Arc::from(id);
    if ids.len() < 100_000 {
        ids.insert(Arc::clone(&a));
    }
    a
}

mod account;
pub(crate) mod candidate;
mod change;
mod derived;
mod event;
mod lanes;
mod lockouts;
mod memory;
mod operator;
mod outcome;
mod route;
mod shared;
mod slots;
mod told;
mod turn;
mod usage;

pub use candidate::Slot;

pub use change::SharedChange;

use memory::Usage;

#[cfg(test)]
#[path = "tests.rs"]
mod tests;

#[cfg(test)]
#[path = "routing_tests.rs"]
mod routing_tests;

#[cfg(test)]
#[path = "turn_tests.rs"]
mod turn_tests;
