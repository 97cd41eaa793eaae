//! How a client reads the gateway's answer: a JSON error's `error.code`, or an SSE stream's
//! `data:` payloads, its last error event and whether it finished. The simulation's clients and
//! the chaos suite's client read answers the same way.

/// The `data:` payloads of an SSE body's complete events, in order (read by the same
/// event-stream rules as the gateway reads its upstreams).
pub fn sse_data(body: &str) -> Vec<String> {
    let mut out = Vec::new();
    ferroute_core::sse::SseParser::default().feed(body.as_bytes(), |ev| out.push(ev.data.to_owned()));
    out
}

/// `error.code` of a JSON error body, or of the last SSE event carrying one (in Google's shape,
/// where `code` is the HTTP status, the `reason` of its first detail).
pub fn error_code(body: &str) -> Option<String> {
    let code = |v: &serde_json::Value| {
        v.pointer("/error/code")
            .and_then(|c| c.as_str())
            .or_else(|| v.pointer("/error/details/0/reason").and_then(|c| c.as_str()))
            .map(str::to_owned)
    };
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(body) {
        return code(&v);
    }
    sse_data(body).iter().rev().filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok()).find_map(|v| code(&v))
}

/// Whether an SSE body finished in the client's own format: an Anthropic client's stream ends
/// with `message_stop` and carries no chat chunks; a chat client's ends with `[DONE]` and
/// carries no Anthropic events. A stream translated wrongly (or not at all) does not count.
pub fn stream_done_as(body: &str, anthropic: bool) -> bool {
    let data = sse_data(body);
    let typed = |d: &String| {
        serde_json::from_str::<serde_json::Value>(d)
            .ok()
            .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_owned))
    };
    if anthropic {
        data.last().and_then(typed).as_deref() == Some("message_stop")
            && data.iter().all(|d| d != "[DONE]" && typed(d).is_some())
    } else {
        data.last().map(String::as_str) == Some("[DONE]")
            && !data
                .iter()
                .any(|d| typed(d).is_some_and(|t| t.starts_with("message") || t.starts_with("content_block")))
    }
}

/// Whether a Gemini client's SSE body finished: every event a `GenerateContentResponse`, the
/// last one with a `finishReason`, none an error.
pub fn stream_done_gemini(body: &str) -> bool {
    let events: Vec<serde_json::Value> = sse_data(body).iter().filter_map(|d| serde_json::from_str(d).ok()).collect();
    !events.is_empty()
        && events.iter().all(|v| v.get("candidates").is_some() && v.get("error").is_none())
        && events.last().and_then(|v| v.pointer("/candidates/0/finishReason")).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_json_and_sse_answers() {
        assert_eq!(error_code(r#"{"error":{"code":"x"}}"#).as_deref(), Some("x"));
        let sse = "data: {\"choices\":[]}\n\ndata: {\"error\":{\"code\":\"late\"}}\n\n";
        assert_eq!(error_code(sse).as_deref(), Some("late"));
        assert!(!stream_done_as(sse, false) && !stream_done_as(sse, true));
        assert!(stream_done_as("data: [DONE]\n\n", false));
        assert!(stream_done_as("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", true));
        assert_eq!(sse_data("data: a\n\ndata: b\n\n"), vec!["a", "b"]);
        let ant = "event: message_start\ndata: {\"type\":\"message_start\"}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        assert!(stream_done_as(ant, true) && !stream_done_as(ant, false));
        let chat = "data: {\"choices\":[]}\n\ndata: [DONE]\n\n";
        assert!(stream_done_as(chat, false) && !stream_done_as(chat, true));
        let google = r#"{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","details":[{"reason":"rate_limited"}]}}"#;
        assert_eq!(error_code(google).as_deref(), Some("rate_limited"));
        let gemini =
            "data: {\"candidates\":[{\"content\":{}}]}\n\ndata: {\"candidates\":[{\"finishReason\":\"STOP\"}]}\n\n";
        assert!(stream_done_gemini(gemini) && !stream_done_gemini(chat));
        assert!(!stream_done_gemini("data: {\"candidates\":[{\"content\":{}}]}\n\n"), "no finish");
    }
}
