//! How failures are counted and held: the provider breaker (M1), the provider cooldown window
//! (M2), connection cooldowns (M3) and model lockouts (M6).

use super::per_class::{ClassDefaults, PerClass};
use crate::types::ProviderClass;
use serde::{Deserialize, Serialize};

/// Declares a per-class settings struct and its all-optional patch.
macro_rules! class_table {
    ($(#[$m:meta])* $name:ident / $patch:ident { $($(#[$fm:meta])* $field:ident : $ty:ty),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Serialize)]
        pub struct $name { $($(#[$fm])* pub $field: $ty),* }

        #[doc = concat!("[`", stringify!($name), "`] with every field optional.")]
        #[derive(Debug, Clone, Default, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct $patch { $(#[allow(missing_docs)] pub $field: Option<$ty>),* }

        impl $name {
            fn overlay(&mut self, p: $patch) {
                $(if let Some(v) = p.$field { self.$field = v; })*
            }
        }
    };
}

class_table! {
    /// M1 thresholds of one provider class.
    BreakerSettings / BreakerPatch {
        /// Failures that open the breaker (1–1000).
        failure_threshold: i64,
        /// Failures that mark it degraded (1–1000, at most `failure_threshold`).
        degradation_threshold: i64,
        /// Open time before a probe (1 s – 24 h).
        reset_timeout_ms: i64,
        /// Cap on the reset-timeout multiplier for repeated failed probes (1–1024).
        max_backoff_multiplier: i64,
        /// Failed-probe cycles before the reset timeout grows (0–100).
        backoff_escalation_count: i64,
        /// Probes allowed at once while half-open (1–100).
        half_open_requests: i64,
        /// Failures of one connection within this window count once (0 – 1 h).
        dedupe_window_ms: i64,
    }
}

impl ClassDefaults for BreakerSettings {
    type Patch = BreakerPatch;
    fn for_class(class: ProviderClass) -> Self {
        // SPEC M1: OAuth 5/8/60 s, API key 7/12/30 s, local derived/2/15 s. One probe at a
        // time keeps a recovering provider from being flooded; a 5 s dedupe stops one broken
        // key from tripping a whole provider by itself.
        let (degr, ft, reset, mult, esc) = match class {
            ProviderClass::OAuth => (5, 8, 60_000, 8, 2),
            ProviderClass::ApiKey => (7, 12, 30_000, 4, 3),
            ProviderClass::Local => (2, 2, 15_000, 16, 3),
        };
        BreakerSettings {
            failure_threshold: ft,
            degradation_threshold: degr,
            reset_timeout_ms: reset,
            max_backoff_multiplier: mult,
            backoff_escalation_count: esc,
            half_open_requests: 1,
            dedupe_window_ms: 5_000,
        }
    }
    fn apply(&mut self, patch: BreakerPatch) {
        self.overlay(patch)
    }
}

class_table! {
    /// M2 window gate of one provider class.
    WindowSettings / WindowPatch {
        /// Failures inside the window that start the cooldown (1 – 10 000).
        failure_threshold: i64,
        /// The window (1 s – 24 h).
        failure_window_ms: i64,
        /// How long the provider then cools (0 – 24 h).
        cooldown_ms: i64,
    }
}

impl ClassDefaults for WindowSettings {
    type Patch = WindowPatch;
    fn for_class(class: ProviderClass) -> Self {
        // SPEC M2: OAuth 10 in 15 min → 5 min; API key 15 in 30 min → 10 min; local 2 in
        // 5 min → 1 min (the reference's local profile).
        let (ft, win, cd) = match class {
            ProviderClass::OAuth => (10, 900_000, 300_000),
            ProviderClass::ApiKey => (15, 1_800_000, 600_000),
            ProviderClass::Local => (2, 300_000, 60_000),
        };
        WindowSettings { failure_threshold: ft, failure_window_ms: win, cooldown_ms: cd }
    }
    fn apply(&mut self, patch: WindowPatch) {
        self.overlay(patch)
    }
}

class_table! {
    /// M3 cooldown ladder of one provider class.
    ConnectionCooldownSettings / ConnectionCooldownPatch {
        /// First cooldown (0 – 24 h).
        base_cooldown_ms: i64,
        /// Ladder steps (`base × 2^level`, level capped here; 0–32).
        max_backoff_steps: i64,
        /// No ladder cooldown is ever longer than this (≥ base, ≤ 30 days).
        max_cooldown_ms: i64,
        /// Whether Retry-After and reset hints replace the ladder.
        use_upstream_retry_hints: bool,
        /// The longest wait a usage limit's stated end sets (a subscription window's reset, a
        /// spend limit's day), with hints or without (0 – 30 days).
        max_stated_reset_ms: i64,
    }
}

impl ClassDefaults for ConnectionCooldownSettings {
    type Patch = ConnectionCooldownPatch;
    fn for_class(class: ProviderClass) -> Self {
        // SPEC M3: OAuth 5 s, API key 3 s; API keys honour upstream hints, OAuth uses its own
        // ladder (8 steps); local 2 s with 3 steps. A 30 min cap as in the reference profile.
        let (base, steps, hints) = match class {
            ProviderClass::OAuth => (5_000, 8, false),
            ProviderClass::ApiKey => (3_000, 5, true),
            ProviderClass::Local => (2_000, 3, false),
        };
        ConnectionCooldownSettings {
            base_cooldown_ms: base,
            max_backoff_steps: steps,
            max_cooldown_ms: 1_800_000,
            use_upstream_retry_hints: hints,
            // A weekly window and a day of slack.
            max_stated_reset_ms: 8 * 86_400_000,
        }
    }
    fn apply(&mut self, patch: ConnectionCooldownPatch) {
        self.overlay(patch)
    }
}

/// M2: the optional provider cooldown tracker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "RawProviderCooldown")]
pub struct ProviderCooldownSettings {
    /// Off by default: the breaker already guards providers; this only saves re-walking a
    /// provider that just failed across combo requests.
    pub enabled: bool,
    /// Connection-level backoff floor (0 – 1 h).
    pub min_retry_cooldown_ms: i64,
    /// Connection-level backoff cap (≥ min, ≤ 24 h).
    pub max_retry_cooldown_ms: i64,
    /// API-key window gate.
    pub api_key: WindowSettings,
    /// OAuth window gate.
    pub oauth: WindowSettings,
    /// Local window gate.
    pub local: WindowSettings,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProviderCooldown {
    enabled: Option<bool>,
    min_retry_cooldown_ms: Option<i64>,
    max_retry_cooldown_ms: Option<i64>,
    api_key: Option<WindowPatch>,
    oauth: Option<WindowPatch>,
    local: Option<WindowPatch>,
}

impl From<RawProviderCooldown> for ProviderCooldownSettings {
    fn from(r: RawProviderCooldown) -> Self {
        let d = ProviderCooldownSettings::default();
        let classes = PerClass::<WindowSettings>::from_patches(r.api_key, r.oauth, r.local);
        ProviderCooldownSettings {
            enabled: r.enabled.unwrap_or(d.enabled),
            min_retry_cooldown_ms: r.min_retry_cooldown_ms.unwrap_or(d.min_retry_cooldown_ms),
            max_retry_cooldown_ms: r.max_retry_cooldown_ms.unwrap_or(d.max_retry_cooldown_ms),
            api_key: classes.api_key,
            oauth: classes.oauth,
            local: classes.local,
        }
    }
}

impl ProviderCooldownSettings {
    /// The window gate of one class.
    pub fn window(&self, class: ProviderClass) -> &WindowSettings {
        match class {
            ProviderClass::ApiKey => &self.api_key,
            ProviderClass::OAuth => &self.oauth,
            ProviderClass::Local => &self.local,
        }
    }
}

impl Default for ProviderCooldownSettings {
    fn default() -> Self {
        let classes = PerClass::<WindowSettings>::default();
        ProviderCooldownSettings {
            enabled: false,
            min_retry_cooldown_ms: 5_000,
            max_retry_cooldown_ms: 300_000,
            api_key: classes.api_key,
            oauth: classes.oauth,
            local: classes.local,
        }
    }
}

/// M6: model lockout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelLockoutSettings {
    /// Off by default: connection cooldowns cover most cases.
    pub enabled: bool,
    /// Statuses that lock a model (100–599, not empty).
    pub error_codes: Vec<i64>,
    /// First lock (1 s – 1 h).
    pub base_cooldown_ms: i64,
    /// Longest lock (≥ base, ≤ 24 h).
    pub max_cooldown_ms: i64,
    /// Escalation steps (0–20).
    pub max_backoff_steps: i64,
    /// Whether repeated failures double the lock.
    pub use_exponential_backoff: bool,
}

impl Default for ModelLockoutSettings {
    fn default() -> Self {
        ModelLockoutSettings {
            enabled: false,
            error_codes: vec![403, 404, 429, 502, 503, 504],
            base_cooldown_ms: 120_000,
            max_cooldown_ms: 1_800_000,
            max_backoff_steps: 10,
            use_exponential_backoff: true,
        }
    }
}
