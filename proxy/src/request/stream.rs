//! SSE relay: chunks go to the client as they arrive (never buffered whole), the M10
//! watchdog watches the live stream, and finalisation happens exactly once.

use crate::edge::errors::Body;
use crate::request::attempt::Attempt;
use crate::request::endpoint::SELECTED_HEADER;
use crate::state::gateway::queues::Slot;
use crate::translate::ClientApi;
use crate::translate::stream::{Event, Translate, error_event, write};
use bytes::Bytes;
use ferroute_core::engine::AttemptOutcome;
use ferroute_core::sse::{MAX_EVENT_BYTES, SseEvent, SseParser};
use ferroute_core::watchdog::{STREAM_THROUGHPUT_TOO_LOW, Verdict, Watchdog};
use http::{HeaderValue, Response};
use http_body_util::BodyExt;
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
/// `Drop` when the client's response body is dropped first (the client went away).
pub struct Finalizer<C: Connect + Clone + Send + Sync + 'static> {
    attempt: Attempt<C>,
    slots: Vec<Slot<C>>,
    done: bool,
}

impl<C: Connect + Clone + Send + Sync + 'static> Finalizer<C> {
    /// Takes over an attempt whose response is streaming.
    pub fn new(attempt: Attempt<C>, slots: Vec<Slot<C>>) -> Self {
        attempt.gw.metrics.streams_started.inc();
        attempt.gw.observe(attempt.gw.clock.now(), crate::state::gateway::Observed::StreamStarted);
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
        self.attempt.gw.observe(self.attempt.gw.clock.now(), crate::state::gateway::Observed::StreamFinalized);
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
    /// The connection serving it, as the response header's value (none if it cannot be one).
    pub connection: Option<HeaderValue>,
    /// A stream silent this long is ended (the execution budget).
    pub idle_budget: std::time::Duration,
    /// Frames already read from the upstream (its opening events), relayed first.
    pub held: Vec<Bytes>,
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

/// Starts relaying `resp` to the client; returns the client's response at once. The relay is
/// the response body itself: each upstream frame is parsed, watched and passed on (or
/// translated) when the client's connection asks for the next one, with no task or channel
/// in between; a client that goes away drops the body, which finalises the stream.
pub fn relay<C: Connect + Clone + Send + Sync + 'static>(
    fin: Finalizer<C>,
    resp: Response<Incoming>,
    to: Relay,
) -> Response<Body> {
    let (parts, upstream) = resp.into_parts();
    let gw = std::sync::Arc::clone(&fin.attempt.gw);
    let now = gw.clock.now();
    let watchdog = Watchdog::new(gw.config.resilience.watchdog_config(), now);
    // Events are read only for someone: the translator, the watchdog, or a wanted trace
    // (which counts them). Otherwise the frames go through as they came.
    let parser = match to.translator {
        Some(_) => Some(SseParser::default().halting()),
        None if watchdog.is_on() || fin.attempt.trace.wanted => Some(SseParser::default()),
        None => None,
    };
    let body = RelayBody {
        upstream,
        watchdog,
        down: Downstream { api: to.api, translator: to.translator, events: Vec::new() },
        parser,
        idle: Box::pin(tokio::time::sleep(to.idle_budget)),
        idle_budget: to.idle_budget,
        last_frame: tokio::time::Instant::now(),
        armed: None,
        // Room for the events of a few chunks: the queue grows once, not step by step.
        out: std::collections::VecDeque::with_capacity(16),
        held: to.held.into(),
        fin: Some(fin),
    };
    let mut out = Response::new(body.boxed());
    *out.status_mut() = parts.status;
    // The upstream's header map, emptied, holds the stream's few headers: no new map per stream.
    let mut h = parts.headers;
    h.clear();
    h.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(http::header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Some(v) = to.connection {
        h.insert(SELECTED_HEADER.clone(), v);
    }
    *out.headers_mut() = h;
    out
}

/// The client's response body: pulls the upstream's frames as the client takes them.
///
/// The watchdog judges the stream as its events arrive (as the reference does): a timer would
/// catch the window between two evenly spaced chunks and abort a stream running at exactly the
/// minimum rate. A silent upstream is the execution budget's job: a stream that sends nothing
/// at all for that long is ended, so a client never hangs. The watchdog reads the provider's
/// events; the client gets them translated when its API differs.
struct RelayBody<C: Connect + Clone + Send + Sync + 'static> {
    upstream: Incoming,
    watchdog: Watchdog,
    down: Downstream,
    /// `None` when nothing reads the upstream's events (see [`relay`]).
    parser: Option<SseParser>,
    /// Fires at `last_frame + idle_budget` or earlier; moved on only when it fires early.
    idle: std::pin::Pin<Box<tokio::time::Sleep>>,
    idle_budget: std::time::Duration,
    last_frame: tokio::time::Instant,
    /// The waker the silence timer holds (it was last polled with it): while the client's
    /// connection polls with the same one and the timer has not fired, it is not polled again.
    armed: Option<std::task::Waker>,
    /// What the client gets next, in order.
    out: std::collections::VecDeque<Bytes>,
    /// Upstream frames read before the relay began, taken before the upstream is polled.
    held: std::collections::VecDeque<Bytes>,
    /// `None` once the stream has ended (finalised).
    fin: Option<Finalizer<C>>,
}

impl<C: Connect + Clone + Send + Sync + 'static> RelayBody<C> {
    /// Ends the stream: `last` (an error or closing event) goes out after what is queued.
    fn end(&mut self, end: StreamEnd, last: Option<Bytes>) {
        self.out.extend(last);
        if let Some(fin) = self.fin.take() {
            fin.finish(end);
        }
    }

    /// One upstream data frame, arrived at `now`. A frame nothing reads is given back, to go to
    /// the client as it came (nothing is queued before it: the queue is empty whenever the
    /// upstream is polled); anything else is queued.
    fn frame(&mut self, data: Bytes, now: std::time::Instant) -> Option<Bytes> {
        let fin = self.fin.as_mut()?;
        let mut abort = false;
        let mut events = 0u64;
        let Some(parser) = self.parser.as_mut() else {
            // Nothing reads the trace either: it needs no timing.
            return Some(data);
        };
        let (watchdog, down) = (&mut self.watchdog, &mut self.down);
        let trace = &mut fin.attempt.trace;
        parser.feed(&data, |ev| {
            events += 1;
            if trace.wanted && ev.data.contains("usage") {
                trace.usage_from(ev.data.as_bytes());
            }
            if let Verdict::Abort { .. } = watchdog.observe_sse(now, ev.name, ev.data) {
                abort = true;
            }
            down.event(ev);
        });
        trace.frame(now, data.len(), events);
        self.out.extend(self.down.data(data));
        // Passed through, an oversized event still reaches the client byte for byte;
        // translated, it would be lost: end the stream saying so instead.
        if self.down.translator.is_some() && parser.overflowed() {
            let msg = format!("an upstream event exceeded {MAX_EVENT_BYTES} bytes and cannot be translated");
            let last = self.down.error("upstream_event_too_large", &msg);
            self.end(StreamEnd::TooLarge, last);
        } else if abort {
            let last = self.down.error(STREAM_THROUGHPUT_TOO_LOW, "the upstream stream was too slow and was aborted");
            self.end(StreamEnd::TooSlow, last);
        }
        None
    }
}

impl<C: Connect + Clone + Send + Sync + 'static> hyper::body::Body for RelayBody<C> {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, io::Error>>> {
        use std::task::Poll;
        let this = self.get_mut();
        loop {
            if let Some(b) = this.out.pop_front() {
                return Poll::Ready(Some(Ok(hyper::body::Frame::data(b))));
            }
            if this.fin.is_none() {
                return Poll::Ready(None);
            }
            if let Some(data) = this.held.pop_front() {
                if let Some(data) = this.frame(data, crate::state::clock::now()) {
                    return Poll::Ready(Some(Ok(hyper::body::Frame::data(data))));
                }
                continue;
            }
            match std::pin::Pin::new(&mut this.upstream).poll_frame(cx) {
                Poll::Ready(None) => {
                    let last = this.down.finish();
                    this.end(StreamEnd::Completed, last);
                }
                Poll::Ready(Some(Err(e))) => {
                    let msg = format!("the upstream stream broke off: {e}");
                    let last = this.down.error("upstream_stream_error", &msg);
                    this.end(StreamEnd::UpstreamBroke, last);
                }
                Poll::Ready(Some(Ok(frame))) => {
                    // One reading of the gateway's clock serves the silence timer and the frame.
                    let now = crate::state::clock::now();
                    this.last_frame = tokio::time::Instant::from_std(now);
                    if let Ok(data) = frame.into_data()
                        && let Some(data) = this.frame(data, now)
                    {
                        return Poll::Ready(Some(Ok(hyper::body::Frame::data(data))));
                    }
                }
                Poll::Pending => {
                    // The timer is armed for the budget after some earlier frame; when it fires
                    // and frames came since, it is moved to the budget after the last one (not
                    // re-armed per frame). Armed with this task's waker and not yet fired, it
                    // needs no poll: it wakes the task when it fires.
                    let same = this.armed.as_ref().is_some_and(|w| w.will_wake(cx.waker()));
                    if same && !this.idle.is_elapsed() {
                        return Poll::Pending;
                    }
                    loop {
                        if this.idle.as_mut().poll(cx).is_pending() {
                            if !same {
                                this.armed = Some(cx.waker().clone());
                            }
                            return Poll::Pending;
                        }
                        let deadline = this.last_frame + this.idle_budget;
                        if tokio::time::Instant::now() >= deadline {
                            break;
                        }
                        this.idle.as_mut().reset(deadline);
                    }
                    let msg = format!(
                        "the upstream sent nothing for {} ms (execution_max_wait_ms)",
                        this.idle_budget.as_millis()
                    );
                    let last = this.down.error("RATE_LIMIT_EXECUTION_TIMEOUT", &msg);
                    this.end(StreamEnd::Silent, last);
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.fin.is_none() && self.out.is_empty()
    }
}
