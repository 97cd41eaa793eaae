//! The end of an attempt that got an answer: a success relayed or read, translated into the
//! client's API and answered; an upstream error read, classified and recorded, to fall back
//! from or to answer with. And what an attempt's end is ([`Step`]).

use crate::edge::body::whole;
use crate::edge::errors::{Body, ProxyError, Source, full, upstream_message};
use crate::request::attempt::{Attempt, DROPPED};
use crate::request::endpoint::{SELECTED, SELECTED_HEADER};
use crate::request::exchange::{self, Inbound, Prepared};
use crate::request::peek::{Peeked, peek};
use crate::request::stream::{Finalizer, Relay, relay};
use crate::state::gateway::Gateway;
use crate::state::gateway::queues::Slot;
use ferroute_core::admission::QueueLimits;
use ferroute_core::classify::Decision;
use ferroute_core::engine::AttemptOutcome;
use http::{HeaderValue, Response};
use http_body_util::Limited;
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::Connect;
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// What a sent attempt carries to its end: when it went out, its limits, and the queue slots
/// it holds (released when the answer is read, or when its stream ends).
pub(crate) struct Sent<C: Connect + Clone + Send + Sync + 'static> {
    pub(crate) started: Instant,
    pub(crate) limits: QueueLimits,
    pub(crate) slots: Vec<Slot<C>>,
}

/// A response's headers as (name, value) pairs for the core, those that are text.
pub(crate) fn header_pairs(headers: &http::HeaderMap) -> Vec<(&str, &str)> {
    let mut pairs = Vec::with_capacity(headers.len());
    pairs.extend(text_headers(headers));
    pairs
}

fn text_headers(headers: &http::HeaderMap) -> impl Iterator<Item = (&str, &str)> {
    headers.iter().filter_map(|(k, v)| v.to_str().ok().map(|v| (k.as_str(), v)))
}

/// [`header_pairs`] given to `f`, on the stack for a usual response's few headers: a success
/// reads them for quota without allocating.
pub(crate) fn with_header_pairs<R>(headers: &http::HeaderMap, f: impl FnOnce(&[(&str, &str)]) -> R) -> R {
    const ON_STACK: usize = 16;
    if headers.len() > ON_STACK {
        return f(&header_pairs(headers));
    }
    let text = text_headers(headers);
    let mut pairs = [("", ""); ON_STACK];
    let mut n = 0;
    for (slot, pair) in pairs.iter_mut().zip(text) {
        *slot = pair;
        n += 1;
    }
    f(&pairs[..n])
}

/// A 2xx: relayed as a stream, or read whole and answered in the client's API.
pub(crate) async fn succeeded<C: Connect + Clone + Send + Sync + 'static>(
    mut attempt: Attempt<C>,
    inbound: &Inbound,
    prep: &Prepared,
    resp: Response<Incoming>,
    sent: Sent<C>,
) -> Step {
    let gw = Arc::clone(&attempt.gw);
    let target = attempt.target.clone();
    let (provider, connection) = gw.parts(&target);
    let status = resp.status();
    let Sent { started, limits, slots } = sent;
    let is_sse = resp
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    // The Codex backend streams every answer: one JSON answer is the stream's final response.
    let collapse = is_sse && !inbound.stream && provider.format == ferroute_core::types::Format::Responses;
    if is_sse && !inbound.stream && !collapse {
        // An event stream to a request for one JSON answer is not that answer: the
        // provider's failure, like a body that does not parse.
        return transport_failure(
            &mut attempt,
            format!("{} answered a request without `stream` with an event stream", provider.id),
        );
    }
    if inbound.stream && is_sse {
        return streamed(attempt, inbound, prep, resp, Sent { started, limits, slots }).await;
    }
    let (parts, body) = resp.into_parts();
    let deadline = crate::state::clock::deadline(started, limits.execution_max_wait);
    let bytes = match tokio::time::timeout_at(deadline, whole(Limited::new(body, MAX_RESPONSE_BODY))).await {
        Ok(Ok(b)) => b,
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
                connection.id.clone(),
            );
        }
    };
    let bytes = match collapse.then(|| crate::translate::chat_responses::final_response(&bytes)) {
        None => bytes,
        Some(Ok(b)) => b,
        Some(Err(e)) => return transport_failure(&mut attempt, format!("{} streamed, but {e}", provider.id)),
    };
    attempt.trace.usage_from(&bytes);
    let bytes = match exchange::answer(inbound, provider.format, bytes) {
        Ok(b) => b,
        // A 200 whose body is not what the provider's format promises is the provider's
        // failure, like a broken-off body.
        Err(e) => return transport_failure(&mut attempt, format!("{} answered 200 but {e}", provider.id)),
    };
    attempt.record(AttemptOutcome::Success);
    drop(slots);
    gw.count_answer(status.as_u16(), &provider.id);
    let mut out = Response::new(full(bytes));
    *out.status_mut() = parts.status;
    let same = exchange::native(inbound.api) == provider.format;
    let content_type = match parts.headers.get(http::header::CONTENT_TYPE) {
        Some(ct) if same && !collapse => ct.clone(),
        _ => HeaderValue::from_static("application/json"),
    };
    // The upstream's header map, emptied, holds the answer's few headers: no new map per answer.
    let mut headers = parts.headers;
    headers.clear();
    headers.insert(http::header::CONTENT_TYPE, content_type);
    if let Some(v) = gw.endpoints.selected(target.connection) {
        headers.insert(SELECTED_HEADER.clone(), v.clone());
    }
    *out.headers_mut() = headers;
    dropped_header(&mut out, &prep.dropped);
    Step::Done(out)
}

/// A 200 event stream to a streaming request: its opening events read first (a stream that
/// fails before any content is an upstream failure, classified and fallen back from), then
/// relayed to the client as it comes.
async fn streamed<C: Connect + Clone + Send + Sync + 'static>(
    mut attempt: Attempt<C>,
    inbound: &Inbound,
    prep: &Prepared,
    resp: Response<Incoming>,
    sent: Sent<C>,
) -> Step {
    let gw = Arc::clone(&attempt.gw);
    let target = attempt.target.clone();
    let provider = gw.parts(&target).0;
    let status = resp.status();
    let Sent { started, limits, slots } = sent;
    let deadline = crate::state::clock::deadline(started, limits.execution_max_wait);
    let (resp, held) = match peek(resp, deadline).await {
        Peeked::Going(resp, held) => (resp, held),
        Peeked::Broke(e) => {
            return transport_failure(&mut attempt, format!("{} broke off its stream: {e}", provider.id));
        }
        Peeked::Failed(parts, text) => {
            drop(slots);
            return failed_with(attempt, inbound, parts, text);
        }
    };
    gw.count_answer(status.as_u16(), &provider.id);
    let fin = Finalizer::new(attempt, slots);
    let relay_to = Relay {
        api: inbound.api,
        translator: exchange::translator(inbound, provider.format),
        connection: gw.endpoints.selected(target.connection).cloned(),
        idle_budget: limits.execution_max_wait,
        held,
    };
    let mut out = relay(fin, resp, relay_to);
    dropped_header(&mut out, &prep.dropped);
    Step::Done(out)
}

/// An upstream error: read a bounded body, classify, record; fall back or answer with it.
pub(crate) async fn failed<C: Connect + Clone + Send + Sync + 'static>(
    attempt: Attempt<C>,
    inbound: &Inbound,
    resp: Response<Incoming>,
) -> Step {
    let (parts, body) = resp.into_parts();
    let text = match tokio::time::timeout(Duration::from_secs(30), whole(Limited::new(body, MAX_ERROR_BODY))).await {
        Ok(Ok(b)) => String::from_utf8_lossy(&b).into_owned(),
        _ => String::new(),
    };
    failed_with(attempt, inbound, parts, text)
}

/// An upstream failure read whole (an error's body, or the events of a stream that failed
/// before any content): classified and recorded; fallen back from or answered with.
fn failed_with<C: Connect + Clone + Send + Sync + 'static>(
    mut attempt: Attempt<C>,
    inbound: &Inbound,
    parts: http::response::Parts,
    text: String,
) -> Step {
    let gw = Arc::clone(&attempt.gw);
    let target = attempt.target.clone();
    let provider = gw.parts(&target).0;
    let conn_id = gw.parts(&target).1.id.clone();
    let status = parts.status;
    let headers = header_pairs(&parts.headers);
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
    // A stream that failed after its 200: its failure event's own words, not the events.
    let words = if status.is_success() { ferroute_core::classify::in_stream::failure_body(&text) } else { None };
    let failure = Failure {
        message: upstream_message(words.as_deref().unwrap_or(&text)),
        decision,
        connection: conn_id.clone(),
        provider: provider.id.clone(),
    };
    note_error(&gw, &conn_id, status.as_u16(), &failure.message);
    if failure.decision.should_fallback { Step::Fallback(failure) } else { Step::Fail(failure_error(failure), conn_id) }
}

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

/// A transport failure: provider-level, recorded, fallen back from.
pub(crate) fn transport_failure<C: Connect + Clone + Send + Sync + 'static>(
    attempt: &mut Attempt<C>,
    message: String,
) -> Step {
    failure_without_answer(attempt, message, AttemptOutcome::Transport)
}

/// A failure with no answer from the upstream: the provider's transport, or the connection's
/// own way out (its proxy, `AttemptOutcome::Egress`).
pub(crate) fn failure_without_answer<C: Connect + Clone + Send + Sync + 'static>(
    attempt: &mut Attempt<C>,
    message: String,
    outcome: AttemptOutcome<'static>,
) -> Step {
    let provider = attempt.gw.parts(&attempt.target).0.id.clone();
    let connection = attempt.gw.parts(&attempt.target).1.id.clone();
    tracing::warn!(%provider, %connection, %message, "upstream transport failure");
    note_error(&attempt.gw, &connection, 0, &message);
    attempt.trace.said(&message);
    match attempt.record(outcome) {
        Some(decision) => Step::Fallback(Failure { decision, message, connection, provider }),
        None => {
            Step::Fail(ProxyError::new(Source::Internal, 500, "internal", "the outcome was recorded twice"), connection)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{header_pairs, with_header_pairs};

    fn map(n: usize) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for i in 0..n {
            let name = http::HeaderName::from_bytes(format!("x-h{i}").as_bytes()).expect("name");
            h.append(name.clone(), http::HeaderValue::from_str(&format!("v{i}")).expect("value"));
            // A second value under one name, and one that is not text: skipped, as before.
            if i == 3 {
                h.append(name.clone(), http::HeaderValue::from_static("again"));
                h.append(name, http::HeaderValue::from_bytes(b"\xff").expect("opaque"));
            }
        }
        h
    }

    #[test]
    fn the_pairs_on_the_stack_are_the_pairs_in_a_list_at_every_size() {
        for n in [0, 1, 13, 14, 15, 16, 40] {
            let h = map(n);
            let want = header_pairs(&h);
            let got =
                with_header_pairs(&h, |p| p.iter().map(|&(k, v)| (k.to_owned(), v.to_owned())).collect::<Vec<_>>());
            let want: Vec<_> = want.iter().map(|&(k, v)| (k.to_owned(), v.to_owned())).collect();
            assert_eq!(got, want, "{n} names");
            assert_eq!(got.len(), if n > 3 { n + 1 } else { n }, "{n} names");
        }
    }
}
