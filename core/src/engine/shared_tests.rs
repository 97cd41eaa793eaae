//! Shared state between replicas: what one replica collects, how another merges it, and that
//! nothing echoes back.

use super::*;
use crate::engine::{AttemptOutcome, Candidate, Route, Selection, Strategy};
use crate::settings::ResilienceSettings;
use crate::testutil::{cands, t0};
use crate::tried::Tried;
use crate::types::TerminalState;

const S: fn(u64) -> Duration = Duration::from_secs;

fn class_of(provider: &str) -> Option<ProviderClass> {
    (provider == "openai").then_some(ProviderClass::ApiKey)
}

/// A replica: breaker opens at 5 failures, lockouts on.
fn replica() -> Engine {
    let mut settings = ResilienceSettings::default();
    settings.breaker.api_key.failure_threshold = 5;
    settings.breaker.api_key.degradation_threshold = 5;
    settings.model_lockout.enabled = true;
    let mut e = Engine::new(settings, 1);
    e.set_sharing(true);
    e
}

/// Sends one request to `c` and reports `status` with `headers`.
fn fail(e: &mut Engine, now: Instant, c: &Candidate<'_>, status: u16, headers: &[(&str, &str)]) {
    let Selection::Pick { ticket, .. } =
        e.select(now, std::slice::from_ref(c), &Route::new(Strategy::Priority, "r"), &Tried::new())
    else {
        panic!("{} is not available", c.connection);
    };
    let outcome = AttemptOutcome::Upstream { status, headers, body: "" };
    e.record(now, c, "openai", ticket, outcome, false, false, None);
}

fn drain(e: &mut Engine) -> Vec<Event> {
    std::iter::from_fn(|| e.poll_event()).collect()
}

/// Moves what `from` collected into `to`, as the state backend does (no time in transit).
fn pass(from: &mut Engine, to: &mut Engine, now: Instant) -> Vec<SharedChange> {
    drain(from);
    let changes = from.take_shared(now);
    for ch in &changes {
        to.apply_shared(now, ch, &class_of);
    }
    changes
}

#[test]
fn failures_split_between_two_replicas_open_the_breaker_on_both() {
    let now = t0();
    let (mut a, mut b) = (replica(), replica());
    let c = cands(&["k1", "k2", "k3", "k4", "k5"]);
    for k in &c[..3] {
        fail(&mut a, now, k, 503, &[]);
    }
    for k in &c[3..] {
        fail(&mut b, now, k, 503, &[]);
    }
    assert_eq!(a.breaker_state(now, "openai"), BreakerState::Closed, "3 of 5 failures");
    assert_eq!(b.breaker_state(now, "openai"), BreakerState::Closed, "2 of 5 failures");
    let from_a = pass(&mut a, &mut b, now);
    assert_eq!(from_a.iter().filter(|c| matches!(c, SharedChange::ProviderFailure { .. })).count(), 3);
    assert_eq!(b.breaker_state(now, "openai"), BreakerState::Open, "B counted A's three failures");
    pass(&mut b, &mut a, now);
    assert_eq!(a.breaker_state(now, "openai"), BreakerState::Open, "A counted B's two failures");
}

#[test]
fn a_failure_delivered_twice_counts_once_as_locally() {
    let now = t0();
    let (mut a, mut b) = (replica(), replica());
    fail(&mut a, now, &cands(&["k1"])[0], 503, &[]);
    let sent = pass(&mut a, &mut b, now);
    for ch in &sent {
        b.apply_shared(now, ch, &class_of);
    }
    assert_eq!(b.breakers().get("openai").map(|b| b.failure_count()), Some(1), "k1 failed once within the window");
}

#[test]
fn an_opened_breaker_is_shared_with_its_deadline_and_never_echoes_back() {
    let now = t0();
    let (mut a, mut b) = (replica(), replica());
    let c = cands(&["k1", "k2", "k3", "k4", "k5"]);
    for k in &c {
        fail(&mut a, now, k, 503, &[]);
    }
    let sent = pass(&mut a, &mut b, now);
    let opened: Vec<_> = sent.iter().filter(|c| matches!(c, SharedChange::BreakerOpened { .. })).collect();
    assert_eq!(opened.len(), 1, "{sent:?}");
    let a_until = a.breakers().get("openai").map(|b| b.retry_after(now));
    assert_eq!(b.breakers().get("openai").map(|b| b.retry_after(now)), a_until, "the same deadline");
    let events = drain(&mut b);
    assert!(events.iter().any(|e| matches!(e, Event::Breaker(t) if t.to == BreakerState::Open)), "{events:?}");
    assert!(b.take_shared(now).is_empty(), "what B applied is not sent again");
}

#[test]
fn an_earlier_deadline_from_another_replica_never_shortens_an_open_breaker() {
    let now = t0();
    let mut b = replica();
    let open =
        |ms| SharedChange::BreakerOpened { provider: "openai".into(), open_remaining_ms: ms, open_cycle_count: 0 };
    b.apply_shared(now, &open(60_000), &class_of);
    b.apply_shared(now, &open(10_000), &class_of);
    assert_eq!(b.breakers().get("openai").map(|b| b.retry_after(now)), Some(S(60)));
    b.apply_shared(now, &open(90_000), &class_of);
    assert_eq!(b.breakers().get("openai").map(|b| b.retry_after(now)), Some(S(90)), "a later one extends it");
    b.apply_shared(now, &SharedChange::BreakerClosed { provider: "openai".into() }, &class_of);
    assert_eq!(b.breaker_state(now, "openai"), BreakerState::Closed, "a probe that succeeded elsewhere closes it");
    b.apply_shared(now, &open(60_000), &class_of);
    b.apply_shared(
        now,
        &SharedChange::BreakerOpened { provider: "unknown".into(), open_remaining_ms: 1, open_cycle_count: 0 },
        &class_of,
    );
    assert!(b.breakers().get("unknown").is_none(), "a provider this replica does not configure is ignored");
}

#[test]
fn a_cooldown_takes_the_later_deadline_and_a_terminal_state_is_never_overwritten() {
    let now = t0();
    let (mut a, mut b) = (replica(), replica());
    let c = cands(&["k1", "k2"]);
    fail(&mut a, now, &c[0], 429, &[("retry-after", "60")]);
    fail(&mut b, now, &c[0], 429, &[("retry-after", "5")]);
    pass(&mut a, &mut b, now);
    assert_eq!(b.connection("k1").rate_limited_until(now), Some(now + S(60)), "A's later deadline wins on B");
    pass(&mut b, &mut a, now);
    assert_eq!(a.connection("k1").rate_limited_until(now), Some(now + S(60)), "B's earlier one changes nothing on A");

    fail(&mut a, now, &c[1], 401, &[]);
    let b_events = {
        pass(&mut a, &mut b, now);
        drain(&mut b)
    };
    assert!(b_events.iter().any(|e| matches!(e, Event::ConnectionTerminal { .. })), "{b_events:?}");
    let banned = b.connection("k2").snapshot(now).terminal;
    assert!(banned.is_some());
    let other = TerminalState::CreditsExhausted;
    let mut snap = b.connection("k2").snapshot(now);
    snap.terminal = Some(other);
    b.apply_shared(
        now,
        &SharedChange::Connection { connection: "k2".into(), reason: Reason::AuthError, snapshot: snap },
        &class_of,
    );
    assert_eq!(b.connection("k2").snapshot(now).terminal, banned, "never overwritten");
}

#[test]
fn lockouts_take_the_later_deadline_and_operator_clears_travel() {
    let now = t0();
    let (mut a, mut b) = (replica(), replica());
    let c = cands(&["k1"]);
    fail(&mut a, now, &c[0], 429, &[("retry-after", "120")]);
    pass(&mut a, &mut b, now);
    let left = b.lockouts().remaining(now, "openai", "k1", "gpt-4o", None).map(|(d, _)| d);
    assert_eq!(left, a.lockouts().remaining(now, "openai", "k1", "gpt-4o", None).map(|(d, _)| d));
    assert!(left.is_some_and(|d| d > S(60)), "{left:?}");
    let short = SharedChange::Lockout {
        provider: "openai".into(),
        connection: "k1".into(),
        model: "GPT-4o".into(),
        reason: Reason::RateLimitExceeded,
        remaining_ms: 1_000,
    };
    b.apply_shared(now, &short, &class_of);
    assert_eq!(b.lockouts().remaining(now, "openai", "k1", "gpt-4o", None).map(|(d, _)| d), left, "kept the longer");
    a.clear_lockouts(Some(("openai", Some("k1"), "gpt-4o")));
    pass(&mut a, &mut b, now);
    assert_eq!(b.lockouts().remaining(now, "openai", "k1", "gpt-4o", None), None, "A's operator clear reached B");
    assert!(b.take_shared(now).is_empty(), "and is not sent back");
}

#[test]
fn ageing_shortens_every_remaining_time_and_ends_what_ran_out_in_transit() {
    let snap = ConnectionSnapshot {
        cooldown_remaining_ms: 3_000,
        last_cooldown_ms: 3_000,
        backoff_level: 2,
        ..ConnectionSnapshot::default()
    };
    let ch = SharedChange::Connection { connection: "k1".into(), reason: Reason::RateLimitExceeded, snapshot: snap };
    let SharedChange::Connection { snapshot, .. } = ch.clone().aged(Duration::from_millis(1_200)) else { panic!() };
    assert_eq!((snapshot.cooldown_remaining_ms, snapshot.cooldown_ended_ms_ago), (1_800, None));
    let SharedChange::Connection { snapshot, .. } = ch.aged(Duration::from_millis(5_000)) else { panic!() };
    assert_eq!((snapshot.cooldown_remaining_ms, snapshot.cooldown_ended_ms_ago), (0, Some(2_000)));
    let open = SharedChange::BreakerOpened { provider: "p".into(), open_remaining_ms: 500, open_cycle_count: 1 };
    assert_eq!(
        open.aged(S(1)),
        SharedChange::BreakerOpened { provider: "p".into(), open_remaining_ms: 0, open_cycle_count: 1 }
    );
}

#[test]
fn changes_travel_as_json_and_name_the_state_they_replace() {
    let ch = SharedChange::Lockout {
        provider: "openai".into(),
        connection: "k1".into(),
        model: " GPT-4o".into(),
        reason: Reason::RateLimitExceeded,
        remaining_ms: 7,
    };
    let json = serde_json::to_string(&ch).expect("serialises");
    assert!(json.contains(r#""kind":"lockout""#), "{json}");
    assert_eq!(serde_json::from_str::<SharedChange>(&json).expect("parses"), ch);
    assert_eq!(ch.store_key().as_deref(), Some("lockout:openai:k1:gpt-4o"));
    let failure = SharedChange::ProviderFailure { provider: "p".into(), connection: "k".into() };
    assert_eq!(failure.store_key(), None, "a failure is passed on, not stored");
}

#[test]
fn without_sharing_nothing_is_collected() {
    let now = t0();
    let mut e = replica();
    e.set_sharing(false);
    fail(&mut e, now, &cands(&["k1"])[0], 503, &[]);
    drain(&mut e);
    assert!(e.take_shared(now).is_empty());
    assert!(!e.is_sharing());
}

#[test]
fn times_too_large_to_represent_are_held_at_a_year_not_a_panic() {
    let now = t0();
    let mut b = replica();
    let huge = u64::MAX;
    b.apply_shared(
        now,
        &SharedChange::BreakerOpened { provider: "openai".into(), open_remaining_ms: huge, open_cycle_count: 0 },
        &class_of,
    );
    assert_eq!(b.breaker_state(now, "openai"), BreakerState::Open);
    let snapshot = ConnectionSnapshot {
        cooldown_remaining_ms: huge,
        expired_retry_in_ms: Some(huge),
        ..ConnectionSnapshot::default()
    };
    b.apply_shared(
        now,
        &SharedChange::Connection { connection: "k1".into(), reason: Reason::RateLimitExceeded, snapshot },
        &class_of,
    );
    assert!(b.connection("k1").rate_limited_until(now).is_some_and(|u| u > now + S(364 * 86_400)));
    let lock = SharedChange::Lockout {
        provider: "openai".into(),
        connection: "k1".into(),
        model: "gpt-4o".into(),
        reason: Reason::RateLimitExceeded,
        remaining_ms: huge,
    };
    b.apply_shared(now, &lock, &class_of);
    assert!(b.lockouts().remaining(now, "openai", "k1", "gpt-4o", None).is_some());
}
