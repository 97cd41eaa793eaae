//! What the dashboard reads beyond health (admin):
//! - `GET /api/monitoring/dashboard`: answers and errors per provider and minute over the last
//!   15 minutes; per connection the requests in flight and queued, its session pins and its
//!   last error as the upstream worded it (cut to 300 characters); each
//!   combo's targets with what excludes each connection now and its last request paths; the
//!   session pins (session keys hashed) and the active leases (owners hashed, as stored).
//! - `GET /api/monitoring/timeline`: the last hour of breaker, connection, lockout and lane
//!   states as SVG, drawn by the renderer `sim svg` uses.

use crate::edge::errors::{Body, full, json_response};
use crate::request::resolve::resolve;
use crate::sessions::leases::LeaseBackend;
use crate::state::clock::{ms, rfc3339};
use crate::state::gateway::Gateway;
use crate::state::history::rates::MINUTES;
use ferroute_core::session::key::sha256_hex;
use http::Response;
use hyper_util::client::legacy::connect::Connect;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// Pins and leases listed at most (the counts are always whole).
pub const LISTED: usize = 500;

/// The first 12 hex digits of a hash: enough to tell rows apart, not to name anyone.
fn short(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

fn rates<C: Connect + Clone + Send + Sync + 'static>(gw: &Gateway<C>) -> Value {
    let minute = gw.clock.wall_now_ms() / 60_000;
    let rows = gw.history.rates().view(minute);
    json!({
        "minutes": MINUTES,
        "until": rfc3339((minute + 1) * 60_000),
        "providers": rows.iter().map(|r| json!({
            "provider": r.provider,
            "requests": r.requests,
            "errors": r.errors,
            "requests_15m": r.requests.iter().map(|&n| u64::from(n)).sum::<u64>(),
            "errors_15m": r.errors.iter().map(|&n| u64::from(n)).sum::<u64>(),
        })).collect::<Vec<_>>(),
    })
}

fn combos<C: Connect + Clone + Send + Sync + 'static>(gw: &Gateway<C>) -> Vec<Value> {
    let now = gw.clock.now();
    gw.config
        .combos
        .iter()
        .map(|combo| {
            let targets = match resolve(&gw.config, &combo.name) {
                Ok(plan) => {
                    let cands = gw.candidates(&plan);
                    let reasons: Vec<Option<&'static str>> = gw
                        .with_engine(|e| cands.iter().map(|c| e.exclusion(now, c).map(|(r, _)| r.as_str())).collect());
                    let mut by_target: BTreeMap<usize, (String, Vec<Value>)> = BTreeMap::new();
                    for (t, why) in plan.targets.iter().zip(reasons) {
                        let (p, c) = gw.parts(t);
                        let entry = by_target
                            .entry(t.target_index)
                            .or_insert_with(|| (format!("{}/{}", p.id, t.model), Vec::new()));
                        entry.1.push(json!({"connection": c.id, "excluded": why}));
                    }
                    by_target
                        .into_values()
                        .map(|(target, connections)| json!({"target": target, "connections": connections}))
                        .collect()
                }
                Err(_) => Vec::new(),
            };
            json!({
                "name": combo.name,
                "strategy": combo.strategy,
                "targets": targets,
                "recent": gw.history.paths().of(&combo.name),
            })
        })
        .collect()
}

/// `GET /api/monitoring/dashboard`.
pub async fn dashboard<C: Connect + Clone + Send + Sync + 'static>(gw: &Gateway<C>) -> Response<Body> {
    let now = gw.clock.now();
    let (in_flight, pins) = gw.with_engine(|e| {
        let in_flight: Vec<u32> = gw.config.connections.iter().map(|c| e.in_flight(&c.id)).collect();
        (in_flight, e.affinity().pins(now))
    });
    let queues: BTreeMap<String, (usize, usize)> = gw.queue_depths().into_iter().map(|(k, q, r)| (k, (q, r))).collect();
    let mut pinned: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, _, connection, _) in &pins {
        *pinned.entry(connection.as_str()).or_default() += 1;
    }
    let connections: Vec<Value> = gw
        .config
        .connections
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let (queued, running) = queues.get(gw.endpoints.queue_key(i)).copied().unwrap_or((0, 0));
            json!({
                "id": c.id,
                "provider": c.provider,
                "in_flight": in_flight.get(i).copied().unwrap_or(0),
                "queued": queued,
                "running": running,
                "pins": pinned.get(c.id.as_str()).copied().unwrap_or(0),
                "last_error": gw.history.last_error(&c.id),
            })
        })
        .collect();
    let mut pin_rows: Vec<Value> = pins
        .iter()
        .take(LISTED)
        .map(|(session, provider, connection, left)| {
            json!({
                "session": short(&sha256_hex(session.as_bytes())),
                "provider": provider,
                "connection": connection,
                "expires_in_ms": ms(*left),
            })
        })
        .collect();
    pin_rows.sort_by(|a, b| a["connection"].as_str().cmp(&b["connection"].as_str()));
    let wall = gw.clock.wall_now_ms();
    let leases = match LeaseBackend::of(gw) {
        Some(b) => match b.list(wall).await {
            Ok(all) => json!({
                "active": all.len(),
                "items": all.iter().take(LISTED).map(|l| json!({
                    "owner": short(&l.owner_hash),
                    "generation": l.generation,
                    "key": l.key_id,
                    "connection": l.connection,
                })).collect::<Vec<_>>(),
            }),
            Err(e) => json!({"active": null, "items": [], "error": e}),
        },
        None => json!({"active": null, "items": [], "error": "no state store: leases are off"}),
    };
    let body = json!({
        "timestamp": rfc3339(wall),
        "rates": rates(gw),
        "connections": connections,
        "combos": combos(gw),
        "pins": {"active": pins.len(), "items": pin_rows},
        "leases": leases,
    });
    json_response(200, body.to_string())
}

/// `GET /api/monitoring/timeline`.
pub fn timeline<C: Connect + Clone + Send + Sync + 'static>(gw: &Gateway<C>) -> Response<Body> {
    let now = gw.clock.wall_now_ms();
    let title = format!("Ferroute: state changes up to {} (at most the last hour)", rfc3339(now));
    let svg = gw.history.timeline().svg(now, &title);
    Response::builder()
        .status(200)
        .header("content-type", "image/svg+xml")
        .header("content-security-policy", "default-src 'none'; style-src 'unsafe-inline'")
        .header("x-content-type-options", "nosniff")
        .header("cache-control", "no-store")
        .body(full(svg))
        .unwrap_or_else(|_| json_response(500, json!({"error": {"message": "timeline"}}).to_string()))
}
