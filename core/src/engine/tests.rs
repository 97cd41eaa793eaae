//! Engine tests: selection, outcome recording across layers, exclusions, determinism.

use super::*;
use crate::testutil::{cands, t0};
use crate::tried::Tried;
use crate::types::ProviderClass;

const S: fn(u64) -> Duration = Duration::from_secs;

/// Settings whose API-key breaker opens on the first failure.
fn one_failure_opens() -> ResilienceSettings {
    let mut settings = ResilienceSettings::default();
    settings.breaker.api_key.failure_threshold = 1;
    settings.breaker.api_key.degradation_threshold = 1;
    settings
}

fn pick(e: &mut Engine, now: Instant, c: &[Candidate<'_>], strategy: Strategy) -> (usize, Ticket) {
    match e.select(now, c, &Route::new(strategy, "k"), &Tried::new()) {
        Selection::Pick { index, ticket } => (index, ticket),
        other => panic!("expected a pick, got {other:?}"),
    }
}

fn upstream<'a>(status: u16, body: &'a str) -> AttemptOutcome<'a> {
    AttemptOutcome::Upstream { status, headers: &[], body }
}

#[test]
fn a_429_cools_one_key_and_the_next_one_serves() {
    let now = t0();
    let mut e = Engine::new(ResilienceSettings::default(), 1);
    let c = cands(&["k1", "k2"]);
    let (i, t) = pick(&mut e, now, &c, Strategy::Priority);
    assert_eq!(i, 0);
    let d = e.record(now, &c[i], "openai", t, upstream(429, "slow down"), false, false, None).expect("decision");
    assert!(d.should_fallback);
    let (i, _) = pick(&mut e, now, &c, Strategy::Priority);
    assert_eq!(i, 1, "k1 is cooling");
    assert_eq!(e.breaker_state(now, "openai"), BreakerState::Closed, "a 429 never counts toward the breaker");
    assert!(matches!(e.poll_event(), Some(Event::ConnectionCooldown { ref connection, .. }) if &**connection == "k1"));
}

#[test]
fn an_open_breaker_excludes_its_provider_wherever_its_candidates_stand() {
    // Providers interleaved (a, b, a, b) with a's breaker open: each run of candidates reads
    // its own provider's breaker, so both of a's are refused and b's are tried in order.
    let mut now = t0();
    let mut settings = ResilienceSettings::default();
    settings.breaker.api_key.dedupe_window_ms = 0;
    let mut e = Engine::new(settings, 1);
    let only_a = [Candidate::new("a", ProviderClass::ApiKey, "a1", "m")];
    for _ in 0..12 {
        let (i, t) = pick(&mut e, now, &only_a, Strategy::Priority);
        e.record(now, &only_a[i], "a", t, upstream(503, "unavailable"), false, false, None);
        now += Duration::from_millis(10);
    }
    assert_eq!(e.breaker_state(now, "a"), BreakerState::Open);
    let mixed = [
        Candidate::new("a", ProviderClass::ApiKey, "a1", "m"),
        Candidate::new("b", ProviderClass::ApiKey, "b1", "m"),
        Candidate::new("a", ProviderClass::ApiKey, "a2", "m"),
        Candidate::new("b", ProviderClass::ApiKey, "b2", "m"),
    ];
    let (i, t) = pick(&mut e, now, &mixed, Strategy::Priority);
    assert_eq!(mixed[i].connection, "b1");
    e.record(now, &mixed[i], "b", t, upstream(429, "rate limited"), false, false, None);
    match e.select(now, &mixed, &Route::new(Strategy::Priority, "k"), &Tried::new()) {
        Selection::Pick { index, .. } => assert_eq!(mixed[index].connection, "b2"),
        other => panic!("{other:?}"),
    }
    let mut tried = Tried::new();
    tried.failed(3, "b2", None);
    match e.select(now, &mixed, &Route::new(Strategy::Priority, "k"), &tried) {
        Selection::NoneEligible(ex) => {
            let reasons: Vec<_> = ex.iter().map(|x| (x.index, x.reason)).collect();
            assert_eq!(
                reasons,
                [
                    (0, ExclusionReason::CircuitOpen),
                    (1, ExclusionReason::Unavailable),
                    (2, ExclusionReason::CircuitOpen),
                    (3, ExclusionReason::Skipped)
                ]
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn provider_failures_open_the_breaker_and_everything_is_excluded() {
    let mut now = t0();
    let mut settings = ResilienceSettings::default();
    settings.breaker.api_key.dedupe_window_ms = 0;
    let mut e = Engine::new(settings, 1);
    let c = cands(&["k1", "k2"]);
    for _ in 0..12 {
        let (i, t) = pick(&mut e, now, &c, Strategy::Priority);
        e.record(now, &c[i], "openai", t, upstream(503, "unavailable"), false, false, None);
        now += Duration::from_millis(10);
    }
    assert_eq!(e.breaker_state(now, "openai"), BreakerState::Open);
    match e.select(now, &c, &Route::new(Strategy::Priority, "k"), &Tried::new()) {
        Selection::NoneEligible(ex) => {
            assert_eq!(ex.len(), 2);
            assert!(ex.iter().all(|x| x.reason == ExclusionReason::CircuitOpen
                && x.retry_after > Duration::ZERO
                && x.reason.is_timer()));
        }
        other => panic!("{other:?}"),
    }
    // The connections themselves were never cooled by provider-level failures.
    assert_eq!(e.connection("k1").status(now), crate::types::ConnectionStatus::Active);
    // After the reset timeout one probe goes through, and its success closes the breaker.
    now += S(30);
    let (i, t) = pick(&mut e, now, &c, Strategy::Priority);
    assert!(t.is_probe());
    assert!(
        matches!(e.select(now, &c, &Route::new(Strategy::Priority, "k"), &Tried::new()), Selection::NoneEligible(_)),
        "one probe at a time"
    );
    e.record(now, &c[i], "openai", t, AttemptOutcome::Success, false, false, None);
    assert_eq!(e.breaker_state(now, "openai"), BreakerState::Closed);
}

#[test]
fn same_provider_next_is_not_counted() {
    let now = t0();
    let mut e = Engine::new(one_failure_opens(), 1);
    let c = cands(&["k1"]);
    let (i, t) = pick(&mut e, now, &c, Strategy::Priority);
    e.record(now, &c[i], "openai", t, upstream(502, "bad gateway"), true, false, None);
    assert_eq!(e.breaker_state(now, "openai"), BreakerState::Closed);
}

#[test]
fn neutral_outcomes_touch_nothing() {
    let now = t0();
    let mut e = Engine::new(ResilienceSettings::default(), 1);
    let c = cands(&["k1"]);
    for _ in 0..50 {
        let (i, t) = pick(&mut e, now, &c, Strategy::Priority);
        assert!(e.record(now, &c[i], "openai", t, AttemptOutcome::Neutral, false, false, None).is_none());
    }
    assert_eq!(e.breaker_state(now, "openai"), BreakerState::Closed);
    assert_eq!(e.breakers().get("openai").map(|b| b.failure_count()), Some(0));
    assert_eq!(e.connection("k1"), ConnectionState::default());
}

#[test]
fn skip_and_terminal_exclusions_are_not_timers() {
    let now = t0();
    let mut e = Engine::new(ResilienceSettings::default(), 1);
    let c = cands(&["k1", "k2"]);
    let (i, t) = pick(&mut e, now, &c, Strategy::Priority);
    e.record(now, &c[i], "openai", t, upstream(401, "invalid api key"), false, false, None);
    let mut skip = Tried::new();
    skip.failed(1, "k2", None);
    match e.select(now, &c, &Route::new(Strategy::Priority, "k"), &skip) {
        Selection::NoneEligible(ex) => {
            assert_eq!(ex[0].reason, ExclusionReason::Terminal(TerminalState::Expired));
            assert_eq!(ex[1].reason, ExclusionReason::Skipped);
            assert!(ex.iter().all(|x| !x.reason.is_timer()));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn model_lockout_excludes_only_that_model() {
    let now = t0();
    let mut settings = ResilienceSettings::default();
    settings.model_lockout.enabled = true;
    let mut e = Engine::new(settings, 1);
    let c = cands(&["k1"]);
    let (i, t) = pick(&mut e, now, &c, Strategy::Priority);
    e.record(now, &c[i], "openai", t, upstream(503, "overloaded"), false, false, None);
    assert_eq!(e.exclusion(now, &c[0]).map(|x| x.0), Some(ExclusionReason::ModelLockout));
    let other = Candidate { model: "gpt-4o-mini", ..c[0] };
    assert_eq!(e.exclusion(now, &other), None);
    assert_eq!(e.lockouts().list(now).len(), 1);
}

#[test]
fn an_upstream_hint_sets_a_lockout_only_when_longer_than_the_base() {
    let now = t0();
    let mut settings = ResilienceSettings::default();
    settings.model_lockout.enabled = true;
    settings.model_lockout.base_cooldown_ms = 120_000;
    let lock_after = |retry_after: &str| {
        let mut e = Engine::new(settings.clone(), 1);
        let c = cands(&["k1"]);
        let (i, t) = pick(&mut e, now, &c, Strategy::Priority);
        let headers = [("retry-after", retry_after)];
        let out = AttemptOutcome::Upstream { status: 429, headers: &headers, body: "rate limited" };
        e.record(now, &c[i], "openai", t, out, false, false, None);
        e.lockouts().remaining(now, "openai", "k1", "gpt-4o", None).map(|(d, _)| d)
    };
    // Retry-After 5 s is shorter than the 120 s base: the base applies, not 5 s.
    assert_eq!(lock_after("5"), Some(S(120)));
    // Retry-After 600 s is longer: it sets the lock.
    assert_eq!(lock_after("600"), Some(S(600)));
}

#[test]
fn round_robin_rotates_and_random_is_seeded() {
    let now = t0();
    let ids = ["a", "b", "c", "d", "e", "f", "g", "h"];
    let c = cands(&ids);
    let mut e = Engine::new(ResilienceSettings::default(), 7);
    let rr: Vec<usize> = (0..9)
        .map(|_| {
            let (i, t) = pick(&mut e, now, &c, Strategy::RoundRobin);
            e.record(now, &c[i], "openai", t, AttemptOutcome::Success, false, false, None);
            i
        })
        .collect();
    assert_eq!(rr, vec![0, 1, 2, 3, 4, 5, 6, 7, 0]);
    let draw = |seed| {
        let mut e = Engine::new(ResilienceSettings::default(), seed);
        (0..20)
            .map(|_| {
                let (i, t) = pick(&mut e, now, &c, Strategy::Random);
                e.record(now, &c[i], "openai", t, AttemptOutcome::Success, false, false, None);
                i
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(draw(42), draw(42), "same seed, same choices");
    assert_ne!(draw(42), draw(43));
}

#[test]
fn reset_all_closes_breakers_and_clears_lockouts() {
    let now = t0();
    let mut settings = ResilienceSettings::default();
    settings.model_lockout.enabled = true;
    settings.breaker.api_key.failure_threshold = 1;
    settings.breaker.api_key.degradation_threshold = 1;
    let mut e = Engine::new(settings, 1);
    let c = cands(&["k1"]);
    let (i, t) = pick(&mut e, now, &c, Strategy::Priority);
    e.record(now, &c[i], "openai", t, upstream(503, "x"), false, false, None);
    assert_eq!(e.breaker_state(now, "openai"), BreakerState::Open);
    assert_eq!(e.reset_all(now), 1);
    assert_eq!(e.breaker_state(now, "openai"), BreakerState::Closed);
    assert!(e.lockouts().list(now).is_empty());
    assert!(e.poll_timeout(now).is_none());
}

#[test]
fn recheck_lets_the_probe_through_but_not_a_stale_ticket() {
    let now = t0();
    let mut e = Engine::new(one_failure_opens(), 1);
    let c = cands(&["k1"]);
    let (_, stale) = pick(&mut e, now, &c, Strategy::Priority);
    let (i, t) = pick(&mut e, now, &c, Strategy::Priority);
    e.record(now, &c[i], "openai", t, upstream(503, "x"), false, false, None);
    // A ticket admitted before the breaker opened is stopped before it is sent.
    assert_eq!(e.recheck(now, &c[0], stale).map(|x| x.0), Some(ExclusionReason::CircuitOpen));
    // After the reset timeout the probe holds the only slot; its own recheck passes.
    let later = now + S(30);
    let (_, probe) = pick(&mut e, later, &c, Strategy::Priority);
    assert!(probe.is_probe());
    assert_eq!(e.exclusion(later, &c[0]).map(|x| x.0), Some(ExclusionReason::CircuitOpen), "no second probe");
    assert_eq!(e.recheck(later, &c[0], probe), None);
    assert_eq!(e.recheck(later, &c[0], stale).map(|x| x.0), Some(ExclusionReason::CircuitOpen));
}

#[test]
fn recheck_stops_a_ticket_whose_connection_started_cooling() {
    let now = t0();
    let mut e = Engine::new(ResilienceSettings::default(), 1);
    let c = cands(&["k1"]);
    let (_, waiting) = pick(&mut e, now, &c, Strategy::Priority);
    let (i, t) = pick(&mut e, now, &c, Strategy::Priority);
    e.record(now, &c[i], "openai", t, upstream(429, "slow down"), false, false, None);
    assert_eq!(e.recheck(now, &c[0], waiting).map(|x| x.0), Some(ExclusionReason::Unavailable));
}

#[test]
fn refusals_follow_the_exclusions() {
    let c = cands(&["k1", "k2"]);
    let ex = |reason, secs| Exclusion { index: 0, reason, retry_after: S(secs) };
    let two = |a: Exclusion, b: Exclusion| vec![a, Exclusion { index: 1, ..b }];
    let banned = ExclusionReason::Terminal(TerminalState::Banned);
    assert_eq!(refusal(&c, &two(ex(banned, 0), ex(banned, 0)), false), Refusal::AllTerminal);
    assert_eq!(
        refusal(&c, &two(ex(ExclusionReason::CircuitOpen, 9), ex(ExclusionReason::CircuitOpen, 4)), true),
        Refusal::CircuitOpen { retry_after: S(4) }
    );
    assert_eq!(
        refusal(&c, &two(ex(ExclusionReason::Unavailable, 7), ex(banned, 0)), false),
        Refusal::ConnectionsCooling { retry_after: S(7) }
    );
    assert_eq!(
        refusal(&c, &two(ex(ExclusionReason::Unavailable, 7), ex(ExclusionReason::ModelLockout, 3)), true),
        Refusal::AllCooling { retry_after: S(3) },
        "a combo says every target is cooling"
    );
    // Two providers' breakers open: not one provider's fault.
    let mixed = vec![
        Candidate::new("a", ProviderClass::ApiKey, "a1", "m"),
        Candidate::new("b", ProviderClass::ApiKey, "b1", "m"),
    ];
    assert_eq!(
        refusal(&mixed, &two(ex(ExclusionReason::CircuitOpen, 9), ex(ExclusionReason::CircuitOpen, 5)), true),
        Refusal::AllCooling { retry_after: S(5) }
    );
    assert_eq!(
        refusal(&c, &two(ex(ExclusionReason::Skipped, 0), ex(ExclusionReason::Skipped, 0)), false),
        Refusal::NoExecutable
    );
    // A retry-after under a second is reported as one second.
    assert_eq!(
        refusal(
            &c,
            &[Exclusion { index: 0, reason: ExclusionReason::Unavailable, retry_after: Duration::from_millis(300) }],
            false
        ),
        Refusal::ConnectionsCooling { retry_after: S(1) }
    );
}

#[test]
fn a_daily_quota_cools_until_midnight_utc() {
    use crate::hint::until_midnight_utc;
    assert_eq!(until_midnight_utc(0), Duration::from_secs(86_400));
    assert_eq!(until_midnight_utc(86_400_000 - 1), Duration::from_millis(1));
    // 2026-05-28T20:26:40Z: 3 h 33 min 20 s to midnight.
    let wall = 1_780_000_000_000;
    assert_eq!(until_midnight_utc(wall), Duration::from_secs(12_800));
    let now = t0();
    let mut e = Engine::new(ResilienceSettings::default(), 1);
    let c = cands(&["k1"]);
    let (i, t) = pick(&mut e, now, &c, Strategy::Priority);
    let body = "daily quota exhausted, try again tomorrow";
    let d = e.record(now, &c[i], "openai", t, upstream(429, body), false, false, Some(wall)).expect("decision");
    assert_eq!(d.client_retry_after, Some(Duration::from_secs(12_800)));
    assert_eq!(e.connection("k1").rate_limited_until(now), Some(now + Duration::from_secs(12_800)));
}

#[test]
fn an_account_that_needs_a_new_sign_in_ends_expired_until_it_is_reset() {
    let mut e = Engine::new(ResilienceSettings::default(), 1);
    let now = t0();
    assert!(e.end_connection(now, "k1", "the token endpoint refused the refresh token"));
    let state = e.connection("k1");
    assert_eq!(state.terminal(), Some(TerminalState::Expired));
    assert_eq!(state.last_error(), Some("the token endpoint refused the refresh token"));
    assert!(matches!(e.poll_event(), Some(Event::ConnectionTerminal { state: TerminalState::Expired, .. })));
    // A terminal state is never overwritten.
    assert!(!e.end_connection(now + S(1), "k1", "again"));
    assert!(e.poll_event().is_none());
    // New credentials end it; on a connection that is not expired they change nothing.
    assert!(e.renew_connection(now + S(2), "k1"));
    assert_eq!(e.connection("k1").terminal(), None);
    assert!(matches!(e.poll_event(), Some(Event::ConnectionRecovered { .. })));
    assert!(!e.renew_connection(now + S(3), "k1"));
    assert!(!e.renew_connection(now + S(3), "never-seen"));
    assert!(e.poll_event().is_none());
}

#[test]
fn a_failed_egress_proxy_cools_its_connection_on_the_ladder_and_never_the_breaker() {
    let now = t0();
    let mut e = Engine::new(one_failure_opens(), 1);
    let c = cands(&["k1", "k2"]);
    let (i, t) = pick(&mut e, now, &c, Strategy::Priority);
    let d = e.record(now, &c[i], "openai", t, AttemptOutcome::Egress, false, false, None).expect("decision");
    assert!(d.should_fallback && !d.trips_breaker, "{d:?}");
    assert!(matches!(d.connection, crate::classify::ConnectionEffect::Cooldown { new_level: 1, .. }), "{d:?}");
    assert_eq!(e.breaker_state(now, "openai"), BreakerState::Closed, "the provider is not at fault");
    let (i, _) = pick(&mut e, now, &c, Strategy::Priority);
    assert_eq!(i, 1, "k1 is cooling, its sibling serves");
}
