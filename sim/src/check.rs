//! The recorder: every observed event, client outcome and fault, in order, with simulated
//! times; and the invariants checked as each event arrives.

use ferroute_core::breaker::TransitionReason;
use ferroute_core::engine::Event;
use ferroute_core::engine::OutcomeKind;
use ferroute_core::types::{Reason, TerminalState};
use proxy::state::gateway::Observed;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{DefaultHasher, Hash, Hasher};

#[path = "outcome.rs"]
mod outcome;
#[path = "check_view.rs"]
mod view;
pub use outcome::Outcome;

/// What one gateway has announced: the state its dispatches are checked against.
#[derive(Debug, Default)]
pub(crate) struct View {
    pub(super) breaker_open_until: BTreeMap<String, u64>,
    pub(super) cooling_until: BTreeMap<String, u64>,
    pub(super) terminal: BTreeMap<String, TerminalState>,
    /// Announced model lockouts: (provider, connection, model) → until (ms).
    pub(super) locked_until: BTreeMap<(String, String, String), u64>,
    /// First sends per client request.
    pub(super) attempts: BTreeMap<u64, u32>,
    /// (request, round, provider/model, connection) already sent.
    pub(super) sent: BTreeSet<(u64, u32, String, String)>,
    /// The outcome being recorded: (provider, kind, at).
    pub(super) last_outcome: Option<(String, OutcomeKind, u64)>,
    /// When other replicas' changes were last applied (what changes then is their doing).
    pub(super) peers_at: Option<u64>,
}

impl View {
    /// Why this gateway's own announced state excludes `provider`/`model` on `connection` at
    /// `at` (sim ms): its model lockout, its provider's open breaker, its cooldown, or a
    /// terminal state no request may reach (a ban or exhausted credits).
    pub(super) fn exclusion(&self, at: u64, provider: &str, connection: &str, model: &str) -> Vec<String> {
        let mut why = Vec::new();
        let lock = (provider.to_owned(), connection.to_owned(), model.to_owned());
        if let Some(until) = self.locked_until.get(&lock).filter(|u| at < **u) {
            why.push(format!("inside its model lockout (until {until} ms)"));
        }
        if let Some(until) = self.breaker_open_until.get(provider).filter(|u| at < **u) {
            why.push(format!("while {provider}'s breaker is open until {until} ms"));
        }
        if let Some(until) = self.cooling_until.get(connection).filter(|u| at < **u) {
            why.push(format!("inside {connection}'s cooldown (until {until} ms)"));
        }
        if let Some(t @ (TerminalState::Banned | TerminalState::CreditsExhausted)) = self.terminal.get(connection) {
            why.push(format!("which is {}", t.as_str()));
        }
        why
    }
}

/// Simulated milliseconds as seconds: `1.5s`, `60s`.
pub fn secs(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{}.{}s", ms / 1000, format!("{:03}", ms % 1000).trim_end_matches('0'))
    }
}

/// A violated property.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// When (sim ms).
    pub at_ms: u64,
    /// What.
    pub what: String,
}

/// A state the timeline shows (for the SVG).
pub use ferroute_core::timeline::Span;

/// Everything a run saw.
#[derive(Debug, Default)]
pub struct Recorder {
    /// The ordered log.
    pub log: Vec<(u64, String)>,
    /// Client outcomes.
    pub outcomes: Vec<Outcome>,
    /// Requests planned (client, seq), with when each was sent (`None` until it is).
    pub issued: BTreeMap<(String, u64), Option<u64>>,
    /// Violations, first first.
    pub violations: Vec<Violation>,
    /// Dispatches by (provider, connection).
    pub dispatches: BTreeMap<(String, String), u64>,
    /// Dispatches by target (`provider/model`).
    pub targets: BTreeMap<String, u64>,
    /// Cooldown waits of combo requests (M8), in ms.
    pub combo_waits: Vec<u64>,
    /// Streams started and finalised.
    pub streams: (u64, u64),
    /// Timeline spans.
    pub spans: Vec<Span>,
    /// `[resilience.routing] max_attempts` of the run's gateway (0: not checked).
    pub max_attempts: u32,
    /// What the gateway being observed has announced (each replica has its own).
    view: View,
    /// The other replicas' views, by host.
    views: BTreeMap<String, View>,
    /// The replica `view` belongs to (empty: the gateway of a run without replicas).
    host: String,
    /// How often each state machine transition was reached ([`crate::coverage`]).
    pub coverage: BTreeMap<String, u64>,
}

impl Recorder {
    /// Adds a log line.
    pub fn note(&mut self, at_ms: u64, line: String) {
        self.log.push((at_ms, line));
    }

    /// Records a violation.
    pub fn violate(&mut self, at_ms: u64, what: String) {
        self.note(at_ms, format!("VIOLATION {what}"));
        self.violations.push(Violation { at_ms, what });
    }

    fn open_span(&mut self, lane: String, state: &str, at: u64) {
        self.close_span(&lane, at);
        self.spans.push(Span { lane, state: state.to_owned(), from_ms: at, to_ms: None, note: String::new() });
    }

    fn close_span(&mut self, lane: &str, at: u64) {
        if let Some(s) = self.spans.iter_mut().rev().find(|s| s.lane == lane && s.to_ms.is_none()) {
            s.to_ms = Some(at);
        }
    }

    /// Feeds one gateway observation at `at` (sim ms); `ms_of` converts core instants.
    pub fn observe(&mut self, at: u64, what: &Observed<'_>, ms_of: &dyn Fn(std::time::Instant) -> u64) {
        if let Some(t) = crate::coverage::label(what) {
            *self.coverage.entry(t).or_default() += 1;
        }
        match what {
            Observed::Dispatch { provider, connection, model, request, round, resend } => {
                let again = if *resend { " again (same attempt)" } else { "" };
                self.gw_note(at, format!("dispatch {provider}/{model} to {connection}{again}"));
                if !*resend {
                    let n = self.view.attempts.entry(*request).or_insert(0);
                    *n += 1;
                    let n = *n;
                    if self.max_attempts > 0 && n > self.max_attempts {
                        let max = self.max_attempts;
                        self.gw_violate(at, format!("request {request} made {n} upstream attempts (budget {max})"));
                    }
                    let key = (*request, *round, format!("{provider}/{model}"), (*connection).to_owned());
                    if !self.view.sent.insert(key) {
                        self.gw_violate(
                            at,
                            format!("request {request} sent {provider}/{model} to {connection} twice in round {round}"),
                        );
                    }
                }
                for why in self.view.exclusion(at, provider, connection, model) {
                    self.gw_violate(at, format!("dispatched {provider}/{model} on {connection}, {why}"));
                }
                *self.dispatches.entry(((*provider).to_owned(), (*connection).to_owned())).or_insert(0) += 1;
                // A breaker and a connection are drawn from 0 s in the state they start in.
                for (lane, state) in [
                    (self.lane(format!("breaker:{provider}")), "CLOSED"),
                    (self.lane(format!("conn:{connection}")), "active"),
                ] {
                    if !self.spans.iter().any(|s| s.lane == lane) {
                        self.spans.push(Span {
                            lane,
                            state: state.into(),
                            from_ms: 0,
                            to_ms: None,
                            note: String::new(),
                        });
                    }
                }
                self.spans.push(Span {
                    lane: self.lane(format!("calls:{connection}")),
                    state: "call".into(),
                    from_ms: at,
                    to_ms: Some(at),
                    note: format!("{provider}/{model} to {connection}{again}"),
                });
                *self.targets.entry(format!("{provider}/{model}")).or_insert(0) += 1;
            }
            Observed::Pick { provider, connection, model, request } => {
                // `select`'s own invariant, independent of the re-check before sending: it never
                // returns a target its own state excludes. Not logged (the dispatch is).
                let what = format!("select picked {provider}/{model} on {connection} for request {request}");
                for why in self.view.exclusion(at, provider, connection, model) {
                    self.gw_violate(at, format!("{what}, {why}"));
                }
            }
            Observed::Outcome { provider, connection, kind } => {
                self.gw_note(at, format!("outcome {provider}/{connection} {}", kind.as_str()));
                self.view.last_outcome = Some(((*provider).to_owned(), *kind, at));
            }
            Observed::ComboWait { combo, wait } => {
                self.gw_note(at, format!("combo {combo} waits {} for a cooldown", secs(wait.as_millis() as u64)));
                self.combo_waits.push(wait.as_millis() as u64);
            }
            Observed::StreamStarted => {
                self.streams.0 += 1;
                self.gw_note(at, "stream started".into());
            }
            Observed::StreamFinalized => {
                self.streams.1 += 1;
                self.gw_note(at, "stream finalised".into());
                if self.streams.1 > self.streams.0 {
                    self.gw_violate(at, "a stream was finalised more often than streams started".into());
                }
            }
            Observed::Peers { changes } => {
                self.gw_note(at, format!("applying {changes} change(s) of other replicas"));
                self.view.peers_at = Some(at);
            }
            Observed::Tokens { connection, what, generation } => {
                self.gw_note(at, format!("tokens {connection} {what} (generation {generation})"));
            }
            Observed::Core(ev) => self.core(at, ev, ms_of),
        }
    }

    fn core(&mut self, at: u64, ev: &Event, ms_of: &dyn Fn(std::time::Instant) -> u64) {
        match ev {
            Event::Breaker(t) => {
                let until = t.open_until.map(ms_of);
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
                self.gw_note(
                    at,
                    format!("breaker {} {} -> {} ({why}){probe}", t.provider, t.from.as_str(), t.to.as_str()),
                );
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
                    let from = t.from.as_str().to_owned();
                    self.spans.push(Span {
                        lane: lane.clone(),
                        state: from,
                        from_ms: 0,
                        to_ms: None,
                        note: String::new(),
                    });
                }
                self.open_span(lane, t.to.as_str(), at);
            }
            Event::ConnectionCooldown { connection, until, level, reason } => {
                let u = ms_of(*until);
                let (len, end, why) = (secs(u.saturating_sub(at)), secs(u), reason.as_str());
                self.gw_note(at, format!("cooldown {connection} for {len} (until {end}), level {level}, {why}"));
                // A provider-level status whose text names an account-level cause (auth, quota,
                // throttling, a supervisor's hint) may cool the connection (SPEC: layer
                // separation); a provider-level reason never does.
                let named = !matches!(
                    reason,
                    Reason::ServerError | Reason::Unknown | Reason::ModelCapacity | Reason::Transport
                );
                self.account_level_cause(at, connection, "cooled down", named);
                if let Some(t) = self.view.terminal.get(&**connection) {
                    let t = t.as_str();
                    self.gw_violate(at, format!("terminal state {t} of {connection} overwritten by a cooldown"));
                }
                // While a cooldown runs, a new one is announced only to end later (a longer hint);
                // one that ends earlier or at the same moment changes nothing and is not announced.
                if let Some(prev) = self.view.cooling_until.get(&**connection).copied()
                    && prev > at
                    && u <= prev
                {
                    let how = if u < prev { "moved earlier" } else { "was announced again, not extended" };
                    self.gw_violate(at, format!("the cooldown of {connection} {how}, from {prev} ms to {u} ms"));
                }
                self.view.cooling_until.insert(connection.to_string(), u);
                self.spans.push(Span {
                    lane: self.lane(format!("conn:{connection}")),
                    state: "cooldown".into(),
                    from_ms: at,
                    to_ms: Some(u),
                    note: String::new(),
                });
            }
            Event::ConnectionTerminal { connection, state } => {
                self.gw_note(at, format!("terminal {connection} {}", state.as_str()));
                // A terminal state is always named by the text (deactivated, out of credits).
                self.account_level_cause(at, connection, state.as_str(), true);
                if let Some(prev) = self.view.terminal.get(&**connection)
                    && prev != state
                {
                    let (p, s) = (prev.as_str(), state.as_str());
                    self.gw_violate(at, format!("terminal state {p} of {connection} overwritten by {s}"));
                }
                self.view.terminal.insert(connection.to_string(), *state);
                self.open_span(self.lane(format!("conn:{connection}")), state.as_str(), at);
            }
            Event::ConnectionRecovered { connection } => {
                self.gw_note(at, format!("recovered {connection}"));
                self.view.terminal.remove(&**connection);
                self.view.cooling_until.remove(&**connection);
                self.close_span(&self.lane(format!("conn:{connection}")), at);
            }
            Event::Pin(ferroute_core::session::PinEvent::Set { session, provider, connection, expires_at }) => {
                let until = ms_of(*expires_at);
                self.gw_note(at, format!("pin {session} on {provider} to {connection} until {}", secs(until)));
            }
            Event::Pin(ferroute_core::session::PinEvent::Dropped { session, provider }) => {
                self.gw_note(at, format!("pin {session} on {provider} dropped"));
            }
            Event::Lane { connection, change } => {
                use ferroute_core::usage_limit::LaneChange;
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
            Event::Lockout { provider, connection, model, cooldown } => {
                let len = secs(cooldown.as_millis() as u64);
                self.gw_note(at, format!("lockout {provider}/{model} on {connection} for {len}"));
                let until = at + cooldown.as_millis() as u64;
                let key = (provider.to_string(), connection.to_string(), model.to_string());
                let slot = self.view.locked_until.entry(key).or_insert(until);
                *slot = (*slot).max(until);
                self.spans.push(Span {
                    lane: self.lane(format!("lock:{provider}/{connection}/{model}")),
                    state: "locked".into(),
                    from_ms: at,
                    to_ms: Some(at + cooldown.as_millis() as u64),
                    note: String::new(),
                });
            }
            Event::LockoutDecayed { provider, connection, model } => {
                self.gw_note(at, format!("lockout {provider}/{model} on {connection} ended by successes"));
                let key = (provider.to_string(), connection.to_string(), model.to_string());
                self.view.locked_until.remove(&key);
                let lane = self.lane(format!("lock:{provider}/{connection}/{model}"));
                for span in self.spans.iter_mut().filter(|s| s.state == "locked" && s.lane == lane) {
                    if span.to_ms.is_none_or(|t| t > at) {
                        span.to_ms = Some(at);
                    }
                }
            }
            Event::LockoutsCleared { provider, connection, model, removed } => {
                let named = |v: &Option<std::sync::Arc<str>>| v.as_deref().unwrap_or("*").to_owned();
                let (p, c, m) = (named(provider), named(connection), named(model));
                self.gw_note(at, format!("lockouts cleared: {p}/{m} on {c} ({removed})"));
                // Named as the gateway matches them: ids exactly, the model trimmed and in any case.
                let hit = |v: &Option<std::sync::Arc<str>>, x: &str| v.as_deref().is_none_or(|v| v == x);
                let model_hit = |x: &str| model.as_deref().is_none_or(|m| m.trim().eq_ignore_ascii_case(x));
                self.view
                    .locked_until
                    .retain(|(lp, lc, lm), _| !(hit(provider, lp) && hit(connection, lc) && model_hit(lm)));
                for span in self.spans.iter_mut().filter(|s| s.state == "locked") {
                    let mut parts = span.lane.trim_start_matches("lock:").splitn(3, '/');
                    let (lp, lc, lm) =
                        (parts.next().unwrap_or(""), parts.next().unwrap_or(""), parts.next().unwrap_or(""));
                    if hit(provider, lp) && hit(connection, lc) && model_hit(lm) && span.to_ms.is_none_or(|t| t > at) {
                        span.to_ms = Some(at);
                    }
                }
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

    /// The hash of the ordered log: equal for equal runs.
    pub fn hash(&self) -> u64 {
        let mut h = DefaultHasher::new();
        self.log.hash(&mut h);
        h.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_and_answers_read_as_the_gateway_speaks() {
        assert_eq!(
            (secs(0), secs(60_000), secs(22_010), secs(500), secs(10_001)),
            ("0s".to_owned(), "60s".to_owned(), "22.01s".to_owned(), "0.5s".to_owned(), "10.001s".to_owned())
        );
        let o = Outcome {
            client: "a".into(),
            seq: 3,
            issued_ms: 0,
            done_ms: 10,
            status: Some(503),
            code: Some("server_error".into()),
            retry_after_s: Some(5),
            connection: Some("k1".into()),
            session: None,
            done: false,
            error: None,
            headers: Default::default(),
            body: String::new(),
            aborted: false,
        };
        assert_eq!(o.describe(false), "a#3: 503 server_error retry-after 5s via k1");
        let lost = Outcome {
            status: None,
            code: None,
            retry_after_s: None,
            connection: None,
            error: Some("reset".into()),
            ..o
        };
        assert_eq!(lost.describe(true), "a#3: no answer (reset)");
    }
}
