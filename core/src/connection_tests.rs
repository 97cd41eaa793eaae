//! Connection state tests: SPEC M3 rows, BEHAVIOUR.md §3.6–§3.7 and §12.15
//! (request-rejected streak), plus a model-based proptest.

use super::*;
use crate::classify::{CooldownProfile, ErrorInput, classify};
use crate::testutil::t0;
use crate::types::{Format, ProviderClass};
use proptest::prelude::*;

const S: fn(u64) -> Duration = Duration::from_secs;

fn api_profile() -> CooldownProfile {
    CooldownProfile { base: S(3), max_steps: 5, cap: S(1800), use_hints: true, stated_cap: S(8 * 86_400) }
}

fn decide(class: ProviderClass, status: u16, headers: &[(&str, &str)], body: &str, level: u32) -> Decision {
    let profile = match class {
        ProviderClass::OAuth => {
            CooldownProfile { base: S(5), max_steps: 8, cap: S(1800), use_hints: false, stated_cap: S(8 * 86_400) }
        }
        _ => api_profile(),
    };
    classify(
        &ErrorInput {
            provider: "p",
            provider_id: "p",
            format: Format::Openai,
            class,
            status,
            headers,
            body,
            backoff_level: level,
            wall_now_ms: None,
            until_daily_reset: None,
        },
        &profile,
        &[],
    )
}

/// Fails the connection as the engine does: with the level it would classify with.
fn fail(c: &mut ConnectionState, now: Instant, class: ProviderClass, status: u16, body: &str) -> Applied {
    c.on_selected(now);
    let d = decide(class, status, &[], body, c.level_for(now));
    c.record_failure(now, &d, body, false)
}

#[test]
fn api_key_ladder_3_6_12_24_48_96_when_failing_right_after_expiry() {
    let mut now = t0();
    let mut c = ConnectionState::new();
    let mut seen = Vec::new();
    for _ in 0..8 {
        match fail(&mut c, now, ProviderClass::ApiKey, 429, "") {
            Applied::Cooldown { until, .. } => {
                seen.push((until - now).as_secs());
                now = until;
            }
            other => panic!("expected a cooldown, got {other:?}"),
        }
    }
    assert_eq!(seen, vec![3, 6, 12, 24, 48, 96, 96, 96]);
}

#[test]
fn level_restarts_after_a_quiet_period() {
    let now = t0();
    let mut c = ConnectionState::new();
    fail(&mut c, now, ProviderClass::ApiKey, 429, "");
    let t = now + S(3);
    fail(&mut c, t, ProviderClass::ApiKey, 429, "");
    assert_eq!(c.backoff_level(), 2);
    // The 6 s cooldown ends at t+6; quiet for another 6 s, then selected: back to level 0.
    let later = t + S(12);
    assert_eq!(c.level_for(later), 0);
    assert_eq!(
        fail(&mut c, later, ProviderClass::ApiKey, 429, ""),
        Applied::Cooldown { until: later + S(3), level: 1 }
    );
}

#[test]
fn retry_after_wins_for_api_keys() {
    let now = t0();
    let mut c = ConnectionState::new();
    let d = decide(ProviderClass::ApiKey, 429, &[("Retry-After", "42")], "", 3);
    assert_eq!(c.record_failure(now, &d, "", false), Applied::Cooldown { until: now + S(42), level: 0 });
    assert_eq!(d.client_retry_after, Some(S(42)));
}

#[test]
fn oauth_ignores_retry_hints_and_uses_its_ladder() {
    let now = t0();
    let mut c = ConnectionState::new();
    let d = decide(ProviderClass::OAuth, 429, &[("Retry-After", "42")], "", 0);
    assert_eq!(c.record_failure(now, &d, "", false), Applied::Cooldown { until: now + S(5), level: 1 });
}

#[test]
fn concurrent_failures_raise_the_level_once() {
    let now = t0();
    let mut c = ConnectionState::new();
    let d = decide(ProviderClass::ApiKey, 429, &[], "", 0);
    let first = c.record_failure(now, &d, "", false);
    for i in 1..10 {
        assert_eq!(c.record_failure(now + Duration::from_millis(i * 100), &d, "", false), Applied::Unchanged);
    }
    assert_eq!(first, Applied::Cooldown { until: now + S(3), level: 1 });
    assert_eq!(c.backoff_level(), 1);
    assert_eq!(c.rate_limited_until(now), Some(now + S(3)));
}

#[test]
fn terminal_states_are_never_overwritten() {
    let now = t0();
    for (status, body, state) in [
        (401, "This account has been deactivated", TerminalState::Banned),
        (402, "credit_balance_too_low", TerminalState::CreditsExhausted),
        (401, "invalid token", TerminalState::Expired),
    ] {
        let mut c = ConnectionState::new();
        assert_eq!(fail(&mut c, now, ProviderClass::ApiKey, status, body), Applied::Terminal(state), "{status} {body}");
        assert_eq!(fail(&mut c, now + S(1), ProviderClass::ApiKey, 429, "rate limit"), Applied::Unchanged);
        assert_eq!(c.terminal(), Some(state));
        assert_eq!(c.status(now + S(1)), ConnectionStatus::from(state));
    }
}

#[test]
fn expired_allows_three_spaced_retries_then_stays() {
    let now = t0();
    let mut c = ConnectionState::new();
    fail(&mut c, now, ProviderClass::ApiKey, 401, "token expired");
    assert_eq!(c.availability(now), Availability::Terminal { state: TerminalState::Expired, retry_in: Some(S(300)) });
    let mut t = now;
    for gap in [300, 600, 1200] {
        t += S(gap);
        assert_eq!(c.availability(t), Availability::Available, "retry due after {gap} s");
        c.on_selected(t);
        // Only one request probes the credentials.
        assert!(matches!(c.availability(t), Availability::Terminal { .. }));
        fail(&mut c, t, ProviderClass::ApiKey, 401, "token expired");
    }
    assert_eq!(
        c.availability(t + S(100_000)),
        Availability::Terminal { state: TerminalState::Expired, retry_in: None }
    );
}

#[test]
fn expired_retry_success_recovers() {
    let now = t0();
    let mut c = ConnectionState::new();
    fail(&mut c, now, ProviderClass::ApiKey, 401, "expired");
    c.on_selected(now + S(300));
    c.record_success();
    assert_eq!(c.status(now + S(300)), ConnectionStatus::Active);
}

#[test]
fn request_rejected_streak_5min_15min_then_banned() {
    let t0 = t0();
    let body = "Request not allowed";
    let mut c = ConnectionState::new();
    assert_eq!(fail(&mut c, t0, ProviderClass::OAuth, 403, body), Applied::Cooldown { until: t0 + S(300), level: 0 });
    // Refusals in flight during the cooldown are the same episode.
    for s in 1..=3 {
        assert_eq!(fail(&mut c, t0 + S(s), ProviderClass::OAuth, 403, body), Applied::Unchanged);
    }
    let t1 = t0 + S(300);
    assert_eq!(fail(&mut c, t1, ProviderClass::OAuth, 403, body), Applied::Cooldown { until: t1 + S(900), level: 0 });
    let t2 = t1 + S(900);
    assert_eq!(fail(&mut c, t2, ProviderClass::OAuth, 403, body), Applied::Terminal(TerminalState::Banned));
}

#[test]
fn request_rejected_streak_resets_after_window_or_success() {
    let t0 = t0();
    let body = "Request not allowed";
    let mut c = ConnectionState::new();
    fail(&mut c, t0, ProviderClass::OAuth, 403, body);
    let later = t0 + REQUEST_REJECTED_WINDOW + S(1);
    assert_eq!(
        fail(&mut c, later, ProviderClass::OAuth, 403, body),
        Applied::Cooldown { until: later + S(300), level: 0 }
    );
    c.record_success();
    let t = later + S(400);
    assert_eq!(fail(&mut c, t, ProviderClass::OAuth, 403, body), Applied::Cooldown { until: t + S(300), level: 0 });
}

#[test]
fn provider_level_failures_never_cool_the_connection() {
    let now = t0();
    let mut c = ConnectionState::new();
    for s in [408, 500, 502, 503, 504] {
        assert_eq!(fail(&mut c, now, ProviderClass::ApiKey, s, "upstream error"), Applied::Unchanged, "{s}");
    }
    assert_eq!(c.status(now), ConnectionStatus::Active);
}

#[test]
fn disable_cooling_skips_cooldowns_but_not_terminal_states() {
    let now = t0();
    let mut c = ConnectionState::new();
    let d = decide(ProviderClass::ApiKey, 429, &[], "", 0);
    assert_eq!(c.record_failure(now, &d, "", true), Applied::Unchanged);
    let d = decide(ProviderClass::ApiKey, 402, &[], "", 0);
    assert_eq!(c.record_failure(now, &d, "", true), Applied::Terminal(TerminalState::CreditsExhausted));
}

#[test]
fn a_longer_hint_extends_an_active_cooldown_and_nothing_shortens_it() {
    let now = t0();
    let mut c = ConnectionState::new();
    let d = decide(ProviderClass::ApiKey, 429, &[("retry-after", "1")], "", 0);
    assert!(matches!(c.record_failure(now, &d, "", false), Applied::Cooldown { .. }));
    assert_eq!(c.rate_limited_until(now), Some(now + S(1)));
    let level = c.backoff_level();
    // A second in-flight failure with Retry-After 60: the deadline moves to 60 s, the level
    // does not climb again.
    let d = decide(ProviderClass::ApiKey, 429, &[("retry-after", "60")], "", c.level_for(now));
    assert_eq!(c.record_failure(now, &d, "", false), Applied::Cooldown { until: now + S(60), level });
    assert_eq!(c.backoff_level(), level);
    // A shorter hint, or none, changes nothing.
    let d = decide(ProviderClass::ApiKey, 429, &[("retry-after", "5")], "", c.level_for(now));
    assert_eq!(c.record_failure(now + S(1), &d, "", false), Applied::Unchanged);
    let d = decide(ProviderClass::ApiKey, 429, &[], "", c.level_for(now));
    assert_eq!(c.record_failure(now + S(1), &d, "", false), Applied::Unchanged);
    assert_eq!(c.rate_limited_until(now), Some(now + S(60)));
    // OAuth connections use their own ladder: hints neither set nor extend their cooldowns.
    let mut o = ConnectionState::new();
    fail(&mut o, now, ProviderClass::OAuth, 429, "");
    let until = o.rate_limited_until(now);
    let d = decide(ProviderClass::OAuth, 429, &[("retry-after", "600")], "", o.level_for(now));
    assert_eq!(o.record_failure(now, &d, "", false), Applied::Unchanged);
    assert_eq!(o.rate_limited_until(now), until);
}

#[test]
fn success_clears_everything() {
    let now = t0();
    let mut c = ConnectionState::new();
    fail(&mut c, now, ProviderClass::ApiKey, 429, "rate limit");
    c.record_success();
    assert_eq!(c, ConnectionState::new());
}

#[test]
fn snapshot_round_trip() {
    let now = t0();
    let mut c = ConnectionState::new();
    fail(&mut c, now, ProviderClass::ApiKey, 429, "rate limit");
    let snap = c.snapshot(now + S(1));
    assert_eq!(snap.cooldown_remaining_ms, 2_000);
    let r = ConnectionState::restore(&snap, now + S(100));
    assert_eq!(r.rate_limited_until(now + S(100)), Some(now + S(102)));
    assert_eq!(r.backoff_level(), 1);
    assert_eq!(r.last_error_type(), Some(Reason::RateLimitExceeded));
}

#[test]
fn the_stored_message_is_cut_at_500_characters() {
    let now = t0();
    let mut c = ConnectionState::new();
    let d = decide(ProviderClass::ApiKey, 429, &[], "rate limit", 0);
    // 600 two-byte characters: cut at the 500th character, never inside one.
    c.record_failure(now, &d, &"é".repeat(600), false);
    assert_eq!(c.last_error(), Some("é".repeat(500).as_str()));
    let mut short = ConnectionState::new();
    short.record_failure(now, &d, "exactly this", false);
    assert_eq!(short.last_error(), Some("exactly this"));
}

#[test]
fn a_quiet_spanning_a_restart_still_restarts_the_ladder() {
    let now = t0();
    let mut c = ConnectionState::new();
    fail(&mut c, now, ProviderClass::ApiKey, 429, "rate limit");
    fail(&mut c, now + S(3), ProviderClass::ApiKey, 429, "rate limit");
    assert_eq!((c.backoff_level(), c.rate_limited_until(now + S(3))), (2, Some(now + S(9))));
    // Saved 4 s after the cooldown ended, restored 100 s later (the store ages the snapshot by
    // the downtime): 104 s of quiet, longer than the 6 s cooldown served.
    let snap = c.snapshot(now + S(13));
    assert_eq!((snap.cooldown_remaining_ms, snap.cooldown_ended_ms_ago), (0, Some(4_000)));
    let aged = ConnectionSnapshot { cooldown_ended_ms_ago: Some(104_000), ..snap };
    let later = now + S(500);
    let r = ConnectionState::restore(&aged, later);
    assert_eq!((r.backoff_level(), r.level_for(later)), (2, 0));
    // Saved while cooling: nothing has ended yet.
    assert_eq!(c.snapshot(now + S(5)).cooldown_ended_ms_ago, None);
}

// ---- model-based property test ----

#[derive(Debug, Clone)]
enum Op {
    Advance(u64),
    /// Status, body, and a Retry-After in seconds.
    Fail(u16, u8, Option<u16>),
    Success,
    Select,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..120_000).prop_map(Op::Advance),
        6 => (prop_oneof![Just(429u16), Just(401), Just(402), Just(403), Just(503), Just(500)], 0u8..4, prop::option::of(1u16..300))
            .prop_map(|(s, b, h)| Op::Fail(s, b, h)),
        1 => Just(Op::Success),
        2 => Just(Op::Select),
    ]
}

const BODIES: [&str; 4] = ["", "rate limit", "Request not allowed", "account has been deactivated"];

proptest! {
    #[test]
    fn connection_invariants(ops in proptest::collection::vec(op(), 1..150), oauth in any::<bool>()) {
        let class = if oauth { ProviderClass::OAuth } else { ProviderClass::ApiKey };
        let start = t0();
        let mut now = start;
        let mut c = ConnectionState::new();
        let mut last_cooldown: Option<(Instant, Duration, u32)> = None;
        for op in ops {
            let before = c.clone();
            match op {
                Op::Advance(ms) => now += Duration::from_millis(ms),
                Op::Success => { c.record_success(); last_cooldown = None; }
                Op::Select => c.on_selected(now),
                Op::Fail(status, b, hint) => {
                    let body = BODIES[b as usize];
                    let secs = hint.map(|h| h.to_string());
                    let headers: Vec<(&str, &str)> = secs.iter().map(|s| ("retry-after", s.as_str())).collect();
                    let d = decide(class, status, &headers, body, c.level_for(now));
                    let applied = c.record_failure(now, &d, body, false);
                    // A terminal state is never overwritten.
                    if let Some(t) = before.terminal() {
                        prop_assert_eq!(c.terminal(), Some(t));
                        prop_assert_eq!(applied, Applied::Unchanged);
                    }
                    // A failure during an active cooldown never shortens it and never climbs
                    // the ladder; only a longer explicit hint extends it.
                    if let Some(until) = before.rate_limited_until(now) {
                        let after = c.rate_limited_until(now).unwrap_or(now);
                        prop_assert!(after >= until, "the deadline moved earlier");
                        let hinted = matches!(d.connection, ConnectionEffect::Cooldown { hint: Some(_), .. });
                        if after > until {
                            prop_assert!(hinted, "extended without a hint");
                        }
                        prop_assert_eq!(c.backoff_level(), before.backoff_level());
                    }
                    if let Applied::Cooldown { until, level } = applied {
                        let len = until - now;
                        // Backoff is capped, and monotone along one unbroken ladder.
                        prop_assert!(len <= S(1800));
                        if let (Some((prev_end, prev_len, prev_level)), None) = (last_cooldown, d.client_retry_after)
                            && d.reason == Reason::RateLimitExceeded && now.saturating_duration_since(prev_end) < prev_len && level > prev_level {
                                prop_assert!(len >= prev_len, "ladder went down: {:?} after {:?}", len, prev_len);
                            }
                        // Only ladder cooldowns of one kind continue one ladder.
                        last_cooldown = (d.reason == Reason::RateLimitExceeded && d.client_retry_after.is_none() && level > 0).then_some((until, len, level));
                    }
                }
            }
            if before.terminal().is_some() && !matches!(op, Op::Success | Op::Select) {
                prop_assert_eq!(c.terminal(), before.terminal());
            }
        }
    }
}
