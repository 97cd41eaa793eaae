//! The goose soak of `GET /api/monitoring/health`: thresholds on p95 latency and error rate,
//! asserted on goose's own metrics, and goose's HTML report. Loopback only; goose's telnet
//! controller is switched off and its websocket controller stays off (0.19's default).
//!
//! It speaks k6's language as well as `load/k6-soak.js` does: the same variables (`BASE_URL`,
//! `SOAK_DURATION`, `SOAK_VUS`), the same thresholds (`http_req_failed: rate<0.01`,
//! `http_req_duration: p(95)<500`), k6's exit code 99 when a threshold is breached, and a
//! summary in k6's shape.

use goose::config::GooseConfiguration;
use goose::prelude::*;

/// What to run.
#[derive(Debug, Clone)]
pub struct SoakOptions {
    /// The gateway's base URL (must be loopback).
    pub url: String,
    /// Run time in seconds.
    pub seconds: usize,
    /// Concurrent users.
    pub users: usize,
    /// Threshold: p95 latency in ms.
    pub p95_ms: u64,
    /// Threshold: error rate in percent.
    pub max_error_rate: f64,
    /// Where the HTML report goes.
    pub report: String,
    /// What each user asks for.
    pub target: Target,
}

/// What the soak's users ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// `GET /api/monitoring/health`.
    Health,
    /// `POST /v1/chat/completions` to the proxied soak's combo ([`crate::proxied::COMBO`]).
    Combo,
    /// The same request straight to the benchmark upstream (model `m`): the baseline the
    /// combo's added latency is measured against.
    Direct,
}

/// k6's exit code when a threshold is breached; the goose soak exits with it too.
pub const THRESHOLDS_BREACHED: i32 = 99;

/// What a soak observed.
#[derive(Debug, Clone)]
pub struct SoakReport {
    /// Requests sent.
    pub requests: usize,
    /// Requests that failed.
    pub failed: usize,
    /// How long the load ran, in seconds.
    pub seconds: usize,
    /// Concurrent users (k6's VUs).
    pub users: usize,
    /// Response times in microseconds: min, average, median, p90, p95, max.
    pub times_us: [u64; 6],
    /// Each threshold: rule, observed value, passed.
    pub thresholds: Vec<(String, String, bool)>,
    /// The thresholds as k6 writes them, with whether each passed.
    pub k6_thresholds: Vec<(String, bool)>,
}

impl SoakReport {
    /// Whether every threshold passed.
    pub fn passed(&self) -> bool {
        self.thresholds.iter().all(|t| t.2)
    }

    /// The end-of-test summary in k6's shape.
    pub fn k6_summary(&self) -> String {
        let ms = |us: u64| format!("{:.2}ms", us as f64 / 1000.0);
        let [min, avg, med, p90, p95, max] = self.times_us;
        let mark = |ok: bool| if ok { "✓" } else { "✗" };
        let duration_ok = self.k6_thresholds.iter().filter(|t| t.0.starts_with("http_req_duration")).all(|t| t.1);
        let failed_ok = self.k6_thresholds.iter().filter(|t| t.0.starts_with("http_req_failed")).all(|t| t.1);
        let rate = if self.requests == 0 { 0.0 } else { self.failed as f64 * 100.0 / self.requests as f64 };
        let per_s = if self.seconds == 0 { 0.0 } else { self.requests as f64 / self.seconds as f64 };
        let mut out = String::new();
        out.push_str(
            "  █ THRESHOLDS

",
        );
        for (rule, ok) in &self.k6_thresholds {
            out.push_str(&format!(
                "    {} '{rule}'
",
                mark(*ok)
            ));
        }
        out.push_str(
            "
  █ TOTAL RESULTS

",
        );
        out.push_str(&format!(
            "    {} http_req_duration..............: avg={} min={} med={} max={} p(90)={} p(95)={}
",
            mark(duration_ok),
            ms(avg),
            ms(min),
            ms(med),
            ms(max),
            ms(p90),
            ms(p95)
        ));
        out.push_str(&format!(
            "    {} http_req_failed................: {rate:.2}%  {} out of {}
",
            mark(failed_ok),
            self.failed,
            self.requests
        ));
        out.push_str(&format!(
            "      http_reqs......................: {}  {per_s:.1}/s
",
            self.requests
        ));
        out.push_str(&format!(
            "      vus............................: {}
",
            self.users
        ));
        out.push_str(&format!(
            "      duration.......................: {}s
",
            self.seconds
        ));
        out
    }
}

/// A k6 duration (`30s`, `30m`, `1h30m`, `1m30s`, `500ms`, or plain seconds), in whole seconds
/// (a part-second rounds up).
pub fn parse_duration(s: &str) -> anyhow::Result<usize> {
    let t = s.trim();
    let bad = || anyhow::anyhow!("duration {s:?}: expected e.g. 30s, 30m, 1h30m or 500ms");
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return t.parse().map_err(|_| bad());
    }
    let mut ms: u128 = 0;
    let mut rest = t;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        let n: u128 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let (unit, len) = if rest.starts_with("ms") {
            (1, 2)
        } else if rest.starts_with('s') {
            (1_000, 1)
        } else if rest.starts_with('m') {
            (60_000, 1)
        } else if rest.starts_with('h') {
            (3_600_000, 1)
        } else {
            return Err(bad());
        };
        ms = ms.saturating_add(n.saturating_mul(unit));
        rest = &rest[len..];
    }
    if t.is_empty() {
        return Err(bad());
    }
    usize::try_from(ms.div_ceil(1000)).map_err(|_| bad())
}

async fn health(user: &mut GooseUser) -> TransactionResult {
    let _ = user.get("/api/monitoring/health").await?;
    Ok(())
}

async fn combo(user: &mut GooseUser) -> TransactionResult {
    chat(user, COMBO_BODY).await
}

async fn direct(user: &mut GooseUser) -> TransactionResult {
    chat(user, DIRECT_BODY).await
}

/// The chat the soak posts to the combo, and straight to the upstream.
const COMBO_BODY: &str = r#"{"model":"soak","messages":[{"role":"user","content":"soak the gateway"}]}"#;
const DIRECT_BODY: &str = r#"{"model":"m","messages":[{"role":"user","content":"soak the gateway"}]}"#;

/// Posts a chat completion and reads the whole answer; a success status whose body is not a
/// chat completion counts as a failure.
async fn chat(user: &mut GooseUser, body: &'static str) -> TransactionResult {
    let builder = user
        .get_request_builder(&GooseMethod::Post, "/v1/chat/completions")?
        .header("content-type", "application/json")
        .body(body);
    let request = GooseRequest::builder()
        .method(GooseMethod::Post)
        .path("/v1/chat/completions")
        .set_request_builder(builder)
        .build();
    let mut goose = user.request(request).await?;
    if let Ok(response) = goose.response {
        let ok = response.status().is_success();
        match response.text().await {
            Ok(text) if !ok || text.contains("\"choices\"") => {}
            Ok(text) => return user.set_failure("not a chat completion", &mut goose.request, None, Some(&text)),
            Err(e) => return user.set_failure(&format!("body: {e}"), &mut goose.request, None, None),
        }
    }
    Ok(())
}

/// Whether `url` points at this machine's loopback.
pub fn is_loopback(url: &str) -> bool {
    let rest = url.trim_start_matches("http://");
    let host = if rest.starts_with('[') {
        rest.split(']').next().map(|h| format!("{h}]")).unwrap_or_default()
    } else {
        rest.split([':', '/']).next().unwrap_or("").to_owned()
    };
    matches!(host.as_str(), "127.0.0.1" | "localhost" | "[::1]")
}

/// Runs the soak.
pub async fn run(o: &SoakOptions) -> anyhow::Result<SoakReport> {
    if !is_loopback(&o.url) {
        anyhow::bail!("the soak only targets loopback; got {}", o.url);
    }
    // Goose reads a run time of 0 as "no limit": a soak must always end by itself.
    if o.seconds == 0 || o.users == 0 {
        anyhow::bail!("the soak needs at least 1 second and 1 user (got {} s, {} users)", o.seconds, o.users);
    }
    let scenario = match o.target {
        Target::Health => scenario!("health").register_transaction(transaction!(health)),
        Target::Combo => scenario!("combo").register_transaction(transaction!(combo)),
        Target::Direct => scenario!("direct").register_transaction(transaction!(direct)),
    };
    let result = GooseAttack::initialize_with_config(GooseConfiguration::default())?
        .register_scenario(scenario)
        .set_default(GooseDefault::Host, o.url.as_str())?
        .set_default(GooseDefault::Users, o.users)?
        .set_default(GooseDefault::IncreaseRate, o.users.to_string().as_str())?
        .set_default(GooseDefault::RunTime, o.seconds)?
        .set_default(GooseDefault::ReportFile, o.report.as_str())?
        .set_default(GooseDefault::Threshold, format!("p95<{}ms", o.p95_ms).as_str())?
        .set_default(GooseDefault::Threshold, format!("error-rate<{}%", o.max_error_rate).as_str())?
        .set_default(GooseDefault::NoTelnet, true)?
        .set_default(GooseDefault::NoPrintMetrics, true)?
        .set_default(GooseDefault::Quiet, 1)?
        .execute()
        .await;
    let (metrics, failed) = match result {
        Ok(m) => (m, Vec::new()),
        Err(GooseError::ThresholdsFailed { failed, metrics }) => (*metrics.0, failed),
        Err(e) => return Err(e.into()),
    };
    let requests = metrics.requests.values().map(|r| r.success_count + r.fail_count).sum();
    let failed_requests = metrics.requests.values().map(|r| r.fail_count).sum();
    let thresholds: Vec<(String, String, bool)> = metrics
        .thresholds
        .iter()
        .map(|t| (t.rule.clone(), t.observed.clone(), !failed.iter().any(|f| f.rule == t.rule)))
        .collect();
    let passed = |prefix: &str| thresholds.iter().filter(|t| t.0.starts_with(prefix)).all(|t| t.2);
    let k6_thresholds = vec![
        (format!("http_req_duration: p(95)<{}", o.p95_ms), passed("p95")),
        (format!("http_req_failed: rate<{}", o.max_error_rate / 100.0), passed("error-rate")),
    ];
    // One route is soaked; its timings are the run's.
    let times_us = metrics
        .requests
        .values()
        .max_by_key(|r| r.raw_data.counter)
        .map(|r| {
            let d = &r.raw_data;
            let avg = if d.counter == 0 { 0 } else { d.total_time_us / d.counter as u64 };
            [
                d.minimum_time_us,
                avg,
                d.percentile_us(0.5),
                d.percentile_us(0.9),
                d.percentile_us(0.95),
                d.maximum_time_us,
            ]
        })
        .unwrap_or_default();
    Ok(SoakReport {
        requests,
        failed: failed_requests,
        seconds: o.seconds,
        users: o.users,
        times_us,
        thresholds,
        k6_thresholds,
    })
}
