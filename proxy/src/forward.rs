//! The request path, step by step: read and check the client's request (here), plan its
//! targets and prepare it for each provider format (`plan`), let the core pick targets and
//! attempt them with fallback, waits and a budget (`dispatch`, `upstream`), and answer or
//! refuse (`refuse`).

use crate::auth::Client;
use crate::body::read_json;
use crate::dispatch::dispatch;
use crate::errors::{Body, ProxyError};
use crate::exchange::untranslatable;
use crate::exchange::{self, ApiHeaders, Inbound};
use crate::gateway::Gateway;
use crate::plan::plan;
use crate::translate::ClientApi;
use bytes::Bytes;
use http::{HeaderValue, Request, Response};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::Connect;
use std::sync::Arc;
use std::time::Duration;

/// `POST /v1/chat/completions`, `POST /v1/messages` and `POST /v1/responses`.
pub async fn forward<C: Connect + Clone + Send + Sync + 'static>(
    gw: Arc<Gateway<C>>,
    req: Request<Incoming>,
    client: Client,
    api: ClientApi,
) -> Response<Body> {
    let shape = exchange::error_shape(api);
    let headers = ApiHeaders::from(req.headers());
    let query = req.uri().query().map(str::to_owned);
    let session_headers = match SessionHeaders::read(req.headers(), &gw) {
        Ok(h) => h,
        Err(e) => return e.into_response_as(shape),
    };
    // M14: a fenced request goes to its lease's connection only, or is refused here, before
    // anything is dispatched.
    let leased = match crate::leases::fence_of(&gw, req.headers(), &client).await {
        Ok(l) => l,
        Err(e) => return e.into_response_as(shape),
    };
    let (raw, json) = match read_json(
        req,
        gw.config.server.max_body_bytes,
        Duration::from_millis(gw.config.server.body_read_timeout_ms),
    )
    .await
    {
        Ok(v) => v,
        Err(e) => return e.into_response_as(shape),
    };
    let session = session_headers.key(&json);
    let session_ttl = session_headers.ttl;
    let (inbound, model, warning) = match inbound(&gw, api, raw, json, headers) {
        Ok((i, m, w)) => (Inbound { query, session, session_ttl, ..i }, m, w),
        Err(e) => return e.into_response_as(shape),
    };
    let (plan, mut preps, ask) = match plan(&gw, &model, &client, &inbound, leased.as_deref()) {
        Ok(x) => x,
        Err(e) => return e.into_response_as(shape),
    };
    let mut resp = match plan.multi.clone() {
        Some(multi) => crate::multicall::run(gw, plan, multi, &inbound, &client).await,
        None => dispatch(gw, plan, &inbound, &mut preps, ask).await,
    };
    if let Some(w) = warning
        && let Ok(v) = HeaderValue::from_str(&w)
    {
        resp.headers_mut().insert("x-ferroute-warning", v);
    }
    resp
}

/// What a request says about its session (M5): the session headers and the TTL, the
/// setting's or the request's own (`X-Ferroute-Session-Ttl-Ms`). These headers are never
/// forwarded upstream (upstream requests carry only the headers their format needs).
struct SessionHeaders {
    named: Vec<(&'static str, String)>,
    ttl: Duration,
}

/// The per-request override of `[resilience.session_affinity] ttl_ms`.
pub const SESSION_TTL_HEADER: &str = "x-ferroute-session-ttl-ms";

impl SessionHeaders {
    fn read<C: Connect + Clone + Send + Sync + 'static>(
        h: &http::HeaderMap,
        gw: &Gateway<C>,
    ) -> Result<SessionHeaders, ProxyError> {
        let ttl_ms = match h.get(SESSION_TTL_HEADER) {
            None => gw.config.resilience.session_affinity.ttl_ms.max(0) as u64,
            Some(v) => v
                .to_str()
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .filter(|ms| *ms <= 30 * 24 * 3_600_000)
                .ok_or_else(|| {
                    ProxyError::bad_request(
                        "invalid_session_ttl",
                        format!("{SESSION_TTL_HEADER} must be milliseconds between 0 and 2592000000 (0 turns affinity off for this request)"),
                    )
                })?,
        };
        let named = ferroute_core::session::key::SESSION_HEADERS
            .iter()
            .filter_map(|n| h.get(*n).and_then(|v| v.to_str().ok()).map(|v| (*n, v.to_owned())))
            .collect();
        Ok(SessionHeaders { named, ttl: Duration::from_millis(ttl_ms) })
    }

    /// The session key, when affinity is on for this request.
    fn key(&self, body: &serde_json::Value) -> Option<String> {
        if self.ttl.is_zero() {
            return None;
        }
        let named: Vec<(&str, &str)> = self.named.iter().map(|(n, v)| (*n, v.as_str())).collect();
        ferroute_core::session::session_key(&named, body)
    }
}

/// Checks the fields each API requires and brings the request into its wire format.
fn inbound<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Gateway<C>,
    api: ClientApi,
    raw: Bytes,
    json: serde_json::Value,
    headers: ApiHeaders,
) -> Result<(Inbound, String, Option<String>), ProxyError> {
    let model = match json.get("model") {
        Some(serde_json::Value::String(m)) if !m.trim().is_empty() => m.clone(),
        Some(_) => return Err(ProxyError::bad_request("invalid_model", "`model` must be a non-empty string")),
        None => return Err(ProxyError::bad_request("missing_model", "missing required field `model`")),
    };
    match api {
        ClientApi::Chat if !json.get("messages").is_some_and(|m| m.is_array()) => {
            return Err(ProxyError::bad_request("missing_messages", "missing required field `messages` (an array)"));
        }
        ClientApi::Messages if json.get("max_tokens").is_none() => {
            return Err(ProxyError::bad_request("missing_max_tokens", "missing required field `max_tokens`"));
        }
        ClientApi::Messages if !json.get("messages").is_some_and(|m| m.is_array()) => {
            return Err(ProxyError::bad_request("missing_messages", "missing required field `messages` (an array)"));
        }
        ClientApi::Responses if json.get("input").is_none() => {
            return Err(ProxyError::bad_request("missing_input", "missing required field `input`"));
        }
        _ => {}
    }
    match json.get("stream") {
        None | Some(serde_json::Value::Null) | Some(serde_json::Value::Bool(_)) => {}
        Some(_) => return Err(ProxyError::bad_request("invalid_stream", "`stream` must be a boolean")),
    }
    let created = gw.clock.wall_now_ms() / 1000;
    if api != ClientApi::Responses {
        return Ok((Inbound::direct(api, json, raw, headers, created), model, None));
    }
    // The Responses API has no background execution here: such a request is served while the
    // client waits, and told so.
    let warning = (json.get("background") == Some(&serde_json::Value::Bool(true)))
        .then(|| "background responses are served synchronously; the answer is in this response".to_owned());
    let inbound = Inbound::responses(&json, headers, &gw.next_id(), created).map_err(untranslatable)?;
    Ok((inbound, model, warning))
}
