//! Shared state between replicas: what one replica collects, how another merges it, and that
//! nothing echoes back.

use super::*;
use crate::connection::ConnectionSnapshot;
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

/// Routes one request of session `s1` among `c` (round robin, so only a pin keeps it on one
/// key) and reports success; the connection it went to.
fn route_session<'a>(e: &mut Engine, now: Instant, c: &[Candidate<'a>]) -> &'a str {
    let mut route = Route::new(Strategy::Priority, "r");
    route.session = Some("header:s1");
    route.session_ttl = S(600);
    let Selection::Pick { index, ticket, .. } = e.select(now, c, &route, &Tried::new()) else {
        panic!("nothing available")
    };
    e.record(now, &c[index], "openai", ticket, AttemptOutcome::Success, false, false, None);
    c[index].connection
}

fn round_robin<'a>(ids: &'a [&'a str]) -> Vec<Candidate<'a>> {
    cands(ids)
        .into_iter()
        .map(|c| Candidate {
            traits: crate::engine::Traits { connection_strategy: Strategy::RoundRobin, ..c.traits },
            ..c
        })
        .collect()
}

#[test]
fn a_session_pinned_on_one_replica_keeps_its_connection_on_the_other() {
    let now = t0();
    let (mut a, mut b) = (replica(), replica());
    let c = round_robin(&["k1", "k2", "k3"]);
    // B has used k1 already, so its own choice for a new session would be another key.
    let plain = Route::new(Strategy::Priority, "r");
    let Selection::Pick { index, ticket, .. } = b.select(now, &c, &plain, &Tried::new()) else { panic!() };
    b.record(now, &c[index], "openai", ticket, AttemptOutcome::Success, false, false, None);
    drain(&mut b);
    b.take_shared(now);
    let on_a = route_session(&mut a, now, &c);
    let sent = pass(&mut a, &mut b, now);
    assert!(
        sent.iter()
            .any(|ch| matches!(ch, SharedChange::Pin { connection, remaining_ms: 600_000, .. } if connection == on_a)),
        "{sent:?}"
    );
    assert_eq!(b.affinity().pinned(now, "header:s1", "openai"), Some(on_a), "{sent:?} {:?}", a.affinity().pins(now));
    let events = drain(&mut b);
    assert!(events.iter().any(|e| matches!(e, Event::Pin(PinEvent::Set { .. }))), "persisted like a local pin");
    assert!(b.take_shared(now).is_empty(), "a peer's pin is not shared back");
    for _ in 0..3 {
        assert_eq!(route_session(&mut b, now + S(1), &c), on_a, "B keeps the session where A pinned it");
    }
    // A late replica learns the pin from a full state.
    let mut late = replica();
    for ch in a.shared_state(now + S(100)) {
        late.apply_shared(now + S(100), &ch, &class_of);
    }
    assert_eq!(late.affinity().pinned(now + S(100), "header:s1", "openai"), Some(on_a));
    assert_eq!(late.affinity().pinned(now + S(600), "header:s1", "openai"), None, "with its remaining time only");
}

#[test]
fn a_dropped_pin_is_dropped_everywhere_and_a_peers_cooldown_evicts_without_echo() {
    let now = t0();
    let (mut a, mut b) = (replica(), replica());
    let c = round_robin(&["k1", "k2", "k3"]);
    let pinned = route_session(&mut a, now, &c);
    pass(&mut a, &mut b, now);
    // A 429 on the pinned key on A: A evicts the pin and cools the key; B hears both.
    let k = c.iter().find(|x| x.connection == pinned).expect("pinned candidate");
    fail(&mut a, now, k, 429, &[("retry-after", "60")]);
    let sent = pass(&mut a, &mut b, now);
    assert!(sent.iter().any(|ch| matches!(ch, SharedChange::PinDropped { .. })), "{sent:?}");
    assert_eq!(b.affinity().pinned(now, "header:s1", "openai"), None);
    assert!(b.take_shared(now).is_empty(), "nothing B did");

    // The same eviction caused on B by A's cooldown alone is not B's to share either.
    let (mut a, mut b) = (replica(), replica());
    let pinned = route_session(&mut b, now, &c);
    drain(&mut b);
    b.take_shared(now);
    let k = c.iter().find(|x| x.connection == pinned).expect("pinned candidate");
    fail(&mut a, now, k, 429, &[("retry-after", "60")]);
    let sent = pass(&mut a, &mut b, now);
    assert!(!sent.iter().any(|ch| matches!(ch, SharedChange::PinDropped { .. })), "A held no pin: {sent:?}");
    assert_eq!(b.affinity().pinned(now, "header:s1", "openai"), None, "A's cooldown evicted B's pin");
    let events = drain(&mut b);
    assert!(events.iter().any(|e| matches!(e, Event::Pin(PinEvent::Dropped { .. }))), "persisted: {events:?}");
    assert!(b.take_shared(now).is_empty(), "the eviction was A's doing: {:?}", b.take_shared(now));
}

#[test]
fn pins_and_the_emergency_switch_name_the_state_they_replace() {
    let pin =
        SharedChange::Pin { session: "s".into(), provider: "p".into(), connection: "k".into(), remaining_ms: 5_000 };
    let dropped = SharedChange::PinDropped { session: "s".into(), provider: "p".into() };
    assert_eq!(pin.store_key(), dropped.store_key());
    assert_eq!(pin.store_key().as_deref(), Some("pin:p:s"));
    assert_eq!(SharedChange::Emergency { enabled: true }.store_key().as_deref(), Some("emergency"));
    assert_eq!(
        pin.clone().aged(S(2)),
        SharedChange::Pin { session: "s".into(), provider: "p".into(), connection: "k".into(), remaining_ms: 3_000 }
    );
    let json = serde_json::to_string(&SharedChange::Emergency { enabled: true }).expect("json");
    assert_eq!(json, r#"{"kind":"emergency","enabled":true}"#);
    // The engine passes the switch by; a pin for a provider it does not configure is ignored.
    let mut e = replica();
    e.apply_shared(t0(), &SharedChange::Emergency { enabled: true }, &class_of);
    let foreign =
        SharedChange::Pin { session: "s".into(), provider: "p".into(), connection: "k".into(), remaining_ms: 5 };
    e.apply_shared(t0(), &foreign, &class_of);
    assert!(drain(&mut e).is_empty());
    assert_eq!(e.affinity().pinned(t0(), "s", "p"), None);
}

#[test]
fn a_peers_pin_refused_at_the_cap_is_neither_kept_nor_persisted() {
    let now = t0();
    let mut b = replica();
    b.affinity_mut().set_max_pins(1);
    let pin = |session: &str| SharedChange::Pin {
        session: session.to_owned(),
        provider: "openai".to_owned(),
        connection: "k1".to_owned(),
        remaining_ms: 60_000,
    };
    b.apply_shared(now, &pin("header:s1"), &class_of);
    assert!(matches!(drain(&mut b)[..], [Event::Pin(PinEvent::Set { .. })]), "the first is kept and persisted");
    b.apply_shared(now, &pin("header:s2"), &class_of);
    assert_eq!(b.affinity().pinned(now, "header:s2", "openai"), None, "no room for a second");
    assert!(drain(&mut b).is_empty(), "and nothing to persist of it");
    b.apply_shared(now, &pin("header:s1"), &class_of);
    assert_eq!(drain(&mut b).len(), 1, "the one kept is still renewed at the cap");
}
