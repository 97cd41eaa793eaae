//! One contract for the OAuth tokens replicas share: the same calls at the same instants get
//! the same answers from Redis (`oauth_redis.lua`, what replicas share in production) and from
//! the simulation's store host (the same script in an embedded Lua over its own keyspace), so
//! a command the store host answers unlike Redis fails here. Redis is a real `redis-server`
//! (`chaos::redis`); each case uses its own key prefix and its own store host.

mod stores;

use chaos::redis::Redis;
use ferroute_core::oauth::Lifetime;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use proxy::replicas::shared_store::SharedStore;
use proxy::replicas::shared_tokens::{Claim, Row, SharedTokens};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use stores::{redis_store, runtime, sim_clients, sim_store};

const TTL: Duration = Duration::from_secs(60);

fn row(generation: u64, origin: &str, expires_at_ms: u64) -> Row {
    Row {
        generation,
        origin: origin.to_owned(),
        blob: format!("0:blob-{origin}-{generation}"),
        lifetime: Lifetime { issued_at_ms: 1_000, expires_at_ms },
        last_refresh_ms: (generation > 0).then_some(1_000),
        refused: false,
    }
}

/// The walk-through both stores must give exactly: seed, claims (granted, busy, newer, behind),
/// publish only under the last fence and as the next generation, a lapsed claim and a lost
/// answer in doubt (never granted again, still published by the holder), release and refuse.
async fn walk_through(t: &SharedTokens) {
    assert_eq!(t.read("c1", 0).await.expect("read"), None);
    assert_eq!(t.claim("c1", 0, "a", 0, TTL).await.expect("claim"), Claim::Nothing);
    assert_eq!(t.seed("c1", 0, &row(0, "o1", 600_000)).await.expect("seed"), row(0, "o1", 600_000));
    // The same sign-in at the same generation from the other replica: the store's stays.
    assert_eq!(t.seed("c1", 1, &row(0, "o1", 700_000)).await.expect("seed"), row(0, "o1", 600_000));
    let a = t.claim("c1", 10, "a", 0, TTL).await.expect("claim");
    assert_eq!(a, Claim::Granted { fence: 1 });
    assert_eq!(t.claim("c1", 20, "b", 0, TTL).await.expect("claim"), Claim::Busy { until_ms: 60_010 });
    // Not the next generation, or not the holder's fence: refused without a write.
    assert_eq!(t.publish("c1", 30, 1, &row(2, "o1", 900_000)).await.expect("p"), Err("generation 0 is stored".into()));
    assert_eq!(
        t.publish("c1", 30, 7, &row(1, "o1", 900_000)).await.expect("p"),
        Err("another replica claimed the refresh".into())
    );
    assert_eq!(t.publish("c1", 40, 1, &row(1, "o1", 900_000)).await.expect("p"), Ok(()));
    assert_eq!(t.publish("c1", 41, 1, &row(1, "o1", 900_000)).await.expect("p").map_err(|_| ()), Err(()));
    assert_eq!(t.claim("c1", 50, "b", 0, TTL).await.expect("claim"), Claim::Newer(row(1, "o1", 900_000)));
    assert_eq!(t.claim("c1", 50, "b", 2, TTL).await.expect("claim"), Claim::Behind);
    // A claim that lapses unpublished: in doubt, and never granted again for that generation.
    assert_eq!(t.claim("c1", 100, "b", 1, TTL).await.expect("claim"), Claim::Granted { fence: 2 });
    assert_eq!(t.claim("c1", 60_099, "a", 1, TTL).await.expect("claim"), Claim::Busy { until_ms: 60_100 });
    assert_eq!(t.claim("c1", 60_100, "a", 1, TTL).await.expect("claim"), Claim::Doubt);
    assert_eq!(t.claim("c1", 900_000, "a", 1, TTL).await.expect("claim"), Claim::Doubt);
    // Its holder can still publish: nobody took the claim over.
    assert_eq!(t.publish("c1", 900_001, 2, &row(2, "o1", 1_900_000)).await.expect("p"), Ok(()));
    assert_eq!(t.claim("c1", 900_002, "a", 2, TTL).await.expect("claim"), Claim::Granted { fence: 3 });
    // Its holder lost the token endpoint's answer: in doubt at once; a stale fence changes nothing.
    assert!(!t.doubt("c1", 900_003, 2).await.expect("doubt"));
    assert!(t.doubt("c1", 900_003, 3).await.expect("doubt"));
    assert_eq!(t.claim("c1", 900_004, "b", 2, TTL).await.expect("claim"), Claim::Doubt);
    // The answer came late: the holder publishes it.
    assert_eq!(t.publish("c1", 900_005, 3, &row(3, "o1", 1_900_000)).await.expect("p"), Ok(()));
    assert_eq!(t.claim("c1", 900_006, "a", 3, TTL).await.expect("claim"), Claim::Granted { fence: 4 });
    // Release settles the claim (no doubt left); a stale fence changes nothing.
    assert!(!t.release("c1", 900_007, 3).await.expect("release"));
    assert!(t.release("c1", 900_007, 4).await.expect("release"));
    assert_eq!(t.claim("c1", 900_008, "a", 3, TTL).await.expect("claim"), Claim::Granted { fence: 5 });
    // Refused: every later claim from that generation hears it, until a new sign-in.
    assert!(t.refuse("c1", 900_009, 5).await.expect("refuse"));
    assert_eq!(t.claim("c1", 900_010, "b", 3, TTL).await.expect("claim"), Claim::Refused);
    let refused = t.read("c1", 900_010).await.expect("read").expect("a row");
    assert!(refused.refused && refused.generation == 3, "{refused:?}");
    // A new sign-in (another origin) replaces a refused row, one generation on.
    let signed_in = t.seed("c1", 900_011, &row(0, "o2", 800_000)).await.expect("seed");
    assert_eq!(signed_in, Row { generation: 4, ..row(0, "o2", 800_000) });
    assert_eq!(t.claim("c1", 900_012, "b", 4, TTL).await.expect("claim"), Claim::Granted { fence: 6 });
    // Another sign-in that expires sooner than the stored one does not replace it.
    assert_eq!(t.seed("c1", 900_013, &row(0, "o3", 700_000)).await.expect("seed"), signed_in);
}

#[test]
fn redis_and_the_store_host_walk_through_the_same_answers() {
    let rt = runtime();
    let Some(redis) = rt.block_on(Redis::start()) else { return };
    rt.block_on(walk_through(&SharedTokens::new(redis_store(&redis, "tokens-walk"))));
    rt.block_on(async { walk_through(&SharedTokens::new(sim_store().await)).await });
}

/// One step of a random sequence.
#[derive(Debug, Clone)]
enum Op {
    Seed { origin: u8, generation: u64, expires: u64 },
    Claim { owner: u8, from: u64 },
    Doubt { fence: u64 },
    Publish { fence: u64, generation: u64 },
    Release { fence: u64 },
    Refuse { fence: u64 },
    Read,
}

fn op() -> impl Strategy<Value = Op> {
    let generation = 0u64..4;
    let fence = 1u64..5;
    prop_oneof![
        1 => (0u8..2, generation.clone(), prop_oneof![Just(500_000u64), Just(900_000)])
            .prop_map(|(origin, generation, expires)| Op::Seed { origin, generation, expires }),
        4 => (0u8..2, generation.clone()).prop_map(|(owner, from)| Op::Claim { owner, from }),
        1 => fence.clone().prop_map(|fence| Op::Doubt { fence }),
        3 => (fence.clone(), generation).prop_map(|(fence, generation)| Op::Publish { fence, generation }),
        1 => fence.clone().prop_map(|fence| Op::Release { fence }),
        1 => fence.prop_map(|fence| Op::Refuse { fence }),
        1 => Just(Op::Read),
    ]
}

async fn step(t: &SharedTokens, op: &Op, now: u64) -> Result<String, String> {
    let e = |e: proxy::replicas::shared_store::StoreError| e.to_string();
    Ok(match op {
        Op::Seed { origin, generation, expires } => {
            format!("{:?}", t.seed("c1", now, &row(*generation, &format!("o{origin}"), *expires)).await.map_err(e)?)
        }
        Op::Claim { owner, from } => {
            format!("{:?}", t.claim("c1", now, &format!("r{owner}"), *from, TTL).await.map_err(e)?)
        }
        Op::Doubt { fence } => format!("{:?}", t.doubt("c1", now, *fence).await.map_err(e)?),
        Op::Publish { fence, generation } => {
            format!("{:?}", t.publish("c1", now, *fence, &row(*generation, "any", 900_000)).await.map_err(e)?)
        }
        Op::Release { fence } => format!("{:?}", t.release("c1", now, *fence).await.map_err(e)?),
        Op::Refuse { fence } => format!("{:?}", t.refuse("c1", now, *fence).await.map_err(e)?),
        Op::Read => format!("{:?}", t.read("c1", now).await.map_err(e)?.map(|r| (r.generation, r.origin, r.blob))),
    })
}

/// Every random sequence of seeds, claims, publications, releases and refusals gets the same
/// answers from Redis and the store host, and neither ever grants a claim while another is
/// live for the same generation.
#[test]
fn redis_and_the_store_host_answer_every_token_sequence_alike() {
    let rt = runtime();
    let Some(redis) = rt.block_on(Redis::start()) else { return };
    let case = AtomicU64::new(0);
    let mut runner = TestRunner::new(Config { cases: 64, failure_persistence: None, ..Config::default() });
    // Steps on a coarse grid, so that calls land exactly on a claim's deadline too.
    let dt = prop_oneof![Just(0u64), Just(1_000), Just(30_000), Just(60_000)];
    let ops = proptest::collection::vec((op(), dt), 1..40);
    runner
        .run(&ops, |ops| {
            let redis =
                SharedTokens::new(redis_store(&redis, &format!("tokseq{}", case.fetch_add(1, Ordering::Relaxed))));
            rt.block_on(async {
                let host = SharedTokens::new(sim_store().await);
                let mut now = 1_000u64;
                // (generation, deadline) of the last claim granted.
                let mut live: Option<(u64, u64)> = None;
                for (i, (op, dt)) in ops.iter().enumerate() {
                    now += dt;
                    let before = redis.read("c1", now).await.map_err(|e| TestCaseError::fail(e.to_string()))?;
                    let a = step(&redis, op, now).await.map_err(TestCaseError::fail)?;
                    let b = step(&host, op, now).await.map_err(TestCaseError::fail)?;
                    prop_assert_eq!(&a, &b, "the store host at step {} ({:?}) at {}", i, op, now);
                    let after = redis.read("c1", now).await.map_err(|e| TestCaseError::fail(e.to_string()))?;
                    let key = |r: &Option<Row>| r.as_ref().map(|r| (r.generation, r.origin.clone(), r.refused));
                    if let (Op::Claim { from, .. }, true) = (op, a.starts_with("Granted")) {
                        if let Some((g, until)) = live {
                            prop_assert!(!(g == *from && until > now), "a second live claim at step {}: {}", i, a);
                        }
                        live = Some((*from, now + 60_000));
                    }
                    // Published, released, refused, or tokens written by a seed: settled.
                    if a == "Ok(Ok(()))" || a == "true" || key(&before) != key(&after) {
                        live = None;
                    }
                }
                Ok(())
            })
        })
        .expect("the stores agree");
}

/// Two replicas' worth of clients of one store (Redis, then the store host running the same
/// script), 40 claims at once from one generation: exactly one granted; the rest hear that the
/// claim is held.
#[test]
fn forty_concurrent_claims_through_two_clients_grant_one() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let Some(redis) = rt.block_on(Redis::start()) else { return };
    let on_redis: Vec<Arc<dyn SharedStore>> = (0..2).map(|_| redis_store(&redis, "tokens-forty")).collect();
    let on_host = rt.block_on(sim_clients(2));
    for (store, clients) in [("redis", on_redis), ("the store host", on_host)] {
        let replicas: Vec<SharedTokens> = clients.into_iter().map(SharedTokens::new).collect();
        rt.block_on(replicas[0].seed("c1", 0, &row(0, "o1", 600_000))).expect("seed");
        let answers = rt.block_on(async {
            let tasks: Vec<_> = (0..40)
                .map(|i| {
                    let r = replicas[i % 2].clone();
                    tokio::spawn(async move { r.claim("c1", 1_000, &format!("r{}", i % 2), 0, TTL).await })
                })
                .collect();
            let mut answers = Vec::new();
            for t in tasks {
                answers.push(t.await.expect("task").expect("claim"));
            }
            answers
        });
        let granted = answers.iter().filter(|a| matches!(a, Claim::Granted { .. })).count();
        let busy = answers.iter().filter(|a| matches!(a, Claim::Busy { until_ms: 61_000 })).count();
        assert_eq!((granted, busy), (1, 39), "{store}: {answers:?}");
    }
}
