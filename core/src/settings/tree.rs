//! The `[resilience]` table: every section in one serde tree.

use super::failures::{BreakerSettings, ConnectionCooldownSettings, ModelLockoutSettings, ProviderCooldownSettings};
use super::per_class::PerClass;
use super::traffic::{
    ComboCooldownWaitSettings, OperatorErrorRule, QuotaShareSettings, RequestQueueSettings, RoutingSettings,
    SessionAffinitySettings, WaitForCooldownSettings, WatchdogSettings,
};
use serde::{Deserialize, Serialize};

/// The `[resilience]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct ResilienceSettings {
    /// M1, per class.
    pub breaker: PerClass<BreakerSettings>,
    /// M2.
    pub provider_cooldown: ProviderCooldownSettings,
    /// M3, per class.
    pub connection_cooldown: PerClass<ConnectionCooldownSettings>,
    /// M6.
    pub model_lockout: ModelLockoutSettings,
    /// M9.
    pub request_queue: RequestQueueSettings,
    /// M7.
    pub quota_share: QuotaShareSettings,
    /// M8.
    pub combo_cooldown_wait: ComboCooldownWaitSettings,
    /// The retry budget (M15).
    pub routing: RoutingSettings,
    /// Direct-request cooldown wait.
    pub wait_for_cooldown: WaitForCooldownSettings,
    /// M10.
    pub throughput_watchdog: WatchdogSettings,
    /// M5.
    pub session_affinity: SessionAffinitySettings,
    /// M12 operator rules (at most 50).
    pub error_rules: Vec<OperatorErrorRule>,
}
