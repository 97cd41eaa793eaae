//! Engine routing: targets and connections ordered by their strategies, the same-request skip
//! sets, the retry budget, tool limits, the M7 gate and the M8 wait decision.

use super::*;
use crate::testutil::t0;
use crate::tried::Tried;
use crate::types::ProviderClass;
use proptest::prelude::{ProptestConfig, any, prop_assert, proptest};

/// Two combo targets (`m1`, `m2`) on one provider, each over connections `a` and `b`.
fn two_targets_two_keys() -> Vec<Candidate<'static>> {
    let mut out = Vec::new();
    for (t, model) in ["m1", "m2"].into_iter().enumerate() {
        for conn in ["a", "b"] {
            out.push(Candidate {
                traits: Traits { target: t, ..Traits::default() },
                ..Candidate::new("p", ProviderClass::ApiKey, conn, model)
            });
        }
    }
    out
}

/// An attempt's outcome drawn by a property test: 0 success, 1 transport, 2 a 429, 3 a 503,
/// else a 401 that names a bad key.
pub(super) fn drawn_outcome(o: u8) -> AttemptOutcome<'static> {
    match o {
        0 => AttemptOutcome::Success,
        1 => AttemptOutcome::Transport,
        2 => AttemptOutcome::Upstream { status: 429, headers: &[], body: "" },
        3 => AttemptOutcome::Upstream { status: 503, headers: &[], body: "" },
        _ => AttemptOutcome::Upstream { status: 401, headers: &[], body: "invalid api key" },
    }
}

fn pick(e: &mut Engine, now: Instant, c: &[Candidate<'_>], route: &Route<'_>, tried: &Tried) -> (usize, Ticket) {
    match e.select(now, c, route, tried) {
        Selection::Pick { index, ticket } => (index, ticket),
        other => panic!("expected a pick, got {other:?}"),
    }
}

/// Picks the next candidate, fails it with `status` and `body`, and records that in `tried`;
/// returns what was picked.
fn pick_and_fail<'a>(
    e: &mut Engine,
    now: Instant,
    c: &[Candidate<'a>],
    route: &Route<'_>,
    tried: &mut Tried,
    status: u16,
    body: &str,
) -> (&'a str, &'a str) {
    let (i, t) = pick(e, now, c, route, tried);
    let outcome = AttemptOutcome::Upstream { status, headers: &[], body };
    let d = e.record(now, &c[i], c[i].provider, t, outcome, true, false, None);
    tried.failed(i, c[i].connection, d.as_ref());
    (c[i].model, c[i].connection)
}

#[test]
fn a_provider_level_failure_leaves_the_connection_for_the_next_target() {
    let now = t0();
    let mut e = Engine::new(ResilienceSettings::default(), 1);
    let c = two_targets_two_keys();
    let route = Route::new(Strategy::Priority, "combo");
    let mut tried = Tried::new();
    assert_eq!(pick_and_fail(&mut e, now, &c, &route, &mut tried, 503, ""), ("m1", "a"));
    // m1 on b comes next (same target), then m2 on a: a is still usable for m2.
    assert_eq!(pick_and_fail(&mut e, now, &c, &route, &mut tried, 503, ""), ("m1", "b"));
    let (k, _) = pick(&mut e, now, &c, &route, &tried);
    assert_eq!((c[k].model, c[k].connection), ("m2", "a"));
}

#[test]
fn a_connection_level_failure_skips_the_connection_for_every_target() {
    let now = t0();
    let mut e = Engine::new(ResilienceSettings::default(), 1);
    let c = two_targets_two_keys();
    let route = Route::new(Strategy::Priority, "combo");
    let mut tried = Tried::new();
    pick_and_fail(&mut e, now, &c, &route, &mut tried, 402, "insufficient credits");
    assert!(tried.is_exhausted("a"));
    let (j, _) = pick(&mut e, now, &c, &route, &tried);
    assert_eq!(c[j].connection, "b");
}

#[test]
fn the_retry_budget_stops_selection() {
    let now = t0();
    let mut settings = ResilienceSettings::default();
    settings.routing.max_attempts = 2;
    let mut e = Engine::new(settings, 1);
    let c = two_targets_two_keys();
    let route = Route::new(Strategy::Priority, "combo");
    let mut tried = Tried::new();
    for _ in 0..2 {
        pick_and_fail(&mut e, now, &c, &route, &mut tried, 502, "");
    }
    assert_eq!(e.select(now, &c, &route, &tried), Selection::BudgetSpent { attempts: 2 });
}

#[test]
fn a_learned_tool_limit_excludes_requests_with_more_tools() {
    let now = t0();
    let mut e = Engine::new(ResilienceSettings::default(), 1);
    let c = two_targets_two_keys();
    e.note_tool_limit("p", "m1", 4);
    let mut route = Route::new(Strategy::Priority, "combo");
    route.ask.tools = 5;
    let (i, _) = pick(&mut e, now, &c, &route, &Tried::new());
    assert_eq!(c[i].model, "m2");
    route.ask.tools = 4;
    let (i, _) = pick(&mut e, now, &c, &route, &Tried::new());
    assert_eq!(c[i].model, "m1");
}

#[test]
fn connection_strategy_orders_keys_inside_a_target_and_the_gate_demotes_a_full_one() {
    let now = t0();
    let mut e = Engine::new(ResilienceSettings::default(), 1);
    let mut c: Vec<Candidate<'_>> = ["a", "b", "c"]
        .into_iter()
        .map(|k| Candidate {
            traits: Traits { connection_strategy: Strategy::RoundRobin, max_concurrent: Some(1), ..Traits::default() },
            ..Candidate::new("p", ProviderClass::ApiKey, k, "m")
        })
        .collect();
    let route = Route::new(Strategy::Priority, "direct");
    let firsts: Vec<&str> = (0..3)
        .map(|_| {
            let (i, t) = pick(&mut e, now, &c, &route, &Tried::new());
            e.record(now, &c[i], "p", t, AttemptOutcome::Success, false, false, None);
            c[i].connection
        })
        .collect();
    assert_eq!(firsts, vec!["a", "b", "c"]);
    // Priority among keys; `a` holds its one slot, so `b` goes first.
    for x in &mut c {
        x.traits.connection_strategy = Strategy::Priority;
    }
    let (i, _held) = pick(&mut e, now, &c, &route, &Tried::new());
    assert_eq!(c[i].connection, "a");
    let (j, _) = pick(&mut e, now, &c, &route, &Tried::new());
    assert_eq!(c[j].connection, "b");
}

#[test]
fn least_used_spreads_finished_requests_by_how_many_each_key_and_target_was_sent() {
    let now = t0();
    let mut e = Engine::new(ResilienceSettings::default(), 1);
    // Keys of one target: nothing stays in flight, so only the dispatched counts separate them.
    let keys: Vec<Candidate<'_>> = ["a", "b", "c"]
        .into_iter()
        .map(|k| Candidate {
            traits: Traits { connection_strategy: Strategy::LeastUsed, ..Traits::default() },
            ..Candidate::new("p", ProviderClass::ApiKey, k, "m")
        })
        .collect();
    let route = Route::new(Strategy::Priority, "direct");
    let sent: Vec<&str> = (0..4)
        .map(|_| {
            let (i, t) = pick(&mut e, now, &keys, &route, &Tried::new());
            e.record(now, &keys[i], "p", t, AttemptOutcome::Success, false, false, None);
            keys[i].connection
        })
        .collect();
    assert_eq!(sent, vec!["a", "b", "c", "a"]);
    // Targets of a combo, one key each: the same, summed per target.
    let targets: Vec<Candidate<'_>> = [("q", "x"), ("r", "y")]
        .into_iter()
        .enumerate()
        .map(|(t, (p, k))| Candidate {
            traits: Traits { target: t, ..Traits::default() },
            ..Candidate::new(p, ProviderClass::ApiKey, k, "m")
        })
        .collect();
    let combo = Route::new(Strategy::LeastUsed, "combo");
    let sent: Vec<&str> = (0..3)
        .map(|_| {
            let (i, t) = pick(&mut e, now, &targets, &combo, &Tried::new());
            e.record(now, &targets[i], targets[i].provider, t, AttemptOutcome::Success, false, false, None);
            targets[i].connection
        })
        .collect();
    assert_eq!(sent, vec!["x", "y", "x"]);
}

#[test]
fn lkgp_follows_the_last_success() {
    let now = t0();
    let mut e = Engine::new(ResilienceSettings::default(), 1);
    let c = two_targets_two_keys();
    let route = Route::new(Strategy::Lkgp, "combo");
    e.note_success("combo", &c[2]);
    let (i, t) = pick(&mut e, now, &c, &route, &Tried::new());
    assert_eq!(c[i].model, "m2");
    e.record(now, &c[i], "p", t, AttemptOutcome::Success, false, false, None);
    assert_eq!(e.last_good("combo"), Some(("p", "m2")));
}

#[test]
fn quota_headers_steer_headroom() {
    let now = t0();
    let mut e = Engine::new(ResilienceSettings::default(), 1);
    let c = two_targets_two_keys();
    let low = [("x-ratelimit-limit-requests", "100"), ("x-ratelimit-remaining-requests", "3")];
    let high = [("x-ratelimit-limit-requests", "100"), ("x-ratelimit-remaining-requests", "90")];
    e.observe_quota(now, "a", &low, 0);
    e.observe_quota(now, "b", &high, 0);
    // Target-level headroom takes each target's best connection: both 0.9, so m1 (listed
    // first); inside m1, b (more headroom) is not chosen by priority among connections.
    let route = Route::new(Strategy::Headroom, "combo");
    let (i, _) = pick(&mut e, now, &c, &route, &Tried::new());
    assert_eq!(c[i].model, "m1");
    assert_eq!(e.quota(now, "a").and_then(|q| q.remaining), Some(0.03));
}

#[test]
fn cooldown_wait_bounds_and_reasons() {
    let e = Engine::new(ResilienceSettings::default(), 1);
    let s = Duration::from_secs;
    assert_eq!(e.cooldown_wait(Reason::RateLimitExceeded, s(2), 0, s(0)), Some(s(2) + Duration::from_millis(50)));
    for r in [Reason::QuotaExhausted, Reason::AuthError, Reason::NotFound, Reason::Unknown] {
        assert_eq!(e.cooldown_wait(r, s(2), 0, s(0)), None, "{r:?}");
    }
    // Longer than max_wait_ms (90 s), out of attempts (5), or out of budget (300 s).
    assert_eq!(e.cooldown_wait(Reason::RateLimitExceeded, s(91), 0, s(0)), None);
    assert_eq!(e.cooldown_wait(Reason::RateLimitExceeded, s(2), 5, s(0)), None);
    assert_eq!(e.cooldown_wait(Reason::RateLimitExceeded, s(2), 1, s(299)), None);
    let mut off = ResilienceSettings::default();
    off.combo_cooldown_wait.enabled = false;
    assert_eq!(Engine::new(off, 1).cooldown_wait(Reason::RateLimitExceeded, s(2), 0, s(0)), None);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Whatever the strategy, state, session and outcomes, nothing excluded is picked, no
    /// candidate is picked twice in a request, and a request never exceeds its attempt budget.
    #[test]
    fn no_strategy_picks_an_excluded_candidate_or_exceeds_the_budget(
        seed in any::<u64>(),
        strategy_ix in 0usize..16,
        conn_strategy_ix in 0usize..9,
        outcomes in proptest::collection::vec(0u8..5, 1..40),
        budget in 1i64..12,
        weights in proptest::collection::vec(0u32..4, 3),
        session in any::<bool>(),
    ) {
        let mut settings = ResilienceSettings::default();
        settings.routing.max_attempts = budget;
        settings.model_lockout.enabled = true;
        let mut e = Engine::new(settings, seed);
        let mut now = t0();
        let models = ["m1", "m2", "m3"];
        let providers = ["p", "q", "p"];
        let conns = [["p1", "p2"], ["q1", "q2"], ["p1", "p2"]];
        let mut c = Vec::new();
        for t in 0..3 {
            for k in conns[t] {
                c.push(Candidate {
                    traits: Traits {
                        target: t,
                        weight: weights[t],
                        connection_strategy: Strategy::FOR_CONNECTIONS[conn_strategy_ix],
                        ..Traits::default()
                    },
                    ..Candidate::new(providers[t], ProviderClass::ApiKey, k, models[t])
                });
            }
        }
        let route = Route {
            session: session.then_some("s1"),
            session_ttl: Duration::from_secs(600),
            ..Route::new(Strategy::ALL[strategy_ix], "combo")
        };
        let mut tried = Tried::new();
        let mut seen = std::collections::BTreeSet::new();
        for o in outcomes {
            now += Duration::from_millis(300);
            match e.select(now, &c, &route, &tried) {
                Selection::Pick { index, ticket } => {
                    prop_assert!(e.exclusion(now, &c[index]).is_none() || e.breaker_state(now, c[index].provider) == BreakerState::HalfOpen);
                    prop_assert!(!tried.is_exhausted(c[index].connection));
                    prop_assert!(seen.insert(index), "candidate {} picked twice", index);
                    let outcome = drawn_outcome(o);
                    let d = e.record(now, &c[index], c[index].provider, ticket, outcome, false, false, None);
                    tried.failed(index, c[index].connection, d.as_ref());
                    prop_assert!(i64::from(tried.attempts()) <= budget);
                }
                Selection::NoneEligible(_) => break,
                Selection::BudgetSpent { attempts } => {
                    prop_assert!(i64::from(attempts) == budget);
                    break;
                }
            }
        }
    }
}

#[test]
fn a_session_pin_beats_the_connection_strategy_until_its_key_fails() {
    let now = t0();
    let mut e = Engine::new(ResilienceSettings::default(), 1);
    let c: Vec<Candidate<'_>> = ["k1", "k2", "k3"]
        .into_iter()
        .map(|k| Candidate {
            traits: Traits { connection_strategy: Strategy::RoundRobin, ..Traits::default() },
            ..Candidate::new("p", ProviderClass::ApiKey, k, "m")
        })
        .collect();
    let mut route = Route::new(Strategy::Priority, "m");
    route.session = Some("header:s1");
    route.session_ttl = Duration::from_secs(600);
    let mut seen = Vec::new();
    for _ in 0..4 {
        let (i, t) = pick(&mut e, now, &c, &route, &Tried::new());
        e.record(now, &c[i], "p", t, AttemptOutcome::Success, false, false, None);
        seen.push(c[i].connection);
    }
    assert_eq!(seen, vec!["k1"; 4], "round-robin would rotate; the pin holds");
    let pins: Vec<Event> = std::iter::from_fn(|| e.poll_event()).filter(|x| matches!(x, Event::Pin(_))).collect();
    assert_eq!(pins.len(), 1, "set once, touched without a write: {pins:?}");
    // A 429 on the pinned key evicts the pin; the session moves to a key it never used.
    let mut tried = Tried::new();
    assert_eq!(pick_and_fail(&mut e, now, &c, &route, &mut tried, 429, "slow down"), ("m", "k1"));
    let (i, _) = pick(&mut e, now, &c, &route, &tried);
    assert_ne!(c[i].connection, "k1");
    assert_eq!(e.affinity().pinned(now, "header:s1", "p"), Some(c[i].connection));
    // Without a session the strategy decides.
    let plain = Route::new(Strategy::Priority, "m");
    let firsts: Vec<&str> = (0..2).map(|_| c[pick(&mut e, now, &c, &plain, &Tried::new()).0].connection).collect();
    assert_ne!(firsts[0], firsts[1]);
}

#[test]
fn the_set_waits_for_a_key_cooldown_with_jitter_but_never_for_an_open_breaker() {
    let now = t0();
    let mut settings = ResilienceSettings::default();
    settings.breaker.api_key.failure_threshold = 1;
    settings.breaker.api_key.degradation_threshold = 1;
    let mut e = Engine::new(settings, 1);
    let c = vec![Candidate::new("p", ProviderClass::ApiKey, "k1", "m")];
    let route = Route::new(Strategy::Priority, "combo");
    let mut tried = Tried::new();
    let hint = [("retry-after", "2")];
    let (i, t) = pick(&mut e, now, &c, &route, &tried);
    let outcome = AttemptOutcome::Upstream { status: 429, headers: &hint, body: "Rate limit reached" };
    let d = e.record(now, &c[i], "p", t, outcome, false, false, None);
    tried.failed(i, "k1", d.as_ref());
    let last = d.map(|d| d.reason);
    for _ in 0..20 {
        let w = e.set_wait(now, &c, last, 0, Duration::ZERO).expect("a short rate-limit cooldown is waited for");
        // 2 s + 50 ms margin + up to 10% jitter.
        assert!(w >= Duration::from_millis(2_050) && w <= Duration::from_millis(2_250), "{w:?}");
    }
    // A provider whose breaker is open is not waited for.
    let q = vec![Candidate::new("q", ProviderClass::ApiKey, "q1", "m")];
    let (j, t) = pick(&mut e, now, &q, &route, &Tried::new());
    let d = e.record(now, &q[j], "q", t, AttemptOutcome::Transport, false, false, None);
    assert_eq!(e.breaker_state(now, "q"), BreakerState::Open);
    assert_eq!(e.set_wait(now, &q, d.map(|d| d.reason), 0, Duration::ZERO), None);
}

#[test]
fn an_ip_bucketed_429_cools_siblings_without_overwriting_terminal_or_longer_cooldowns() {
    let now = t0();
    let mut e = Engine::new(ResilienceSettings::default(), 1);
    let k = |id| Candidate::new("free", ProviderClass::ApiKey, id, "m");
    // k3 is terminal, k4 cools for 10 minutes already.
    let (_, t) = pick(&mut e, now, &[k("k3")], &Route::new(Strategy::Priority, "x"), &Tried::new());
    let banned = AttemptOutcome::Upstream { status: 401, headers: &[], body: "your account has been banned" };
    e.record(now, &k("k3"), "free", t, banned, false, false, None);
    let terminal = e.connection("k3").terminal();
    assert!(terminal.is_some());
    let long = [("retry-after", "600")];
    let (_, t) = pick(&mut e, now, &[k("k4")], &Route::new(Strategy::Priority, "x"), &Tried::new());
    e.record(
        now,
        &k("k4"),
        "free",
        t,
        AttemptOutcome::Upstream { status: 429, headers: &long, body: "" },
        false,
        false,
        None,
    );
    // k1 gets a 429 with Retry-After 30 while its key never cools itself (disable_cooling).
    let hint = [("retry-after", "30")];
    let (_, t) = pick(&mut e, now, &[k("k1")], &Route::new(Strategy::Priority, "x"), &Tried::new());
    let d = e
        .record(
            now,
            &k("k1"),
            "free",
            t,
            AttemptOutcome::Upstream { status: 429, headers: &hint, body: "Rate limit reached" },
            false,
            true,
            None,
        )
        .expect("a decision");
    let cooled = e.cool_siblings(now, "k1", &d, &[("k2", false), ("k3", false), ("k4", false), ("k5", true)]);
    assert_eq!(cooled, vec!["k2".to_owned()]);
    assert_eq!(e.connection("k2").rate_limited_until(now), Some(now + Duration::from_secs(30)));
    assert_eq!(e.connection("k3").terminal(), terminal, "a terminal state is never overwritten");
    assert_eq!(e.connection("k4").rate_limited_until(now), Some(now + Duration::from_secs(600)));
    assert_eq!(e.connection("k5").rate_limited_until(now), None);
    // A 5xx is not an IP-bucket signal.
    let (_, t) = pick(&mut e, now, &[k("k6")], &Route::new(Strategy::Priority, "x"), &Tried::new());
    let d = e
        .record(
            now,
            &k("k6"),
            "free",
            t,
            AttemptOutcome::Upstream { status: 503, headers: &[], body: "" },
            false,
            false,
            None,
        )
        .expect("a decision");
    assert!(e.cool_siblings(now, "k6", &d, &[("k7", false)]).is_empty());
}

#[test]
fn several_targets_on_one_provider_pin_a_session_once() {
    // A combo whose three targets are three single-key targets of one provider: the pin is the
    // provider's, so only the first target in the order may move it (it used to be set and
    // dropped once per target, ending on the last target's key while the first one served).
    let now = t0();
    let mut e = Engine::new(ResilienceSettings::default(), 1);
    let c = crate::testutil::cands(&["k1", "k2", "k3"]);
    let mut route = Route::new(Strategy::Priority, "combo");
    route.session = Some("header:s1");
    route.session_ttl = Duration::from_secs(600);
    for _ in 0..3 {
        let (i, t) = pick(&mut e, now, &c, &route, &Tried::new());
        e.record(now, &c[i], "openai", t, AttemptOutcome::Success, false, false, None);
        assert_eq!(c[i].connection, "k1");
    }
    assert_eq!(e.affinity().pinned(now, "header:s1", "openai"), Some("k1"));
    let pins: Vec<Event> = std::iter::from_fn(|| e.poll_event()).filter(|x| matches!(x, Event::Pin(_))).collect();
    assert_eq!(pins.len(), 1, "{pins:?}");
}

#[test]
fn of_two_locks_ending_at_one_instant_the_waitable_one_decides_in_either_order() {
    let now = t0();
    let mut settings = ResilienceSettings::default();
    settings.model_lockout.enabled = true;
    settings.model_lockout.base_cooldown_ms = 2_000;
    let mut e = Engine::new(settings, 1);
    let busy = Candidate::new("p", ProviderClass::ApiKey, "k1", "busy");
    let gone = Candidate::new("p", ProviderClass::ApiKey, "k1", "gone");
    let route = Route::new(Strategy::Priority, "combo");
    // One lock for a server error (waitable), one for a missing model (never waited for),
    // both set at `now` with the same length.
    for (c, status, body) in [(busy, 503, "overloaded"), (gone, 404, "The model gone does not exist")] {
        let (i, t) = pick(&mut e, now, &[c], &route, &Tried::new());
        let outcome = AttemptOutcome::Upstream { status, headers: &[], body };
        e.record(now, &[c][i], "p", t, outcome, false, false, None);
    }
    let ends = |e: &Engine, c: &Candidate<'_>| e.exclusion(now, c);
    assert_eq!(ends(&e, &busy), ends(&e, &gone), "the two locks end together");
    assert_eq!(ends(&e, &busy).map(|x| x.0), Some(ExclusionReason::ModelLockout));
    for set in [[busy, gone], [gone, busy]] {
        let w = e.set_wait(now, &set, None, 0, Duration::ZERO).expect("the server error's lock is waited for");
        assert!(w >= Duration::from_millis(2_050) && w <= Duration::from_millis(2_250), "{w:?}");
    }
    // The missing model alone is never waited for.
    assert_eq!(e.set_wait(now, &[gone], None, 0, Duration::ZERO), None);
}
