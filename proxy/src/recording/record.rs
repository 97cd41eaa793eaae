//! What the flight recorder keeps: one record per upstream attempt and one per client request,
//! made once on the request path. Never a prompt, an answer, a key or a token: the upstream's
//! error message is kept (it decides how an error is classified, and a replay must say it again),
//! cut to 500 characters; session keys only as a hash.

use serde::{Deserialize, Serialize};

/// One line of a recording.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    /// A client request reached routing and was answered.
    Request(RequestRecord),
    /// An upstream attempt ended.
    Attempt(Box<AttemptRecord>),
}

impl Record {
    /// When it happened (Unix ms): a request's arrival, an attempt's start.
    pub fn at_ms(&self) -> u64 {
        match self {
            Record::Request(r) => r.at_ms,
            Record::Attempt(a) => a.started_ms,
        }
    }
}

/// A client request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Its number in this process (attempts name it).
    pub request: u64,
    /// Arrival (Unix ms).
    pub at_ms: u64,
    /// Answered (Unix ms; for a stream, when its headers went out).
    pub answered_ms: u64,
    /// The client API: `chat`, `messages` or `responses`.
    pub api: String,
    /// The model or combo asked for.
    pub model: String,
    /// Whether it asked for a stream.
    pub stream: bool,
    /// The session key's SHA-256 (hex), when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The status it was answered with.
    pub status: u16,
    /// The answer's class: `served`, or the status (`429`, `503`, `504`, …).
    pub class: String,
}

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptEnd {
    /// The upstream answered well (a stream: it finished).
    Served,
    /// The upstream answered with an error status.
    Failed,
    /// The upstream could not be reached or broke off.
    Transport,
    /// The watchdog cut a stream too slow.
    Watchdog,
    /// The client went away, or a local limit refused the attempt.
    Aborted,
}

/// A stream's timing in brief.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamTiming {
    /// From the headers to the first byte of the body (ms).
    pub first_byte_ms: Option<u64>,
    /// Events relayed.
    pub events: u64,
    /// The longest gap between two reads (ms).
    pub longest_gap_ms: u64,
    /// Bytes relayed.
    pub bytes: u64,
}

/// Tokens an upstream reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Input (prompt) tokens.
    pub input_tokens: u64,
    /// Output (completion) tokens.
    pub output_tokens: u64,
}

impl Usage {
    /// Reads the usage of an answer or of one stream event (OpenAI `usage.prompt_tokens` /
    /// `completion_tokens`, Anthropic `usage` or `message.usage` `input_tokens` /
    /// `output_tokens`, Responses `response.usage`, Gemini `usageMetadata.promptTokenCount` /
    /// `candidatesTokenCount` and `thoughtsTokenCount`); `None` when it names none.
    pub fn of(json: &[u8]) -> Option<Usage> {
        let v: serde_json::Value = serde_json::from_slice(json).ok()?;
        if let Some(m) = v.get("usageMetadata") {
            let n = |k: &str| m.get(k).and_then(serde_json::Value::as_u64);
            let output = n("candidatesTokenCount").map(|c| c + n("thoughtsTokenCount").unwrap_or(0));
            let input = n("promptTokenCount");
            return (input.is_some() || output.is_some())
                .then(|| Usage { input_tokens: input.unwrap_or(0), output_tokens: output.unwrap_or(0) });
        }
        let u = v.get("usage").or_else(|| v.pointer("/message/usage")).or_else(|| v.pointer("/response/usage"))?;
        let n = |keys: &[&str]| keys.iter().find_map(|k| u.get(*k).and_then(serde_json::Value::as_u64));
        let input = n(&["prompt_tokens", "input_tokens"]);
        let output = n(&["completion_tokens", "output_tokens"]);
        (input.is_some() || output.is_some())
            .then(|| Usage { input_tokens: input.unwrap_or(0), output_tokens: output.unwrap_or(0) })
    }

    /// Folds a later report in (streams report in parts; counts only grow).
    pub fn merge(self, later: Usage) -> Usage {
        Usage {
            input_tokens: self.input_tokens.max(later.input_tokens),
            output_tokens: self.output_tokens.max(later.output_tokens),
        }
    }
}

/// One upstream attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptRecord {
    /// The client request it served.
    pub request: u64,
    /// Its round within the request (a combo wait or the emergency target starts another).
    pub round: u32,
    /// Sent (Unix ms).
    pub started_ms: u64,
    /// The response's headers arrived (Unix ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers_ms: Option<u64>,
    /// Ended (Unix ms).
    pub ended_ms: u64,
    /// The client API.
    pub api: String,
    /// The combo, when the request asked for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub combo: Option<String>,
    /// Provider.
    pub provider: String,
    /// Connection.
    pub connection: String,
    /// Model.
    pub model: String,
    /// Whether it streamed.
    pub stream: bool,
    /// The upstream's status (0: none arrived).
    pub status: u16,
    /// Response headers that carry hints (`retry-after`, rate-limit and reset headers).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hints: Vec<(String, String)>,
    /// The upstream's error message (its first 500 characters), for a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The classification: reason, layer (`account-level`, `provider-level`, …), the retry
    /// hint given to the client (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The outcome's layer.
    pub layer: String,
    /// The retry hint for the client (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// What the attempt changed (`breaker a OPEN`, `cooldown k1 rate_limit_exceeded level 1`,
    /// `lockout a/k1/m 60000 ms`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<String>,
    /// What excluded the other candidates of the request when this one was picked
    /// (`k2 unavailable`, `k3 circuit_open`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub excluded: Vec<String>,
    /// Tokens in and out, as the upstream reported them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// How it ended.
    pub end: AttemptEnd,
    /// A stream's timing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<StreamTiming>,
}

/// Whether a response header carries a hint a replay must repeat.
pub fn is_hint(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n == "retry-after"
        || n == "retry-after-ms"
        || n.starts_with("x-ratelimit-")
        || n.starts_with("anthropic-ratelimit-")
        || n.contains("-reset")
}

/// The answer class of a status: `served` for 2xx, else the status.
pub fn class_of(status: u16) -> String {
    if (200..300).contains(&status) { "served".to_owned() } else { status.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_one_json_line_tagged_with_its_kind() {
        let r = Record::Request(RequestRecord {
            request: 7,
            at_ms: 1_000,
            answered_ms: 1_050,
            api: "chat".into(),
            model: "team".into(),
            stream: false,
            session: None,
            status: 429,
            class: class_of(429),
        });
        let line = serde_json::to_string(&r).expect("json");
        assert!(line.starts_with(r#"{"kind":"request","request":7,"#), "{line}");
        assert!(!line.contains('\n') && !line.contains("session"));
        assert_eq!(serde_json::from_str::<Record>(&line).expect("back"), r);
        assert_eq!(class_of(200), "served");
    }

    #[test]
    fn usage_in_either_format_and_across_a_stream() {
        let openai = br#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}}"#;
        assert_eq!(Usage::of(openai), Some(Usage { input_tokens: 12, output_tokens: 5 }));
        let start = br#"{"type":"message_start","message":{"usage":{"input_tokens":472,"output_tokens":2}}}"#;
        let delta = br#"{"type":"message_delta","usage":{"output_tokens":90}}"#;
        let total = Usage::of(start).and_then(|a| Usage::of(delta).map(|b| a.merge(b)));
        assert_eq!(total, Some(Usage { input_tokens: 472, output_tokens: 90 }));
        assert_eq!(Usage::of(br#"{"choices":[]}"#), None);
        let gemini = br#"{"candidates":[],"usageMetadata":{"promptTokenCount":7,"candidatesTokenCount":4,"thoughtsTokenCount":2}}"#;
        assert_eq!(Usage::of(gemini), Some(Usage { input_tokens: 7, output_tokens: 6 }));
        let responses = br#"{"type":"response.completed","response":{"usage":{"input_tokens":3,"output_tokens":1}}}"#;
        assert_eq!(Usage::of(responses), Some(Usage { input_tokens: 3, output_tokens: 1 }));
        assert_eq!(Usage::of(b"[DONE]"), None);
    }

    #[test]
    fn hint_headers_are_the_ones_that_steer_cooldowns() {
        for h in ["Retry-After", "retry-after-ms", "x-ratelimit-reset-requests", "anthropic-ratelimit-tokens-reset"] {
            assert!(is_hint(h), "{h}");
        }
        for h in ["content-type", "authorization", "set-cookie"] {
            assert!(!is_hint(h), "{h}");
        }
    }
}
