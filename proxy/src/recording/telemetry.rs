//! OpenTelemetry export (`[telemetry]`): each client request is a server span and each of its
//! upstream attempts a client span under it, made from the same records the flight recorder
//! keeps (never a prompt, an answer, a key or a token), with the GenAI semantic conventions'
//! attributes (`gen_ai.operation.name`, `gen_ai.request.model`, `gen_ai.response.model`,
//! `gen_ai.provider.name`) and Ferroute's own (`ferroute.connection`, `ferroute.reason`,
//! `ferroute.layer`, …); what an attempt changed (a cooldown, a lockout, a breaker move) is a
//! span event. A client's W3C `traceparent` is the request span's parent, and each attempt
//! passes its own on to the upstream.
//!
//! Spans go through a bounded queue (a full one drops and counts) to one thread that sends them
//! in batches (what came within a second, at most 512) with the OTLP/HTTP protobuf exporter of `opentelemetry-otlp`: a request never
//! waits for the collector.

use crate::recording::record::{AttemptEnd, AttemptRecord, RequestRecord};
use opentelemetry::trace::{Event, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter, SpanLinks};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Spans the queue holds before it drops.
pub const QUEUE: usize = 4096;
/// Spans per export at most.
const BATCH: usize = 512;

/// A request's place in a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ids {
    /// The trace.
    pub trace: u128,
    /// This span.
    pub span: u64,
    /// Its parent (the client's span, for a request; the request's, for an attempt).
    pub parent: Option<u64>,
    /// Whether the parent is the client's.
    pub remote_parent: bool,
    /// Whether the trace is sampled.
    pub sampled: bool,
}

impl Ids {
    /// The W3C `traceparent` naming this span.
    pub fn traceparent(&self) -> String {
        format!("00-{:032x}-{:016x}-{:02x}", self.trace, self.span, u8::from(self.sampled))
    }

    /// A child span of this one, with span id `span`.
    pub fn child(&self, span: u64) -> Ids {
        Ids { trace: self.trace, span, parent: Some(self.span), remote_parent: false, sampled: self.sampled }
    }
}

/// A W3C `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`): trace id, parent span id, sampled.
pub fn parse_traceparent(v: &str) -> Option<(u128, u64, bool)> {
    let mut parts = v.trim().split('-');
    let (version, trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if version.len() != 2 || version == "ff" || trace.len() != 32 || span.len() != 16 || flags.len() != 2 {
        return None;
    }
    let trace = u128::from_str_radix(trace, 16).ok().filter(|t| *t != 0)?;
    let span = u64::from_str_radix(span, 16).ok().filter(|s| *s != 0)?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    Some((trace, span, flags & 1 == 1))
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

enum Job {
    Request(Box<RequestRecord>, Ids),
    Attempt(Box<AttemptRecord>, Ids),
}

/// The exporter.
pub struct Telemetry {
    tx: SyncSender<Job>,
    seed: u64,
    next: AtomicU64,
    ratio: f64,
    dropped: Arc<AtomicU64>,
    exported: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry").field("ratio", &self.ratio).finish_non_exhaustive()
    }
}

impl Telemetry {
    /// The exporter `config` asks for: `None` when no endpoint is set there nor in the
    /// environment (`env` looks variables up); `seed` makes ids unique to this process.
    pub fn for_config(
        config: &crate::config::TelemetryConfig,
        env: &dyn Fn(&str) -> Option<String>,
        seed: u64,
    ) -> Result<Option<Telemetry>, String> {
        let from_env = ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"]
            .iter()
            .any(|v| env(v).is_some_and(|e| !e.trim().is_empty()));
        if config.otlp_endpoint.is_none() && !from_env {
            return Ok(None);
        }
        let mut builder = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_timeout(Duration::from_secs(10));
        if let Some(e) = &config.otlp_endpoint {
            builder = builder.with_endpoint(format!("{}/v1/traces", e.trim_end_matches('/')));
        }
        if !config.headers.is_empty() {
            builder = builder.with_headers(config.headers.clone().into_iter().collect());
        }
        let mut exporter = builder.build().map_err(|e| format!("the OTLP exporter: {e}"))?;
        exporter.set_resource(&Resource::builder().with_service_name(config.service_name.clone()).build());
        let (tx, rx) = sync_channel(QUEUE);
        let t = Telemetry {
            tx,
            seed,
            next: AtomicU64::new(1),
            ratio: config.sampling_ratio,
            dropped: Arc::default(),
            exported: Arc::default(),
            failed: Arc::default(),
        };
        let (exported, failed) = (Arc::clone(&t.exported), Arc::clone(&t.failed));
        std::thread::Builder::new()
            .name("ferroute-otlp".into())
            .spawn(move || run(rx, &exporter, &exported, &failed))
            .map_err(|e| format!("the export thread: {e}"))?;
        Ok(Some(t))
    }

    /// A fresh span id.
    pub fn span_id(&self) -> u64 {
        splitmix(self.seed ^ self.next.fetch_add(1, Ordering::Relaxed)).max(1)
    }

    /// A client request's ids: under the client's `traceparent` if it sent one (its sampled
    /// flag decides), else a new trace sampled at the configured ratio.
    pub fn request_ids(&self, traceparent: Option<&str>) -> Ids {
        let span = self.span_id();
        match traceparent.and_then(parse_traceparent) {
            Some((trace, parent, sampled)) => Ids { trace, span, parent: Some(parent), remote_parent: true, sampled },
            None => {
                let trace = (u128::from(self.span_id()) << 64) | u128::from(self.span_id());
                // The trace id's low bits against the ratio, as the TraceIdRatioBased sampler does.
                let sampled = (trace as u64 >> 1) < (self.ratio * (u64::MAX >> 1) as f64) as u64;
                Ids { trace, span, parent: None, remote_parent: false, sampled }
            }
        }
    }

    fn send(&self, job: Job, sampled: bool) {
        if !sampled {
            return;
        }
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) = self.tx.try_send(job) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Exports a request's span.
    pub fn request(&self, r: &RequestRecord, ids: Ids) {
        self.send(Job::Request(Box::new(r.clone()), ids), ids.sampled);
    }

    /// Exports an attempt's span.
    pub fn attempt(&self, a: &AttemptRecord, ids: Ids) {
        self.send(Job::Attempt(Box::new(a.clone()), ids), ids.sampled);
    }

    /// Spans exported, dropped (the queue was full) and lost to a failed export.
    pub fn counts(&self) -> (u64, u64, u64) {
        (
            self.exported.load(Ordering::Relaxed),
            self.dropped.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }
}

fn at(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

fn context(ids: &Ids) -> SpanContext {
    let flags = if ids.sampled { TraceFlags::SAMPLED } else { TraceFlags::default() };
    SpanContext::new(TraceId::from(ids.trace), SpanId::from(ids.span), flags, false, TraceState::default())
}

/// `gen_ai.operation.name`: every client API Ferroute serves is a chat.
fn operation(_api: &str) -> &'static str {
    "chat"
}

fn span(job: Job, scope: &InstrumentationScope) -> SpanData {
    let (ids, name, kind, start, end, attributes, events, status) = match job {
        Job::Request(r, ids) => {
            let mut attrs = vec![
                KeyValue::new("gen_ai.operation.name", operation(&r.api)),
                KeyValue::new("gen_ai.request.model", r.model.clone()),
                KeyValue::new("http.response.status_code", i64::from(r.status)),
                KeyValue::new("ferroute.client_api", r.api.clone()),
                KeyValue::new("ferroute.answer_class", r.class.clone()),
                KeyValue::new("ferroute.stream", r.stream),
            ];
            if let Some(s) = &r.session {
                attrs.push(KeyValue::new("ferroute.session_hash", s.clone()));
            }
            let status = if r.status < 400 { Status::Unset } else { Status::error(r.class.clone()) };
            (ids, format!("chat {}", r.model), SpanKind::Server, r.at_ms, r.answered_ms, attrs, Vec::new(), status)
        }
        Job::Attempt(a, ids) => {
            let mut attrs = vec![
                KeyValue::new("gen_ai.operation.name", operation(&a.api)),
                KeyValue::new("gen_ai.request.model", a.model.clone()),
                KeyValue::new("gen_ai.provider.name", a.provider.clone()),
                KeyValue::new("ferroute.connection", a.connection.clone()),
                KeyValue::new("ferroute.layer", a.layer.clone()),
                KeyValue::new("ferroute.round", i64::from(a.round)),
                KeyValue::new("ferroute.end", format!("{:?}", a.end).to_lowercase()),
                KeyValue::new("ferroute.stream", a.stream),
            ];
            if a.status != 0 {
                attrs.push(KeyValue::new("http.response.status_code", i64::from(a.status)));
            }
            if a.end == AttemptEnd::Served {
                attrs.push(KeyValue::new("gen_ai.response.model", a.model.clone()));
            }
            if let Some(r) = &a.reason {
                attrs.push(KeyValue::new("ferroute.reason", r.clone()));
            }
            if let Some(ms) = a.retry_after_ms {
                attrs.push(KeyValue::new("ferroute.retry_after_ms", ms as i64));
            }
            if let Some(c) = &a.combo {
                attrs.push(KeyValue::new("ferroute.combo", c.clone()));
            }
            if let Some(u) = a.usage {
                attrs.push(KeyValue::new("gen_ai.usage.input_tokens", u.input_tokens as i64));
                attrs.push(KeyValue::new("gen_ai.usage.output_tokens", u.output_tokens as i64));
            }
            if !a.excluded.is_empty() {
                attrs.push(KeyValue::new("ferroute.exclusions", a.excluded.join(", ")));
            }
            if let Some(t) = &a.timing {
                attrs.push(KeyValue::new("ferroute.stream.events", t.events as i64));
                attrs.push(KeyValue::new("ferroute.stream.longest_gap_ms", t.longest_gap_ms as i64));
            }
            let events = a.changed.iter().map(|c| Event::new(c.clone(), at(a.ended_ms), Vec::new(), 0)).collect();
            let status = match a.end {
                AttemptEnd::Served => Status::Unset,
                _ => Status::error(a.reason.clone().unwrap_or_else(|| format!("{:?}", a.end).to_lowercase())),
            };
            let name = format!("attempt {}/{}", a.provider, a.model);
            (ids, name, SpanKind::Client, a.started_ms, a.ended_ms, attrs, events, status)
        }
    };
    SpanData {
        span_context: context(&ids),
        parent_span_id: ids.parent.map_or(SpanId::INVALID, SpanId::from),
        parent_span_is_remote: ids.remote_parent,
        span_kind: kind,
        name: name.into(),
        start_time: at(start),
        end_time: at(end.max(start)),
        attributes,
        dropped_attributes_count: 0,
        events: {
            let mut e = SpanEvents::default();
            e.events = events;
            e
        },
        links: SpanLinks::default(),
        status,
        instrumentation_scope: scope.clone(),
    }
}

/// Runs `f` to completion on this thread (the blocking HTTP client must not run inside an
/// async runtime).
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let mut f = std::pin::pin!(f);
    let waker = Arc::new(Unpark(std::thread::current())).into();
    let mut cx = std::task::Context::from_waker(&waker);
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

fn run(rx: Receiver<Job>, exporter: &opentelemetry_otlp::SpanExporter, exported: &AtomicU64, failed: &AtomicU64) {
    let scope = InstrumentationScope::builder("ferroute").with_version(env!("CARGO_PKG_VERSION")).build();
    while let Some(jobs) = crate::recording::writer::batch(&rx, BATCH) {
        let batch: Vec<SpanData> = jobs.into_iter().map(|j| span(j, &scope)).collect();
        let n = batch.len() as u64;
        match block_on(exporter.export(batch)) {
            Ok(()) => {
                exported.fetch_add(n, Ordering::Relaxed);
            }
            Err(e) => {
                failed.fetch_add(n, Ordering::Relaxed);
                tracing::warn!(error = %e, spans = n, "OpenTelemetry export failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_both_ways() {
        let v = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let (trace, span, sampled) = parse_traceparent(v).expect("valid");
        assert_eq!(trace, 0x4bf92f3577b34da6a3ce929d0e0e4736);
        assert_eq!(span, 0x00f067aa0ba902b7);
        assert!(sampled);
        let ids = Ids { trace, span: 7, parent: Some(span), remote_parent: true, sampled };
        assert_eq!(ids.traceparent(), "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000007-01");
        for bad in [
            "",
            "00-0-0-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        ] {
            assert_eq!(parse_traceparent(bad), None, "{bad}");
        }
    }
}
