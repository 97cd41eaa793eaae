//! From validated settings to the typed configs the machines take.

use super::failures::{BreakerSettings, ConnectionCooldownSettings};
use super::tree::ResilienceSettings;
use crate::breaker::BreakerConfig;
use crate::classify::CooldownProfile;
use crate::lockout::LockoutConfig;
use crate::provider_cooldown::ProviderCooldownConfig;
use crate::types::ProviderClass;
use crate::watchdog::WatchdogConfig;
use std::time::Duration;

fn ms(v: i64) -> Duration {
    Duration::from_millis(v.max(0) as u64)
}

fn count(v: i64) -> u32 {
    u32::try_from(v.max(0)).unwrap_or(u32::MAX)
}

impl BreakerSettings {
    /// The breaker config.
    pub fn to_config(&self) -> BreakerConfig {
        BreakerConfig {
            failure_threshold: count(self.failure_threshold).max(1),
            degradation_threshold: count(self.degradation_threshold).max(1),
            reset_timeout: ms(self.reset_timeout_ms),
            half_open_requests: count(self.half_open_requests).max(1),
            max_backoff_multiplier: count(self.max_backoff_multiplier).max(1),
            backoff_escalation_count: count(self.backoff_escalation_count),
            dedupe_window: ms(self.dedupe_window_ms),
        }
    }
}

impl ConnectionCooldownSettings {
    /// The cooldown ladder.
    pub fn to_profile(&self) -> CooldownProfile {
        CooldownProfile {
            base: ms(self.base_cooldown_ms),
            max_steps: count(self.max_backoff_steps),
            cap: ms(self.max_cooldown_ms).max(ms(self.base_cooldown_ms)),
            use_hints: self.use_upstream_retry_hints,
            stated_cap: ms(self.max_stated_reset_ms),
        }
    }
}

impl ResilienceSettings {
    /// The breaker config of a class.
    pub fn breaker_config(&self, class: ProviderClass) -> BreakerConfig {
        self.breaker.get(class).to_config()
    }

    /// The cooldown ladder of a class.
    pub fn cooldown_profile(&self, class: ProviderClass) -> CooldownProfile {
        self.connection_cooldown.get(class).to_profile()
    }

    /// The lockout config.
    pub fn lockout_config(&self) -> LockoutConfig {
        LockoutConfig::from_settings(&self.model_lockout)
    }

    /// The M2 config.
    pub fn provider_cooldown_config(&self) -> ProviderCooldownConfig {
        ProviderCooldownConfig::from_settings(&self.provider_cooldown)
    }

    /// The watchdog config.
    pub fn watchdog_config(&self) -> WatchdogConfig {
        WatchdogConfig::from_settings(&self.throughput_watchdog)
    }
}
