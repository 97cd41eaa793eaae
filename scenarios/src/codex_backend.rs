//! What ChatGPT's Codex backend (`https://chatgpt.com/backend-api/codex/responses`, reached
//! with a ChatGPT sign-in) refuses, with the 400 bodies it was seen to send
//! (`{"detail": "…"}`, not the Responses API's `{"error": {…}}`). Each is quoted in a public
//! issue; the order in which the backend checks them is not known.
//!
//! - `Instructions are required`: vybestack/llxprt-code#1197, PwnKit-Labs/pwnkit#330.
//! - `Store must be set to false`: openai/codex#26173, router-for-me/CLIProxyAPI#41.
//! - `Stream must be set to true`: kryptobaseddev/cleo#1079, Zoo-Code-Org/Zoo-Code#1242.
//! - `Unsupported parameter: max_output_tokens`: RayBytes/ChatMock#103;
//!   `… temperature`: finch-xu/cc-router#32; `… stream_options`: cita-777/metapi#446.
//! - `Input must be a list`: cubezhao/ai-tools-mng#79.
//!
//! Its usage-limit answer is a 429 a scenario scripts (`USAGE_LIMIT` is its body, from
//! james-6-23/codex2api#9), with the `x-codex-*` headers earendil-works/pi#4172 quotes
//! ([`USAGE_LIMIT_HEADERS`], the reset moved the same way).

use serde_json::Value;

/// The parameters it refuses by name.
const UNSUPPORTED: [&str; 4] = ["max_output_tokens", "temperature", "top_p", "stream_options"];

/// The 429 body of a ChatGPT plan's used-up Codex limit, as james-6-23/codex2api#9 quotes it
/// (`{"error":{"type":"usage_limit_reached","message":"The usage limit has been reached",
/// "plan_type":"free","resets_at":1775317531,"resets_in_seconds":602705}}`), its reset moved to
/// 600 s from now with the upstream's clock placeholders so that a test sees it end.
pub const USAGE_LIMIT: &str = r#"{"error":{"type":"usage_limit_reached","message":"The usage limit has been reached","plan_type":"free","resets_at":{epoch+600},"resets_in_seconds":600}}"#;

/// The window headers of that answer, from earendil-works/pi#4172's
/// (`X-Codex-Primary-Used-Percent: 100`, `X-Codex-Primary-Window-Minutes: 300`,
/// `X-Codex-Primary-Reset-After-Seconds: 13873`), the reset moved to 600 s like the body's.
pub const USAGE_LIMIT_HEADERS: [(&str, &str); 3] = [
    ("x-codex-primary-used-percent", "100"),
    ("x-codex-primary-window-minutes", "300"),
    ("x-codex-primary-reset-after-seconds", "600"),
];

/// The `detail` of the 400 the backend answers a request to `path` with, if it breaks one of
/// its rules.
pub fn refusal(path: &str, body: &Value) -> Option<String> {
    if !path.ends_with("/responses") {
        return None;
    }
    if !body.get("instructions").is_some_and(Value::is_string) {
        return Some("Instructions are required".into());
    }
    if body.get("store") != Some(&Value::Bool(false)) {
        return Some("Store must be set to false".into());
    }
    if body.get("stream") != Some(&Value::Bool(true)) {
        return Some("Stream must be set to true".into());
    }
    if let Some(k) = UNSUPPORTED.iter().find(|k| body.get(**k).is_some()) {
        return Some(format!("Unsupported parameter: {k}"));
    }
    if !body.get("input").is_some_and(Value::is_array) {
        return Some("Input must be a list".into());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rule_gets_the_backends_own_words() {
        let ok = serde_json::json!({"model": "gpt-5", "instructions": "", "input": [], "store": false, "stream": true});
        assert_eq!(refusal("/backend-api/codex/responses", &ok), None);
        assert_eq!(refusal("/v1/chat/completions", &serde_json::json!({})), None);
        let with = |k: &str, v: Value| {
            let mut b = ok.clone();
            b[k] = v;
            refusal("/backend-api/codex/responses", &b)
        };
        assert_eq!(with("store", true.into()).as_deref(), Some("Store must be set to false"));
        assert_eq!(with("stream", false.into()).as_deref(), Some("Stream must be set to true"));
        assert_eq!(with("instructions", Value::Null).as_deref(), Some("Instructions are required"));
        assert_eq!(with("temperature", 0.5.into()).as_deref(), Some("Unsupported parameter: temperature"));
        assert_eq!(with("input", "hi".into()).as_deref(), Some("Input must be a list"));
    }
}
