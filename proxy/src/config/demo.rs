//! Ids of the built-in demo, and the demo itself: what the gateway serves when no provider is
//! configured (no keys needed to see it work).

use super::combos::RawCombo;
use super::connection::ConnectionConfig;
use super::provider::{Format, ProviderConfig};
use ferroute_core::types::ProviderClass;
use std::collections::BTreeMap;

/// The echo provider.
pub const PROVIDER: &str = "demo";
/// The flaky provider.
pub const FLAKY_PROVIDER: &str = "demo-flaky";
/// The same echo behind an Anthropic-format provider (requests are translated).
pub const CLAUDE_PROVIDER: &str = "demo-claude";
/// The same echo behind a Gemini-format provider.
pub const GEMINI_PROVIDER: &str = "demo-gemini";
/// The same echo behind a Responses-format provider.
pub const RESPONSES_PROVIDER: &str = "demo-responses";
/// The combo clients ask for as `demo/flaky`.
pub const FLAKY_COMBO: &str = "demo/flaky";
/// Placeholder base URL, replaced with the demo upstream's address at start.
pub const BASE_URL: &str = "http://demo.invalid/v1";

/// The demo providers, their connections and the flaky combo (added when no provider is
/// configured).
pub(super) fn parts() -> (Vec<ProviderConfig>, Vec<ConnectionConfig>, RawCombo) {
    let provider = |id: &str, format: Format, models: &[&str]| ProviderConfig {
        id: id.into(),
        format,
        base_url: BASE_URL.into(),
        class: ProviderClass::Local,
        models: models.iter().map(|m| (*m).to_owned()).collect(),
        profile: None,
        start_timeout_ms: None,
        connection_strategy: None,
        egress_ip_lock: false,
        quota_families: BTreeMap::new(),
        daily_quota_reset: None,
        proxy: None,
    };
    let connection = |id: &str, provider: &str| ConnectionConfig {
        id: id.into(),
        provider: provider.into(),
        api_key: None,
        max_concurrent: None,
        disable_cooling: false,
        request_queue: None,
        weight: None,
        egress_ip: None,
        usage_limit: None,
        oauth: None,
        proxy: None,
    };
    let providers = vec![
        provider(PROVIDER, Format::Openai, &["echo", "tools"]),
        provider(FLAKY_PROVIDER, Format::Openai, &["flaky"]),
        provider(CLAUDE_PROVIDER, Format::Anthropic, &["echo", "tools"]),
        provider(GEMINI_PROVIDER, Format::Gemini, &["echo", "tools"]),
        provider(RESPONSES_PROVIDER, Format::Responses, &["echo", "tools"]),
    ];
    let connections = vec![
        connection("demo-1", PROVIDER),
        connection("demo-flaky-1", FLAKY_PROVIDER),
        connection("demo-claude-1", CLAUDE_PROVIDER),
        connection("demo-gemini-1", GEMINI_PROVIDER),
        connection("demo-responses-1", RESPONSES_PROVIDER),
    ];
    let combo = RawCombo {
        name: FLAKY_COMBO.into(),
        strategy: "priority".into(),
        targets: vec![toml::Value::String(format!("{}/flaky", FLAKY_PROVIDER))],
        judge: None,
    };
    (providers, connections, combo)
}
