//! Model lockout tests: BEHAVIOUR.md §4 and §12.15 (lockout scope cases), escalation, decay,
//! clears, eviction, and a model-based proptest.

use super::*;
use crate::testutil::t0;

fn cfg(base_ms: u64, max_ms: u64) -> LockoutConfig {
    LockoutConfig {
        enabled: true,
        error_codes: vec![403, 404, 429, 502, 503, 504],
        base_cooldown: Duration::from_millis(base_ms),
        max_cooldown: Duration::from_millis(max_ms),
        max_backoff_steps: 10,
        use_exponential_backoff: true,
        escalation_window: Duration::from_millis(1_800_000),
    }
}

fn req<'a>(model: &'a str, status: u16, family: Option<&'a str>) -> LockRequest<'a> {
    LockRequest {
        provider: "codex",
        connection: "c1",
        model,
        family,
        reason: Reason::ServerError,
        status,
        scope: None,
        exact_cooldown: None,
        exact_is_upstream_reset: false,
    }
}

#[test]
fn scope_table() {
    for s in [429, 403, 402, 404] {
        assert_eq!(resolve_scope(s, None), LockScope::QuotaFamily, "{s}");
    }
    for s in [500, 502, 503, 504, 520, 400] {
        assert_eq!(resolve_scope(s, None), LockScope::Exact, "{s}");
    }
    assert_eq!(resolve_scope(502, Some(LockScope::QuotaFamily)), LockScope::QuotaFamily);
    assert_eq!(resolve_scope(429, Some(LockScope::Exact)), LockScope::Exact);
}

#[test]
fn a_5xx_locks_only_the_exact_model_and_a_429_the_family() {
    let now = t0();
    let c = cfg(120_000, 1_800_000);
    let mut l = ModelLockouts::new();
    l.record_failure(now, &c, &req("gpt-5.6-luna", 502, Some("codex")));
    assert!(l.remaining(now, "codex", "c1", "gpt-5.6-luna", Some("codex")).is_some());
    assert!(l.remaining(now, "codex", "c1", "gpt-5.6-sol", Some("codex")).is_none());
    l.record_failure(now, &c, &req("gpt-5.6-luna", 429, Some("codex")));
    for m in ["gpt-5.6-sol", "gpt-5.6-terra"] {
        assert!(l.remaining(now, "codex", "c1", m, Some("codex")).is_some(), "{m}");
    }
    // An explicit family scope on a 502 locks siblings too.
    let mut l = ModelLockouts::new();
    let mut r = req("gpt-5.6-luna", 502, Some("codex"));
    r.scope = Some(LockScope::QuotaFamily);
    l.record_failure(now, &c, &r);
    assert!(l.remaining(now, "codex", "c1", "gpt-5.6-sol", Some("codex")).is_some());
}

#[test]
fn escalation_and_decay() {
    // Base 1 s, max 60 s: two 502s 1.1 s apart give counts 1 and 2, the second lock 2 s.
    let now = t0();
    let c = cfg(1_000, 60_000);
    let mut l = ModelLockouts::new();
    assert_eq!(l.record_failure(now, &c, &req("m", 502, None)), Duration::from_secs(1));
    let t = now + Duration::from_millis(1_100);
    assert_eq!(l.record_failure(t, &c, &req("m", 502, None)), Duration::from_secs(2));
    assert_eq!(l.list(t)[0].failure_count, 2);
    assert!(l.decay(t, "codex", "c1", "m", None).is_empty(), "a count of 1 left ends nothing");
    assert_eq!(l.list(t)[0].failure_count, 1);
    assert_eq!(l.decay(t, "codex", "c1", "m", None), vec!["m".to_owned()], "the ended lockout is named");
    assert!(l.remaining(t, "codex", "c1", "m", None).is_none(), "the lockout disappears when decay reaches 0");
    assert!(l.list(t).is_empty());
    assert!(l.decay(t, "codex", "c1", "m", None).is_empty());
    assert!(l.list(t).is_empty());
}

#[test]
fn declared_cooldown_is_capped_unless_upstream_reset() {
    let now = t0();
    let c = cfg(120_000, 1_800_000);
    let mut l = ModelLockouts::new();
    let mut r = req("claude-opus", 403, None);
    r.exact_cooldown = Some(Duration::from_secs(6 * 3600));
    r.scope = Some(LockScope::Exact);
    assert_eq!(l.record_failure(now, &c, &r), Duration::from_millis(1_800_000));
    r.exact_is_upstream_reset = true;
    assert_eq!(l.record_failure(now, &c, &r), Duration::from_secs(6 * 3600));
}

#[test]
fn longer_lock_is_kept() {
    let now = t0();
    let c = cfg(120_000, 1_800_000);
    let mut l = ModelLockouts::new();
    let mut r = req("m", 503, None);
    r.exact_cooldown = Some(Duration::from_secs(600));
    l.record_failure(now, &c, &r);
    r.exact_cooldown = Some(Duration::from_secs(10));
    // The kept lock's time left is what the failure reports (and the event announces).
    let later = now + Duration::from_secs(1);
    assert_eq!(l.record_failure(later, &c, &r), Duration::from_secs(599));
    assert_eq!(l.remaining(later, "codex", "c1", "m", None).map(|x| x.0), Some(Duration::from_secs(599)));
}

#[test]
fn list_and_clear() {
    let now = t0();
    let c = cfg(120_000, 1_800_000);
    let mut l = ModelLockouts::new();
    l.record_failure(now, &c, &req("m1", 503, None));
    let mut r = req("m1", 503, None);
    r.connection = "c2";
    l.record_failure(now, &c, &r);
    l.record_failure(now, &c, &req("m2", 503, None));
    assert_eq!(l.list(now).len(), 3);
    assert_eq!(l.clear("codex", "c1", "m2"), 1);
    assert_eq!(l.clear_model("codex", "m1"), 2);
    assert!(l.list(now).is_empty());
    assert_eq!(l.clear("codex", "c1", "m2"), 0);
    l.record_failure(now, &c, &req("m2", 503, None));
    assert_eq!(l.clear_all(), 1);
    assert!(l.list(now + Duration::from_secs(121)).is_empty());
}

mod props {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Advance(u64),
        Fail(u16, u8),
        Success(u8),
    }

    proptest! {
        #[test]
        fn lockout_invariants(ops in proptest::collection::vec(prop_oneof![
            (1u64..200_000).prop_map(Op::Advance),
            (prop_oneof![Just(429u16), Just(503), Just(404), Just(502)], 0u8..3).prop_map(|(s, m)| Op::Fail(s, m)),
            (0u8..3).prop_map(Op::Success),
        ], 1..120)) {
            let start = t0();
            let c = cfg(1_000, 60_000);
            let mut l = ModelLockouts::new();
            let mut now = start;
            let models = ["a", "b", "c"];
            for op in ops {
                match op {
                    Op::Advance(ms) => now += Duration::from_millis(ms),
                    Op::Fail(status, m) => {
                        let cd = l.record_failure(now, &c, &req(models[m as usize], status, Some("fam")));
                        prop_assert!(cd <= c.max_cooldown && cd >= c.base_cooldown);
                        prop_assert!(l.remaining(now, "codex", "c1", models[m as usize], Some("fam")).is_some());
                    }
                    Op::Success(m) => {
                        let model = models[m as usize];
                        let keys = [("fam", LockScope::QuotaFamily), (model, LockScope::QuotaFamily), (model, LockScope::Exact)];
                        let before: Vec<Option<u32>> = keys.iter().map(|(s, sc)| l.count_of("codex", "c1", s, *sc)).collect();
                        l.decay(now, "codex", "c1", model, Some("fam"));
                        // Each lock stays exactly while its halved count is above 0.
                        for ((s, sc), b) in keys.iter().zip(before) {
                            prop_assert_eq!(l.count_of("codex", "c1", s, *sc), b.map(|c| c / 2).filter(|c| *c > 0));
                        }
                    }
                }
                for e in l.list(now) {
                    prop_assert!(e.failure_count > 0, "a listed lockout always has a count");
                    prop_assert!(e.until > now);
                }
            }
        }
    }
}

#[test]
fn past_the_cap_the_oldest_expired_locks_go_first_and_active_ones_never() {
    let (t, c) = (t0(), cfg(1_000, 60_000));
    let mut l = ModelLockouts::new();
    let models: Vec<String> = (0..=EVICTION_CAP).map(|i| format!("m{i}")).collect();
    // EVICTION_CAP locks of 1 s each, a millisecond apart: all expired by t + 10 s.
    for (i, m) in models[..EVICTION_CAP].iter().enumerate() {
        l.record_failure(t + Duration::from_millis(i as u64), &c, &req(m, 503, None));
    }
    assert_eq!(l.len(), EVICTION_CAP, "at the cap nothing goes");
    let later = t + Duration::from_secs(10);
    l.record_failure(later, &c, &req(&models[EVICTION_CAP], 503, None));
    assert_eq!(l.len(), EVICTION_CAP, "one over the cap: one expired lock went");
    assert_eq!(l.count_of("codex", "c1", "m0", LockScope::Exact), None, "the oldest one");
    assert_eq!(l.count_of("codex", "c1", "m1", LockScope::Exact), Some(1), "the next is kept");
    assert_eq!(l.count_of("codex", "c1", &models[EVICTION_CAP], LockScope::Exact), Some(1), "the new one is kept");

    // Active locks are never evicted, however many there are.
    let mut l = ModelLockouts::new();
    for m in &models {
        l.record_failure(t, &c, &req(m, 503, None));
    }
    assert_eq!(l.len(), EVICTION_CAP + 1);
    assert_eq!(l.list(t).len(), EVICTION_CAP + 1);
}

#[test]
fn with_far_more_active_locks_than_the_cap_expired_ones_still_go_and_lookups_stay_exact() {
    let t = t0();
    let (long, short) = (cfg(36_000_000, 36_000_000), cfg(1_000, 1_000));
    let mut l = ModelLockouts::new();
    let models: Vec<String> = (0..5 * EVICTION_CAP).map(|i| format!("Model-{i}")).collect();
    for m in &models {
        l.record_failure(t, &long, &req(m, 503, None));
    }
    // Short locks, each expired when the next comes: memory stays within twice the active
    // locks (and the cap), however many come.
    for i in 0..12 * EVICTION_CAP {
        let m = format!("short-{i}");
        l.record_failure(t + Duration::from_secs(2 * i as u64), &short, &req(&m, 503, None));
        assert!(l.len() <= 2 * (models.len() + 1) + 1, "{} locks remembered after {i}", l.len());
    }
    let later = t + Duration::from_secs(2 * 12 * EVICTION_CAP as u64);
    assert!(later < t + Duration::from_secs(36_000), "the long locks are still running");
    assert!(l.len() < 12 * EVICTION_CAP, "expired short locks went: {} remembered", l.len());
    for m in models.iter().step_by(997) {
        assert!(l.remaining(later, "codex", "c1", &m.to_lowercase(), None).is_some(), "{m} (any case)");
        assert!(l.remaining(later, "codex", "c1", &format!(" {m} "), None).is_some(), "{m} (trimmed)");
    }
    assert!(l.remaining(later, "codex", "c1", "short-0", None).is_none());
    assert!(l.remaining(later, "codex", "c1", "Model-x", None).is_none());
    assert!(l.remaining(later, "codex", "c2", "Model-1", None).is_none(), "another connection");
}
