//! Resilience settings: one serde tree with SPEC's defaults, validation that reports every
//! error at once naming the field, `FERROUTE_…` environment overrides, and conversion into the
//! typed configs the state machines take.

mod convert;
mod env;
#[cfg(test)]
mod tests;
mod validate;

pub use env::env_names;

use crate::types::{ProviderClass, Reason, Scope};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use std::fmt;

/// One problem with one setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Dotted path (`resilience.model_lockout.max_cooldown_ms`) or environment variable name.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Every problem found, or a parse failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The TOML did not parse (syntax, wrong type, unknown key); the message names the key.
    #[error("invalid settings: {0}")]
    Parse(String),
    /// Values parsed but are out of range or inconsistent.
    #[error("invalid settings:\n{}", .0.iter().map(|e| format!("  - {e}")).collect::<Vec<_>>().join("\n"))]
    Invalid(Vec<FieldError>),
}

/// Values that differ by provider class: one table each for `api_key`, `oauth` and `local`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PerClass<T> {
    /// API-key providers.
    pub api_key: T,
    /// OAuth providers.
    pub oauth: T,
    /// Local providers.
    pub local: T,
}

impl<T> PerClass<T> {
    /// The value for one class.
    pub fn get(&self, class: ProviderClass) -> &T {
        match class {
            ProviderClass::ApiKey => &self.api_key,
            ProviderClass::OAuth => &self.oauth,
            ProviderClass::Local => &self.local,
        }
    }
}

/// A settings table whose defaults depend on the provider class, and whose partial tables are
/// filled from that class's defaults (not another class's).
pub trait ClassDefaults: Sized {
    /// The table with every field optional.
    type Patch: DeserializeOwned;
    /// The defaults of one class.
    fn for_class(class: ProviderClass) -> Self;
    /// Overlays the fields present in `patch`.
    fn apply(&mut self, patch: Self::Patch);
}

impl<T: ClassDefaults> Default for PerClass<T> {
    fn default() -> Self {
        PerClass {
            api_key: T::for_class(ProviderClass::ApiKey),
            oauth: T::for_class(ProviderClass::OAuth),
            local: T::for_class(ProviderClass::Local),
        }
    }
}

/// The three optional class tables as they appear in TOML.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, bound = "")]
struct RawPerClass<P: DeserializeOwned> {
    #[serde(default = "none")]
    api_key: Option<P>,
    #[serde(default = "none")]
    oauth: Option<P>,
    #[serde(default = "none")]
    local: Option<P>,
}

fn none<P>() -> Option<P> {
    None
}

impl<T: ClassDefaults> PerClass<T> {
    fn from_patches(api_key: Option<T::Patch>, oauth: Option<T::Patch>, local: Option<T::Patch>) -> Self {
        let mut out = PerClass::<T>::default();
        if let Some(p) = api_key {
            out.api_key.apply(p);
        }
        if let Some(p) = oauth {
            out.oauth.apply(p);
        }
        if let Some(p) = local {
            out.local.apply(p);
        }
        out
    }
}

impl<'de, T: ClassDefaults> Deserialize<'de> for PerClass<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = RawPerClass::<T::Patch>::deserialize(d)?;
        Ok(PerClass::from_patches(raw.api_key, raw.oauth, raw.local))
    }
}

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
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SessionAffinitySettings {
    /// Pin lifetime (0 = off; ≤ 30 days).
    pub ttl_ms: i64,
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

impl ResilienceSettings {
    /// Parses a `[resilience]` table body (pure; no environment, no files) and validates it.
    pub fn from_toml_str(s: &str) -> Result<Self, ConfigError> {
        let parsed: ResilienceSettings = toml::from_str(s).map_err(|e| ConfigError::Parse(e.to_string()))?;
        parsed.validate()?;
        Ok(parsed)
    }

    /// Checks every field; reports every problem at once, each naming its field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let errors = validate::check(self, "resilience");
        if errors.is_empty() { Ok(()) } else { Err(ConfigError::Invalid(errors)) }
    }

    /// Appends every problem to `errors`, with field paths under `prefix`.
    pub fn validate_into(&self, prefix: &str, errors: &mut Vec<FieldError>) {
        errors.extend(validate::check(self, prefix));
    }

    /// Overlays `FERROUTE_…` variables from `vars` (a shell passes `std::env::vars()`).
    /// Environment values are defaults that a config file or stored settings then override,
    /// so call this on the defaults first. Unknown `FERROUTE_` names are ignored (they may
    /// belong to the shell); bad values are errors naming the variable.
    pub fn with_env<I, K, V>(self, vars: I) -> Result<Self, ConfigError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        env::apply(self, vars)
    }
}

impl ResilienceSettings {
    /// Overlays a parsed `[resilience]` table over these settings (for example the defaults
    /// after [`ResilienceSettings::with_env`]), then validates. Unknown keys are errors.
    pub fn overlay_toml(self, table: toml::Value) -> Result<Self, ConfigError> {
        let mut tree = serde_json::to_value(&self).map_err(|e| ConfigError::Parse(e.to_string()))?;
        let patch = serde_json::to_value(&table).map_err(|e| ConfigError::Parse(e.to_string()))?;
        // Check the patch alone first so that unknown keys and wrong types are named as the
        // user wrote them.
        let _: ResilienceSettings = table.try_into().map_err(|e: toml::de::Error| ConfigError::Parse(e.to_string()))?;
        env::merge(&mut tree, patch);
        let out: ResilienceSettings = serde_json::from_value(tree).map_err(|e| ConfigError::Parse(e.to_string()))?;
        out.validate()?;
        Ok(out)
    }
}
