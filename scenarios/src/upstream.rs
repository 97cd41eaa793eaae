//! The scripted upstream: a hyper service that plays a [`Script`] per model.

use crate::dialect::{Dialect, answer_events, answer_json, chat_view};
use crate::net::Listener;
use crate::script::{Behaviour, Script, SseEvent};
use crate::sse_out::{Framing, UpBody, sse_pieces, sse_response};
use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One request the upstream received (for assertions).
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Request path.
    pub path: String,
    /// The query string, if any.
    pub query: Option<String>,
    /// The `model` field of the JSON body.
    pub model: String,
    /// Request headers, lower-cased names.
    pub headers: BTreeMap<String, String>,
    /// The raw body.
    pub body: String,
}

/// Scripts by route (`*` for any other), a call counter per route, and a request log.
///
/// A request's route is its model, except:
/// - a request carrying `anthropic-usage-limit: slow` (Claude's low-priority lane) plays
///   `<model>@slow` when that is scripted, and is counted under it either way;
/// - `GET …/api/oauth/usage` plays `@usage` and `POST …/reset_rate_limits` plays `@reset` (the
///   session-limit reset endpoints).
///
/// Header values and `respond` bodies may name the upstream's wall clock: `{epoch}`,
/// `{epoch+N}` and `{epoch-N}` become Unix seconds now, N seconds later or earlier.
pub struct ScriptedUpstream {
    routes: BTreeMap<String, Script>,
    calls: Mutex<BTreeMap<String, u64>>,
    /// Per route: calls being answered now, and the most there ever were at once.
    in_flight: crate::in_flight::Counts,
    log: Mutex<Vec<Recorded>>,
    started: tokio::time::Instant,
    wall_start_ms: u64,
    /// When set, only requests carrying a valid access token of this server are answered.
    tokens: Option<Arc<crate::token_server::TokenServer>>,
    /// Whether it plays ChatGPT's Codex backend ([`crate::codex_backend`]).
    codex: bool,
}

/// The wall clock a scripted upstream believes it started at, unless told otherwise (the
/// simulation's gateway starts at the same instant).
pub const DEFAULT_WALL_START_MS: u64 = 1_780_000_000_000;

/// Requests kept in the log; older ones are dropped first.
const LOG_CAP: usize = 10_000;
/// Largest request body read.
const MAX_REQUEST: usize = 16 * 1024 * 1024;

impl ScriptedUpstream {
    /// An upstream with no routes (every call gets a 404) whose clock starts now.
    pub fn new() -> Self {
        ScriptedUpstream {
            routes: BTreeMap::new(),
            calls: Mutex::new(BTreeMap::new()),
            in_flight: crate::in_flight::Counts::default(),
            log: Mutex::new(Vec::new()),
            started: tokio::time::Instant::now(),
            wall_start_ms: DEFAULT_WALL_START_MS,
            tokens: None,
            codex: false,
        }
    }

    /// Plays ChatGPT's Codex backend: a Responses request that breaks one of its rules gets
    /// the backend's own 400 ([`crate::codex_backend::refusal`]).
    pub fn codex_backend(mut self) -> Self {
        self.codex = true;
        self
    }

    /// Answers 401 to requests without a valid access token of `server` (an OAuth account).
    pub fn require_tokens(mut self, server: Arc<crate::token_server::TokenServer>) -> Self {
        self.tokens = Some(server);
        self
    }

    /// Sets the wall clock (Unix ms) at the upstream's start, for `{epoch…}` placeholders.
    pub fn wall_clock(mut self, start_ms: u64) -> Self {
        self.wall_start_ms = start_ms;
        self
    }

    /// Plays `script` for requests whose `model` is `model` (`*` matches any other;
    /// `MODEL#KEY` only those that come with API key `KEY`, before `MODEL`).
    pub fn route(mut self, model: &str, script: Script) -> Self {
        self.routes.insert(model.to_owned(), script);
        self
    }

    /// Calls received for `model`.
    pub fn calls(&self, model: &str) -> u64 {
        self.calls.lock().map(|c| c.get(model).copied().unwrap_or(0)).unwrap_or(0)
    }

    /// Calls received in all.
    pub fn total_calls(&self) -> u64 {
        self.calls.lock().map(|c| c.values().sum()).unwrap_or(0)
    }

    /// The most calls for `model` (`*`: for any one route) that were ever being answered at
    /// once (a call counts from its arrival until its response headers leave).
    pub fn peak_in_flight(&self, model: &str) -> u64 {
        crate::in_flight::peak(&self.in_flight, model)
    }

    /// The requests received, oldest first.
    pub fn requests(&self) -> Vec<Recorded> {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Serves one request.
    pub async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Result<Response<UpBody>, io::Error> {
        let path = req.uri().path().to_owned();
        let query = req.uri().query().map(str::to_owned);
        let headers: BTreeMap<String, String> =
            req.headers().iter().map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned())).collect();
        let body = http_body_util::Limited::new(req.into_body(), MAX_REQUEST)
            .collect()
            .await
            .map_err(|e| io::Error::other(e.to_string()))?
            .to_bytes();
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
        let (dialect, in_path) = Dialect::of(&path);
        let (model, stream) = match in_path {
            Some((m, s)) => (m, s),
            None => (
                json.get("model").and_then(|m| m.as_str()).unwrap_or("").to_owned(),
                json.get("stream").and_then(|s| s.as_bool()).unwrap_or(false),
            ),
        };
        let slow = headers.get("anthropic-usage-limit").is_some_and(|v| v.eq_ignore_ascii_case("slow"));
        let route = if path.ends_with("/api/oauth/usage") {
            "@usage".to_owned()
        } else if path.ends_with("/reset_rate_limits") {
            "@reset".to_owned()
        } else if slow {
            format!("{model}@slow")
        } else {
            model.clone()
        };
        let _answering = crate::in_flight::InFlight::enter(&self.in_flight, &route);
        let call = {
            let mut calls = self.calls.lock().map_err(|_| io::Error::other("poisoned"))?;
            let n = calls.entry(route.clone()).or_insert(0);
            *n += 1;
            *n - 1
        };
        let authorization = headers.get("authorization").cloned();
        // The key the call came with: a route `MODEL#KEY` answers that key's calls only.
        let key = authorization
            .as_deref()
            .and_then(|a| a.strip_prefix("Bearer "))
            .map(str::to_owned)
            .or_else(|| headers.get("x-api-key").cloned())
            .or_else(|| headers.get("x-goog-api-key").cloned());
        if let Ok(mut log) = self.log.lock() {
            if log.len() >= LOG_CAP {
                log.remove(0);
            }
            log.push(Recorded {
                path: path.clone(),
                query,
                model: model.clone(),
                headers,
                body: String::from_utf8_lossy(&body).into_owned(),
            });
        }
        if path.ends_with(":countTokens") {
            return Ok(full(200, &BTreeMap::new(), crate::dialect::count_tokens(&json).to_string()));
        }
        if let Some(t) = &self.tokens
            && !t.admits(authorization.as_deref())
        {
            return Ok(crate::token_server::refusal());
        }
        if self.codex
            && let Some(detail) = crate::codex_backend::refusal(&path, &json)
        {
            return Ok(full(400, &BTreeMap::new(), serde_json::json!({ "detail": detail }).to_string()));
        }
        let keyed = key.as_deref().and_then(|k| self.routes.get(&format!("{route}#{k}")));
        let scripted =
            keyed.or_else(|| self.routes.get(&route)).or_else(|| if slow { self.routes.get(&model) } else { None });
        let Some(script) = scripted.or_else(|| self.routes.get("*")) else {
            let msg = format!(
                r#"{{"error":{{"message":"model {model} is not scripted","type":"invalid_request_error","code":"model_not_found"}}}}"#
            );
            return Ok(full(404, &BTreeMap::new(), msg));
        };
        let elapsed = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let epoch = self.wall_start_ms.saturating_add(elapsed) / 1000;
        // Responses and Gemini requests are read as chat; the others as they are.
        let view = match dialect {
            Dialect::Openai | Dialect::Anthropic => None,
            Dialect::Responses | Dialect::Gemini => {
                let mut v = chat_view(&json, dialect);
                v["model"] = model.into();
                Some(v)
            }
        };
        play(script.pick(call, elapsed), view.as_ref().unwrap_or(&json), stream, dialect, epoch).await
    }
}

impl Default for ScriptedUpstream {
    fn default() -> Self {
        Self::new()
    }
}

fn full(status: u16, headers: &BTreeMap<String, String>, body: String) -> Response<UpBody> {
    let mut resp = Response::new(Full::new(Bytes::from(body)).map_err(|never| match never {}).boxed());
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = resp.headers_mut();
    h.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    for (k, v) in headers {
        if let (Ok(k), Ok(v)) = (http::HeaderName::from_bytes(k.as_bytes()), HeaderValue::from_str(v)) {
            h.insert(k, v);
        }
    }
    resp
}

/// The text of the last user message (string content or text parts).
fn last_user_text(json: &serde_json::Value) -> String {
    let Some(messages) = json.get("messages").and_then(|m| m.as_array()) else { return String::new() };
    let Some(m) = messages.iter().rev().find(|m| m.get("role").and_then(|r| r.as_str()) == Some("user")) else {
        return String::new();
    };
    content_text(m.get("content"), " ")
}

/// The text of content that is a string or a list of parts with `text`, parts joined by `sep`.
fn content_text(content: Option<&serde_json::Value>, sep: &str) -> String {
    match content {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(serde_json::Value::Array(parts)) => {
            parts.iter().filter_map(|p| p.get("text").and_then(|t| t.as_str())).collect::<Vec<_>>().join(sep)
        }
        _ => String::new(),
    }
}

/// What a tool-calling echo does with a request.
enum ToolTurn {
    /// Call this tool.
    Call(String),
    /// The last turn is a tool result with this text.
    Result(String),
    /// No tools: echo.
    Plain,
}

fn tool_turn(json: &serde_json::Value, anthropic: bool) -> ToolTurn {
    let last = json.get("messages").and_then(|m| m.as_array()).and_then(|m| m.last());
    let text_of = |c: Option<&serde_json::Value>| content_text(c, "");
    if let Some(m) = last {
        if !anthropic && m.get("role").and_then(|r| r.as_str()) == Some("tool") {
            return ToolTurn::Result(text_of(m.get("content")));
        }
        if anthropic
            && let Some(r) = m
                .get("content")
                .and_then(|c| c.as_array())
                .and_then(|b| b.iter().find(|b| b.get("type").and_then(|t| t.as_str()) == Some("tool_result")))
        {
            return ToolTurn::Result(text_of(r.get("content")));
        }
    }
    let first = json.get("tools").and_then(|t| t.as_array()).and_then(|t| t.first());
    let name = first.and_then(|t| if anthropic { t.get("name") } else { t.pointer("/function/name") });
    match name.and_then(|n| n.as_str()) {
        Some(n) => ToolTurn::Call(n.to_owned()),
        None => ToolTurn::Plain,
    }
}

/// An answer of `text`, or a call of `call`, in `dialect`, whole or streamed.
fn answer(
    dialect: Dialect,
    model: &str,
    text: &str,
    call: Option<&str>,
    stream: bool,
    chunk_ms: u64,
) -> Response<UpBody> {
    match stream {
        true => sse_response(answer_events(dialect, model, text, call, chunk_ms), false),
        false => full(200, &BTreeMap::new(), answer_json(dialect, model, text, call)),
    }
}

/// Replaces `{epoch}`, `{epoch+N}` and `{epoch-N}` with Unix seconds.
fn with_epoch(text: &str, epoch: u64) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("{epoch") {
        out.push_str(&rest[..i]);
        let tail = &rest[i + "{epoch".len()..];
        let Some(close) = tail.find('}') else {
            out.push_str(&rest[i..]);
            return out;
        };
        let offset = &tail[..close];
        let value = match offset.as_bytes().first() {
            None => Some(epoch),
            Some(b'+') => offset[1..].parse::<u64>().ok().map(|n| epoch.saturating_add(n)),
            Some(b'-') => offset[1..].parse::<u64>().ok().map(|n| epoch.saturating_sub(n)),
            _ => None,
        };
        match value {
            Some(v) => out.push_str(&v.to_string()),
            None => out.push_str(&rest[i..i + "{epoch".len() + close + 1]),
        }
        rest = &tail[close + 1..];
    }
    out.push_str(rest);
    out
}

fn play(
    b: Behaviour,
    json: &serde_json::Value,
    stream: bool,
    dialect: Dialect,
    epoch: u64,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Response<UpBody>, io::Error>> + Send + '_>> {
    Box::pin(play_one(b, json, stream, dialect, epoch))
}

/// `json` is the request as chat reads it (see [`chat_view`]), its `model` the one it names.
async fn play_one(
    b: Behaviour,
    json: &serde_json::Value,
    stream: bool,
    dialect: Dialect,
    epoch: u64,
) -> Result<Response<UpBody>, io::Error> {
    let anthropic = dialect == Dialect::Anthropic;
    let sleep = |ms: u64| async move {
        if ms > 0 {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
    };
    let model = json.get("model").and_then(|m| m.as_str()).unwrap_or("").to_owned();
    match b {
        Behaviour::Respond { status, headers, body, pad_to, latency_ms } => {
            sleep(latency_ms).await;
            let headers = headers.iter().map(|(k, v)| (k.clone(), with_epoch(v, epoch))).collect();
            Ok(full(status, &headers, with_epoch(&crate::script::padded(&body, pad_to), epoch)))
        }
        Behaviour::WithHeaders { headers, then } => {
            let mut resp = play(*then, json, stream, dialect, epoch).await?;
            let h = resp.headers_mut();
            for (k, v) in &headers {
                if let (Ok(k), Ok(v)) =
                    (http::HeaderName::from_bytes(k.as_bytes()), HeaderValue::from_str(&with_epoch(v, epoch)))
                {
                    h.insert(k, v);
                }
            }
            Ok(resp)
        }
        Behaviour::Echo { latency_ms, chunk_ms } => {
            sleep(latency_ms).await;
            Ok(answer(dialect, &model, &last_user_text(json), None, stream, chunk_ms))
        }
        Behaviour::ToolEcho { latency_ms, chunk_ms } => {
            sleep(latency_ms).await;
            let (text, call) = match tool_turn(json, anthropic) {
                ToolTurn::Call(name) => (last_user_text(json), Some(name)),
                ToolTurn::Result(r) => (format!("tool said: {r}"), None),
                ToolTurn::Plain => (last_user_text(json), None),
            };
            Ok(answer(dialect, &model, &text, call.as_deref(), stream, chunk_ms))
        }
        Behaviour::Stream { latency_ms, events, reset_after, chunk_bytes, line_ending, bom } => {
            sleep(latency_ms).await;
            Ok(sse_pieces(events, reset_after, Framing { pieces: chunk_bytes, line_ending, bom }))
        }
        Behaviour::SlowDrip { text, chunk_ms } => {
            let mut events: Vec<SseEvent> = text.chars().map(|c| SseEvent::text(chunk_ms, &c.to_string())).collect();
            events.push(SseEvent::done(chunk_ms));
            Ok(sse_response(events, false))
        }
        Behaviour::Reset { latency_ms } => {
            sleep(latency_ms).await;
            Err(io::Error::new(io::ErrorKind::ConnectionReset, "scripted reset before the response"))
        }
        Behaviour::Stall => {
            std::future::pending::<()>().await;
            Err(io::Error::other("unreachable"))
        }
    }
}

/// Serves `upstream` on `listener` until the task is dropped.
pub async fn serve_upstream<L: Listener>(listener: L, upstream: Arc<ScriptedUpstream>) {
    crate::http_host::serve(listener, upstream, ScriptedUpstream::handle).await;
}

#[cfg(test)]
mod tests {
    use super::with_epoch;

    #[test]
    fn epoch_placeholders_become_unix_seconds() {
        assert_eq!(with_epoch("{epoch}", 1_780_000_000), "1780000000");
        assert_eq!(with_epoch("at {epoch+60} or {epoch-1}", 1_780_000_000), "at 1780000060 or 1779999999");
        assert_eq!(with_epoch(r#"{"next":{epoch+86400}}"#, 10), r#"{"next":86410}"#);
        // Anything else is left alone.
        assert_eq!(with_epoch("{epochs} {epoch+x} {epoch", 10), "{epochs} {epoch+x} {epoch");
        assert_eq!(with_epoch("{}", 10), "{}");
    }
}
