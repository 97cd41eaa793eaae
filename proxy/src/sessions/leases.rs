//! `POST /api/v1/session-leases` (M14) and the lease fence of inference requests.
//!
//! Actions: `acquire` (`model`, optional `ttl_ms`), `status`, `renew` (optional `ttl_ms`) and
//! `release`, each with the owner in `X-Ferroute-Lease-Owner` and, but for `acquire`, the
//! lease's `generation` in the body. Errors are `{"error":{"type":"lease_error","code","message"}}`;
//! no body or log line ever carries an owner id or a key.

use crate::config::KeyConfig;
use crate::edge::auth::{self, Client};
use crate::edge::body::read_json;
use crate::edge::errors::{Body, ProxyError, Source, json_response};
use crate::sessions::lease_shared::SharedLeases;
use crate::sessions::lease_store::Acquired;
use crate::state::gateway::Gateway;
use crate::state::interleave;
use crate::state::store::Store;
use ferroute_core::session::lease::{
    Lease, LeaseError, LeaseState, capacity_retry_after, clamp_ttl, fence, owner_hash, parse_generation, valid_owner,
};
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::Connect;
use serde_json::Value;
use std::sync::Arc;

/// Header naming the lease owner.
pub const OWNER: &str = "x-ferroute-lease-owner";
/// Header carrying the lease generation.
pub const GENERATION: &str = "x-ferroute-lease-generation";
/// [`OWNER`] and [`GENERATION`] as header names (looked up on every request, not parsed each time).
static OWNER_HEADER: HeaderName = HeaderName::from_static(OWNER);
static GENERATION_HEADER: HeaderName = HeaderName::from_static(GENERATION);
pub use ferroute_core::session::lease::PERMISSION;

/// A lease error as a response.
pub fn refuse(e: LeaseError) -> ProxyError {
    ProxyError::new(Source::Downstream, e.status(), e.code(), e.message()).with("type", "lease_error".into())
}

fn store_down(e: impl std::fmt::Display) -> ProxyError {
    tracing::error!(error = %e, "lease store failed");
    refuse(LeaseError::ServiceUnavailable)
}

/// Where leases live: the gateway's SQLite store, or Redis when replicas share state. Both
/// give the same answers to the same calls at the same instants (`sim/tests/store_contract.rs`
/// runs one suite against both).
#[derive(Clone, Copy)]
pub enum LeaseBackend<'a> {
    /// This gateway's own store.
    Sqlite(&'a Store),
    /// The store every replica shares (Redis).
    Shared(&'a SharedLeases),
}

impl LeaseBackend<'_> {
    /// The leases of `gw`: in Redis when it shares state, else in its store.
    pub fn of<C: Connect + Clone + Send + Sync + 'static>(gw: &Gateway<C>) -> Option<LeaseBackend<'_>> {
        match gw.replicas() {
            Some(r) => Some(LeaseBackend::Shared(r.leases())),
            None => gw.store.as_deref().map(LeaseBackend::Sqlite),
        }
    }

    /// Acquires a lease on the first of `eligible` no other owner holds (see
    /// [`Store::acquire_lease`]).
    pub async fn acquire(
        &self,
        owner: &str,
        key: &str,
        model: &str,
        eligible: &[String],
        ttl: std::time::Duration,
        now_ms: u64,
    ) -> Result<Acquired, String> {
        interleave::call("lease.acquire", async {
            match self {
                LeaseBackend::Sqlite(s) => {
                    s.acquire_lease(owner, key, model, eligible, ttl, now_ms).map_err(|e| e.to_string())
                }
                LeaseBackend::Shared(r) => {
                    r.acquire(owner, key, model, eligible, ttl, now_ms).await.map_err(|e| e.to_string())
                }
            }
        })
        .await
    }

    /// The owner's lease of generation `g`.
    pub async fn lease(&self, owner: &str, g: u64, now_ms: u64) -> Result<Option<Lease>, String> {
        interleave::call("lease.read", async {
            match self {
                LeaseBackend::Sqlite(s) => s.lease(owner, g, now_ms).map_err(|e| e.to_string()),
                LeaseBackend::Shared(r) => r.lease(owner, g, now_ms).await.map_err(|e| e.to_string()),
            }
        })
        .await
    }

    /// Extends an active lease to `now + ttl`.
    pub async fn renew(
        &self,
        owner: &str,
        g: u64,
        ttl: std::time::Duration,
        now_ms: u64,
    ) -> Result<Option<Lease>, String> {
        interleave::call("lease.renew", async {
            match self {
                LeaseBackend::Sqlite(s) => s.renew_lease(owner, g, ttl, now_ms).map_err(|e| e.to_string()),
                LeaseBackend::Shared(r) => r.renew(owner, g, ttl, now_ms).await.map_err(|e| e.to_string()),
            }
        })
        .await
    }

    /// Releases an active lease.
    pub async fn release(&self, owner: &str, g: u64, now_ms: u64) -> Result<Option<Lease>, String> {
        interleave::call("lease.release", async {
            match self {
                LeaseBackend::Sqlite(s) => s.release_lease(owner, g, now_ms).map_err(|e| e.to_string()),
                LeaseBackend::Shared(r) => r.release(owner, g, now_ms).await.map_err(|e| e.to_string()),
            }
        })
        .await
    }

    /// Ends as INVALIDATED every active lease for which `allowed(key_id, connection)` is
    /// false; returns how many.
    pub async fn invalidate(
        &self,
        allowed: &(dyn Fn(&str, &str) -> bool + Sync),
        now_ms: u64,
    ) -> Result<usize, String> {
        interleave::call("lease.invalidate", async {
            match self {
                LeaseBackend::Sqlite(s) => s.invalidate_leases(&allowed, now_ms).map_err(|e| e.to_string()),
                LeaseBackend::Shared(r) => {
                    let mut n = 0;
                    for l in r.active(now_ms).await.map_err(|e| e.to_string())? {
                        if !allowed(&l.key_id, &l.connection)
                            && r.invalidate(&l.owner_hash, l.generation, now_ms).await.map_err(|e| e.to_string())?
                        {
                            n += 1;
                        }
                    }
                    Ok(n)
                }
            }
        })
        .await
    }

    /// The leases active at `now_ms` (by owner hash).
    pub async fn list(&self, now_ms: u64) -> Result<Vec<crate::sessions::lease_store::ActiveLease>, String> {
        interleave::call("lease.list", async {
            match self {
                LeaseBackend::Sqlite(s) => s.list_leases(now_ms).map_err(|e| e.to_string()),
                LeaseBackend::Shared(r) => r.active(now_ms).await.map_err(|e| e.to_string()),
            }
        })
        .await
    }

    /// How many leases are active at `now_ms`.
    pub async fn active(&self, now_ms: u64) -> Result<u64, String> {
        interleave::call("lease.active", async {
            match self {
                LeaseBackend::Sqlite(s) => s.active_leases(now_ms).map_err(|e| e.to_string()),
                LeaseBackend::Shared(r) => r.active(now_ms).await.map(|v| v.len() as u64).map_err(|e| e.to_string()),
            }
        })
        .await
    }
}

/// Active leases now (`None` when the store cannot say).
pub async fn active<C: Connect + Clone + Send + Sync + 'static>(gw: &Gateway<C>) -> Option<u64> {
    LeaseBackend::of(gw)?.active(gw.clock.wall_now_ms()).await.ok()
}

/// M14: with leases in Redis, ends as INVALIDATED every active lease whose key may no longer
/// use its connection under this replica's config (at start and after each reload; a gateway
/// without replicas does this in its store, [`Gateway::invalidate_stale_leases`]). Returns how
/// many.
pub async fn invalidate_stale_shared<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Gateway<C>,
) -> Result<usize, String> {
    let Some(b @ LeaseBackend::Shared(_)) = LeaseBackend::of(gw) else { return Ok(0) };
    let allowed = |key_id: &str, connection: &str| gw.may_hold_lease(key_id, connection);
    let n = b.invalidate(&allowed, gw.clock.wall_now_ms()).await?;
    if n > 0 {
        tracing::warn!(invalidated = n, "leases whose key may no longer use their connection were invalidated");
    }
    Ok(n)
}

/// The key behind a lease request, with the permission and allowed connections leases need.
fn lease_key(config: &crate::config::Config, headers: &HeaderMap) -> Result<KeyConfig, LeaseError> {
    match auth::client(config, headers, false) {
        Ok(Client::Key(k)) => {
            if !k.may_lease() {
                Err(LeaseError::ScopeRequired)
            } else if k.allowed_connections.is_empty() {
                Err(LeaseError::KeyConfigurationInvalid)
            } else {
                Ok(k)
            }
        }
        Ok(Client::Loopback) => Err(LeaseError::AuthenticationRequired),
        Err(e) if e.code == "invalid_api_key" => Err(LeaseError::ApiKeyInvalid),
        Err(_) => Err(LeaseError::AuthenticationRequired),
    }
}

/// The owner id of a request, checked.
fn owner(headers: &HeaderMap) -> Result<String, LeaseError> {
    let v = headers.get(&OWNER_HEADER).ok_or(LeaseError::ContextRequired)?;
    let v = v.to_str().map_err(|_| LeaseError::ContextInvalid)?.trim();
    valid_owner(v).then(|| owner_hash(v)).ok_or(LeaseError::ContextInvalid)
}

fn generation_of(body: &Value) -> Result<u64, LeaseError> {
    match body.get("generation") {
        None | Some(Value::Null) => Err(LeaseError::ContextRequired),
        Some(Value::Number(n)) => {
            n.as_u64().and_then(|g| parse_generation(&g.to_string())).ok_or(LeaseError::ContextInvalid)
        }
        Some(Value::String(s)) => parse_generation(s).ok_or(LeaseError::ContextInvalid),
        Some(_) => Err(LeaseError::ContextInvalid),
    }
}

fn ttl_of(body: &Value) -> Result<Option<u64>, LeaseError> {
    match body.get("ttl_ms") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or(LeaseError::ActionInvalid),
    }
}

fn lifecycle<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Gateway<C>,
    l: &Lease,
    now_ms: u64,
    with_connection: bool,
) -> Value {
    let at = |ms: u64| crate::state::clock::rfc3339(ms);
    let mut v = serde_json::json!({
        "state": l.state_at(now_ms).as_str(),
        "generation": l.generation,
        "acquired_at": at(l.acquired_at_ms),
        "renewed_at": at(l.renewed_at_ms),
        "expires_at": at(l.expires_at_ms),
        "expires_in_ms": l.expires_at_ms.saturating_sub(now_ms),
    });
    if with_connection {
        let provider = gw.config.connections.iter().find(|c| c.id == l.connection).map(|c| c.provider.clone());
        v["connection"] = serde_json::json!({"id": l.connection, "provider": provider});
    }
    v
}

/// `POST /api/v1/session-leases`.
pub async fn handle<C: Connect + Clone + Send + Sync + 'static>(
    gw: Arc<Gateway<C>>,
    req: Request<Incoming>,
) -> Response<Body> {
    match run(&gw, req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn run<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Arc<Gateway<C>>,
    req: Request<Incoming>,
) -> Result<Response<Body>, ProxyError> {
    let key = lease_key(&gw.config, req.headers()).map_err(refuse)?;
    let json_type = req
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().to_ascii_lowercase().starts_with("application/json"));
    if !json_type {
        return Err(refuse(LeaseError::ContentTypeRequired));
    }
    let owner = owner(req.headers()).map_err(refuse)?;
    let timeout = std::time::Duration::from_millis(gw.config.server.body_read_timeout_ms);
    // A body that is too large, late or not JSON gets the reader's own error (413, 408, 400
    // naming the problem), not a guess at the action.
    let (_, body) = read_json(req, 64 * 1024, timeout).await.map_err(|e| e.with("type", "lease_error".into()))?;
    let Some(store) = LeaseBackend::of(gw) else { return Err(refuse(LeaseError::ServiceUnavailable)) };
    let now_ms = gw.clock.wall_now_ms();
    let ok = |v: Value| json_response(200, v.to_string());
    match body.get("action").and_then(Value::as_str) {
        Some("acquire") => {
            let model = match body.get("model").and_then(Value::as_str) {
                Some(m) if !m.trim().is_empty() && m.chars().count() <= 512 => m,
                _ => return Err(refuse(LeaseError::ModelInvalid)),
            };
            let ttl = clamp_ttl(ttl_of(&body).map_err(refuse)?);
            let eligible = eligible(gw, &key, model)?;
            match store.acquire(&owner, &key.id, model, &eligible, ttl, now_ms).await.map_err(store_down)? {
                Acquired::Lease(l) => {
                    tracing::info!(key = %key.id, generation = l.generation, "lease acquired");
                    publish(gw, "acquired", &l, now_ms);
                    Ok(ok(lifecycle(gw, &l, now_ms, true)))
                }
                Acquired::OwnerBusy => Err(refuse(LeaseError::ConnectionMismatch)),
                Acquired::Full(n) => {
                    let s = capacity_retry_after(n.soonest_expiry_ms, now_ms);
                    let body = serde_json::json!({
                        "state": "WAITING_FOR_CAPACITY",
                        "error": {"type": "lease_error", "code": LeaseError::CapacityUnavailable.code(), "message": LeaseError::CapacityUnavailable.message()},
                        "reason": "NO_FREE_ELIGIBLE_CONNECTION",
                        "retry_after": s,
                        "eligible_count": n.eligible,
                        "free_count": n.free,
                    });
                    let mut r = json_response(429, body.to_string());
                    r.headers_mut().insert(http::header::RETRY_AFTER, HeaderValue::from(s));
                    Ok(r)
                }
            }
        }
        Some("status") => {
            let g = generation_of(&body).map_err(refuse)?;
            let l = store.lease(&owner, g, now_ms).await.map_err(store_down)?.filter(|l| l.key_id == key.id);
            let l = l.ok_or_else(|| refuse(LeaseError::LeaseRequired))?;
            Ok(ok(lifecycle(gw, &l, now_ms, true)))
        }
        Some("renew") => {
            let g = generation_of(&body).map_err(refuse)?;
            let ttl = clamp_ttl(ttl_of(&body).map_err(refuse)?);
            let known = store.lease(&owner, g, now_ms).await.map_err(store_down)?.filter(|l| l.key_id == key.id);
            let Some(known) = known else { return Err(refuse(LeaseError::LeaseRequired)) };
            if known.state_at(now_ms) != LeaseState::Active {
                return Err(refuse(LeaseError::FenceStale));
            }
            let l = store.renew(&owner, g, ttl, now_ms).await.map_err(store_down)?;
            let l = l.ok_or_else(|| refuse(LeaseError::LeaseRequired))?;
            Ok(ok(lifecycle(gw, &l, now_ms, false)))
        }
        Some("release") => {
            let g = generation_of(&body).map_err(refuse)?;
            let known = store.lease(&owner, g, now_ms).await.map_err(store_down)?.filter(|l| l.key_id == key.id);
            if known.is_none() {
                return Err(refuse(LeaseError::LeaseRequired));
            }
            let l = store.release(&owner, g, now_ms).await.map_err(store_down)?;
            let l = l.ok_or_else(|| refuse(LeaseError::LeaseRequired))?;
            tracing::info!(key = %key.id, generation = l.generation, "lease released");
            publish(gw, "released", &l, now_ms);
            Ok(ok(lifecycle(gw, &l, now_ms, false)))
        }
        _ => Err(refuse(LeaseError::ActionInvalid)),
    }
}

/// Announces a lease change on the operator's event stream (the owner only as its hash).
fn publish<C: Connect + Clone + Send + Sync + 'static>(gw: &Gateway<C>, what: &str, l: &Lease, now_ms: u64) {
    let data = serde_json::json!({
        "what": what,
        "key": l.key_id,
        "owner_hash": l.owner_hash,
        "connection": l.connection,
        "model": l.model,
        "generation": l.generation,
        "expires_at": crate::state::clock::rfc3339(l.expires_at_ms),
    });
    gw.feed.publish("lease", now_ms, data);
}

/// The connections an acquire may lease, in routing order: those serving `model` that the
/// key may use and that resilience state does not exclude now.
fn eligible<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Gateway<C>,
    key: &KeyConfig,
    model: &str,
) -> Result<Vec<String>, ProxyError> {
    let plan = gw.resolve(model).map_err(|_| refuse(LeaseError::NoEligibleConnection))?;
    let mut pool: Vec<usize> = Vec::new();
    for t in plan.targets.iter() {
        let id = &gw.config.connections[t.connection].id;
        if key.may_lease_connection(id) && !pool.contains(&t.connection) {
            pool.push(t.connection);
        }
    }
    if pool.is_empty() {
        return Err(refuse(LeaseError::NoEligibleConnection));
    }
    let now = gw.clock.now();
    let mut open: Vec<String> = Vec::new();
    let cands: Vec<_> = plan.targets.iter().filter(|t| pool.contains(&t.connection)).map(|t| gw.candidate(t)).collect();
    let soonest = gw.with_engine(|e| {
        for c in &cands {
            if e.exclusion(now, c).is_none() && !open.iter().any(|o| o == c.connection) {
                open.push(c.connection.to_owned());
            }
        }
        e.soonest_eligible(now, &cands)
    });
    if open.is_empty() {
        return Err(refuse(LeaseError::EligibilityUnavailable)
            .retry_after(Some(soonest.unwrap_or(std::time::Duration::from_secs(1)))));
    }
    Ok(open)
}

/// The fence of an inference request: with lease headers, the connection the request must use
/// (its owner's active lease of that generation, held by this key); without them, `None`.
pub async fn fence_of<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Gateway<C>,
    headers: &HeaderMap,
    client: &Client,
) -> Result<Option<String>, ProxyError> {
    let (o, g) = (headers.get(&OWNER_HEADER), headers.get(&GENERATION_HEADER));
    if o.is_none() && g.is_none() {
        return Ok(None);
    }
    let Client::Key(key) = client else { return Err(refuse(LeaseError::AuthenticationRequired)) };
    let owner = owner(headers).map_err(refuse)?;
    let g = g.ok_or_else(|| refuse(LeaseError::ContextRequired))?;
    let g = g.to_str().ok().and_then(parse_generation).ok_or_else(|| refuse(LeaseError::ContextInvalid))?;
    let Some(store) = LeaseBackend::of(gw) else { return Err(refuse(LeaseError::ServiceUnavailable)) };
    let now_ms = gw.clock.wall_now_ms();
    let lease = store.lease(&owner, g, now_ms).await.map_err(store_down)?;
    let connection = fence(lease.as_ref(), &key.id, now_ms).map_err(refuse)?;
    Ok(Some(connection.to_owned()))
}
