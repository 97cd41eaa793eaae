//! The engine: every resilience layer composed for routing, as one synchronous value.
//!
//! The shell asks it to pick a connection among candidates, dispatches, and reports the
//! outcome; the engine classifies, updates the breaker, the connection, the lockouts and the
//! provider cooldown tracker, and says what the client should see. Production and simulation
//! call the same methods.

use crate::breaker::BreakerConfig;
use crate::breaker::{Admission, BreakerRegistry, BreakerState, BreakerTransition, Outcome, Ticket};
use crate::classify::CooldownProfile;
use crate::classify::{ConnectionEffect, Decision, ErrorInput, classify, classify_transport};
use crate::connection::{Applied, Availability, ConnectionSnapshot, ConnectionState};
use crate::lockout::LockoutConfig;
use crate::lockout::{LockRequest, ModelLockouts, rule_lock_scope};
use crate::provider_cooldown::ProviderCooldownConfig;
use crate::provider_cooldown::ProviderCooldownTracker;
use crate::quota::QuotaReport;
use crate::settings::ResilienceSettings;
use crate::strategy::{Ask, Item, Memory, rank, stable_hash};
use crate::tried::Tried;
use crate::types::{ProviderClass, Reason, TerminalState};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use crate::exclusion::{Exclusion, ExclusionReason, Refusal, Selection, refusal};

/// One routable (provider, connection, model) target.
#[derive(Debug, Clone, Copy)]
pub struct Candidate<'a> {
    /// Provider id.
    pub provider: &'a str,
    /// Provider class.
    pub class: ProviderClass,
    /// Connection id.
    pub connection: &'a str,
    /// Model as sent upstream.
    pub model: &'a str,
    /// The model's quota family, if the provider declares one.
    pub family: Option<&'a str>,
    /// What routing knows of its target and connection.
    pub traits: Traits,
}

impl<'a> Candidate<'a> {
    /// A candidate with default traits (target 0, weight 1, priority among connections).
    pub fn new(provider: &'a str, class: ProviderClass, connection: &'a str, model: &'a str) -> Self {
        Candidate { provider, class, connection, model, family: None, traits: Traits::default() }
    }
}

/// What routing knows of a candidate beyond its identity: the combo target it belongs to and
/// that target's declared traits, and the provider's way of choosing among its connections.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Traits {
    /// Position of the combo target it came from; candidates of one target are that target's
    /// connections.
    pub target: usize,
    /// The target's weight (`weighted`).
    pub weight: u32,
    /// The target's declared cost.
    pub cost: Option<f64>,
    /// The target's declared context window in tokens.
    pub context_window: Option<u64>,
    /// How the provider chooses among its connections.
    pub connection_strategy: Strategy,
    /// The connection's weight among the provider's connections.
    pub connection_weight: u32,
    /// The connection's `max_concurrent` (M7 quota-share gate), if any.
    pub max_concurrent: Option<u32>,
}

impl Default for Traits {
    fn default() -> Self {
        Traits {
            target: 0,
            weight: 1,
            cost: None,
            context_window: None,
            connection_strategy: Strategy::Priority,
            connection_weight: 1,
            max_concurrent: None,
        }
    }
}

pub use crate::strategy::Strategy;

/// How one request routes: the strategy among its targets, the key its round-robin cursor,
/// deck and last-known-good are kept under (a combo or model name), and what strategies read
/// of the request.
#[derive(Debug, Clone, Copy)]
pub struct Route<'a> {
    /// Strategy among targets.
    pub strategy: Strategy,
    /// Cursor key.
    pub key: &'a str,
    /// The request's traits.
    pub ask: Ask,
}

impl<'a> Route<'a> {
    /// A route with no request traits.
    pub fn new(strategy: Strategy, key: &'a str) -> Self {
        Route { strategy, key, ask: Ask::default() }
    }
}

/// How an attempt ended.
#[derive(Debug, Clone, Copy)]
pub enum AttemptOutcome<'a> {
    /// The upstream answered well (for a stream: it finished).
    Success,
    /// The upstream answered with an error status.
    Upstream {
        /// Status.
        status: u16,
        /// Headers.
        headers: &'a [(&'a str, &'a str)],
        /// Body text.
        body: &'a str,
    },
    /// The upstream could not be reached or the connection broke before a response.
    Transport,
    /// The stream was aborted by the watchdog: the provider was too slow (provider-level).
    TooSlow,
    /// The client went away, or a local limit refused it: says nothing about the upstream.
    Neutral,
}

/// A state change anywhere in the engine, as the shell logs it and the simulation checks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A breaker moved.
    Breaker(BreakerTransition),
    /// A connection started a cooldown.
    ConnectionCooldown {
        /// Connection id.
        connection: Arc<str>,
        /// Its end.
        until: Instant,
        /// Stored backoff level.
        level: u32,
        /// Why.
        reason: Reason,
    },
    /// A connection became terminal.
    ConnectionTerminal {
        /// Connection id.
        connection: Arc<str>,
        /// Which state.
        state: TerminalState,
    },
    /// A connection recovered (success after errors, or operator reset).
    ConnectionRecovered {
        /// Connection id.
        connection: Arc<str>,
    },
    /// A model lockout was recorded.
    Lockout {
        /// Provider.
        provider: Arc<str>,
        /// Connection.
        connection: Arc<str>,
        /// Model.
        model: Arc<str>,
        /// Its length.
        cooldown: Duration,
    },
}

/// Configs derived from the settings once, not per decision.
#[derive(Debug, Clone)]
struct Derived {
    breaker: [BreakerConfig; 3],
    profile: [CooldownProfile; 3],
    lockout: LockoutConfig,
    provider_cooldown: ProviderCooldownConfig,
}

impl Derived {
    fn new(s: &ResilienceSettings) -> Self {
        let classes = [ProviderClass::ApiKey, ProviderClass::OAuth, ProviderClass::Local];
        Derived {
            breaker: classes.map(|c| s.breaker_config(c)),
            profile: classes.map(|c| s.cooldown_profile(c)),
            lockout: s.lockout_config(),
            provider_cooldown: s.provider_cooldown_config(),
        }
    }

    fn index(class: ProviderClass) -> usize {
        match class {
            ProviderClass::ApiKey => 0,
            ProviderClass::OAuth => 1,
            ProviderClass::Local => 2,
        }
    }

    fn breaker(&self, class: ProviderClass) -> &BreakerConfig {
        &self.breaker[Self::index(class)]
    }

    fn profile(&self, class: ProviderClass) -> &CooldownProfile {
        &self.profile[Self::index(class)]
    }
}

/// The engine.
#[derive(Debug, Clone)]
pub struct Engine {
    settings: ResilienceSettings,
    derived: Derived,
    breakers: BreakerRegistry,
    connections: BTreeMap<String, ConnectionState>,
    lockouts: ModelLockouts,
    tracker: ProviderCooldownTracker,
    memory: Memory,
    usage: Usage,
    rng: ChaCha8Rng,
    events: VecDeque<Event>,
    /// Interned ids, so that events name providers, connections and models without
    /// allocating on every failure.
    ids: BTreeMap<String, Arc<str>>,
}

/// Cap on undrained events.
const EVENT_CAP: usize = 4096;

/// What routing remembers of traffic: requests in flight and dispatched per connection, the
/// last good target per route key, smoothed latency per provider, reported quotas per
/// connection and learned tool limits per provider/model. Bounded: each map is cleared when it
/// reaches [`USAGE_CAP`] keys (ids come from config, so this only guards against misuse).
#[derive(Debug, Clone, Default)]
struct Usage {
    in_flight: BTreeMap<String, u32>,
    dispatched: BTreeMap<String, u64>,
    last_good: BTreeMap<String, (String, String)>,
    latency_ms: BTreeMap<String, f64>,
    quotas: BTreeMap<String, QuotaReport>,
    tool_limits: BTreeMap<(String, String), u32>,
}

const USAGE_CAP: usize = 10_000;

fn bounded_insert<K: Ord, V>(map: &mut BTreeMap<K, V>, key: K, value: V) {
    if map.len() >= USAGE_CAP {
        map.clear();
    }
    map.insert(key, value);
}

/// Smoothing of the latency average (weight of the newest sample).
const LATENCY_ALPHA: f64 = 0.2;

impl Engine {
    /// An engine with validated settings and a seed for its RNG.
    pub fn new(settings: ResilienceSettings, seed: u64) -> Self {
        Engine {
            derived: Derived::new(&settings),
            settings,
            breakers: BreakerRegistry::default(),
            connections: BTreeMap::new(),
            lockouts: ModelLockouts::new(),
            tracker: ProviderCooldownTracker::new(),
            memory: Memory::default(),
            usage: Usage::default(),
            rng: ChaCha8Rng::seed_from_u64(seed),
            events: VecDeque::new(),
            ids: BTreeMap::new(),
        }
    }

    /// The settings.
    pub fn settings(&self) -> &ResilienceSettings {
        &self.settings
    }

    /// Replaces the settings (already validated); state is kept.
    pub fn set_settings(&mut self, settings: ResilienceSettings) {
        self.derived = Derived::new(&settings);
        self.settings = settings;
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
        self.connections.get(id).cloned().unwrap_or_default()
    }

    /// Every connection seen, by id.
    pub fn connections(&self) -> impl Iterator<Item = (&str, &ConnectionState)> {
        self.connections.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Restores a persisted connection state.
    pub fn restore_connection(&mut self, id: &str, snap: &ConnectionSnapshot, now: Instant) {
        self.connections.insert(id.to_owned(), ConnectionState::restore(snap, now));
    }

    /// Operator reset of one connection.
    pub fn reset_connection(&mut self, id: &str) {
        if self.connections.remove(id).is_some() {
            {
                let connection = self.intern(id);
                self.push(Event::ConnectionRecovered { connection });
            }
        }
    }

    /// The model lockouts.
    pub fn lockouts(&self) -> &ModelLockouts {
        &self.lockouts
    }

    /// The model lockouts, mutably (clear).
    pub fn lockouts_mut(&mut self) -> &mut ModelLockouts {
        &mut self.lockouts
    }

    /// The next event, oldest first.
    pub fn poll_event(&mut self) -> Option<Event> {
        if let Some(t) = self.breakers.poll_event() {
            return Some(Event::Breaker(t));
        }
        self.events.pop_front()
    }

    /// The earliest instant at which some state changes by itself.
    pub fn poll_timeout(&self, now: Instant) -> Option<Instant> {
        let conn = self.connections.values().filter_map(|c| c.rate_limited_until(now)).min();
        [self.breakers.poll_timeout(), conn, self.lockouts.poll_timeout(now)].into_iter().flatten().min()
    }

    /// Operator reset: every breaker closed, every lockout cleared. Returns the breaker count.
    pub fn reset_all(&mut self, now: Instant) -> usize {
        self.lockouts.clear_all();
        self.breakers.reset_all(now)
    }

    /// Drops expired bookkeeping (lockouts past their window, idle tracker records).
    pub fn sweep(&mut self, now: Instant) {
        self.lockouts.sweep(now, &self.derived.lockout);
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
        if let Some(b) = self.breakers.get(c.provider)
            && !b.can_execute(now)
        {
            return Some((ExclusionReason::CircuitOpen, b.retry_after(now)));
        }
        self.account_exclusion(now, c)
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
        let pc = &self.derived.provider_cooldown;
        if pc.enabled {
            let r = self.tracker.remaining(now, pc, c.class, c.provider, None).max(self.tracker.remaining(
                now,
                pc,
                c.class,
                c.provider,
                Some(c.connection),
            ));
            if !r.is_zero() {
                return Some((ExclusionReason::ProviderCooldown, r));
            }
        }
        if let Some(state) = self.connections.get(c.connection) {
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

    /// Picks one eligible candidate by the route's strategies, admits it through its
    /// provider's breaker and marks the connection selected. `tried` says what this request
    /// already tried (those candidates, and connections a connection-level failure exhausted,
    /// are skipped); once its attempts reach `[resilience.routing] max_attempts` nothing more
    /// is picked.
    pub fn select(
        &mut self,
        now: Instant,
        candidates: &[Candidate<'_>],
        route: &Route<'_>,
        tried: &Tried,
    ) -> Selection {
        if i64::from(tried.attempts()) >= self.settings.routing.max_attempts {
            return Selection::BudgetSpent { attempts: tried.attempts() };
        }
        let mut excluded = Vec::new();
        let mut eligible = Vec::new();
        for (i, c) in candidates.iter().enumerate() {
            if tried.was_tried(i) || tried.is_exhausted(c.connection) {
                excluded.push(Exclusion { index: i, reason: ExclusionReason::Skipped, retry_after: Duration::ZERO });
                continue;
            }
            if route.ask.tools > 0
                && let Some(limit) = self.tool_limit(c.provider, c.model)
                && route.ask.tools > limit
            {
                excluded.push(Exclusion { index: i, reason: ExclusionReason::ToolLimit, retry_after: Duration::ZERO });
                continue;
            }
            match self.exclusion(now, c) {
                Some((reason, retry_after)) => excluded.push(Exclusion { index: i, reason, retry_after }),
                None => eligible.push(i),
            }
        }
        // Try eligible candidates in strategy order; the breaker may still refuse (a probe
        // slot was taken by the previous candidate of the same provider).
        let order = self.order(now, candidates, &eligible, route);
        for i in order {
            let c = &candidates[i];
            match self.breakers.get_or_insert(c.provider, self.derived.breaker(c.class), now).try_admit(now) {
                Admission::Admit(ticket) | Admission::Probe(ticket) => {
                    self.connection_mut(c.connection).on_selected(now);
                    self.dispatched(c.connection);
                    return Selection::Pick { index: i, ticket };
                }
                Admission::Reject { retry_after } => {
                    excluded.push(Exclusion { index: i, reason: ExclusionReason::CircuitOpen, retry_after })
                }
            }
        }
        excluded.sort_by_key(|e| e.index);
        Selection::NoneEligible(excluded)
    }

    /// The order in which `eligible` candidates are tried: targets by the route's strategy,
    /// then each target's connections by its provider's connection strategy, a connection
    /// saturated at its `max_concurrent` behind the others (the M7 gate only deprioritises).
    pub fn order(
        &mut self,
        now: Instant,
        candidates: &[Candidate<'_>],
        eligible: &[usize],
        route: &Route<'_>,
    ) -> Vec<usize> {
        if eligible.len() <= 1 {
            return eligible.to_vec();
        }
        // Targets, in first-seen order, each with its eligible candidates.
        let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
        for &i in eligible {
            let t = candidates[i].traits.target;
            match groups.iter_mut().find(|(g, _)| *g == t) {
                Some((_, members)) => members.push(i),
                None => groups.push((t, vec![i])),
            }
        }
        let last_good = self.usage.last_good.get(route.key);
        let target_items: Vec<Item> = groups
            .iter()
            .map(|(t, members)| {
                let c = &candidates[members[0]];
                let quota = members
                    .iter()
                    .filter_map(|&m| self.usage.quotas.get(candidates[m].connection).map(|q| q.at(now)))
                    .max_by(|a, b| a.remaining.unwrap_or(0.5).total_cmp(&b.remaining.unwrap_or(0.5)))
                    .unwrap_or_default();
                Item {
                    index: *t,
                    id: target_id(c),
                    weight: c.traits.weight,
                    cost: c.traits.cost,
                    context_window: c.traits.context_window,
                    load: members.iter().map(|&m| self.in_flight(candidates[m].connection)).sum(),
                    used: members
                        .iter()
                        .map(|&m| self.usage.dispatched.get(candidates[m].connection).copied().unwrap_or(0))
                        .sum(),
                    quota,
                    health: self.health(now, c.provider),
                    latency_ms: self.usage.latency_ms.get(c.provider).copied(),
                    last_good: last_good.is_some_and(|(p, m)| p == c.provider && m == c.model),
                }
            })
            .collect();
        let target_order = rank(route.strategy, &target_items, &route.ask, route.key, &mut self.memory, &mut self.rng);
        let mut out = Vec::with_capacity(eligible.len());
        for g in target_order {
            let members = &groups[g].1;
            if members.len() == 1 {
                out.push(members[0]);
                continue;
            }
            let first = &candidates[members[0]];
            let items: Vec<Item> = members
                .iter()
                .map(|&m| {
                    let c = &candidates[m];
                    Item {
                        index: m,
                        id: stable_hash(c.connection.as_bytes()),
                        weight: c.traits.connection_weight,
                        load: self.in_flight(c.connection),
                        used: self.usage.dispatched.get(c.connection).copied().unwrap_or(0),
                        quota: self.usage.quotas.get(c.connection).map(|q| q.at(now)).unwrap_or_default(),
                        ..Item::default()
                    }
                })
                .collect();
            let key = format!("{}#{}", route.key, first.provider);
            let mut within: Vec<usize> =
                rank(first.traits.connection_strategy, &items, &route.ask, &key, &mut self.memory, &mut self.rng)
                    .into_iter()
                    .map(|p| members[p])
                    .collect();
            // M7: a connection at its max_concurrent goes behind those with room (stable).
            within.sort_by_key(|&m| {
                let c = &candidates[m];
                c.traits.max_concurrent.is_some_and(|max| self.in_flight(c.connection) >= max)
            });
            out.extend(within);
        }
        out
    }

    fn health(&self, now: Instant, provider: &str) -> f64 {
        match self.breaker_state(now, provider) {
            BreakerState::Closed => 1.0,
            BreakerState::Degraded => 0.7,
            BreakerState::HalfOpen => 0.5,
            BreakerState::Open => 0.0,
        }
    }

    /// Requests in flight on a connection.
    pub fn in_flight(&self, connection: &str) -> u32 {
        self.usage.in_flight.get(connection).copied().unwrap_or(0)
    }

    fn dispatched(&mut self, connection: &str) {
        match self.usage.in_flight.get_mut(connection) {
            Some(n) => *n = n.saturating_add(1),
            None => bounded_insert(&mut self.usage.in_flight, connection.to_owned(), 1),
        }
        match self.usage.dispatched.get_mut(connection) {
            Some(n) => *n = n.saturating_add(1),
            None => bounded_insert(&mut self.usage.dispatched, connection.to_owned(), 1),
        }
    }

    fn finished(&mut self, connection: &str) {
        if let Some(n) = self.usage.in_flight.get_mut(connection) {
            *n = n.saturating_sub(1);
        }
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
        self.finished(c.connection);
        let bcfg = self.derived.breaker(c.class);
        match outcome {
            AttemptOutcome::Success => {
                self.breakers.get_or_insert(c.provider, bcfg, now).handle_outcome(now, ticket, Outcome::Success);
                let conn = self.connection_mut(c.connection);
                let had_errors = *conn != ConnectionState::default();
                conn.record_success();
                if had_errors {
                    let connection = self.intern(c.connection);
                    self.push(Event::ConnectionRecovered { connection });
                }
                self.lockouts.decay(c.provider, c.connection, c.model, c.family);
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
            AttemptOutcome::Upstream { status, headers, body } => {
                let level = self.connections.get(c.connection).map_or(0, |s| s.level_for(now));
                let input = ErrorInput {
                    provider: profile,
                    class: c.class,
                    status,
                    headers,
                    body,
                    backoff_level: level,
                    wall_now_ms,
                    until_daily_reset: None,
                };
                let d = classify(&input, self.derived.profile(c.class), &self.settings.error_rules);
                self.apply(now, c, ticket, &d, body, same_provider_next, disable_cooling);
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
        let pc = &self.derived.provider_cooldown;
        if pc.enabled {
            if d.trips_breaker {
                self.tracker.record_failure(now, pc, c.class, c.provider, None);
            } else if d.connection != ConnectionEffect::None {
                self.tracker.record_failure(now, pc, c.class, c.provider, Some(c.connection));
            }
        }
        let applied = self.connection_mut(c.connection).record_failure(now, d, message, disable_cooling);
        match applied {
            Applied::Cooldown { until, level } => {
                let connection = self.intern(c.connection);
                self.push(Event::ConnectionCooldown { connection, until, level, reason: d.reason })
            }
            Applied::Terminal(state) => {
                let connection = self.intern(c.connection);
                self.push(Event::ConnectionTerminal { connection, state })
            }
            Applied::Unchanged => {}
        }
        self.maybe_lock(now, c, d);
    }

    fn maybe_lock(&mut self, now: Instant, c: &Candidate<'_>, d: &Decision) {
        let lc = &self.derived.lockout;
        let rule_scope = rule_lock_scope(d.lock.scope);
        // A model-scoped rule always locks (it replaces a connection cooldown); otherwise the
        // settings gate it by status.
        let gated = lc.enabled && lc.error_codes.contains(&d.status);
        if !(gated || rule_scope.is_some()) {
            return;
        }
        // An upstream hint sets the lockout's length only when it is longer than the base
        // cooldown (a shorter one would shorten the lock); a rule's own cooldown always applies.
        let exact = d.lock.cooldown.filter(|x| *x > lc.base_cooldown || rule_scope.is_some());
        let req = LockRequest {
            provider: c.provider,
            connection: c.connection,
            model: c.model,
            family: c.family,
            reason: d.reason,
            status: d.status,
            scope: rule_scope,
            exact_cooldown: exact,
            exact_is_upstream_reset: d.lock.upstream_reset && exact.is_some(),
        };
        let cooldown = self.lockouts.record_failure(now, lc, &req);
        let (provider, connection, model) = (self.intern(c.provider), self.intern(c.connection), self.intern(c.model));
        self.push(Event::Lockout { provider, connection, model, cooldown });
    }

    fn intern(&mut self, id: &str) -> Arc<str> {
        if let Some(a) = self.ids.get(id) {
            return Arc::clone(a);
        }
        let a: Arc<str> = Arc::from(id);
        if self.ids.len() < 100_000 {
            self.ids.insert(id.to_owned(), Arc::clone(&a));
        }
        a
    }

    fn connection_mut(&mut self, id: &str) -> &mut ConnectionState {
        if !self.connections.contains_key(id) {
            self.connections.insert(id.to_owned(), ConnectionState::default());
        }
        self.connections.get_mut(id).unwrap_or_else(|| unreachable!("inserted above"))
    }

    /// M8: how long a combo request that ended on `reason` should wait before dispatching its
    /// whole set again, given the soonest moment a target is eligible (`wait`), the waits
    /// already taken and the time spent waiting. Never for quota, auth or not-found reasons;
    /// only within `max_wait_ms`, `max_attempts` and `budget_ms`. The wait includes a 50 ms
    /// margin past the deadline.
    pub fn cooldown_wait(&self, reason: Reason, wait: Duration, waits: u32, waited: Duration) -> Option<Duration> {
        let cw = &self.settings.combo_cooldown_wait;
        let waitable = matches!(
            reason,
            Reason::RateLimitExceeded | Reason::ServerError | Reason::ModelCapacity | Reason::Transport
        );
        if !cw.enabled || cw.max_wait_ms <= 0 || cw.max_attempts <= 0 || !waitable || wait.is_zero() {
            return None;
        }
        let wait = wait + Duration::from_millis(50);
        let max_wait = Duration::from_millis(cw.max_wait_ms as u64);
        let budget = Duration::from_millis(cw.budget_ms.max(0) as u64);
        (wait <= max_wait && i64::from(waits) < cw.max_attempts && budget.saturating_sub(waited) >= wait)
            .then_some(wait)
    }

    /// M13: after `failing` got a 429 classified quota_exhausted or rate_limit_exceeded (see
    /// `decision`), cool every sibling connection (same provider, same egress IP, given by the
    /// shell with its `disable_cooling`) until the failing connection's own deadline. Returns
    /// the siblings that were cooled.
    pub fn cool_siblings(
        &mut self,
        now: Instant,
        failing: &str,
        decision: &Decision,
        siblings: &[(&str, bool)],
    ) -> Vec<String> {
        let ip_bucketed = decision.upstream_status == 429
            && matches!(decision.reason, Reason::QuotaExhausted | Reason::RateLimitExceeded);
        let Some(until) = self.connections.get(failing).and_then(|s| s.rate_limited_until(now)) else {
            return Vec::new();
        };
        if !ip_bucketed {
            return Vec::new();
        }
        let mut cooled = Vec::new();
        for (id, disable_cooling) in siblings {
            if *id == failing {
                continue;
            }
            if let Applied::Cooldown { until, level } =
                self.connection_mut(id).share_cooldown(now, until, decision.reason, *disable_cooling)
            {
                let connection = self.intern(id);
                self.push(Event::ConnectionCooldown { connection, until, level, reason: decision.reason });
                cooled.push((*id).to_owned());
            }
        }
        cooled
    }

    /// M8 at the end of a combo's set (nothing left to try): the soonest any candidate becomes
    /// eligible again by a timer, and why it is excluded, decide whether the request waits
    /// and dispatches the set again. Both the request's last failure (`last`) and the
    /// soonest exclusion's own reason must be waitable, so a quota, auth or not-found
    /// cooldown is never waited for.
    pub fn set_wait(
        &self,
        now: Instant,
        candidates: &[Candidate<'_>],
        last: Option<Reason>,
        waits: u32,
        waited: Duration,
    ) -> Option<Duration> {
        let mut soonest: Option<(Duration, Reason)> = None;
        for c in candidates {
            let Some((why, left)) = self.exclusion(now, c) else { continue };
            if !why.is_timer() || left.is_zero() {
                continue;
            }
            let reason = match why {
                ExclusionReason::Unavailable => {
                    self.connections.get(c.connection).and_then(|s| s.last_error_type()).unwrap_or(Reason::Unknown)
                }
                ExclusionReason::ModelLockout => self
                    .lockouts
                    .remaining(now, c.provider, c.connection, c.model, c.family)
                    .map_or(Reason::Unknown, |(_, r)| r),
                _ => Reason::ServerError,
            };
            if soonest.is_none_or(|(d, _)| left < d) {
                soonest = Some((left, reason));
            }
        }
        let (wait, reason) = soonest?;
        if let Some(l) = last {
            self.cooldown_wait(l, wait, waits, waited)?;
        }
        self.cooldown_wait(reason, wait, waits, waited)
    }

    /// The breaker state of a provider at `now` (closed if never seen).
    pub fn breaker_state(&self, now: Instant, provider: &str) -> BreakerState {
        self.breakers.get(provider).map_or(BreakerState::Closed, |b| b.state(now))
    }
}

/// A target's identity for decks and rendezvous hashing: its provider and model.
fn target_id(c: &Candidate<'_>) -> u64 {
    stable_hash(c.provider.as_bytes()) ^ stable_hash(c.model.as_bytes()).rotate_left(17)
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "engine_routing_tests.rs"]
mod routing_tests;
