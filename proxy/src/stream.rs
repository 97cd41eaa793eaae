//! SSE relay: chunks go to the client as they arrive (never buffered whole), the M10
//! watchdog watches the live stream, and finalisation happens exactly once.

use crate::attempt::{Attempt, SELECTED};
use crate::errors::Body;
use crate::gateway::Slot;
use crate::translate::ClientApi;
use crate::translate::stream::{Event, Translate, error_event, write};
use bytes::Bytes;
use ferroute_core::engine::AttemptOutcome;
use ferroute_core::sse::{MAX_EVENT_BYTES, SseEvent, SseParser};
use ferroute_core::watchdog::{STREAM_THROUGHPUT_TOO_LOW, Verdict, Watchdog, classify_sse};
use http::{HeaderValue, Response};
use http_body_util::{BodyExt, channel::Channel};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::Connect;
use std::io;

/// How a stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamEnd {
    /// The upstream finished.
    Completed,
    /// The upstream broke off mid-stream (provider-level failure).
    UpstreamBroke,
    /// The watchdog aborted a too-slow stream (provider-level failure).
    TooSlow,
    /// The client went away: says nothing about the upstream.
    ClientGone,
    /// The upstream sent nothing for the whole execution budget (M9's safety net; like the
    /// other local limits it counts against nothing).
    Silent,
    /// One upstream event outgrew what a translated stream holds (a local limit: counts
    /// against nothing).
    TooLarge,
}

/// Usage accounting and permit release for one stream, exactly once: by `finish`, or by
/// `Drop` if the relay task is cancelled.
pub struct Finalizer<C: Connect + Clone + Send + Sync + 'static> {
    attempt: Attempt<C>,
    slots: Vec<Slot<C>>,
    done: bool,
}

impl<C: Connect + Clone + Send + Sync + 'static> Finalizer<C> {
    /// Takes over an attempt whose response is streaming.
    pub fn new(attempt: Attempt<C>, slots: Vec<Slot<C>>) -> Self {
        attempt.gw.metrics.streams_started.inc();
        attempt.gw.observe(attempt.gw.clock.now(), crate::gateway::Observed::StreamStarted);
        Finalizer { attempt, slots, done: false }
    }

    /// Records the outcome and releases the permits.
    pub fn finish(mut self, end: StreamEnd) {
        self.finalize(end);
    }

    fn finalize(&mut self, end: StreamEnd) {
        if self.done {
            return;
        }
        self.done = true;
        let outcome = match end {
            StreamEnd::Completed => AttemptOutcome::Success,
            StreamEnd::UpstreamBroke => AttemptOutcome::Transport,
            StreamEnd::TooSlow => AttemptOutcome::TooSlow,
            StreamEnd::ClientGone | StreamEnd::Silent | StreamEnd::TooLarge => AttemptOutcome::Neutral,
        };
        self.attempt.record(outcome);
        self.slots.clear();
        self.attempt.gw.metrics.stream_finalizations.inc();
        self.attempt.gw.observe(self.attempt.gw.clock.now(), crate::gateway::Observed::StreamFinalized);
        let (p, c) = self.attempt.gw.parts(&self.attempt.target);
        tracing::debug!(provider = %p.id, connection = %c.id, ?end, "stream finalised");
    }
}

impl<C: Connect + Clone + Send + Sync + 'static> Drop for Finalizer<C> {
    fn drop(&mut self) {
        self.finalize(StreamEnd::ClientGone);
    }
}

/// Where and how a stream goes to the client.
pub struct Relay {
    /// The client's API (for error events when nothing is translated).
    pub api: ClientApi,
    /// Turns the provider's events into the client's, when the formats differ.
    pub translator: Option<Box<dyn Translate>>,
    /// The connection serving it (response header).
    pub connection: String,
    /// A stream silent this long is ended (the execution budget).
    pub idle_budget: std::time::Duration,
}

/// The client side of a relay: passes bytes through, or translates events.
struct Downstream {
    api: ClientApi,
    translator: Option<Box<dyn Translate>>,
    events: Vec<Event>,
}

impl Downstream {
    /// Takes one upstream event (translated, when the formats differ).
    fn event(&mut self, ev: SseEvent<'_>) {
        if let Some(t) = self.translator.as_mut() {
            t.push(ev.name, ev.data, &mut self.events);
        }
    }

    /// What the client gets for `raw` upstream bytes: the bytes themselves when passed through
    /// (the same `Bytes`, never copied), else the events they translated to.
    fn data(&mut self, raw: Bytes) -> Option<Bytes> {
        if self.translator.is_none() {
            return Some(raw);
        }
        self.take()
    }

    fn error(&mut self, code: &str, message: &str) -> Option<Bytes> {
        match self.translator.as_mut() {
            None => {
                let mut buf = Vec::new();
                write(&[error_event(self.api, code, message)], &mut buf);
                Some(Bytes::from(buf))
            }
            Some(t) => {
                t.error(code, message, &mut self.events);
                self.take()
            }
        }
    }

    fn finish(&mut self) -> Option<Bytes> {
        let t = self.translator.as_mut()?;
        t.finish(&mut self.events);
        self.take()
    }

    fn take(&mut self) -> Option<Bytes> {
        if self.events.is_empty() {
            return None;
        }
        let mut buf = Vec::new();
        write(&self.events, &mut buf);
        self.events.clear();
        Some(Bytes::from(buf))
    }
}

/// Starts relaying `resp` to the client; returns the client's response at once.
pub fn relay<C: Connect + Clone + Send + Sync + 'static>(
    fin: Finalizer<C>,
    resp: Response<Incoming>,
    to: Relay,
) -> Response<Body> {
    let (tx, body) = Channel::<Bytes, io::Error>::new(16);
    let status = resp.status();
    let upstream = resp.into_body();
    let down = Downstream { api: to.api, translator: to.translator, events: Vec::new() };
    tokio::spawn(pump(fin, upstream, tx, down, to.idle_budget));
    let mut out = Response::new(body.boxed());
    *out.status_mut() = status;
    let h = out.headers_mut();
    h.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(http::header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(v) = HeaderValue::from_str(&to.connection) {
        h.insert(SELECTED, v);
    }
    out
}

async fn pump<C: Connect + Clone + Send + Sync + 'static>(
    fin: Finalizer<C>,
    mut upstream: Incoming,
    mut tx: http_body_util::channel::Sender<Bytes, io::Error>,
    mut down: Downstream,
    idle_budget: std::time::Duration,
) {
    let gw = std::sync::Arc::clone(&fin.attempt.gw);
    let cfg = gw.config.resilience.watchdog_config();
    let mut watchdog = Watchdog::new(cfg, gw.clock.now());
    let mut parser = match down.translator {
        Some(_) => SseParser::default().halting(),
        None => SseParser::default(),
    };
    // The watchdog judges the stream as its events arrive (as the reference does): a timer
    // would catch the window between two evenly spaced chunks and abort a stream running at
    // exactly the minimum rate. A silent upstream is the execution budget's job: a stream that
    // sends nothing at all for that long is ended, so a client never hangs. The watchdog reads
    // the provider's events; the client gets them translated when its API differs.
    let end = loop {
        let Ok(next) = tokio::time::timeout(idle_budget, upstream.frame()).await else {
            let msg = format!("the upstream sent nothing for {} ms (execution_max_wait_ms)", idle_budget.as_millis());
            if let Some(b) = down.error("RATE_LIMIT_EXECUTION_TIMEOUT", &msg) {
                let _ = tx.send_data(b).await;
            }
            break StreamEnd::Silent;
        };
        match next {
            None => {
                if let Some(b) = down.finish() {
                    let _ = tx.send_data(b).await;
                }
                break StreamEnd::Completed;
            }
            Some(Err(e)) => {
                if let Some(b) = down.error("upstream_stream_error", &format!("the upstream stream broke off: {e}")) {
                    let _ = tx.send_data(b).await;
                }
                break StreamEnd::UpstreamBroke;
            }
            Some(Ok(frame)) => {
                let Ok(data) = frame.into_data() else { continue };
                let mut abort = false;
                let now = gw.clock.now();
                parser.feed(&data, |ev| {
                    if let Verdict::Abort { .. } = watchdog.observe(now, classify_sse(ev.name, ev.data)) {
                        abort = true;
                    }
                    down.event(ev);
                });
                if let Some(out) = down.data(data)
                    && tx.send_data(out).await.is_err()
                {
                    break StreamEnd::ClientGone;
                }
                // Passed through, an oversized event still reaches the client byte for byte;
                // translated, it would be lost: end the stream saying so instead.
                if down.translator.is_some() && parser.overflowed() {
                    let msg = format!("an upstream event exceeded {MAX_EVENT_BYTES} bytes and cannot be translated");
                    if let Some(b) = down.error("upstream_event_too_large", &msg) {
                        let _ = tx.send_data(b).await;
                    }
                    break StreamEnd::TooLarge;
                }
                if abort {
                    if let Some(b) =
                        down.error(STREAM_THROUGHPUT_TOO_LOW, "the upstream stream was too slow and was aborted")
                    {
                        let _ = tx.send_data(b).await;
                    }
                    break StreamEnd::TooSlow;
                }
            }
        }
    };
    fin.finish(end);
}
