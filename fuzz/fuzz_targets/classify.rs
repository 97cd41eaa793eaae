//! The error classifier over any status, headers and body, for each provider class and rule
//! profile, with and without an operator rule: no panic, and the layer separation holds — a
//! failure that counts toward the breaker is provider-level and never touches the connection,
//! and every cooldown is finite and bounded.
#![no_main]

use ferroute_core::classify::{ConnectionEffect, CooldownProfile, ErrorInput, classify, is_provider_level_status};
use ferroute_core::hint::MAX_HINT;
use ferroute_core::settings::OperatorErrorRule;
use ferroute_core::types::{Format, ProviderClass, Reason, Scope};
use libfuzzer_sys::fuzz_target;
use std::time::Duration;

const PROFILES: &[&str] = &["openai", "agentrouter", "openrouter", "cloudflare-ai", "opencode", "anthropic"];

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let status = u16::from_le_bytes([data[0], data[1]]) % 1000;
    let class = [ProviderClass::ApiKey, ProviderClass::OAuth, ProviderClass::Local][usize::from(data[2] % 3)];
    let profile = PROFILES[usize::from(data[3]) % PROFILES.len()];
    let text = String::from_utf8_lossy(&data[4..]);
    // Headers, a blank line, then the body.
    let (head, body) = text.split_once("\n\n").unwrap_or(("", &text));
    let headers: Vec<(&str, &str)> = head.lines().filter_map(|l| l.split_once(':')).collect();
    let cooldown =
        CooldownProfile { base: Duration::from_secs(3), max_steps: 5, cap: Duration::from_secs(1800), use_hints: true, stated_cap: Duration::from_secs(8 * 86_400) };
    let operator = [OperatorErrorRule {
        provider: profile.to_owned(),
        statuses: vec![status],
        text_markers: body.split_whitespace().next().map(|w| vec![w.to_lowercase()]).unwrap_or_default(),
        reason: Reason::QuotaExhausted,
        scope: Scope::Connection,
        cooldown_ms: Some(60_000),
    }];
    for rules in [&operator[..0], &operator[..]] {
        let input = ErrorInput {
            provider: profile,
            provider_id: profile,
            format: Format::Openai,
            class,
            status,
            headers: &headers,
            body,
            backoff_level: u32::from(data[3] % 12),
            wall_now_ms: Some(1_800_000_000_000),
            until_daily_reset: None,
        };
        let d = classify(&input, &cooldown, rules);
        if d.trips_breaker {
            assert!(is_provider_level_status(d.status), "status {} tripped the breaker", d.status);
            assert_eq!(d.connection, ConnectionEffect::None, "a provider-level failure touched the connection");
        }
        if let ConnectionEffect::Cooldown { duration, .. } = d.connection {
            assert!(duration <= MAX_HINT.max(Duration::from_secs(86_400)), "cooldown {duration:?}");
        }
        if let Some(r) = d.client_retry_after {
            assert!(r <= MAX_HINT.max(Duration::from_secs(86_400)), "retry-after {r:?}");
        }
    }
});
