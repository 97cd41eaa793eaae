//! Classification tests: BEHAVIOUR.md §12.9 (A5–A13), §12.15 (account-fallback cases and
//! #8396) and the layer-separation table of SPEC.

use super::*;
use crate::types::{Format, TerminalState};

const S: fn(u64) -> Duration = Duration::from_secs;

fn api() -> CooldownProfile {
    CooldownProfile { base: S(3), max_steps: 5, cap: S(1800), use_hints: true, stated_cap: S(8 * 86_400) }
}

fn oauth() -> CooldownProfile {
    CooldownProfile { base: S(5), max_steps: 8, cap: S(1800), use_hints: false, stated_cap: S(8 * 86_400) }
}

fn run(
    provider: &str,
    class: ProviderClass,
    status: u16,
    headers: &[(&str, &str)],
    body: &str,
    level: u32,
) -> Decision {
    let p = if class == ProviderClass::OAuth { oauth() } else { api() };
    classify(
        &ErrorInput {
            provider,
            provider_id: provider,
            format: Format::Openai,
            class,
            status,
            headers,
            body,
            backoff_level: level,
            wall_now_ms: Some(1_780_000_000_000),
            until_daily_reset: None,
        },
        &p,
        &[],
    )
}

fn cooldown(d: &Decision) -> Option<Duration> {
    match d.connection {
        ConnectionEffect::Cooldown { duration, .. } => Some(duration),
        _ => None,
    }
}

#[test]
fn misreported_403_becomes_429_quota_connection_scope_retry_after_60() {
    // A5–A7, A11 and M11 end to end.
    for status in [403, 429, 400] {
        let d = run(
            "agentrouter",
            ProviderClass::ApiKey,
            status,
            &[],
            r#"{"error":{"message":"用户额度不足，请充值"}}"#,
            0,
        );
        assert_eq!(d.status, 429, "from {status}");
        assert_eq!(d.reason, Reason::QuotaExhausted);
        assert_eq!(d.rule_scope, Some(Scope::Connection));
        assert!(d.should_fallback);
        assert!(!d.trips_breaker);
        assert!(cooldown(&d).is_some_and(|c| c > Duration::ZERO), "a self-healing cooldown, never terminal");
        if status != 429 {
            assert_eq!(d.client_retry_after, Some(S(60)));
            assert_eq!(d.restated_by, Some("agentrouter-quota-misstatus"));
        }
    }
}

#[test]
fn permanent_403_stays_403_model_scope_six_hours() {
    // A12: the lock is declared 6 h (the lockout caps it later).
    let d = run("agentrouter", ProviderClass::ApiKey, 403, &[], "无权访问模型 claude-opus-5", 0);
    assert_eq!(d.status, 403);
    assert_eq!(d.reason, Reason::AuthError);
    assert_eq!(d.rule_scope, Some(Scope::Model));
    assert_eq!(d.lock.cooldown, Some(S(21_600)));
    assert_eq!(d.connection, ConnectionEffect::None, "a model-scoped rule locks the model, not the key");
    assert_eq!(d.client_retry_after, None);
}

#[test]
fn opencode_quota_text_in_message_is_a_plain_rate_limit() {
    // A10, A13.
    let d =
        run("opencode", ProviderClass::ApiKey, 429, &[], r#"{"error":{"message":"organization_quota_exceeded"}}"#, 0);
    assert_eq!(d.reason, Reason::RateLimitExceeded);
    assert_eq!(cooldown(&d), Some(S(3)));
    assert_eq!(d.rule_scope, None);
    let d = run("openrouter", ProviderClass::ApiKey, 402, &[], "credits exhausted", 0);
    assert_eq!(d.rule_scope, None);
}

#[test]
fn account_fallback_cases() {
    // §12.15 account-fallback-service cases 1–12.
    let d = run("openai", ProviderClass::ApiKey, 401, &[], "This account has been deactivated", 0);
    assert_eq!((d.reason, d.connection), (Reason::AuthError, ConnectionEffect::Terminal(TerminalState::Banned)));
    let d = run("openai", ProviderClass::OAuth, 429, &[], "free tier of the model has been exhausted", 0);
    assert_eq!(
        (d.reason, d.connection),
        (Reason::QuotaExhausted, ConnectionEffect::Terminal(TerminalState::CreditsExhausted))
    );
    let d = run("openai", ProviderClass::ApiKey, 402, &[], "credit_balance_too_low", 0);
    assert_eq!(d.connection, ConnectionEffect::Terminal(TerminalState::CreditsExhausted));
    let d = run("openai", ProviderClass::ApiKey, 429, &[], "credit_balance_too_low", 0);
    assert_eq!((d.reason, cooldown(&d)), (Reason::RateLimitExceeded, Some(S(3))));
    let d = run("codex", ProviderClass::OAuth, 429, &[], "credit_balance_too_low", 0);
    assert_eq!(d.connection, ConnectionEffect::Terminal(TerminalState::CreditsExhausted));
    let d = run("openai", ProviderClass::ApiKey, 429, &[], "quota exceeded", 0);
    assert_eq!((d.reason, cooldown(&d)), (Reason::QuotaExhausted, Some(S(3))));
    let d = run("openai", ProviderClass::ApiKey, 429, &[("retry-after", "120")], "Rate limit hit", 3);
    assert_eq!(
        (d.reason, d.connection),
        (
            Reason::RateLimitExceeded,
            ConnectionEffect::Cooldown { duration: S(120), new_level: 0, hint: Some(HintSource::RetryAfter) }
        )
    );
    assert_eq!(d.client_retry_after, Some(S(120)));
    let d = run("openai", ProviderClass::ApiKey, 400, &[], "bad request payload", 0);
    assert_eq!((d.should_fallback, d.reason, d.connection), (false, Reason::Unknown, ConnectionEffect::None));
    // A missing model is locked on the connection; the key serves its other models.
    let d = run("openai", ProviderClass::ApiKey, 400, &[], "The model `foo` does not exist or is not available", 0);
    assert_eq!((d.should_fallback, d.reason, d.lock.scope), (true, Reason::NotFound, Some(Scope::Model)));
    assert_eq!(d.connection, ConnectionEffect::None);
    // A bad key named in a 400's text (xAI answers a wrong key so) ends the key: the reference
    // passed it on without a fallback, and every later request failed alike.
    let d = run("openai", ProviderClass::ApiKey, 400, &[], "Invalid API key provided for model gpt-4o", 0);
    assert_eq!(d.connection, ConnectionEffect::Terminal(TerminalState::Expired));
    let d = run("openai", ProviderClass::ApiKey, 400, &[], r#"{"error":{"code":"model_not_found","message":"x"}}"#, 0);
    assert_eq!((d.should_fallback, d.reason, d.lock.scope), (true, Reason::NotFound, Some(Scope::Model)));
}

#[test]
fn provider_level_statuses_trip_the_breaker_and_never_cool_the_connection() {
    for status in [408, 500, 502, 503, 504] {
        let d = run("openai", ProviderClass::ApiKey, status, &[], "upstream failure", 2);
        assert!(d.trips_breaker, "{status}");
        assert_eq!(d.connection, ConnectionEffect::None, "{status}");
        assert!(d.should_fallback);
    }
    // §12.15 case 8: even with a reset header, a 503 is the provider's problem.
    let d = run("openai", ProviderClass::ApiKey, 503, &[("x-ratelimit-reset", "1780000090")], "service unavailable", 1);
    assert_eq!((d.reason, d.trips_breaker, d.connection), (Reason::ServerError, true, ConnectionEffect::None));
    let t = classify_transport();
    assert!(t.trips_breaker && t.should_fallback && t.connection == ConnectionEffect::None);
}

#[test]
fn account_level_statuses_never_trip_the_breaker() {
    for (status, body) in
        [(401, "unauthorized"), (402, ""), (403, "forbidden"), (429, "slow down"), (429, "quota exceeded")]
    {
        let d = run("openai", ProviderClass::ApiKey, status, &[], body, 0);
        assert!(!d.trips_breaker, "{status} {body}");
    }
}

#[test]
fn supervisor_hint_is_a_short_cooldown_not_a_breaker_failure() {
    let d = run("local", ProviderClass::Local, 503, &[("X-Ferroute-Fallback-Hint", "connection_cooldown")], "", 0);
    assert_eq!((d.reason, d.trips_breaker, cooldown(&d)), (Reason::ServiceNotRunning, false, Some(S(5))));
}

#[test]
fn cap_always_applies_8396() {
    let p = CooldownProfile { base: S(60), max_steps: 8, cap: S(600), use_hints: true, stated_cap: S(8 * 86_400) };
    let input = |level, headers: &'static [(&'static str, &'static str)]| ErrorInput {
        provider: "x",
        provider_id: "x",
        format: Format::Openai,
        class: ProviderClass::ApiKey,
        status: 429,
        headers,
        body: "",
        backoff_level: level,
        wall_now_ms: None,
        until_daily_reset: None,
    };
    assert!(cooldown(&classify(&input(8, &[]), &p, &[])).is_some_and(|c| c <= S(600)));
    assert_eq!(cooldown(&classify(&input(0, &[("Retry-After", "30")]), &p, &[])), Some(S(30)));
    assert_eq!(cooldown(&classify(&input(0, &[]), &p, &[])), Some(S(60)));
}

#[test]
fn quota_windows_from_text() {
    let d = run("claude", ProviderClass::OAuth, 429, &[], "You've reached your usage limit", 0);
    assert_eq!((d.reason, cooldown(&d)), (Reason::QuotaExhausted, Some(S(3600))));
    let d = run("x", ProviderClass::OAuth, 429, &[], "weekly limit reached", 0);
    assert_eq!(cooldown(&d), Some(S(86_400)));
    let d = run("x", ProviderClass::OAuth, 429, &[], "session limit reached", 0);
    assert_eq!(cooldown(&d), Some(S(5 * 3600)));
    // Until midnight UTC of the input's wall clock (2026-05-28T20:26:40Z: 3 h 33 min 20 s),
    // never more than a day.
    let d = run("x", ProviderClass::ApiKey, 429, &[], "daily quota exhausted, try again tomorrow", 0);
    assert_eq!((d.reason, cooldown(&d)), (Reason::QuotaExhausted, Some(S(12_800))));
    assert!(cooldown(&d) <= Some(S(86_400)));
}

#[test]
fn oauth_request_not_allowed_goes_to_the_streak() {
    let d = run("claude", ProviderClass::OAuth, 403, &[], "Request not allowed", 0);
    assert_eq!((d.reason, d.connection), (Reason::RequestRejected, ConnectionEffect::RequestRejected));
    // Elsewhere the generic text rule gives 5 s.
    let d = run("x", ProviderClass::Local, 403, &[], "Request not allowed", 0);
    assert_eq!(cooldown(&d), Some(S(5)));
}

#[test]
fn operator_rules_win() {
    let ops = vec![OperatorErrorRule {
        provider: "my-gateway".into(),
        statuses: vec![403, 400],
        text_markers: vec!["quota exceeded".into()],
        reason: Reason::QuotaExhausted,
        scope: Scope::Connection,
        cooldown_ms: Some(90_000),
    }];
    for status in [403, 400] {
        let d = classify(
            &ErrorInput {
                provider: "my-gateway",
                provider_id: "my-gateway",
                format: Format::Openai,
                class: ProviderClass::ApiKey,
                status,
                headers: &[],
                body: "Quota Exceeded",
                backoff_level: 0,
                wall_now_ms: None,
                until_daily_reset: None,
            },
            &api(),
            &ops,
        );
        assert_eq!(
            (d.reason, d.rule_scope, cooldown(&d)),
            (Reason::QuotaExhausted, Some(Scope::Connection), Some(S(90))),
            "{status}"
        );
    }
}

#[test]
fn unknown_status_falls_back_with_base_cooldown_and_404_locks_nothing_on_the_key() {
    let d = run("x", ProviderClass::ApiKey, 409, &[], "conflict", 0);
    assert_eq!((d.reason, d.should_fallback, cooldown(&d)), (Reason::Unknown, true, Some(S(3))));
    let d = run("x", ProviderClass::ApiKey, 404, &[], "no such model", 0);
    assert_eq!((d.reason, d.connection), (Reason::NotFound, ConnectionEffect::None));
}

#[test]
fn tool_limit_reads_the_limit_from_the_error() {
    let openai = r#"{"error":{"message":"Invalid 'tools': array too long. Expected an array with maximum length 128, but got an array with length 200 instead.","type":"invalid_request_error"}}"#;
    assert_eq!(tool_limit(400, openai, 200), Some(128));
    assert_eq!(tool_limit(400, "Too many tools provided", 40), Some(39));
    assert_eq!(tool_limit(400, "The maximum number of tools is 64", 65), Some(64));
    // Not about tools, not an input error, or no tools sent.
    assert_eq!(tool_limit(400, "max_tokens is too large: 200000", 3), None);
    assert_eq!(tool_limit(500, "too many tools", 3), None);
    assert_eq!(tool_limit(400, "too many tools", 0), None);
}

#[test]
fn a_429_that_ends_a_connection_still_carries_the_upstreams_hint() {
    let body = r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}"#;
    let d = run("openai", ProviderClass::ApiKey, 429, &[("retry-after", "2")], body, 0);
    assert!(matches!(d.connection, ConnectionEffect::Terminal(_)), "{:?}", d.connection);
    assert_eq!(d.client_retry_after, Some(S(2)));
}

/// A Gemini 429 as the API sends it (pretty-printed), per minute or per day.
fn gemini_429(quota_id: &str, delay: &str) -> String {
    format!(
        r#"{{
  "error": {{
    "code": 429,
    "message": "You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.",
    "status": "RESOURCE_EXHAUSTED",
    "details": [
      {{"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{{"quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests", "quotaId": "{quota_id}", "quotaDimensions": {{"location": "global", "model": "gemini-2.5-flash"}}, "quotaValue": "10"}}]}},
      {{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "{delay}"}}
    ]
  }}
}}"#
    )
}

fn gemini(status: u16, body: &str, until_daily_reset: Option<Duration>) -> Decision {
    classify(
        &ErrorInput {
            provider: "gemini",
            provider_id: "gemini",
            format: Format::Gemini,
            class: ProviderClass::ApiKey,
            status,
            headers: &[],
            body,
            backoff_level: 0,
            wall_now_ms: Some(1_780_000_000_000),
            until_daily_reset,
        },
        &api(),
        &[],
    )
}

#[test]
fn a_gemini_per_minute_429_locks_the_model_for_its_retry_delay_not_the_key_for_good() {
    let body = gemini_429("GenerateRequestsPerMinutePerProjectPerModel-FreeTier", "17s");
    let d = gemini(429, &body, None);
    assert_eq!(d.rule_id.as_deref(), Some("gemini-rate-limit"));
    assert_eq!(d.reason, Reason::RateLimitExceeded);
    assert_eq!(d.connection, ConnectionEffect::None, "the key serves its other models");
    assert_eq!((d.lock.scope, d.lock.cooldown), (Some(Scope::Model), Some(S(17))));
    assert_eq!(d.client_retry_after, Some(S(17)));
    assert!(d.should_fallback && !d.trips_breaker);
    // The same words from an OpenAI-format provider still mean an account out of credits.
    let d = run("openai", ProviderClass::ApiKey, 429, &[], &body, 0);
    assert_eq!(d.connection, ConnectionEffect::Terminal(TerminalState::CreditsExhausted));
}

#[test]
fn a_gemini_per_day_429_locks_the_model_until_the_providers_midnight() {
    let body = gemini_429("GenerateRequestsPerDayPerProjectPerModel-FreeTier", "40s");
    let d = gemini(429, &body, Some(S(5 * 3600)));
    assert_eq!(d.rule_id.as_deref(), Some("gemini-per-day-quota"));
    assert_eq!(d.reason, Reason::QuotaExhausted);
    assert_eq!(d.connection, ConnectionEffect::None);
    assert_eq!((d.lock.scope, d.lock.cooldown), (Some(Scope::Model), Some(S(5 * 3600))));
    assert_eq!(d.client_retry_after, Some(S(5 * 3600)), "the daily reset, not the 40 s retry delay");
    // Without the shell's calendar: midnight UTC.
    let d = gemini(429, &body, None);
    assert_eq!(d.lock.cooldown, Some(crate::hint::until_midnight_utc(1_780_000_000_000)));
}

#[test]
fn gemini_overload_is_provider_level_and_bad_keys_are_auth() {
    let d = gemini(
        503,
        r#"{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}"#,
        None,
    );
    assert_eq!(d.rule_id.as_deref(), Some("gemini-unavailable"));
    assert!(d.trips_breaker && d.connection == ConnectionEffect::None);
    let bad_key = r#"{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID","domain":"googleapis.com"}]}}"#;
    let d = gemini(400, bad_key, None);
    assert_eq!(d.rule_id.as_deref(), Some("gemini-api-key-invalid"));
    assert_eq!((d.reason, d.connection), (Reason::AuthError, ConnectionEffect::Terminal(TerminalState::Expired)));
    // Any other INVALID_ARGUMENT is the request's fault: no rule, no fallback.
    let d = gemini(
        400,
        r#"{"error":{"code":400,"message":"Invalid JSON payload received.","status":"INVALID_ARGUMENT"}}"#,
        None,
    );
    assert_eq!((d.rule_id, d.should_fallback), (None, false));
    let d = gemini(
        403,
        r#"{"error":{"code":403,"message":"Permission denied on resource project.","status":"PERMISSION_DENIED"}}"#,
        None,
    );
    assert_eq!(d.rule_id.as_deref(), Some("gemini-permission-denied"));
    assert_eq!((d.reason, d.lock.scope, d.connection), (Reason::AuthError, Some(Scope::Model), ConnectionEffect::None));
}
