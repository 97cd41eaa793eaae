//! How requests are admitted, spread, retried and watched: the request queue (M9), quota
//! share (M7), the combo cooldown wait (M8), the retry budget, the direct-request cooldown
//! wait, the stream watchdog (M10), session affinity (M5), and operators' error rules (M12).

use crate::types::{Reason, Scope};
use serde::{Deserialize, Serialize};

/// M9: request queue admission, per provider + connection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RequestQueueSettings {
    /// Budget for waiting in the queue (1 ms – 24 h).
    pub max_wait_ms: i64,
    /// Budget from dispatch to the end of the attempt (1 ms – 24 h).
    pub execution_max_wait_ms: i64,
    /// Waiting requests beyond which new ones are rejected (0 = unbounded; ≤ 100 000).
    pub max_queue_depth: i64,
    /// Requests executing at once (0 = unlimited; ≤ 100 000).
    pub concurrent_requests: i64,
}

impl Default for RequestQueueSettings {
    fn default() -> Self {
        // 30 s queue wait and a 10 min execution budget, as SPEC M9.
        RequestQueueSettings {
            max_wait_ms: 30_000,
            execution_max_wait_ms: 600_000,
            max_queue_depth: 0,
            concurrent_requests: 0,
        }
    }
}

/// M7: the `max_concurrent` semaphore per connection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QuotaShareSettings {
    /// Kill switch; on by default.
    pub enabled: bool,
    /// How long a request waits for a slot before going without one (fail-open; 1 ms – 24 h).
    pub queue_timeout_ms: i64,
    /// Waiters per connection before new ones go without a slot (0–100).
    pub max_queue_size: i64,
}

impl Default for QuotaShareSettings {
    fn default() -> Self {
        QuotaShareSettings { enabled: true, queue_timeout_ms: 30_000, max_queue_size: 20 }
    }
}

/// M8: cooldown-aware combo retry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ComboCooldownWaitSettings {
    /// On by default.
    pub enabled: bool,
    /// Longest single wait (0 – 300 000).
    pub max_wait_ms: i64,
    /// Waits per request (0–10).
    pub max_attempts: i64,
    /// Total waiting per request (max_wait_ms – 300 000).
    pub budget_ms: i64,
}

impl Default for ComboCooldownWaitSettings {
    fn default() -> Self {
        ComboCooldownWaitSettings { enabled: true, max_wait_ms: 90_000, max_attempts: 5, budget_ms: 300_000 }
    }
}

/// Routing limits of one request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RoutingSettings {
    /// Upstream attempts one request may make in all, across targets, connections and
    /// cooldown waits (1–100; 30 as the reference gateway's `MAX_GLOBAL_ATTEMPTS`): a combo
    /// of many targets over many keys cannot turn one client request into a storm.
    pub max_attempts: i64,
}

impl Default for RoutingSettings {
    fn default() -> Self {
        RoutingSettings { max_attempts: 30 }
    }
}

/// Cooldown wait for direct (non-combo) requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WaitForCooldownSettings {
    /// Off by default: a direct request fails fast with Retry-After instead of holding.
    pub enabled: bool,
    /// Waits per request (0–10).
    pub max_retries: i64,
    /// Longest single wait (0 – 300 000).
    pub max_retry_wait_ms: i64,
    /// Total waiting per request (max_retry_wait_ms – 300 000).
    pub budget_ms: i64,
}

impl Default for WaitForCooldownSettings {
    fn default() -> Self {
        WaitForCooldownSettings { enabled: false, max_retries: 5, max_retry_wait_ms: 90_000, budget_ms: 300_000 }
    }
}

/// M10: slow-stream throughput watchdog.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WatchdogSettings {
    /// Off by default.
    pub enabled: bool,
    /// Grace period before measuring (0 – 600 000).
    pub warmup_ms: i64,
    /// Sliding window (1 000 – 600 000).
    pub window_ms: i64,
    /// Minimum useful output rate (1 – 1 000 000).
    pub min_bytes_per_second: i64,
    /// Minimum window output for the rate to be measurable (1 – 1 000 000).
    pub min_bytes: i64,
}

impl Default for WatchdogSettings {
    fn default() -> Self {
        WatchdogSettings { enabled: false, warmup_ms: 30_000, window_ms: 30_000, min_bytes_per_second: 4, min_bytes: 1 }
    }
}

/// M5: session affinity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SessionAffinitySettings {
    /// Pin lifetime (0 = off; ≤ 30 days).
    pub ttl_ms: i64,
    /// Most pins kept (1 – 1 000 000); at the cap, lapsed pins go first, then the
    /// soonest-ending.
    pub max_pins: i64,
}

impl Default for SessionAffinitySettings {
    fn default() -> Self {
        SessionAffinitySettings { ttl_ms: 0, max_pins: crate::session::affinity::MAX_PINS as i64 }
    }
}

/// M12: an operator-declared provider error rule (bypasses both allowlists).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperatorErrorRule {
    /// The provider id (or profile) it applies to.
    pub provider: String,
    /// Upstream statuses it applies to.
    pub statuses: Vec<u16>,
    /// Case-insensitive substrings of the body; empty matches on status alone.
    #[serde(default)]
    pub text_markers: Vec<String>,
    /// The reason assigned (default `quota_exhausted`).
    #[serde(default = "default_rule_reason")]
    pub reason: Reason,
    /// What the failure locks.
    pub scope: Scope,
    /// A fixed cooldown; otherwise the ladder decides.
    #[serde(default)]
    pub cooldown_ms: Option<u64>,
}

fn default_rule_reason() -> Reason {
    Reason::QuotaExhausted
}
