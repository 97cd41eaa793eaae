//! The session key of a request (BEHAVIOUR.md §9.1): a header, else an id in the body, else a
//! hash of the first user input; normalised so that any value becomes a bounded, safe key.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Headers that name a session, in order of precedence.
pub const SESSION_HEADERS: [&str; 3] = ["x-codex-session-id", "x-session-id", "x-ferroute-session"];

/// Body fields that name a session, in order, with the prefix each key gets.
const BODY_FIELDS: [(&str, &str); 5] = [
    ("/metadata/session_id", "metadata"),
    ("/metadata/sessionId", "metadata"),
    ("/conversation_id", "conversation"),
    ("/session_id", "session"),
    ("/prompt_cache_key", "prompt-cache"),
];

/// Longest value kept as it is; longer ones are hashed.
const MAX_PLAIN: usize = 180;

/// Characters of the first user input that are hashed into a key.
const INPUT_CHARS: usize = 4096;

/// SHA-256 of `bytes`, lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut out = String::with_capacity(64);
    for b in digest.iter() {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// `prefix:value` for a short value of safe characters, else `prefix:sha256:<hex>`.
pub fn normalise(prefix: &str, value: &str) -> Option<String> {
    let v = value.trim();
    if v.is_empty() {
        return None;
    }
    let plain =
        v.len() <= MAX_PLAIN && v.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
    Some(if plain { format!("{prefix}:{v}") } else { format!("{prefix}:sha256:{}", sha256_hex(v.as_bytes())) })
}

/// The text of the first user turn (a string, or the text parts of a content array).
fn first_user_text(body: &Value) -> Option<String> {
    if let Some(input) = body.get("input").and_then(Value::as_str) {
        return Some(input.to_owned());
    }
    let messages = body.get("messages").or_else(|| body.get("input"))?.as_array()?;
    let first = messages.iter().find(|m| m.get("role").and_then(Value::as_str) == Some("user"))?;
    match first.get("content")? {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => {
            let text: Vec<&str> =
                parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str).or_else(|| p.as_str())).collect();
            (!text.is_empty()).then(|| text.join("\n"))
        }
        _ => None,
    }
}

/// The session key: the first session header present, else a body id, else
/// `input:sha256:<hex>` of the first 4096 characters of the first user input; `None` when the
/// request has none of them.
pub fn session_key(headers: &[(&str, &str)], body: &Value) -> Option<String> {
    for name in SESSION_HEADERS {
        if let Some((_, v)) = headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name))
            && let Some(k) = normalise("header", v)
        {
            return Some(k);
        }
    }
    for (pointer, prefix) in BODY_FIELDS {
        if let Some(v) = body.pointer(pointer) {
            let text = match v {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                _ => continue,
            };
            if let Some(k) = normalise(prefix, &text) {
                return Some(k);
            }
        }
    }
    let text = first_user_text(body)?;
    if text.trim().is_empty() {
        return None;
    }
    let head: String = text.chars().take(INPUT_CHARS).collect();
    Some(format!("input:sha256:{}", sha256_hex(head.as_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn headers_first_in_their_order_then_body_ids_then_the_input() {
        let body = json!({"metadata": {"session_id": "meta-1"}, "messages": [{"role": "user", "content": "hi"}]});
        let h = [("X-Session-Id", "two"), ("x-codex-session-id", "one")];
        assert_eq!(session_key(&h, &body).as_deref(), Some("header:one"));
        assert_eq!(session_key(&[("x-ferroute-session", "s-3")], &body).as_deref(), Some("header:s-3"));
        assert_eq!(session_key(&[], &body).as_deref(), Some("metadata:meta-1"));
        let body = json!({"prompt_cache_key": "pc", "messages": []});
        assert_eq!(session_key(&[], &body).as_deref(), Some("prompt-cache:pc"));
        let body = json!({"conversation_id": 42});
        assert_eq!(session_key(&[], &body).as_deref(), Some("conversation:42"));
    }

    #[test]
    fn the_first_user_input_is_hashed_the_same_across_turns() {
        let turn1 =
            json!({"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "fix the bug"}]});
        let turn2 = json!({"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": [{"type": "text", "text": "fix the bug"}]}, {"role": "assistant", "content": "done"}, {"role": "user", "content": "thanks"}]});
        let k1 = session_key(&[], &turn1).expect("key");
        assert!(k1.starts_with("input:sha256:") && k1.len() == "input:sha256:".len() + 64, "{k1}");
        assert_eq!(session_key(&[], &turn2), Some(k1));
        assert_eq!(session_key(&[], &json!({"messages": []})), None);
        // The Responses API's string input.
        assert!(session_key(&[], &json!({"input": "hello"})).is_some());
    }

    #[test]
    fn unsafe_or_long_values_are_hashed_and_blank_ones_skipped() {
        assert_eq!(normalise("header", "  abc.DEF_1:2-3 ").as_deref(), Some("header:abc.DEF_1:2-3"));
        let spaced = normalise("header", "has spaces").expect("key");
        assert!(spaced.starts_with("header:sha256:"), "{spaced}");
        let long = normalise("header", &"a".repeat(181)).expect("key");
        assert!(long.starts_with("header:sha256:"));
        assert_eq!(normalise("header", "   "), None);
        // A blank header falls through to the next source.
        let body = json!({"session_id": "s"});
        assert_eq!(session_key(&[("x-codex-session-id", " ")], &body).as_deref(), Some("session:s"));
    }
}
