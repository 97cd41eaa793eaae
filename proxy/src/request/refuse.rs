//! Answers that end a request without an upstream success: the refusal the core chose when
//! nothing can run, the last upstream failure, and what a combo answer tells the client in its
//! `X-Ferroute-Combo-*` headers and `diagnostics` / `recovery_hint`.

use crate::edge::errors::{Body, ErrorShape, ProxyError, Source, retry_after_secs};
use crate::request::endpoint::SELECTED;
use crate::request::resolve::Plan;
use crate::state::gateway::Gateway;
use ferroute_core::engine::{Exclusion, ExclusionReason, Refusal, refusal};
use http::{HeaderValue, Response};
use hyper_util::client::legacy::connect::Connect;
use std::collections::BTreeSet;
use std::time::Duration;

/// Header: how many targets the combo names.
pub const POOL_SIZE: &str = "x-ferroute-combo-pool-size";
/// Header: upstream attempts this request made.
pub const ATTEMPTED: &str = "x-ferroute-combo-attempted";
/// Header: `provider/model:reason,…` of targets excluded by resilience state (≤ 900 chars).
pub const EXCLUDED: &str = "x-ferroute-combo-excluded";
/// Header: why a combo request ended without an answer.
pub const TERMINAL_REASON: &str = "x-ferroute-combo-terminal-reason";

/// What a combo request did, for its headers and diagnostics.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Targets the combo names.
    pub pool: usize,
    /// Upstream attempts made.
    pub attempted: u32,
    /// Targets excluded by resilience state, as `provider/model` and reason.
    pub excluded: Vec<(String, &'static str)>,
    /// The targets attempted, in order, as `provider/model`.
    pub order: Vec<std::sync::Arc<str>>,
}

impl Report {
    /// Notes the attempts made and sets the combo headers on `resp` (`terminal`: why it
    /// ended, for failures).
    pub fn answered(&mut self, resp: &mut Response<Body>, attempted: u32, terminal: Option<&str>) {
        self.attempted = attempted;
        self.apply(resp, terminal);
    }

    /// Sets the combo headers on `resp` (`terminal`: why it ended, for failures).
    pub fn apply(&self, resp: &mut Response<Body>, terminal: Option<&str>) {
        let h = resp.headers_mut();
        h.insert(POOL_SIZE, HeaderValue::from(self.pool as u64));
        h.insert(ATTEMPTED, HeaderValue::from(self.attempted));
        let mut excluded = String::new();
        for (target, reason) in &self.excluded {
            let item = format!("{target}:{reason}");
            if excluded.len() + item.len() + 1 > 900 {
                break;
            }
            if !excluded.is_empty() {
                excluded.push(',');
            }
            excluded.push_str(&item);
        }
        if !excluded.is_empty()
            && let Ok(v) = HeaderValue::from_str(&excluded)
        {
            h.insert(EXCLUDED, v);
        }
        if let Some(t) = terminal
            && let Ok(v) = HeaderValue::from_str(t)
        {
            h.insert(TERMINAL_REASON, v);
        }
    }

    /// The `diagnostics` object of a terminal combo answer.
    pub fn diagnostics(&self, terminal: &str, recovery: &serde_json::Value) -> serde_json::Value {
        let excluded: Vec<serde_json::Value> = self
            .excluded
            .iter()
            .take(64)
            .map(|(t, r)| {
                let (p, m) = t.split_once('/').unwrap_or((t.as_str(), ""));
                serde_json::json!({"provider": p, "model": m, "reason": r})
            })
            .collect();
        let order: Vec<serde_json::Value> = self
            .order
            .iter()
            .take(64)
            .map(|t| {
                let (p, m) = t.split_once('/').unwrap_or((t, ""));
                serde_json::json!({"provider": p, "model": m})
            })
            .collect();
        serde_json::json!({
            "pool_size": self.pool,
            "attempted": self.attempted,
            "excluded": excluded,
            "attempt_order": order,
            "terminal_reason": terminal,
            "recovery": recovery,
        })
    }
}

/// What the client can do next, by terminal reason.
pub fn recovery(terminal: &str, retry_after: Option<Duration>) -> serde_json::Value {
    let (action, next) = match terminal {
        "all_targets_cooling_down" => (
            "wait",
            "Every target is temporarily excluded by resilience state (model lockout, circuit breaker or cooldown); wait for the cooldown and retry, or switch combo.",
        ),
        "no_executable_targets" => (
            "switch-combo",
            "This combo has no executable targets in the current account pool. Pick a different combo or add connections for its providers.",
        ),
        "retry_budget_exhausted" => ("retry", "The request used its attempt budget; retry later or switch combo."),
        _ => ("retry", "Every target failed; retry, or switch combo."),
    };
    let mut r = serde_json::json!({"action": action, "next_step": next});
    if let Some(d) = retry_after {
        r["retry_after_seconds"] = retry_after_secs(d).min(3600).into();
    }
    r
}

/// Turns an error into the response, counting it and naming the connection that last failed.
pub fn finish(
    gw: &Gateway<impl Connect + Clone + Send + Sync + 'static>,
    e: ProxyError,
    connection: Option<&str>,
    shape: ErrorShape,
) -> Response<Body> {
    let provider = e.extra.get("provider").and_then(|p| p.as_str()).unwrap_or("").to_owned();
    gw.count_answer(e.status, &provider);
    let mut resp = e.into_response_as(shape);
    if let Some(c) = connection.filter(|c| !c.is_empty())
        && let Ok(v) = HeaderValue::from_str(c)
    {
        resp.headers_mut().insert(SELECTED, v);
    }
    resp
}

/// 404 `no_executable_targets`: the combo (or provider) has targets, but none with a
/// connection to run on.
pub fn no_executable(plan: &Plan) -> ProxyError {
    let what = if plan.combo { format!("combo {:?}", plan.key) } else { format!("model {:?}", plan.key) };
    let report = Report { pool: plan.pool.len(), ..Report::default() };
    let rec = recovery("no_executable_targets", None);
    ProxyError::new(
        Source::Downstream,
        404,
        "no_executable_targets",
        format!("{what} has no executable targets: none of its providers has a connection"),
    )
    .with("diagnostics", report.diagnostics("no_executable_targets", &rec))
    .with("recovery_hint", rec)
}

/// The answer when nothing is eligible and nothing was tried: the core chooses the refusal,
/// this turns it into a status and a body.
pub fn no_target<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Gateway<C>,
    plan: &Plan,
    ex: &[Exclusion],
    report: &Report,
) -> ProxyError {
    let cands = gw.candidates(plan);
    let relevant: Vec<&Exclusion> = ex.iter().filter(|e| e.reason != ExclusionReason::Skipped).collect();
    let provider = relevant.first().map(|e| gw.parts(&plan.targets[e.index]).0.id.clone()).unwrap_or_default();
    let per_connection = || {
        let excluded: Vec<serde_json::Value> = relevant
            .iter()
            .map(|e| {
                let (p, c) = gw.parts(&plan.targets[e.index]);
                serde_json::json!({
                    "target": format!("{}/{}", p.id, plan.targets[e.index].model),
                    "provider": p.id,
                    "model": &*plan.targets[e.index].model,
                    "connection": c.id,
                    "reason": e.reason.as_str(),
                    "retry_after_s": e.retry_after.as_secs_f64().ceil() as u64,
                })
            })
            .collect();
        excluded
    };
    match refusal(&cands, ex, plan.combo) {
        Refusal::AllTerminal => {
            let kinds: BTreeSet<&str> = relevant.iter().map(|e| e.reason.as_str()).collect();
            let kinds = kinds.into_iter().collect::<Vec<_>>().join(", ");
            let n = relevant.len();
            ProxyError::new(
                Source::Upstream,
                401,
                "connections_unavailable",
                format!("all {n} connection(s) are unusable ({kinds}) until their credentials change or an operator resets them"),
            )
            .with("provider", provider.into())
        }
        Refusal::CircuitOpen { retry_after } => ProxyError::new(
            Source::Upstream,
            503,
            "provider_circuit_open",
            format!("Provider {provider} circuit breaker is open"),
        )
        .retry_after(Some(retry_after))
        .with("provider", provider.into())
        .header("x-ferroute-provider-breaker", "open"),
        Refusal::ConnectionsCooling { retry_after } => ProxyError::new(
            Source::Upstream,
            429,
            "all_connections_cooling_down",
            format!("every connection of {provider} is cooling down"),
        )
        .retry_after(Some(retry_after))
        .with("provider", provider.into())
        .with("diagnostics", serde_json::json!({ "excluded": per_connection() })),
        Refusal::AllCooling { retry_after } => {
            let rec = recovery("all_targets_cooling_down", Some(retry_after));
            let mut diagnostics = report.diagnostics("all_targets_cooling_down", &rec);
            diagnostics["excluded"] = per_connection().into();
            let list: Vec<String> = relevant
                .iter()
                .map(|e| {
                    let (p, _) = gw.parts(&plan.targets[e.index]);
                    format!("{}/{}: {}", p.id, plan.targets[e.index].model, e.reason.as_str())
                })
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            ProxyError::new(
                Source::Upstream,
                503,
                "all_targets_cooling_down",
                format!("every target of {} is cooling down: {}", plan.key, list.join(", ")),
            )
            .retry_after(Some(retry_after))
            .with("diagnostics", diagnostics)
            .with("recovery_hint", rec)
        }
        Refusal::NoExecutable => {
            let rec = recovery("no_executable_targets", None);
            let mut diagnostics = report.diagnostics("no_executable_targets", &rec);
            diagnostics["excluded"] = per_connection().into();
            ProxyError::new(
                Source::Upstream,
                404,
                "no_executable_targets",
                format!("no target of {} can run", plan.key),
            )
            .with("diagnostics", diagnostics)
            .with("recovery_hint", rec)
        }
    }
}
