//! The recorder: every observed event, client outcome and fault, in order, with simulated
//! times; and the invariants checked as each event arrives.

use ferroute_core::engine::OutcomeKind;
use ferroute_core::types::TerminalState;
use proxy::state::gateway::Observed;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{DefaultHasher, Hash, Hasher};

#[path = "check_core.rs"]
mod core_events;
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
    /// The connection of that outcome.
    pub(super) last_outcome_of: String,
    /// Each connection's last announced cooldown, for its backoff ladder.
    pub(super) ladder: BTreeMap<String, Rung>,
    /// When other replicas' changes were last applied (what changes then is their doing).
    pub(super) peers_at: Option<u64>,
}

/// A connection's last announced cooldown: its backoff level, its end and its longest length
/// (ms), as the connection's own state keeps them.
#[derive(Debug, Clone, Copy)]
pub(super) struct Rung {
    pub(super) level: u32,
    pub(super) until: u64,
    pub(super) len: u64,
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
    /// Each connection's highest backoff level (`max_backoff_steps` of its class), for the
    /// ladder's invariant (a connection not named here is not checked).
    pub ladder_tops: BTreeMap<String, u32>,
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
        self.span(lane, state, (at, None), String::new());
    }

    /// A span of the timeline from `from_ms` until `to_ms` (open while `None`).
    fn span(&mut self, lane: String, state: &str, (from_ms, to_ms): (u64, Option<u64>), note: String) {
        self.spans.push(Span { lane, state: state.to_owned(), from_ms, to_ms, note });
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
                        self.span(lane, state, (0, None), String::new());
                    }
                }
                let lane = self.lane(format!("calls:{connection}"));
                self.span(lane, "call", (at, Some(at)), format!("{provider}/{model} to {connection}{again}"));
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
                (*connection).clone_into(&mut self.view.last_outcome_of);
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
