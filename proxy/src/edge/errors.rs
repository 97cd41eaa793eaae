//! One error type for the shell, and the one function that maps it to a status and an
//! OpenAI-style JSON body `{"error":{"message","type","code"}}`.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use std::io;
use std::time::Duration;

/// The body type of every response Ferroute sends.
pub type Body = BoxBody<Bytes, io::Error>;

/// The error body shape a client expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorShape {
    /// `{"error":{"message","type","code"}}`.
    OpenAi,
    /// `{"type":"error","error":{"type","message","code"}}`.
    Anthropic,
    /// Google's `{"error":{"code","message","status","details"}}`: `code` is the HTTP status,
    /// Ferroute's code is the `reason` of an `ErrorInfo` detail, and a retry time is also a
    /// `RetryInfo` detail.
    Google,
}

/// Where an error came from. Only upstream errors count against a breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The client sent something wrong.
    Downstream,
    /// An upstream failed or refused.
    Upstream,
    /// Ferroute itself (a local limit, or a bug).
    Internal,
}

/// An error on its way to the client.
#[derive(Debug, Clone)]
pub struct ProxyError {
    /// Where it came from.
    pub source: Source,
    /// HTTP status.
    pub status: u16,
    /// Machine-readable code.
    pub code: String,
    /// Human-readable message.
    pub message: String,
    /// `Retry-After` for the client.
    pub retry_after: Option<Duration>,
    /// Extra fields merged into `error` (provider, diagnostics, …).
    pub extra: serde_json::Map<String, serde_json::Value>,
    /// Extra headers.
    pub headers: Vec<(&'static str, String)>,
}

impl ProxyError {
    /// A new error.
    pub fn new(source: Source, status: u16, code: impl Into<String>, message: impl Into<String>) -> Self {
        ProxyError {
            source,
            status,
            code: code.into(),
            message: message.into(),
            retry_after: None,
            extra: serde_json::Map::new(),
            headers: Vec::new(),
        }
    }

    /// 400 naming the problem.
    pub fn bad_request(code: &str, message: impl Into<String>) -> Self {
        Self::new(Source::Downstream, 400, code, message)
    }

    /// Sets `Retry-After`.
    pub fn retry_after(mut self, d: Option<Duration>) -> Self {
        self.retry_after = d;
        self
    }

    /// Adds a field to the `error` object.
    pub fn with(mut self, key: &str, value: serde_json::Value) -> Self {
        self.extra.insert(key.to_owned(), value);
        self
    }

    /// Adds a header.
    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    /// The OpenAI error `type` for a status.
    pub fn error_type(status: u16) -> &'static str {
        match status {
            400 | 404 | 405 | 409 | 413 | 415 | 422 => "invalid_request_error",
            401 => "authentication_error",
            403 => "permission_error",
            429 => "rate_limit_error",
            _ => "server_error",
        }
    }

    /// The Anthropic error `type` for a status.
    pub fn anthropic_error_type(status: u16) -> &'static str {
        match status {
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            503 | 529 => "overloaded_error",
            400..=499 => "invalid_request_error",
            _ => "api_error",
        }
    }

    /// The `google.rpc.Code` name for a status, as Google's APIs answer.
    pub fn google_status(status: u16) -> &'static str {
        match status {
            400 | 413 | 422 => "INVALID_ARGUMENT",
            401 => "UNAUTHENTICATED",
            403 => "PERMISSION_DENIED",
            404 => "NOT_FOUND",
            405 => "UNIMPLEMENTED",
            409 => "ABORTED",
            429 => "RESOURCE_EXHAUSTED",
            499 => "CANCELLED",
            501 => "UNIMPLEMENTED",
            503 => "UNAVAILABLE",
            504 => "DEADLINE_EXCEEDED",
            _ => "INTERNAL",
        }
    }

    /// The response, OpenAI-style.
    pub fn into_response(self) -> Response<Body> {
        self.into_response_as(ErrorShape::OpenAi)
    }

    /// The response in the shape the client's API uses. Both shapes carry
    /// `error.message`, `error.type` and `error.code`; Anthropic's adds `"type": "error"` at
    /// the top and uses its own `error.type` names.
    pub fn into_response_as(self, shape: ErrorShape) -> Response<Body> {
        let mut error = serde_json::Map::new();
        error.insert("message".into(), self.message.into());
        let kind = match shape {
            ErrorShape::OpenAi | ErrorShape::Google => Self::error_type(self.status),
            ErrorShape::Anthropic => Self::anthropic_error_type(self.status),
        };
        error.insert("type".into(), kind.into());
        error.insert("code".into(), self.code.into());
        // Every 429 tells the client when to come back: callers set the precise time; one
        // that knows none (a full local queue) still says 1 s rather than nothing.
        let retry_after = match (self.status, self.retry_after) {
            (429, None) => Some(Duration::from_secs(1)),
            (_, r) => r,
        };
        let secs = retry_after.map(retry_after_secs);
        if let Some(s) = secs {
            error.insert("retry_after".into(), s.into());
        }
        error.extend(self.extra);
        let body = match shape {
            ErrorShape::OpenAi => serde_json::json!({ "error": error }),
            ErrorShape::Anthropic => serde_json::json!({ "type": "error", "error": error }),
            ErrorShape::Google => Self::google_body(self.status, error, secs),
        }
        .to_string();
        let mut resp = json_response(self.status, body);
        if let Some(s) = secs {
            resp.headers_mut().insert(http::header::RETRY_AFTER, HeaderValue::from(s));
        }
        for (name, value) in self.headers {
            if let Ok(v) = HeaderValue::from_str(&value) {
                resp.headers_mut().insert(name, v);
            }
        }
        resp
    }
}

impl ProxyError {
    /// Google's shape of an error whose OpenAI-style fields are `error`.
    fn google_body(
        status: u16,
        mut error: serde_json::Map<String, serde_json::Value>,
        secs: Option<u64>,
    ) -> serde_json::Value {
        let message = error.remove("message").unwrap_or_default();
        let reason = error.remove("code").unwrap_or_default();
        error.remove("type");
        error.remove("retry_after");
        let metadata: serde_json::Map<String, serde_json::Value> = error
            .into_iter()
            .map(|(k, v)| (k, v.as_str().map_or_else(|| v.to_string(), str::to_owned).into()))
            .collect();
        let mut details = vec![serde_json::json!({
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": reason,
            "domain": "ferroute",
            "metadata": metadata,
        })];
        if let Some(s) = secs {
            details.push(
                serde_json::json!({"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": format!("{s}s")}),
            );
        }
        serde_json::json!({"error": {"code": status, "message": message, "status": Self::google_status(status), "details": details}})
    }
}

/// Whole seconds for `Retry-After`, rounded up, at least 1.
pub fn retry_after_secs(d: Duration) -> u64 {
    d.as_millis().div_ceil(1000).max(1) as u64
}

/// A JSON response.
pub fn json_response(status: u16, body: String) -> Response<Body> {
    let mut resp = Response::new(full(body));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

/// A complete body.
pub fn full(body: impl Into<Bytes>) -> Body {
    Full::new(body.into()).map_err(|never| match never {}).boxed()
}

/// The `message` of an upstream error body, or the body itself (truncated).
pub fn upstream_message(body: &str) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let msg = parsed.as_ref().and_then(|v| {
        v.pointer("/error/message")
            .or_else(|| v.get("message"))
            .or_else(|| v.get("error"))
            .and_then(|m| m.as_str())
            .map(str::to_owned)
    });
    let text = msg.unwrap_or_else(|| body.trim().to_owned());
    let end = text.char_indices().nth(500).map_or(text.len(), |(i, _)| i);
    if text.is_empty() { "upstream returned an empty error body".to_owned() } else { text[..end].to_owned() }
}
