//! Prometheus metrics: requests by status and provider, upstream latency, breaker states,
//! connection cooldowns, queue depths, stream finalisations, and translations between APIs.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use rustc_hash::FxHashMap;
use std::sync::RwLock;

/// One label (the names are fixed: no allocation for them, nor for a `Vec`, per request).
type One = [(&'static str, String); 1];
/// Two labels.
type Two = [(&'static str, String); 2];

/// A family's metrics by one label's value, found without allocating. A family's own lookup
/// copies the label values and hashes them with SipHash on every call; the hot path (a
/// request's counter, its upstream latency, its queue's depth) looks here first, and goes to
/// the family only for a value it has not seen. The handles share the family's metrics (a
/// clone of a counter, gauge or histogram is the same metric), and families never drop a
/// label set, so a handle never goes stale.
struct Handles<M> {
    map: RwLock<FxHashMap<String, M>>,
}

impl<M> Default for Handles<M> {
    fn default() -> Self {
        Handles { map: RwLock::default() }
    }
}

impl<M: Clone> Handles<M> {
    /// Runs `f` on the metric for `key`, made by `create` (from the family) the first time.
    fn with(&self, key: &str, create: impl FnOnce() -> M, f: impl FnOnce(&M)) {
        if let Some(m) = self.map.read().unwrap_or_else(|p| p.into_inner()).get(key) {
            return f(m);
        }
        let m = create();
        f(&m);
        self.map.write().unwrap_or_else(|p| p.into_inner()).insert(key.to_owned(), m);
    }
}

/// The gateway's metrics.
pub struct Metrics {
    registry: Registry,
    requests: Family<Two, Counter>,
    upstream_latency: Family<One, Histogram>,
    breaker_state: Family<One, Gauge>,
    connection_cooling: Family<One, Gauge>,
    queue_depth: Family<One, Gauge>,
    leases_active: Gauge,
    session_pins: Gauge,
    translations: Family<Two, Counter>,
    usage_limit: Family<Two, Counter>,
    oauth_refresh: Family<Two, Counter>,
    config_reloads: Family<One, Counter>,
    shared_state: Family<One, Counter>,
    shared_state_reachable: Gauge,
    recording: Family<One, Counter>,
    telemetry: Family<One, Counter>,
    /// Stream finalisations (each stream finalises exactly once).
    pub stream_finalizations: Counter,
    /// Streams started.
    pub streams_started: Counter,
    /// Request counters by provider, then status.
    request_handles: Handles<Vec<(u16, Counter)>>,
    latency_handles: Handles<Histogram>,
    queue_handles: Handles<Gauge>,
}

fn histogram() -> Histogram {
    // 5 ms … ~40 s.
    Histogram::new(exponential_buckets(0.005, 2.0, 14))
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("ferroute");
        let requests = Family::<Two, Counter>::default();
        let upstream_latency = Family::<One, Histogram>::new_with_constructor(histogram as fn() -> Histogram);
        let breaker_state = Family::<One, Gauge>::default();
        let connection_cooling = Family::<One, Gauge>::default();
        let queue_depth = Family::<One, Gauge>::default();
        let translations = Family::<Two, Counter>::default();
        let stream_finalizations = Counter::default();
        let streams_started = Counter::default();
        registry.register("requests", "Client requests by final status and provider", requests.clone());
        registry.register("upstream_latency_seconds", "Time to upstream response headers", upstream_latency.clone());
        registry.register(
            "breaker_state",
            "Provider breaker: 0 closed, 1 degraded, 2 half-open, 3 open",
            breaker_state.clone(),
        );
        registry.register(
            "connection_cooling",
            "1 while a connection is cooling down or terminal",
            connection_cooling.clone(),
        );
        registry.register("queue_depth", "Requests waiting in an admission queue", queue_depth.clone());
        let leases_active = Gauge::default();
        registry.register("leases_active", "Active exclusive session leases (M14)", leases_active.clone());
        let session_pins = Gauge::default();
        registry.register("session_pins", "Fresh session affinity pins (M5)", session_pins.clone());
        registry.register(
            "stream_finalizations",
            "Streams finalised (usage and permits released)",
            stream_finalizations.clone(),
        );
        registry.register("streams_started", "Streams started", streams_started.clone());
        registry.register(
            "translations",
            "Upstream attempts whose request was translated, by client API and provider format",
            translations.clone(),
        );
        let usage_limit = Family::<Two, Counter>::default();
        registry.register(
            "usage_limit_events",
            "Claude usage-limit handling (M4) by connection and event: accepted, ended_<reason>, reset_<outcome>, slow_wait",
            usage_limit.clone(),
        );
        let oauth_refresh = Family::<Two, Counter>::default();
        registry.register(
            "oauth_refresh",
            "OAuth token refreshes by connection and outcome: refreshed, retry, invalid_grant",
            oauth_refresh.clone(),
        );
        let config_reloads = Family::<One, Counter>::default();
        registry.register(
            "config_reloads",
            "Config reloads (SIGHUP or the admin API) by result: ok, refused",
            config_reloads.clone(),
        );
        let shared_state = Family::<One, Counter>::default();
        registry.register(
            "shared_state_changes",
            "Resilience state shared with other replicas ([state] backend = \"redis\") by event: published, applied, dropped, error",
            shared_state.clone(),
        );
        let shared_state_reachable = Gauge::default();
        registry.register(
            "shared_state_reachable",
            "1 while the shared state store answers (always 0 without one)",
            shared_state_reachable.clone(),
        );
        let recording = Family::<One, Counter>::default();
        registry.register(
            "recording_records",
            "Flight recorder records ([recording]) by event: written, dropped (the queue was full)",
            recording.clone(),
        );
        let telemetry = Family::<One, Counter>::default();
        registry.register(
            "telemetry_spans",
            "OpenTelemetry spans ([telemetry]) by event: exported, dropped (the queue was full), failed (the collector refused or was unreachable)",
            telemetry.clone(),
        );
        Metrics {
            registry,
            recording,
            telemetry,
            shared_state,
            shared_state_reachable,
            config_reloads,
            usage_limit,
            oauth_refresh,
            requests,
            upstream_latency,
            breaker_state,
            connection_cooling,
            queue_depth,
            leases_active,
            session_pins,
            translations,
            stream_finalizations,
            streams_started,
            request_handles: Handles::default(),
            latency_handles: Handles::default(),
            queue_handles: Handles::default(),
        }
    }

    /// Counts one attempt sent to a provider of another format than the client's API.
    pub fn translation(&self, api: &str, format: &str) {
        self.translations.get_or_create(&[("api", api.to_owned()), ("format", format.to_owned())]).inc();
    }

    /// Brings the shared-state counters up to the replica link's own.
    pub fn shared_state(&self, reachable: bool, counts: [(&str, u64); 4]) {
        self.shared_state_reachable.set(i64::from(reachable));
        for (event, total) in counts {
            let c = self.shared_state.get_or_create(&[("event", event.to_owned())]);
            c.inc_by(total.saturating_sub(c.get()));
        }
    }

    /// Brings the span export's counters up to its own.
    pub fn telemetry(&self, exported: u64, dropped: u64, failed: u64) {
        for (event, total) in [("exported", exported), ("dropped", dropped), ("failed", failed)] {
            let c = self.telemetry.get_or_create(&[("event", event.to_owned())]);
            c.inc_by(total.saturating_sub(c.get()));
        }
    }

    /// Brings the flight recorder's counters up to its own.
    pub fn recording(&self, written: u64, dropped: u64) {
        for (event, total) in [("written", written), ("dropped", dropped)] {
            let c = self.recording.get_or_create(&[("event", event.to_owned())]);
            c.inc_by(total.saturating_sub(c.get()));
        }
    }

    /// Counts one config reload by result (`ok`, `refused`).
    pub fn config_reload(&self, result: &str) {
        self.config_reloads.get_or_create(&[("result", result.to_owned())]).inc();
    }

    /// Counts one M4 event of a connection.
    pub fn usage_limit(&self, connection: &str, event: &str) {
        self.usage_limit.get_or_create(&[("connection", connection.to_owned()), ("event", event.to_owned())]).inc();
    }

    /// Counts one OAuth refresh of a connection by its outcome.
    pub fn oauth_refresh(&self, connection: &str, outcome: &str) {
        self.oauth_refresh
            .get_or_create(&[("connection", connection.to_owned()), ("outcome", outcome.to_owned())])
            .inc();
    }

    /// Counts one client response.
    pub fn request(&self, status: u16, provider: &str) {
        let by_provider = &self.request_handles.map;
        if let Some(by_status) = by_provider.read().unwrap_or_else(|p| p.into_inner()).get(provider)
            && let Some((_, c)) = by_status.iter().find(|(s, _)| *s == status)
        {
            c.inc();
            return;
        }
        let c =
            self.requests.get_or_create(&[("status", status.to_string()), ("provider", provider.to_owned())]).clone();
        c.inc();
        let mut map = by_provider.write().unwrap_or_else(|p| p.into_inner());
        let by_status = map.entry(provider.to_owned()).or_default();
        if !by_status.iter().any(|(s, _)| *s == status) {
            by_status.push((status, c));
        }
    }

    /// Records an upstream's time to headers.
    pub fn upstream_latency(&self, provider: &str, seconds: f64) {
        self.latency_handles.with(
            provider,
            || self.upstream_latency.get_or_create(&[("provider", provider.to_owned())]).clone(),
            |h| h.observe(seconds),
        );
    }

    /// Sets a breaker gauge.
    pub fn breaker(&self, provider: &str, value: i64) {
        self.breaker_state.get_or_create(&[("provider", provider.to_owned())]).set(value);
    }

    /// Sets a connection gauge.
    pub fn cooling(&self, connection: &str, cooling: bool) {
        self.connection_cooling.get_or_create(&[("connection", connection.to_owned())]).set(i64::from(cooling));
    }

    /// Sets a queue gauge.
    pub fn queue(&self, queue: &str, depth: usize) {
        self.queue_handles.with(
            queue,
            || self.queue_depth.get_or_create(&[("queue", queue.to_owned())]).clone(),
            |g| {
                g.set(depth as i64);
            },
        );
    }

    /// Sets the session gauges (read at scrape time).
    pub fn sessions(&self, leases: u64, pins: usize) {
        self.leases_active.set(leases.min(i64::MAX as u64) as i64);
        self.session_pins.set(pins as i64);
    }

    /// The text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_handles_count_into_the_families_series() {
        let m = Metrics::new();
        for (status, provider) in [(200, "a"), (200, "a"), (429, "a"), (200, "b"), (429, "a"), (200, "a")] {
            m.request(status, provider);
        }
        m.upstream_latency("a", 0.001);
        m.upstream_latency("a", 100.0);
        m.upstream_latency("b", 0.001);
        m.queue("a:k1", 3);
        m.queue("a:k1", 1);
        m.queue("b:k2", 2);
        let text = m.encode();
        for line in [
            r#"ferroute_requests_total{status="200",provider="a"} 3"#,
            r#"ferroute_requests_total{status="429",provider="a"} 2"#,
            r#"ferroute_requests_total{status="200",provider="b"} 1"#,
            r#"ferroute_upstream_latency_seconds_count{provider="a"} 2"#,
            r#"ferroute_upstream_latency_seconds_count{provider="b"} 1"#,
            r#"ferroute_queue_depth{queue="a:k1"} 1"#,
            r#"ferroute_queue_depth{queue="b:k2"} 2"#,
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
    }
}
