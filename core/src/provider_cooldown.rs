//! M2: the optional provider cooldown tracker (off by default).
//!
//! Provider-level records use a time-window gate: below the threshold of failures inside the
//! window the provider is not cooling; at it, it cools for the class's cooldown after its last
//! failure. Connection-level records (`provider:connection`) use exponential backoff between a
//! floor and a cap. A success clears the record.

use crate::settings::ProviderCooldownSettings;
use crate::types::{ProviderClass, scaled};
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

/// Timestamps kept per provider record.
const MAX_TIMESTAMPS: usize = 200;

#[derive(Debug, Clone)]
struct Entry {
    last_failure_at: Instant,
    failure_count: u32,
    timestamps: VecDeque<Instant>,
}

/// Typed M2 settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderCooldownConfig {
    /// Whether routing consults the tracker.
    pub enabled: bool,
    /// Connection-level floor.
    pub min_retry: Duration,
    /// Connection-level cap.
    pub max_retry: Duration,
    /// Window gate per class: (threshold, window, cooldown).
    pub windows: [(u32, Duration, Duration); 3],
}

impl ProviderCooldownConfig {
    /// From validated settings.
    pub fn from_settings(s: &ProviderCooldownSettings) -> Self {
        let ms = |v: i64| Duration::from_millis(v.max(0) as u64);
        let w = |c: ProviderClass| {
            let x = s.window(c);
            (x.failure_threshold.max(1) as u32, ms(x.failure_window_ms), ms(x.cooldown_ms))
        };
        ProviderCooldownConfig {
            enabled: s.enabled,
            min_retry: ms(s.min_retry_cooldown_ms),
            max_retry: ms(s.max_retry_cooldown_ms),
            windows: [w(ProviderClass::ApiKey), w(ProviderClass::OAuth), w(ProviderClass::Local)],
        }
    }

    fn window(&self, class: ProviderClass) -> (u32, Duration, Duration) {
        match class {
            ProviderClass::ApiKey => self.windows[0],
            ProviderClass::OAuth => self.windows[1],
            ProviderClass::Local => self.windows[2],
        }
    }
}

/// Failure records by `provider` or `provider:connection`.
#[derive(Debug, Clone, Default)]
pub struct ProviderCooldownTracker {
    entries: BTreeMap<(String, Option<String>), Entry>,
}

impl ProviderCooldownTracker {
    /// Empty.
    pub fn new() -> Self {
        Self::default()
    }

    fn key(provider: &str, connection: Option<&str>) -> Option<(String, Option<String>)> {
        if provider.is_empty() || provider == "unknown" {
            return None;
        }
        Some((provider.to_owned(), connection.map(str::to_owned)))
    }

    /// Records a failure of a provider (no connection) or of one connection.
    pub fn record_failure(
        &mut self,
        now: Instant,
        cfg: &ProviderCooldownConfig,
        class: ProviderClass,
        provider: &str,
        connection: Option<&str>,
    ) {
        let Some(key) = Self::key(provider, connection) else { return };
        let is_provider = connection.is_none();
        let e = self.entries.entry(key).or_insert_with(|| Entry {
            last_failure_at: now,
            failure_count: 0,
            timestamps: VecDeque::new(),
        });
        e.last_failure_at = now;
        e.failure_count = e.failure_count.saturating_add(1);
        if is_provider {
            let (_, window, _) = cfg.window(class);
            e.timestamps.push_back(now);
            while e.timestamps.front().is_some_and(|t| now.saturating_duration_since(*t) > window)
                || e.timestamps.len() > MAX_TIMESTAMPS
            {
                e.timestamps.pop_front();
            }
        }
    }

    /// A success clears the record.
    pub fn record_success(&mut self, provider: &str, connection: Option<&str>) {
        // Nothing recorded (the tracker is off, or nothing failed): no key to build.
        if self.entries.is_empty() {
            return;
        }
        if let Some(key) = Self::key(provider, connection) {
            self.entries.remove(&key);
        }
    }

    /// Time left cooling (zero when not cooling).
    pub fn remaining(
        &self,
        now: Instant,
        cfg: &ProviderCooldownConfig,
        class: ProviderClass,
        provider: &str,
        connection: Option<&str>,
    ) -> Duration {
        if self.entries.is_empty() {
            return Duration::ZERO;
        }
        let Some(e) = Self::key(provider, connection).and_then(|k| self.entries.get(&k)) else { return Duration::ZERO };
        let elapsed = now.saturating_duration_since(e.last_failure_at);
        let cooldown = match connection {
            Some(_) => scaled(cfg.min_retry, e.failure_count.saturating_sub(1).min(10)).min(cfg.max_retry),
            None => {
                let (threshold, window, cooldown) = cfg.window(class);
                let in_window = e.timestamps.iter().filter(|t| now.saturating_duration_since(**t) <= window).count();
                if in_window < threshold as usize {
                    return Duration::ZERO;
                }
                cooldown
            }
        };
        cooldown.saturating_sub(elapsed)
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Drops records idle for longer than `max(30 min, max_retry)`.
    pub fn sweep(&mut self, now: Instant, cfg: &ProviderCooldownConfig) {
        let retention = cfg.max_retry.max(Duration::from_secs(1800));
        self.entries.retain(|_, e| now.saturating_duration_since(e.last_failure_at) <= retention);
    }
}

#[cfg(test)]
mod tests {
    //! BEHAVIOUR.md §12.6, §12.7 and §12.15 case 14.
    use super::*;
    use crate::settings::ProviderCooldownSettings;
    use crate::testutil::t0;

    fn cfg() -> ProviderCooldownConfig {
        let mut s = ProviderCooldownSettings::default();
        s.enabled = true;
        ProviderCooldownConfig::from_settings(&s)
    }
    const API: ProviderClass = ProviderClass::ApiKey;
    const MIN: fn(u64) -> Duration = |m| Duration::from_secs(60 * m);

    #[test]
    fn defaults_off() {
        assert!(!ProviderCooldownConfig::from_settings(&ProviderCooldownSettings::default()).enabled);
    }

    #[test]
    fn window_gate_opens_at_fifteen() {
        let now = t0();
        let c = cfg();
        let mut t = ProviderCooldownTracker::new();
        for _ in 0..14 {
            t.record_failure(now, &c, API, "openai", None);
        }
        assert_eq!(t.remaining(now, &c, API, "openai", None), Duration::ZERO);
        t.record_failure(now, &c, API, "openai", None);
        assert_eq!(t.remaining(now, &c, API, "openai", None), MIN(10));
        assert_eq!(t.remaining(now + MIN(10) + Duration::from_secs(1), &c, API, "openai", None), Duration::ZERO);
    }

    #[test]
    fn stale_failures_fall_out_of_the_window() {
        let now = t0();
        let c = cfg();
        let mut t = ProviderCooldownTracker::new();
        for _ in 0..14 {
            t.record_failure(now, &c, API, "openai", None);
        }
        let later = now + MIN(31);
        t.record_failure(later, &c, API, "openai", None);
        assert_eq!(t.remaining(later, &c, API, "openai", None), Duration::ZERO);
    }

    #[test]
    fn success_clears_the_window() {
        let now = t0();
        let c = cfg();
        let mut t = ProviderCooldownTracker::new();
        for _ in 0..15 {
            t.record_failure(now, &c, API, "openai", None);
        }
        t.record_success("openai", None);
        t.record_failure(now, &c, API, "openai", None);
        assert_eq!(t.remaining(now, &c, API, "openai", None), Duration::ZERO);
    }

    #[test]
    fn oauth_gate_is_ten_in_fifteen_minutes() {
        let now = t0();
        let c = cfg();
        let mut t = ProviderCooldownTracker::new();
        for i in 0..10 {
            t.record_failure(now + Duration::from_secs(i), &c, ProviderClass::OAuth, "claude", None);
        }
        assert_eq!(t.remaining(now + Duration::from_secs(9), &c, ProviderClass::OAuth, "claude", None), MIN(5));
    }

    #[test]
    fn connection_backoff_grows_and_is_capped() {
        let now = t0();
        let c = cfg();
        let mut t = ProviderCooldownTracker::new();
        let mut seen = Vec::new();
        for _ in 0..3 {
            t.record_failure(now, &c, API, "openai", Some("conn-1"));
            seen.push(t.remaining(now, &c, API, "openai", Some("conn-1")).as_millis());
        }
        assert_eq!(seen, vec![5_000, 10_000, 20_000]);
        for _ in 0..10 {
            t.record_failure(now, &c, API, "openai", Some("conn-1"));
        }
        assert_eq!(t.remaining(now, &c, API, "openai", Some("conn-1")), Duration::from_secs(300));
        assert_eq!(t.len(), 1);
        t.record_failure(now, &c, API, "openai", Some("conn-2"));
        t.record_success("openai", Some("conn-1"));
        assert_eq!(t.remaining(now, &c, API, "openai", Some("conn-1")), Duration::ZERO);
        assert!(t.remaining(now, &c, API, "openai", Some("conn-2")) > Duration::ZERO);
    }

    #[test]
    fn unknown_providers_are_ignored_and_retention_sweeps() {
        let now = t0();
        let c = cfg();
        let mut t = ProviderCooldownTracker::new();
        t.record_failure(now, &c, API, "", Some("x"));
        t.record_failure(now, &c, API, "unknown", Some("x"));
        assert!(t.is_empty());
        t.record_failure(now, &c, API, "openai", Some("c"));
        t.sweep(now + MIN(29), &c);
        assert_eq!(t.len(), 1);
        t.sweep(now + MIN(31), &c);
        assert!(t.is_empty());
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn window_gate_and_backoff_invariants(ops in proptest::collection::vec((0u64..120_000, 0u8..4), 1..150)) {
                let start = t0();
                let c = cfg();
                let mut t = ProviderCooldownTracker::new();
                let mut now = start;
                // Reference model: provider failure times since the last success.
                let mut failures: Vec<Instant> = Vec::new();
                for (gap, op) in ops {
                    now += Duration::from_millis(gap);
                    match op {
                        0 | 1 => { t.record_failure(now, &c, API, "p", None); failures.push(now); }
                        2 => t.record_failure(now, &c, API, "p", Some("k")),
                        _ => { t.record_success("p", None); failures.clear(); }
                    }
                    let (threshold, window, cooldown) = c.windows[0];
                    let in_window = failures.iter().filter(|f| now.saturating_duration_since(**f) <= window).count();
                    let remaining = t.remaining(now, &c, API, "p", None);
                    if in_window < threshold as usize {
                        prop_assert_eq!(remaining, Duration::ZERO, "cooling below the threshold");
                    }
                    prop_assert!(remaining <= cooldown);
                    let conn = t.remaining(now, &c, API, "p", Some("k"));
                    prop_assert!(conn <= c.max_retry, "connection backoff past its cap");
                }
            }
        }
    }
}
