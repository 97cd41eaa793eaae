//! One attempt at one target: wait for the queue slots, re-check, send the request in the
//! provider's format, and turn what came back into the client's answer, a fallback, or a
//! final error.

use crate::edge::errors::{Body, ProxyError, Source, full, upstream_message};
use crate::request::attempt::{Attempt, DROPPED};
use crate::request::endpoint::{SELECTED, SELECTED_HEADER};
use crate::request::exchange::{self, ANTHROPIC_BETA, Inbound, Prepared};
use crate::request::resolve::Target;
use crate::request::stream::{Finalizer, Relay, relay};
use crate::state::gateway::queues::Slot;
use crate::state::gateway::{Gateway, seconds_since};
use bytes::Bytes;
use ferroute_core::admission::{FailMode, QueueLimits};
use ferroute_core::classify::Decision;
use ferroute_core::engine::AttemptOutcome;
use ferroute_core::usage_limit::lane::START_MARGIN;
use ferroute_core::usage_limit::{LaneRequest, SLOW_HEADER, SLOW_VALUE, Seen, Step as LaneStep, Unified};
use http::{HeaderValue, Request, Response};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::connect::Connect;
use std::sync::Arc;
use std::time::Duration;

/// Largest upstream error body read.
const MAX_ERROR_BODY: usize = 64 * 1024;
/// Largest non-streamed upstream success body read.
const MAX_RESPONSE_BODY: usize = 64 * 1024 * 1024;

/// The last failure seen in a request.
pub(crate) struct Failure {
    pub(crate) decision: Decision,
    pub(crate) message: String,
    pub(crate) connection: String,
    pub(crate) provider: String,
}

pub(crate) fn failure_error(f: Failure) -> ProxyError {
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

pub(crate) enum Step {
    Done(Response<Body>),
    /// Became ineligible while waiting for a slot: choose again.
    Excluded,
    Fallback(Failure),
    Fail(ProxyError, String),
}

/// The request to send, and the OAuth token generation it carries (for an OAuth connection).
fn upstream_request<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Gateway<C>,
    t: &Target,
    prep: &mut Prepared,
    slow: bool,
) -> Result<(Request<Full<Bytes>>, Option<u64>), ProxyError> {
    let provider = &gw.config.providers[t.provider];
    let body =
        prep.body_for(&t.model).map_err(|e| ProxyError::new(Source::Internal, 500, "internal", e.to_string()))?;
    let unsendable = |e: &str| {
        ProxyError::new(
            Source::Internal,
            500,
            "bad_upstream_request",
            format!("could not build the upstream request for {}: {e}", provider.id),
        )
    };
    let (query, stream) = (prep.query.as_deref(), prep.stream);
    let uri = gw.endpoints.uri(t.provider, provider.format, query, &t.model, stream).map_err(|e| unsendable(&e))?;
    let credential = gw.endpoints.credential(t.connection).map_err(unsendable)?;
    let mut req = Request::new(Full::new(body));
    *req.method_mut() = http::Method::POST;
    *req.uri_mut() = uri;
    let h = req.headers_mut();
    h.reserve(4 + prep.headers.len());
    h.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    h.insert(http::header::ACCEPT, HeaderValue::from_static("application/json, text/event-stream"));
    if let Some((name, value)) = credential {
        h.insert(name.clone(), value.clone());
    }
    for (name, value) in &prep.headers {
        h.append(name.clone(), value.clone());
    }
    if slow {
        h.insert(SLOW_HEADER, HeaderValue::from_static(SLOW_VALUE));
    }
    let generation = match &gw.config.connections[t.connection].oauth {
        Some(o) => {
            let c = gw.accounts.credential(&gw.config.connections[t.connection].id).ok_or_else(|| {
                unsendable("the OAuth account has no tokens (see the log for why they could not be read)")
            })?;
            oauth_headers(h, o, c.authorization);
            Some(c.generation)
        }
        None => None,
    };
    Ok((req, generation))
}

/// An OAuth connection's headers: its bearer token, the preset's beta merged into the client's
/// `anthropic-beta`, and the account id header its backend expects.
fn oauth_headers(h: &mut http::HeaderMap, o: &crate::config::OAuthConfig, authorization: HeaderValue) {
    h.insert(http::header::AUTHORIZATION, authorization);
    let Some(preset) = o.preset() else { return };
    if let Some(beta) = preset.beta {
        let merged = match h.get(&ANTHROPIC_BETA).and_then(|v| v.to_str().ok()) {
            Some(list) if list.split(',').any(|b| b.trim() == beta) => None,
            Some(list) if !list.trim().is_empty() => Some(format!("{list},{beta}")),
            _ => Some(beta.to_owned()),
        };
        if let Some(v) = merged.and_then(|m| HeaderValue::try_from(m).ok()) {
            h.insert(ANTHROPIC_BETA.clone(), v);
        }
    }
    if let (Some(name), Some(id)) = (preset.account_header, o.account_id.as_deref())
        && let Ok(v) = HeaderValue::try_from(id)
    {
        h.insert(name, v);
    }
}

/// One attempt. `route_key` names the combo or model the request routes by (lkgp remembers
/// the target that served it).
pub(crate) async fn attempt_once<C: Connect + Clone + Send + Sync + 'static>(
    mut attempt: Attempt<C>,
    inbound: &Inbound,
    prep: &mut Prepared,
    route_key: &str,
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
    let queue_slot = match gw.admit(gw.endpoints.queue_key(target.connection), limits, FailMode::Closed).await {
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
    crate::state::interleave::point("upstream.before_send").await;
    // The wait for a slot may have outlasted the breaker or the connection: re-check before
    // sending, so that nothing reaches a provider whose breaker opened meanwhile.
    let now = gw.clock.now();
    let cand = gw.candidate(&target);
    let ticket = attempt.ticket;
    if let Some((reason, _)) = ticket.and_then(|t| gw.with_engine(|e| e.recheck(now, &cand, t))) {
        tracing::debug!(provider = %provider.id, connection = %connection.id, reason = reason.as_str(), "excluded while queued");
        attempt.record(AttemptOutcome::Neutral);
        return Step::Excluded;
    }
    if exchange::native(inbound.api) != provider.format {
        gw.metrics.translation(exchange::api_name(inbound.api), exchange::format_name(provider.format));
    }
    let start_timeout = provider.start_timeout_ms.map(Duration::from_millis);
    let budget = match start_timeout {
        Some(s) => s.min(limits.execution_max_wait),
        None => limits.execution_max_wait,
    };
    // M4: a Claude usage-limit 429 may be answered on this same connection (a reset, then the
    // low-priority lane) before it goes anywhere else.
    let usage_limit = connection.usage_limit.as_ref().filter(|u| u.options().any());
    let mut lane = LaneRequest::default();
    let mut slow = usage_limit.is_some() && gw.with_engine(|e| e.lane_slow(&conn_id, now));
    let first_send = gw.clock.now();
    let mut started;
    let mut resend = false;
    let mut auth_renewed = false;
    let resp = loop {
        let (mut req, generation) = match upstream_request(&gw, &target, prep, slow) {
            Ok(r) => r,
            Err(e) => {
                attempt.record(AttemptOutcome::Neutral);
                return Step::Fail(e, conn_id);
            }
        };
        if let Some(v) = attempt.trace.ids.and_then(|i| HeaderValue::try_from(i.traceparent()).ok()) {
            req.headers_mut().insert(TRACEPARENT.clone(), v);
        }
        lane.sending(slow);
        started = gw.clock.now();
        attempt.trace.sent(started);
        gw.observe(
            started,
            crate::state::gateway::Observed::Dispatch {
                provider: &provider.id,
                connection: &connection.id,
                model: &target.model,
                request: attempt.request,
                round: attempt.round,
                resend,
            },
        );
        let left = budget.saturating_sub(started.saturating_duration_since(first_send));
        let result = tokio::time::timeout(left, gw.client.request(req)).await;
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
        // An OAuth account's token refused: refresh once (or take the one another request
        // refreshed meanwhile) and send again on the same connection, before anything counts.
        if let Some(generation) = generation.filter(|_| resp.status() == 401 && !auth_renewed) {
            auth_renewed = true;
            let left = budget.saturating_sub(gw.clock.now().saturating_duration_since(first_send));
            if crate::sessions::refresh::renew(&gw, &conn_id, generation, left).await {
                drop(resp);
                resend = true;
                continue;
            }
        }
        let Some(cfg) = usage_limit else { break resp };
        let opts = cfg.options();
        let headers: Vec<(&str, &str)> =
            resp.headers().iter().filter_map(|(k, v)| v.to_str().ok().map(|v| (k.as_str(), v))).collect();
        let unified = Unified::parse(&headers);
        let status = resp.status().as_u16();
        let now = gw.clock.now();
        let left = budget.saturating_sub(now.saturating_duration_since(first_send));
        let wall = gw.clock.wall_ms(now);
        let seen = Seen { connection: &conn_id, now, wall_ms: wall, status, headers: &unified };
        let mut step = gw.with_engine(|e| e.lane_response(&seen, opts, &mut lane, left));
        if step == LaneStep::TryReset {
            let outcome =
                crate::sessions::usage_reset::try_reset(&gw, connection, cfg, left.saturating_sub(START_MARGIN)).await;
            let now = gw.clock.now();
            let seen = Seen { now, wall_ms: gw.clock.wall_ms(now), ..seen };
            step = gw.with_engine(|e| e.lane_reset(&seen, outcome, opts, &mut lane));
        }
        gw.settle();
        let LaneStep::Retry { slow: next_slow, after } = step else { break resp };
        drop(resp);
        if !after.is_zero() {
            tracing::info!(connection = %conn_id, wait_ms = after.as_millis() as u64, "usage limit: lane slot busy, waiting");
            gw.metrics.usage_limit(&conn_id, "slow_wait");
            tokio::time::sleep(after).await;
        }
        // The wait may have outlasted the breaker or the connection.
        let now = gw.clock.now();
        if let Some((reason, _)) = ticket.and_then(|t| gw.with_engine(|e| e.recheck(now, &cand, t))) {
            tracing::debug!(connection = %conn_id, reason = reason.as_str(), "excluded while waiting in the usage-limit lane");
            attempt.record(AttemptOutcome::Neutral);
            return Step::Excluded;
        }
        slow = next_slow;
        resend = true;
    };
    // Another request's outcome may be recorded between this answer and its own.
    crate::state::interleave::point("upstream.before_outcome").await;
    let status = resp.status();
    attempt.trace.answered(gw.clock.now(), status.as_u16(), resp.headers());
    observe_response(&gw, &target, &resp, started, status.is_success().then_some(route_key));
    if status.is_success() {
        let is_sse = resp
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if is_sse && !inbound.stream {
            // An event stream to a request for one JSON answer is not that answer: the
            // provider's failure, like a body that does not parse.
            return transport_failure(
                &mut attempt,
                format!("{} answered a request without `stream` with an event stream", provider.id),
            );
        }
        if inbound.stream && is_sse {
            gw.count_answer(status.as_u16(), &provider.id);
            let fin = Finalizer::new(
                attempt,
                vec![Some(queue_slot), share_slot].into_iter().flatten().collect::<Vec<Slot<C>>>(),
            );
            let relay_to = Relay {
                api: inbound.api,
                translator: exchange::translator(inbound, provider.format),
                connection: gw.endpoints.selected(target.connection).cloned(),
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
        attempt.trace.usage_from(&bytes);
        let bytes = match exchange::answer(inbound, provider.format, bytes) {
            Ok(b) => b,
            // A 200 whose body is not what the provider's format promises is the provider's
            // failure, like a broken-off body.
            Err(e) => return transport_failure(&mut attempt, format!("{} answered 200 but {e}", provider.id)),
        };
        attempt.record(AttemptOutcome::Success);
        drop((queue_slot, share_slot));
        gw.count_answer(status.as_u16(), &provider.id);
        let mut out = Response::new(full(bytes));
        *out.status_mut() = parts.status;
        let same = exchange::native(inbound.api) == provider.format;
        match parts.headers.get(http::header::CONTENT_TYPE) {
            Some(ct) if same => {
                out.headers_mut().insert(http::header::CONTENT_TYPE, ct.clone());
            }
            _ => {
                out.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            }
        }
        if let Some(v) = gw.endpoints.selected(target.connection) {
            out.headers_mut().insert(SELECTED_HEADER.clone(), v.clone());
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
    let tool_limit = ferroute_core::classify::tool_limit(status.as_u16(), &text, inbound_tools(inbound));
    let tool_limited = tool_limit.is_some();
    if let Some(limit) = tool_limit {
        tracing::info!(provider = %provider.id, model = %target.model, limit, "provider refused the number of tools; later requests with more skip it");
        gw.with_engine(|e| e.note_tool_limit(&provider.id, &target.model, limit));
    }
    let Some(decision) =
        attempt.record(AttemptOutcome::Upstream { status: status.as_u16(), headers: &headers, body: &text })
    else {
        return Step::Fail(
            ProxyError::new(Source::Internal, 500, "internal", "the outcome was recorded twice"),
            conn_id,
        );
    };
    let siblings = crate::sessions::egress::siblings(&gw, &target);
    if !siblings.is_empty() {
        let now = gw.clock.now();
        let sib: Vec<(&str, bool)> = siblings.iter().map(|(id, d)| (id.as_str(), *d)).collect();
        let cooled = gw.with_engine(|e| e.cool_siblings(now, &conn_id, &decision, &sib));
        if !cooled.is_empty() {
            tracing::info!(connection = %conn_id, siblings = ?cooled, "IP-bucketed quota: siblings on the same egress IP cool down too");
        }
        gw.settle();
    }
    let mut decision = decision;
    if tool_limited {
        // A model-scoped refusal: the next target may accept this many tools.
        decision.should_fallback = true;
    }
    let failure = Failure {
        message: upstream_message(&text),
        decision,
        connection: conn_id.clone(),
        provider: provider.id.clone(),
    };
    note_error(&gw, &conn_id, status.as_u16(), &failure.message);
    if failure.decision.should_fallback { Step::Fallback(failure) } else { Step::Fail(failure_error(failure), conn_id) }
}

/// What every response teaches routing: the quota its headers report, the time to its
/// headers, the egress IP it left from (M13), and for a success the target that served the
/// route (lkgp).
fn observe_response<C: Connect + Clone + Send + Sync + 'static, B>(
    gw: &Gateway<C>,
    target: &Target,
    resp: &Response<B>,
    started: std::time::Instant,
    good_for: Option<&str>,
) {
    let (provider, connection) = gw.parts(target);
    let now = gw.clock.now();
    let wall = gw.clock.wall_ms(now);
    let headers: Vec<(&str, &str)> =
        resp.headers().iter().filter_map(|(k, v)| v.to_str().ok().map(|v| (k.as_str(), v))).collect();
    let cand = gw.candidate(target);
    gw.with_engine(|e| {
        e.observe_quota(now, &connection.id, &headers, wall);
        e.observe_latency(&provider.id, now.saturating_duration_since(started));
        if let Some(key) = good_for {
            e.note_success(key, &cand);
        }
    });
    if let Some(info) = resp.extensions().get::<hyper_util::client::legacy::connect::HttpInfo>() {
        crate::sessions::egress::observe(gw, target.connection, info.local_addr().ip());
    }
}

/// W3C trace context, passed on to the upstream when spans are exported.
static TRACEPARENT: http::HeaderName = http::HeaderName::from_static("traceparent");

/// Keeps a failed attempt's message as its connection's last error (for the dashboard).
fn note_error<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Gateway<C>,
    connection: &str,
    status: u16,
    message: &str,
) {
    let at = crate::state::clock::rfc3339(gw.clock.wall_now_ms());
    gw.history.note_error(connection, crate::state::history::LastError { at, status, message: message.to_owned() });
}

/// How many tools the request offers.
fn inbound_tools(inbound: &Inbound) -> usize {
    inbound.tools
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
    note_error(&attempt.gw, &connection, 0, &message);
    attempt.trace.said(&message);
    match attempt.record(AttemptOutcome::Transport) {
        Some(decision) => Step::Fallback(Failure { decision, message, connection, provider }),
        None => {
            Step::Fail(ProxyError::new(Source::Internal, 500, "internal", "the outcome was recorded twice"), connection)
        }
    }
}
