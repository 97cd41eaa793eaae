//! Breaker unit tests: SPEC M1 rows and BEHAVIOUR.md §12.1–§12.4, plus a model-based proptest.

use super::*;
use crate::breaker::registry::BreakerRegistry;
use crate::testutil::t0;
use proptest::prelude::*;
use std::collections::BTreeMap;

fn cfg(ft: u32, degr: u32, reset_ms: u64) -> BreakerConfig {
    BreakerConfig {
        failure_threshold: ft,
        degradation_threshold: degr,
        reset_timeout: Duration::from_millis(reset_ms),
        half_open_requests: 1,
        max_backoff_multiplier: 4,
        backoff_escalation_count: 3,
        dedupe_window: Duration::ZERO,
    }
}

fn fail(b: &mut Breaker, now: Instant) {
    if let Some(t) = b.try_admit(now).ticket() {
        b.handle_outcome(now, t, Outcome::Failure { connection: None });
    }
}

fn succeed(b: &mut Breaker, now: Instant) {
    if let Some(t) = b.try_admit(now).ticket() {
        b.handle_outcome(now, t, Outcome::Success);
    }
}

const MS: fn(u64) -> Duration = Duration::from_millis;

#[test]
fn two_failures_open_with_reset_timeout() {
    // §12.1 case 1
    let now = t0();
    let mut b = Breaker::new(&cfg(2, 1, 30_000), now);
    fail(&mut b, now);
    fail(&mut b, now);
    assert_eq!(b.state(now), BreakerState::Open);
    assert_eq!(b.retry_after(now), MS(30_000));
    assert!(!b.can_execute(now));
}

#[test]
fn api_key_defaults_degrade_at_7_and_open_at_12() {
    let now = t0();
    let mut b = Breaker::new(&cfg(12, 7, 30_000), now);
    for i in 1..=11 {
        fail(&mut b, now);
        let expect = if i >= 7 { BreakerState::Degraded } else { BreakerState::Closed };
        assert_eq!(b.state(now), expect, "after {i} failures");
    }
    fail(&mut b, now);
    assert_eq!(b.state(now), BreakerState::Open);
}

#[test]
fn lazy_half_open_after_reset_timeout_and_probe_success_closes() {
    let now = t0();
    let mut b = Breaker::new(&cfg(1, 1, 300), now);
    fail(&mut b, now);
    assert_eq!(b.state(now + MS(299)), BreakerState::Open);
    assert!(!b.can_execute(now + MS(299)));
    // Reading alone yields HalfOpen: no timer is involved.
    assert_eq!(b.state(now + MS(300)), BreakerState::HalfOpen);
    assert!(b.can_execute(now + MS(300)));
    let later = now + MS(330);
    let probe = b.try_admit(later);
    assert!(matches!(probe, Admission::Probe(_)));
    // Only one probe at a time.
    assert_eq!(b.try_admit(later), Admission::Reject { retry_after: Duration::ZERO });
    b.handle_outcome(later, probe.ticket().expect("probe"), Outcome::Success);
    assert_eq!(b.state(later), BreakerState::Closed);
    assert_eq!(b.failure_count(), 0);
}

#[test]
fn failed_probe_reopens_and_escalates_after_count() {
    let now = t0();
    let mut c = cfg(1, 1, 1_000);
    c.backoff_escalation_count = 1;
    c.max_backoff_multiplier = 4;
    let mut b = Breaker::new(&c, now);
    fail(&mut b, now);
    let mut t = now;
    let mut timeouts = Vec::new();
    for _ in 0..5 {
        t += b.retry_after(t);
        let probe = b.try_admit(t);
        assert!(probe.ticket().is_some_and(|t| t.is_probe()));
        b.handle_outcome(t, probe.ticket().expect("probe"), Outcome::Failure { connection: None });
        assert_eq!(b.state(t), BreakerState::Open);
        timeouts.push(b.retry_after(t).as_millis());
    }
    // cycles 1..5 with escalation count 1: 1 s, 2 s, 4 s, then capped at 4 s.
    assert_eq!(timeouts, vec![1_000, 2_000, 4_000, 4_000, 4_000]);
    assert_eq!(b.open_cycle_count(), 5);
}

#[test]
fn failures_while_open_are_ignored() {
    // §12.15 case 15: threshold 1, reset 60 s; another failure 10 s later changes nothing.
    let now = t0();
    let mut b = Breaker::new(&cfg(1, 1, 60_000), now);
    let t = b.try_admit(now).ticket().expect("admitted");
    let t2 = b.try_admit(now).ticket().expect("admitted");
    b.handle_outcome(now, t, Outcome::Failure { connection: None });
    let last = b.last_failure_at();
    b.handle_outcome(now + MS(10_000), t2, Outcome::Failure { connection: None });
    assert_eq!(b.retry_after(now + MS(10_000)), MS(50_000));
    assert_eq!(b.last_failure_at(), last);
    assert_eq!(b.try_admit(now + MS(10_000)), Admission::Reject { retry_after: MS(50_000) });
}

#[test]
fn success_decrements_and_degraded_recovers() {
    let now = t0();
    let mut b = Breaker::new(&cfg(12, 7, 30_000), now);
    for _ in 0..8 {
        fail(&mut b, now);
    }
    assert_eq!(b.state(now), BreakerState::Degraded);
    succeed(&mut b, now);
    assert_eq!(b.failure_count(), 7);
    assert_eq!(b.state(now), BreakerState::Closed);
    succeed(&mut b, now);
    assert_eq!(b.failure_count(), 6);
}

#[test]
fn ignored_outcomes_never_count() {
    // §12.3 / §12.5: client aborts and local lifecycle errors never trip the breaker.
    let now = t0();
    let mut b = Breaker::new(&cfg(3, 2, 30_000), now);
    for _ in 0..5 {
        let t = b.try_admit(now).ticket().expect("admitted");
        b.handle_outcome(now, t, Outcome::Ignored);
    }
    assert_eq!(b.state(now), BreakerState::Closed);
    assert_eq!(b.failure_count(), 0);
    for _ in 0..3 {
        fail(&mut b, now);
    }
    assert_eq!(b.state(now), BreakerState::Open);
}

#[test]
fn ignored_probe_returns_its_slot() {
    let now = t0();
    let mut b = Breaker::new(&cfg(1, 1, 100), now);
    fail(&mut b, now);
    let t = now + MS(100);
    let probe = b.try_admit(t).ticket().expect("probe");
    b.handle_outcome(t, probe, Outcome::Ignored);
    assert_eq!(b.state(t), BreakerState::HalfOpen);
    assert!(matches!(b.try_admit(t), Admission::Probe(_)));
}

#[test]
fn same_connection_failures_within_window_count_once() {
    let now = t0();
    let mut c = cfg(3, 2, 30_000);
    c.dedupe_window = MS(5_000);
    let mut b = Breaker::new(&c, now);
    for i in 0..10 {
        let t = b.try_admit(now + MS(i * 100)).ticket().expect("admitted");
        b.handle_outcome(now + MS(i * 100), t, Outcome::Failure { connection: Some("c1") });
    }
    assert_eq!(b.failure_count(), 1);
    let t = b.try_admit(now).ticket().expect("admitted");
    b.handle_outcome(now + MS(200), t, Outcome::Failure { connection: Some("c2") });
    assert_eq!(b.failure_count(), 2);
    let t = b.try_admit(now).ticket().expect("admitted");
    b.handle_outcome(now + MS(5_000), t, Outcome::Failure { connection: Some("c1") });
    assert_eq!(b.state(now + MS(5_000)), BreakerState::Open);
}

#[test]
fn a_success_lets_the_connections_next_failure_count_again() {
    let now = t0();
    let mut c = cfg(5, 5, 30_000);
    c.dedupe_window = MS(5_000);
    let mut b = Breaker::new(&c, now);
    let fail_at = |b: &mut Breaker, at, conn| {
        let t = b.try_admit(at).ticket().expect("admitted");
        b.handle_outcome(at, t, Outcome::Failure { connection: Some(conn) });
    };
    fail_at(&mut b, now, "c1");
    fail_at(&mut b, now, "c2");
    b.forget_failure_of(now + MS(100), "c1");
    fail_at(&mut b, now + MS(200), "c1");
    assert_eq!(b.failure_count(), 3, "c1 succeeded in between: its failure counts again");
    fail_at(&mut b, now + MS(300), "c2");
    assert_eq!(b.failure_count(), 3, "c2's key is still remembered");
}

#[test]
fn manual_reset_closes_and_stale_probe_is_ignored() {
    let now = t0();
    let mut b = Breaker::new(&cfg(1, 1, 100), now);
    fail(&mut b, now);
    let probe = b.try_admit(now + MS(100)).ticket().expect("probe");
    b.reset(now + MS(100));
    assert_eq!(b.state(now + MS(100)), BreakerState::Closed);
    b.handle_outcome(now + MS(101), probe, Outcome::Failure { connection: None });
    assert_eq!(b.state(now + MS(101)), BreakerState::Closed);
    assert_eq!(b.failure_count(), 0);
}

#[test]
fn events_name_every_transition() {
    let now = t0();
    let mut b = Breaker::new(&cfg(2, 1, 100), now);
    fail(&mut b, now);
    fail(&mut b, now);
    succeed(&mut b, now + MS(100));
    let events: Vec<_> = std::iter::from_fn(|| b.poll_event()).map(|e| (e.from, e.to)).collect();
    use BreakerState::*;
    assert_eq!(events, vec![(Closed, Degraded), (Degraded, Open), (Open, HalfOpen), (HalfOpen, Closed)]);
}

#[test]
fn snapshot_round_trips_open_deadline() {
    let now = t0();
    let c = cfg(1, 1, 30_000);
    let mut b = Breaker::new(&c, now);
    fail(&mut b, now);
    let snap = b.snapshot(now + MS(10_000));
    assert_eq!(snap.open_remaining_ms, 20_000);
    let later = now + MS(50_000);
    let r = Breaker::restore(&c, &snap, later);
    assert_eq!(r.state(later), BreakerState::Open);
    assert_eq!(r.retry_after(later), MS(20_000));
    assert_eq!(r.state(later + MS(20_000)), BreakerState::HalfOpen);
}

#[test]
fn registry_cap_never_evicts_open_breakers() {
    // §12.2
    let now = t0();
    let c = cfg(1, 1, 30_000);
    let mut reg = BreakerRegistry::default();
    for i in 0..1200 {
        reg.get_or_insert(&format!("cap-cb-{i}"), &c, now);
    }
    assert!(reg.len() <= 500);
    fail(reg.get_or_insert("must-survive", &c, now), now);
    for i in 0..1200 {
        reg.get_or_insert(&format!("more-cb-{i}"), &c, now);
    }
    assert!(reg.len() <= 500);
    assert_eq!(reg.get("must-survive").map(|b| b.state(now)), Some(BreakerState::Open));
}

#[test]
fn registry_lists_breakers_in_provider_order_and_finds_each_after_evictions() {
    let now = t0();
    let c = cfg(1, 1, 30_000);
    let mut reg = BreakerRegistry::with_cap(3);
    fail(reg.get_or_insert("zeta", &c, now), now);
    reg.get_or_insert("alpha", &c, now);
    fail(reg.get_or_insert("mu", &c, now), now);
    let names: Vec<&str> = reg.iter().map(|(p, _)| p).collect();
    assert_eq!(names, ["alpha", "mu", "zeta"]);
    // "beta" evicts idle "alpha": the slots move, and every provider is still found by name
    // (the last one handed out first).
    reg.get_or_insert("beta", &c, now);
    assert!(reg.get("alpha").is_none());
    for (p, open) in [("zeta", true), ("mu", true), ("beta", false)] {
        assert_eq!(reg.get(p).map(|b| b.state(now) == BreakerState::Open), Some(open), "{p}");
        assert_eq!(reg.get_or_insert(p, &c, now).state(now) == BreakerState::Open, open, "{p}");
    }
}

proptest! {
    /// Draining only the providers that may hold events gives the same transitions, in the same
    /// order, as walking every breaker in provider order (the registry's old way), whatever the
    /// order breakers are touched, reset and drained in.
    #[test]
    fn registry_drains_as_a_walk_of_every_breaker_would(
        ops in proptest::collection::vec((0usize..6, 0u8..6), 1..120),
        cap in prop_oneof![Just(2usize), Just(500)],
    ) {
        let mut now = t0();
        let c = cfg(2, 1, 1_000);
        // A cap of 2 evicts idle breakers (and moves slots) all the time.
        let mut reg = BreakerRegistry::with_cap(cap);
        let mut every: BTreeMap<String, Breaker> = BTreeMap::new();
        let walk = |every: &mut BTreeMap<String, Breaker>| {
            every.iter_mut().find_map(|(p, b)| b.poll_event().map(|e| (p.clone(), e.from, e.to)))
        };
        for (i, op) in ops {
            let p = format!("p{i}");
            let mirror = every.entry(p.clone()).or_insert_with(|| Breaker::new(&c, now));
            if op == 2 && reg.get(&p).is_none() {
                reg.get_or_insert(&p, &c, now);
            }
            match op {
                0 => { fail(reg.get_or_insert(&p, &c, now), now); fail(mirror, now) }
                1 => { succeed(reg.get_or_insert(&p, &c, now), now); succeed(mirror, now) }
                2 => { reg.reset(&p, now); mirror.reset(now) }
                3 => now += MS(700),
                4 => loop {
                    let got = reg.poll_event().map(|t| (t.provider, t.from, t.to));
                    prop_assert_eq!(&got, &walk(&mut every));
                    if got.is_none() { break; }
                },
                // Each provider's breaker is found where it is (an evicted one was idle).
                _ => {
                    for (p, b) in &every {
                        let held = reg.get(p).map(|r| (r.state(now), r.failure_count));
                        let want = (b.state(now), b.failure_count);
                        prop_assert!(held.map_or(want == (BreakerState::Closed, 0), |h| h == want), "{p}: {held:?} vs {want:?}");
                    }
                }
            }
        }
        loop {
            let got = reg.poll_event().map(|t| (t.provider, t.from, t.to));
            prop_assert_eq!(&got, &walk(&mut every));
            if got.is_none() { break; }
        }
    }
}

#[test]
fn effective_reset_timeout_formula() {
    let mut c = cfg(1, 1, 30_000);
    c.backoff_escalation_count = 3;
    c.max_backoff_multiplier = 4;
    let got: Vec<u128> = (0..8).map(|n| c.effective_reset_timeout(n).as_millis()).collect();
    assert_eq!(got, vec![30_000, 30_000, 30_000, 30_000, 60_000, 120_000, 120_000, 120_000]);
}

// ---- model-based property test ----

#[derive(Debug, Clone)]
enum Op {
    Advance(u64),
    Admit,
    Succeed(usize),
    Fail(usize, u8),
    Ignore(usize),
    Reset,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (1u64..20_000).prop_map(Op::Advance),
        Just(Op::Admit),
        (0usize..8).prop_map(Op::Succeed),
        ((0usize..8), (0u8..3)).prop_map(|(i, c)| Op::Fail(i, c)),
        (0usize..8).prop_map(Op::Ignore),
        Just(Op::Reset),
    ]
}

proptest! {
    #[test]
    fn breaker_invariants(ops in proptest::collection::vec(op(), 1..200), ft in 1u32..6, probes in 1u32..3) {
        let start = t0();
        let mut c = cfg(ft, ft.div_ceil(2), 5_000);
        c.half_open_requests = probes;
        c.dedupe_window = MS(1_000);
        let mut b = Breaker::new(&c, start);
        let mut now = start;
        let mut tickets: Vec<Ticket> = Vec::new();
        // Reference model: the instant before which nothing may be admitted.
        let mut open_until: Option<Instant> = None;
        for op in ops {
            match op {
                Op::Advance(ms) => now += MS(ms),
                Op::Admit => {
                    let adm = b.try_admit(now);
                    if let Some(until) = open_until
                        && now < until {
                            prop_assert!(adm.ticket().is_none(), "admitted while open before the reset");
                        }
                    if let Some(t) = adm.ticket() { tickets.push(t); }
                }
                Op::Succeed(i) | Op::Fail(i, _) | Op::Ignore(i) if tickets.is_empty() => { let _ = i; }
                Op::Succeed(i) => { let t = tickets.remove(i % tickets.len()); b.handle_outcome(now, t, Outcome::Success); }
                Op::Fail(i, conn) => {
                    let t = tickets.remove(i % tickets.len());
                    let name = ["a", "b", "c"][conn as usize];
                    let before = b.retry_after(now);
                    let was_open = b.state(now) == BreakerState::Open;
                    b.handle_outcome(now, t, Outcome::Failure { connection: Some(name) });
                    if was_open {
                        prop_assert_eq!(b.retry_after(now), before, "failure while open changed the cooldown");
                    }
                }
                Op::Ignore(i) => { let t = tickets.remove(i % tickets.len()); b.handle_outcome(now, t, Outcome::Ignored); }
                Op::Reset => { b.reset(now); tickets.clear(); }
            }
            // Track the model's notion of the open deadline from observable state.
            open_until = match b.state(now) {
                BreakerState::Open => Some(now + b.retry_after(now)),
                _ => None,
            };
            prop_assert!(b.probes_in_flight() <= probes, "more probes than allowed");
            if b.state(now) == BreakerState::Open {
                prop_assert!(b.retry_after(now) <= c.reset_timeout * c.max_backoff_multiplier);
                prop_assert!(b.retry_after(now) > Duration::ZERO);
            }
        }
    }
}
