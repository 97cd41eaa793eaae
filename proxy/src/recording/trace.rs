//! What an attempt gathers for its record as it goes (the record itself is made once, when the
//! attempt's outcome is recorded: see `crate::request::attempt`).

use crate::recording::record::{AttemptEnd, AttemptRecord, StreamTiming, Usage, is_hint};
use crate::state::clock::Clock;
use ferroute_core::classify::Decision;
use ferroute_core::engine::{AttemptOutcome, Event};
use http::HeaderMap;
use std::sync::Arc;
use std::time::Instant;

/// One attempt's trace.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    /// The client API (`chat`, `messages`, `responses`).
    pub api: &'static str,
    /// The combo, when the request asked for one.
    pub combo: Option<Arc<str>>,
    /// Whether the client asked for a stream.
    pub stream: bool,
    /// Its span in the request's trace, when spans are exported.
    pub ids: Option<crate::recording::telemetry::Ids>,
    /// Whether anything reads the trace (the recorder or the span export): only then are
    /// usage and exclusions gathered.
    pub wanted: bool,
    /// What excluded the request's other candidates when this one was picked.
    pub excluded: Vec<String>,
    usage: Option<Usage>,
    sent: Option<Instant>,
    headers: Option<Instant>,
    status: u16,
    hints: Vec<(String, String)>,
    message: Option<String>,
    timing: Option<StreamTiming>,
    last_frame: Option<Instant>,
}

impl Trace {
    /// A trace for an attempt of a request of `api`.
    pub fn new(
        api: &'static str,
        combo: Option<Arc<str>>,
        stream: bool,
        ids: Option<crate::recording::telemetry::Ids>,
    ) -> Trace {
        Trace { api, combo, stream, ids, wanted: true, ..Trace::default() }
    }

    /// A trace nothing reads (neither recorder nor span export is on).
    pub fn unwanted() -> Trace {
        Trace::default()
    }

    /// Takes in the usage an answer or a stream event reports (when the trace is wanted).
    pub fn usage_from(&mut self, json: &[u8]) {
        if !self.wanted {
            return;
        }
        if let Some(u) = Usage::of(json) {
            self.usage = Some(self.usage.map_or(u, |had| had.merge(u)));
        }
    }

    /// The request went out (the first time, if it is sent again on the same connection).
    pub fn sent(&mut self, at: Instant) {
        self.sent.get_or_insert(at);
    }

    /// The response's head arrived.
    pub fn answered(&mut self, at: Instant, status: u16, headers: &HeaderMap) {
        self.headers = Some(at);
        self.status = status;
        if !self.wanted {
            return;
        }
        self.hints = headers
            .iter()
            .filter(|(k, _)| is_hint(k.as_str()))
            .filter_map(|(k, v)| v.to_str().ok().map(|v| (k.as_str().to_owned(), v.to_owned())))
            .collect();
    }

    /// The upstream's (or the transport's) words for a failure.
    pub fn said(&mut self, message: &str) {
        let end = message.char_indices().nth(500).map_or(message.len(), |(i, _)| i);
        self.message = Some(message[..end].to_owned());
    }

    /// A stream's frame of `bytes` carrying `events` arrived at `at`.
    pub fn frame(&mut self, at: Instant, bytes: usize, events: u64) {
        let t = self.timing.get_or_insert_with(StreamTiming::default);
        if t.first_byte_ms.is_none() {
            t.first_byte_ms = self.headers.map(|h| ms(at.saturating_duration_since(h)));
        }
        if let Some(last) = self.last_frame {
            t.longest_gap_ms = t.longest_gap_ms.max(ms(at.saturating_duration_since(last)));
        }
        self.last_frame = Some(at);
        t.bytes += bytes as u64;
        t.events += events;
    }

    /// The record of an attempt that was sent; `None` for one that never left (refused by a
    /// queue, excluded while it waited).
    #[allow(clippy::too_many_arguments)]
    pub fn record(
        &self,
        clock: &Clock,
        now: Instant,
        ids: (u64, u32),
        target: (&str, &str, &str),
        outcome: &AttemptOutcome<'_>,
        decision: Option<&Decision>,
        events: &[Event],
    ) -> Option<AttemptRecord> {
        let sent = self.sent?;
        let (provider, connection, model) = target;
        let end = match outcome {
            AttemptOutcome::Success => AttemptEnd::Served,
            AttemptOutcome::Upstream { .. } => AttemptEnd::Failed,
            AttemptOutcome::Transport | AttemptOutcome::Egress => AttemptEnd::Transport,
            AttemptOutcome::TooSlow => AttemptEnd::Watchdog,
            AttemptOutcome::Neutral => AttemptEnd::Aborted,
        };
        let message = match outcome {
            AttemptOutcome::Upstream { body, .. } => Some(crate::edge::errors::upstream_message(body)),
            _ => self.message.clone(),
        };
        Some(AttemptRecord {
            request: ids.0,
            round: ids.1,
            started_ms: clock.wall_ms(sent),
            headers_ms: self.headers.map(|h| clock.wall_ms(h)),
            ended_ms: clock.wall_ms(now),
            api: self.api.to_owned(),
            combo: self.combo.as_deref().map(str::to_owned),
            provider: provider.to_owned(),
            connection: connection.to_owned(),
            model: model.to_owned(),
            stream: self.stream,
            status: self.status,
            hints: self.hints.clone(),
            message,
            reason: decision.map(|d| d.reason.as_str().to_owned()),
            layer: outcome.kind().as_str().to_owned(),
            retry_after_ms: decision.and_then(|d| d.client_retry_after).map(ms),
            changed: events.iter().filter_map(describe).collect(),
            excluded: self.excluded.clone(),
            usage: self.usage,
            end,
            timing: self.timing.clone(),
        })
    }
}

fn ms(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// An engine event as the record words it (pins are left out: their keys may name clients).
fn describe(ev: &Event) -> Option<String> {
    Some(match ev {
        Event::Breaker(t) => format!("breaker {} {}", t.provider, t.to.as_str()),
        Event::ConnectionCooldown { connection, level, reason, .. } => {
            format!("cooldown {connection} {} level {level}", reason.as_str())
        }
        Event::ConnectionTerminal { connection, state } => format!("terminal {connection} {}", state.as_str()),
        Event::ConnectionRecovered { connection } => format!("recovered {connection}"),
        Event::Lockout { provider, connection, model, cooldown } => {
            format!("lockout {provider}/{connection}/{model} {} ms", ms(*cooldown))
        }
        Event::LockoutDecayed { provider, connection, model } => {
            format!("lockout ended {provider}/{connection}/{model}")
        }
        Event::Lane { connection, .. } => format!("lane {connection}"),
        Event::LockoutsCleared { .. } | Event::Pin(_) => return None,
    })
}
