//! End-to-end exclusive leases (M14) over real loopback sockets: the lease API and every error
//! code, 50 concurrent acquires for 5 connections, and the generation fence on inference.

mod common;

use common::*;
use proxy::Persistence;
use scenarios::{Behaviour, Script, ScriptedUpstream};

const LEASED: &str = r#"
[[keys]]
id = "team"
key = "team-key-0001"
permissions = ["lease:exclusive"]
allowed_connections = ["c0", "c1", "c2", "c3", "c4"]
[[keys]]
id = "other"
key = "other-key-0002"
permissions = ["lease:exclusive"]
allowed_connections = ["c0", "c1"]
[[keys]]
id = "plain"
key = "plain-key-0003"
[[keys]]
id = "loose"
key = "loose-key-0004"
permissions = ["lease:exclusive"]
[[providers]]
id = "up"
base_url = "{UP}"
models = ["m"]
[[connections]]
id = "c0"
provider = "up"
api_key = "sk-0"
[[connections]]
id = "c1"
provider = "up"
api_key = "sk-1"
[[connections]]
id = "c2"
provider = "up"
api_key = "sk-2"
[[connections]]
id = "c3"
provider = "up"
api_key = "sk-3"
[[connections]]
id = "c4"
provider = "up"
api_key = "sk-4"
"#;

fn owner(n: usize) -> String {
    format!("vlo_{:A>43}", format!("owner{n}"))
}

async fn lease(gw: &Running, key: &str, owner: &str, body: serde_json::Value) -> Reply {
    let auth = format!("Bearer {key}");
    let headers =
        [("content-type", "application/json"), ("authorization", auth.as_str()), ("x-ferroute-lease-owner", owner)];
    send("POST", &gw.url("/api/v1/session-leases"), &headers, &body.to_string()).await
}

async fn fenced(gw: &Running, key: &str, owner: &str, generation: &str) -> Reply {
    let auth = format!("Bearer {key}");
    let headers = [
        ("content-type", "application/json"),
        ("authorization", auth.as_str()),
        ("x-ferroute-lease-owner", owner),
        ("x-ferroute-lease-generation", generation),
    ];
    let body = serde_json::json!({"model": "up/m", "messages": [{"role": "user", "content": "hi"}]});
    send("POST", &gw.url("/v1/chat/completions"), &headers, &body.to_string()).await
}

fn code(r: &Reply) -> String {
    r.json()["error"]["code"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_acquires_for_five_connections() {
    let up = upstream(ScriptedUpstream::new().route("m", Script::always(Behaviour::echo()))).await;
    let gw = start(config(LEASED, &up), Persistence::Memory).await;
    let tasks: Vec<_> = (0..50)
        .map(|n| {
            let url = gw.url("/api/v1/session-leases");
            tokio::spawn(async move {
                let o = owner(n);
                let headers = [
                    ("content-type", "application/json"),
                    ("authorization", "Bearer team-key-0001"),
                    ("x-ferroute-lease-owner", o.as_str()),
                ];
                send("POST", &url, &headers, r#"{"action":"acquire","model":"up/m"}"#).await
            })
        })
        .collect();
    let mut granted = Vec::new();
    let mut refused = 0;
    for t in tasks {
        let r = t.await.expect("task");
        match r.status {
            200 => granted.push(r.json()["connection"]["id"].as_str().unwrap_or_default().to_owned()),
            429 => {
                refused += 1;
                let s: u64 = r.header("retry-after").and_then(|v| v.parse().ok()).expect("Retry-After");
                assert!((1..=120).contains(&s), "{s}");
                let body = r.json();
                assert_eq!(body["error"]["code"], "LEASE_CAPACITY_UNAVAILABLE");
                assert_eq!((body["eligible_count"].as_u64(), body["free_count"].as_u64()), (Some(5), Some(0)));
                let named = ["vlo_", "team", "\"c0\"", "\"c1\"", "\"c2\"", "\"c3\"", "\"c4\""];
                assert!(named.iter().all(|n| !r.body.contains(n)), "owners, keys or connections in: {}", r.body);
            }
            other => panic!("unexpected {other}: {}", r.body),
        }
    }
    granted.sort();
    assert_eq!(granted, vec!["c0", "c1", "c2", "c3", "c4"], "exactly one lease per connection");
    assert_eq!(refused, 45);
    assert_eq!(health(&gw).await["leases"]["active"], 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fence_sends_a_leased_request_to_its_connection_and_refuses_a_stale_one() {
    let up = upstream(ScriptedUpstream::new().route("m", Script::always(Behaviour::echo()))).await;
    let gw = start(config(LEASED, &up), Persistence::Memory).await;
    let me = owner(1);
    // Another owner holds c0, so this one gets c1.
    assert_eq!(
        lease(&gw, "team-key-0001", &owner(0), serde_json::json!({"action": "acquire", "model": "up/m"})).await.status,
        200
    );
    let r =
        lease(&gw, "team-key-0001", &me, serde_json::json!({"action": "acquire", "model": "up/m", "ttl_ms": 60000}))
            .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let l = r.json();
    assert_eq!(
        (l["state"].as_str(), l["generation"].as_u64(), l["connection"]["id"].as_str()),
        (Some("ACTIVE"), Some(1), Some("c1"))
    );
    for _ in 0..3 {
        let r = fenced(&gw, "team-key-0001", &me, "1").await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.header("x-ferroute-selected-connection-id"), Some("c1"));
    }
    // Lease headers never reach the upstream.
    assert!(up.script.requests().iter().all(|q| !q.headers.keys().any(|k| k.starts_with("x-ferroute-lease"))));
    // Status, renew.
    let s = lease(&gw, "team-key-0001", &me, serde_json::json!({"action": "status", "generation": 1})).await;
    assert_eq!((s.status, s.json()["state"].as_str()), (200, Some("ACTIVE")));
    let renewed = lease(&gw, "team-key-0001", &me, serde_json::json!({"action": "renew", "generation": "1"})).await;
    assert_eq!(renewed.status, 200, "{}", renewed.body);
    // Another key cannot use this lease; a wrong generation is no lease.
    assert_eq!(code(&fenced(&gw, "other-key-0002", &me, "1").await), "LEASE_CONNECTION_MISMATCH");
    assert_eq!(code(&fenced(&gw, "team-key-0001", &me, "2").await), "LEASE_REQUIRED");
    // After release the generation is stale: refused before anything is dispatched.
    let calls = up.script.requests().len();
    let rel = lease(
        &gw,
        "team-key-0001",
        &me,
        serde_json::json!({"action": "release", "generation": 1, "reason": "OWNER_EXIT"}),
    )
    .await;
    assert_eq!((rel.status, rel.json()["state"].as_str()), (200, Some("RELEASED")));
    let stale = fenced(&gw, "team-key-0001", &me, "1").await;
    assert_eq!((stale.status, code(&stale)), (409, "LEASE_FENCE_STALE".to_owned()));
    assert_eq!(
        lease(&gw, "team-key-0001", &me, serde_json::json!({"action": "renew", "generation": 1})).await.status,
        409
    );
    assert_eq!(up.script.requests().len(), calls);
    // The next acquire is generation 2.
    let again = lease(&gw, "team-key-0001", &me, serde_json::json!({"action": "acquire", "model": "up/m"})).await;
    assert_eq!(again.json()["generation"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_lease_request_gets_its_code_and_changes_nothing() {
    let up = upstream(ScriptedUpstream::new().route("m", Script::always(Behaviour::echo()))).await;
    let gw = start(config(LEASED, &up), Persistence::Memory).await;
    let me = owner(7);
    let acquire = serde_json::json!({"action": "acquire", "model": "up/m"});
    let url = gw.url("/api/v1/session-leases");
    let cases: Vec<(Reply, u16, &str)> = vec![
        (
            send("POST", &url, &[("content-type", "application/json")], &acquire.to_string()).await,
            401,
            "LEASE_AUTHENTICATION_REQUIRED",
        ),
        (lease(&gw, "wrong-key-9999", &me, acquire.clone()).await, 401, "LEASE_API_KEY_INVALID"),
        (lease(&gw, "plain-key-0003", &me, acquire.clone()).await, 403, "LEASE_SCOPE_REQUIRED"),
        (lease(&gw, "loose-key-0004", &me, acquire.clone()).await, 403, "LEASE_KEY_CONFIGURATION_INVALID"),
        (
            send(
                "POST",
                &url,
                &[
                    ("content-type", "text/plain"),
                    ("authorization", "Bearer team-key-0001"),
                    ("x-ferroute-lease-owner", me.as_str()),
                ],
                &acquire.to_string(),
            )
            .await,
            415,
            "LEASE_CONTENT_TYPE_REQUIRED",
        ),
        (lease(&gw, "team-key-0001", &me, serde_json::json!({"action": "steal"})).await, 400, "LEASE_ACTION_INVALID"),
        (
            send(
                "POST",
                &url,
                &[
                    ("content-type", "application/json"),
                    ("authorization", "Bearer team-key-0001"),
                    ("x-ferroute-lease-owner", me.as_str()),
                ],
                r#"{"action": "acquire", "model": "#,
            )
            .await,
            400,
            "invalid_json",
        ),
        (lease(&gw, "team-key-0001", "vlo_short", acquire.clone()).await, 400, "LEASE_CONTEXT_INVALID"),
        (
            lease(&gw, "team-key-0001", &me, serde_json::json!({"action": "acquire", "model": ""})).await,
            400,
            "LEASE_MODEL_INVALID",
        ),
        (
            lease(&gw, "team-key-0001", &me, serde_json::json!({"action": "acquire", "model": "nowhere/x"})).await,
            409,
            "LEASE_NO_ELIGIBLE_CONNECTION",
        ),
        (
            lease(&gw, "team-key-0001", &me, serde_json::json!({"action": "status", "generation": 0})).await,
            400,
            "LEASE_CONTEXT_INVALID",
        ),
        (
            lease(&gw, "team-key-0001", &me, serde_json::json!({"action": "status"})).await,
            400,
            "LEASE_CONTEXT_REQUIRED",
        ),
        (
            lease(&gw, "team-key-0001", &me, serde_json::json!({"action": "status", "generation": 4})).await,
            409,
            "LEASE_REQUIRED",
        ),
        (fenced(&gw, "team-key-0001", "vlo_bad", "1").await, 400, "LEASE_CONTEXT_INVALID"),
        (fenced(&gw, "team-key-0001", &me, "01").await, 400, "LEASE_CONTEXT_INVALID"),
    ];
    for (r, status, want) in cases {
        assert_eq!((r.status, code(&r)), (status, want.to_owned()), "{}", r.body);
        assert_eq!(r.json()["error"]["type"], "lease_error");
        assert!(!r.body.contains(&me), "an owner id in a body: {}", r.body);
    }
    // Owner without generation on an inference request.
    let auth = "Bearer team-key-0001";
    let body = serde_json::json!({"model": "up/m", "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let r = send(
        "POST",
        &gw.url("/v1/chat/completions"),
        &[("content-type", "application/json"), ("authorization", auth), ("x-ferroute-lease-owner", me.as_str())],
        &body,
    )
    .await;
    assert_eq!((r.status, code(&r)), (400, "LEASE_CONTEXT_REQUIRED".to_owned()));
    assert_eq!(health(&gw).await["leases"]["active"], 0);
    assert!(up.script.requests().is_empty(), "nothing reached the upstream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_lease_while_every_allowed_key_cools_down() {
    let limited =
        Behaviour::status_with(429, &[("retry-after", "60")], r#"{"error":{"message":"Rate limit reached"}}"#);
    let up = upstream(
        ScriptedUpstream::new().route("m", Script::always(Behaviour::echo())).route("lim", Script::always(limited)),
    )
    .await;
    let gw = start(config(LEASED, &up), Persistence::Memory).await;
    // Key `other` may use c0 and c1; both answer 429 with Retry-After 60 and cool down.
    let body = serde_json::json!({"model": "up/lim", "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let headers = [("content-type", "application/json"), ("authorization", "Bearer other-key-0002")];
    let r = send("POST", &gw.url("/v1/chat/completions"), &headers, &body).await;
    assert_eq!(r.status, 429, "{}", r.body);
    let me = owner(3);
    let r = lease(&gw, "other-key-0002", &me, serde_json::json!({"action": "acquire", "model": "up/m"})).await;
    assert_eq!((r.status, code(&r)), (429, "LEASE_ELIGIBILITY_UNAVAILABLE".to_owned()), "{}", r.body);
    let s: u64 = r.header("retry-after").and_then(|v| v.parse().ok()).expect("Retry-After");
    assert!((59..=60).contains(&s), "{s}");
    assert_eq!(health(&gw).await["leases"]["active"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_lease_store_answers_503_and_dispatches_nothing() {
    let up = upstream(ScriptedUpstream::new().route("m", Script::always(Behaviour::echo()))).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let gw = start(config(LEASED, &up), Persistence::Dir(dir.path().to_owned())).await;
    let o = owner(1);
    let got = lease(&gw, "team-key-0001", &o, serde_json::json!({"action": "acquire", "model": "up/m"})).await;
    assert_eq!(got.status, 200, "{}", got.body);
    let generation = got.json()["generation"].as_u64().expect("generation").to_string();

    // The lease table disappears from under the running gateway (a damaged or replaced file).
    let side = rusqlite::Connection::open(dir.path().join("state.db")).expect("open the state file");
    side.execute_batch("ALTER TABLE leases RENAME TO leases_away").expect("rename");
    for body in [
        serde_json::json!({"action": "acquire", "model": "up/m"}),
        serde_json::json!({"action": "status", "generation": generation.parse::<u64>().unwrap_or(0)}),
    ] {
        let r = lease(&gw, "team-key-0001", &owner(2), body).await;
        assert_eq!((r.status, code(&r)), (503, "LEASE_SERVICE_UNAVAILABLE".to_owned()), "{}", r.body);
    }
    let calls = up.script.total_calls();
    let r = fenced(&gw, "team-key-0001", &o, &generation).await;
    assert_eq!((r.status, code(&r)), (503, "LEASE_SERVICE_UNAVAILABLE".to_owned()), "{}", r.body);
    assert_eq!(up.script.total_calls(), calls, "a request whose fence cannot be checked is never dispatched");

    // Back in place, the same lease and generation hold again.
    side.execute_batch("ALTER TABLE leases_away RENAME TO leases").expect("rename back");
    let r = fenced(&gw, "team-key-0001", &o, &generation).await;
    assert_eq!(r.status, 200, "{}", r.body);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_whose_connection_left_its_key_is_invalidated_at_restart() {
    let up = upstream(ScriptedUpstream::new().route("m", Script::always(Behaviour::echo()))).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let gw = start(config(LEASED, &up), Persistence::Dir(dir.path().to_owned())).await;
    let (kept, moved) = (owner(7), owner(8));
    let a = lease(&gw, "other-key-0002", &kept, serde_json::json!({"action": "acquire", "model": "up/m"})).await;
    let b = lease(&gw, "other-key-0002", &moved, serde_json::json!({"action": "acquire", "model": "up/m"})).await;
    assert_eq!((a.status, b.status), (200, 200), "{} {}", a.body, b.body);
    let (ga, gb) = (a.json()["generation"].as_u64().unwrap_or(0), b.json()["generation"].as_u64().unwrap_or(0));
    assert_eq!(
        (a.json()["connection"]["id"].as_str(), b.json()["connection"]["id"].as_str()),
        (Some("c0"), Some("c1"))
    );
    gw.stop().await;

    // The operator takes c1 away from the key.
    let narrowed = LEASED.replacen(r#"allowed_connections = ["c0", "c1"]"#, r#"allowed_connections = ["c0"]"#, 1);
    let gw = start(config(&narrowed, &up), Persistence::Dir(dir.path().to_owned())).await;
    for (o, g, state) in [(&kept, ga, "ACTIVE"), (&moved, gb, "INVALIDATED")] {
        let r = lease(&gw, "other-key-0002", o, serde_json::json!({"action": "status", "generation": g})).await;
        assert_eq!(r.json()["state"], state, "{}", r.body);
    }
    let r = fenced(&gw, "other-key-0002", &moved, &gb.to_string()).await;
    assert_eq!((r.status, code(&r)), (409, "LEASE_FENCE_STALE".to_owned()), "{}", r.body);
    assert_eq!(fenced(&gw, "other-key-0002", &kept, &ga.to_string()).await.status, 200);
    assert_eq!(health(&gw).await["leases"]["active"], 1);
    gw.stop().await;
}
