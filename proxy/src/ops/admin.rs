//! Health, admin and model-listing endpoints (M17).

use crate::edge::body::read_json;
use crate::edge::errors::{Body, ProxyError, Source, json_response};
use crate::state::clock::{ms, rfc3339};
use crate::state::gateway::Gateway;
use ferroute_core::breaker::BreakerState;
use ferroute_core::types::ConnectionStatus;
use ferroute_core::usage_limit::LaneView;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::Connect;
use std::sync::Arc;

/// One model lockout as the health JSON and the model-cooldowns API show it.
fn lockout_json(
    clock: &crate::state::clock::Clock,
    l: &ferroute_core::lockout::LockoutEntry,
    now: std::time::Instant,
) -> serde_json::Value {
    serde_json::json!({
        "provider": l.provider,
        "connection": l.connection,
        "model": l.model,
        "quota_family": l.family,
        "reason": l.reason.as_str(),
        "expires_at": rfc3339(clock.wall_ms(l.until)),
        "remaining_ms": ms(l.until.saturating_duration_since(now)),
        "failure_count": l.failure_count,
    })
}

/// `GET /api/monitoring/health`.
/// `overrides` are the runtime overrides of `[resilience]` in force (shown as
/// `resilience_overrides`).
pub async fn health<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Gateway<C>,
    overrides: serde_json::Value,
) -> Response<Body> {
    let leases = crate::sessions::leases::active(gw).await;
    let now = gw.clock.now();
    let (providers, connections, lockouts, pins) = gw.with_engine(|e| {
        let providers: Vec<serde_json::Value> = gw
            .config
            .providers
            .iter()
            .map(|p| {
                let b = e.breakers().get(&p.id);
                serde_json::json!({
                    "id": p.id,
                    "class": p.class,
                    "state": b.map_or(BreakerState::Closed, |b| b.state(now)).as_str(),
                    "failures": b.map_or(0, |b| b.failure_count()),
                    "retry_after_ms": b.map_or(0, |b| ms(b.retry_after(now))),
                })
            })
            .collect();
        let connections: Vec<serde_json::Value> = gw
            .config
            .connections
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let s = e.connection(&c.id);
                let mut j = serde_json::json!({
                    "id": c.id,
                    "provider": c.provider,
                    "proxy": gw.route_shown(i),
                    "status": s.status(now).as_str(),
                    "rate_limited_until": s.rate_limited_until(now).map(|u| rfc3339(gw.clock.wall_ms(u))),
                    "backoff_level": s.backoff_level(),
                    "last_error_type": s.last_error_type().map(|r| r.as_str()),
                    "last_error_code": s.error_code(),
                });
                if c.usage_limit.as_ref().is_some_and(|u| u.options().any()) {
                    let lane = e.lane_view(&c.id, now);
                    let until = match lane {
                        LaneView::Off => None,
                        LaneView::Active { remaining }
                        | LaneView::Guard { remaining }
                        | LaneView::BudgetExhausted { remaining } => Some(rfc3339(gw.clock.wall_ms(now + remaining))),
                    };
                    let reset_next = e.lanes().reset_next(&c.id, now).map(|t| rfc3339(gw.clock.wall_ms(t)));
                    j["usage_limit"] = serde_json::json!({
                        "lane": lane.as_str(),
                        "until": until,
                        "next_reset_try": reset_next,
                    });
                }
                if let Some(v) = gw.accounts.view(&c.id) {
                    j["oauth"] = serde_json::json!({
                        "expires_at": rfc3339(v.expires_at),
                        "last_refresh": v.last_refresh.map(rfc3339),
                        "next_refresh": v.next_refresh.map(rfc3339),
                        "failures": v.failures,
                        "state": v.state,
                    });
                }
                j
            })
            .collect();
        let lockouts: Vec<serde_json::Value> =
            e.lockouts().list(now).into_iter().map(|l| lockout_json(&gw.clock, &l, now)).collect();
        (providers, connections, lockouts, e.affinity().len(now))
    });
    let queues: Vec<serde_json::Value> = gw
        .queue_depths()
        .into_iter()
        .map(|(k, q, r)| serde_json::json!({"queue": k, "queued": q, "running": r}))
        .collect();
    let any_open = providers.iter().any(|p| p["state"] != "CLOSED");
    let body = serde_json::json!({
        "status": if any_open { "degraded" } else { "healthy" },
        "version": env!("CARGO_PKG_VERSION"),
        "uptime_s": gw.clock.uptime().as_secs(),
        "timestamp": rfc3339(gw.clock.wall_now_ms()),
        "providers": providers,
        "connections": connections,
        "model_lockouts": lockouts,
        "queues": queues,
        "session_pins": pins,
        "leases": { "active": leases },
        "state": state_json(gw),
        "resilience_overrides": overrides,
        "emergency_fallback": {
            "target": gw.config.emergency_fallback.target,
            "enabled": gw.emergency.load(std::sync::atomic::Ordering::Relaxed),
        },
    });
    json_response(200, body.to_string())
}

/// Where resilience state lives, and whether the shared store answers.
fn state_json<C: Connect + Clone + Send + Sync + 'static>(gw: &Gateway<C>) -> serde_json::Value {
    match gw.replicas() {
        Some(r) => serde_json::json!({
            "backend": "redis",
            "replica": r.name(),
            "reachable": r.stats().reachable(),
            "published": r.stats().published(),
            "applied": r.stats().applied(),
            "dropped": r.stats().dropped(),
            "errors": r.stats().errors(),
        }),
        None => serde_json::json!({ "backend": "sqlite" }),
    }
}

/// `POST /api/resilience/reset`: every breaker closed, every lockout cleared.
pub fn reset<C: Connect + Clone + Send + Sync + 'static>(gw: &Gateway<C>) -> Response<Body> {
    let now = gw.clock.now();
    let n = gw.with_engine(|e| e.reset_all(now));
    gw.settle();
    gw.flush();
    tracing::warn!(breakers = n, "operator reset of breakers and model lockouts");
    json_response(200, serde_json::json!({"ok": true, "resetCount": n, "message": format!("Reset {n} circuit breaker(s) and model lockouts")}).to_string())
}

/// `GET /api/resilience/model-cooldowns`.
pub fn list_lockouts<C: Connect + Clone + Send + Sync + 'static>(gw: &Gateway<C>) -> Response<Body> {
    let now = gw.clock.now();
    let items: Vec<serde_json::Value> =
        gw.with_engine(|e| e.lockouts().list(now).into_iter().map(|l| lockout_json(&gw.clock, &l, now)).collect());
    json_response(200, serde_json::json!({ "items": items }).to_string())
}

/// `DELETE /api/resilience/model-cooldowns` with `{provider, connection, model}`,
/// `{provider, model}` or `{all: true}`.
pub async fn clear_lockouts<C: Connect + Clone + Send + Sync + 'static>(
    gw: Arc<Gateway<C>>,
    req: Request<Incoming>,
) -> Response<Body> {
    let body = match read_json(req, 64 * 1024, std::time::Duration::from_millis(gw.config.server.body_read_timeout_ms))
        .await
    {
        Ok((_, b)) => b,
        Err(e) => return e.into_response(),
    };
    let field =
        |k: &str| body.get(k).and_then(|v| v.as_str()).map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned);
    if body.get("all").and_then(|v| v.as_bool()) == Some(true) {
        let n = gw.with_engine(|e| e.clear_lockouts(None));
        gw.settle();
        return json_response(200, serde_json::json!({"ok": true, "clearedAll": true, "removed": n}).to_string());
    }
    let (Some(provider), Some(model)) = (field("provider"), field("model")) else {
        return ProxyError::bad_request(
            "missing_fields",
            "send {\"provider\",\"model\"}, {\"provider\",\"connection\",\"model\"} or {\"all\":true}",
        )
        .into_response();
    };
    let connection = field("connection");
    let removed = gw.with_engine(|e| e.clear_lockouts(Some((&provider, connection.as_deref(), &model))));
    gw.settle();
    json_response(200, serde_json::json!({"ok": true, "removed": removed > 0}).to_string())
}

/// `GET|POST /api/resilience/emergency-fallback`: read or switch the M16 emergency target
/// (`{"enabled": true|false}`); the choice is stored and survives a restart.
pub async fn emergency<C: Connect + Clone + Send + Sync + 'static>(
    gw: Arc<Gateway<C>>,
    req: Request<Incoming>,
) -> Response<Body> {
    let ordering = std::sync::atomic::Ordering::Relaxed;
    if req.method() == http::Method::POST {
        let body =
            match read_json(req, 64 * 1024, std::time::Duration::from_millis(gw.config.server.body_read_timeout_ms))
                .await
            {
                Ok((_, b)) => b,
                Err(e) => return e.into_response(),
            };
        let Some(enabled) = body.get("enabled").and_then(|v| v.as_bool()) else {
            return ProxyError::bad_request("missing_enabled", "send {\"enabled\": true} or {\"enabled\": false}")
                .into_response();
        };
        if enabled && gw.config.emergency_fallback.target.is_none() {
            return ProxyError::bad_request(
                "no_emergency_target",
                "no [emergency_fallback] target is configured; add one to the config first",
            )
            .into_response();
        }
        gw.switch_emergency(enabled, true);
        tracing::warn!(enabled, target = ?gw.config.emergency_fallback.target, "operator switched the emergency fallback");
    }
    json_response(
        200,
        serde_json::json!({
            "target": gw.config.emergency_fallback.target,
            "enabled": gw.emergency.load(ordering),
        })
        .to_string(),
    )
}

/// `GET /v1/models`.
pub fn models<C: Connect + Clone + Send + Sync + 'static>(gw: &Gateway<C>, anthropic: bool) -> Response<Body> {
    // Every model is served on every endpoint (requests are translated between formats), so
    // one list serves all; an Anthropic client (it sends `anthropic-version`) gets its shape.
    let mut ids: Vec<(String, String)> = Vec::new();
    for p in &gw.config.providers {
        for m in &p.models {
            ids.push((format!("{}/{m}", p.id), p.id.clone()));
        }
    }
    for c in &gw.config.combos {
        ids.push((c.name.clone(), "ferroute-combo".into()));
    }
    let body = if anthropic {
        let data: Vec<serde_json::Value> = ids
            .iter()
            .map(|(id, _)| serde_json::json!({"type": "model", "id": id, "display_name": id, "created_at": "1970-01-01T00:00:00Z"}))
            .collect();
        let first = ids.first().map(|(id, _)| id.clone());
        let last = ids.last().map(|(id, _)| id.clone());
        serde_json::json!({"data": data, "has_more": false, "first_id": first, "last_id": last})
    } else {
        let data: Vec<serde_json::Value> = ids
            .iter()
            .map(|(id, owner)| serde_json::json!({"id": id, "object": "model", "created": 0, "owned_by": owner}))
            .collect();
        serde_json::json!({"object": "list", "data": data})
    };
    json_response(200, body.to_string())
}

/// `GET /metrics`.
pub async fn metrics<C: Connect + Clone + Send + Sync + 'static>(gw: &Gateway<C>) -> Response<Body> {
    let leases = crate::sessions::leases::active(gw).await.unwrap_or(0);
    let now = gw.clock.now();
    let pins = gw.with_engine(|e| e.affinity().len(now));
    gw.metrics.sessions(leases, pins);
    gw.with_engine(|e| {
        for p in &gw.config.providers {
            let state = e.breaker_state(now, &p.id);
            gw.metrics.breaker(
                &p.id,
                match state {
                    BreakerState::Closed => 0,
                    BreakerState::Degraded => 1,
                    BreakerState::HalfOpen => 2,
                    BreakerState::Open => 3,
                },
            );
        }
        for c in &gw.config.connections {
            gw.metrics.cooling(&c.id, e.connection(&c.id).status(now) != ConnectionStatus::Active);
        }
    });
    for (k, q, _) in gw.queue_depths() {
        gw.metrics.queue(&k, q);
    }
    if let Some(r) = gw.replicas() {
        let s = r.stats();
        let counts =
            [("published", s.published()), ("applied", s.applied()), ("dropped", s.dropped()), ("error", s.errors())];
        gw.metrics.shared_state(s.reachable(), counts);
    }
    if let Some(r) = &gw.recorder {
        gw.metrics.recording(r.written(), r.dropped());
    }
    if let Some(t) = gw.telemetry.get() {
        let (exported, dropped, failed) = t.counts();
        gw.metrics.telemetry(exported, dropped, failed);
    }
    let mut resp = Response::new(crate::edge::errors::full(gw.metrics.encode()));
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    resp
}

/// 404 for unknown paths.
pub fn not_found(path: &str) -> Response<Body> {
    ProxyError::new(Source::Downstream, 404, "not_found", format!("no route for {path}")).into_response()
}

/// `POST /api/config/reload`: 200 with what changed, or 422 with every problem of the new
/// config (the running one is kept).
pub fn reload<C: Connect + Clone + Send + Sync + 'static>(serving: &crate::ops::reload::Serving<C>) -> Response<Body> {
    match serving.reload() {
        Ok(report) => json_response(200, serde_json::to_string(&report).unwrap_or_default()),
        Err(e) => {
            let problems: Vec<serde_json::Value> =
                e.0.iter().map(|p| serde_json::json!({"field": p.field, "message": p.message})).collect();
            let body = serde_json::json!({
                "error": {
                    "message": format!("config refused, the running config is kept: {}", e.to_string().trim_end()),
                    "type": "invalid_request_error",
                    "code": "invalid_config",
                    "problems": problems,
                }
            });
            json_response(422, body.to_string())
        }
    }
}

/// 405 for a known path with the wrong method.
pub fn method_not_allowed(path: &str, allowed: &str) -> Response<Body> {
    let mut r = ProxyError::new(Source::Downstream, 405, "method_not_allowed", format!("{path} accepts {allowed}"))
        .into_response();
    if let Ok(v) = http::HeaderValue::from_str(allowed) {
        r.headers_mut().insert(http::header::ALLOW, v);
    }
    r
}
