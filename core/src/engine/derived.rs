//! Configs derived from the settings once, not per decision.

use crate::breaker::BreakerConfig;
use crate::classify::CooldownProfile;
use crate::lockout::LockoutConfig;
use crate::provider_cooldown::ProviderCooldownConfig;
use crate::settings::ResilienceSettings;
use crate::types::ProviderClass;

/// The configs of each provider class and of the lockouts and provider cooldowns.
#[derive(Debug, Clone)]
pub(super) struct Derived {
    pub(super) breaker: [BreakerConfig; 3],
    pub(super) profile: [CooldownProfile; 3],
    pub(super) lockout: LockoutConfig,
    pub(super) provider_cooldown: ProviderCooldownConfig,
}

impl Derived {
    pub(super) fn new(s: &ResilienceSettings) -> Self {
        let classes = [ProviderClass::ApiKey, ProviderClass::OAuth, ProviderClass::Local];
        Derived {
            breaker: classes.map(|c| s.breaker_config(c)),
            profile: classes.map(|c| s.cooldown_profile(c)),
            lockout: s.lockout_config(),
            provider_cooldown: s.provider_cooldown_config(),
        }
    }

    fn index(class: ProviderClass) -> usize {
        match class {
            ProviderClass::ApiKey => 0,
            ProviderClass::OAuth => 1,
            ProviderClass::Local => 2,
        }
    }

    pub(super) fn breaker(&self, class: ProviderClass) -> &BreakerConfig {
        &self.breaker[Self::index(class)]
    }

    pub(super) fn profile(&self, class: ProviderClass) -> &CooldownProfile {
        &self.profile[Self::index(class)]
    }
}
