//! A simulated client: one request of the workload, sent the way the client's API sends it,
//! and the answer read the way that client reads it.

use crate::check::Outcome;
use crate::net::SimConnector;
use crate::shared::{GATEWAY_PORT, SIM_CLIENT_KEY, ms, sim_now};
use bytes::Bytes;
use ferroute_core::session::key::SESSION_HEADERS;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use scenarios::scenario::{Abort, Workload};
use std::time::Duration;

/// Sends one request of `w`. `give_up` is when the client hangs up, for the aborts that have
/// a moment (`before_headers`: the bound on the headers; `random`: on the whole exchange).
pub(crate) async fn request(
    http: &Client<SimConnector, Full<Bytes>>,
    w: &Workload,
    client: String,
    seq: u64,
    issued_ms: u64,
    give_up: Option<Duration>,
) -> Outcome {
    let (path, body) = path_and_body(w, &client, seq);
    let mut b = http::Request::builder()
        .method(w.method.as_http())
        .uri(format!("http://{}:{GATEWAY_PORT}{path}", w.gateway.as_deref().unwrap_or("gateway")))
        .header("content-type", "application/json");
    b = match w.gemini {
        true => b.header("x-goog-api-key", SIM_CLIENT_KEY),
        false => b.header("authorization", format!("Bearer {SIM_CLIENT_KEY}")),
    };
    // `{seq}` in a header value is the request's number (an owner id per request).
    let headers: Vec<(&str, String)> =
        w.headers.iter().map(|(k, v)| (k.as_str(), v.replace("{seq}", &format!("{seq:0>3}")))).collect();
    // The session the gateway reads from the headers (M5), in the gateway's own order.
    let session = SESSION_HEADERS
        .iter()
        .find_map(|name| headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.clone()));
    for (k, v) in headers {
        // A header the workload names replaces the client's own (`authorization`,
        // `content-type`), and an empty value sends none: a request without a key or of
        // another type.
        match (http::HeaderName::from_bytes(k.as_bytes()), b.headers_mut()) {
            (Ok(name), Some(h)) if v.is_empty() => {
                h.remove(name);
            }
            (Ok(name), Some(h)) if h.contains_key(&name) => {
                h.remove(&name);
                b = b.header(name, v);
            }
            _ => b = b.header(k, v),
        }
    }
    let mut out = Outcome {
        client,
        seq,
        issued_ms,
        done_ms: 0,
        status: None,
        code: None,
        retry_after_s: None,
        connection: None,
        session,
        done: false,
        error: None,
        headers: Default::default(),
        body: String::new(),
        aborted: false,
    };
    let text = match &w.body {
        Some(raw) => raw.clone(),
        None => body,
    };
    let req = match b.body(Full::new(Bytes::from(text))) {
        Ok(r) => r,
        Err(e) => {
            out.error = Some(e.to_string());
            out.done_ms = ms(sim_now());
            return out;
        }
    };
    match (w.abort, give_up) {
        (Some(Abort::BeforeHeaders), Some(d)) => match tokio::time::timeout(d, http.request(req)).await {
            Ok(r) => read(r, w, &mut out, false).await,
            Err(_) => gave_up(&mut out, "before the response headers"),
        },
        (Some(Abort::Random), Some(d)) => {
            let mut partial = out.clone();
            let finished =
                tokio::time::timeout(d, async { read(http.request(req).await, w, &mut partial, false).await }).await;
            // What arrived before the client hung up is what it saw.
            out = partial;
            if finished.is_err() {
                gave_up(&mut out, "mid-exchange");
            }
        }
        (Some(Abort::AfterFirstChunk), _) => read(http.request(req).await, w, &mut out, true).await,
        (Some(Abort::After), Some(d)) => {
            let until = tokio::time::Instant::now() + d;
            match tokio::time::timeout_at(until, http.request(req)).await {
                Ok(r) => read_until(r, w, &mut out, until).await,
                Err(_) => gave_up(&mut out, "before the response headers"),
            }
        }
        _ => read(http.request(req).await, w, &mut out, false).await,
    }
    out.done_ms = ms(sim_now());
    out
}

/// The path and the JSON body of request `seq` of `w`, in the client's API (chat, messages or
/// Gemini's generateContent), with `w.tools` tools.
fn path_and_body(w: &Workload, client: &str, seq: u64) -> (String, String) {
    let path = match &w.path {
        Some(p) => p.clone(),
        None if w.gemini && w.stream => format!("/v1beta/models/{}:streamGenerateContent?alt=sse", w.model),
        None if w.gemini => format!("/v1beta/models/{}:generateContent", w.model),
        None if w.anthropic => "/v1/messages".to_owned(),
        None => "/v1/chat/completions".to_owned(),
    };
    let mut text = match &w.prompt {
        Some(p) => p.replace("{seq}", &seq.to_string()).replace("{client}", client),
        None => format!("request {seq} from {client}"),
    };
    text.push_str(&" ".repeat(w.pad_bytes as usize));
    let mut body =
        serde_json::json!({"model": w.model, "stream": w.stream, "messages": [{"role": "user", "content": text}]});
    if w.anthropic {
        body["max_tokens"] = 64.into();
    }
    if w.gemini {
        body = serde_json::json!({"contents": [{"role": "user", "parts": [{"text": text}]}]});
    }
    if w.tools > 0 {
        let tools: Vec<serde_json::Value> = (0..w.tools)
            .map(|i| {
                let name = format!("tool_{i}");
                if w.gemini {
                    serde_json::json!({"name": name, "parameters": {"type": "OBJECT"}})
                } else if w.anthropic {
                    serde_json::json!({"name": name, "input_schema": {"type": "object"}})
                } else {
                    serde_json::json!({"type": "function", "function": {"name": name, "parameters": {"type": "object"}}})
                }
            })
            .collect();
        body["tools"] = match w.gemini {
            true => serde_json::json!([{ "functionDeclarations": tools }]),
            false => tools.into(),
        };
    }
    (path, body.to_string())
}

fn gave_up(out: &mut Outcome, when: &str) {
    out.aborted = true;
    out.error = Some(format!("the client gave up {when}"));
}

/// Reads the response until `until`, keeping what arrived, and hangs up then (a stream that does
/// not end); one that ends sooner is read whole.
async fn read_until(
    r: Result<http::Response<hyper::body::Incoming>, hyper_util::client::legacy::Error>,
    w: &Workload,
    out: &mut Outcome,
    until: tokio::time::Instant,
) {
    let Some(mut body) = head(r, out) else { return };
    let mut got = Vec::new();
    let timed_out = loop {
        match tokio::time::timeout_at(until, body.frame()).await {
            Ok(Some(Ok(frame))) => got.extend_from_slice(frame.data_ref().map_or(&[][..], |d| &d[..])),
            Ok(None) => break false,
            Ok(Some(Err(e))) => {
                out.error = Some(format!("body: {e}"));
                break false;
            }
            Err(_) => break true,
        }
    };
    keep_body(&String::from_utf8_lossy(&got), w, out);
    if timed_out {
        gave_up(out, "after reading for its time");
    }
}

/// The response's status and the headers an outcome keeps; its body, or `None` (and the
/// error noted) when no response came.
fn head(
    r: Result<http::Response<hyper::body::Incoming>, hyper_util::client::legacy::Error>,
    out: &mut Outcome,
) -> Option<hyper::body::Incoming> {
    let resp = match r {
        Err(e) => {
            out.error = Some(format!("{e:?}"));
            return None;
        }
        Ok(resp) => resp,
    };
    out.status = Some(resp.status().as_u16());
    let h = resp.headers();
    out.retry_after_s = h.get("retry-after").and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
    out.connection = h.get("x-ferroute-selected-connection-id").and_then(|v| v.to_str().ok()).map(str::to_owned);
    out.headers = h
        .iter()
        .filter(|(k, _)| k.as_str().starts_with("x-ferroute-") || *k == http::header::CONTENT_TYPE)
        .filter_map(|(k, v)| v.to_str().ok().map(|v| (k.as_str().to_owned(), v.to_owned())))
        .collect();
    Some(resp.into_body())
}

/// Reads the response; with `first_chunk_only` the client hangs up after the first frame.
async fn read(
    r: Result<http::Response<hyper::body::Incoming>, hyper_util::client::legacy::Error>,
    w: &Workload,
    out: &mut Outcome,
    first_chunk_only: bool,
) {
    let Some(mut body) = head(r, out) else { return };
    if first_chunk_only {
        let _ = body.frame().await;
        drop(body);
        gave_up(out, "after the first chunk");
        return;
    }
    match body.collect().await {
        Ok(c) => keep_body(&String::from_utf8_lossy(&c.to_bytes()), w, out),
        Err(e) => {
            out.error = Some(format!("body: {e}"));
        }
    }
}

/// The most of an answer's body an outcome keeps.
const KEPT_BODY: usize = 64 * 1024;

/// Reads an answer's body (its error code, whether a stream finished) and keeps its start.
fn keep_body(text: &str, w: &Workload, out: &mut Outcome) {
    read_body(text, w, out);
    out.body = text
        .chars()
        .scan(0, |n, ch| {
            *n += ch.len_utf8();
            (*n <= KEPT_BODY).then_some(ch)
        })
        .collect();
}

fn read_body(text: &str, w: &Workload, out: &mut Outcome) {
    out.code = scenarios::answer::error_code(text);
    out.done = match w.gemini {
        true => scenarios::answer::stream_done_gemini(text),
        false => scenarios::answer::stream_done_as(text, w.anthropic),
    };
}
