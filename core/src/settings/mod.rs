//! Resilience settings: one serde tree with SPEC's defaults, validation that reports every
//! error at once naming the field, `FERROUTE_…` environment overrides, and conversion into the
//! typed configs the state machines take.
//!
//! The tree (`tree.rs`) is made of sections (`failures.rs`, `traffic.rs`), some per provider class
//! (`per_class.rs`); `validate.rs` checks it, `env.rs` overlays `FERROUTE_…` variables, and
//! `convert.rs` turns it into the machines' configs. Parsing, validating and overlaying are
//! here, above them all.

mod convert;
mod env;
mod error;
mod failures;
mod per_class;
#[cfg(test)]
mod tests;
mod traffic;
mod tree;
mod validate;

pub use env::env_names;
pub use error::{ConfigError, FieldError};
pub use failures::{
    BreakerSettings, ConnectionCooldownSettings, ModelLockoutSettings, ProviderCooldownSettings, WindowSettings,
};
pub use per_class::{ClassDefaults, PerClass};
pub use traffic::{
    ComboCooldownWaitSettings, OperatorErrorRule, QuotaShareSettings, RequestQueueSettings, RoutingSettings,
    SessionAffinitySettings, WaitForCooldownSettings, WatchdogSettings,
};
pub use tree::ResilienceSettings;

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

    /// [`ResilienceSettings::overlay_toml`] for a JSON tree (an operator's runtime overrides):
    /// the same checks, the same merge.
    pub fn overlay_json(self, patch: &serde_json::Value) -> Result<Self, ConfigError> {
        let mut tree = serde_json::to_value(&self).map_err(|e| ConfigError::Parse(e.to_string()))?;
        let _: ResilienceSettings =
            serde_json::from_value(patch.clone()).map_err(|e| ConfigError::Parse(e.to_string()))?;
        env::merge(&mut tree, patch.clone());
        let out: ResilienceSettings = serde_json::from_value(tree).map_err(|e| ConfigError::Parse(e.to_string()))?;
        out.validate()?;
        Ok(out)
    }
}
