//! A small HTTP client for the chaos suites: every call has a deadline, so a hang is a failure
//! rather than a stuck test.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::time::Duration;

/// What the client saw.
#[derive(Debug, Clone)]
pub struct Reply {
    /// Status.
    pub status: u16,
    /// Headers.
    pub headers: http::HeaderMap,
    /// Body text.
    pub body: String,
}

impl Reply {
    /// The body as JSON, if it is JSON.
    pub fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_str(&self.body).ok()
    }

    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// `error.code` of a JSON error, or of the last SSE error event.
    pub fn error_code(&self) -> Option<String> {
        scenarios::answer::error_code(&self.body)
    }

    /// SSE `data:` payloads.
    pub fn sse_data(&self) -> Vec<String> {
        scenarios::answer::sse_data(&self.body)
    }

    /// Whether this is a well-formed gateway answer: a JSON body, or an SSE stream whose
    /// every event is JSON or `[DONE]`.
    pub fn well_formed(&self) -> bool {
        let sse = self.header("content-type").is_some_and(|c| c.starts_with("text/event-stream"));
        if sse {
            let data = self.sse_data();
            !data.is_empty()
                && data.iter().all(|d| d == "[DONE]" || serde_json::from_str::<serde_json::Value>(d).is_ok())
        } else {
            self.json().is_some()
        }
    }
}

/// Sends one request with a deadline.
pub async fn send(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &str,
    deadline: Duration,
) -> Result<Reply, String> {
    let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new()).build(HttpConnector::new());
    let mut b = http::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let req = b.body(Full::new(Bytes::from(body.to_owned()))).map_err(|e| e.to_string())?;
    let work = async {
        let resp = client.request(req).await.map_err(|e| format!("no response: {e:?}"))?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let bytes = resp.into_body().collect().await.map_err(|e| format!("body broke off: {e}"))?.to_bytes();
        Ok(Reply { status, headers, body: String::from_utf8_lossy(&bytes).into_owned() })
    };
    tokio::time::timeout(deadline, work).await.map_err(|_| format!("no complete response within {deadline:?}"))?
}

/// A chat completion for `model`.
pub async fn chat(base: &str, model: &str, stream: bool) -> Result<Reply, String> {
    let body = serde_json::json!({"model": model, "stream": stream, "messages": [{"role": "user", "content": "chaos says hello"}]});
    send(
        "POST",
        &format!("{base}/v1/chat/completions"),
        &[("content-type", "application/json")],
        &body.to_string(),
        Duration::from_secs(30),
    )
    .await
}

/// The health JSON.
pub async fn health(base: &str) -> Result<serde_json::Value, String> {
    let r = send("GET", &format!("{base}/api/monitoring/health"), &[], "", Duration::from_secs(10)).await?;
    r.json().ok_or_else(|| format!("health is not JSON: {}", r.body))
}

/// One field of one entry of a health JSON list (`providers` or `connections`), as text.
pub fn health_field(health: &serde_json::Value, list: &str, id: &str, field: &str) -> String {
    health[list]
        .as_array()
        .and_then(|a| a.iter().find(|e| e["id"] == id))
        .and_then(|e| e[field].as_str())
        .unwrap_or("")
        .to_owned()
}

/// A provider's breaker state in a health JSON.
pub fn breaker(health: &serde_json::Value, provider: &str) -> String {
    health_field(health, "providers", provider, "state")
}

/// A connection's status in a health JSON.
pub fn connection_status(health: &serde_json::Value, connection: &str) -> String {
    health_field(health, "connections", connection, "status")
}
