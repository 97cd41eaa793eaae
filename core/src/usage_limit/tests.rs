use super::lane::{
    DEFAULT_MAX_WAIT, DEFAULT_SLOW_RETRY, GRACE, GUARD, MAX_WAIT_BOUNDS, SLOW_RETRY_BOUNDS, START_MARGIN, WINDOW,
};
use super::reset::{DEFAULT_NEXT, FAILURE_NEXT, result_of, usage_verdict};
use super::*;
use proptest::prelude::*;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::time::Duration;
use std::time::Instant;

const WALL: u64 = 1_780_000_000_000;
const BOTH: Options = Options { lane: true, reset: true };
const LANE: Options = Options { lane: true, reset: false };
const TEN_MIN: Duration = Duration::from_secs(600);

fn unified(pairs: &[(&str, &str)]) -> Unified {
    let owned: Vec<(String, String)> =
        pairs.iter().map(|(k, v)| (format!("anthropic-ratelimit-unified-{k}"), (*v).to_owned())).collect();
    let h: Vec<(&str, &str)> = owned.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Unified::parse(&h)
}

/// The usage-limit 429 with an offer, its window resetting in `secs`.
fn trigger(secs: u64) -> Unified {
    let reset = ((WALL / 1000) + secs).to_string();
    unified(&[("status", "rejected"), ("slow-offer", "treatment"), ("reset", &reset)])
}

struct Rig {
    lanes: Lanes,
    t0: Instant,
    rng: ChaCha8Rng,
}

impl Rig {
    fn new() -> Self {
        Rig { lanes: Lanes::new(), t0: crate::testutil::t0(), rng: ChaCha8Rng::seed_from_u64(7) }
    }

    fn at(&self, secs: u64) -> Instant {
        self.t0 + Duration::from_secs(secs)
    }

    fn respond(&mut self, secs: u64, status: u16, h: &Unified, opts: Options, req: &mut LaneRequest) -> Step {
        let seen = Seen { connection: "c", now: self.at(secs), wall_ms: WALL + secs * 1000, status, headers: h };
        self.lanes.on_response(&seen, opts, req, TEN_MIN, &mut self.rng)
    }

    /// The reset try of a trigger at 0 s ended with `outcome`.
    fn reset(&mut self, h: &Unified, outcome: ResetOutcome, opts: Options, req: &mut LaneRequest) -> Step {
        let seen = Seen { connection: "c", now: self.at(0), wall_ms: WALL, status: 429, headers: h };
        self.lanes.on_reset(&seen, outcome, opts, req)
    }

    fn changes(&mut self) -> Vec<LaneChange> {
        std::iter::from_fn(|| self.lanes.poll_change()).map(|(_, c)| c).collect()
    }

    /// Accepts a lane at `secs` for a window resetting an hour later.
    fn accepted(&mut self, secs: u64) -> LaneRequest {
        let mut req = LaneRequest::default();
        req.sending(false);
        let step = self.respond(secs, 429, &trigger(secs + 3600), LANE, &mut req);
        assert_eq!(step, Step::Retry { slow: true, after: Duration::ZERO });
        req.sending(true);
        req
    }
}

#[test]
fn headers_parse_case_insensitively_and_by_unit() {
    let h = Unified::parse(&[
        ("Anthropic-Ratelimit-Unified-Status", "REJECTED"),
        ("anthropic-ratelimit-unified-slow-offer", "treatment"),
        ("anthropic-ratelimit-unified-reset", "1780003600"),
        ("anthropic-ratelimit-unified-slow-status", "slot_busy"),
        ("anthropic-ratelimit-unified-slow-retry-after", "12.5"),
        ("anthropic-ratelimit-unified-slow-max-wait", "90"),
        ("anthropic-ratelimit-unified-overage-in-use", "true"),
        ("anthropic-ratelimit-unified-slow-budget-reset", "2026-06-01T00:00:00Z"),
    ]);
    assert!(h.rejected && h.offer && h.overage_in_use);
    assert_eq!(h.reset_ms, Some(1_780_003_600_000));
    assert_eq!(h.slow_status, Some(SlowStatus::SlotBusy));
    assert_eq!(h.slow_retry_after, Some(Duration::from_millis(12_500)));
    assert_eq!(h.slow_max_wait, Some(Duration::from_secs(90)));
    assert_eq!(h.budget_reset_ms, crate::hint::parse_rfc3339_ms("2026-06-01T00:00:00Z"));
    assert!(h.is_trigger(429) && !h.is_trigger(503));
    let junk = unified(&[("reset", "soon"), ("slow-retry-after", "-3"), ("slow-status", "whatever")]);
    assert_eq!((junk.reset_ms, junk.slow_retry_after, junk.slow_status), (None, None, Some(SlowStatus::Other)));
    assert_eq!(Unified::parse(&[]), Unified::default());
}

#[test]
fn accept_retries_at_once_in_the_lane_until_reset_plus_grace() {
    let mut r = Rig::new();
    let _ = r.accepted(0);
    assert_eq!(r.changes(), vec![LaneChange::Accepted { until: r.at(3600) + GRACE }]);
    assert!(r.lanes.slow("c", r.at(3600 + 59)));
    assert!(!r.lanes.slow("c", r.at(3600 + 60)));
    assert_eq!(r.lanes.view("c", r.at(10)), LaneView::Active { remaining: Duration::from_secs(3650) });
    // A success in the lane keeps it; the next trigger after it expired starts a new one.
    let mut req = LaneRequest::default();
    req.sending(true);
    let ok = unified(&[("slow-status", "active")]);
    assert_eq!(r.respond(100, 200, &ok, LANE, &mut req), Step::Pass);
    assert_eq!(r.respond(101, 200, &unified(&[("slow-status", "not_needed")]), LANE, &mut req), Step::Pass);
    assert!(r.lanes.slow("c", r.at(102)));
    r.lanes.sweep(r.at(3661));
    assert_eq!(r.changes(), vec![LaneChange::Ended(LaneEnd::Expired)]);
    assert_eq!(r.lanes.view("c", r.at(3661)), LaneView::Off);
}

#[test]
fn a_lane_lasts_at_most_one_window_and_a_window_without_reset_is_five_hours() {
    let mut r = Rig::new();
    let mut req = LaneRequest::default();
    let far = trigger(3 * 24 * 3600);
    assert!(matches!(r.respond(0, 429, &far, LANE, &mut req), Step::Retry { slow: true, .. }));
    assert_eq!(r.lanes.view("c", r.at(0)), LaneView::Active { remaining: WINDOW + GRACE });
    let mut r = Rig::new();
    let mut req = LaneRequest::default();
    let bare = unified(&[("status", "rejected"), ("slow-offer", "treatment")]);
    assert!(matches!(r.respond(0, 429, &bare, LANE, &mut req), Step::Retry { slow: true, .. }));
    assert_eq!(r.lanes.view("c", r.at(0)), LaneView::Active { remaining: WINDOW + GRACE });
}

#[test]
fn no_offer_disabled_or_other_429s_take_the_normal_path() {
    let mut r = Rig::new();
    let mut req = LaneRequest::default();
    let no_offer = unified(&[("status", "rejected")]);
    assert_eq!(r.respond(0, 429, &no_offer, LANE, &mut req), Step::Pass);
    assert_eq!(r.respond(0, 429, &trigger(60), Options::default(), &mut req), Step::Pass);
    assert_eq!(r.respond(0, 429, &Unified::default(), LANE, &mut req), Step::Pass);
    assert_eq!(r.respond(0, 503, &trigger(60), LANE, &mut req), Step::Pass);
    assert!(r.changes().is_empty());
    assert!(!r.lanes.slow("c", r.at(0)));
}

#[test]
fn slot_busy_and_529_wait_the_jittered_retry_after_then_retry() {
    let mut r = Rig::new();
    let mut req = r.accepted(0);
    let busy = unified(&[("slow-status", "slot_busy"), ("slow-retry-after", "30")]);
    let Step::Retry { slow: true, after } = r.respond(1, 429, &busy, LANE, &mut req) else { panic!("no retry") };
    assert!(after >= Duration::from_secs(21) && after <= Duration::from_secs(39), "{after:?}");
    let Step::Retry { slow: true, after: a2 } = r.respond(40, 529, &Unified::default(), LANE, &mut req) else {
        panic!("no retry on 529")
    };
    assert!(a2 >= Duration::from_secs(14) && a2 <= Duration::from_secs(26), "default 20 s ± 30 %: {a2:?}");
    assert_eq!(req.waited(), after + a2);
    // Clamped: 1 s becomes 5 s (± 30 %), an hour becomes 600 s (± 30 %) — past the 10-minute
    // default start budget, which ends the lane instead.
    let tiny = unified(&[("slow-status", "slot_busy"), ("slow-retry-after", "1")]);
    let Step::Retry { after: a3, .. } = r.respond(70, 429, &tiny, LANE, &mut req) else { panic!("no retry") };
    assert!(a3 >= Duration::from_millis(3500) && a3 <= Duration::from_millis(6500), "{a3:?}");
    // A busy answer to a request that was not sent slow is not the lane's.
    let mut fresh = LaneRequest::default();
    fresh.sending(false);
    assert_eq!(r.respond(80, 529, &Unified::default(), LANE, &mut fresh), Step::Pass);
}

#[test]
fn past_max_wait_the_lane_ends_and_a_ten_minute_guard_blocks_reacceptance() {
    let mut r = Rig::new();
    let mut req = LaneRequest::default();
    req.sending(false);
    let offer = {
        let mut h = trigger(3600);
        h.slow_max_wait = Some(Duration::from_secs(60));
        h
    };
    assert!(matches!(r.respond(0, 429, &offer, LANE, &mut req), Step::Retry { .. }));
    req.sending(true);
    let busy = unified(&[("slow-status", "slot_busy"), ("slow-retry-after", "40")]);
    assert!(matches!(r.respond(1, 429, &busy, LANE, &mut req), Step::Retry { .. }));
    // A second 40 s (± 30 %) wait cannot fit in 60 s.
    assert_eq!(r.respond(50, 429, &busy, LANE, &mut req), Step::Pass);
    assert!(r.changes().contains(&LaneChange::Ended(LaneEnd::MaxWait)));
    assert_eq!(r.lanes.view("c", r.at(50)), LaneView::Guard { remaining: GUARD });
    let mut next = LaneRequest::default();
    assert_eq!(r.respond(300, 429, &trigger(3600), LANE, &mut next), Step::Pass, "guarded");
    let mut later = LaneRequest::default();
    assert!(matches!(r.respond(50 + 600, 429, &trigger(3600), LANE, &mut later), Step::Retry { slow: true, .. }));
}

#[test]
fn waits_also_fit_the_start_timeout_minus_five_seconds() {
    let mut r = Rig::new();
    let mut req = r.accepted(0);
    let busy = unified(&[("slow-status", "slot_busy"), ("slow-retry-after", "20")]);
    // 20 s ± 30 % never fits into 20 s − 5 s of start budget.
    let seen = Seen { connection: "c", now: r.at(1), wall_ms: WALL, status: 429, headers: &busy };
    let step = r.lanes.on_response(&seen, LANE, &mut req, Duration::from_secs(20), &mut r.rng);
    assert_eq!(step, Step::Pass);
    assert!(r.changes().contains(&LaneChange::Ended(LaneEnd::MaxWait)));
}

#[test]
fn every_ending_status_ends_the_lane_into_the_normal_path() {
    for (status, end) in [
        ("weekly_limit", LaneEnd::WeeklyLimit),
        ("budget_exhausted", LaneEnd::BudgetExhausted),
        ("off", LaneEnd::Off),
        ("ineligible", LaneEnd::Ineligible),
    ] {
        let mut r = Rig::new();
        let mut req = r.accepted(0);
        let _ = r.changes();
        let h = unified(&[("status", "rejected"), ("slow-status", status)]);
        assert_eq!(r.respond(10, 429, &h, LANE, &mut req), Step::Pass, "{status}");
        assert_eq!(r.changes(), vec![LaneChange::Ended(end)], "{status}");
        assert!(!r.lanes.slow("c", r.at(10)), "{status}");
        // Only max_wait guards; only budget_exhausted is remembered.
        let view = r.lanes.view("c", r.at(11)).as_str();
        assert_eq!(view, if end == LaneEnd::BudgetExhausted { "budget_exhausted" } else { "off" }, "{status}");
    }
}

#[test]
fn overage_in_use_ends_the_lane_as_extra_usage_whatever_the_status() {
    let mut r = Rig::new();
    let mut req = r.accepted(0);
    let _ = r.changes();
    let h = unified(&[("slow-status", "active"), ("overage-in-use", "true")]);
    assert_eq!(r.respond(10, 200, &h, LANE, &mut req), Step::Pass);
    assert_eq!(r.changes(), vec![LaneChange::Ended(LaneEnd::ExtraUsage)]);
    // And a trigger that says so is not accepted.
    let mut r = Rig::new();
    let mut req = LaneRequest::default();
    let mut t = trigger(3600);
    t.overage_in_use = true;
    assert_eq!(r.respond(0, 429, &t, LANE, &mut req), Step::Pass);
}

#[test]
fn a_later_window_reset_is_a_rollover() {
    let mut r = Rig::new();
    let mut req = r.accepted(0);
    let _ = r.changes();
    let same = unified(&[("slow-status", "active"), ("reset", &((WALL / 1000) + 3600 + 30).to_string())]);
    assert_eq!(r.respond(10, 200, &same, LANE, &mut req), Step::Pass);
    assert!(r.changes().is_empty(), "within the tolerance");
    let next = unified(&[("slow-status", "not_needed"), ("reset", &((WALL / 1000) + 3600 + 5 * 3600).to_string())]);
    assert_eq!(r.respond(3000, 200, &next, LANE, &mut req), Step::Pass);
    assert_eq!(r.changes(), vec![LaneChange::Ended(LaneEnd::WindowRollover)]);
}

#[test]
fn budget_exhausted_is_remembered_until_its_reset_at_most_eight_days() {
    let mut r = Rig::new();
    let mut req = r.accepted(0);
    let reset = ((WALL / 1000) + 2 * 24 * 3600).to_string();
    let h = unified(&[("slow-status", "budget_exhausted"), ("slow-budget-reset", &reset)]);
    assert_eq!(r.respond(0, 429, &h, LANE, &mut req), Step::Pass);
    assert_eq!(r.lanes.view("c", r.at(0)), LaneView::BudgetExhausted { remaining: Duration::from_secs(2 * 24 * 3600) });
    let mut again = LaneRequest::default();
    assert_eq!(r.respond(24 * 3600, 429, &trigger(3600), LANE, &mut again), Step::Pass, "still remembered");
    let mut after = LaneRequest::default();
    assert!(matches!(r.respond(2 * 24 * 3600, 429, &trigger(3600), LANE, &mut after), Step::Retry { .. }));
    // Without an announced reset (and none of the window), the cap.
    let mut r = Rig::new();
    let mut req = LaneRequest::default();
    let h = unified(&[("status", "rejected"), ("slow-status", "budget_exhausted")]);
    assert_eq!(r.respond(0, 429, &h, LANE, &mut req), Step::Pass);
    assert_eq!(r.lanes.view("c", r.at(0)), LaneView::BudgetExhausted { remaining: lane::BUDGET_CAP });
}

#[test]
fn a_request_sent_before_acceptance_joins_the_lane_at_once() {
    let mut r = Rig::new();
    let _ = r.accepted(0);
    let mut racing = LaneRequest::default();
    racing.sending(false);
    assert_eq!(r.respond(1, 429, &trigger(3600), LANE, &mut racing), Step::Retry { slow: true, after: Duration::ZERO });
    // Sent slow and rejected again without a busy status: the normal path.
    racing.sending(true);
    assert_eq!(r.respond(2, 429, &trigger(3600), LANE, &mut racing), Step::Pass);
}

#[test]
fn reset_is_tried_before_the_lane_and_a_reset_retries_at_full_speed() {
    let mut r = Rig::new();
    let mut req = LaneRequest::default();
    let h = trigger(3600);
    assert_eq!(r.respond(0, 429, &h, BOTH, &mut req), Step::TryReset);
    let step = r.reset(&h, ResetOutcome::Reset, BOTH, &mut req);
    assert_eq!(step, Step::Retry { slow: false, after: Duration::ZERO });
    assert!(!r.lanes.slow("c", r.at(0)));
    assert!(r.lanes.reset_due("c", r.at(0)));
    // Tried once per request: the next trigger of the same request goes to the lane.
    assert!(matches!(r.respond(1, 429, &h, BOTH, &mut req), Step::Retry { slow: true, .. }));
    let mut r = Rig::new();
    let mut req = LaneRequest::default();
    assert_eq!(r.respond(0, 429, &h, BOTH, &mut req), Step::TryReset);
    let step = r.reset(&h, ResetOutcome::NotLimited, BOTH, &mut req);
    assert_eq!(step, Step::Retry { slow: false, after: Duration::ZERO });
}

#[test]
fn spent_or_failed_resets_hold_the_next_try_and_go_on_to_the_lane() {
    let next_ms = WALL + 3 * 24 * 3600 * 1000;
    for (outcome, hold) in [
        (ResetOutcome::AlreadyUsed { next_ms: None }, DEFAULT_NEXT),
        (ResetOutcome::NotOffered { next_ms: None }, DEFAULT_NEXT),
        (ResetOutcome::AlreadyUsed { next_ms: Some(next_ms) }, Duration::from_secs(3 * 24 * 3600)),
        (ResetOutcome::Unavailable { next_ms: None }, FAILURE_NEXT),
        (ResetOutcome::Failed, FAILURE_NEXT),
    ] {
        let mut r = Rig::new();
        let mut req = LaneRequest::default();
        let h = trigger(3600);
        assert_eq!(r.respond(0, 429, &h, BOTH, &mut req), Step::TryReset);
        let step = r.reset(&h, outcome, BOTH, &mut req);
        assert_eq!(step, Step::Retry { slow: true, after: Duration::ZERO }, "{outcome:?}");
        assert_eq!(r.lanes.reset_next("c", r.at(0)), Some(r.at(0) + hold), "{outcome:?}");
        // The next trigger skips the reset while it is held back.
        r.lanes.sweep(r.at(7200));
        let mut next = LaneRequest::default();
        let step = r.respond(7200, 429, &h, BOTH, &mut next);
        if hold > Duration::from_secs(7200) {
            assert!(matches!(step, Step::Retry { .. }), "{outcome:?}: {step:?}");
        } else {
            assert_eq!(step, Step::TryReset, "{outcome:?}");
        }
    }
    // Reset alone (no lane): a spent reset leaves the 429 to the normal path.
    let mut r = Rig::new();
    let mut req = LaneRequest::default();
    let only = Options { lane: false, reset: true };
    assert_eq!(r.respond(0, 429, &trigger(3600), only, &mut req), Step::TryReset);
    let step = r.reset(&trigger(3600), ResetOutcome::Failed, only, &mut req);
    assert_eq!(step, Step::Pass);
}

#[test]
fn usage_and_reset_bodies() {
    let post = br#"{"five_hour":{"utilization":100},"juniper_tide":{"arm":"reset","available":true}}"#;
    assert_eq!(usage_verdict(post), UsageVerdict::Post);
    let later = br#"{"juniper_tide":{"arm":"reset","available":false,"next_available_at":"2026-06-01T00:00:00Z"}}"#;
    assert_eq!(
        usage_verdict(later),
        UsageVerdict::Unavailable { next_ms: crate::hint::parse_rfc3339_ms("2026-06-01T00:00:00Z") }
    );
    assert_eq!(usage_verdict(br#"{"juniper_tide":{"arm":"none"}}"#), UsageVerdict::Unavailable { next_ms: None });
    assert_eq!(usage_verdict(b"<html>"), UsageVerdict::Malformed);
    assert_eq!(usage_verdict(b"{}"), UsageVerdict::Malformed);
    assert_eq!(result_of(br#"{"result":"reset"}"#), ResetOutcome::Reset);
    assert_eq!(result_of(br#"{"result":"not_limited"}"#), ResetOutcome::NotLimited);
    assert_eq!(
        result_of(br#"{"result":"already_used","next_available_at":1780600000}"#),
        ResetOutcome::AlreadyUsed { next_ms: Some(1_780_600_000_000) }
    );
    assert_eq!(result_of(br#"{"result":"not_offered"}"#), ResetOutcome::NotOffered { next_ms: None });
    assert_eq!(result_of(br#"{"result":"maybe"}"#), ResetOutcome::Failed);
    assert_eq!(result_of(b""), ResetOutcome::Failed);
    assert_eq!(reset::reset_path("org-1"), "/api/organizations/org-1/reset_rate_limits");
    assert_eq!(reset::reset_body(), r#"{"program":"juniper_tide"}"#);
}

#[test]
fn defaults_are_the_documented_ones() {
    assert_eq!(DEFAULT_SLOW_RETRY, Duration::from_secs(20));
    assert_eq!(SLOW_RETRY_BOUNDS, (Duration::from_secs(5), Duration::from_secs(600)));
    assert_eq!(DEFAULT_MAX_WAIT, Duration::from_secs(1200));
    assert_eq!(MAX_WAIT_BOUNDS, (Duration::from_secs(60), Duration::from_secs(21_600)));
    assert_eq!((GRACE, GUARD, START_MARGIN), (Duration::from_secs(60), TEN_MIN, Duration::from_secs(5)));
}

fn any_response() -> impl Strategy<Value = (u16, Unified)> {
    let status = prop_oneof![Just(200u16), Just(429), Just(529), Just(503)];
    let slow = prop_oneof![
        Just(None),
        Just(Some("active")),
        Just(Some("not_needed")),
        Just(Some("slot_busy")),
        Just(Some("weekly_limit")),
        Just(Some("budget_exhausted")),
        Just(Some("off")),
        Just(Some("ineligible")),
    ];
    (status, any::<bool>(), any::<bool>(), slow, 0u64..2000, 0u64..30_000, any::<bool>(), 0u64..20_000).prop_map(
        |(status, rejected, offer, slow, retry, max_wait, overage, reset)| {
            let h = Unified {
                rejected,
                offer,
                reset_ms: Some(WALL + reset * 1000),
                slow_status: slow.map(SlowStatus::parse),
                slow_retry_after: (retry > 0).then(|| Duration::from_secs(retry)),
                slow_max_wait: (max_wait > 0).then(|| Duration::from_secs(max_wait)),
                overage_in_use: overage && status == 200,
                budget_reset_ms: None,
            };
            (status, h)
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever the headers, one request never waits past its bounds: the sum of its waits
    /// stays within the maximum wait in force and the start budget minus the margin, each
    /// wait within the clamped retry-after ± 30 %, and a lane never outlives its window.
    #[test]
    fn the_lane_never_waits_past_its_bounds(
        responses in proptest::collection::vec(any_response(), 1..40),
        budget_s in 1u64..1200,
        seed in any::<u64>(),
    ) {
        let mut lanes = Lanes::new();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut now = crate::testutil::t0();
        let start_budget = Duration::from_secs(budget_s);
        let mut req = LaneRequest::default();
        let mut req_start = now;
        let mut max_wait = MAX_WAIT_BOUNDS.1;
        let mut slow = lanes.slow("c", now);
        req.sending(slow);
        let mut waited = Duration::ZERO;
        for (status, h) in responses {
            let left = start_budget.saturating_sub(now - req_start);
            let wall = WALL + 1000 * (now - req_start).as_secs();
            if slow && let Some(mw) = h.slow_max_wait {
                max_wait = mw.clamp(MAX_WAIT_BOUNDS.0, MAX_WAIT_BOUNDS.1);
            }
            let seen = Seen { connection: "c", now, wall_ms: wall, status, headers: &h };
            let step = lanes.on_response(&seen, BOTH, &mut req, left, &mut rng);
            let step = if step == Step::TryReset {
                lanes.on_reset(&seen, ResetOutcome::Failed, BOTH, &mut req)
            } else {
                step
            };
            if let LaneView::Active { remaining } = lanes.view("c", now) {
                prop_assert!(remaining <= WINDOW + GRACE);
            }
            match step {
                Step::Retry { slow: s, after } => {
                    if !after.is_zero() {
                        prop_assert!(after >= Duration::from_millis(3500) && after <= Duration::from_secs(780));
                        prop_assert!((now - req_start) + after <= start_budget.saturating_sub(START_MARGIN));
                    }
                    waited += after;
                    prop_assert!(waited <= max_wait, "waited {:?} past the max wait {:?}", waited, max_wait);
                    now += after;
                    slow = s;
                }
                Step::Pass | Step::TryReset => {
                    // The request is over; the next one starts now.
                    now += Duration::from_secs(1);
                    req = LaneRequest::default();
                    req_start = now;
                    waited = Duration::ZERO;
                    max_wait = MAX_WAIT_BOUNDS.1;
                    slow = lanes.slow("c", now);
                }
            }
            prop_assert_eq!(req.waited(), waited);
            req.sending(slow);
        }
    }
}
