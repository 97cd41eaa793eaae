//! ChatGPT's Codex backend, which a `codex` OAuth connection reaches (by default
//! `https://chatgpt.com/backend-api/codex/responses`): a Responses API with demands of its own,
//! met here on every request to it, whatever API the client spoke. `docs/codex-backend.md`
//! names the sources.
//!
//! - `store` is `false` and `stream` is `true` (the backend answers `Store must be set to
//!   false` and `Stream must be set to true` otherwise); a client that asked for one JSON answer
//!   gets the stream's final response ([`crate::translate::chat_responses::final_response`]).
//! - `instructions` is always a string (`Instructions are required`), the client's own or empty:
//!   Ferroute adds no prompt of its own.
//! - `input` is a list (`Input must be a list`): a string becomes one user message.
//! - `max_output_tokens`, `temperature`, `top_p` and `stream_options` are not accepted
//!   (`Unsupported parameter: …`): they are left out and named in
//!   `x-ferroute-translation-dropped`.
//! - With `reasoning`, `include` asks for `reasoning.encrypted_content` (the reasoning of a
//!   response that is not stored travels with the client).
//!
//! Headers: the bearer token and `chatgpt-account-id` (the account's), `accept:
//! text/event-stream`, the client's own `originator` (or Ferroute's name, `ferroute`: it never
//! borrows another client's), and the client's session id as `session_id` when it sent one.

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

/// The `originator` Ferroute names itself with when the client named none.
pub const ORIGINATOR: &str = "ferroute";

/// Parameters the backend refuses.
const UNSUPPORTED: [&str; 4] = ["max_output_tokens", "temperature", "top_p", "stream_options"];

static ORIGINATOR_HEADER: HeaderName = HeaderName::from_static("originator");
static SESSION_ID: HeaderName = HeaderName::from_static("session_id");
/// Where Codex names its session (`session_id`, later `session-id`); the gateway's own session
/// headers ([`ferroute_core::session::key::SESSION_HEADERS`]) are read after them.
const CODEX_SESSION_HEADERS: [&str; 2] = ["session_id", "session-id"];

/// What a client said about itself that the backend reads.
#[derive(Debug, Clone, Default)]
pub struct ClientIds {
    /// Its `originator`.
    pub originator: Option<HeaderValue>,
    /// Its session id.
    pub session: Option<HeaderValue>,
}

impl ClientIds {
    /// Reads them from a request's headers.
    pub fn from(headers: &HeaderMap) -> Self {
        let visible = |v: &&HeaderValue| v.to_str().is_ok_and(|s| !s.trim().is_empty());
        ClientIds {
            originator: headers.get(&ORIGINATOR_HEADER).filter(visible).cloned(),
            session: CODEX_SESSION_HEADERS
                .iter()
                .chain(ferroute_core::session::key::SESSION_HEADERS.iter())
                .find_map(|n| headers.get(*n).filter(visible))
                .cloned(),
        }
    }
}

/// Adds the backend's headers (the credential and account id are the connection's).
pub fn headers(h: &mut HeaderMap, ids: &ClientIds) {
    h.insert(http::header::ACCEPT, HeaderValue::from_static("text/event-stream"));
    let originator = ids.originator.clone().unwrap_or(HeaderValue::from_static(ORIGINATOR));
    h.insert(ORIGINATOR_HEADER.clone(), originator);
    if let Some(s) = &ids.session {
        h.insert(SESSION_ID.clone(), s.clone());
    }
}

/// The Responses request `body` as the backend takes it; what was left out is added to
/// `dropped`.
pub fn body(body: &[u8], dropped: &mut Vec<String>) -> Result<Bytes, String> {
    let mut v: Value = serde_json::from_slice(body).map_err(|e| format!("the Responses request is not JSON: {e}"))?;
    let o = v.as_object_mut().ok_or("the Responses request is not a JSON object")?;
    if o.get("store").and_then(Value::as_bool) == Some(true) {
        dropped.push("store".to_owned());
    }
    o.insert("store".into(), Value::Bool(false));
    o.insert("stream".into(), Value::Bool(true));
    if !o.get("instructions").is_some_and(Value::is_string) {
        o.insert("instructions".into(), Value::String(String::new()));
    }
    if let Some(Value::String(text)) = o.get("input") {
        let message = serde_json::json!({"role": "user", "content": [{"type": "input_text", "text": text}]});
        o.insert("input".into(), Value::Array(vec![message]));
    }
    for k in UNSUPPORTED {
        if o.remove(k).is_some_and(|v| !v.is_null()) {
            dropped.push(k.to_owned());
        }
    }
    if o.get("reasoning").is_some_and(|r| !r.is_null()) {
        let include = o.entry("include").or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(list) = include
            && !list.iter().any(|i| i == "reasoning.encrypted_content")
        {
            list.push(Value::String("reasoning.encrypted_content".into()));
        }
    }
    serde_json::to_vec(&v).map(Bytes::from).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_meets_the_backends_demands_and_says_what_was_left_out() {
        let mut dropped = Vec::new();
        let sent = br#"{"model":"gpt-5","input":"hi","store":true,"max_output_tokens":64,"temperature":0.2,"reasoning":{"effort":"low"}}"#;
        let out: Value = serde_json::from_slice(&body(sent, &mut dropped).expect("shaped")).expect("JSON");
        assert_eq!(out["store"], false);
        assert_eq!(out["stream"], true);
        assert_eq!(out["instructions"], "");
        assert_eq!(
            out["input"],
            serde_json::json!([{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}])
        );
        assert!(out.get("max_output_tokens").is_none() && out.get("temperature").is_none());
        assert_eq!(out["include"], serde_json::json!(["reasoning.encrypted_content"]));
        assert_eq!(dropped, ["store", "max_output_tokens", "temperature"]);
        // The client's own instructions stay; nothing is added to them.
        let mut dropped = Vec::new();
        let own = br#"{"model":"gpt-5","instructions":"be brief","input":[],"stream":false}"#;
        let out: Value = serde_json::from_slice(&body(own, &mut dropped).expect("shaped")).expect("JSON");
        assert_eq!(
            (out["instructions"].as_str(), out["stream"].as_bool(), dropped.len()),
            (Some("be brief"), Some(true), 0)
        );
        assert!(body(b"[1]", &mut dropped).is_err());
    }

    #[test]
    fn a_client_names_itself_and_ferroute_never_borrows_a_name() {
        let mut h = HeaderMap::new();
        headers(&mut h, &ClientIds::default());
        assert_eq!(h.get("originator").and_then(|v| v.to_str().ok()), Some("ferroute"));
        assert!(h.get("session_id").is_none());
        let mut client = HeaderMap::new();
        client.insert("originator", HeaderValue::from_static("codex_cli_rs"));
        client.insert("session_id", HeaderValue::from_static("0199a213-81c0-7800-8aa1-bbab2a035a53"));
        let mut h = HeaderMap::new();
        headers(&mut h, &ClientIds::from(&client));
        assert_eq!(h.get("originator").and_then(|v| v.to_str().ok()), Some("codex_cli_rs"));
        assert_eq!(h.get("session_id").and_then(|v| v.to_str().ok()), Some("0199a213-81c0-7800-8aa1-bbab2a035a53"));
        assert_eq!(h.get("accept").and_then(|v| v.to_str().ok()), Some("text/event-stream"));
    }
}
