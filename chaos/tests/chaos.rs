//! Chaos: the real `ferroute` binary against scripted upstreams behind a toxic middlebox, on
//! real loopback sockets. Gated: `RUN_CHAOS_INT=1 cargo test -p chaos`.

use chaos::binary::Gateway;
use chaos::client::{breaker, chat, connection_status, health};
use chaos::{Middlebox, enabled};
use scenarios::{Behaviour, Script, ScriptedUpstream, SseEvent, Toxic, serve_upstream};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

async fn upstream(script: ScriptedUpstream) -> (SocketAddr, Arc<ScriptedUpstream>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let up = Arc::new(script);
    tokio::spawn(serve_upstream(listener, Arc::clone(&up)));
    (addr, up)
}

fn write_config(dir: &tempfile::TempDir, body: &str) -> PathBuf {
    let path = dir.path().join("ferroute.toml");
    let text =
        format!("[server]\ndata_dir = \"{}\"\nshutdown_grace_ms = 2000\n{body}", dir.path().join("data").display());
    std::fs::write(&path, text).expect("write config");
    path
}

fn provider(id: &str, addr: SocketAddr, extra: &str) -> String {
    format!(
        "[[providers]]\nid = \"{id}\"\nbase_url = \"http://{addr}/v1\"\nmodels = [\"m\"]\n{extra}\n[[connections]]\nid = \"{id}1\"\nprovider = \"{id}\"\napi_key = \"sk-{id}\"\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_breaker_opens_on_a_down_upstream_and_recovers_after_the_reset() {
    if !enabled("chaos") {
        return;
    }
    let (addr, up) = upstream(ScriptedUpstream::new().route("m", Script::always(Behaviour::echo()))).await;
    let mb = Middlebox::start(addr).await.expect("middlebox");
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = write_config(
        &dir,
        &format!(
            "{}[resilience.breaker.api_key]\nfailure_threshold = 3\ndegradation_threshold = 2\nreset_timeout_ms = 1500\ndedupe_window_ms = 0\n",
            provider("a", mb.addr(), "")
        ),
    );
    let gw = Gateway::start(&cfg).await.expect("gateway");
    mb.set(vec![Toxic::Down]).await.expect("down");
    for _ in 0..3 {
        let r = chat(&gw.base, "a/m", false).await.expect("response");
        assert_eq!((r.status, r.error_code().as_deref()), (502, Some("upstream_unreachable")), "{}", r.body);
    }
    assert_eq!(breaker(&health(&gw.base).await.expect("health"), "a"), "OPEN");
    let r = chat(&gw.base, "a/m", false).await.expect("response");
    assert_eq!((r.status, r.error_code().as_deref()), (503, Some("provider_circuit_open")));
    assert!(r.header("retry-after").is_some());
    mb.heal().await.expect("heal");
    tokio::time::sleep(Duration::from_millis(1600)).await;
    assert_eq!(breaker(&health(&gw.base).await.expect("health"), "a"), "HALF_OPEN");
    let r = chat(&gw.base, "a/m", false).await.expect("response");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(breaker(&health(&gw.base).await.expect("health"), "a"), "CLOSED");
    assert_eq!(up.calls("m"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_is_recoverable_and_falls_back_to_a_healthy_connection() {
    if !enabled("chaos") {
        return;
    }
    let (bad, _) = upstream(
        ScriptedUpstream::new()
            .route("m", Script::always(Behaviour::status(503, r#"{"error":{"message":"service unavailable"}}"#))),
    )
    .await;
    let (good, _) = upstream(ScriptedUpstream::new().route("m", Script::always(Behaviour::echo()))).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let body = format!(
        "{}{}[[combos]]\nname = \"pair\"\ntargets = [\"a/m\", \"b/m\"]\n",
        provider("a", bad, ""),
        provider("b", good, "")
    );
    let gw = Gateway::start(&write_config(&dir, &body)).await.expect("gateway");
    let r = chat(&gw.base, "pair", false).await.expect("response");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-ferroute-selected-connection-id"), Some("b1"));
    let h = health(&gw.base).await.expect("health");
    assert_eq!(connection_status(&h, "a1"), "active", "a 503 never cools the key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misreported_403_is_restated_end_to_end() {
    if !enabled("chaos") {
        return;
    }
    let (addr, _) = upstream(
        ScriptedUpstream::new()
            .route("m", Script::always(Behaviour::status(403, r#"{"error":{"message":"用户额度不足"}}"#))),
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let gw =
        Gateway::start(&write_config(&dir, &provider("gw", addr, "profile = \"agentrouter\""))).await.expect("gateway");
    let r = chat(&gw.base, "gw/m", false).await.expect("response");
    assert_eq!(r.status, 429, "{}", r.body);
    assert_eq!(r.header("retry-after"), Some("60"));
    assert_eq!(r.error_code().as_deref(), Some("quota_exhausted"));
    assert_eq!(connection_status(&health(&gw.base).await.expect("health"), "gw1"), "unavailable");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_aborts_a_slow_stream() {
    if !enabled("chaos") {
        return;
    }
    let (addr, _) = upstream(
        ScriptedUpstream::new().route("m", Script::always(Behaviour::SlowDrip { text: "x".repeat(40), chunk_ms: 300 })),
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let body = format!(
        "{}[resilience.throughput_watchdog]\nenabled = true\nwarmup_ms = 0\nwindow_ms = 1000\nmin_bytes_per_second = 10\n",
        provider("a", addr, "")
    );
    let gw = Gateway::start(&write_config(&dir, &body)).await.expect("gateway");
    let r = chat(&gw.base, "a/m", true).await.expect("response");
    assert_eq!(r.status, 200);
    assert_eq!(r.error_code().as_deref(), Some("STREAM_THROUGHPUT_TOO_LOW"), "{}", r.body);
    assert!(!r.body.contains("[DONE]"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_gets_one_well_formed_response_under_every_toxic() {
    if !enabled("chaos") {
        return;
    }
    let events: Vec<SseEvent> =
        (0..5).map(|i| SseEvent::text(20, &format!("w{i} "))).chain([SseEvent::done(0)]).collect();
    let script = || {
        ScriptedUpstream::new()
            .route("m", Script::always(Behaviour::Echo { latency_ms: 0, chunk_ms: 10 }))
            .route("s", Script::always(Behaviour::stream(events.clone(), false)))
    };
    let (a_addr, _) = upstream(script()).await;
    let (b_addr, _) = upstream(script()).await;
    let mb = Middlebox::start(a_addr).await.expect("middlebox");
    let dir = tempfile::tempdir().expect("tempdir");
    let body = format!(
        "{}{}[[combos]]\nname = \"pair\"\ntargets = [\"a/m\", \"b/m\"]\n[[combos]]\nname = \"pair-stream\"\ntargets = [\"a/s\", \"b/s\"]\n[resilience.breaker.api_key]\nfailure_threshold = 1000\ndegradation_threshold = 999\n",
        provider("a", mb.addr(), "start_timeout_ms = 1500"),
        provider("b", b_addr, "")
    );
    let gw = Gateway::start(&write_config(&dir, &body)).await.expect("gateway");
    let toxics = [
        vec![Toxic::Latency { ms: 150 }],
        vec![Toxic::Bandwidth { bytes_per_second: 4_000 }],
        vec![Toxic::SlowClose { ms: 300 }],
        vec![Toxic::Slicer { max_chunk: 3, delay_ms: 1 }],
        vec![Toxic::LimitData { bytes: 120 }],
        vec![Toxic::ResetPeer],
        vec![Toxic::Timeout],
        vec![Toxic::Down],
    ];
    let mut total = 0;
    for t in toxics {
        mb.set(t.clone()).await.expect("toxics");
        for (model, stream) in [("pair", false), ("pair-stream", true), ("pair", false)] {
            let r = chat(&gw.base, model, stream).await.unwrap_or_else(|e| panic!("{t:?}: {e}"));
            total += 1;
            assert!(r.well_formed(), "{t:?} {model}: malformed response {} {:?}", r.status, r.body);
            assert!(
                r.status == 200 || r.json().is_some_and(|v| v["error"]["code"].is_string()),
                "{t:?}: {} {}",
                r.status,
                r.body
            );
            assert!(r.header("x-ferroute-selected-connection-id").is_some(), "{t:?}: no selected connection");
        }
    }
    assert_eq!(total, 24);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_in_the_middle_of_load_keeps_breaker_and_cooldown_state() {
    if !enabled("chaos") {
        return;
    }
    let (a_addr, _) = upstream(ScriptedUpstream::new().route(
        "m",
        Script::always(Behaviour::Respond {
            status: 503,
            headers: Default::default(),
            body: r#"{"error":{"message":"down"}}"#.into(),
            pad_to: None,
            latency_ms: 20,
        }),
    ))
    .await;
    let (b_addr, _) = upstream(ScriptedUpstream::new().route(
        "m",
        Script::always(Behaviour::status_with(429, &[("retry-after", "600")], r#"{"error":{"message":"slow down"}}"#)),
    ))
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let body = format!(
        "{}{}[resilience.breaker.api_key]\nfailure_threshold = 2\ndegradation_threshold = 1\nreset_timeout_ms = 600000\ndedupe_window_ms = 0\n",
        provider("a", a_addr, ""),
        provider("b", b_addr, "")
    );
    let cfg = write_config(&dir, &body);
    let gw = Gateway::start(&cfg).await.expect("gateway");
    let base = gw.base.clone();
    // Load in the background while the state changes.
    let load: Vec<_> = (0..40)
        .map(|i| {
            let base = base.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(i * 15)).await;
                let _ = chat(&base, if i % 2 == 0 { "a/m" } else { "b/m" }, false).await;
            })
        })
        .collect();
    let mut reached = false;
    for _ in 0..200 {
        let h = health(&base).await.expect("health");
        if breaker(&h, "a") == "OPEN" && connection_status(&h, "b1") == "unavailable" {
            reached = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(reached, "the state did not change under load");
    gw.kill_9();
    for l in load {
        let _ = l.await;
    }
    let gw = Gateway::start(&cfg).await.expect("restart");
    let h = health(&gw.base).await.expect("health");
    assert_eq!(breaker(&h, "a"), "OPEN", "{h}");
    assert_eq!(connection_status(&h, "b1"), "unavailable", "{h}");
    let r = chat(&gw.base, "a/m", false).await.expect("response");
    assert_eq!(r.error_code().as_deref(), Some("provider_circuit_open"));
    gw.terminate().await.expect("SIGTERM stops it cleanly");
}
