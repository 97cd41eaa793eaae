//! A failure an event stream reports after its 200, before any content: the Responses API's
//! `response.failed`, an `event: error` frame (OpenAI's and Anthropic's). Such a stream failed
//! as surely as a 4xx or 5xx would have; it is read as the status the same failure carries
//! when it comes before the headers.

/// The status of the failure `body` (an event stream) reports, if it reports one.
pub fn status_of(body: &str) -> Option<u16> {
    for line in body.lines() {
        let Some(data) = line.strip_prefix("data:") else { continue };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(data.trim()) else { continue };
        let error = match v.get("type").and_then(|t| t.as_str()) {
            Some("response.failed") => v.get("response").and_then(|r| r.get("error")),
            Some("error") => Some(v.get("error").unwrap_or(&v)),
            _ => None,
        };
        let Some(error) = error else { continue };
        let word = |k: &str| error.get(k).and_then(|c| c.as_str()).unwrap_or("");
        return Some(status_for(word("code")).or_else(|| status_for(word("type"))).unwrap_or(500));
    }
    None
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

    #[test]
    fn a_failed_response_and_an_error_frame_have_their_status() {
        let failed = "event: response.created\ndata: {\"type\":\"response.created\"}\n\nevent: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"error\":{\"code\":\"rate_limit_exceeded\",\"message\":\"m\"}}}\n\n";
        assert_eq!(status_of(failed), Some(429));
        let frame = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
        assert_eq!(status_of(frame), Some(529));
        let unknown = "data: {\"type\":\"error\",\"error\":{\"code\":\"new_thing\"}}\n";
        assert_eq!(status_of(unknown), Some(500));
        assert_eq!(status_of("data: {\"type\":\"response.output_text.delta\",\"delta\":\"hi\"}\n"), None);
        assert_eq!(status_of("{\"error\":{}}"), None);
    }
}
