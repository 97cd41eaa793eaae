//! Admission tests: BEHAVIOUR.md §12.10 and SPEC M9, plus a proptest of the queue machine.

use super::*;
use crate::testutil::t0;
use proptest::prelude::*;

#[test]
fn disabled_or_below_depth_admits() {
    assert!(check_queue_admission(0, 0, "openai").is_ok());
    assert!(check_queue_admission(1000, 0, "openai").is_ok());
    assert!(check_queue_admission(5, -1, "openai").is_ok());
    assert!(check_queue_admission(0, 2, "openai").is_ok());
    assert!(check_queue_admission(1, 2, "openai").is_ok());
}

#[test]
fn at_depth_rejects_with_queue_full_429() {
    for queued in [2, 5] {
        let e = check_queue_admission(queued, 2, "openai/gpt-4o").expect_err("full");
        assert_eq!((e.code, e.code.status(), e.code.as_str()), (QueueCode::QueueFull, 429, "RATE_LIMIT_QUEUE_FULL"));
        assert!(e.message.contains("maxQueueDepth") && e.message.contains("openai/gpt-4o"), "{}", e.message);
    }
    assert_eq!(QueueCode::QueueTimeout.status(), 503);
    assert_eq!(QueueCode::ExecutionTimeout.status(), 504);
}

#[test]
fn defaults() {
    let s = RequestQueueSettings::default();
    assert_eq!((s.max_wait_ms, s.execution_max_wait_ms, s.max_queue_depth), (30_000, 600_000, 0));
}

#[test]
fn precedence_env_then_stored_then_connection() {
    let env = RequestQueueSettings { max_wait_ms: 15_000, ..Default::default() };
    let stored = QueueOverride { max_wait_ms: Some(20_000), ..Default::default() };
    let conn = QueueOverride { max_wait_ms: Some(45_000), ..Default::default() };
    let ms = |l: QueueLimits| l.max_wait.as_millis();
    assert_eq!(ms(QueueLimits::resolve(&env, None, None, None)), 15_000);
    assert_eq!(ms(QueueLimits::resolve(&env, Some(&stored), None, None)), 20_000);
    assert_eq!(ms(QueueLimits::resolve(&env, Some(&stored), Some(&conn), None)), 45_000);
    // An override of 0 means no override.
    let zero = QueueOverride { max_wait_ms: Some(0), ..Default::default() };
    assert_eq!(ms(QueueLimits::resolve(&env, Some(&stored), Some(&zero), None)), 20_000);
}

#[test]
fn clamping_and_executor_timeout() {
    let env = RequestQueueSettings {
        max_wait_ms: 0,
        execution_max_wait_ms: 999_999_999_999,
        max_queue_depth: 7_000_000,
        concurrent_requests: -3,
    };
    let l = QueueLimits::resolve(&env, None, None, Some(Duration::from_secs(1)));
    assert_eq!(l.max_wait, MIN_TIME);
    assert_eq!(l.execution_max_wait, MAX_TIME);
    assert_eq!(l.max_queue_depth, MAX_DEPTH);
    assert_eq!(l.concurrent, 0);
    let env = RequestQueueSettings::default();
    let l = QueueLimits::resolve(&env, None, None, Some(Duration::from_secs(900)));
    assert_eq!(l.execution_max_wait, Duration::from_secs(900));
}

fn limits(concurrent: usize, depth: usize) -> QueueLimits {
    QueueLimits {
        max_wait: Duration::from_secs(5),
        execution_max_wait: Duration::from_secs(600),
        max_queue_depth: depth,
        concurrent,
    }
}

#[test]
fn one_running_one_queued_third_rejected() {
    // §12.10 case 4: concurrency 1, depth 1.
    let now = t0();
    let mut q = AdmissionQueue::new("conn-admission-cap", limits(1, 1), FailMode::Closed);
    let Enter::Run(p1) = q.try_enter(now) else { panic!("job1 runs") };
    let Enter::Wait { waiter, deadline } = q.try_enter(now) else { panic!("job2 waits") };
    assert_eq!(deadline, now + Duration::from_secs(5));
    let Enter::Reject(e) = q.try_enter(now) else { panic!("job3 rejected") };
    assert_eq!(e.code, QueueCode::QueueFull);
    assert_eq!(q.release(p1), Some(waiter));
    let p2 = q.take_promoted(waiter).expect("promoted");
    assert_eq!(q.running(), 1);
    q.release(p2);
    assert_eq!((q.running(), q.queued()), (0, 0));
}

#[test]
fn unbounded_depth_queues_everything_in_order() {
    let now = t0();
    let mut q = AdmissionQueue::new("q", limits(1, 0), FailMode::Closed);
    let Enter::Run(p) = q.try_enter(now) else { panic!() };
    let waiters: Vec<u64> = (0..3)
        .map(|_| match q.try_enter(now) {
            Enter::Wait { waiter, .. } => waiter,
            other => panic!("{other:?}"),
        })
        .collect();
    let mut permit = p;
    for w in waiters {
        assert_eq!(q.release(permit), Some(w));
        permit = q.take_promoted(w).expect("promoted");
    }
    assert_eq!(q.release(permit), None);
}

#[test]
fn wait_timeout_is_503_and_fail_open_bypasses() {
    let now = t0();
    let mut q = AdmissionQueue::new("q", limits(1, 0), FailMode::Closed);
    let Enter::Run(_p) = q.try_enter(now) else { panic!() };
    let Enter::Wait { waiter, .. } = q.try_enter(now) else { panic!() };
    let WaitExpiry::TimedOut(e) = q.expire(waiter) else { panic!("timed out") };
    assert_eq!((e.code, e.code.status()), (QueueCode::QueueTimeout, 503));
    assert_eq!(q.queued(), 0);

    let mut q = AdmissionQueue::new("qs", limits(1, 1), FailMode::Open);
    let Enter::Run(_p) = q.try_enter(now) else { panic!() };
    let Enter::Wait { waiter, .. } = q.try_enter(now) else { panic!() };
    assert_eq!(q.try_enter(now), Enter::Bypass);
    assert_eq!(q.expire(waiter), WaitExpiry::Bypass);
}

#[derive(Debug, Clone)]
enum Op {
    Enter,
    Release(usize),
    Expire(usize),
    Cancel(usize),
}

proptest! {
    #[test]
    fn admission_never_exceeds_the_depth_or_concurrency(
        ops in proptest::collection::vec(prop_oneof![
            3 => Just(Op::Enter),
            2 => (0usize..16).prop_map(Op::Release),
            1 => (0usize..16).prop_map(Op::Expire),
            1 => (0usize..16).prop_map(Op::Cancel),
        ], 1..200),
        concurrent in 1usize..4,
        depth in 0usize..4,
        open in any::<bool>(),
    ) {
        let now = t0();
        let mode = if open { FailMode::Open } else { FailMode::Closed };
        let mut q = AdmissionQueue::new("p", limits(concurrent, depth), mode);
        let mut permits: Vec<Permit> = Vec::new();
        let mut waiters: Vec<u64> = Vec::new();
        let mut promoted: Vec<u64> = Vec::new();
        for op in ops {
            match op {
                Op::Enter => match q.try_enter(now) {
                    Enter::Run(p) => permits.push(p),
                    Enter::Wait { waiter, .. } => waiters.push(waiter),
                    Enter::Bypass => prop_assert!(open),
                    Enter::Reject(e) => { prop_assert!(!open); prop_assert_eq!(e.code, QueueCode::QueueFull); prop_assert!(depth > 0); }
                },
                Op::Release(i) if !permits.is_empty() => {
                    let p = permits.remove(i % permits.len());
                    if let Some(w) = q.release(p) { promoted.push(w); waiters.retain(|x| *x != w); }
                }
                Op::Expire(i) if !waiters.is_empty() => {
                    let w = waiters.remove(i % waiters.len());
                    match q.expire(w) {
                        WaitExpiry::Promoted(_) => prop_assert!(false, "waiter was not promoted"),
                        WaitExpiry::TimedOut(_) => prop_assert!(!open),
                        WaitExpiry::Bypass => prop_assert!(open),
                    }
                }
                Op::Cancel(i) if !waiters.is_empty() => { let w = waiters.remove(i % waiters.len()); if let Some(p) = q.cancel(w) { promoted.push(p); waiters.retain(|x| *x != p); } }
                _ => {}
            }
            for w in promoted.drain(..) {
                permits.push(q.take_promoted(w).expect("promoted waiter has a permit"));
            }
            prop_assert!(q.running() <= concurrent, "running {} > {}", q.running(), concurrent);
            if depth > 0 { prop_assert!(q.queued() <= depth, "queued {} > depth {}", q.queued(), depth); }
            prop_assert_eq!(q.running(), permits.len(), "leaked permits");
            prop_assert_eq!(q.queued(), waiters.len());
        }
    }
}
