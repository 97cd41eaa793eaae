//! One contract for every store: the same calls at the same instants get the same answers from
//! the gateway's SQLite store, from Redis (what replicas share in production) and from the
//! simulation's store host (what they share in the simulation), so the three cannot drift.
//! Redis is a real `redis-server` (`chaos::redis`); the store host runs on a loopback port;
//! every case uses its own key prefix or its own store host, so cases never see each other.

mod stores;

use chaos::redis::Redis;
use ferroute_core::session::lease::{Lease, LeaseState};
use futures_util::StreamExt;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use proxy::replicas::shared_store::{RedisStore, SharedStore, StoreOp};
use proxy::sessions::lease_shared::SharedLeases;
use proxy::sessions::lease_store::{Acquired, NoCapacity};
use proxy::sessions::leases::LeaseBackend;
use proxy::state::store::Store;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use stores::{redis_store, runtime, sim_clients, sim_store};

const TTL: Duration = Duration::from_secs(120);

fn conns(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("c{i}")).collect()
}

fn granted(a: Acquired) -> Lease {
    match a {
        Acquired::Lease(l) => l,
        other => panic!("expected a lease, got {other:?}"),
    }
}

/// The walk-through every lease store must give exactly: acquire, idempotent re-acquire,
/// capacity, renew, release, the next generation, lazy expiry, invalidation.
async fn walk_through(b: LeaseBackend<'_>) {
    let a = granted(b.acquire("o1", "team", "m", &conns(2), TTL, 1_000).await.expect("acquire"));
    assert_eq!((a.connection.as_str(), a.generation, a.expires_at_ms, a.state), ("c0", 1, 121_000, LeaseState::Active));
    assert_eq!(b.acquire("o1", "team", "m", &conns(2), TTL, 2_000).await.expect("again"), Acquired::Lease(a.clone()));
    assert_eq!(b.acquire("o1", "team", "m", &conns(2)[1..], TTL, 2_000).await.expect("busy"), Acquired::OwnerBusy);
    assert_eq!(b.acquire("o1", "other", "m", &conns(2), TTL, 2_000).await.expect("busy"), Acquired::OwnerBusy);
    let o2 = granted(b.acquire("o2", "team", "m", &conns(2), TTL, 3_000).await.expect("o2"));
    assert_eq!(o2.connection, "c1");
    assert_eq!(
        b.acquire("o3", "team", "m", &conns(2), TTL, 4_000).await.expect("o3"),
        Acquired::Full(NoCapacity { soonest_expiry_ms: Some(121_000), eligible: 2, free: 0 })
    );
    let renewed = b.renew("o1", 1, TTL, 100_000).await.expect("renew").expect("exists");
    assert_eq!((renewed.renewed_at_ms, renewed.expires_at_ms), (100_000, 220_000));
    let released = b.release("o1", 1, 101_000).await.expect("release").expect("exists");
    assert_eq!((released.state, released.renewed_at_ms), (LeaseState::Released, 101_000));
    assert_eq!(
        b.release("o1", 1, 101_500).await.expect("again"),
        Some(released.clone()),
        "a second release changes nothing"
    );
    assert_eq!(b.renew("o1", 1, TTL, 101_500).await.expect("renew"), Some(released), "nor does a renew");
    assert_eq!(b.lease("o1", 9, 101_500).await.expect("read"), None);
    let c = granted(b.acquire("o1", "team", "m", &conns(2), TTL, 102_000).await.expect("re"));
    assert_eq!((c.generation, c.connection.as_str()), (2, "c0"));
    // o2's lease lapses at 123 000 and is reclaimed by the next call that meets it.
    let d = granted(b.acquire("o3", "team", "m", &conns(2), TTL, 123_000).await.expect("d"));
    assert_eq!(d.connection, "c1");
    assert_eq!(b.lease("o2", 1, 123_000).await.expect("read").map(|l| l.state), Some(LeaseState::Expired));
    assert_eq!(b.active(123_000).await.expect("count"), 2);
    let n = b.invalidate(&|_: &str, c: &str| c != "c1", 124_000).await.expect("invalidate");
    assert_eq!(n, 1);
    let gone = b.lease("o3", 1, 124_000).await.expect("read").expect("kept");
    assert_eq!((gone.state, gone.renewed_at_ms), (LeaseState::Invalidated, 124_000));
    assert_eq!(b.active(124_000).await.expect("count"), 1);
    assert_eq!(b.invalidate(&|_: &str, _: &str| true, 124_000).await.expect("none"), 0);
}

#[test]
fn sqlite_redis_and_the_store_host_walk_through_the_same_answers() {
    let rt = runtime();
    let Some(redis) = rt.block_on(Redis::start()) else { return };
    let store = Store::in_memory().expect("store");
    rt.block_on(walk_through(LeaseBackend::Sqlite(&store)));
    let leases = SharedLeases::new(redis_store(&redis, "walk"));
    rt.block_on(walk_through(LeaseBackend::Shared(&leases)));
    let leases = SharedLeases::new(rt.block_on(sim_store()));
    rt.block_on(walk_through(LeaseBackend::Shared(&leases)));
}

/// One step of a random sequence.
#[derive(Debug, Clone)]
enum Op {
    Acquire { owner: usize, key: usize, eligible: usize, ttl_ms: u64 },
    Status { owner: usize, generation: u64 },
    Renew { owner: usize, generation: u64, ttl_ms: u64 },
    Release { owner: usize, generation: u64 },
    Invalidate { banned: usize },
    Count,
}

fn op() -> impl Strategy<Value = Op> {
    let owner = 0usize..5;
    let generation = 1u64..4;
    let ttl = prop_oneof![Just(1_000u64), Just(30_000), Just(120_000)];
    prop_oneof![
        4 => (owner.clone(), 0usize..2, 1usize..4, ttl.clone())
            .prop_map(|(owner, key, eligible, ttl_ms)| Op::Acquire { owner, key, eligible, ttl_ms }),
        2 => (owner.clone(), generation.clone()).prop_map(|(owner, generation)| Op::Status { owner, generation }),
        2 => (owner.clone(), generation.clone(), ttl)
            .prop_map(|(owner, generation, ttl_ms)| Op::Renew { owner, generation, ttl_ms }),
        2 => (owner, generation).prop_map(|(owner, generation)| Op::Release { owner, generation }),
        1 => (0usize..3).prop_map(|banned| Op::Invalidate { banned }),
        1 => Just(Op::Count),
    ]
}

/// What a step answered, in a form both stores can be compared on.
#[derive(Debug, PartialEq)]
enum Answer {
    Acquired(Acquired),
    Lease(Option<Lease>),
    Count(u64),
}

async fn step(b: LeaseBackend<'_>, op: &Op, now: u64) -> Result<Answer, String> {
    let owner = |o: usize| format!("o{o}");
    Ok(match op {
        Op::Acquire { owner: o, key, eligible, ttl_ms } => {
            let pool: Vec<String> = conns(3).into_iter().skip(3 - eligible).collect();
            let key = ["team", "other"][*key];
            Answer::Acquired(b.acquire(&owner(*o), key, "m", &pool, Duration::from_millis(*ttl_ms), now).await?)
        }
        Op::Status { owner: o, generation } => Answer::Lease(b.lease(&owner(*o), *generation, now).await?),
        Op::Renew { owner: o, generation, ttl_ms } => {
            Answer::Lease(b.renew(&owner(*o), *generation, Duration::from_millis(*ttl_ms), now).await?)
        }
        Op::Release { owner: o, generation } => Answer::Lease(b.release(&owner(*o), *generation, now).await?),
        Op::Invalidate { banned } => {
            let banned = format!("c{banned}");
            Answer::Count(b.invalidate(&|_: &str, c: &str| c != banned, now).await? as u64)
        }
        Op::Count => Answer::Count(b.active(now).await?),
    })
}

/// Every random sequence of acquires, reads, renewals, releases and invalidations gets the
/// same answers from all three stores, step by step, and none ever holds two active leases for
/// one owner or one connection.
#[test]
fn sqlite_redis_and_the_store_host_answer_every_sequence_alike() {
    let rt = runtime();
    let Some(redis) = rt.block_on(Redis::start()) else { return };
    let case = AtomicU64::new(0);
    let mut runner = TestRunner::new(Config { cases: 64, failure_persistence: None, ..Config::default() });
    // Steps on a coarse grid, so that calls land exactly on expiry instants too.
    let dt = prop_oneof![Just(0u64), Just(500), Just(1_000), Just(29_000), Just(30_000), Just(90_000)];
    let ops = proptest::collection::vec((op(), dt), 1..50);
    runner
        .run(&ops, |ops| {
            let store = Store::in_memory().expect("store");
            let leases =
                SharedLeases::new(redis_store(&redis, &format!("seq{}", case.fetch_add(1, Ordering::Relaxed))));
            let host = SharedLeases::new(rt.block_on(sim_store()));
            let (s, r, h) = (LeaseBackend::Sqlite(&store), LeaseBackend::Shared(&leases), LeaseBackend::Shared(&host));
            rt.block_on(async {
                let mut now = 1_000u64;
                for (i, (op, dt)) in ops.iter().enumerate() {
                    now += dt;
                    let a = step(s, op, now).await.map_err(TestCaseError::fail)?;
                    let b = step(r, op, now).await.map_err(TestCaseError::fail)?;
                    let c = step(h, op, now).await.map_err(TestCaseError::fail)?;
                    prop_assert_eq!(&a, &b, "redis at step {} ({:?}) at {}", i, op, now);
                    prop_assert_eq!(&a, &c, "the store host at step {} ({:?}) at {}", i, op, now);
                    let mut owners = BTreeSet::new();
                    let mut held = BTreeSet::new();
                    for o in 0..5 {
                        for g in 1..8 {
                            if let Some(l) = s.lease(&format!("o{o}"), g, now).await.map_err(TestCaseError::fail)?
                                && l.state_at(now) == LeaseState::Active
                            {
                                prop_assert!(owners.insert(o), "owner o{} holds two leases", o);
                                prop_assert!(held.insert(l.connection.clone()), "{} leased twice", l.connection);
                            }
                        }
                    }
                }
                Ok(())
            })
        })
        .expect("the stores agree");
}

/// Two replicas' worth of clients of one store (Redis, then the store host running the same
/// script), 50 acquires at once for 5 connections: exactly 5 granted, each connection once.
#[test]
fn fifty_concurrent_acquires_through_two_clients_grant_exactly_five() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let Some(redis) = rt.block_on(Redis::start()) else { return };
    let on_redis: Vec<Arc<dyn SharedStore>> = (0..2).map(|_| redis_store(&redis, "fifty")).collect();
    let on_host = rt.block_on(sim_clients(2));
    for (store, clients) in [("redis", on_redis), ("the store host", on_host)] {
        let replicas: Vec<Arc<SharedLeases>> = clients.into_iter().map(|c| Arc::new(SharedLeases::new(c))).collect();
        let grants = rt.block_on(async {
            let tasks: Vec<_> = (0..50)
                .map(|i| {
                    let r = Arc::clone(&replicas[i % 2]);
                    tokio::spawn(
                        async move { r.acquire(&format!("owner{i}"), "team", "m", &conns(5), TTL, 1_000).await },
                    )
                })
                .collect();
            let mut grants = Vec::new();
            for t in tasks {
                match t.await.expect("task").expect("acquire") {
                    Acquired::Lease(l) => grants.push(l.connection),
                    Acquired::Full(n) => assert_eq!((n.eligible, n.free), (5, 0), "{store}"),
                    Acquired::OwnerBusy => panic!("{store}: every owner is new"),
                }
            }
            grants
        });
        let distinct: BTreeSet<&String> = grants.iter().collect();
        assert_eq!((grants.len(), distinct.len()), (5, 5), "{store}: {grants:?}");
        assert_eq!(rt.block_on(replicas[0].active(2_000)).expect("count").len(), 5, "{store}");
    }
}

/// A store that cannot be reached fails the operation within the timeout (the gateway answers
/// 503 LEASE_SERVICE_UNAVAILABLE), and never grants.
#[test]
fn an_unreachable_redis_fails_lease_operations_within_the_timeout() {
    let rt = runtime();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).expect("url");
    let leases = SharedLeases::new(Arc::new(RedisStore::new(client, "down")));
    let started = tokio::time::Instant::now();
    let r = rt.block_on(leases.acquire("o1", "team", "m", &conns(1), TTL, 1_000));
    // The error names its cause: what an operator reads in the log and in the 503's message.
    let e = r.expect_err("an unreachable store never grants").to_string();
    assert!(e.starts_with("redis: ") && e.len() > "redis: ".len(), "{e}");
    assert!(
        started.elapsed() <= proxy::sessions::lease_shared::TIMEOUT + Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
}

/// What a store must do for replicas: writes apply in order, a joining replica reads the
/// latest state and then every message published after it joined, in order, and the store
/// counts what it published (a follower's liveness check).
async fn state_contract(store: Arc<dyn SharedStore>) {
    let set = |f: &str, v: &str| StoreOp::Set { field: f.into(), value: v.into(), expires_ms: None };
    store.apply(vec![set("breaker:a", "1"), set("pin:p:s", "2"), set("breaker:a", "3")]).await.expect("apply");
    let mut fields = store.fields().await.expect("fields");
    fields.sort();
    assert_eq!(fields, ["breaker:a", "pin:p:s"]);
    let (mut stored, mut feed) = store.join().await.expect("join");
    stored.sort();
    assert_eq!(stored, [("breaker:a".to_owned(), "3".to_owned()), ("pin:p:s".to_owned(), "2".to_owned())]);
    store
        .apply(vec![
            StoreOp::Delete { fields: vec!["pin:p:s".into(), "absent".into()] },
            StoreOp::Delete { fields: vec![] },
            StoreOp::Publish { message: "m1".into() },
            set("lockout:x", "4"),
            StoreOp::Publish { message: "m2".into() },
        ])
        .await
        .expect("apply");
    store.apply(vec![StoreOp::Publish { message: "m3".into() }]).await.expect("publish");
    for want in ["m1", "m2", "m3"] {
        let got = tokio::time::timeout(Duration::from_secs(5), feed.next()).await.expect("in time").expect("a message");
        assert_eq!(String::from_utf8_lossy(&got), want);
    }
    let mut fields = store.fields().await.expect("fields");
    fields.sort();
    assert_eq!(fields, ["breaker:a", "lockout:x"]);
    assert_eq!(store.published().await.expect("count"), 3, "every message published is counted");
    // A batch of deletes alone is written too (the gateway's batches publish beside them, but
    // the interface does not ask it to), and one that deletes nothing is no error.
    store.apply(vec![StoreOp::Delete { fields: vec!["lockout:x".into()] }]).await.expect("delete");
    store.apply(vec![StoreOp::Delete { fields: vec![] }]).await.expect("an empty delete");
    assert_eq!(store.fields().await.expect("fields"), ["breaker:a"]);
    assert_eq!(store.published().await.expect("count"), 3, "deletes publish nothing");
}

/// Fields with an end go once it has passed, and only then: 100 000 short locks leave the
/// stored state as it was (a field rewritten with a later end, or with none, stays).
async fn prune_contract(store: Arc<dyn SharedStore>) {
    let set = |f: String, expires_ms: Option<u64>| StoreOp::Set { field: f, value: "v".into(), expires_ms };
    store
        .apply(vec![
            set("breaker:a".into(), None),
            set("connection:k1".into(), None),
            set("lockout:p:k1:long".into(), Some(10_000_000)),
        ])
        .await
        .expect("apply");
    for chunk in 0..20u64 {
        let ops = (0..5_000u64)
            .map(|i| set(format!("lockout:p:k{}:m{}", chunk % 4, chunk * 5_000 + i), Some(1_000 + chunk)))
            .collect();
        store.apply(ops).await.expect("apply");
    }
    store
        .apply(vec![
            // Rewritten: with a later end, and with none (the lock became something kept).
            set("lockout:p:k0:m0".into(), Some(5_000)),
            set("lockout:p:k1:m5000".into(), None),
            StoreOp::Prune { now_ms: 999 },
        ])
        .await
        .expect("apply");
    assert_eq!(store.fields().await.expect("fields").len(), 100_003, "nothing has ended at 999");
    store.apply(vec![StoreOp::Prune { now_ms: 2_000 }]).await.expect("prune");
    let mut fields = store.fields().await.expect("fields");
    fields.sort();
    assert_eq!(
        fields,
        ["breaker:a", "connection:k1", "lockout:p:k0:m0", "lockout:p:k1:long", "lockout:p:k1:m5000"],
        "only what has not ended"
    );
    store.apply(vec![StoreOp::Prune { now_ms: 6_000 }]).await.expect("prune");
    assert_eq!(store.fields().await.expect("fields").len(), 4, "the rewritten lock ended at 5 000");
}

#[test]
fn redis_and_the_store_host_prune_ended_fields_alike() {
    let rt = runtime();
    let Some(redis) = rt.block_on(Redis::start()) else { return };
    rt.block_on(prune_contract(redis_store(&redis, "prune")));
    rt.block_on(async { prune_contract(sim_store().await).await });
}

#[test]
fn redis_and_the_store_host_keep_and_publish_state_alike() {
    let rt = runtime();
    let Some(redis) = rt.block_on(Redis::start()) else { return };
    rt.block_on(state_contract(redis_store(&redis, "state")));
    rt.block_on(async { state_contract(sim_store().await).await });
}
