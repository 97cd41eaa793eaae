//! What the decision and scale benches share: eight keys of one provider taken round robin, a
//! 429 to classify, lockouts on, and one real starting instant.

use ferroute_core::engine::{Candidate, Engine, Slot, Strategy, Traits};
use ferroute_core::settings::ResilienceSettings;
use ferroute_core::types::ProviderClass;
use std::sync::Arc;
use std::time::Instant;

pub const IDS: [&str; 8] = ["k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8"];
pub const BODY: &str = r#"{"error":{"message":"Rate limit reached for gpt-4o in organization org-x on requests per min","type":"requests","code":"rate_limit_exceeded"}}"#;
pub const HEADERS: &[(&str, &str)] =
    &[("content-type", "application/json"), ("retry-after", "1"), ("x-request-id", "req_123")];

#[allow(clippy::disallowed_methods)] // a benchmark needs one real starting instant
pub fn start() -> Instant {
    Instant::now()
}

/// Eight keys of one provider, rotated among by the provider's connection strategy (found by
/// id: no places resolved).
#[allow(dead_code)] // the scale bench takes the keys with their places only
pub fn round_robin_of_8() -> Vec<Candidate<'static>> {
    IDS.iter()
        .map(|id| Candidate {
            traits: Traits { connection_strategy: Strategy::RoundRobin, ..Traits::default() },
            ..Candidate::new("openai", ProviderClass::ApiKey, id, "gpt-4o")
        })
        .collect()
}

/// The 8 keys' places in `engine`'s tables, resolved once as the gateway does per config.
pub fn slots(engine: &mut Engine) -> Vec<(Slot, Arc<str>)> {
    IDS.iter().map(|id| engine.slot(id)).collect()
}

/// [`round_robin_of_8`] with the keys' places (and the engine's copies of their ids), as the
/// gateway builds its candidates.
pub fn slotted(keys: &[(Slot, Arc<str>)]) -> Vec<Candidate<'_>> {
    keys.iter()
        .map(|(slot, id)| Candidate {
            slot: *slot,
            traits: Traits { connection_strategy: Strategy::RoundRobin, ..Traits::default() },
            ..Candidate::new("openai", ProviderClass::ApiKey, id, "gpt-4o")
        })
        .collect()
}

/// The default settings with model lockouts on.
pub fn settings() -> ResilienceSettings {
    let mut settings = ResilienceSettings::default();
    settings.model_lockout.enabled = true;
    settings
}
