//! How a client reads the gateway's answer: a JSON error's `error.code`, or an SSE stream's
//! `data:` payloads, its last error event and whether it finished. The simulation's clients and
//! the chaos suite's client read answers the same way.

/// The `data:` payloads of an SSE body, in order.
pub fn sse_data(body: &str) -> Vec<String> {
    body.split("\n\n").filter_map(|ev| ev.lines().find_map(|l| l.strip_prefix("data: ")).map(str::to_owned)).collect()
}

/// `error.code` of a JSON error body, or of the last SSE event carrying one.
pub fn error_code(body: &str) -> Option<String> {
    let code = |v: &serde_json::Value| v.pointer("/error/code").and_then(|c| c.as_str()).map(str::to_owned);
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(body) {
        return code(&v);
    }
    sse_data(body).iter().rev().filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok()).find_map(|v| code(&v))
}

/// Whether an SSE body finished: `[DONE]` (OpenAI) or `message_stop` (Anthropic).
pub fn stream_done(body: &str) -> bool {
    sse_data(body).iter().any(|d| {
        d == "[DONE]"
            || serde_json::from_str::<serde_json::Value>(d)
                .is_ok_and(|v| v.get("type").and_then(|t| t.as_str()) == Some("message_stop"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_json_and_sse_answers() {
        assert_eq!(error_code(r#"{"error":{"code":"x"}}"#).as_deref(), Some("x"));
        let sse = "data: {\"choices\":[]}\n\ndata: {\"error\":{\"code\":\"late\"}}\n\n";
        assert_eq!(error_code(sse).as_deref(), Some("late"));
        assert!(!stream_done(sse));
        assert!(stream_done("data: [DONE]\n\n"));
        assert!(stream_done("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"));
        assert_eq!(sse_data("data: a\n\ndata: b\n\n"), vec!["a", "b"]);
    }
}
