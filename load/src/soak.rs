//! The goose soak of `GET /api/monitoring/health`: thresholds on p95 latency and error rate,
//! asserted on goose's own metrics, and goose's HTML report. Loopback only; goose's telnet
//! controller is switched off and its websocket controller stays off (0.19's default).

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
}

/// What a soak observed.
#[derive(Debug, Clone)]
pub struct SoakReport {
    /// Requests sent.
    pub requests: usize,
    /// Each threshold: rule, observed value, passed.
    pub thresholds: Vec<(String, String, bool)>,
}

impl SoakReport {
    /// Whether every threshold passed.
    pub fn passed(&self) -> bool {
        self.thresholds.iter().all(|t| t.2)
    }
}

async fn health(user: &mut GooseUser) -> TransactionResult {
    let _ = user.get("/api/monitoring/health").await?;
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
    let result = GooseAttack::initialize_with_config(GooseConfiguration::default())?
        .register_scenario(scenario!("health").register_transaction(transaction!(health)))
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
    let thresholds = metrics
        .thresholds
        .iter()
        .map(|t| (t.rule.clone(), t.observed.clone(), !failed.iter().any(|f| f.rule == t.rule)))
        .collect();
    Ok(SoakReport { requests, thresholds })
}
