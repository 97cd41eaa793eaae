//! `FERROUTE_…` environment overrides.
//!
//! Every leaf of the settings tree has a name: `FERROUTE_` followed by its path upper-cased
//! with `_` between parts (`request_queue.max_wait_ms` → `FERROUTE_REQUEST_QUEUE_MAX_WAIT_MS`).
//! A few aliases keep the names operators of the reference gateway know
//! (`FERROUTE_RATE_LIMIT_MAX_WAIT_MS`, `FERROUTE_PROVIDER_BREAKER_API_KEY_COOLDOWN_MS`, …).

use super::error::{ConfigError, FieldError};
use super::tree::ResilienceSettings;
use serde_json::Value;
use std::collections::BTreeMap;

const PREFIX: &str = "FERROUTE_";

/// Alias → canonical path.
const ALIASES: &[(&str, &str)] = &[
    ("RATE_LIMIT_MAX_WAIT_MS", "request_queue.max_wait_ms"),
    ("RATE_LIMIT_EXECUTION_MAX_WAIT_MS", "request_queue.execution_max_wait_ms"),
    ("RATE_LIMIT_MAX_QUEUE_DEPTH", "request_queue.max_queue_depth"),
    ("PROVIDER_COOLDOWN_MIN_MS", "provider_cooldown.min_retry_cooldown_ms"),
    ("PROVIDER_COOLDOWN_MAX_MS", "provider_cooldown.max_retry_cooldown_ms"),
    ("STREAM_THROUGHPUT_WATCHDOG_ENABLED", "throughput_watchdog.enabled"),
    ("STREAM_THROUGHPUT_WATCHDOG_WARMUP_MS", "throughput_watchdog.warmup_ms"),
    ("STREAM_THROUGHPUT_WATCHDOG_WINDOW_MS", "throughput_watchdog.window_ms"),
    ("STREAM_THROUGHPUT_WATCHDOG_MIN_BYTES_PER_SECOND", "throughput_watchdog.min_bytes_per_second"),
    ("STREAM_THROUGHPUT_WATCHDOG_MIN_USEFUL_BYTES", "throughput_watchdog.min_bytes"),
];

/// Every environment variable name understood, with the settings path it sets, sorted.
pub fn env_names() -> Vec<(String, String)> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    let tree = serde_json::to_value(ResilienceSettings::default()).unwrap_or(Value::Null);
    let mut leaves = Vec::new();
    collect_leaves(&tree, String::new(), &mut leaves);
    for path in leaves {
        out.insert(format!("{PREFIX}{}", path.replace('.', "_").to_uppercase()), path.clone());
        if let Some(rest) = path.strip_prefix("provider_cooldown.") {
            // SPEC M2's form: FERROUTE_PROVIDER_BREAKER_{OAUTH,API_KEY}_{FAILURE_THRESHOLD,…}.
            if rest.contains('.') {
                out.insert(format!("{PREFIX}PROVIDER_BREAKER_{}", rest.replace('.', "_").to_uppercase()), path.clone());
            }
        }
    }
    for (alias, path) in ALIASES {
        out.insert(format!("{PREFIX}{alias}"), (*path).to_owned());
    }
    out.into_iter().collect()
}

fn collect_leaves(v: &Value, path: String, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                collect_leaves(child, p, out);
            }
        }
        // Arrays of tables (error_rules) have no environment form; arrays of scalars do.
        Value::Array(items) if items.iter().any(Value::is_object) => {}
        Value::Array(_) if path == "error_rules" => {}
        _ => out.push(path),
    }
}

pub(super) fn apply<I, K, V>(base: ResilienceSettings, vars: I) -> Result<ResilienceSettings, ConfigError>
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<str>,
    V: AsRef<str>,
{
    let names: BTreeMap<String, String> = env_names().into_iter().collect();
    let mut tree = serde_json::to_value(&base).map_err(|e| ConfigError::Parse(e.to_string()))?;
    let mut errors = Vec::new();
    let mut set_by: BTreeMap<String, String> = BTreeMap::new();
    // Sorted so that the outcome never depends on the environment's iteration order.
    let mut given: Vec<(String, String)> = vars
        .into_iter()
        .filter(|(k, _)| k.as_ref().starts_with(PREFIX))
        .map(|(k, v)| (k.as_ref().to_owned(), v.as_ref().to_owned()))
        .collect();
    given.sort();
    for (name, raw) in given {
        let Some(path) = names.get(&name) else { continue };
        let Some(slot) = pointer_mut(&mut tree, path) else { continue };
        match parse_like(slot, raw.trim()) {
            Ok(v) => {
                *slot = v;
                set_by.insert(path.clone(), name);
            }
            Err(msg) => errors.push(FieldError { field: name, message: msg }),
        }
    }
    if !errors.is_empty() {
        return Err(ConfigError::Invalid(errors));
    }
    let out: ResilienceSettings = serde_json::from_value(tree).map_err(|e| ConfigError::Parse(e.to_string()))?;
    let mut invalid = super::validate::check(&out, "resilience");
    for e in &mut invalid {
        if let Some(var) = e.field.strip_prefix("resilience.").and_then(|p| set_by.get(p)) {
            e.message.push_str(&format!(" (set by {var})"));
        }
    }
    if invalid.is_empty() { Ok(out) } else { Err(ConfigError::Invalid(invalid)) }
}

fn pointer_mut<'a>(tree: &'a mut Value, path: &str) -> Option<&'a mut Value> {
    let pointer = format!("/{}", path.replace('.', "/"));
    tree.pointer_mut(&pointer)
}

/// Parses `raw` as the same kind of value as `current`.
fn parse_like(current: &Value, raw: &str) -> Result<Value, String> {
    match current {
        Value::Bool(_) => match raw.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Ok(Value::Bool(true)),
            "false" | "0" | "no" | "off" => Ok(Value::Bool(false)),
            _ => Err(format!("expected true or false, got {raw:?}")),
        },
        Value::Number(_) => {
            raw.parse::<i64>().map(Value::from).map_err(|_| format!("expected an integer, got {raw:?}"))
        }
        Value::Array(_) => raw
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(|s| {
                s.trim()
                    .parse::<i64>()
                    .map(Value::from)
                    .map_err(|_| format!("expected comma-separated integers, got {raw:?}"))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        _ => Ok(Value::String(raw.to_owned())),
    }
}

/// Deep-merges `patch` over `base` (tables merge, everything else replaces).
pub(super) fn merge(base: &mut Value, patch: Value) {
    match (base, patch) {
        (Value::Object(b), Value::Object(p)) => {
            for (k, v) in p {
                match b.get_mut(&k) {
                    Some(slot) => merge(slot, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (slot, v) => *slot = v,
    }
}
