//! The request path, step by step: read and check the client's request (here), plan its
//! targets and prepare it for each provider format (`plan`), let the core pick targets and
//! attempt them with fallback, waits and a budget (`dispatch`, `upstream`), and answer or
//! refuse (`refuse`).

use crate::edge::auth::Client;
use crate::edge::body::{invalid_json, json_object, not_an_object, read_body_keeping_headers};
use crate::edge::errors::{Body, ProxyError};
use crate::edge::head::{BadBody, Head};
use crate::request::dispatch::dispatch;
use crate::request::exchange::untranslatable;
use crate::request::exchange::{self, ApiHeaders, Inbound};
use crate::request::plan::{plan, slot};
use crate::state::gateway::Gateway;
use crate::translate::ClientApi;
use bytes::Bytes;
use http::{HeaderValue, Request, Response};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::Connect;
use std::sync::Arc;
use std::time::Duration;

/// `POST /v1/chat/completions`, `POST /v1/messages`, `POST /v1/responses` and the Gemini
/// API's `generateContent` and `streamGenerateContent`.
pub async fn forward<C: Connect + Clone + Send + Sync + 'static>(
    gw: Arc<Gateway<C>>,
    req: Request<Incoming>,
    client: Client,
    api: ClientApi,
) -> Response<Body> {
    let shape = exchange::error_shape(api);
    // A request that carries none of the headers read below, the usual case, skips looking
    // each of them up by name.
    let read = carries_any(req.headers());
    let headers = if read { ApiHeaders::from(req.headers()) } else { ApiHeaders::default() };
    // A Gemini client's query names its stream mode and maybe its key: never forwarded.
    let query = req.uri().query().filter(|_| api != ClientApi::Gemini).map(str::to_owned);
    let gemini = match api {
        ClientApi::Gemini => crate::edge::gemini::call(req.uri().path(), req.method(), true),
        _ => None,
    };
    // `:streamGenerateContent` without `alt=sse` answers one JSON array, as Google's API does.
    let gemini_array = matches!(gemini, Some(crate::edge::gemini::Call::Generate { stream: true, .. }))
        && !crate::edge::gemini_array::wants_events(req.uri().query());
    let session_headers = match SessionHeaders::read(req.headers(), read, &gw) {
        Ok(h) => h,
        Err(e) => return e.into_response_as(shape),
    };
    // M14: a fenced request goes to its lease's connection only, or is refused here, before
    // anything is dispatched.
    let leased = match read {
        false => None,
        true => match Box::pin(crate::sessions::leases::fence_of(&gw, req.headers(), &client)).await {
            Ok(l) => l,
            Err(e) => return e.into_response_as(shape),
        },
    };
    let (raw, spare_headers) = match read_body_keeping_headers(
        req,
        gw.config.server.max_body_bytes,
        Duration::from_millis(gw.config.server.body_read_timeout_ms),
    )
    .await
    {
        Ok(v) => v,
        Err(e) => return e.into_response_as(shape),
    };
    let (inbound, model, warning) = match inbound(&gw, api, raw, headers, gemini) {
        Ok((i, m, w)) => {
            let session = session_headers.key(&i);
            (Inbound { query, session, session_ttl: session_headers.ttl, ..i }, m, w)
        }
        Err(e) => return e.into_response_as(shape),
    };
    let (plan, mut preps, ask) = match plan(&gw, &model, &client, &inbound, leased.as_deref()) {
        Ok(x) => x,
        Err(e) => return e.into_response_as(shape),
    };
    // The client's header map, read and done with, carries an upstream request: it is lent to
    // the request prepared for the plan's first target's format (a plan that is no combo has
    // one format; a combo's first attempt usually goes to that target).
    if let Some(p) = plan.targets.first().and_then(|t| preps[slot(gw.parts(t).0.format)].as_mut()) {
        p.lend_headers(spare_headers);
    }
    let mut resp = match plan.multi.clone() {
        // Both boxed: a multi-call's future is large and rare, and the dispatch's would
        // otherwise be moved with this one's and the route's into place per request (one
        // allocation costs less: docs/performance.md).
        Some(multi) => Box::pin(crate::request::multicall::run(gw, plan, multi, &inbound, &client)).await,
        None => Box::pin(dispatch(gw, plan, &inbound, &mut preps, ask)).await,
    };
    if let Some(w) = warning
        && let Ok(v) = HeaderValue::from_str(&w)
    {
        resp.headers_mut().insert("x-ferroute-warning", v);
    }
    if gemini_array { crate::edge::gemini_array::as_array(resp) } else { resp }
}

/// The headers beyond HTTP's own that the request path reads: the provider APIs' own
/// ([`ApiHeaders`]), the session's ([`SessionHeaders`]) and the lease's
/// ([`crate::sessions::leases::fence_of`]).
const READ: [&str; 14] = [
    "user-agent",
    "originator",
    "session_id",
    "session-id",
    "anthropic-beta",
    "anthropic-version",
    "openai-beta",
    "traceparent",
    SESSION_TTL_HEADER,
    ferroute_core::session::key::SESSION_HEADERS[0],
    ferroute_core::session::key::SESSION_HEADERS[1],
    ferroute_core::session::key::SESSION_HEADERS[2],
    crate::sessions::leases::OWNER,
    crate::sessions::leases::GENERATION,
];

/// Whether a request carries any of the headers in [`READ`] (one pass over its names).
fn carries_any(h: &http::HeaderMap) -> bool {
    h.keys().any(|n| READ.contains(&n.as_str()))
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
static SESSION_TTL: http::HeaderName = http::HeaderName::from_static(SESSION_TTL_HEADER);

impl SessionHeaders {
    fn read<C: Connect + Clone + Send + Sync + 'static>(
        h: &http::HeaderMap,
        read: bool,
        gw: &Gateway<C>,
    ) -> Result<SessionHeaders, ProxyError> {
        let ttl_ms = match read.then(|| h.get(&SESSION_TTL)).flatten() {
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
        // Read only when they can matter: with affinity off no key is taken.
        let named = match ttl_ms {
            _ if !read => Vec::new(),
            0 => Vec::new(),
            _ => ferroute_core::session::key::SESSION_HEADERS
                .iter()
                .filter_map(|n| h.get(*n).and_then(|v| v.to_str().ok()).map(|v| (*n, v.to_owned())))
                .collect(),
        };
        Ok(SessionHeaders { named, ttl: Duration::from_millis(ttl_ms) })
    }

    /// The session key, when affinity is on for this request.
    fn key(&self, inbound: &Inbound) -> Option<String> {
        if self.ttl.is_zero() {
            return None;
        }
        let named: Vec<(&str, &str)> = self.named.iter().map(|(n, v)| (*n, v.as_str())).collect();
        ferroute_core::session::session_key(&named, inbound.body.get())
    }
}

/// What a Gemini request passed through is checked for: `contents` is an array; and how many
/// functions it declares.
#[derive(serde::Deserialize)]
struct GeminiHead {
    contents: Option<Vec<serde::de::IgnoredAny>>,
    #[serde(default)]
    tools: Option<Vec<GeminiTool>>,
}

#[derive(serde::Deserialize)]
struct GeminiTool {
    #[serde(default, rename = "functionDeclarations", alias = "function_declarations")]
    declarations: Option<Vec<serde::de::IgnoredAny>>,
}

impl GeminiHead {
    /// The functions declared, when `contents` is there.
    fn declared(&self) -> Option<usize> {
        self.contents.as_ref()?;
        Some(self.tools.iter().flatten().filter_map(|t| t.declarations.as_ref()).map(Vec::len).sum())
    }
}

/// Whether every target `model` can reach speaks Gemini (no combo that calls several, no
/// emergency target): then a Gemini request is never translated, only passed through.
fn gemini_only<C: Connect + Clone + Send + Sync + 'static>(gw: &Gateway<C>, model: &str) -> bool {
    let Ok(plan) = gw.resolve(model) else { return false };
    plan.multi.is_none()
        && !plan.targets.is_empty()
        && plan.targets.iter().all(|t| gw.config.providers[t.provider].format == crate::config::Format::Gemini)
        && gw.emergency_plan(model).is_none()
}

/// Checks the fields each API requires and brings the request into its wire format. A Chat
/// or Messages body is read only for what routing needs ([`Head`]); a Responses body is
/// translated to chat now, so it is parsed whole.
fn inbound<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Gateway<C>,
    api: ClientApi,
    raw: Bytes,
    headers: ApiHeaders,
    gemini: Option<crate::edge::gemini::Call>,
) -> Result<(Inbound, String, Option<String>), ProxyError> {
    if let Some(crate::edge::gemini::Call::Generate { model, stream }) = gemini {
        let missing = || ProxyError::bad_request("missing_contents", "missing required field `contents` (an array)");
        let created = gw.clock.wall_now_ms() / 1000;
        // Passed through, the body is only checked, not built into a value.
        if gemini_only(gw, &model) {
            let head = match serde_json::from_slice::<GeminiHead>(&raw) {
                Ok(h) => h,
                // Not JSON, not an object (named as such), or `contents` of the wrong type.
                Err(_) => return Err(json_object(&raw).err().unwrap_or_else(missing)),
            };
            let Some(tools) = head.declared() else { return Err(missing()) };
            return Ok((Inbound::gemini_native(tools, raw, &model, stream, headers, created), model, None));
        }
        let json = json_object(&raw)?;
        if !json.get("contents").is_some_and(serde_json::Value::is_array) {
            return Err(missing());
        }
        let inbound = Inbound::gemini(&json, raw, &model, stream, headers, created).map_err(untranslatable)?;
        return Ok((inbound, model, None));
    }
    let (head, json) = if api == ClientApi::Responses {
        let json = json_object(&raw)?;
        (Head::of(&json), Some(json))
    } else {
        let head = Head::parse(&raw).map_err(|e| match e {
            BadBody::Invalid(e) => invalid_json(e),
            BadBody::NotAnObject => not_an_object(),
        })?;
        (head, None)
    };
    let model = match &head.model {
        Some(serde_json::Value::String(m)) if !m.trim().is_empty() => m.clone(),
        Some(_) => return Err(ProxyError::bad_request("invalid_model", "`model` must be a non-empty string")),
        None => return Err(ProxyError::bad_request("missing_model", "missing required field `model`")),
    };
    match api {
        ClientApi::Chat if !head.messages_is_array => {
            return Err(ProxyError::bad_request("missing_messages", "missing required field `messages` (an array)"));
        }
        ClientApi::Messages if !head.has_max_tokens => {
            return Err(ProxyError::bad_request("missing_max_tokens", "missing required field `max_tokens`"));
        }
        ClientApi::Messages if !head.messages_is_array => {
            return Err(ProxyError::bad_request("missing_messages", "missing required field `messages` (an array)"));
        }
        ClientApi::Responses if !head.has_input => {
            return Err(ProxyError::bad_request("missing_input", "missing required field `input`"));
        }
        _ => {}
    }
    match head.stream {
        None | Some(serde_json::Value::Null) | Some(serde_json::Value::Bool(_)) => {}
        Some(_) => return Err(ProxyError::bad_request("invalid_stream", "`stream` must be a boolean")),
    }
    let created = gw.clock.wall_now_ms() / 1000;
    let Some(json) = json else {
        return Ok((Inbound::direct(api, &head, raw, headers, created), model, None));
    };
    // The Responses API has no background execution here: such a request is served while the
    // client waits, and told so.
    let warning = head
        .background
        .then(|| "background responses are served synchronously; the answer is in this response".to_owned());
    let inbound = Inbound::responses(&json, raw, headers, &gw.next_id(), created).map_err(untranslatable)?;
    Ok((inbound, model, warning))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_header_the_path_reads_is_in_the_list_and_others_are_not() {
        let named = [
            &exchange::ANTHROPIC_BETA,
            &exchange::ANTHROPIC_VERSION_HEADER,
            &exchange::OPENAI_BETA,
            &SESSION_TTL,
            &http::header::USER_AGENT,
        ];
        for name in named.iter().map(|n| n.as_str()).chain(READ) {
            let mut h = http::HeaderMap::new();
            h.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            h.insert(http::HeaderName::from_bytes(name.to_ascii_uppercase().as_bytes()).unwrap(), "1".parse().unwrap());
            assert!(carries_any(&h), "{name}");
        }
        let mut h = http::HeaderMap::new();
        for name in ["content-type", "authorization", "x-api-key", "x-stainless-lang", "x-session"] {
            h.insert(http::HeaderName::from_static(name), HeaderValue::from_static("1"));
        }
        assert!(!carries_any(&h));
    }
}
