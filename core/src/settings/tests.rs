//! Settings tests: defaults, per-class partial tables, validation naming fields, env overrides.

use super::*;
use crate::types::ProviderClass;

fn invalid_fields(r: Result<ResilienceSettings, ConfigError>) -> Vec<String> {
    match r {
        Err(ConfigError::Invalid(errs)) => errs.into_iter().map(|e| e.field).collect(),
        other => panic!("expected validation errors, got {other:?}"),
    }
}

#[test]
fn defaults_are_spec_defaults_and_valid() {
    let s = ResilienceSettings::default();
    s.validate().expect("defaults are valid");
    assert_eq!(
        (
            s.breaker.api_key.failure_threshold,
            s.breaker.api_key.degradation_threshold,
            s.breaker.api_key.reset_timeout_ms
        ),
        (12, 7, 30_000)
    );
    assert_eq!(
        (s.breaker.oauth.failure_threshold, s.breaker.oauth.degradation_threshold, s.breaker.oauth.reset_timeout_ms),
        (8, 5, 60_000)
    );
    assert_eq!((s.breaker.local.failure_threshold, s.breaker.local.reset_timeout_ms), (2, 15_000));
    assert!(!s.provider_cooldown.enabled);
    assert_eq!(
        (
            s.provider_cooldown.oauth.failure_threshold,
            s.provider_cooldown.oauth.failure_window_ms,
            s.provider_cooldown.oauth.cooldown_ms
        ),
        (10, 900_000, 300_000)
    );
    assert_eq!(
        (
            s.provider_cooldown.api_key.failure_threshold,
            s.provider_cooldown.api_key.failure_window_ms,
            s.provider_cooldown.api_key.cooldown_ms
        ),
        (15, 1_800_000, 600_000)
    );
    assert_eq!(
        (s.connection_cooldown.oauth.base_cooldown_ms, s.connection_cooldown.api_key.base_cooldown_ms),
        (5_000, 3_000)
    );
    assert!(!s.model_lockout.enabled);
    assert_eq!(s.model_lockout.error_codes, vec![403, 404, 429, 502, 503, 504]);
    assert_eq!(
        (s.request_queue.max_wait_ms, s.request_queue.execution_max_wait_ms, s.request_queue.max_queue_depth),
        (30_000, 600_000, 0)
    );
    assert_eq!(
        (
            s.combo_cooldown_wait.enabled,
            s.combo_cooldown_wait.max_wait_ms,
            s.combo_cooldown_wait.max_attempts,
            s.combo_cooldown_wait.budget_ms
        ),
        (true, 90_000, 5, 300_000)
    );
    assert!(!s.wait_for_cooldown.enabled);
    let w = &s.throughput_watchdog;
    assert_eq!(
        (w.enabled, w.warmup_ms, w.window_ms, w.min_bytes_per_second, w.min_bytes),
        (false, 30_000, 30_000, 4, 1)
    );
    assert_eq!((s.session_affinity.ttl_ms, s.session_affinity.max_pins), (0, 100_000));
}

#[test]
fn spec_example_parses() {
    let s = ResilienceSettings::from_toml_str(
        r#"
[breaker.api_key]
failure_threshold = 12
degradation_threshold = 7
reset_timeout_ms = 30000
max_backoff_multiplier = 4
backoff_escalation_count = 3

[provider_cooldown]
enabled = false
[provider_cooldown.api_key]
failure_threshold = 15
failure_window_ms = 1800000
cooldown_ms = 600000

[model_lockout]
enabled = false
error_codes = [403, 404, 429, 502, 503, 504]

[[error_rules]]
provider = "my-gateway"
statuses = [403]
text_markers = ["quota exceeded"]
reason = "quota_exhausted"
scope = "connection"
"#,
    )
    .expect("parses");
    assert_eq!(s.error_rules.len(), 1);
}

#[test]
fn a_partial_class_table_keeps_that_class_defaults() {
    let s = ResilienceSettings::from_toml_str("[breaker.oauth]\nfailure_threshold = 9\n").expect("parses");
    assert_eq!(s.breaker.oauth.failure_threshold, 9);
    assert_eq!(s.breaker.oauth.reset_timeout_ms, 60_000, "oauth default, not api_key's");
    assert_eq!(s.breaker.api_key, BreakerSettings::for_class(ProviderClass::ApiKey));
    let s = ResilienceSettings::from_toml_str("[provider_cooldown.oauth]\ncooldown_ms = 1000\n").expect("parses");
    assert_eq!((s.provider_cooldown.oauth.failure_threshold, s.provider_cooldown.oauth.cooldown_ms), (10, 1000));
}

#[test]
fn unknown_keys_are_named() {
    for (toml, key) in [
        ("[breaker.api_key]\nfailure_treshold = 3\n", "failure_treshold"),
        ("[model_lockout]\nenable = true\n", "enable"),
        ("[request_queue]\nmax_wait = 3\n", "max_wait"),
        ("[breaker.gpu]\nfailure_threshold = 3\n", "gpu"),
        ("[provider_cooldown]\nwindow = 3\n", "window"),
        ("bogus = 1\n", "bogus"),
    ] {
        match ResilienceSettings::from_toml_str(toml) {
            Err(ConfigError::Parse(msg)) => assert!(msg.contains(key), "{key} not named in: {msg}"),
            other => panic!("{toml}: expected a parse error, got {other:?}"),
        }
    }
}

#[test]
fn bad_values_name_every_field_at_once() {
    let fields = invalid_fields(ResilienceSettings::from_toml_str(
        r#"
[breaker.api_key]
failure_threshold = -1
reset_timeout_ms = 10
[model_lockout]
base_cooldown_ms = 600000
max_cooldown_ms = 300000
error_codes = [700]
[request_queue]
max_wait_ms = -5
max_queue_depth = 100001
[throughput_watchdog]
window_ms = 10
"#,
    ));
    for f in [
        "resilience.breaker.api_key.failure_threshold",
        "resilience.breaker.api_key.reset_timeout_ms",
        "resilience.model_lockout.max_cooldown_ms",
        "resilience.model_lockout.error_codes[0]",
        "resilience.request_queue.max_wait_ms",
        "resilience.request_queue.max_queue_depth",
        "resilience.throughput_watchdog.window_ms",
    ] {
        assert!(fields.iter().any(|x| x == f), "{f} missing from {fields:?}");
    }
}

#[test]
fn negative_is_called_negative_and_max_below_base_is_explained() {
    let err = ResilienceSettings::from_toml_str("[request_queue]\nmax_wait_ms = -5\n[connection_cooldown.api_key]\nbase_cooldown_ms = 5000\nmax_cooldown_ms = 1000\n").expect_err("invalid");
    let text = err.to_string();
    assert!(text.contains("resilience.request_queue.max_wait_ms: must not be negative"), "{text}");
    assert!(
        text.contains("resilience.connection_cooldown.api_key.max_cooldown_ms: 1000 is below base_cooldown_ms (5000)"),
        "{text}"
    );
}

#[test]
fn a_pin_cap_outside_one_to_a_million_is_named() {
    let fields = invalid_fields(ResilienceSettings::from_toml_str("[session_affinity]\nmax_pins = 0\n"));
    assert_eq!(fields, vec!["resilience.session_affinity.max_pins"]);
    let fields = invalid_fields(ResilienceSettings::from_toml_str("[session_affinity]\nmax_pins = 1000001\n"));
    assert_eq!(fields, vec!["resilience.session_affinity.max_pins"]);
    let s = ResilienceSettings::from_toml_str("[session_affinity]\nttl_ms = 1000\nmax_pins = 3\n").expect("valid");
    assert_eq!(s.session_affinity.max_pins, 3);
}

#[test]
fn degradation_above_failure_threshold_is_rejected() {
    let fields = invalid_fields(ResilienceSettings::from_toml_str(
        "[breaker.oauth]\nfailure_threshold = 3\ndegradation_threshold = 4\n",
    ));
    assert_eq!(fields, vec!["resilience.breaker.oauth.degradation_threshold"]);
}

#[test]
fn wrong_types_are_parse_errors_naming_the_key() {
    let err = ResilienceSettings::from_toml_str("[model_lockout]\nenabled = \"yes please\"\n").expect_err("invalid");
    assert!(err.to_string().contains("enabled"), "{err}");
}

#[test]
fn env_overrides_by_path_and_alias() {
    let vars = [
        ("FERROUTE_RATE_LIMIT_MAX_WAIT_MS", "45000"),
        ("FERROUTE_BREAKER_OAUTH_FAILURE_THRESHOLD", "9"),
        ("FERROUTE_PROVIDER_BREAKER_API_KEY_COOLDOWN_MS", "1234"),
        ("FERROUTE_PROVIDER_COOLDOWN_ENABLED", "on"),
        ("FERROUTE_MODEL_LOCKOUT_ERROR_CODES", "429, 503"),
        ("FERROUTE_ADMIN_KEY", "not a setting"),
        ("PATH", "/bin"),
    ];
    let s = ResilienceSettings::default().with_env(vars).expect("valid");
    assert_eq!(s.request_queue.max_wait_ms, 45_000);
    assert_eq!(s.breaker.oauth.failure_threshold, 9);
    assert_eq!(s.provider_cooldown.api_key.cooldown_ms, 1234);
    assert!(s.provider_cooldown.enabled);
    assert_eq!(s.model_lockout.error_codes, vec![429, 503]);
}

#[test]
fn env_errors_name_the_variable() {
    match ResilienceSettings::default().with_env([("FERROUTE_REQUEST_QUEUE_MAX_WAIT_MS", "soon")]) {
        Err(ConfigError::Invalid(e)) => assert_eq!(e[0].field, "FERROUTE_REQUEST_QUEUE_MAX_WAIT_MS"),
        other => panic!("{other:?}"),
    }
    let err =
        ResilienceSettings::default().with_env([("FERROUTE_RATE_LIMIT_MAX_WAIT_MS", "-1")]).expect_err("negative");
    assert!(err.to_string().contains("FERROUTE_RATE_LIMIT_MAX_WAIT_MS"), "{err}");
}

#[test]
fn config_file_overrides_env_defaults() {
    let base = ResilienceSettings::default()
        .with_env([("FERROUTE_RATE_LIMIT_MAX_WAIT_MS", "45000"), ("FERROUTE_RATE_LIMIT_MAX_QUEUE_DEPTH", "7")])
        .expect("valid");
    let table: toml::Value = toml::from_str("[request_queue]\nmax_wait_ms = 1000\n").expect("toml");
    let s = base.overlay_toml(table).expect("valid");
    assert_eq!(s.request_queue.max_wait_ms, 1000, "the file wins over env");
    assert_eq!(s.request_queue.max_queue_depth, 7, "env still gives what the file leaves out");
}

#[test]
fn every_env_name_is_unique_and_prefixed() {
    let names = env_names();
    assert!(names.len() > 40);
    assert!(names.iter().all(|(n, _)| n.starts_with("FERROUTE_")));
    assert!(names.iter().any(|(n, p)| n == "FERROUTE_RATE_LIMIT_MAX_WAIT_MS" && p == "request_queue.max_wait_ms"));
}
