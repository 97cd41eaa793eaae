//! One attempt at one target: wait for the queue slots, re-check, send the request in the
//! provider's format, and turn what came back into the client's answer, a fallback, or a
//! final error.

use crate::edge::errors::{ProxyError, Source};
pub(crate) use crate::request::answer::{Failure, Step, failure_error, transport_failure};
use crate::request::answer::{Sent, failed, header_pairs, succeeded, with_header_pairs};
use crate::request::attempt::Attempt;
use crate::request::exchange::{self, ANTHROPIC_BETA, Inbound, Prepared};
use crate::request::resolve::Target;
use crate::state::gateway::queues::Slot;
use crate::state::gateway::{Gateway, seconds_since};
use bytes::Bytes;
use ferroute_core::admission::{FailMode, QueueLimits};
use ferroute_core::engine::AttemptOutcome;
use ferroute_core::usage_limit::lane::START_MARGIN;
use ferroute_core::usage_limit::{LaneRequest, SLOW_HEADER, SLOW_VALUE, Seen, Step as LaneStep, Unified};
use http::{HeaderValue, Request, Response};
use http_body_util::Full;
use hyper_util::client::legacy::connect::Connect;
use std::sync::Arc;
use std::time::Duration;

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
    let oauth = gw.config.connections[t.connection].oauth.as_ref();
    let codex = oauth.and_then(|o| o.preset()).is_some_and(|p| p.codex_backend);
    let body = if codex {
        crate::request::codex::body(&body, &mut prep.dropped).map_err(|e| {
            ProxyError::bad_request("invalid_request", format!("{e} (the Codex backend takes a Responses request)"))
        })?
    } else {
        body
    };
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
    if let Some(spare) = prep.take_headers() {
        *req.headers_mut() = spare;
    }
    let h = req.headers_mut();
    // Room for every header this request may carry (host, content type, accept, credential,
    // the client's API headers, the slow lane's, an OAuth account's three), so that the map
    // grows at most once, and a reused map of the usual size not at all.
    h.reserve(4 + prep.headers.len() + usize::from(slow) + if oauth.is_some() { 5 } else { 0 });
    if let Some(host) = gw.endpoints.host(t.provider) {
        h.insert(http::header::HOST, host.clone());
    }
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
            oauth_headers(h, o, c.authorization, c.account_id);
            if codex {
                crate::request::codex::headers(h, &prep.codex);
            }
            Some(c.generation)
        }
        None => None,
    };
    Ok((req, generation))
}

/// An OAuth connection's headers: its bearer token, the preset's beta merged into the client's
/// `anthropic-beta`, and the account id header its backend expects.
fn oauth_headers(
    h: &mut http::HeaderMap,
    o: &crate::config::OAuthConfig,
    authorization: HeaderValue,
    account_id: Option<HeaderValue>,
) {
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
    if let (Some(name), Some(id)) = (preset.account_header, account_id) {
        h.insert(name, id);
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
    let (limits, slots) = match admitted(&mut attempt).await {
        Ok(x) => x,
        Err(step) => return step,
    };
    let provider = gw.parts(&target).0;
    if exchange::native(inbound.api) != provider.format {
        gw.metrics.translation(exchange::api_name(inbound.api), exchange::format_name(provider.format));
    }
    let (resp, started) = match answered(&mut attempt, prep, &limits).await {
        Ok(x) => x,
        Err(step) => return step,
    };
    // Another request's outcome may be recorded between this answer and its own.
    crate::state::interleave::point("upstream.before_outcome").await;
    let status = resp.status();
    let now = gw.clock.now();
    attempt.trace.answered(now, status.as_u16(), resp.headers());
    observe_response(&gw, &target, &resp, (started, now), status.is_success().then_some(route_key));
    let sent = Sent { started, limits, slots };
    if status.is_success() {
        succeeded(attempt, inbound, prep, resp, sent).await
    } else {
        failed(attempt, inbound, resp).await
    }
}

/// The attempt's queue slots, once the target is still eligible after the wait for them.
async fn admitted<C: Connect + Clone + Send + Sync + 'static>(
    attempt: &mut Attempt<C>,
) -> Result<(QueueLimits, Vec<Slot<C>>), Step> {
    let gw = Arc::clone(&attempt.gw);
    let (limits, queue_slot, share_slot) = match admit(&gw, &attempt.target).await {
        Ok(x) => x,
        Err(e) => {
            attempt.record(AttemptOutcome::Neutral);
            return Err(Step::Fail(e, gw.parts(&attempt.target).1.id.clone()));
        }
    };
    crate::state::interleave::point("upstream.before_send").await;
    // The wait for a slot may have outlasted the breaker or the connection: re-check before
    // sending, so that nothing reaches a provider whose breaker opened meanwhile.
    if turned_ineligible(attempt, "excluded while queued") {
        return Err(Step::Excluded);
    }
    let mut slots = Vec::with_capacity(2);
    slots.push(queue_slot);
    slots.extend(share_slot);
    Ok((limits, slots))
}

/// Whether the attempt's target turned ineligible while it waited (`waited` says for what, in
/// the log); the attempt then ends without an outcome.
fn turned_ineligible<C: Connect + Clone + Send + Sync + 'static>(attempt: &mut Attempt<C>, waited: &str) -> bool {
    let gw = Arc::clone(&attempt.gw);
    let now = gw.clock.now();
    let cand = gw.candidate(&attempt.target);
    let Some((reason, _)) = attempt.ticket.and_then(|t| gw.with_engine(|e| e.recheck(now, &cand, t))) else {
        return false;
    };
    let (provider, connection) = gw.parts(&attempt.target);
    tracing::debug!(provider = %provider.id, connection = %connection.id, reason = reason.as_str(), "{waited}");
    attempt.record(AttemptOutcome::Neutral);
    true
}

/// Sends the request until an answer is the attempt's to relay: again after an OAuth token is
/// renewed (once), and as M4's usage-limit lane says (a Claude usage-limit 429 may be answered
/// on this same connection, after a reset or in the low-priority lane, before it goes
/// anywhere else). Returns the answer's head and when it was sent.
async fn answered<C: Connect + Clone + Send + Sync + 'static>(
    attempt: &mut Attempt<C>,
    prep: &mut Prepared,
    limits: &QueueLimits,
) -> Result<(Response<hyper::body::Incoming>, std::time::Instant), Step> {
    let gw = Arc::clone(&attempt.gw);
    let target = attempt.target.clone();
    let (provider, connection) = gw.parts(&target);
    let conn_id = connection.id.as_str();
    let clock = SendClock::new(provider.start_timeout_ms, limits, gw.clock.now());
    let usage_limit = connection.usage_limit.as_ref().filter(|u| u.options().any());
    let mut lane = LaneRequest::default();
    let mut slow = usage_limit.is_some() && gw.with_engine(|e| e.lane_slow(conn_id, gw.clock.now()));
    let mut resend = false;
    let mut auth_renewed = false;
    loop {
        let (mut req, generation) = upstream_request(&gw, &target, prep, slow).map_err(|e| {
            attempt.record(AttemptOutcome::Neutral);
            Step::Fail(e, conn_id.to_owned())
        })?;
        if let Some(v) = attempt.trace.ids.and_then(|i| HeaderValue::try_from(i.traceparent()).ok()) {
            req.headers_mut().insert(TRACEPARENT.clone(), v);
        }
        lane.sending(slow);
        let (resp, started) = send(attempt, req, &clock, resend).await?;
        // An OAuth account's token refused: refresh once (or take the one another request
        // refreshed meanwhile) and send again on the same connection, before anything counts.
        if let Some(generation) = generation.filter(|_| resp.status() == 401 && !auth_renewed) {
            auth_renewed = true;
            let left = clock.left(gw.clock.now());
            // Boxed, as the lane's step below: rarer paths kept out of the request path's future.
            if Box::pin(crate::sessions::refresh::renew(&gw, conn_id, generation, left)).await {
                drop(resp);
                resend = true;
                continue;
            }
        }
        let Some(cfg) = usage_limit else { return Ok((resp, started)) };
        let step = Box::pin(lane_step(&gw, connection, cfg, &resp, clock.left(gw.clock.now()), &mut lane)).await;
        let LaneStep::Retry { slow: next_slow, after } = step else { return Ok((resp, started)) };
        drop(resp);
        if !after.is_zero() {
            tracing::info!(connection = %conn_id, wait_ms = after.as_millis() as u64, "usage limit: lane slot busy, waiting");
            gw.metrics.usage_limit(conn_id, "slow_wait");
            tokio::time::sleep(after).await;
        }
        // The wait may have outlasted the breaker or the connection.
        if turned_ineligible(attempt, "excluded while waiting in the usage-limit lane") {
            return Err(Step::Excluded);
        }
        slow = next_slow;
        resend = true;
    }
}

/// The time an attempt has to get response headers: its budget from the first send (the
/// provider's start timeout when it has one, within the execution budget).
struct SendClock {
    first_send: std::time::Instant,
    budget: Duration,
    start_timeout: Option<Duration>,
    execution: Duration,
}

impl SendClock {
    fn new(start_timeout_ms: Option<u64>, limits: &QueueLimits, first_send: std::time::Instant) -> Self {
        let start_timeout = start_timeout_ms.map(Duration::from_millis);
        let execution = limits.execution_max_wait;
        let budget = start_timeout.map_or(execution, |s| s.min(execution));
        SendClock { first_send, budget, start_timeout, execution }
    }

    /// What is left of the budget at `now`.
    fn left(&self, now: std::time::Instant) -> Duration {
        self.budget.saturating_sub(now.saturating_duration_since(self.first_send))
    }
}

/// Sends `req` within what is left of the budget; returns the response head and when it was
/// sent. No headers in time, or no provider, ends the attempt.
async fn send<C: Connect + Clone + Send + Sync + 'static>(
    attempt: &mut Attempt<C>,
    req: Request<Full<Bytes>>,
    clock: &SendClock,
    resend: bool,
) -> Result<(Response<hyper::body::Incoming>, std::time::Instant), Step> {
    let gw = Arc::clone(&attempt.gw);
    let (provider, connection) = gw.parts(&attempt.target);
    let started = gw.clock.now();
    attempt.trace.sent(started);
    gw.observe(
        started,
        crate::state::gateway::Observed::Dispatch {
            provider: &provider.id,
            connection: &connection.id,
            model: &attempt.target.model,
            request: attempt.request,
            round: attempt.round,
            resend,
        },
    );
    let deadline = crate::state::clock::deadline(clock.first_send, clock.budget);
    let mut req = req;
    let proxy = gw.authorize_for_proxy(attempt.target.connection, &mut req);
    let result = tokio::time::timeout_at(deadline, gw.client_for(attempt.target.connection).request(req)).await;
    gw.metrics.upstream_latency(&provider.id, seconds_since(started, gw.clock.now()));
    match result {
        Ok(Ok(r)) if r.status() == http::StatusCode::PROXY_AUTHENTICATION_REQUIRED && proxy.is_some() => {
            let shown = proxy.unwrap_or_default();
            let message = format!("{} is unreachable: the proxy {shown} refused the credentials (407)", provider.id);
            Err(crate::request::answer::failure_without_answer(attempt, message, AttemptOutcome::Egress))
        }
        Ok(Ok(r)) => Ok((r, started)),
        Err(_) if clock.start_timeout.is_some_and(|s| s <= clock.execution) => {
            // The provider's own start timeout: a provider-level failure.
            let message = format!("{} sent no response headers within {} ms", provider.id, clock.budget.as_millis());
            Err(transport_failure(attempt, message))
        }
        Err(_) => {
            attempt.record(AttemptOutcome::Neutral);
            let message =
                format!("the upstream attempt exceeded execution_max_wait_ms ({} ms)", clock.execution.as_millis());
            let e = ProxyError::new(Source::Internal, 504, "RATE_LIMIT_EXECUTION_TIMEOUT", message)
                .with("provider", provider.id.clone().into());
            Err(Step::Fail(e, connection.id.clone()))
        }
        Ok(Err(e)) => {
            let message = format!("{} is unreachable: {}", provider.id, crate::state::outbound::chain(&e));
            // The connection's own proxy failing is the connection's failure, not the provider's.
            let outcome =
                if crate::state::outbound::is_egress(&e) { AttemptOutcome::Egress } else { AttemptOutcome::Transport };
            Err(crate::request::answer::failure_without_answer(attempt, message, outcome))
        }
    }
}

/// M9 and M7: the request queue of provider + connection, and the connection's
/// `max_concurrent` semaphore (fail-open); a full queue is the refusal to answer.
async fn admit<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Arc<Gateway<C>>,
    target: &Target,
) -> Result<(QueueLimits, Slot<C>, Option<Slot<C>>), ProxyError> {
    let (provider, connection) = gw.parts(target);
    let limits = QueueLimits::resolve(
        &gw.config.resilience.request_queue,
        None,
        connection.request_queue.as_ref(),
        provider.start_timeout_ms.map(Duration::from_millis),
    );
    let queue_slot =
        gw.admit(gw.endpoints.queue_key(target.connection), limits, FailMode::Closed).await.map_err(|r| {
            ProxyError::new(Source::Internal, r.code.status(), r.code.as_str(), r.message)
                .with("provider", provider.id.clone().into())
        })?;
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
    Ok((limits, queue_slot, share_slot))
}

/// M4: what the usage-limit lane makes of an answer on this connection: go on with it, or send
/// again (after trying a reset, or in the low-priority lane).
async fn lane_step<C: Connect + Clone + Send + Sync + 'static, B>(
    gw: &Arc<Gateway<C>>,
    connection: &crate::config::ConnectionConfig,
    cfg: &crate::config::UsageLimitConfig,
    resp: &Response<B>,
    left: Duration,
    lane: &mut LaneRequest,
) -> LaneStep {
    let opts = cfg.options();
    let headers = header_pairs(resp.headers());
    let unified = Unified::parse(&headers);
    let now = gw.clock.now();
    let wall = gw.clock.wall_ms(now);
    let seen =
        Seen { connection: &connection.id, now, wall_ms: wall, status: resp.status().as_u16(), headers: &unified };
    let mut step = gw.with_engine(|e| e.lane_response(&seen, opts, lane, left));
    if step == LaneStep::TryReset {
        let outcome =
            crate::sessions::usage_reset::try_reset(gw, connection, cfg, left.saturating_sub(START_MARGIN)).await;
        let now = gw.clock.now();
        let seen = Seen { now, wall_ms: gw.clock.wall_ms(now), ..seen };
        step = gw.with_engine(|e| e.lane_reset(&seen, outcome, opts, lane));
    }
    gw.settle();
    step
}

/// What every response teaches routing: the quota its headers report, the time to its
/// headers (sent at `started`, its head read at `now`), the egress IP it left from (M13), and
/// for a success the target that served the route (lkgp).
fn observe_response<C: Connect + Clone + Send + Sync + 'static, B>(
    gw: &Gateway<C>,
    target: &Target,
    resp: &Response<B>,
    (started, now): (std::time::Instant, std::time::Instant),
    good_for: Option<&str>,
) {
    let (provider, connection) = gw.parts(target);
    let wall = gw.clock.wall_ms(now);
    let cand = gw.candidate(target);
    with_header_pairs(resp.headers(), |headers| {
        gw.with_engine(|e| {
            e.observe_quota(now, &connection.id, headers, wall);
            e.observe_latency(&provider.id, now.saturating_duration_since(started));
            if let Some(key) = good_for {
                e.note_success(key, &cand);
            }
        })
    });
    if let Some(info) = resp.extensions().get::<hyper_util::client::legacy::connect::HttpInfo>() {
        crate::sessions::egress::observe(gw, target.connection, info.local_addr().ip());
    }
}

/// W3C trace context, passed on to the upstream when spans are exported.
static TRACEPARENT: http::HeaderName = http::HeaderName::from_static("traceparent");
