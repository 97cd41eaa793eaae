use super::*;
use proptest::prelude::*;

const HOUR: u64 = 3_600_000;

fn account(issued: u64, expires: u64) -> Account {
    Account::new(Lifetime { issued_at_ms: issued, expires_at_ms: expires }, DEFAULT_REFRESH_AT, 0)
}

#[test]
fn a_refresh_is_due_at_the_share_of_the_lifetime_and_five_minutes_before_the_end() {
    // An 8-hour token: 80 % is 6.4 h, well before the 5-minute margin.
    let l = Lifetime { issued_at_ms: 0, expires_at_ms: 8 * HOUR };
    assert_eq!(l.due_at_ms(0.8), 8 * HOUR * 8 / 10);
    // A 30-minute token: 80 % is 24 min, but 5 minutes before the end (25 min) comes later;
    // with refresh_at = 0.9 the margin decides (27 min would leave 3).
    let l = Lifetime { issued_at_ms: 0, expires_at_ms: 1_800_000 };
    assert_eq!(l.due_at_ms(0.8), 1_440_000);
    assert_eq!(l.due_at_ms(0.9), 1_500_000);
    // A 60-second token is too short for a 5-minute margin: 80 % of it, 48 s.
    let l = Lifetime { issued_at_ms: 1_000, expires_at_ms: 1_000 + 60_000 };
    assert_eq!(l.due_at_ms(0.8), 49_000);
    // A 10-minute token: the margin would leave exactly half: the share decides.
    let l = Lifetime { issued_at_ms: 0, expires_at_ms: 600_000 };
    assert_eq!(l.due_at_ms(0.8), 480_000);
}

#[test]
fn a_scheduled_refresh_waits_until_due_and_then_flies_alone() {
    let mut a = account(0, 10 * HOUR);
    let due = a.next_refresh_ms().expect("due");
    assert_eq!(due, 8 * HOUR);
    assert_eq!(a.begin(due - 1, Why::Scheduled), Begin::No);
    let Begin::Refresh(flight) = a.begin(due, Why::Scheduled) else { panic!("due") };
    assert_eq!(flight.generation, 0);
    assert_eq!(a.state(), RefreshState::Refreshing);
    assert_eq!(a.begin(due, Why::Scheduled), Begin::InFlight);
    assert_eq!(a.begin(due, Why::Refused { generation: 0 }), Begin::InFlight);
    assert_eq!(a.next_refresh_ms(), None);
    let next = Lifetime { issued_at_ms: due + 100, expires_at_ms: due + 100 + 10 * HOUR };
    assert!(a.finish(flight, Answer::Refreshed(next), due + 100));
    assert_eq!((a.generation(), a.state(), a.last_refresh_ms()), (1, RefreshState::Valid, Some(due + 100)));
    assert_eq!(a.next_refresh_ms(), Some(due + 100 + 8 * HOUR));
    // The same flight's answer again changes nothing.
    assert!(!a.finish(flight, Answer::InvalidGrant, due + 200));
    assert_eq!(a.state(), RefreshState::Valid);
}

#[test]
fn a_refused_token_refreshes_at_once_unless_the_tokens_already_changed() {
    let mut a = account(0, 10 * HOUR);
    let Begin::Refresh(f) = a.begin(HOUR, Why::Refused { generation: 0 }) else { panic!("at once") };
    assert!(a.finish(f, Answer::Refreshed(Lifetime { issued_at_ms: HOUR, expires_at_ms: 11 * HOUR }), HOUR));
    // A request that still carried generation 0 is told to use the current tokens.
    assert_eq!(a.begin(HOUR + 1, Why::Refused { generation: 0 }), Begin::Newer);
    assert!(matches!(
        a.begin(HOUR + 1, Why::Refused { generation: 1 }),
        Begin::Refresh(Flight { generation: 1, presents: true })
    ));
}

#[test]
fn failed_refreshes_retry_with_a_doubling_delay_up_to_five_minutes() {
    let mut a = account(0, 10 * HOUR);
    let mut now = 8 * HOUR;
    let mut delays = Vec::new();
    for _ in 0..9 {
        let Begin::Refresh(f) = a.begin(now, Why::Scheduled) else { panic!("due at {now}") };
        assert!(a.finish(f, Answer::Retryable, now));
        let RefreshState::Retrying { next_ms } = a.state() else { panic!("retrying") };
        delays.push(next_ms - now);
        assert_eq!(a.begin(next_ms - 1, Why::Scheduled), Begin::No);
        now = next_ms;
    }
    let s = 1_000;
    assert_eq!(delays, vec![5 * s, 10 * s, 20 * s, 40 * s, 80 * s, 160 * s, 300 * s, 300 * s, 300 * s]);
    assert_eq!(a.failures(), 9);
    let Begin::Refresh(f) = a.begin(now, Why::Scheduled) else { panic!("due") };
    assert!(a.finish(f, Answer::Refreshed(Lifetime { issued_at_ms: now, expires_at_ms: now + HOUR }), now));
    assert_eq!((a.failures(), a.state()), (0, RefreshState::Valid));
}

#[test]
fn invalid_grant_waits_for_a_new_sign_in() {
    let mut a = account(0, HOUR);
    let Begin::Refresh(f) = a.begin(0, Why::Refused { generation: 0 }) else { panic!("at once") };
    assert!(a.finish(f, Answer::InvalidGrant, 10));
    assert_eq!(a.state(), RefreshState::NeedsSignIn);
    assert_eq!(a.next_refresh_ms(), None);
    assert_eq!(a.begin(HOUR, Why::Scheduled), Begin::No);
    assert_eq!(a.begin(HOUR, Why::Refused { generation: 0 }), Begin::No);
    a.reauthorize(Lifetime { issued_at_ms: 2 * HOUR, expires_at_ms: 3 * HOUR }, 0, 2 * HOUR);
    assert_eq!((a.state(), a.generation(), a.failures()), (RefreshState::Valid, 1, 0));
    assert!(a.next_refresh_ms().is_some());
}

#[test]
fn new_tokens_from_outside_make_a_flight_in_progress_stale() {
    let mut a = account(0, HOUR);
    let Begin::Refresh(f) = a.begin(0, Why::Refused { generation: 0 }) else { panic!("at once") };
    a.reauthorize(Lifetime { issued_at_ms: 5, expires_at_ms: 5 + HOUR }, 7, 5);
    assert_eq!(a.generation(), 7);
    assert!(!a.finish(f, Answer::Refreshed(Lifetime { issued_at_ms: 6, expires_at_ms: 6 + HOUR }), 6));
    assert_eq!(a.lifetime().issued_at_ms, 5);
}

#[test]
fn another_replicas_refresh_is_taken_at_its_generation_and_a_deferred_one_is_no_failure() {
    let mut a = account(0, HOUR);
    let Begin::Refresh(f) = a.begin(0, Why::Refused { generation: 0 }) else { panic!("at once") };
    assert!(a.finish(f, Answer::Deferred { at_ms: 1_000 }, 10));
    assert_eq!(
        (a.state(), a.failures(), a.next_refresh_ms()),
        (RefreshState::Retrying { next_ms: 1_000 }, 0, Some(1_000))
    );
    assert_eq!(a.begin(999, Why::Scheduled), Begin::No);
    let Begin::Refresh(f) = a.begin(1_000, Why::Scheduled) else { panic!("due again") };
    let life = Lifetime { issued_at_ms: 900, expires_at_ms: 900 + HOUR };
    assert!(a.finish(f, Answer::Taken { lifetime: life, generation: 3 }, 1_001));
    assert_eq!(
        (a.state(), a.generation(), a.lifetime(), a.last_refresh_ms()),
        (RefreshState::Valid, 3, life, Some(1_001))
    );
}

#[test]
fn a_lost_answer_is_never_presented_again_and_the_account_ends_at_the_expiry() {
    let mut a = account(0, HOUR);
    let due = a.next_refresh_ms().expect("due");
    let Begin::Refresh(f) = a.begin(due, Why::Scheduled) else { panic!("due") };
    assert!(f.presents);
    assert!(a.finish(f, Answer::Lost { look_at_ms: None }, due + 30_000));
    assert_eq!(a.state(), RefreshState::InDoubt { next_ms: HOUR });
    assert_eq!((a.state().as_str(), a.failures(), a.next_refresh_ms()), ("in_doubt", 1, Some(HOUR)));
    // Not before the expiry, not after a 401: nothing is presented.
    assert_eq!(a.begin(HOUR - 1, Why::Scheduled), Begin::No);
    assert_eq!(a.begin(HOUR - 1, Why::Refused { generation: 0 }), Begin::No);
    // At the expiry: a new sign-in is needed, said once.
    assert_eq!(a.begin(HOUR, Why::Scheduled), Begin::Lapsed);
    assert_eq!((a.state(), a.next_refresh_ms()), (RefreshState::NeedsSignIn, None));
    assert_eq!(a.begin(HOUR, Why::Refused { generation: 0 }), Begin::No);
    // The lost flight's answer, if it still comes, is taken.
    let life = Lifetime { issued_at_ms: HOUR + 5, expires_at_ms: 2 * HOUR };
    assert!(!a.finish(f, Answer::Retryable, HOUR + 5), "only tokens are news");
    assert!(a.finish(f, Answer::Refreshed(life), HOUR + 5));
    assert_eq!((a.state(), a.generation(), a.doubted()), (RefreshState::Valid, 1, false));
}

#[test]
fn an_account_in_doubt_only_looks_and_takes_what_another_replica_published() {
    let mut a = account(0, HOUR);
    let Begin::Refresh(f) = a.begin(0, Why::Refused { generation: 0 }) else { panic!("at once") };
    assert!(a.finish(f, Answer::Lost { look_at_ms: Some(5_000) }, 1_000));
    let Begin::Refresh(look) = a.begin(5_000, Why::Scheduled) else { panic!("looks at 5 s") };
    assert!(!look.presents, "an in-doubt refresh token is not presented");
    assert!(a.finish(look, Answer::Deferred { at_ms: 10_000 }, 5_000));
    assert_eq!((a.state(), a.failures()), (RefreshState::InDoubt { next_ms: 10_000 }, 1));
    let Begin::Refresh(look) = a.begin(10_000, Why::Scheduled) else { panic!("looks again") };
    let life = Lifetime { issued_at_ms: 9_000, expires_at_ms: 9_000 + HOUR };
    assert!(a.finish(look, Answer::Taken { lifetime: life, generation: 1 }, 10_000));
    assert_eq!((a.state(), a.generation(), a.failures()), (RefreshState::Valid, 1, 0));
    // Restored from a store that recorded a flight which never ended: in doubt from the start.
    let mut r = account(0, HOUR).in_doubt();
    assert!(r.doubted());
    assert_eq!(r.begin(HOUR - 1, Why::Scheduled), Begin::No);
    assert_eq!(r.begin(HOUR, Why::Scheduled), Begin::Lapsed);
}

#[derive(Debug, Clone)]
enum Op {
    Advance(u64),
    Scheduled,
    Refused { stale: bool },
    Finish(u8),
    Late,
    Reauthorize,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u64..2 * HOUR).prop_map(Op::Advance),
        Just(Op::Scheduled),
        any::<bool>().prop_map(|stale| Op::Refused { stale }),
        (0u8..7).prop_map(Op::Finish),
        Just(Op::Late),
        Just(Op::Reauthorize),
    ]
}

proptest! {
    /// Whatever happens: at most one flight at a time; a refresh token (a generation) is
    /// presented again only after a try that safely got no answer about it, never after one
    /// whose answer was lost; generations only grow; a scheduled refresh never starts before
    /// it is due; nothing refreshes while a sign-in is needed.
    #[test]
    fn one_flight_and_no_token_presented_twice_after_an_answer(ops in proptest::collection::vec(op(), 1..80)) {
        let mut a = account(0, 3 * HOUR);
        let mut now = 0u64;
        let mut flying: Option<Flight> = None;
        let mut lost: Option<Flight> = None;
        // Generations presented, and whether the last presentation got no answer.
        let mut presented: std::collections::BTreeMap<u64, bool> = std::collections::BTreeMap::new();
        for op in ops {
            let before = a.generation();
            match op {
                Op::Advance(ms) => now += ms,
                Op::Scheduled | Op::Refused { .. } => {
                    let due = a.next_refresh_ms();
                    let signed_out = a.state() == RefreshState::NeedsSignIn;
                    let why = match op {
                        Op::Refused { stale: true } if a.generation() > 0 => Why::Refused { generation: a.generation() - 1 },
                        Op::Refused { .. } => Why::Refused { generation: a.generation() },
                        _ => Why::Scheduled,
                    };
                    match a.begin(now, why) {
                        Begin::Refresh(f) => {
                            prop_assert!(flying.is_none(), "a second flight");
                            prop_assert!(!signed_out);
                            if why == Why::Scheduled {
                                prop_assert!(due.is_some_and(|d| now >= d), "started before due");
                            }
                            if f.presents {
                                if let Some(unanswered) = presented.get(&f.generation) {
                                    prop_assert!(*unanswered, "generation {} presented again after an answer", f.generation);
                                }
                                presented.insert(f.generation, true);
                            } else {
                                prop_assert_eq!(presented.get(&f.generation), Some(&false), "looks only when in doubt");
                            }
                            flying = Some(f);
                        }
                        Begin::InFlight => prop_assert!(flying.is_some()),
                        Begin::Newer => {
                            let stale = matches!(why, Why::Refused { generation } if generation != a.generation());
                            prop_assert!(stale);
                        }
                        Begin::No => {}
                        Begin::Lapsed => prop_assert_eq!(a.state(), RefreshState::NeedsSignIn),
                    }
                }
                Op::Finish(kind) => {
                    if let Some(f) = flying.take() {
                        let answer = match kind {
                            0 => Answer::Refreshed(Lifetime { issued_at_ms: now, expires_at_ms: now + 3 * HOUR }),
                            1 => Answer::Retryable,
                            2 => Answer::Deferred { at_ms: now + 1_000 },
                            3 => Answer::Taken {
                                lifetime: Lifetime { issued_at_ms: now, expires_at_ms: now + 3 * HOUR },
                                generation: f.generation + 2,
                            },
                            4 | 5 => Answer::Lost { look_at_ms: (kind == 5).then_some(now + 2_000) },
                            _ => Answer::InvalidGrant,
                        };
                        let taken = a.finish(f, answer, now);
                        if taken && !matches!(answer, Answer::Retryable | Answer::Deferred { .. }) {
                            presented.insert(f.generation, false);
                        }
                        if taken && matches!(answer, Answer::Lost { .. }) && f.presents {
                            lost = Some(f);
                        }
                    }
                }
                Op::Late => {
                    if let Some(f) = lost.take() {
                        let life = Lifetime { issued_at_ms: now, expires_at_ms: now + 3 * HOUR };
                        if a.finish(f, Answer::Refreshed(life), now) {
                            // A look in progress is stale from now on.
                            flying = None;
                        }
                    }
                }
                Op::Reauthorize => {
                    a.reauthorize(Lifetime { issued_at_ms: now, expires_at_ms: now + 3 * HOUR }, 0, now);
                    if let Some(f) = flying.take() {
                        // The flight's answer is stale from now on.
                        prop_assert!(!a.finish(f, Answer::Retryable, now));
                    }
                }
            }
            prop_assert!(a.generation() >= before);
            prop_assert_eq!(a.state() == RefreshState::Refreshing, flying.is_some());
        }
    }
}
