//! Range and consistency checks; every problem is reported, each naming its field.

use super::error::FieldError;
use super::traffic::OperatorErrorRule;
use super::tree::ResilienceSettings;
use crate::types::ProviderClass;

const DAY_MS: i64 = 86_400_000;

struct Checker {
    prefix: String,
    errors: Vec<FieldError>,
}

impl Checker {
    fn err(&mut self, path: &str, message: String) {
        self.errors.push(FieldError { field: format!("{}.{path}", self.prefix), message });
    }

    fn range(&mut self, path: &str, v: i64, lo: i64, hi: i64) -> bool {
        if v < lo || v > hi {
            let what = if v < 0 { "must not be negative".to_owned() } else { "is out of range".to_string() };
            self.err(path, format!("{what}: {v} (allowed {lo}..={hi})"));
            false
        } else {
            true
        }
    }

    fn at_least(&mut self, path: &str, v: i64, other_path: &str, other: i64) {
        if v < other {
            self.err(path, format!("{v} is below {other_path} ({other})"));
        }
    }
}

pub(super) fn check(s: &ResilienceSettings, prefix: &str) -> Vec<FieldError> {
    let mut c = Checker { prefix: prefix.to_owned(), errors: Vec::new() };
    for class in ProviderClass::ALL {
        let b = s.breaker.get(class);
        let p = format!("breaker.{class}");
        let ft_ok = c.range(&format!("{p}.failure_threshold"), b.failure_threshold, 1, 1000);
        if c.range(&format!("{p}.degradation_threshold"), b.degradation_threshold, 1, 1000)
            && ft_ok
            && b.degradation_threshold > b.failure_threshold
        {
            c.err(
                &format!("{p}.degradation_threshold"),
                format!("{} exceeds failure_threshold ({})", b.degradation_threshold, b.failure_threshold),
            );
        }
        c.range(&format!("{p}.reset_timeout_ms"), b.reset_timeout_ms, 1_000, DAY_MS);
        c.range(&format!("{p}.max_backoff_multiplier"), b.max_backoff_multiplier, 1, 1024);
        c.range(&format!("{p}.backoff_escalation_count"), b.backoff_escalation_count, 0, 100);
        c.range(&format!("{p}.half_open_requests"), b.half_open_requests, 1, 100);
        c.range(&format!("{p}.dedupe_window_ms"), b.dedupe_window_ms, 0, 3_600_000);

        let w = s.provider_cooldown.window(class);
        let p = format!("provider_cooldown.{class}");
        c.range(&format!("{p}.failure_threshold"), w.failure_threshold, 1, 10_000);
        c.range(&format!("{p}.failure_window_ms"), w.failure_window_ms, 1_000, DAY_MS);
        c.range(&format!("{p}.cooldown_ms"), w.cooldown_ms, 0, DAY_MS);

        let cc = s.connection_cooldown.get(class);
        let p = format!("connection_cooldown.{class}");
        let base_ok = c.range(&format!("{p}.base_cooldown_ms"), cc.base_cooldown_ms, 0, DAY_MS);
        c.range(&format!("{p}.max_backoff_steps"), cc.max_backoff_steps, 0, 32);
        c.range(&format!("{p}.max_stated_reset_ms"), cc.max_stated_reset_ms, 0, 30 * DAY_MS);
        if c.range(&format!("{p}.max_cooldown_ms"), cc.max_cooldown_ms, 0, 30 * DAY_MS) && base_ok {
            c.at_least(&format!("{p}.max_cooldown_ms"), cc.max_cooldown_ms, "base_cooldown_ms", cc.base_cooldown_ms);
        }
    }

    let pc = &s.provider_cooldown;
    let min_ok = c.range("provider_cooldown.min_retry_cooldown_ms", pc.min_retry_cooldown_ms, 0, 3_600_000);
    if c.range("provider_cooldown.max_retry_cooldown_ms", pc.max_retry_cooldown_ms, 0, DAY_MS) && min_ok {
        c.at_least(
            "provider_cooldown.max_retry_cooldown_ms",
            pc.max_retry_cooldown_ms,
            "min_retry_cooldown_ms",
            pc.min_retry_cooldown_ms,
        );
    }

    let ml = &s.model_lockout;
    if ml.error_codes.is_empty() {
        c.err("model_lockout.error_codes", "must list at least one status".to_owned());
    }
    for (i, code) in ml.error_codes.iter().enumerate() {
        c.range(&format!("model_lockout.error_codes[{i}]"), *code, 100, 599);
    }
    let base_ok = c.range("model_lockout.base_cooldown_ms", ml.base_cooldown_ms, 1_000, 3_600_000);
    if c.range("model_lockout.max_cooldown_ms", ml.max_cooldown_ms, 1_000, DAY_MS) && base_ok {
        c.at_least("model_lockout.max_cooldown_ms", ml.max_cooldown_ms, "base_cooldown_ms", ml.base_cooldown_ms);
    }
    c.range("model_lockout.max_backoff_steps", ml.max_backoff_steps, 0, 20);

    let q = &s.request_queue;
    c.range("request_queue.max_wait_ms", q.max_wait_ms, 1, DAY_MS);
    c.range("request_queue.execution_max_wait_ms", q.execution_max_wait_ms, 1, DAY_MS);
    c.range("request_queue.max_queue_depth", q.max_queue_depth, 0, 100_000);
    c.range("request_queue.concurrent_requests", q.concurrent_requests, 0, 100_000);

    let qs = &s.quota_share;
    c.range("quota_share.queue_timeout_ms", qs.queue_timeout_ms, 1, DAY_MS);
    c.range("quota_share.max_queue_size", qs.max_queue_size, 0, 100);

    c.range("routing.max_attempts", s.routing.max_attempts, 1, 100);
    let cw = &s.combo_cooldown_wait;
    let wait_ok = c.range("combo_cooldown_wait.max_wait_ms", cw.max_wait_ms, 0, 300_000);
    c.range("combo_cooldown_wait.max_attempts", cw.max_attempts, 0, 10);
    if c.range("combo_cooldown_wait.budget_ms", cw.budget_ms, 0, 300_000) && wait_ok {
        c.at_least("combo_cooldown_wait.budget_ms", cw.budget_ms, "max_wait_ms", cw.max_wait_ms);
    }

    let wf = &s.wait_for_cooldown;
    c.range("wait_for_cooldown.max_retries", wf.max_retries, 0, 10);
    let wait_ok = c.range("wait_for_cooldown.max_retry_wait_ms", wf.max_retry_wait_ms, 0, 300_000);
    if c.range("wait_for_cooldown.budget_ms", wf.budget_ms, 0, 300_000) && wait_ok {
        c.at_least("wait_for_cooldown.budget_ms", wf.budget_ms, "max_retry_wait_ms", wf.max_retry_wait_ms);
    }

    let w = &s.throughput_watchdog;
    c.range("throughput_watchdog.warmup_ms", w.warmup_ms, 0, 600_000);
    c.range("throughput_watchdog.window_ms", w.window_ms, 1_000, 600_000);
    c.range("throughput_watchdog.min_bytes_per_second", w.min_bytes_per_second, 1, 1_000_000);
    c.range("throughput_watchdog.min_bytes", w.min_bytes, 1, 1_000_000);

    c.range("session_affinity.ttl_ms", s.session_affinity.ttl_ms, 0, 30 * DAY_MS);
    c.range("session_affinity.max_pins", s.session_affinity.max_pins, 1, 1_000_000);

    error_rules(&mut c, &s.error_rules);
    c.errors
}

/// M12: the operators' error rules, each named by its place.
fn error_rules(c: &mut Checker, rules: &[OperatorErrorRule]) {
    if rules.len() > 50 {
        c.err("error_rules", format!("at most 50 rules, got {}", rules.len()));
    }
    for (i, r) in rules.iter().enumerate() {
        let p = format!("error_rules[{i}]");
        if r.provider.trim().is_empty() {
            c.err(&format!("{p}.provider"), "must not be empty".to_owned());
        }
        if r.statuses.is_empty() {
            c.err(&format!("{p}.statuses"), "must list at least one status".to_owned());
        }
        for (j, st) in r.statuses.iter().enumerate() {
            c.range(&format!("{p}.statuses[{j}]"), i64::from(*st), 100, 599);
        }
        if let Some(ms) = r.cooldown_ms {
            c.range(&format!("{p}.cooldown_ms"), i64::try_from(ms).unwrap_or(i64::MAX), 0, 30 * DAY_MS);
        }
    }
}
