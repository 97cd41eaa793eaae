//! End-to-end tests over real loopback sockets: a scripted upstream, the gateway, a client.
//! Streams are in `streams.rs`, client/provider formats in `formats.rs`.

mod common;

use common::*;
use proxy::Persistence;
use scenarios::{Behaviour, Script, ScriptedUpstream};
use std::time::Duration;

fn status_error(status: u16, msg: &str) -> Behaviour {
    Behaviour::status(status, &serde_json::json!({"error": {"message": msg}}).to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_200_passes_through_with_the_selected_connection() {
    let up = upstream(ScriptedUpstream::new().route("m", Script::always(Behaviour::echo()))).await;
    let gw = start(config(ONE_PROVIDER, &up), Persistence::Memory).await;
    let r = chat(&gw, "up/m", false).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-ferroute-selected-connection-id"), Some("k1"));
    assert_eq!(r.json()["choices"][0]["message"]["content"], "hello from the test");
    // The upstream saw the upstream model name and the connection's credential.
    let seen = &up.script.requests()[0];
    assert_eq!(seen.model, "m");
    assert_eq!(seen.headers.get("authorization").map(String::as_str), Some("Bearer sk-one"));
    // A bare model resolves to the first provider listing it.
    assert_eq!(chat(&gw, "m", false).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_with_retry_after_cools_one_key_and_the_other_serves() {
    let script = Script::sequence(vec![
        Behaviour::status_with(429, &[("retry-after", "7")], r#"{"error":{"message":"Rate limit reached"}}"#),
        Behaviour::echo(),
    ]);
    let up = upstream(ScriptedUpstream::new().route("m", script)).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let gw = start(config(ONE_PROVIDER, &up), Persistence::Dir(dir.path().to_owned())).await;
    let r = chat(&gw, "up/m", false).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-ferroute-selected-connection-id"), Some("k2"), "k1 got the 429, k2 served");
    let h = health(&gw).await;
    let k1 = connection(&h, "k1");
    assert_eq!(k1["status"], "unavailable");
    assert_eq!(k1["last_error_type"], "rate_limit_exceeded");
    assert!(k1["rate_limited_until"].as_str().is_some());
    assert_eq!(provider(&h, "up")["state"], "CLOSED", "a 429 never counts toward the breaker");
    assert_eq!(provider(&h, "up")["failures"], 0);
    // The cooldown is in the store.
    gw.stop().await;
    let store = proxy::state::store::Store::open_dir(dir.path()).expect("store");
    let loaded = store.load().expect("load");
    let (_, snap, _) = loaded.connections.iter().find(|(id, _, _)| id == "k1").expect("k1 persisted");
    assert!(snap.cooldown_remaining_ms > 5_000 && snap.cooldown_remaining_ms <= 7_000, "{snap:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_on_the_only_key_reaches_the_client_with_retry_after() {
    let up = upstream(ScriptedUpstream::new().route(
        "m",
        Script::always(Behaviour::status_with(429, &[("retry-after", "7")], r#"{"error":{"message":"slow down"}}"#)),
    ))
    .await;
    let text = ONE_PROVIDER.split("[[connections]]\nid = \"k2\"").next().unwrap_or(ONE_PROVIDER);
    let gw = start(config(text, &up), Persistence::Memory).await;
    let r = chat(&gw, "up/m", false).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("7"));
    assert_eq!(r.json()["error"]["code"], "rate_limit_exceeded");
    assert_eq!(r.json()["error"]["message"], "slow down");
    // The key now cools: the next request is refused at once with the remaining time.
    let r = chat(&gw, "up/m", false).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.json()["error"]["code"], "all_connections_cooling_down");
    assert!(r.header("retry-after").and_then(|v| v.parse::<u64>().ok()).is_some_and(|s| (1..=7).contains(&s)));
    assert_eq!(up.script.calls("m"), 1, "nothing dispatched to a cooling key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_503s_open_the_breaker_and_it_recovers() {
    let up = upstream(ScriptedUpstream::new().route(
        "m",
        Script::sequence(vec![status_error(503, "unavailable"), status_error(503, "unavailable"), Behaviour::echo()]),
    ))
    .await;
    let text = format!(
        "{ONE_PROVIDER}\n[resilience.breaker.api_key]\nfailure_threshold = 2\ndegradation_threshold = 1\nreset_timeout_ms = 1000\ndedupe_window_ms = 0\n"
    );
    let gw = start(config(&text, &up), Persistence::Memory).await;
    let r = chat(&gw, "up/m", false).await;
    // k1 and k2 both got 503s: two provider failures open the breaker.
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(up.script.calls("m"), 2);
    let h = health(&gw).await;
    assert_eq!(provider(&h, "up")["state"], "OPEN");
    assert_eq!(connection(&h, "k1")["status"], "active", "a 5xx never cools the connection");
    let r = chat(&gw, "up/m", false).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["error"]["code"], "provider_circuit_open");
    assert_eq!(r.header("x-ferroute-provider-breaker"), Some("open"));
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(up.script.calls("m"), 2, "nothing dispatched while open");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(
        provider(&health(&gw).await, "up")["state"],
        "HALF_OPEN",
        "lazy: reading after the timeout shows half-open"
    );
    let r = chat(&gw, "up/m", false).await;
    assert_eq!(r.status, 200, "the probe succeeds: {}", r.body);
    assert_eq!(provider(&health(&gw).await, "up")["state"], "CLOSED");
}

const TWO_PROVIDERS: &str = r#"
[[providers]]
id = "a"
base_url = "{UP}"
models = ["broken", "m"]
[[providers]]
id = "b"
base_url = "{UP}"
models = ["m"]
[[connections]]
id = "a1"
provider = "a"
api_key = "sk-a"
[[connections]]
id = "b1"
provider = "b"
api_key = "sk-b"
[[combos]]
name = "fast"
targets = ["a/broken", "b/m"]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_reset_falls_back_to_the_next_provider() {
    let up = upstream(
        ScriptedUpstream::new()
            .route("broken", Script::always(Behaviour::Reset { latency_ms: 0 }))
            .route("m", Script::always(Behaviour::echo())),
    )
    .await;
    let gw = start(config(TWO_PROVIDERS, &up), Persistence::Memory).await;
    let r = chat(&gw, "fast", false).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-ferroute-selected-connection-id"), Some("b1"));
    let h = health(&gw).await;
    assert_eq!(provider(&h, "a")["failures"], 1, "a reset is a provider-level failure");
    assert_eq!(connection(&h, "a1")["status"], "active");
    // A 503 from a is classified as a recoverable fallback too.
    let up2 = upstream(
        ScriptedUpstream::new()
            .route("broken", Script::always(status_error(503, "service unavailable")))
            .route("m", Script::always(Behaviour::echo())),
    )
    .await;
    let gw2 = start(config(TWO_PROVIDERS, &up2), Persistence::Memory).await;
    let r = chat(&gw2, "fast", false).await;
    assert_eq!((r.status, r.header("x-ferroute-selected-connection-id")), (200, Some("b1")));
}

const GATEWAY: &str = r#"
[[providers]]
id = "gw"
base_url = "{UP}"
profile = "agentrouter"
models = ["claude-sonnet-4"]
[[connections]]
id = "g1"
provider = "gw"
api_key = "sk-g"
[resilience.model_lockout]
enabled = true
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misreported_403_quota_error_becomes_429_with_retry_after_60() {
    let up = upstream(ScriptedUpstream::new().route(
        "claude-sonnet-4",
        Script::always(Behaviour::status(
            403,
            r#"{"error":{"message":"用户额度不足","type":"insufficient_user_quota"}}"#,
        )),
    ))
    .await;
    let gw = start(config(GATEWAY, &up), Persistence::Memory).await;
    let r = chat(&gw, "gw/claude-sonnet-4", false).await;
    assert_eq!(r.status, 429, "{}", r.body);
    assert_eq!(r.header("retry-after"), Some("60"));
    let e = &r.json()["error"];
    assert_eq!(e["code"], "quota_exhausted");
    assert_eq!(e["type"], "rate_limit_error");
    assert_eq!(e["upstream_status"], 403);
    assert_eq!(e["restated_by"], "agentrouter-quota-misstatus");
    let h = health(&gw).await;
    assert_eq!(connection(&h, "g1")["status"], "unavailable", "a self-healing cooldown, never terminal");
    assert_eq!(provider(&h, "gw")["failures"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_403_stays_403_and_locks_the_model() {
    let up = upstream(ScriptedUpstream::new().route(
        "claude-sonnet-4",
        Script::always(Behaviour::status(403, r#"{"error":{"message":"无权访问模型 claude-sonnet-4"}}"#)),
    ))
    .await;
    let gw = start(config(&format!("[server]\nadmin_key = \"env:ADMIN\"\n{GATEWAY}"), &up), Persistence::Memory).await;
    let r = chat(&gw, "gw/claude-sonnet-4", false).await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.header("retry-after"), None);
    assert_eq!(r.json()["error"]["code"], "auth_error");
    let h = health(&gw).await;
    assert_eq!(connection(&h, "g1")["status"], "active", "the key is fine; the model is not");
    let lock = &h["model_lockouts"][0];
    assert_eq!(
        (lock["provider"].as_str(), lock["connection"].as_str(), lock["model"].as_str()),
        (Some("gw"), Some("g1"), Some("claude-sonnet-4"))
    );
    assert!(
        lock["remaining_ms"].as_u64().is_some_and(|ms| ms > 1_700_000 && ms <= 1_800_000),
        "6 h capped at max_cooldown_ms: {lock}"
    );
    // The admin API lists it and clears it.
    let admin = [("x-ferroute-admin-key", "admin-secret-1"), ("content-type", "application/json")];
    let listed = send("GET", &gw.url("/api/resilience/model-cooldowns"), &admin, "").await;
    assert_eq!(listed.json()["items"].as_array().map(Vec::len), Some(1));
    let cleared = send(
        "DELETE",
        &gw.url("/api/resilience/model-cooldowns"),
        &admin,
        r#"{"provider":"gw","connection":"g1","model":"claude-sonnet-4"}"#,
    )
    .await;
    assert_eq!(cleared.json()["removed"], true);
    assert!(health(&gw).await["model_lockouts"].as_array().is_some_and(Vec::is_empty));
    let bad = send("DELETE", &gw.url("/api/resilience/model-cooldowns"), &admin, r#"{"provider":"gw"}"#).await;
    assert_eq!(bad.status, 400);
    assert_eq!(send("GET", &gw.url("/api/resilience/model-cooldowns"), &[], "").await.status, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_clear_4xx() {
    let up = upstream(ScriptedUpstream::new().route("m", Script::always(Behaviour::echo()))).await;
    let gw = start(config(&format!("[server]\nmax_body_bytes = 2048\n{ONE_PROVIDER}"), &up), Persistence::Memory).await;
    let url = gw.url("/v1/chat/completions");
    let r = send("POST", &url, &[], "{not json").await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["code"], "invalid_json");
    assert!(r.json()["error"]["message"].as_str().is_some_and(|m| m.contains("not valid JSON")));
    let r = send("POST", &url, &[], r#"{"messages":[]}"#).await;
    assert_eq!((r.status, r.json()["error"]["code"].as_str()), (400, Some("missing_model")));
    let r = send("POST", &url, &[], r#"{"model":"up/m"}"#).await;
    assert_eq!((r.status, r.json()["error"]["code"].as_str()), (400, Some("missing_messages")));
    let r = send("POST", &url, &[], r#"{"model":"up/","messages":[]}"#).await;
    assert_eq!((r.status, r.json()["error"]["code"].as_str()), (404, Some("model_not_found")));
    let r = send("POST", &url, &[], r#"{"model":"up/m","stream":"yes","messages":[]}"#).await;
    assert_eq!((r.status, r.json()["error"]["code"].as_str()), (400, Some("invalid_stream")));
    let r = send("POST", &url, &[], r#"{"model":"nope/x","messages":[]}"#).await;
    assert_eq!((r.status, r.json()["error"]["code"].as_str()), (404, Some("model_not_found")));
    let big = format!(r#"{{"model":"up/m","messages":[{{"role":"user","content":"{}"}}]}}"#, "x".repeat(4096));
    let r = send("POST", &url, &[], &big).await;
    assert_eq!((r.status, r.json()["error"]["code"].as_str()), (413, Some("request_too_large")));
    let r = send("GET", &url, &[], "").await;
    assert_eq!(r.status, 405);
    let r = send("GET", &gw.url("/nowhere"), &[], "").await;
    assert_eq!(r.status, 404);
    // Anthropic clients get Anthropic-shaped errors, and what cannot be translated is named.
    let r =
        send("POST", &gw.url("/v1/messages"), &[], r#"{"model":"up/m","max_tokens":5,"top_k":3,"messages":[]}"#).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.json()["type"], "error");
    assert_eq!(r.json()["error"]["code"], "untranslatable_feature");
    assert_eq!(r.json()["error"]["param"], "top_k");
    let r = send("POST", &gw.url("/v1/messages"), &[], r#"{"model":"up/m","messages":[]}"#).await;
    assert_eq!((r.status, r.json()["error"]["type"].as_str()), (400, Some("invalid_request_error")));
    let r =
        send("POST", &gw.url("/v1/responses"), &[], r#"{"model":"up/m","input":"x","previous_response_id":"resp_1"}"#)
            .await;
    assert_eq!((r.status, r.json()["error"]["code"].as_str()), (400, Some("stored_responses_unsupported")));
    let r = send("POST", &gw.url("/v1/responses"), &[], r#"{"model":"up/m"}"#).await;
    assert_eq!((r.status, r.json()["error"]["code"].as_str()), (400, Some("missing_input")));
    assert_eq!(up.script.total_calls(), 0, "nothing bad reached the upstream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_and_admin_keys_are_enforced() {
    let up = upstream(ScriptedUpstream::new().route("m", Script::always(Behaviour::echo()))).await;
    let text = format!(
        "[server]\nadmin_key = \"env:ADMIN\"\n[[keys]]\nid = \"team\"\nkey = \"client-key-123\"\nallowed_connections = [\"k2\"]\n{ONE_PROVIDER}"
    );
    let gw = start(config(&text, &up), Persistence::Memory).await;
    let body = r#"{"model":"up/m","messages":[{"role":"user","content":"hi"}]}"#;
    let url = gw.url("/v1/chat/completions");
    assert_eq!(send("POST", &url, &[], body).await.status, 401);
    assert_eq!(send("POST", &url, &[("authorization", "Bearer wrong-key-456")], body).await.status, 401);
    let ok = send("POST", &url, &[("authorization", "Bearer client-key-123")], body).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(ok.header("x-ferroute-selected-connection-id"), Some("k2"), "the key may only use k2");
    assert_eq!(send("GET", &gw.url("/v1/models"), &[], "").await.status, 401);
    assert_eq!(
        send("GET", &gw.url("/v1/models"), &[("authorization", "Bearer client-key-123")], "").await.json()["data"][0]["id"],
        "up/m"
    );
    let reset = gw.url("/api/resilience/reset");
    assert_eq!(send("POST", &reset, &[], "").await.status, 401);
    assert_eq!(send("POST", &reset, &[("x-ferroute-admin-key", "nope")], "").await.status, 401);
    let r = send("POST", &reset, &[("authorization", "Bearer admin-secret-1")], "").await;
    assert_eq!((r.status, r.json()["ok"].as_bool()), (200, Some(true)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_messages_reach_anthropic_providers_with_their_headers() {
    let up = upstream(ScriptedUpstream::new().route("claude", Script::always(Behaviour::echo()))).await;
    let text = "[[providers]]\nid = \"anthropic\"\nformat = \"anthropic\"\nbase_url = \"{UP}\"\nmodels = [\"claude\"]\n[[connections]]\nid = \"a1\"\nprovider = \"anthropic\"\napi_key = \"sk-ant\"\n";
    let gw = start(config(text, &up), Persistence::Memory).await;
    let body = r#"{"model":"anthropic/claude","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"hola amigo"}]}"#;
    let r = send("POST", &gw.url("/v1/messages"), &[], body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("event: message_start") && r.body.contains("\"text\":\"hola \""), "{}", r.body);
    let seen = &up.script.requests()[0];
    assert_eq!(seen.path, "/v1/messages");
    assert_eq!(seen.headers.get("x-api-key").map(String::as_str), Some("sk-ant"));
    assert_eq!(seen.headers.get("anthropic-version").map(String::as_str), Some("2023-06-01"));
    assert!(!seen.headers.contains_key("authorization"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_breaker_survives_a_restart() {
    let up = upstream(ScriptedUpstream::new().route("m", Script::always(status_error(503, "down")))).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let text = format!(
        "{ONE_PROVIDER}\n[resilience.breaker.api_key]\nfailure_threshold = 2\ndegradation_threshold = 1\nreset_timeout_ms = 60000\ndedupe_window_ms = 0\n"
    );
    let gw = start(config(&text, &up), Persistence::Dir(dir.path().to_owned())).await;
    assert_eq!(chat(&gw, "up/m", false).await.status, 503);
    assert_eq!(provider(&health(&gw).await, "up")["state"], "OPEN");
    gw.stop().await;
    let gw = start(config(&text, &up), Persistence::Dir(dir.path().to_owned())).await;
    let h = health(&gw).await;
    assert_eq!(provider(&h, "up")["state"], "OPEN", "restored from SQLite");
    assert!(provider(&h, "up")["retry_after_ms"].as_u64().is_some_and(|ms| ms > 50_000));
    assert_eq!(chat(&gw, "up/m", false).await.json()["error"]["code"], "provider_circuit_open");
    assert_eq!(up.script.calls("m"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_trickling_its_body_gets_408_not_a_stuck_task() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let up = upstream(ScriptedUpstream::new().route("m", Script::always(Behaviour::echo()))).await;
    let gw =
        start(config(&format!("[server]\nbody_read_timeout_ms = 300\n{ONE_PROVIDER}"), &up), Persistence::Memory).await;
    let mut s = tokio::net::TcpStream::connect(gw.addr).await.expect("connect");
    let head = "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"model\"";
    s.write_all(head.as_bytes()).await.expect("write");
    let mut buf = vec![0u8; 4096];
    let n =
        tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await.expect("answered in time").expect("read");
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("request_timeout"), "{text}");
    assert_eq!(up.script.total_calls(), 0);
}

/// A client's own headers never reach a provider: its own key, its cookie, a header of its own.
/// The first attempt goes out in the client's header map, emptied (so that no map is made per
/// request), and a retry on the other key in a new one: neither carries them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clients_own_headers_never_reach_the_upstream() {
    let script = Script::sequence(vec![status_error(503, "busy"), Behaviour::echo()]);
    let up = upstream(ScriptedUpstream::new().route("m", script)).await;
    let gw = start(config(ONE_PROVIDER, &up), Persistence::Memory).await;
    let body = serde_json::json!({"model": "up/m", "messages": [{"role": "user", "content": "hello from the test"}]});
    let own = [
        ("content-type", "application/json"),
        ("authorization", "Bearer client-own-key"),
        ("cookie", "session=client-cookie"),
        ("x-client-note", "client-note"),
    ];
    let r = send("POST", &gw.url("/v1/chat/completions"), &own, &body.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let seen = up.script.requests();
    assert_eq!(seen.len(), 2, "the 503 is retried on the other key");
    let keys: Vec<_> = seen.iter().map(|s| s.headers.get("authorization").cloned().unwrap_or_default()).collect();
    assert!(keys.contains(&"Bearer sk-one".to_owned()) && keys.contains(&"Bearer sk-two".to_owned()), "{keys:?}");
    for s in &seen {
        assert!(!s.headers.contains_key("cookie") && !s.headers.contains_key("x-client-note"), "{:?}", s.headers);
        assert!(s.headers.values().all(|v| !v.contains("client-")), "{:?}", s.headers);
    }
}
