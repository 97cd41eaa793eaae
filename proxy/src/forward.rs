//! The request path: read and check the client's request, resolve the model into targets,
//! prepare the request for each provider format, then let the core pick a target, attempt it
//! (`upstream`), fall back within the request, and answer.

use crate::attempt::{Attempt, SELECTED};
use crate::auth::Client;
use crate::body::read_json;
use crate::config::Format;
use crate::errors::{Body, ErrorShape, ProxyError, Source};
use crate::exchange::{self, ApiHeaders, Inbound, Prepared};
use crate::gateway::{Gateway, Plan, Target};
use crate::translate::{Cause, ClientApi, Untranslatable};
use crate::upstream::{Failure, Step, attempt_once, failure_error};
use bytes::Bytes;
use ferroute_core::engine::{Candidate, Exclusion, ExclusionReason, Refusal, Selection, refusal};
use http::{HeaderValue, Request, Response};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::Connect;
use std::collections::BTreeSet;
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
    let (inbound, model, warning) = match inbound(&gw, api, raw, json, headers) {
        Ok((i, m, w)) => (Inbound { query, ..i }, m, w),
        Err(e) => return e.into_response_as(shape),
    };
    let plan = match gw.resolve(&model) {
        Ok(p) => p,
        Err(msg) => return ProxyError::new(Source::Downstream, 404, "model_not_found", msg).into_response_as(shape),
    };
    let plan = Plan {
        targets: plan.targets.into_iter().filter(|t| client.may_use(&gw.config.connections[t.connection].id)).collect(),
        ..plan
    };
    if plan.targets.is_empty() {
        return ProxyError::new(
            Source::Downstream,
            403,
            "no_allowed_connections",
            format!("this key may not use any connection serving {model:?}"),
        )
        .into_response_as(shape);
    }
    let (plan, mut preps) = match prepare_all(&gw, plan, &inbound) {
        Ok(x) => x,
        Err(e) => return e.into_response_as(shape),
    };
    let mut resp = dispatch(gw, plan, &inbound, &mut preps).await;
    if let Some(w) = warning
        && let Ok(v) = HeaderValue::from_str(&w)
    {
        resp.headers_mut().insert("x-ferroute-warning", v);
    }
    resp
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

/// A feature the target cannot express, as a 400 naming it.
pub fn untranslatable(u: Untranslatable) -> ProxyError {
    let code = match u.kind {
        Cause::Feature => "untranslatable_feature",
        Cause::Stored => "stored_responses_unsupported",
        Cause::Invalid => "invalid_request",
    };
    ProxyError::bad_request(code, u.to_string()).with("param", u.feature.into())
}

/// The request prepared for each provider format the plan uses; targets whose format cannot
/// express the request are left out, and when none is left the request is refused naming the
/// feature.
fn prepare_all<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Gateway<C>,
    plan: Plan,
    inbound: &Inbound,
) -> Result<(Plan, Preps), ProxyError> {
    let mut preps: Preps = [None, None];
    let mut refused: Option<Untranslatable> = None;
    for format in [Format::Openai, Format::Anthropic] {
        if !plan.targets.iter().any(|t| gw.parts(t).0.format == format) {
            continue;
        }
        match exchange::prepare(inbound, format) {
            Ok(p) => preps[slot(format)] = Some(p),
            Err(u) => {
                tracing::info!(format = ?format, feature = %u.feature, "request cannot be translated; skipping those targets");
                refused.get_or_insert(u);
            }
        }
    }
    let targets: Vec<Target> =
        plan.targets.into_iter().filter(|t| preps[slot(gw.parts(t).0.format)].is_some()).collect();
    if targets.is_empty() {
        return Err(untranslatable(
            refused.unwrap_or_else(|| Untranslatable::new("model", "no target can serve this request")),
        ));
    }
    Ok((Plan { targets, ..plan }, preps))
}

/// Prepared requests by provider format.
type Preps = [Option<Prepared>; 2];

fn slot(format: Format) -> usize {
    match format {
        Format::Openai => 0,
        Format::Anthropic => 1,
    }
}

async fn dispatch<C: Connect + Clone + Send + Sync + 'static>(
    gw: Arc<Gateway<C>>,
    plan: Plan,
    inbound: &Inbound,
    preps: &mut Preps,
) -> Response<Body> {
    let shape = exchange::error_shape(inbound.api);
    let mut skip = BTreeSet::new();
    let mut last: Option<Failure> = None;
    for _ in 0..=plan.targets.len() {
        let now = gw.clock.now();
        let selection = {
            let cands: Vec<Candidate<'_>> = plan.targets.iter().map(|t| gw.candidate(t)).collect();
            gw.with_engine(|e| e.select(now, &cands, plan.strategy, &skip, &plan.key))
        };
        gw.settle();
        let (index, ticket) = match selection {
            Selection::Pick { index, ticket } => (index, ticket),
            Selection::NoneEligible(ex) => {
                return finish(&gw, last.map_or_else(|| no_target(&gw, &plan, &ex), failure_error), None, shape);
            }
        };
        let target = &plan.targets[index];
        let (provider, connection) = gw.parts(target);
        skip.insert(connection.id.clone());
        let same_provider_next = plan.combo
            && plan.targets.iter().any(|t| {
                t.target_index > target.target_index
                    && t.provider == target.provider
                    && !skip.contains(&gw.config.connections[t.connection].id)
            });
        let attempt = Attempt { gw: Arc::clone(&gw), target: target.clone(), ticket: Some(ticket), same_provider_next };
        let Some(prep) = preps[slot(provider.format)].as_mut() else {
            // prepare_all kept only targets with a prepared request.
            return finish(
                &gw,
                ProxyError::new(Source::Internal, 500, "internal", "no request prepared for this provider format"),
                None,
                shape,
            );
        };
        match attempt_once(attempt, inbound, prep).await {
            Step::Done(resp) => return resp,
            Step::Fallback(f) => {
                tracing::info!(provider = %provider.id, connection = %connection.id, status = f.decision.status, reason = f.decision.reason.as_str(), "attempt failed");
                last = Some(f);
            }
            Step::Fail(e, conn) => return finish(&gw, e, Some(&conn), shape),
            Step::Excluded(conn) => {
                skip.remove(&conn);
            }
        }
    }
    finish(
        &gw,
        last.map_or_else(
            || ProxyError::new(Source::Internal, 503, "no_executable_targets", "no target could run"),
            failure_error,
        ),
        None,
        shape,
    )
}

fn finish(
    gw: &Gateway<impl Connect + Clone + Send + Sync + 'static>,
    e: ProxyError,
    connection: Option<&str>,
    shape: ErrorShape,
) -> Response<Body> {
    let provider = e.extra.get("provider").and_then(|p| p.as_str()).unwrap_or("").to_owned();
    gw.metrics.request(e.status, &provider);
    let mut resp = e.into_response_as(shape);
    if let Some(c) = connection.filter(|c| !c.is_empty())
        && let Ok(v) = HeaderValue::from_str(c)
    {
        resp.headers_mut().insert(SELECTED, v);
    }
    resp
}

/// The answer when nothing is eligible and nothing was tried: the core chooses the refusal,
/// this turns it into a status and a body.
fn no_target<C: Connect + Clone + Send + Sync + 'static>(gw: &Gateway<C>, plan: &Plan, ex: &[Exclusion]) -> ProxyError {
    let cands: Vec<Candidate<'_>> = plan.targets.iter().map(|t| gw.candidate(t)).collect();
    let relevant: Vec<&Exclusion> = ex.iter().filter(|e| e.reason != ExclusionReason::Skipped).collect();
    let provider = relevant.first().map(|e| gw.parts(&plan.targets[e.index]).0.id.clone()).unwrap_or_default();
    let diagnostics = || {
        let excluded: Vec<serde_json::Value> = relevant
            .iter()
            .map(|e| {
                let (p, c) = gw.parts(&plan.targets[e.index]);
                serde_json::json!({
                    "target": format!("{}/{}", p.id, plan.targets[e.index].model),
                    "connection": c.id,
                    "reason": e.reason.as_str(),
                    "retry_after_s": e.retry_after.as_secs_f64().ceil() as u64,
                })
            })
            .collect();
        serde_json::json!({ "excluded": excluded })
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
        .with("diagnostics", diagnostics()),
        Refusal::AllCooling { retry_after } => ProxyError::new(
            Source::Upstream,
            503,
            "all_targets_cooling_down",
            format!("every target of {} is cooling down", plan.key),
        )
        .retry_after(Some(retry_after))
        .with("diagnostics", diagnostics()),
        Refusal::NoExecutable => ProxyError::new(
            Source::Upstream,
            404,
            "no_executable_targets",
            format!("no target of {} can run", plan.key),
        ),
    }
}
