//! The core's events as the checker reads them: each is logged, drawn on the timeline, kept in
//! the gateway's view, and held to the invariants that concern it.

use super::{Recorder, Rung, secs};
use ferroute_core::breaker::TransitionReason;
use ferroute_core::breaker::registry::BreakerTransition;
use ferroute_core::engine::{Event, OutcomeKind};
use ferroute_core::session::PinEvent;
use ferroute_core::types::{Reason, TerminalState};
use ferroute_core::usage_limit::LaneChange;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// An id a clear may leave out (`None`: every one).
type Named = Option<Arc<str>>;

impl Recorder {
    pub(super) fn core(&mut self, at: u64, ev: &Event, ms_of: &dyn Fn(Instant) -> u64) {
        match ev {
            Event::Breaker(t) => self.breaker_moved(at, t, t.open_until.map(ms_of)),
            Event::ConnectionCooldown { connection, until, level, reason } => {
                self.cooled(at, connection, ms_of(*until), *level, *reason);
            }
            Event::ConnectionTerminal { connection, state } => self.ended(at, connection, *state),
            Event::ConnectionRecovered { connection } => {
                self.gw_note(at, format!("recovered {connection}"));
                self.view.terminal.remove(&**connection);
                self.view.cooling_until.remove(&**connection);
                self.view.ladder.remove(&**connection);
                self.close_span(&self.lane(format!("conn:{connection}")), at);
            }
            Event::Pin(PinEvent::Set { session, provider, connection, expires_at }) => {
                let until = ms_of(*expires_at);
                self.gw_note(at, format!("pin {session} on {provider} to {connection} until {}", secs(until)));
            }
            Event::Pin(PinEvent::Dropped { session, provider }) => {
                self.gw_note(at, format!("pin {session} on {provider} dropped"));
            }
            Event::Lane { connection, change } => self.lane_changed(at, connection, change, ms_of),
            Event::Lockout { provider, connection, model, cooldown } => {
                self.locked(at, (&**provider, &**connection, &**model), *cooldown);
            }
            Event::LockoutDecayed { provider, connection, model } => {
                self.lock_decayed(at, (&**provider, &**connection, &**model));
            }
            Event::LockoutsCleared { provider, connection, model, removed } => {
                self.locks_cleared(at, (provider, connection, model), *removed);
            }
        }
    }

    /// A breaker moved: only a provider-level outcome (here or on a peer) moves it towards OPEN,
    /// and a move changes its state.
    fn breaker_moved(&mut self, at: u64, t: &BreakerTransition, until: Option<u64>) {
        // Layer separation: only a provider-level outcome moves a breaker towards OPEN.
        let towards_open = matches!(
            t.reason,
            TransitionReason::DegradationThreshold
                | TransitionReason::FailureThreshold
                | TransitionReason::ProbeFailed { .. }
        );
        // Another replica's failures count here too: applied at `at`, they are its cause.
        let by_peers = self.view.peers_at == Some(at);
        if towards_open && !by_peers {
            let cause = self.view.last_outcome.as_ref().filter(|(p, _, when)| *p == t.provider && *when == at);
            if !cause.is_some_and(|(_, kind, _)| *kind == OutcomeKind::ProviderLevel) {
                let what = format!(
                    "breaker {} moved {}->{} without a provider-level outcome (last: {:?})",
                    t.provider,
                    t.from.as_str(),
                    t.to.as_str(),
                    self.view.last_outcome
                );
                self.gw_violate(at, what);
            }
        }
        // A move changes the state; only an operator's reset announces CLOSED again (its
        // counts zeroed).
        if t.from == t.to && !matches!(t.reason, TransitionReason::ManualReset) {
            let s = t.to.as_str();
            self.gw_violate(at, format!("breaker {} moved {s} -> {s}, to the state it was in", t.provider));
        }
        let why = match t.reason {
            TransitionReason::DegradationThreshold => "degradation threshold reached".to_owned(),
            TransitionReason::FailureThreshold => "failure threshold reached".to_owned(),
            TransitionReason::ResetTimeoutElapsed => "reset timeout elapsed".to_owned(),
            TransitionReason::ProbeSucceeded => "probe succeeded".to_owned(),
            TransitionReason::ProbeFailed { cycle } => format!("probe failed, cycle {cycle}"),
            TransitionReason::Recovered => "recovered".to_owned(),
            TransitionReason::ManualReset => "reset by an operator".to_owned(),
            TransitionReason::Replica => "another replica's breaker moved".to_owned(),
        };
        let probe = until.map(|u| format!(", probe from {}", secs(u))).unwrap_or_default();
        self.gw_note(at, format!("breaker {} {} -> {} ({why}){probe}", t.provider, t.from.as_str(), t.to.as_str()));
        match until {
            Some(u) => {
                self.view.breaker_open_until.insert(t.provider.clone(), u);
            }
            None => {
                self.view.breaker_open_until.remove(&t.provider);
            }
        }
        let lane = self.lane(format!("breaker:{}", t.provider));
        if !self.spans.iter().any(|s| s.lane == lane) {
            self.span(lane.clone(), t.from.as_str(), (0, None), String::new());
        }
        self.open_span(lane, t.to.as_str(), at);
    }

    /// A connection cooled until `until` (ms): after an account-level cause, never over a
    /// terminal state, and never to end earlier than a cooldown already running.
    fn cooled(&mut self, at: u64, connection: &str, until: u64, level: u32, reason: Reason) {
        let (len, end, why) = (secs(until.saturating_sub(at)), secs(until), reason.as_str());
        self.gw_note(at, format!("cooldown {connection} for {len} (until {end}), level {level}, {why}"));
        // A provider-level status whose text names an account-level cause (auth, quota,
        // throttling, a supervisor's hint) may cool the connection (SPEC: layer
        // separation); a provider-level reason never does.
        let named =
            !matches!(reason, Reason::ServerError | Reason::Unknown | Reason::ModelCapacity | Reason::Transport);
        self.account_level_cause(at, connection, "cooled down", named);
        if let Some(t) = self.view.terminal.get(connection) {
            let t = t.as_str();
            self.gw_violate(at, format!("terminal state {t} of {connection} overwritten by a cooldown"));
        }
        // While a cooldown runs, a new one is announced only to end later (a longer hint);
        // one that ends earlier or at the same moment changes nothing and is not announced.
        if let Some(prev) = self.view.cooling_until.get(connection).copied()
            && prev > at
            && until <= prev
        {
            let how = if until < prev { "moved earlier" } else { "was announced again, not extended" };
            self.gw_violate(at, format!("the cooldown of {connection} {how}, from {prev} ms to {until} ms"));
        }
        self.no_later_than_announced(at, format!("cooldown of {connection}"), until, |v| {
            v.cooling_until.get(connection).copied()
        });
        self.view.cooling_until.insert(connection.to_owned(), until);
        self.climbed(at, connection, until, level);
        let lane = self.lane(format!("conn:{connection}"));
        self.span(lane, "cooldown", (at, Some(until)), String::new());
    }

    /// A replica's view of another's cooldown or lockout ends when the publisher's does: what
    /// it applies from the shared state (joining late, after a partition, or live) was aged by
    /// the time it spent in transit and in the store, so it never ends later than any other
    /// replica announced it, give or take the links' delay.
    fn no_later_than_announced(
        &mut self,
        at: u64,
        what: String,
        until: u64,
        announced: impl Fn(&super::View) -> Option<u64>,
    ) {
        /// The links' delay and the simulation's tick, with room to spare.
        const SLACK_MS: u64 = 100;
        if self.view.peers_at != Some(at) {
            return;
        }
        let Some(theirs) = self.views.values().filter_map(&announced).max() else { return };
        if until > theirs + SLACK_MS {
            let late = secs(until - theirs);
            self.gw_violate(
                at,
                format!("the {what} applied from another replica ends {late} after the one it announced"),
            );
        }
    }

    /// The backoff ladder climbs (M3): a connection's own account-level failure that starts a
    /// ladder cooldown (level 1 or more) after an earlier cooldown, before a success and before
    /// the connection stayed quiet for as long as that cooldown lasted, is at least one level
    /// above it (or at the ladder's top). A hint's cooldown is level 0 and restarts the ladder;
    /// one announced while another runs extends it and keeps its level.
    fn climbed(&mut self, at: u64, connection: &str, until: u64, level: u32) {
        let prev = self.view.ladder.get(connection).copied();
        if prev.is_some_and(|p| at < p.until) {
            if let Some(p) = self.view.ladder.get_mut(connection) {
                (p.level, p.len, p.until) = (p.level.max(level), p.len.max(until - at), until.max(p.until));
            }
            return;
        }
        self.view.ladder.insert(connection.to_owned(), Rung { level, until, len: until.saturating_sub(at) });
        let own = self.view.last_outcome_of == connection
            && self.view.last_outcome.as_ref().is_some_and(|(_, _, when)| *when == at)
            && self.view.peers_at != Some(at);
        let Some(top) = self.ladder_tops.get(connection).copied() else { return };
        if !own || level == 0 {
            return;
        }
        let before = prev.filter(|p| at - p.until < p.len).map_or(0, |p| p.level);
        let want = (before + 1).min(top);
        if level < want {
            self.gw_violate(
                at,
                format!(
                    "the backoff ladder of {connection} went from level {before} to {level} on another failure \
                     before a success or a quiet spell (expected at least {want})"
                ),
            );
        }
    }

    /// A connection ended in a terminal state: after an account-level cause, and never over
    /// another terminal state.
    fn ended(&mut self, at: u64, connection: &str, state: TerminalState) {
        self.gw_note(at, format!("terminal {connection} {}", state.as_str()));
        // A terminal state is always named by the text (deactivated, out of credits).
        self.account_level_cause(at, connection, state.as_str(), true);
        if let Some(prev) = self.view.terminal.get(connection)
            && *prev != state
        {
            let (p, s) = (prev.as_str(), state.as_str());
            self.gw_violate(at, format!("terminal state {p} of {connection} overwritten by {s}"));
        }
        self.view.terminal.insert(connection.to_owned(), state);
        self.open_span(self.lane(format!("conn:{connection}")), state.as_str(), at);
    }

    /// A connection's usage-limit lane (M4) opened, ended or was reset.
    fn lane_changed(&mut self, at: u64, connection: &str, change: &LaneChange, ms_of: &dyn Fn(Instant) -> u64) {
        match change {
            LaneChange::Accepted { until } => {
                let u = ms_of(*until);
                self.gw_note(at, format!("lane {connection} accepted until {}", secs(u)));
                self.open_span(self.lane(format!("lane:{connection}")), "slow", at);
            }
            LaneChange::Ended(why) => {
                self.gw_note(at, format!("lane {connection} ended {}", why.as_str()));
                self.close_span(&self.lane(format!("lane:{connection}")), at);
            }
            LaneChange::Reset(outcome) => {
                self.gw_note(at, format!("lane {connection} reset {}", outcome.as_str()));
            }
        }
    }

    /// A model lockout (M6) for `cooldown`; the view keeps the later end.
    fn locked(&mut self, at: u64, (provider, connection, model): (&str, &str, &str), cooldown: Duration) {
        let len = secs(cooldown.as_millis() as u64);
        self.gw_note(at, format!("lockout {provider}/{model} on {connection} for {len}"));
        let until = at + cooldown.as_millis() as u64;
        let key = (provider.to_owned(), connection.to_owned(), model.to_owned());
        let what = format!("lockout of {provider}/{model} on {connection}");
        self.no_later_than_announced(at, what, until, |v| v.locked_until.get(&key).copied());
        let slot = self.view.locked_until.entry(key).or_insert(until);
        *slot = (*slot).max(until);
        let lane = self.lane(format!("lock:{provider}/{connection}/{model}"));
        self.span(lane, "locked", (at, Some(until)), String::new());
    }

    /// A model lockout ended early by successes.
    fn lock_decayed(&mut self, at: u64, (provider, connection, model): (&str, &str, &str)) {
        self.gw_note(at, format!("lockout {provider}/{model} on {connection} ended by successes"));
        let key = (provider.to_owned(), connection.to_owned(), model.to_owned());
        self.view.locked_until.remove(&key);
        let lane = self.lane(format!("lock:{provider}/{connection}/{model}"));
        for span in self.spans.iter_mut().filter(|s| s.state == "locked" && s.lane == lane) {
            if span.to_ms.is_none_or(|t| t > at) {
                span.to_ms = Some(at);
            }
        }
    }

    /// Model lockouts cleared by an operator: every one the named ids match (`None`: any).
    fn locks_cleared(&mut self, at: u64, (provider, connection, model): (&Named, &Named, &Named), removed: usize) {
        let named = |v: &Named| v.as_deref().unwrap_or("*").to_owned();
        let (p, c, m) = (named(provider), named(connection), named(model));
        self.gw_note(at, format!("lockouts cleared: {p}/{m} on {c} ({removed})"));
        // Named as the gateway matches them: ids exactly, the model trimmed and in any case.
        let hit = |v: &Named, x: &str| v.as_deref().is_none_or(|v| v == x);
        let model_hit = |x: &str| model.as_deref().is_none_or(|m| m.trim().eq_ignore_ascii_case(x));
        self.view.locked_until.retain(|(lp, lc, lm), _| !(hit(provider, lp) && hit(connection, lc) && model_hit(lm)));
        for span in self.spans.iter_mut().filter(|s| s.state == "locked") {
            let mut parts = span.lane.trim_start_matches("lock:").splitn(3, '/');
            let (lp, lc, lm) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            if hit(provider, lp) && hit(connection, lc) && model_hit(lm) && span.to_ms.is_none_or(|t| t > at) {
                span.to_ms = Some(at);
            }
        }
    }

    /// Layer separation and neutral outcomes: a connection cools or ends only right after an
    /// account-level outcome (a client that gave up, a local limit or a provider-level failure
    /// never touches it), or after a provider-level status whose text `named` an account-level
    /// cause.
    fn account_level_cause(&mut self, at: u64, connection: &str, what: &str, named: bool) {
        if self.view.peers_at == Some(at) {
            return; // another replica's account-level outcome, applied here
        }
        let ok = self.view.last_outcome.as_ref().is_some_and(|(_, kind, when)| {
            *when == at && (*kind == OutcomeKind::AccountLevel || (named && *kind == OutcomeKind::ProviderLevel))
        });
        if !ok {
            let last = self.view.last_outcome.clone();
            self.gw_violate(at, format!("{connection} {what} without an account-level outcome (last: {last:?})"));
        }
    }
}
