//! The operator's runtime overrides of `[resilience]` (see [`crate::ops::settings`]): what is
//! stored, and how it goes over the file's settings at start, at each reload and at each change.

use crate::config::Config;
use crate::state::gateway::Gateway;
use ferroute_core::settings::{ConfigError, ResilienceSettings};
use hyper_util::client::legacy::connect::Connect;
use serde_json::{Map, Value, json};

/// The store key of the overrides.
pub const OVERRIDES_SETTING: &str = "resilience.overrides";

/// The overrides and what they apply over.
#[derive(Debug)]
pub struct Overrides {
    /// A partial `[resilience]` tree.
    pub(super) values: Value,
    /// The file's settings: what the overrides apply over, and what `DELETE` returns to.
    pub(super) file: ResilienceSettings,
    /// Why the stored overrides do not apply over the file's settings (they stay stored).
    pub(super) error: Option<String>,
}

impl Overrides {
    /// The overrides stored for `gw` (none without a store, or when none were stored).
    pub(super) fn load<C: Connect + Clone + Send + Sync + 'static>(gw: &Gateway<C>) -> Overrides {
        let stored = gw.store.as_ref().and_then(|s| match s.setting(OVERRIDES_SETTING) {
            Ok(v) => v,
            Err(e) => {
                tracing::error!(error = %e, "could not read the stored resilience overrides");
                None
            }
        });
        let values = match stored.map(|t| serde_json::from_str::<Value>(&t)) {
            Some(Ok(v @ Value::Object(_))) => v,
            Some(_) => {
                tracing::error!("the stored resilience overrides are not a JSON object; ignored");
                Value::Object(Map::new())
            }
            None => Value::Object(Map::new()),
        };
        Overrides { values, file: gw.config.resilience.clone(), error: None }
    }

    /// Takes `config`'s settings as the file's and puts the overrides over them; returns whether
    /// anything changed. Overrides that no longer apply (the file changed under them) are kept,
    /// logged and reported, and the file's settings run.
    pub(super) fn apply(&mut self, config: &mut Config) -> bool {
        self.file = config.resilience.clone();
        self.error = None;
        if self.is_empty() {
            return false;
        }
        match self.file.clone().overlay_json(&self.values) {
            Ok(effective) => {
                let changed = effective != config.resilience;
                config.resilience = effective;
                changed
            }
            Err(e) => {
                let why = problems(&e).iter().map(|p| format!("{}: {}", p["field"], p["message"])).collect::<Vec<_>>();
                tracing::error!(problems = ?why, "the stored resilience overrides do not apply over the config's settings; the config's settings run");
                self.error = Some(why.join("; "));
                false
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.values.as_object().is_none_or(Map::is_empty)
    }
}

/// Every problem of a settings error as `{field, message}`.
pub(super) fn problems(e: &ConfigError) -> Vec<Value> {
    match e {
        ConfigError::Parse(m) => vec![json!({"field": "resilience", "message": m})],
        ConfigError::Invalid(v) => v.iter().map(|p| json!({"field": p.field, "message": p.message})).collect(),
    }
}
