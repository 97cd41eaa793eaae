//! The request path: resolve the model, let the core pick a connection, dispatch, classify
//! and record the outcome, fall back within the request, and answer.

use crate::auth::Client;
use crate::config::Format;
use crate::errors::{Body, ErrorShape, ProxyError, Source, full, upstream_message};
use crate::exchange::{self, ApiHeaders, Inbound, Prepared};
use crate::gateway::{Gateway, Plan, Slot, Target, seconds_since};
use crate::stream::{Finalizer, Relay, relay};
use crate::translate::{ClientApi, Untranslatable};
use bytes::Bytes;
use ferroute_core::admission::{FailMode, QueueLimits};
use ferroute_core::breaker::Ticket;
use ferroute_core::classify::Decision;
use ferroute_core::engine::{AttemptOutcome, Candidate, Exclusion, ExclusionReason, Refusal, Selection, refusal};
use http::{HeaderValue, Request, Response};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::Connect;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// Header naming the connection that served (or last failed) a request.
pub const SELECTED: &str = "x-ferroute-selected-connection-id";
/// Header naming request fields a translation dropped as advisory.
pub const DROPPED: &str = "x-ferroute-translation-dropped";
/// Largest upstream error body read.
const MAX_ERROR_BODY: usize = 64 * 1024;
/// Largest non-streamed upstream success body read.
const MAX_RESPONSE_BODY: usize = 64 * 1024 * 1024;

/// The last failure seen in a request.
struct Failure {
    decision: Decision,
    message: String,
    connection: String,
    provider: String,
}

/// Reads and parses a JSON request body, enforcing the size limit; returns the bytes too.
pub async fn read_json(
    req: Request<Incoming>,
    max: u64,
    deadline: Duration,
) -> Result<(Bytes, serde_json::Value), ProxyError> {
    let declared = req
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max) {
        return Err(too_large(max));
    }
    let collected = tokio::time::timeout(deadline, Limited::new(req.into_body(), max as usize).collect()).await;
    let Ok(collected) = collected else {
        return Err(ProxyError::new(
            Source::Downstream,
            408,
            "request_timeout",
            format!("the request body did not arrive within {} ms", deadline.as_millis()),
        ));
    };
    let bytes = match collected {
        Ok(c) => c.to_bytes(),
        Err(e) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => return Err(too_large(max)),
        Err(e) => {
            return Err(ProxyError::bad_request("body_read_error", format!("could not read the request body: {e}")));
        }
    };
    if bytes.is_empty() {
        return Err(ProxyError::bad_request("empty_body", "the request body is empty; send a JSON object"));
    }
    let v: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|e| ProxyError::bad_request("invalid_json", format!("the request body is not valid JSON: {e}")))?;
    if !v.is_object() {
        return Err(ProxyError::bad_request("invalid_json", "the request body must be a JSON object"));
    }
    Ok((bytes, v))
}

fn too_large(max: u64) -> ProxyError {
    ProxyError::new(
        Source::Downstream,
        413,
        "request_too_large",
        format!("the request body exceeds {max} bytes (server.max_body_bytes)"),
    )
}

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
    let code = match u.feature.as_str() {
        "previous_response_id" | "conversation" | "prompt" => "stored_responses_unsupported",
        _ => "untranslatable_feature",
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

fn failure_error(f: Failure) -> ProxyError {
    let d = &f.decision;
    let code = if d.upstream_status == 0 { "upstream_unreachable".to_owned() } else { d.reason.as_str().to_owned() };
    let mut e = ProxyError::new(Source::Upstream, d.status, code, f.message)
        .retry_after(d.client_retry_after)
        .with("provider", f.provider.into())
        .header(SELECTED, f.connection);
    if let Some(rule) = d.restated_by {
        e = e.with("upstream_status", d.upstream_status.into()).with("restated_by", rule.into());
    }
    e
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

/// One attempt's resilience bookkeeping; if dropped before an outcome is recorded (the client
/// went away mid-attempt), it records a neutral outcome so the breaker's probe slot returns.
pub struct Attempt<C: Connect + Clone + Send + Sync + 'static> {
    /// The gateway.
    pub gw: Arc<Gateway<C>>,
    /// The target.
    pub target: Target,
    /// The breaker ticket, until recorded.
    pub ticket: Option<Ticket>,
    /// Whether the next combo target is on the same provider.
    pub same_provider_next: bool,
}

impl<C: Connect + Clone + Send + Sync + 'static> Attempt<C> {
    /// Records the outcome (once).
    pub fn record(&mut self, outcome: AttemptOutcome<'_>) -> Option<Decision> {
        let ticket = self.ticket.take()?;
        let gw = &self.gw;
        let (provider, connection) = gw.parts(&self.target);
        let cand = gw.candidate(&self.target);
        let now = gw.clock.now();
        let wall = gw.clock.wall_ms(now);
        let d = gw.with_engine(|e| {
            e.record(
                now,
                &cand,
                provider.profile(),
                ticket,
                outcome,
                self.same_provider_next,
                connection.disable_cooling,
                Some(wall),
            )
        });
        gw.settle();
        d
    }
}

impl<C: Connect + Clone + Send + Sync + 'static> Drop for Attempt<C> {
    fn drop(&mut self) {
        if self.ticket.is_some() {
            self.record(AttemptOutcome::Neutral);
        }
    }
}

enum Step {
    Done(Response<Body>),
    /// Became ineligible while waiting for a slot: choose again.
    Excluded(String),
    Fallback(Failure),
    Fail(ProxyError, String),
}

fn upstream_request<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Gateway<C>,
    t: &Target,
    prep: &mut Prepared,
) -> Result<Request<Full<Bytes>>, ProxyError> {
    let (provider, connection) = gw.parts(t);
    let body =
        prep.body_for(&t.model).map_err(|e| ProxyError::new(Source::Internal, 500, "internal", e.to_string()))?;
    let path = match provider.format {
        Format::Openai => "/chat/completions",
        Format::Anthropic => "/messages",
    };
    let url = match &prep.query {
        Some(q) => format!("{}{path}?{q}", gw.base_urls[t.provider]),
        None => format!("{}{path}", gw.base_urls[t.provider]),
    };
    let mut b = Request::post(url)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json, text/event-stream");
    if let Some(key) = connection.api_key.as_deref() {
        b = match provider.format {
            Format::Openai => b.header(http::header::AUTHORIZATION, format!("Bearer {key}")),
            Format::Anthropic => b.header("x-api-key", key),
        };
    }
    for (name, value) in &prep.headers {
        b = b.header(*name, value.as_str());
    }
    b.body(Full::new(Bytes::from(body))).map_err(|e| {
        ProxyError::new(
            Source::Internal,
            500,
            "bad_upstream_request",
            format!("could not build the upstream request for {}: {e}", provider.id),
        )
    })
}

async fn attempt_once<C: Connect + Clone + Send + Sync + 'static>(
    mut attempt: Attempt<C>,
    inbound: &Inbound,
    prep: &mut Prepared,
) -> Step {
    let gw = Arc::clone(&attempt.gw);
    let target = attempt.target.clone();
    let (provider, connection) = gw.parts(&target);
    let conn_id = connection.id.clone();
    // M9: the request queue of provider + connection.
    let limits = QueueLimits::resolve(
        &gw.config.resilience.request_queue,
        None,
        connection.request_queue.as_ref(),
        provider.start_timeout_ms.map(Duration::from_millis),
    );
    let queue_key = format!("{}:{}", provider.id, connection.id);
    let queue_slot = match gw.admit(&queue_key, limits, FailMode::Closed).await {
        Ok(s) => s,
        Err(r) => {
            attempt.record(AttemptOutcome::Neutral);
            let e = ProxyError::new(Source::Internal, r.code.status(), r.code.as_str(), r.message)
                .with("provider", provider.id.clone().into());
            return Step::Fail(e, conn_id);
        }
    };
    // M7: the connection's max_concurrent semaphore; fail-open.
    let share_slot = match (connection.max_concurrent, gw.config.resilience.quota_share.enabled) {
        (Some(max), true) => {
            let qs = &gw.config.resilience.quota_share;
            let limits = QueueLimits {
                max_wait: Duration::from_millis(qs.queue_timeout_ms.max(1) as u64),
                execution_max_wait: limits.execution_max_wait,
                max_queue_depth: qs.max_queue_size.max(0) as usize,
                concurrent: max as usize,
            };
            gw.admit(&format!("share:{}", connection.id), limits, FailMode::Open).await.ok()
        }
        _ => None,
    };
    // The wait for a slot may have outlasted the breaker or the connection: re-check before
    // sending, so that nothing reaches a provider whose breaker opened meanwhile.
    let now = gw.clock.now();
    let cand = gw.candidate(&target);
    let ticket = attempt.ticket;
    if let Some((reason, _)) = ticket.and_then(|t| gw.with_engine(|e| e.recheck(now, &cand, t))) {
        tracing::debug!(provider = %provider.id, connection = %connection.id, reason = reason.as_str(), "excluded while queued");
        attempt.record(AttemptOutcome::Neutral);
        return Step::Excluded(conn_id);
    }
    let req = match upstream_request(&gw, &target, prep) {
        Ok(r) => r,
        Err(e) => {
            attempt.record(AttemptOutcome::Neutral);
            return Step::Fail(e, conn_id);
        }
    };
    if inbound.api == ClientApi::Responses || exchange::wire(inbound.api) != provider.format {
        gw.metrics.translation(exchange::api_name(inbound.api), exchange::format_name(provider.format));
    }
    let started = gw.clock.now();
    gw.observe(started, crate::gateway::Observed::Dispatch { provider: &provider.id, connection: &connection.id });
    let start_timeout = provider.start_timeout_ms.map(Duration::from_millis);
    let budget = match start_timeout {
        Some(s) => s.min(limits.execution_max_wait),
        None => limits.execution_max_wait,
    };
    let result = tokio::time::timeout(budget, gw.client.request(req)).await;
    gw.metrics.upstream_latency(&provider.id, seconds_since(started, gw.clock.now()));
    let resp = match result {
        Err(_) if start_timeout.is_some_and(|s| s <= limits.execution_max_wait) => {
            // The provider's own start timeout: a provider-level failure.
            return transport_failure(
                &mut attempt,
                format!("{} sent no response headers within {} ms", provider.id, budget.as_millis()),
            );
        }
        Err(_) => {
            attempt.record(AttemptOutcome::Neutral);
            let e = ProxyError::new(
                Source::Internal,
                504,
                "RATE_LIMIT_EXECUTION_TIMEOUT",
                format!(
                    "the upstream attempt exceeded execution_max_wait_ms ({} ms)",
                    limits.execution_max_wait.as_millis()
                ),
            )
            .with("provider", provider.id.clone().into());
            return Step::Fail(e, conn_id);
        }
        Ok(Err(e)) => return transport_failure(&mut attempt, format!("{} is unreachable: {e}", provider.id)),
        Ok(Ok(r)) => r,
    };
    let status = resp.status();
    if status.is_success() {
        let is_sse = resp
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if inbound.stream && is_sse {
            gw.metrics.request(status.as_u16(), &provider.id);
            let fin = Finalizer::new(
                attempt,
                vec![Some(queue_slot), share_slot].into_iter().flatten().collect::<Vec<Slot<C>>>(),
            );
            let relay_to = Relay {
                api: inbound.api,
                translator: exchange::translator(inbound, provider.format),
                connection: conn_id,
                idle_budget: limits.execution_max_wait,
            };
            let mut out = relay(fin, resp, relay_to);
            dropped_header(&mut out, &prep.dropped);
            return Step::Done(out);
        }
        let (parts, body) = resp.into_parts();
        let remaining = limits.execution_max_wait.saturating_sub(gw.clock.now().saturating_duration_since(started));
        let bytes = match tokio::time::timeout(remaining, Limited::new(body, MAX_RESPONSE_BODY).collect()).await {
            Ok(Ok(c)) => c.to_bytes(),
            Ok(Err(e)) => {
                return transport_failure(&mut attempt, format!("{} broke off its response: {e}", provider.id));
            }
            Err(_) => {
                attempt.record(AttemptOutcome::Neutral);
                return Step::Fail(
                    ProxyError::new(
                        Source::Internal,
                        504,
                        "RATE_LIMIT_EXECUTION_TIMEOUT",
                        "the upstream response body did not finish within execution_max_wait_ms",
                    ),
                    conn_id,
                );
            }
        };
        let bytes = match exchange::answer(inbound, provider.format, bytes) {
            Ok(b) => b,
            // A 200 whose body is not what the provider's format promises is the provider's
            // failure, like a broken-off body.
            Err(e) => return transport_failure(&mut attempt, format!("{} answered 200 but {e}", provider.id)),
        };
        attempt.record(AttemptOutcome::Success);
        drop((queue_slot, share_slot));
        gw.metrics.request(status.as_u16(), &provider.id);
        let mut out = Response::new(full(bytes));
        *out.status_mut() = parts.status;
        let same = exchange::wire(inbound.api) == provider.format && inbound.responses.is_none();
        match parts.headers.get(http::header::CONTENT_TYPE) {
            Some(ct) if same => {
                out.headers_mut().insert(http::header::CONTENT_TYPE, ct.clone());
            }
            _ => {
                out.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            }
        }
        if let Ok(v) = HeaderValue::from_str(&conn_id) {
            out.headers_mut().insert(SELECTED, v);
        }
        dropped_header(&mut out, &prep.dropped);
        return Step::Done(out);
    }
    // An upstream error: read a bounded body, classify, record.
    let (parts, body) = resp.into_parts();
    let text = match tokio::time::timeout(Duration::from_secs(30), Limited::new(body, MAX_ERROR_BODY).collect()).await {
        Ok(Ok(c)) => String::from_utf8_lossy(&c.to_bytes()).into_owned(),
        _ => String::new(),
    };
    let headers: Vec<(&str, &str)> =
        parts.headers.iter().filter_map(|(k, v)| v.to_str().ok().map(|v| (k.as_str(), v))).collect();
    let Some(decision) =
        attempt.record(AttemptOutcome::Upstream { status: status.as_u16(), headers: &headers, body: &text })
    else {
        return Step::Fail(
            ProxyError::new(Source::Internal, 500, "internal", "the outcome was recorded twice"),
            conn_id,
        );
    };
    let failure = Failure {
        message: upstream_message(&text),
        decision,
        connection: conn_id.clone(),
        provider: provider.id.clone(),
    };
    if failure.decision.should_fallback { Step::Fallback(failure) } else { Step::Fail(failure_error(failure), conn_id) }
}

/// Names the advisory fields a translation left behind.
fn dropped_header(resp: &mut Response<Body>, dropped: &[String]) {
    if dropped.is_empty() {
        return;
    }
    if let Ok(v) = HeaderValue::from_str(&dropped.join(", ")) {
        resp.headers_mut().insert(DROPPED, v);
    }
}

fn transport_failure<C: Connect + Clone + Send + Sync + 'static>(attempt: &mut Attempt<C>, message: String) -> Step {
    let provider = attempt.gw.parts(&attempt.target).0.id.clone();
    let connection = attempt.gw.parts(&attempt.target).1.id.clone();
    tracing::warn!(%provider, %connection, %message, "upstream transport failure");
    match attempt.record(AttemptOutcome::Transport) {
        Some(decision) => Step::Fallback(Failure { decision, message, connection, provider }),
        None => {
            Step::Fail(ProxyError::new(Source::Internal, 500, "internal", "the outcome was recorded twice"), connection)
        }
    }
}
