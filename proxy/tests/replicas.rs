//! Two real `ferroute` processes sharing resilience state through one real `redis-server`
//! (`[state] backend = "redis"`). Each test starts its own server on a free loopback port in a
//! temporary directory. `.ci/run` installs `redis-server` with `tests/redis/setup.sh`, and in CI
//! a missing server fails these tests; outside CI they run that script themselves, and say they
//! were skipped when it cannot install one (it needs apt-get and root).

mod common;

use chaos::client::{Reply, breaker, connection_status, health, health_field, send};
use chaos::redis::Redis;
use common::{Proc, chat_at, json, spawn, upstream};
use scenarios::{Behaviour, Script, ScriptedUpstream};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;
use tokio::time::Instant;

/// One replica's config: provider `up` with `connections`, its breaker opening at `threshold`
/// failures, sharing through `redis` under `prefix` as `name`.
fn config(
    dir: &Path,
    up: SocketAddr,
    connections: &[&str],
    threshold: u32,
    redis: &str,
    prefix: &str,
    name: &str,
) -> String {
    let mut cfg = format!(
        "[server]\ndata_dir = \"{}\"\n[state]\nbackend = \"redis\"\nurl = \"{redis}\"\nprefix = \"{prefix}\"\nreplica = \"{name}\"\n\
         [[providers]]\nid = \"up\"\nbase_url = \"http://{up}/v1\"\nmodels = [\"down\", \"limited\", \"fine\"]\n\
         [resilience.breaker.api_key]\nfailure_threshold = {threshold}\ndegradation_threshold = {threshold}\nreset_timeout_ms = 600000\n",
        dir.join(format!("data-{name}")).display()
    );
    for c in connections {
        cfg.push_str(&format!("[[connections]]\nid = \"{c}\"\nprovider = \"up\"\napi_key = \"sk-{c}\"\n"));
    }
    cfg
}

async fn replica(dir: &Path, cfg: String, name: &str) -> Proc {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, cfg).expect("write config");
    let p = spawn(&["--config", &path.display().to_string()], dir).await;
    wait_for(&p.base, "the replica joins the shared state", |h| h["state"]["reachable"] == true).await;
    p
}

/// Polls `base`'s health until `ok` holds (5 s at most); returns that health.
async fn wait_for(base: &str, what: &str, ok: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let h = health(base).await.expect("health");
        if ok(&h) {
            return h;
        }
        assert!(Instant::now() < deadline, "{what}: not within 5 s; health: {h}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn script() -> ScriptedUpstream {
    ScriptedUpstream::new()
        .route("down", Script::always(Behaviour::status(503, "{}")))
        .route("limited", Script::always(Behaviour::status_with(429, &[("retry-after", "120")], "{}")))
        .route("fine", Script::always(Behaviour::echo()))
}

/// Milliseconds of the day of an RFC 3339 UTC time (`…THH:MM:SS.mmmZ`).
fn ms_of_day(t: &str) -> i64 {
    let time = t.split('T').nth(1).unwrap_or_else(|| panic!("not RFC 3339: {t}")).trim_end_matches('Z');
    let mut parts = time.split(':');
    let h: i64 = parts.next().and_then(|x| x.parse().ok()).expect("hours");
    let m: i64 = parts.next().and_then(|x| x.parse().ok()).expect("minutes");
    let s: f64 = parts.next().and_then(|x| x.parse().ok()).expect("seconds");
    (h * 3600 + m * 60) * 1000 + (s * 1000.0).round() as i64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_split_across_two_replicas_open_the_breaker_on_both() {
    let Some(redis) = Redis::start().await else { return };
    let (up, script) = upstream(script()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    // Each replica holds its own key of the provider, so each failure is a different
    // connection's (the breaker counts one failure per connection inside its window).
    let a = replica(dir.path(), config(dir.path(), up, &["k1"], 2, &redis.url(), "split", "a"), "a").await;
    let b = replica(dir.path(), config(dir.path(), up, &["k2"], 2, &redis.url(), "split", "b"), "b").await;

    assert_eq!(chat_at(&a.base, "up/down").await.status, 503);
    wait_for(&b.base, "B counts A's failure", |h| h["providers"][0]["failures"] == 1).await;
    assert_eq!(breaker(&health(&a.base).await.expect("health"), "up"), "CLOSED", "one failure of two");

    assert_eq!(chat_at(&b.base, "up/down").await.status, 503);
    let hb = health(&b.base).await.expect("health");
    assert_eq!(breaker(&hb, "up"), "OPEN", "B's own failure is the second: {hb}");
    let ha = wait_for(&a.base, "A opens on B's failure", |h| breaker(h, "up") == "OPEN").await;
    assert_eq!(script.calls("down"), 2);

    // Both refuse without calling the provider.
    for p in [&a, &b] {
        assert_eq!(chat_at(&p.base, "up/down").await.status, 503);
    }
    assert_eq!(script.calls("down"), 2, "neither replica sent anything once open");
    assert!(ha["state"]["applied"].as_u64().is_some_and(|n| n >= 1), "{ha}");
    assert_eq!(ha["state"]["backend"], "redis");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_started_late_sees_the_cooldowns_remaining_time() {
    let Some(redis) = Redis::start().await else { return };
    let (up, script) = upstream(script()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let a = replica(dir.path(), config(dir.path(), up, &["k1"], 5, &redis.url(), "late", "a"), "a").await;
    assert_eq!(chat_at(&a.base, "up/limited").await.status, 429);
    let ha = health(&a.base).await.expect("health");
    assert_eq!(connection_status(&ha, "k1"), "unavailable");
    let until_a = ms_of_day(&health_field(&ha, "connections", "k1", "rate_limited_until"));

    // A fresh 120 s cooldown taken now would end 1.5 s after A's.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let b = replica(dir.path(), config(dir.path(), up, &["k1"], 5, &redis.url(), "late", "b"), "b").await;
    let hb = health(&b.base).await.expect("health");
    assert_eq!(connection_status(&hb, "k1"), "unavailable", "B learned the cooldown from the store: {hb}");
    let until_b = ms_of_day(&health_field(&hb, "connections", "k1", "rate_limited_until"));
    let skew = (until_b - until_a).rem_euclid(86_400_000).min((until_a - until_b).rem_euclid(86_400_000));
    assert!(skew < 250, "B's cooldown ends with A's (A {until_a}, B {until_b} ms of the day)");
    assert_eq!(chat_at(&b.base, "up/limited").await.status, 429);
    assert_eq!(script.calls("limited"), 1, "B refused k1 without sending");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_gone_requests_are_served_and_the_replicas_resync_when_it_returns() {
    let Some(mut redis) = Redis::start().await else { return };
    let (up, script) = upstream(script()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let a = replica(dir.path(), config(dir.path(), up, &["k1"], 5, &redis.url(), "gone", "a"), "a").await;
    let b = replica(dir.path(), config(dir.path(), up, &["k1"], 5, &redis.url(), "gone", "b"), "b").await;

    redis.kill();
    wait_for(&a.base, "A notices the store is gone", |h| h["state"]["reachable"] == false).await;
    for _ in 0..20 {
        assert_eq!(chat_at(&a.base, "up/fine").await.status, 200, "served on local state");
        assert_eq!(chat_at(&b.base, "up/fine").await.status, 200, "served on local state");
    }
    assert_eq!(script.calls("fine"), 40);
    // A change made while the store is down reaches B once it is back (A resyncs in full).
    assert_eq!(chat_at(&a.base, "up/limited").await.status, 429);
    assert_eq!(connection_status(&health(&b.base).await.expect("health"), "k1"), "active");

    redis.restart().await;
    wait_for(&a.base, "A reconnects", |h| h["state"]["reachable"] == true).await;
    wait_for(&b.base, "B learns A's cooldown after the resync", |h| connection_status(h, "k1") == "unavailable").await;
}

/// Two replicas whose key `team` may lease the provider's five connections `c0`…`c4`.
fn lease_config(dir: &Path, up: SocketAddr, redis: &str, name: &str) -> String {
    let mut cfg = config(dir, up, &["c0", "c1", "c2", "c3", "c4"], 5, redis, "leases", name);
    cfg.push_str(
        "[[keys]]\nid = \"team\"\nkey = \"team-key-0001\"\npermissions = [\"lease:exclusive\"]\n\
         allowed_connections = [\"c0\", \"c1\", \"c2\", \"c3\", \"c4\"]\n",
    );
    cfg
}

fn owner(n: usize) -> String {
    format!("vlo_{:0>43}", n)
}

async fn lease(base: &str, owner: &str, body: &str) -> Reply {
    let headers = [
        ("content-type", "application/json"),
        ("authorization", "Bearer team-key-0001"),
        ("x-ferroute-lease-owner", owner),
    ];
    send("POST", &format!("{base}/api/v1/session-leases"), &headers, body, Duration::from_secs(10))
        .await
        .expect("lease")
}

async fn fenced_chat(base: &str, owner: &str, generation: u64) -> Reply {
    let g = generation.to_string();
    let headers = [
        ("authorization", "Bearer team-key-0001"),
        ("x-ferroute-lease-owner", owner),
        ("x-ferroute-lease-generation", g.as_str()),
    ];
    let body = serde_json::json!({"model": "up/fine", "messages": [{"role": "user", "content": "hi"}]}).to_string();
    send("POST", &format!("{base}/v1/chat/completions"), &headers, &body, Duration::from_secs(10)).await.expect("chat")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_lease_acquires_through_both_replicas_grant_exactly_five() {
    let Some(mut redis) = Redis::start().await else { return };
    let (up, _script) = upstream(script()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let a = replica(dir.path(), lease_config(dir.path(), up, &redis.url(), "a"), "a").await;
    let b = replica(dir.path(), lease_config(dir.path(), up, &redis.url(), "b"), "b").await;

    let acquire = r#"{"action":"acquire","model":"up/fine"}"#;
    let replies = futures_util::future::join_all((0..50).map(|i| {
        let base = if i % 2 == 0 { a.base.clone() } else { b.base.clone() };
        async move { (i, lease(&base, &owner(i), acquire).await) }
    }))
    .await;
    let mut granted = Vec::new();
    for (i, r) in &replies {
        match r.status {
            200 => granted.push((*i, json(r)["connection"]["id"].as_str().expect("connection").to_owned())),
            429 => assert_eq!(json(r)["error"]["code"], "LEASE_CAPACITY_UNAVAILABLE", "{}", r.body),
            s => panic!("acquire {i}: {s} {}", r.body),
        }
    }
    let connections: std::collections::BTreeSet<&String> = granted.iter().map(|(_, c)| c).collect();
    assert_eq!((granted.len(), connections.len()), (5, 5), "exactly five, one per connection: {granted:?}");
    for p in [&a, &b] {
        assert_eq!(health(&p.base).await.expect("health")["leases"]["active"], 5);
    }

    // A lease granted through one replica fences requests through the other.
    let (i, c) = &granted[0];
    let other = if i % 2 == 0 { &b.base } else { &a.base };
    let r = fenced_chat(other, &owner(*i), 1).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.headers.get("x-ferroute-selected-connection-id").and_then(|v| v.to_str().ok()), Some(c.as_str()));
    assert_eq!(fenced_chat(other, &owner(*i), 2).await.status, 409, "a generation never granted is refused");

    // Without the store, leases are refused rather than risk a double grant; other requests
    // are still served.
    redis.kill();
    let r = lease(&a.base, &owner(99), acquire).await;
    assert_eq!((r.status, json(&r)["error"]["code"].as_str()), (503, Some("LEASE_SERVICE_UNAVAILABLE")), "{}", r.body);
    let r = fenced_chat(&b.base, &owner(*i), 1).await;
    assert_eq!((r.status, json(&r)["error"]["code"].as_str()), (503, Some("LEASE_SERVICE_UNAVAILABLE")), "{}", r.body);
    let body = serde_json::json!({"model": "up/fine", "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let headers = [("authorization", "Bearer team-key-0001")];
    let r = send("POST", &format!("{}/v1/chat/completions", a.base), &headers, &body, Duration::from_secs(10)).await;
    assert_eq!(r.expect("chat").status, 200, "a request without a lease is served");
    assert_eq!(health(&a.base).await.expect("health")["leases"]["active"], serde_json::Value::Null);
}

async fn chat_in_session(base: &str, session: &str) -> String {
    let body = serde_json::json!({"model": "up/fine", "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let headers = [("x-session-id", session)];
    let r = send("POST", &format!("{base}/v1/chat/completions"), &headers, &body, Duration::from_secs(10))
        .await
        .expect("chat");
    assert_eq!(r.status, 200, "{}", r.body);
    r.headers.get("x-ferroute-selected-connection-id").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_pins_and_the_emergency_switch_are_shared() {
    let Some(redis) = Redis::start().await else { return };
    let (up, _script) = upstream(script()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = |name: &str| {
        config(dir.path(), up, &["k1", "k2", "k3"], 5, &redis.url(), "pins", name).replacen(
            "[server]\n",
            "[server]\nadmin_key = \"admin-secret-1\"\n",
            1,
        ) + "[resilience.session_affinity]\nttl_ms = 600000\n[emergency_fallback]\ntarget = \"up/fine\"\n"
    };
    let a = replica(dir.path(), cfg("a"), "a").await;
    let b = replica(dir.path(), cfg("b"), "b").await;

    // B pins session s2 to k1, so its own choice for a new session would be k2 (the least
    // recently used key); A pins s1 to k1.
    assert_eq!(chat_in_session(&b.base, "s2").await, "k1");
    assert_eq!(chat_in_session(&a.base, "s1").await, "k1");
    wait_for(&b.base, "B learns A's pin", |h| h["session_pins"] == 2).await;
    assert_eq!(chat_in_session(&b.base, "s1").await, "k1", "s1 stays where A pinned it");
    assert_eq!(chat_in_session(&b.base, "s3").await, "k2", "a new session on B goes to the key it used least");

    // An operator's switch on A reaches B, and a replica that starts later.
    let admin = [("authorization", "Bearer admin-secret-1"), ("content-type", "application/json")];
    let url = format!("{}/api/resilience/emergency-fallback", a.base);
    let on = send("POST", &url, &admin, r#"{"enabled":true}"#, Duration::from_secs(10)).await.expect("switch");
    assert_eq!(on.status, 200, "{}", on.body);
    wait_for(&b.base, "B follows A's switch", |h| h["emergency_fallback"]["enabled"] == true).await;
    let c = replica(dir.path(), cfg("c"), "c").await;
    let hc = wait_for(&c.base, "C loads the switch", |h| h["emergency_fallback"]["enabled"] == true).await;
    assert_eq!(hc["session_pins"], 3, "and the pins: {hc}");
}

/// A replica is ready only once it has joined the shared state: started while Redis is down it
/// answers `/readyz` 503 (and says why), then 200 once Redis is up and joined; losing Redis
/// afterwards does not make it unready (it serves on local state on purpose).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_waits_for_the_shared_state_to_be_joined() {
    let Some(mut redis) = Redis::start().await else { return };
    redis.kill();
    let (up, _script) = upstream(script()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("a.toml");
    std::fs::write(&path, config(dir.path(), up, &["k1"], 3, &redis.url(), "ready", "a")).expect("write config");
    let p = spawn(&["--config", &path.display().to_string()], dir.path()).await;
    let url = format!("{}/readyz", p.base);
    let readyz = || send("GET", &url, &[], "", Duration::from_secs(5));
    let r = readyz().await.expect("readyz");
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.body.contains("has not been joined yet"), "{}", r.body);
    assert_eq!(
        send("GET", &format!("{}/livez", p.base), &[], "", Duration::from_secs(5)).await.expect("livez").status,
        200
    );
    redis.restart().await;
    let deadline = Instant::now() + Duration::from_secs(15);
    while readyz().await.expect("readyz").status != 200 {
        assert!(Instant::now() < deadline, "not ready 15 s after Redis came up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    redis.kill();
    wait_for(&p.base, "the replica notices the store is gone", |h| h["state"]["reachable"] == false).await;
    let r = readyz().await.expect("readyz");
    assert_eq!(r.status, 200, "serving on local state after the loss is deliberate: {}", r.body);
}
