//! A failure an event stream reports after its 200, before any content: the Responses API's
//! `response.failed`, an `event: error` frame (OpenAI's and Anthropic's), a chat chunk that is
//! only an `error`. Such a stream failed as surely as a 4xx or 5xx would have; it is read as the
//! status the same failure carries when it comes before the headers. [`Opening`] reads a
//! stream's first events as they arrive (the gateway holds them back from the client meanwhile);
//! [`status_of`] and [`failure_body`] read what a failed stream sent. All three read events with
//! the one event-stream parser ([`crate::sse::SseParser`]).

use crate::sse::{SseEvent, SseParser};
use serde_json::Value;

/// The events that open a stream before its content.
const OPENING: &[&str] = &["response.created", "response.in_progress", "response.queued", "message_start", "ping"];

/// What a stream's complete events say so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Only opening events (or none yet).
    Opening,
    /// An event with content, or any other: the stream is going.
    Content,
    /// A failure before any content.
    Failure,
}

/// A stream's opening, read event by event as its bytes arrive.
#[derive(Debug)]
pub struct Opening {
    parser: SseParser,
    seen: Seen,
}

impl Default for Opening {
    fn default() -> Self {
        Opening { parser: SseParser::default(), seen: Seen::Opening }
    }
}

impl Opening {
    /// Reads the next bytes; returns what the events so far say (decided once, by the first
    /// event that is no opening one).
    pub fn feed(&mut self, chunk: &[u8]) -> Seen {
        let seen = &mut self.seen;
        if *seen != Seen::Opening {
            return *seen;
        }
        self.parser.feed(chunk, |ev| {
            if *seen != Seen::Opening {
                return;
            }
            let value: Option<Value> = serde_json::from_str(ev.data).ok();
            if failure(&ev, value.as_ref()).is_some() {
                *seen = Seen::Failure;
            } else if !kind(&ev, value.as_ref()).is_some_and(|k| OPENING.contains(&k)) {
                *seen = Seen::Content;
            }
        });
        *seen
    }
}

/// An event's type: its `event:` name, else its data's `type`.
fn kind<'a>(ev: &SseEvent<'a>, value: Option<&'a Value>) -> Option<&'a str> {
    ev.name.or_else(|| value.and_then(|v| v.get("type")).and_then(Value::as_str))
}

/// The error object of a failure event, if `ev` is one.
fn failure<'a>(ev: &SseEvent<'_>, value: Option<&'a Value>) -> Option<&'a Value> {
    let v = value?;
    let named = ev.name.or_else(|| v.get("type").and_then(Value::as_str));
    match named {
        Some("response.failed") => v.pointer("/response/error").filter(|e| !e.is_null()),
        Some("error") => Some(v.get("error").filter(|e| !e.is_null()).unwrap_or(v)),
        // A chat chunk that is only an error: no choices, or none (OpenRouter sends
        // `"choices": []` beside the error when its upstream fails mid-request).
        _ => v
            .get("error")
            .filter(|e| !e.is_null() && v.get("choices").and_then(Value::as_array).is_none_or(Vec::is_empty)),
    }
}

/// The first failure event's error object in `body` (an event stream).
fn first_failure(body: &str) -> Option<Value> {
    let mut found = None;
    SseParser::default().feed(body.as_bytes(), |ev| {
        if found.is_none() {
            let value: Option<Value> = serde_json::from_str(ev.data).ok();
            found = failure(&ev, value.as_ref()).cloned();
        }
    });
    found
}

/// The status of the failure `body` (an event stream) reports, if it reports one.
pub fn status_of(body: &str) -> Option<u16> {
    let error = first_failure(body)?;
    // A numeric code is an HTTP status (OpenRouter's errors carry theirs so).
    let numeric = error.get("code").and_then(Value::as_u64).and_then(|c| u16::try_from(c).ok());
    if let Some(status) = numeric.filter(|c| (400..600).contains(c)) {
        return Some(status);
    }
    let word = |k: &str| error.get(k).and_then(Value::as_str).unwrap_or("");
    Some(status_for(word("code")).or_else(|| status_for(word("type"))).unwrap_or(500))
}

/// The failure's own words as an error body (`{"error": …}`): what the client is told instead
/// of the events.
pub fn failure_body(body: &str) -> Option<String> {
    first_failure(body).map(|error| serde_json::json!({ "error": error }).to_string())
}

/// The status a failure's code or type goes with.
fn status_for(code: &str) -> Option<u16> {
    Some(match code {
        "rate_limit_exceeded"
        | "rate_limit_error"
        | "insufficient_quota"
        | "usage_limit_reached"
        | "tokens"
        | "requests" => 429,
        "context_length_exceeded" | "invalid_request_error" | "invalid_prompt" => 400,
        "authentication_error" | "invalid_api_key" => 401,
        "permission_error" => 403,
        "not_found_error" | "model_not_found" => 404,
        "overloaded_error" => 529,
        "server_error" | "api_error" | "internal_error" => 500,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAILED: &str = "event: response.created\ndata: {\"type\":\"response.created\"}\n\nevent: response.in_progress\ndata: {}\n\nevent: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"error\":{\"code\":\"rate_limit_exceeded\",\"message\":\"slow down\"}}}\n\n";

    #[test]
    fn a_failed_response_and_an_error_frame_have_their_status() {
        assert_eq!(status_of(FAILED), Some(429));
        let frame = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
        assert_eq!(status_of(frame), Some(529));
        let unknown = "data: {\"type\":\"error\",\"error\":{\"code\":\"new_thing\"}}\n\n";
        assert_eq!(status_of(unknown), Some(500));
        // A chat chunk that is only an error reads as its type says.
        let chat = "data: {\"error\":{\"message\":\"quota\",\"type\":\"insufficient_quota\"}}\n\n";
        assert_eq!(status_of(chat), Some(429));
        assert_eq!(status_of("data: {\"type\":\"response.output_text.delta\",\"delta\":\"hi\"}\n\n"), None);
        assert_eq!(status_of("{\"error\":{}}"), None);
    }

    #[test]
    fn a_failed_streams_words_are_its_error() {
        let v: Value = serde_json::from_str(&failure_body(FAILED).unwrap_or_default()).unwrap_or_default();
        assert_eq!(v.pointer("/error/message").and_then(Value::as_str), Some("slow down"));
        let frame = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
        let v: Value = serde_json::from_str(&failure_body(frame).unwrap_or_default()).unwrap_or_default();
        assert_eq!(v.pointer("/error/message").and_then(Value::as_str), Some("Overloaded"));
        assert_eq!(failure_body("data: {\"choices\":[]}\n\n"), None);
    }

    fn seen_of(chunks: &[&str]) -> Seen {
        let mut o = Opening::default();
        let mut last = Seen::Opening;
        for c in chunks {
            last = o.feed(c.as_bytes());
        }
        last
    }

    #[test]
    fn opening_events_then_a_failure_is_a_failure_however_the_bytes_are_cut() {
        assert_eq!(seen_of(&[FAILED]), Seen::Failure);
        let cut: Vec<String> = FAILED.as_bytes().chunks(7).map(|c| String::from_utf8_lossy(c).into_owned()).collect();
        assert_eq!(seen_of(&cut.iter().map(String::as_str).collect::<Vec<_>>()), Seen::Failure);
        let crlf = "event: error\r\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\r\n\r\n";
        assert_eq!(seen_of(&[crlf]), Seen::Failure);
        assert_eq!(seen_of(&["data: {\"error\":{\"message\":\"quota\"}}\n\n"]), Seen::Failure);
        // An aggregator's chunk with empty choices and an error, as
        // https://github.com/diegosouzapw/OmniRoute/pull/8210 describes OpenRouter's (rebuilt
        // from its description and message).
        let relayed = "data: {\"id\":\"gen-1\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"error\":{\"code\":502,\"message\":\"Worker local total request limit reached (33/32)\"}}\n\n";
        assert_eq!(seen_of(&[relayed]), Seen::Failure);
        assert_eq!(status_of(relayed), Some(502), "a numeric code is the status");
    }

    #[test]
    fn content_or_an_unfinished_event_is_not_a_failure() {
        assert_eq!(
            seen_of(&["event: message_start\ndata: {}\n\nevent: content_block_delta\ndata: {}\n\n"]),
            Seen::Content
        );
        assert_eq!(seen_of(&["data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n"]), Seen::Content);
        assert_eq!(seen_of(&["data: {\"choices\":[],\"error\":null}\n\n"]), Seen::Content);
        assert_eq!(seen_of(&["event: message_start\ndata: {}\n\nevent: error\ndata: {\"type\":\"er"]), Seen::Opening);
        assert_eq!(seen_of(&[": keep-alive\n\n"]), Seen::Opening);
        assert_eq!(seen_of(&[""]), Seen::Opening);
        // Decided once: a failure after content is the stream's end, not its opening.
        assert_eq!(
            seen_of(&[
                "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n",
                "event: error\ndata: {\"type\":\"error\",\"error\":{}}\n\n"
            ]),
            Seen::Content
        );
    }
}
