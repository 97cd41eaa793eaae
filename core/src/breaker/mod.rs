//! M1: the provider circuit breaker.
//!
//! Four states. `Closed` and `Degraded` admit everything; `Open` admits nothing until its reset
//! timeout passes; `HalfOpen` admits a bounded number of probes. Recovery is lazy: there is no
//! timer, and reading the state after the reset timeout yields `HalfOpen`. Time always comes in
//! as `now`.

pub mod registry;
mod replica;
#[cfg(test)]
mod tests;

use crate::types::scaled;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

/// The four breaker states (`Closed | Degraded | Open | HalfOpen`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum BreakerState {
    /// Normal operation.
    Closed,
    /// Traffic flows, but failures have passed the degradation threshold.
    Degraded,
    /// Blocked: routing skips the provider until the reset timeout passes.
    Open,
    /// The reset timeout passed: a bounded number of probes may run.
    HalfOpen,
}

impl BreakerState {
    /// The name used in the health JSON (`CLOSED`, `DEGRADED`, `OPEN`, `HALF_OPEN`).
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "CLOSED",
            BreakerState::Degraded => "DEGRADED",
            BreakerState::Open => "OPEN",
            BreakerState::HalfOpen => "HALF_OPEN",
        }
    }
}

/// Why a breaker changed state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransitionReason {
    /// Failures reached the degradation threshold.
    DegradationThreshold,
    /// Failures reached the failure threshold.
    FailureThreshold,
    /// The reset timeout elapsed (observed lazily).
    ResetTimeoutElapsed,
    /// A probe succeeded.
    ProbeSucceeded,
    /// A probe failed; `cycle` is the number of consecutive failed probe cycles.
    ProbeFailed {
        /// Consecutive failed-probe cycles, counting this one.
        cycle: u32,
    },
    /// Successes brought the failure count back to the degradation threshold.
    Recovered,
    /// An operator reset the breaker.
    ManualReset,
    /// Another replica's state moved it: its breaker opened or closed, or its failure was the
    /// one that reached a threshold here (shared state).
    Replica,
}

/// A state change, as it leaves the breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerEvent {
    /// State before.
    pub from: BreakerState,
    /// State after.
    pub to: BreakerState,
    /// Why.
    pub reason: TransitionReason,
    /// When an `Open` breaker will admit a probe (only for transitions to `Open`).
    pub open_until: Option<Instant>,
}

/// Thresholds and timeouts of one breaker (one provider class's values).
#[derive(Debug, Clone, PartialEq)]
pub struct BreakerConfig {
    /// Failures that open the breaker.
    pub failure_threshold: u32,
    /// Failures that mark it degraded (≤ `failure_threshold`).
    pub degradation_threshold: u32,
    /// How long it stays open before allowing a probe.
    pub reset_timeout: Duration,
    /// Probes allowed at once while half-open.
    pub half_open_requests: u32,
    /// Cap on the reset-timeout multiplier for repeated failed probes.
    pub max_backoff_multiplier: u32,
    /// Failed probe cycles tolerated before the reset timeout starts to grow.
    pub backoff_escalation_count: u32,
    /// Failures of one connection within this window count once.
    pub dedupe_window: Duration,
}

impl BreakerConfig {
    /// The reset timeout after `cycles` consecutive failed probes:
    /// `reset × min(2^(cycles − count), multiplier)` once past the escalation count.
    pub fn effective_reset_timeout(&self, cycles: u32) -> Duration {
        if cycles <= self.backoff_escalation_count {
            return self.reset_timeout;
        }
        let grown = scaled(self.reset_timeout, cycles - self.backoff_escalation_count);
        let cap = self.reset_timeout.saturating_mul(self.max_backoff_multiplier.max(1));
        grown.min(cap)
    }
}

/// What `try_admit` decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Go ahead; report the outcome with this ticket.
    Admit(Ticket),
    /// Go ahead as the half-open probe; report the outcome with this ticket.
    Probe(Ticket),
    /// Do not dispatch; the breaker is open (or the probe slots are taken).
    Reject {
        /// Time until the breaker may admit again (zero when only the probe slot is busy).
        retry_after: Duration,
    },
}

impl Admission {
    /// The ticket, if admitted (tests).
    #[cfg(test)]
    pub fn ticket(&self) -> Option<Ticket> {
        match *self {
            Admission::Admit(t) | Admission::Probe(t) => Some(t),
            Admission::Reject { .. } => None,
        }
    }
}

/// A plain token proving admission; the shell wraps it in a guard so that it is always returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    probe: bool,
    generation: u64,
}

impl Ticket {
    /// Whether this ticket is a half-open probe.
    pub fn is_probe(&self) -> bool {
        self.probe
    }
}

/// How an admitted attempt ended, as far as the provider's health is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome<'a> {
    /// The provider answered well.
    Success,
    /// A provider-level failure (408, 5xx, transport), optionally attributed to a connection for
    /// dedupe.
    Failure {
        /// The connection that saw it, if any.
        connection: Option<&'a str>,
    },
    /// Says nothing about provider health (client abort, account-level error, local queue
    /// error, request-scoped error). Returns a probe slot.
    Ignored,
}

/// A breaker's persisted form. Times are relative to the instant of the snapshot so that the
/// shell can store them against its own wall clock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BreakerSnapshot {
    /// State at the snapshot (after lazy refresh).
    pub state: BreakerState,
    /// Failure count.
    pub failure_count: u32,
    /// Consecutive failed-probe cycles.
    pub open_cycle_count: u32,
    /// Remaining open time in milliseconds (only for `Open`).
    pub open_remaining_ms: u64,
}

/// Upper bound on remembered per-connection dedupe entries.
const DEDUPE_CAP: usize = 10_000;
/// Upper bound on undrained events; older ones are dropped first.
const EVENT_CAP: usize = 64;

/// One provider's circuit breaker.
#[derive(Debug, Clone)]
pub struct Breaker {
    config: BreakerConfig,
    state: BreakerState,
    failure_count: u32,
    open_cycle_count: u32,
    open_until: Option<Instant>,
    last_failure_at: Option<Instant>,
    probes_in_flight: u32,
    generation: u64,
    dedupe: BTreeMap<String, Instant>,
    events: VecDeque<BreakerEvent>,
}

impl Breaker {
    /// A closed breaker.
    pub fn new(config: &BreakerConfig, _now: Instant) -> Self {
        Breaker {
            config: config.clone(),
            state: BreakerState::Closed,
            failure_count: 0,
            open_cycle_count: 0,
            open_until: None,
            last_failure_at: None,
            probes_in_flight: 0,
            generation: 0,
            dedupe: BTreeMap::new(),
            events: VecDeque::new(),
        }
    }

    /// Rebuilds a breaker from its snapshot at `now`.
    pub fn restore(config: &BreakerConfig, snap: &BreakerSnapshot, now: Instant) -> Self {
        let mut b = Breaker::new(config, now);
        b.failure_count = snap.failure_count;
        b.open_cycle_count = snap.open_cycle_count;
        b.state = snap.state;
        if snap.state == BreakerState::Open {
            b.open_until = Some(crate::types::after(now, snap.open_remaining_ms));
        }
        b.refresh(now);
        b
    }

    /// The persisted form at `now`.
    pub fn snapshot(&self, now: Instant) -> BreakerSnapshot {
        let state = self.state(now);
        BreakerSnapshot {
            state,
            failure_count: self.failure_count,
            open_cycle_count: self.open_cycle_count,
            open_remaining_ms: match state {
                BreakerState::Open => millis(self.retry_after(now)),
                _ => 0,
            },
        }
    }

    /// The current config.
    pub fn config(&self) -> &BreakerConfig {
        &self.config
    }

    /// Replaces the config (settings changed). An open breaker keeps its deadline.
    pub fn set_config(&mut self, config: &BreakerConfig) {
        self.config = config.clone();
    }

    /// The state at `now`. Lazy: an open breaker whose reset timeout has elapsed reads as
    /// `HalfOpen` even before anyone admits through it.
    pub fn state(&self, now: Instant) -> BreakerState {
        match (self.state, self.open_until) {
            (BreakerState::Open, Some(until)) if now >= until => BreakerState::HalfOpen,
            (s, _) => s,
        }
    }

    /// Whether a request may be dispatched now (without taking a probe slot).
    pub fn can_execute(&self, now: Instant) -> bool {
        match self.state(now) {
            BreakerState::Closed | BreakerState::Degraded => true,
            BreakerState::Open => false,
            BreakerState::HalfOpen => {
                // A breaker whose timeout just elapsed has no probe in flight yet.
                self.state == BreakerState::Open || self.probes_in_flight < self.config.half_open_requests
            }
        }
    }

    /// Time until the breaker admits again; zero when it admits now.
    pub fn retry_after(&self, now: Instant) -> Duration {
        match (self.state(now), self.open_until) {
            (BreakerState::Open, Some(until)) => until.saturating_duration_since(now),
            _ => Duration::ZERO,
        }
    }

    /// The failure count (for the health JSON).
    pub fn failure_count(&self) -> u32 {
        self.failure_count
    }

    /// Consecutive failed-probe cycles (shared with other replicas; the snapshot carries them).
    pub fn open_cycle_count(&self) -> u32 {
        self.open_cycle_count
    }

    /// Probes currently running.
    pub fn probes_in_flight(&self) -> u32 {
        self.probes_in_flight
    }

    /// When the last counted failure happened (tests).
    #[cfg(test)]
    pub fn last_failure_at(&self) -> Option<Instant> {
        self.last_failure_at
    }

    /// The earliest instant at which the state changes by itself. Test-only: recovery is lazy,
    /// and the gateway never sleeps on a breaker.
    #[cfg(test)]
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            BreakerState::Open => self.open_until,
            _ => None,
        }
    }

    /// The next state change, oldest first.
    pub fn poll_event(&mut self) -> Option<BreakerEvent> {
        self.events.pop_front()
    }

    /// Asks to dispatch one request.
    pub fn try_admit(&mut self, now: Instant) -> Admission {
        self.refresh(now);
        match self.state {
            BreakerState::Closed | BreakerState::Degraded => {
                Admission::Admit(Ticket { probe: false, generation: self.generation })
            }
            BreakerState::Open => Admission::Reject { retry_after: self.retry_after(now) },
            BreakerState::HalfOpen => {
                if self.probes_in_flight < self.config.half_open_requests {
                    self.probes_in_flight += 1;
                    Admission::Probe(Ticket { probe: true, generation: self.generation })
                } else {
                    Admission::Reject { retry_after: Duration::ZERO }
                }
            }
        }
    }

    /// Reports how an admitted attempt ended.
    pub fn handle_outcome(&mut self, now: Instant, ticket: Ticket, outcome: Outcome<'_>) {
        self.refresh(now);
        if ticket.probe {
            self.handle_probe_outcome(now, ticket, outcome);
            return;
        }
        // Outcomes of ordinary tickets only matter while traffic flows; while Open they are
        // ignored so that a late failure never extends the cooldown, and while HalfOpen only
        // the probe decides.
        if !matches!(self.state, BreakerState::Closed | BreakerState::Degraded) {
            return;
        }
        match outcome {
            Outcome::Success => self.on_success_flowing(),
            Outcome::Failure { connection } => self.on_failure_flowing(now, connection, false),
            Outcome::Ignored => {}
        }
    }

    /// Manual reset: back to `Closed` with every counter zeroed.
    pub fn reset(&mut self, _now: Instant) {
        let from = self.state;
        self.failure_count = 0;
        self.open_cycle_count = 0;
        self.open_until = None;
        self.last_failure_at = None;
        self.probes_in_flight = 0;
        self.dedupe.clear();
        self.generation += 1;
        self.state = BreakerState::Closed;
        self.emit(from, BreakerState::Closed, TransitionReason::ManualReset);
    }

    fn handle_probe_outcome(&mut self, now: Instant, ticket: Ticket, outcome: Outcome<'_>) {
        if ticket.generation != self.generation || self.state != BreakerState::HalfOpen {
            return; // a probe of an earlier cycle (e.g. after a manual reset)
        }
        self.probes_in_flight = self.probes_in_flight.saturating_sub(1);
        match outcome {
            // HalfOpen => Closed
            Outcome::Success => {
                self.failure_count = 0;
                self.open_cycle_count = 0;
                self.dedupe.clear();
                self.transition(BreakerState::Closed, TransitionReason::ProbeSucceeded);
            }
            // HalfOpen => Open
            Outcome::Failure { .. } => {
                self.open_cycle_count = self.open_cycle_count.saturating_add(1);
                self.last_failure_at = Some(now);
                let cycle = self.open_cycle_count;
                self.open(now, TransitionReason::ProbeFailed { cycle });
            }
            Outcome::Ignored => {}
        }
    }

    /// A success of `conn`: its next failure counts again, even inside the dedupe window
    /// (BEHAVIOUR.md §4: `recordProviderSuccess` clears the connection's dedupe key). Nothing
    /// changes while the breaker is open.
    pub fn forget_failure_of(&mut self, now: Instant, conn: &str) {
        if self.state(now) != BreakerState::Open {
            self.dedupe.remove(conn);
        }
    }

    fn on_success_flowing(&mut self) {
        self.failure_count = self.failure_count.saturating_sub(1);
        // Degraded => Closed
        if self.state == BreakerState::Degraded && self.failure_count <= self.config.degradation_threshold {
            self.transition(BreakerState::Closed, TransitionReason::Recovered);
        }
    }

    /// A failure while traffic flows; `replica` when another replica counted it (a move it
    /// causes is then the replica's, and not shared again).
    fn on_failure_flowing(&mut self, now: Instant, connection: Option<&str>, replica: bool) {
        if let Some(conn) = connection
            && self.is_duplicate(now, conn)
        {
            return;
        }
        self.failure_count = self.failure_count.saturating_add(1);
        self.last_failure_at = Some(now);
        // (Closed | Degraded) => Open, Closed => Degraded
        let why = |local| if replica { TransitionReason::Replica } else { local };
        if self.failure_count >= self.config.failure_threshold {
            self.open(now, why(TransitionReason::FailureThreshold));
        } else if self.state == BreakerState::Closed && self.failure_count >= self.config.degradation_threshold {
            self.transition(BreakerState::Degraded, why(TransitionReason::DegradationThreshold));
        }
    }

    /// Whether a failure of `conn` at `now` repeats one already counted inside the window.
    fn is_duplicate(&mut self, now: Instant, conn: &str) -> bool {
        let window = self.config.dedupe_window;
        if window.is_zero() {
            return false;
        }
        if let Some(&at) = self.dedupe.get(conn)
            && now.saturating_duration_since(at) < window
        {
            return true;
        }
        if self.dedupe.len() >= DEDUPE_CAP {
            self.dedupe.retain(|_, at| now.saturating_duration_since(*at) < window);
            if self.dedupe.len() >= DEDUPE_CAP {
                self.dedupe.clear();
            }
        }
        self.dedupe.insert(conn.to_owned(), now);
        false
    }

    fn open(&mut self, now: Instant, reason: TransitionReason) {
        let timeout = self.config.effective_reset_timeout(self.open_cycle_count);
        self.open_until = Some(now + timeout);
        self.probes_in_flight = 0;
        self.generation += 1;
        self.transition(BreakerState::Open, reason);
    }

    /// Open => HalfOpen once the reset timeout has elapsed.
    fn refresh(&mut self, now: Instant) {
        if self.state == BreakerState::Open && self.state(now) == BreakerState::HalfOpen {
            self.probes_in_flight = 0;
            self.generation += 1;
            self.transition(BreakerState::HalfOpen, TransitionReason::ResetTimeoutElapsed);
        }
    }

    fn transition(&mut self, to: BreakerState, reason: TransitionReason) {
        let from = self.state;
        self.state = to;
        if to != BreakerState::Open {
            self.open_until = None;
        }
        self.emit(from, to, reason);
    }

    fn emit(&mut self, from: BreakerState, to: BreakerState, reason: TransitionReason) {
        if self.events.len() >= EVENT_CAP {
            self.events.pop_front();
        }
        let open_until = if to == BreakerState::Open { self.open_until } else { None };
        self.events.push_back(BreakerEvent { from, to, reason, open_until });
    }
}

/// Whole milliseconds of a duration, saturating.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
