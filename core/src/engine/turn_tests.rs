//! Keys tried in turn (priority and round robin inside one target): the pick is the first key
//! in turn that can serve, round robin shares requests evenly among the keys that can, and a
//! refusal names every key, as a check of them all would.

use super::*;
use crate::testutil::t0;
use crate::tried::Tried;
use crate::types::ProviderClass;
use proptest::prelude::{ProptestConfig, any, prop_assert, prop_assert_eq, proptest};

const KEYS: [&str; 6] = ["k0", "k1", "k2", "k3", "k4", "k5"];

fn keys(n: usize, strategy: Strategy) -> Vec<Candidate<'static>> {
    KEYS[..n]
        .iter()
        .map(|k| Candidate {
            traits: Traits { connection_strategy: strategy, ..Traits::default() },
            ..Candidate::new("p", ProviderClass::ApiKey, k, "m")
        })
        .collect()
}

/// Fails key `i` with a 429 asking for `secs` seconds (picked alone, by priority, so that the
/// provider's rotation does not move).
fn cool(e: &mut Engine, now: Instant, c: &[Candidate<'_>], i: usize, secs: &str) {
    let one = [Candidate { traits: Traits::default(), ..c[i] }];
    let Selection::Pick { ticket, .. } = e.select(now, &one, &Route::new(Strategy::Priority, "t"), &Tried::new())
    else {
        panic!("key {i} is free to cool");
    };
    let headers = [("retry-after", secs)];
    let outcome = AttemptOutcome::Upstream { status: 429, headers: &headers, body: "" };
    e.record(now, &c[i], "p", ticket, outcome, false, false, None);
}

fn picks(e: &mut Engine, now: Instant, c: &[Candidate<'_>], n: usize) -> Vec<usize> {
    (0..n)
        .map(|_| match e.select(now, c, &Route::new(Strategy::Priority, "t"), &Tried::new()) {
            Selection::Pick { index, ticket } => {
                e.record(now, &c[index], "p", ticket, AttemptOutcome::Success, false, false, None);
                index
            }
            other => panic!("expected a pick, got {other:?}"),
        })
        .collect()
}

#[test]
fn round_robin_shares_requests_evenly_among_the_keys_that_can_serve() {
    let mut e = Engine::new(ResilienceSettings::default(), 1);
    let now = t0();
    let c = keys(4, Strategy::RoundRobin);
    assert_eq!(picks(&mut e, now, &c, 6), [0, 1, 2, 3, 0, 1], "in turn, from the first key");
    cool(&mut e, now, &c, 2, "600");
    // The key after the last picked (k1) is k2, cooling: the turn passes to k3, and k2's
    // share goes to no one key in particular.
    let later = picks(&mut e, now, &c, 9);
    assert_eq!(later, [3, 0, 1, 3, 0, 1, 3, 0, 1]);
}

#[test]
fn priority_takes_the_first_key_that_can_serve() {
    let mut e = Engine::new(ResilienceSettings::default(), 1);
    let now = t0();
    let c = keys(3, Strategy::Priority);
    assert_eq!(picks(&mut e, now, &c, 2), [0, 0]);
    cool(&mut e, now, &c, 0, "600");
    assert_eq!(picks(&mut e, now, &c, 2), [1, 1]);
}

#[test]
fn a_session_with_every_key_cooling_is_refused_naming_each_key() {
    let mut e = Engine::new(ResilienceSettings::default(), 1);
    let now = t0();
    let c = keys(2, Strategy::RoundRobin);
    cool(&mut e, now, &c, 0, "600");
    cool(&mut e, now, &c, 1, "600");
    let route =
        Route { session: Some("s1"), session_ttl: Duration::from_secs(60), ..Route::new(Strategy::Priority, "t") };
    match e.select(now, &c, &route, &Tried::new()) {
        Selection::NoneEligible(excluded) => {
            assert_eq!(
                excluded.iter().map(|x| (x.index, x.reason)).collect::<Vec<_>>(),
                [(0, ExclusionReason::Unavailable), (1, ExclusionReason::Unavailable)]
            );
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn keys_that_are_not_alike_are_all_built_and_chosen_as_select_would() {
    let now = t0();
    let mut c = keys(3, Strategy::RoundRobin);
    c[2].traits.max_concurrent = Some(1);
    let session =
        Route { session: Some("s1"), session_ttl: Duration::from_secs(60), ..Route::new(Strategy::Priority, "t") };
    for route in [Route::new(Strategy::Priority, "t"), session] {
        let (mut e, mut lazy) =
            (Engine::new(ResilienceSettings::default(), 7), Engine::new(ResilienceSettings::default(), 7));
        for _ in 0..4 {
            let by_select = e.select(now, &c, &route, &Tried::new());
            let built = lazy.select_keys_in_turn(now, c.len(), |i| c[i], &route, &Tried::new());
            assert_eq!(format!("{built:?}"), format!("{by_select:?}"));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Whatever failed before, a pick in turn is a key that can serve and that this request has
    /// not tried; a refusal comes only when no key can serve, and names every key once, in
    /// order, with the exclusion a check of that key gives.
    #[test]
    fn keys_in_turn_pick_only_keys_that_can_serve_and_refuse_naming_every_key(
        seed in any::<u64>(),
        n in 1usize..=6,
        round_robin in any::<bool>(),
        outcomes in proptest::collection::vec((0u8..5, 0u64..3_000), 1..40),
    ) {
        let mut e = Engine::new(ResilienceSettings::default(), seed);
        // The same engine fed the same outcomes, asked with keys built one by one.
        let mut lazy = Engine::new(ResilienceSettings::default(), seed);
        let strategy = if round_robin { Strategy::RoundRobin } else { Strategy::Priority };
        let c = keys(n, strategy);
        let route = Route::new(Strategy::Priority, "t");
        let mut now = t0();
        let mut tried = Tried::new();
        for (o, wait) in outcomes {
            now += Duration::from_millis(wait);
            let selection = e.select(now, &c, &route, &tried);
            let built = lazy.select_keys_in_turn(now, n, |i| c[i], &route, &tried);
            prop_assert_eq!(format!("{:?}", built), format!("{:?}", selection), "keys built one by one pick alike");
            match selection {
                Selection::Pick { index, ticket } => {
                    prop_assert!(!tried.was_tried(index) && !tried.is_exhausted(c[index].connection));
                    let open = e.breaker_state(now, "p") == BreakerState::HalfOpen;
                    prop_assert!(open || e.exclusion(now, &c[index]).is_none(), "picked {} while excluded", index);
                    let outcome = super::routing_tests::drawn_outcome(o);
                    let d = e.record(now, &c[index], "p", ticket, outcome, false, false, None);
                    lazy.record(now, &c[index], "p", ticket, outcome, false, false, None);
                    tried.failed(index, c[index].connection, d.as_ref());
                    if o == 0 {
                        tried = Tried::new();
                    }
                }
                Selection::NoneEligible(excluded) => {
                    let named: Vec<usize> = excluded.iter().map(|x| x.index).collect();
                    prop_assert_eq!(named, (0..n).collect::<Vec<_>>());
                    for x in &excluded {
                        let c = &c[x.index];
                        if x.reason != ExclusionReason::Skipped && x.reason != ExclusionReason::CircuitOpen {
                            prop_assert_eq!(e.exclusion(now, c), Some((x.reason, x.retry_after)));
                        }
                    }
                    tried = Tried::new();
                }
                Selection::BudgetSpent { .. } => tried = Tried::new(),
            }
        }
    }
}
