//! The first events of an upstream stream, read before the client's response starts. A stream
//! that fails before any content (the Responses API's `response.failed`, an `event: error`
//! frame, a chat chunk that is only an `error`) failed as surely as a 4xx or 5xx would have: it
//! is classified and fallen back from, and no byte of it reaches the client. Any other stream
//! goes to the client with the frames read so far first.
//!
//! Only the opening events are held: those a stream sends before its content
//! (`response.created`, `response.in_progress`, `message_start`, `ping`). The first event of any
//! other kind ends the look, as do [`MAX_PEEK`] bytes and [`PEEK_WINDOW`].

use bytes::Bytes;
use http::Response;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use std::time::Duration;

/// The most bytes held while looking.
pub const MAX_PEEK: usize = 64 * 1024;
/// The longest the opening events are held back from the client.
pub const PEEK_WINDOW: Duration = Duration::from_secs(10);

/// What the look found.
pub enum Peeked {
    /// The stream failed before any content: its headers, and what it sent, as text.
    Failed(http::response::Parts, String),
    /// The stream goes on: these frames first, then the rest of the body.
    Going(Response<Incoming>, Vec<Bytes>),
    /// The upstream broke off before any content.
    Broke(String),
}

/// What the complete events in `text` say so far.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    /// Only opening events (or none yet).
    Opening,
    /// An event with content, or anything else: the stream is going.
    Content,
    /// A failure.
    Failure,
}

/// Reads the opening events of `resp` (until `deadline` at the latest).
pub async fn peek(resp: Response<Incoming>, deadline: tokio::time::Instant) -> Peeked {
    let (parts, mut body) = resp.into_parts();
    let deadline = deadline.min(tokio::time::Instant::now() + PEEK_WINDOW);
    let mut held: Vec<Bytes> = Vec::new();
    let mut text = String::new();
    loop {
        match seen(&text) {
            Seen::Failure => return Peeked::Failed(parts, text),
            Seen::Content => return Peeked::Going(Response::from_parts(parts, body), held),
            Seen::Opening if text.len() >= MAX_PEEK => return Peeked::Going(Response::from_parts(parts, body), held),
            Seen::Opening => {}
        }
        match tokio::time::timeout_at(deadline, body.frame()).await {
            // Still only opening events: the relay takes over (and its silence timer).
            Err(_) | Ok(None) => return Peeked::Going(Response::from_parts(parts, body), held),
            Ok(Some(Err(e))) => return Peeked::Broke(e.to_string()),
            Ok(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    text.push_str(&String::from_utf8_lossy(&data));
                    held.push(data);
                }
            }
        }
    }
}

/// The events that open a stream before its content.
const OPENING: &[&str] = &["response.created", "response.in_progress", "response.queued", "message_start", "ping"];

/// The failure event's own words in what a failed stream sent (`response.failed`'s
/// `response.error`, an error event's `error`): what the client is told instead of the events.
pub fn failure_body(text: &str) -> Option<String> {
    text.lines().filter_map(|l| l.strip_prefix("data:")).find_map(|data| {
        let v: serde_json::Value = serde_json::from_str(data.trim()).ok()?;
        let error = match v.get("type").and_then(|t| t.as_str()) {
            Some("response.failed") => v.pointer("/response/error")?,
            _ => v.get("error").filter(|e| !e.is_null())?,
        };
        Some(serde_json::json!({ "error": error }).to_string())
    })
}

/// Reads the complete events of `text` (line endings of any kind).
fn seen(text: &str) -> Seen {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let normal;
    let text = if text.contains('\r') {
        normal = text.replace("\r\n", "\n").replace('\r', "\n");
        normal.as_str()
    } else {
        text
    };
    let mut blocks: Vec<&str> = text.split("\n\n").collect();
    // The last piece is not complete until a blank line ends it.
    blocks.pop();
    for block in blocks {
        let (mut name, mut data) = (None, String::new());
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("event:") {
                name = Some(v.trim());
            } else if let Some(v) = line.strip_prefix("data:") {
                if !data.is_empty() {
                    data.push('\n');
                }
                data.push_str(v.strip_prefix(' ').unwrap_or(v));
            }
        }
        if name.is_none() && data.is_empty() {
            // A comment or an empty block: nothing said yet.
            continue;
        }
        let value: Option<serde_json::Value> = serde_json::from_str(&data).ok();
        let kind = name.or_else(|| value.as_ref().and_then(|v| v.get("type")).and_then(|t| t.as_str()));
        let failed = matches!(kind, Some("error" | "response.failed"))
            || value
                .as_ref()
                .is_some_and(|v| v.get("error").is_some_and(|e| !e.is_null()) && v.get("choices").is_none());
        if failed {
            return Seen::Failure;
        }
        if !kind.is_some_and(|k| OPENING.contains(&k)) {
            return Seen::Content;
        }
    }
    Seen::Opening
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opening_events_then_a_failure_is_a_failure() {
        let t = "event: response.created\ndata: {\"type\":\"response.created\"}\n\nevent: response.in_progress\ndata: {}\n\nevent: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"error\":{\"code\":\"rate_limit_exceeded\"}}}\n\n";
        assert_eq!(seen(t), Seen::Failure);
        assert_eq!(
            seen("event: error\r\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\r\n\r\n"),
            Seen::Failure
        );
        assert_eq!(seen("data: {\"error\":{\"message\":\"quota\"}}\n\n"), Seen::Failure);
    }

    #[test]
    fn a_failed_streams_words_are_its_error() {
        let t = "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"error\":{\"code\":\"rate_limit_exceeded\",\"message\":\"slow down\"}}}\n\n";
        let body = failure_body(t).unwrap_or_default();
        assert_eq!(crate::edge::errors::upstream_message(&body), "slow down");
        let t = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
        assert_eq!(crate::edge::errors::upstream_message(&failure_body(t).unwrap_or_default()), "Overloaded");
        assert_eq!(failure_body("data: {\"choices\":[]}\n\n"), None);
    }

    #[test]
    fn content_or_an_unfinished_event_is_not() {
        assert_eq!(seen("event: message_start\ndata: {}\n\nevent: content_block_delta\ndata: {}\n\n"), Seen::Content);
        assert_eq!(seen("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n"), Seen::Content);
        assert_eq!(seen("data: {\"choices\":[],\"error\":null}\n\n"), Seen::Content);
        assert_eq!(seen("event: message_start\ndata: {}\n\nevent: error\ndata: {\"type\":\"er"), Seen::Opening);
        assert_eq!(seen(": keep-alive\n\n"), Seen::Opening);
        assert_eq!(seen(""), Seen::Opening);
    }
}
