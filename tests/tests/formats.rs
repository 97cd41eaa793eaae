//! Any client API to any provider format, over real loopback sockets: chat completions,
//! Anthropic messages and the Responses API against OpenAI- and Anthropic-format scripted
//! upstreams, streamed and not, with tools; cross-format combo fallback; same-format
//! pass-through fidelity; errors in the client's shape.

mod common;

use common::answers::{read_chat, read_messages};
use common::*;
use proxy::Persistence;
use scenarios::{Behaviour, Script, ScriptedUpstream, SseEvent};
use serde_json::{Value, json};

async fn both() -> (Upstream, Running) {
    let overloaded =
        Behaviour::status(529, r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#);
    let up = upstream(
        ScriptedUpstream::new()
            .route("tools", Script::always(Behaviour::tool_echo()))
            .route("failing", Script::always(overloaded)),
    )
    .await;
    let gw = start(config(TWO_FORMATS, &up), Persistence::Memory).await;
    (up, gw)
}

fn chat_body(model: &str, stream: bool, tool_result: bool) -> Value {
    let mut messages = vec![json!({"role": "user", "content": "weather in Paris"})];
    if tool_result {
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"text\":\"weather in Paris\"}"}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": "call_1", "content": "sunny"}));
    }
    json!({"model": model, "stream": stream, "messages": messages,
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"text": {"type": "string"}}}}}]})
}

fn messages_body(model: &str, stream: bool, tool_result: bool) -> Value {
    let mut messages = vec![json!({"role": "user", "content": "weather in Paris"})];
    if tool_result {
        messages.push(json!({"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"text": "weather in Paris"}}]}));
        messages.push(
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}]}),
        );
    }
    json!({"model": model, "max_tokens": 100, "stream": stream, "messages": messages,
        "tools": [{"name": "get_weather", "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}}}]})
}

async fn post(gw: &Running, path: &str, body: &Value) -> Reply {
    send("POST", &gw.url(path), &[("content-type", "application/json")], &body.to_string()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_client_reaches_every_provider_format_with_tools_streamed_and_not() {
    let (up, gw) = both().await;
    let call = vec![("get_weather".to_owned(), json!({"text": "weather in Paris"}))];
    for provider in ["oai/tools", "ant/tools"] {
        for stream in [false, true] {
            let what = format!("{provider} stream={stream}");
            let r = post(&gw, "/v1/chat/completions", &chat_body(provider, stream, false)).await;
            assert_eq!(r.status, 200, "chat {what}: {}", r.body);
            assert_eq!(read_chat(&r), (String::new(), call.clone()), "chat {what}");
            let r = post(&gw, "/v1/chat/completions", &chat_body(provider, stream, true)).await;
            assert_eq!(read_chat(&r), ("tool said: sunny".to_owned(), vec![]), "chat tool result {what}");

            let r = post(&gw, "/v1/messages", &messages_body(provider, stream, false)).await;
            assert_eq!(r.status, 200, "messages {what}: {}", r.body);
            assert_eq!(read_messages(&r), (String::new(), call.clone()), "messages {what}");
            let r = post(&gw, "/v1/messages", &messages_body(provider, stream, true)).await;
            assert_eq!(read_messages(&r), ("tool said: sunny".to_owned(), vec![]), "messages tool result {what}");
        }
    }
    // The upstream saw each provider's own format on its own path.
    let paths: Vec<String> = up.script.requests().iter().map(|r| r.path.clone()).collect();
    assert!(paths.iter().any(|p| p == "/v1/chat/completions") && paths.iter().any(|p| p == "/v1/messages"));
    for r in up.script.requests() {
        let body: Value = serde_json::from_str(&r.body).expect("json");
        if r.path == "/v1/messages" {
            assert!(body["max_tokens"].as_u64().is_some(), "anthropic requests carry max_tokens: {}", r.body);
            assert_eq!(r.headers.get("x-api-key").map(String::as_str), Some("sk-ant"));
            assert!(!r.headers.contains_key("authorization"));
        } else {
            assert_eq!(r.headers.get("authorization").map(String::as_str), Some("Bearer sk-oai"));
            assert!(body["messages"].is_array());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_responses_api_reaches_both_formats_with_tools_streamed_and_not() {
    let (_up, gw) = both().await;
    for provider in ["oai/tools", "ant/tools"] {
        let req = json!({"model": provider, "instructions": "be brief", "input": [{"role": "user", "content": "list files"}],
            "background": true, "tools": [{"type": "function", "name": "shell", "parameters": {"type": "object"}}]});
        let r = post(&gw, "/v1/responses", &req).await;
        assert_eq!(r.status, 200, "{provider}: {}", r.body);
        assert!(
            r.header("x-ferroute-warning").is_some_and(|w| w.contains("synchronously")),
            "background is answered at once"
        );
        let v = r.json();
        assert_eq!(v["object"], "response");
        assert_eq!(v["status"], "completed");
        assert_eq!(v["output"][0]["type"], "function_call", "{provider}: {v}");
        assert_eq!(v["output"][0]["name"], "shell");
        let call_id = v["output"][0]["call_id"].as_str().expect("call id").to_owned();
        let args: Value = serde_json::from_str(v["output"][0]["arguments"].as_str().expect("args")).expect("json args");
        assert_eq!(args, json!({"text": "list files"}));
        // The tool's output goes back as input items, streamed this time.
        let req = json!({"model": provider, "stream": true, "input": [
            {"role": "user", "content": "list files"},
            {"type": "function_call", "call_id": call_id, "name": "shell", "arguments": "{}"},
            {"type": "function_call_output", "call_id": call_id, "output": "a.txt"}],
            "tools": [{"type": "function", "name": "shell", "parameters": {"type": "object"}}]});
        let r = post(&gw, "/v1/responses", &req).await;
        assert_eq!(r.status, 200, "{provider}: {}", r.body);
        let events: Vec<Value> = sse_data(&r.body).iter().map(|d| serde_json::from_str(d).expect("event")).collect();
        let text: String = events
            .iter()
            .filter(|e| e["type"] == "response.output_text.delta")
            .filter_map(|e| e["delta"].as_str())
            .collect();
        assert_eq!(text, "tool said: a.txt", "{provider}");
        assert_eq!(events.first().map(|e| e["type"].clone()), Some(json!("response.created")));
        let last = events.last().expect("events");
        assert_eq!(last["type"], "response.completed", "{provider}");
        assert_eq!(last["response"]["output"][0]["content"][0]["text"], "tool said: a.txt");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_combo_falls_back_across_formats_in_both_directions() {
    let (up, gw) = both().await;
    // ant/failing answers 529, oai/tools serves: an Anthropic client gets its own format back.
    let r = post(&gw, "/v1/messages", &messages_body("mixed", true, true)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-ferroute-selected-connection-id"), Some("oai-1"));
    assert_eq!(read_messages(&r), ("tool said: sunny".to_owned(), vec![]));
    let r = post(&gw, "/v1/chat/completions", &chat_body("mixed", false, true)).await;
    assert_eq!((r.status, r.header("x-ferroute-selected-connection-id")), (200, Some("oai-1")), "{}", r.body);
    // And the other way round: oai/failing then ant/tools.
    let r = post(&gw, "/v1/chat/completions", &chat_body("mixed-back", true, false)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-ferroute-selected-connection-id"), Some("ant-1"));
    assert_eq!(read_chat(&r).1[0].0, "get_weather");
    assert!(up.script.calls("failing") >= 2, "both failing targets were tried first");
    let metrics = send("GET", &gw.url("/metrics"), &[], "").await.body;
    assert!(metrics.contains(r#"ferroute_translations_total{api="messages",format="openai"} 1"#), "{metrics}");
    assert!(metrics.contains(r#"ferroute_translations_total{api="chat",format="anthropic"} 2"#), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_same_format_hop_keeps_the_clients_bytes_and_api_headers() {
    let up = upstream(ScriptedUpstream::new().route("*", Script::always(Behaviour::echo()))).await;
    let gw = start(config(TWO_FORMATS, &up), Persistence::Memory).await;
    // Key order, number spelling and fields Ferroute does not know survive; only the model
    // changes.
    let raw = r#"{"zeta":1.50,"model":"ant/claude","max_tokens":16,"context_management":{"edits":[]},"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"hi"}]}"#;
    let headers = [
        ("content-type", "application/json"),
        ("anthropic-beta", "claude-code-20250219,interleaved-thinking-2025-05-14"),
        ("anthropic-version", "2023-06-01"),
        ("x-api-key", "client-secret"),
        ("x-ferroute-session", "s-1"),
        ("connection", "keep-alive"),
    ];
    let r = send("POST", &gw.url("/v1/messages"), &headers, raw).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let seen = up.script.requests().pop().expect("a request");
    assert_eq!(seen.body, raw.replace("ant/claude", "claude"));
    assert_eq!(
        seen.headers.get("anthropic-beta").map(String::as_str),
        Some("claude-code-20250219,interleaved-thinking-2025-05-14")
    );
    assert_eq!(
        seen.headers.get("x-api-key").map(String::as_str),
        Some("sk-ant"),
        "the connection's key, never the client's"
    );
    for h in ["x-ferroute-session", "x-ferroute-lease-owner", "authorization"] {
        assert!(!seen.headers.contains_key(h), "{h} must not reach the upstream");
    }
    // The client's anthropic-version wins over the default.
    let headers = [("anthropic-version", "2099-01-01")];
    send("POST", &gw.url("/v1/messages"), &headers, raw).await;
    assert_eq!(
        up.script.requests().pop().and_then(|r| r.headers.get("anthropic-version").cloned()).as_deref(),
        Some("2099-01-01")
    );
    // OpenAI-Beta reaches an OpenAI-format provider on a chat hop.
    let raw = r#"{"model":"oai/x","messages":[{"role":"user","content":"hi"}],"store":false}"#;
    let r = send("POST", &gw.url("/v1/chat/completions"), &[("openai-beta", "assistants=v2")], raw).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let seen = up.script.requests().pop().expect("a request");
    assert_eq!(seen.body, raw.replace("oai/x", "x"));
    assert_eq!(seen.headers.get("openai-beta").map(String::as_str), Some("assistants=v2"));
    // Across a translation, advisory betas and fields are named in a header, never silently
    // dropped; the rest of the beta header does not reach an OpenAI-format provider.
    let body = json!({"model": "oai/x", "max_tokens": 16, "context_management": {"edits": []}, "messages": [{"role": "user", "content": "hi"}]});
    let h = [("anthropic-beta", "claude-code-20250219,context-management-2025-06-27")];
    let r = send("POST", &gw.url("/v1/messages"), &h, &body.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.header("x-ferroute-translation-dropped"),
        Some("context_management, anthropic-beta:claude-code-20250219, anthropic-beta:context-management-2025-06-27")
    );
    let seen = up.script.requests().pop().expect("a request");
    assert!(!seen.headers.contains_key("anthropic-beta"));
    assert!(!seen.body.contains("context_management"));
    // A limit that is not a number is refused, not replaced by the translation's default.
    let bad = json!({"model": "ant/claude", "max_tokens": "100", "messages": [{"role": "user", "content": "hi"}]});
    let r = post(&gw, "/v1/chat/completions", &bad).await;
    assert_eq!(
        (r.status, r.json()["error"]["code"].as_str(), r.json()["error"]["param"].as_str()),
        (400, Some("invalid_request"), Some("max_tokens")),
        "{}",
        r.body
    );
    // A beta feature a chat provider lacks is refused, naming it.
    let h = [("anthropic-beta", "mcp-client-2025-04-04")];
    let r = send("POST", &gw.url("/v1/messages"), &h, &body.to_string()).await;
    assert_eq!((r.status, r.json()["error"]["param"].as_str()), (400, Some("anthropic-beta: mcp-client-2025-04-04")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_errors_reach_each_client_in_its_own_shape_with_status_and_retry_after() {
    let rate_limited_ant = Behaviour::status_with(
        429,
        &[("retry-after", "9")],
        r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#,
    );
    // Its first event arrives whole before the break (a stream that breaks before any content
    // is a failure the gateway falls back from, not a broken answer).
    let broken = Behaviour::stream(vec![SseEvent::text(0, "par"), SseEvent::text(100, "t")], true);
    let up = upstream(
        ScriptedUpstream::new()
            .route("limited", Script::always(rate_limited_ant))
            .route("broken", Script::always(broken)),
    )
    .await;
    let gw = start(config(TWO_FORMATS, &up), Persistence::Memory).await;
    // An Anthropic-format 429 to a chat client: OpenAI shape, status and Retry-After kept.
    let r = post(&gw, "/v1/chat/completions", &chat_body("ant/limited", false, false)).await;
    assert_eq!(r.status, 429, "{}", r.body);
    assert_eq!(r.header("retry-after"), Some("9"));
    let v = r.json();
    assert_eq!(v["error"]["type"], "rate_limit_error");
    assert!(v["error"]["message"].as_str().is_some_and(|m| m.contains("rate limit")), "{v}");
    assert!(v.get("type").is_none());
    // The same for an Anthropic client: Anthropic's shape.
    let r = post(&gw, "/v1/messages", &messages_body("ant/limited", false, false)).await;
    assert_eq!((r.status, r.header("retry-after")), (429, Some("9")));
    assert_eq!(r.json()["type"], "error");
    assert_eq!(r.json()["error"]["type"], "rate_limit_error");
    // A chat stream that breaks mid-way reaches an Anthropic client as an `error` event.
    let r = post(&gw, "/v1/messages", &messages_body("oai/broken", true, false)).await;
    assert_eq!(r.status, 200);
    let last: Value = serde_json::from_str(sse_data(&r.body).last().expect("events")).expect("json");
    assert_eq!(last["type"], "error", "{}", r.body);
    assert_eq!(last["error"]["code"], "upstream_stream_error");
    assert!(!r.body.contains("message_stop"), "a broken stream is never reported complete");
    // And a Responses client as response.failed.
    let r = post(&gw, "/v1/responses", &json!({"model": "oai/broken", "input": "x", "stream": true})).await;
    let last: Value = serde_json::from_str(sse_data(&r.body).last().expect("events")).expect("json");
    assert_eq!(last["type"], "response.failed", "{}", r.body);
    assert_eq!(last["response"]["error"]["code"], "upstream_stream_error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_aborts_a_slow_translated_stream_in_the_clients_format() {
    let anthropic_slow: Vec<SseEvent> = [
        SseEvent::anthropic_start("slow", "msg_s"),
        SseEvent::anthropic(
            0,
            json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        ),
        SseEvent::anthropic_text(0, 0, "x"),
    ]
    .into_iter()
    .chain((0..40).map(|_| SseEvent::anthropic(100, json!({"type":"ping"}))))
    .chain([SseEvent::anthropic(0, json!({"type":"message_stop"}))])
    .collect();
    let chat_slow: Vec<SseEvent> = std::iter::once(SseEvent::text(0, "x"))
        .chain((0..40).map(|_| SseEvent::heartbeat(100)))
        .chain([SseEvent::done(0)])
        .collect();
    let up = upstream(
        ScriptedUpstream::new()
            .route("ant-slow", Script::always(Behaviour::stream(anthropic_slow, false)))
            .route("chat-slow", Script::always(Behaviour::stream(chat_slow, false))),
    )
    .await;
    let text = format!(
        "{TWO_FORMATS}\n[resilience.throughput_watchdog]\nenabled = true\nwarmup_ms = 0\nwindow_ms = 1000\nmin_bytes_per_second = 4\n"
    );
    let gw = start(config(&text, &up), Persistence::Memory).await;
    // An Anthropic stream that stalls, to a chat client: an error chunk, never [DONE].
    let r = post(
        &gw,
        "/v1/chat/completions",
        &json!({"model": "ant/ant-slow", "stream": true, "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    let data = sse_data(&r.body);
    let last: Value = serde_json::from_str(data.last().expect("events")).expect("json");
    assert_eq!(last["error"]["code"], "STREAM_THROUGHPUT_TOO_LOW", "{}", r.body);
    assert!(!data.iter().any(|d| d == "[DONE]"));
    assert!(data.len() < 10, "aborted long before the 40 pings: {}", r.body);
    // A chat stream that stalls, to an Anthropic client: an `error` event, never message_stop.
    let r = post(&gw, "/v1/messages", &json!({"model": "oai/chat-slow", "max_tokens": 5, "stream": true, "messages": [{"role": "user", "content": "hi"}]})).await;
    let last: Value = serde_json::from_str(sse_data(&r.body).last().expect("events")).expect("json");
    assert_eq!(
        (last["type"].as_str(), last["error"]["code"].as_str()),
        (Some("error"), Some("STREAM_THROUGHPUT_TOO_LOW")),
        "{}",
        r.body
    );
    assert!(!r.body.contains("message_stop"));
}
