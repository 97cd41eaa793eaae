//! Streams end to end over real loopback sockets: the watchdog, an upstream dying or going
//! silent mid-stream, a client going away, and a graceful shutdown with a stream in flight.

mod common;

use common::*;
use proxy::Persistence;
use scenarios::{Behaviour, Script, ScriptedUpstream, SseEvent};
use std::time::Duration;

const WATCHDOG: &str = r#"
[[providers]]
id = "up"
base_url = "{UP}"
models = ["slow", "fine", "dies"]
[[connections]]
id = "k1"
provider = "up"
api_key = "sk-one"
[resilience.throughput_watchdog]
enabled = true
warmup_ms = 0
window_ms = 1000
min_bytes_per_second = 4
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_stream_is_aborted_by_the_watchdog_with_an_sse_error() {
    let heartbeats: Vec<SseEvent> = std::iter::once(SseEvent::text(0, "x"))
        .chain((0..40).map(|_| SseEvent::heartbeat(100)))
        .chain(std::iter::once(SseEvent::done(0)))
        .collect();
    let up = upstream(
        ScriptedUpstream::new()
            .route("slow", Script::always(Behaviour::stream(heartbeats, false)))
            .route("fine", Script::always(Behaviour::Echo { latency_ms: 0, chunk_ms: 10 })),
    )
    .await;
    let gw = start(config(WATCHDOG, &up), Persistence::Memory).await;
    let r = chat(&gw, "up/slow", true).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let data = sse_data(&r.body);
    let last: serde_json::Value = serde_json::from_str(data.last().expect("events")).expect("json");
    assert_eq!(last["error"]["code"], "STREAM_THROUGHPUT_TOO_LOW");
    assert!(data.len() < 30, "aborted well before the 40 heartbeats: {}", data.len());
    assert!(!data.iter().any(|d| d == "[DONE]"));
    // A healthy stream passes untouched, chunk by chunk, in OpenAI's wire shape.
    let r = chat(&gw, "up/fine", true).await;
    let data = sse_data(&r.body);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    let first: serde_json::Value = serde_json::from_str(&data[0]).expect("json");
    assert_eq!(first["object"], "chat.completion.chunk");
    assert_eq!(first["choices"][0]["delta"]["content"], "hello ");
    let metrics = send("GET", &gw.url("/metrics"), &[], "").await.body;
    assert!(metrics.contains("ferroute_stream_finalizations_total 2"), "{metrics}");
    assert!(metrics.contains("ferroute_streams_started_total 2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_dying_mid_stream_ends_the_client_stream_with_an_error_event() {
    let events = vec![SseEvent::text(0, "partial "), SseEvent::text(50, "output")];
    let up = upstream(ScriptedUpstream::new().route("dies", Script::always(Behaviour::stream(events, true)))).await;
    let gw = start(config(WATCHDOG, &up), Persistence::Memory).await;
    let r = chat(&gw, "up/dies", true).await;
    let data = sse_data(&r.body);
    assert!(data[0].contains("partial"), "{data:?}");
    let last: serde_json::Value = serde_json::from_str(data.last().expect("events")).expect("json");
    assert_eq!(last["error"]["code"], "upstream_stream_error");
    assert_eq!(provider(&health(&gw).await, "up")["failures"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_disconnect_is_not_an_upstream_failure_and_finalises_once() {
    let events: Vec<SseEvent> = (0..50).map(|i| SseEvent::text(40, &format!("w{i} "))).collect();
    let up = upstream(ScriptedUpstream::new().route("slow", Script::always(Behaviour::stream(events, false)))).await;
    let text = WATCHDOG.replace("enabled = true", "enabled = false");
    let gw = start(config(&text, &up), Persistence::Memory).await;
    // Read two chunks, then hang up.
    let body = serde_json::json!({"model": "up/slow", "stream": true, "messages": [{"role": "user", "content": "hi"}]})
        .to_string();
    let req = http::Request::post(gw.url("/v1/chat/completions"))
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .expect("request");
    let resp = client().request(req).await.expect("response");
    let mut b = resp.into_body();
    use http_body_util::BodyExt;
    for _ in 0..2 {
        let _ = b.frame().await;
    }
    drop(b);
    // Wait for the relay to notice (its next write fails) and finalise.
    let mut finalised = String::new();
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        finalised = send("GET", &gw.url("/metrics"), &[], "").await.body;
        if finalised.contains("ferroute_stream_finalizations_total 1") {
            break;
        }
    }
    assert!(finalised.contains("ferroute_stream_finalizations_total 1"), "{finalised}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let again = send("GET", &gw.url("/metrics"), &[], "").await.body;
    assert!(again.contains("ferroute_stream_finalizations_total 1"), "exactly once");
    let h = health(&gw).await;
    assert_eq!(provider(&h, "up")["failures"], 0);
    assert_eq!(connection(&h, "k1")["status"], "active");
    assert!(up.script.calls("slow") == 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_lets_an_in_flight_stream_finish() {
    let events: Vec<SseEvent> =
        (0..10).map(|i| SseEvent::text(50, &format!("w{i} "))).chain(std::iter::once(SseEvent::done(0))).collect();
    let up = upstream(ScriptedUpstream::new().route("m", Script::always(Behaviour::stream(events, false)))).await;
    let mut gw = start(config(ONE_PROVIDER, &up), Persistence::Memory).await;
    let url = gw.url("/v1/chat/completions");
    let inflight = tokio::spawn(async move {
        send("POST", &url, &[], r#"{"model":"up/m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#).await
    });
    // Stop once the stream is under way.
    for _ in 0..400 {
        if gw.gw.metrics.streams_started.get() >= 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(gw.gw.metrics.streams_started.get(), 1, "the stream started");
    gw.signal_stop();
    let r = inflight.await.expect("join");
    assert_eq!(r.status, 200);
    assert_eq!(sse_data(&r.body).last().map(String::as_str), Some("[DONE]"), "the stream finished: {}", r.body);
    let task = gw.task.take().expect("task");
    tokio::time::timeout(Duration::from_secs(10), task).await.expect("the server stopped").expect("join");
    // No new connections are accepted.
    let refused = tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(gw.addr)).await;
    assert!(!matches!(refused, Ok(Ok(_))), "still accepting after shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_goes_silent_ends_after_the_execution_budget() {
    let events = vec![SseEvent::text(0, "first "), SseEvent::text(5_000, "never arrives in time")];
    let up = upstream(ScriptedUpstream::new().route("m", Script::always(Behaviour::stream(events, false)))).await;
    let gw = start(
        config(&format!("{ONE_PROVIDER}\n[resilience.request_queue]\nexecution_max_wait_ms = 500\n"), &up),
        Persistence::Memory,
    )
    .await;
    let started = tokio::time::Instant::now();
    let r = chat(&gw, "up/m", true).await;
    assert!(started.elapsed() < Duration::from_secs(4), "ended by the budget, not by the upstream");
    let data = sse_data(&r.body);
    assert!(data[0].contains("first"));
    let last: serde_json::Value = serde_json::from_str(data.last().expect("events")).expect("json");
    assert_eq!(last["error"]["code"], "RATE_LIMIT_EXECUTION_TIMEOUT");
    let h = health(&gw).await;
    assert_eq!(provider(&h, "up")["failures"], 0, "a local limit counts against nothing");
}
