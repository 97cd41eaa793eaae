//! The sixteen pairings of client API (chat completions, Anthropic messages, the Responses
//! API, Gemini's generateContent) and provider format (openai, anthropic, responses, gemini),
//! over real loopback sockets: a two-turn tool loop streamed and not in every cell; the Gemini
//! client API's keys, model list, token count and Google-shaped errors; same-format hops that
//! keep the client's bytes; what cannot be translated refused naming the field.

mod common;

use common::answers::{read_chat, read_gemini, read_messages, read_responses};
use common::*;
use proxy::Persistence;
use scenarios::{Behaviour, Script, ScriptedUpstream};
use serde_json::{Value, json};

/// A client key, and a combo that starts on an overloaded Gemini provider; the providers are
/// `TWO_FORMATS` and `NEW_FORMATS`, one of each format.
const EXTRA: &str = r#"
[[keys]]
id = "team"
key = "team-key-0001"
[[combos]]
name = "gem-first"
targets = ["gem/failing", "oai/tools"]
"#;

const KEY: (&str, &str) = ("authorization", "Bearer team-key-0001");
const PROVIDERS: [&str; 4] = ["oai/tools", "ant/tools", "rsp/tools", "gem/tools"];

async fn four() -> (Upstream, Running) {
    let unavailable = Behaviour::status(
        503,
        r#"{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}"#,
    );
    let up = upstream(
        ScriptedUpstream::new()
            .route("tools", Script::always(Behaviour::tool_echo()))
            .route("failing", Script::always(unavailable)),
    )
    .await;
    let gw = start(config(&format!("{EXTRA}{TWO_FORMATS}{NEW_FORMATS}"), &up), Persistence::Memory).await;
    (up, gw)
}

async fn post(gw: &Running, path: &str, headers: &[(&str, &str)], body: &Value) -> Reply {
    let mut all = vec![("content-type", "application/json")];
    all.extend_from_slice(headers);
    send("POST", &gw.url(path), &all, &body.to_string()).await
}

const WEATHER: &str = "weather in Paris";

fn chat(model: &str, stream: bool, result: bool) -> (String, Value) {
    let mut messages = vec![json!({"role": "user", "content": WEATHER})];
    if result {
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"text\":\"weather in Paris\"}"}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": "call_1", "content": "sunny"}));
    }
    let body = json!({"model": model, "stream": stream, "messages": messages,
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"text": {"type": "string"}}}}}]});
    ("/v1/chat/completions".into(), body)
}

fn messages(model: &str, stream: bool, result: bool) -> (String, Value) {
    let mut messages = vec![json!({"role": "user", "content": WEATHER})];
    if result {
        messages.push(json!({"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"text": WEATHER}}]}));
        messages.push(
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}]}),
        );
    }
    let body = json!({"model": model, "max_tokens": 100, "stream": stream, "messages": messages,
        "tools": [{"name": "get_weather", "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}}}]});
    ("/v1/messages".into(), body)
}

fn responses(model: &str, stream: bool, result: bool) -> (String, Value) {
    let mut input = vec![json!({"role": "user", "content": WEATHER})];
    if result {
        input.push(json!({"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"text\":\"weather in Paris\"}"}));
        input.push(json!({"type": "function_call_output", "call_id": "call_1", "output": "sunny"}));
    }
    let body = json!({"model": model, "stream": stream, "input": input,
        "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {"text": {"type": "string"}}}}]});
    ("/v1/responses".into(), body)
}

fn gemini(model: &str, stream: bool, result: bool) -> (String, Value) {
    let mut contents = vec![json!({"role": "user", "parts": [{"text": WEATHER}]})];
    if result {
        contents.push(
            json!({"role": "model", "parts": [{"functionCall": {"name": "get_weather", "args": {"text": WEATHER}}}]}),
        );
        contents.push(json!({"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {"result": "sunny"}}}]}));
    }
    let body = json!({"contents": contents, "systemInstruction": {"parts": [{"text": "be brief"}]},
        "tools": [{"functionDeclarations": [{"name": "get_weather", "parameters": {"type": "OBJECT", "properties": {"text": {"type": "STRING"}}}}]}],
        "generationConfig": {"temperature": 0.5, "maxOutputTokens": 200}});
    let path = match stream {
        true => format!("/v1beta/models/{model}:streamGenerateContent?alt=sse"),
        false => format!("/v1beta/models/{model}:generateContent"),
    };
    (path, body)
}

type Build = fn(&str, bool, bool) -> (String, Value);
type Read = fn(&Reply) -> (String, Vec<(String, Value)>);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_client_api_reaches_every_provider_format_with_a_tool_loop_streamed_and_not() {
    let (up, gw) = four().await;
    let apis: [(&str, Build, Read); 4] = [
        ("chat", chat, read_chat),
        ("messages", messages, read_messages),
        ("responses", responses, read_responses),
        ("gemini", gemini, read_gemini),
    ];
    let call = vec![("get_weather".to_owned(), json!({ "text": WEATHER }))];
    for (api, build, read) in apis {
        for provider in PROVIDERS {
            for stream in [false, true] {
                let what = format!("{api} → {provider} stream={stream}");
                let (path, body) = build(provider, stream, false);
                let r = post(&gw, &path, &[KEY], &body).await;
                assert_eq!(r.status, 200, "{what}: {}", r.body);
                assert_eq!(r.header("content-type") == Some("text/event-stream"), stream, "{what}");
                assert_eq!(read(&r), (String::new(), call.clone()), "{what}: {}", r.body);
                let (path, body) = build(provider, stream, true);
                let r = post(&gw, &path, &[KEY], &body).await;
                assert_eq!(r.status, 200, "{what} (tool result): {}", r.body);
                assert_eq!(read(&r), ("tool said: sunny".to_owned(), vec![]), "{what} (tool result): {}", r.body);
            }
        }
    }
    // Each provider got its own format on its own path, with its own credential header.
    for r in up.script.requests() {
        let body: Value = serde_json::from_str(&r.body).expect("json");
        match r.path.as_str() {
            "/v1/chat/completions" => {
                assert_eq!(r.headers.get("authorization").map(String::as_str), Some("Bearer sk-oai"));
                assert!(body["messages"].is_array());
            }
            "/v1/messages" => assert_eq!(r.headers.get("x-api-key").map(String::as_str), Some("sk-ant")),
            "/v1/responses" => {
                assert_eq!(r.headers.get("authorization").map(String::as_str), Some("Bearer sk-rsp"));
                assert!(body["input"].is_array(), "{}", r.body);
            }
            p => {
                assert!(
                    p == "/v1/models/tools:generateContent" || p == "/v1/models/tools:streamGenerateContent",
                    "{p}"
                );
                assert_eq!(r.headers.get("x-goog-api-key").map(String::as_str), Some("sk-gem"));
                assert_eq!(r.query.as_deref(), p.ends_with("streamGenerateContent").then_some("alt=sse"));
                assert!(body.get("model").is_none() && body["contents"].is_array(), "{}", r.body);
            }
        }
    }
    let metrics = send("GET", &gw.url("/metrics"), &[], "").await.body;
    assert!(metrics.contains(r#"ferroute_translations_total{api="gemini",format="responses"} 4"#), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gemini_client_keeps_its_bytes_to_a_gemini_provider_and_its_key_in_any_of_googles_places() {
    let (up, gw) = four().await;
    let raw = r#"{"contents":[{"role":"user","parts":[{"text":"hi there"}]}],"safetySettings":[{"category":"HARM_CATEGORY_HARASSMENT","threshold":"BLOCK_NONE"}],"generationConfig":{"topK":3}}"#;
    let path = "/v1beta/models/gem/tools:generateContent?key=team-key-0001";
    let r = send("POST", &gw.url(path), &[("content-type", "application/json")], raw).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(read_gemini(&r).0, "hi there");
    let seen = up.script.requests().pop().expect("a request");
    assert_eq!(seen.body, raw, "passed through byte for byte");
    assert_eq!(seen.query, None, "the client's key never goes upstream");
    // The header, and the google-genai SDK's /v1/ path.
    let r = send(
        "POST",
        &gw.url("/v1/models/gem/tools:generateContent"),
        &[("content-type", "application/json"), ("x-goog-api-key", "team-key-0001")],
        raw,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    // To another format, the settings only Gemini has are named as dropped.
    let r = send(
        "POST",
        &gw.url("/v1beta/models/oai/tools:generateContent"),
        &[("content-type", "application/json"), ("x-goog-api-key", "team-key-0001")],
        raw,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-ferroute-translation-dropped"), Some("safetySettings, generationConfig.topK"));
    let sent: Value = serde_json::from_str(&up.script.requests().pop().expect("a request").body).expect("JSON");
    assert!(sent.get("top_k").is_none() && sent.get("x_ferroute_top_k").is_none(), "{sent}");
    // Anthropic has top-k: it arrives as `top_k`, and only safetySettings is named.
    let r = send(
        "POST",
        &gw.url("/v1beta/models/ant/tools:generateContent"),
        &[("content-type", "application/json"), ("x-goog-api-key", "team-key-0001")],
        raw,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-ferroute-translation-dropped"), Some("safetySettings"));
    let sent: Value = serde_json::from_str(&up.script.requests().pop().expect("a request").body).expect("JSON");
    assert_eq!(sent["top_k"], 3, "{sent}");
    // No key, a wrong key: Google's shape.
    let r = send("POST", &gw.url("/v1beta/models/gem/tools:generateContent"), &[], raw).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["error"]["status"], "UNAUTHENTICATED", "{}", r.body);
    let r = send("POST", &gw.url("/v1beta/models/gem/tools:generateContent?key=nope"), &[], raw).await;
    assert_eq!((r.status, r.json()["error"]["code"].clone()), (401, json!(401)), "{}", r.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gemini_api_lists_models_counts_tokens_and_refuses_in_googles_shape() {
    let (up, gw) = four().await;
    let r = send("GET", &gw.url("/v1beta/models"), &[KEY], "").await;
    assert_eq!(r.status, 200, "{}", r.body);
    let names: Vec<String> = r.json()["models"]
        .as_array()
        .expect("models")
        .iter()
        .map(|m| m["name"].as_str().unwrap_or("").to_owned())
        .collect();
    assert!(
        names.contains(&"models/gem/tools".to_owned()) && names.contains(&"models/gem-first".to_owned()),
        "{names:?}"
    );
    // The OpenAI list stays where it was, unless the client is Google's.
    assert!(send("GET", &gw.url("/v1/models"), &[KEY], "").await.json()["data"].is_array());
    let r = send("GET", &gw.url("/v1/models"), &[("x-goog-api-key", "team-key-0001")], "").await;
    assert!(r.json()["models"].is_array(), "{}", r.body);
    let r = send("GET", &gw.url("/v1beta/models/oai/tools"), &[KEY], "").await;
    assert_eq!(r.json()["name"], "models/oai/tools", "{}", r.body);

    // A Gemini-format target counts exactly (the scripted provider's figure: a token a
    // character), in one upstream call with the connection's key.
    let before = up.script.requests().len();
    let count = json!({"contents": [{"parts": [{"text": "twelve chars"}]}]});
    let r = post(&gw, "/v1beta/models/gem/tools:countTokens", &[KEY], &count).await;
    assert_eq!((r.status, r.json()), (200, json!({"totalTokens": 12})), "{}", r.body);
    let sent = up.script.requests();
    assert_eq!(sent.len(), before + 1, "one upstream call");
    let last = sent.last().expect("the call");
    assert!(last.path.ends_with("/models/tools:countTokens"), "{}", last.path);
    assert_eq!(last.headers.get("x-goog-api-key").map(String::as_str), Some("sk-gem"));
    // Any other format is estimated (a token for about four characters), with no upstream call.
    let r = post(&gw, "/v1beta/models/oai/tools:countTokens", &[KEY], &count).await;
    assert_eq!((r.status, r.json()), (200, json!({"totalTokens": 3})), "{}", r.body);
    assert_eq!(up.script.requests().len(), before + 1);

    let refusals = [
        (json!({"contents": [{"parts": [{"text": "x"}]}], "tools": [{"googleSearch": {}}]}), "tools[0].googleSearch"),
        (
            json!({"contents": [{"parts": [{"text": "x"}]}], "generationConfig": {"candidateCount": 2}}),
            "generationConfig.candidateCount",
        ),
        (json!({"contents": [{"parts": [{"text": "x"}]}], "cachedContent": "cachedContents/1"}), "cachedContent"),
    ];
    for (body, field) in refusals {
        let r = post(&gw, "/v1beta/models/oai/tools:generateContent", &[KEY], &body).await;
        assert_eq!(r.status, 400, "{field}: {}", r.body);
        let e = &r.json()["error"];
        assert_eq!(e["status"], "INVALID_ARGUMENT", "{}", r.body);
        assert!(e["message"].as_str().unwrap_or("").contains(field), "{field}: {}", r.body);
    }
    // What only chat cannot express still reaches a provider of the client's own format.
    let search = json!({"contents": [{"parts": [{"text": "x"}]}], "tools": [{"googleSearch": {}}]});
    let r = post(&gw, "/v1beta/models/gem/tools:generateContent", &[KEY], &search).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = post(&gw, "/v1beta/models/gem/tools:generateContent", &[KEY], &json!({"contents": "hi"})).await;
    assert_eq!((r.status, r.json()["error"]["details"][0]["reason"].clone()), (400, json!("missing_contents")));
    let r = post(&gw, "/v1beta/models/nobody/none:generateContent", &[KEY], &json!({"contents": []})).await;
    assert_eq!((r.status, r.json()["error"]["status"].clone()), (404, json!("NOT_FOUND")), "{}", r.body);
    let r = post(&gw, "/v1beta/models/gem/tools:embedContent", &[KEY], &json!({})).await;
    assert_eq!(r.status, 404, "{}", r.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_combo_falls_back_from_an_overloaded_gemini_provider_and_a_responses_client_passes_through() {
    let (up, gw) = four().await;
    // gem/failing answers 503 UNAVAILABLE; the combo goes on to oai/tools.
    let (path, body) = gemini("gem-first", true, true);
    let r = post(&gw, &path, &[KEY], &body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-ferroute-selected-connection-id"), Some("oai-1"));
    assert_eq!(read_gemini(&r), ("tool said: sunny".to_owned(), vec![]));
    assert!(up.script.calls("failing") >= 1);
    // A Responses client to a Responses provider: its bytes, only the model changed, fields
    // Ferroute does not know included; to chat such a field is refused naming it.
    let raw = r#"{"model":"rsp/tools","input":"hello you","store":false,"zeta":{"kept":true}}"#;
    let r = send("POST", &gw.url("/v1/responses"), &[("content-type", "application/json"), KEY], raw).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(read_responses(&r).0, "hello you");
    assert_eq!(up.script.requests().pop().expect("a request").body, raw.replace("rsp/tools", "tools"));
    let r = send(
        "POST",
        &gw.url("/v1/responses"),
        &[("content-type", "application/json"), KEY],
        &raw.replace("rsp/", "oai/"),
    )
    .await;
    assert_eq!((r.status, r.json()["error"]["param"].clone()), (400, json!("zeta")), "{}", r.body);
    // A stored response is the provider's to find: refused to chat, passed to a Responses provider.
    let stored = json!({"model": "rsp/tools", "input": "and then?", "previous_response_id": "resp_1"});
    let r = post(&gw, "/v1/responses", &[KEY], &stored).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = post(
        &gw,
        "/v1/responses",
        &[KEY],
        &json!({"model": "oai/tools", "input": "x", "previous_response_id": "resp_1"}),
    )
    .await;
    assert_eq!(
        (r.status, r.json()["error"]["code"].clone()),
        (400, json!("stored_responses_unsupported")),
        "{}",
        r.body
    );
}

/// `:streamGenerateContent` without `alt=sse` answers one JSON array of the same objects the
/// events carry, whatever the provider's format.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gemini_stream_without_alt_sse_is_one_json_array_from_every_provider_format() {
    let (_up, gw) = four().await;
    let call = vec![("get_weather".to_owned(), json!({ "text": WEATHER }))];
    for provider in PROVIDERS {
        let (path, body) = gemini(provider, true, false);
        let path = path.trim_end_matches("?alt=sse").to_owned();
        assert!(path.ends_with(":streamGenerateContent"), "{path}");
        let r = post(&gw, &path, &[KEY], &body).await;
        assert_eq!(r.status, 200, "{provider}: {}", r.body);
        assert_eq!(r.header("content-type"), Some("application/json"), "{provider}");
        assert!(r.json().as_array().is_some_and(|a| !a.is_empty()), "{provider}: {}", r.body);
        assert_eq!(read_gemini(&r), (String::new(), call.clone()), "{provider}: {}", r.body);
        let (path, body) = gemini(provider, true, true);
        let r = post(&gw, path.trim_end_matches("?alt=sse"), &[KEY], &body).await;
        assert_eq!(r.status, 200, "{provider} (tool result): {}", r.body);
        assert_eq!(read_gemini(&r).0, "tool said: sunny", "{provider}: {}", r.body);
    }
}

/// The array grows as the answer comes: a raw client reads its first object while the upstream
/// is still sending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gemini_json_array_reaches_a_raw_client_as_it_grows() {
    use http_body_util::BodyExt;
    let up = upstream(
        ScriptedUpstream::new().route("slow", Script::always(Behaviour::Echo { latency_ms: 0, chunk_ms: 400 })),
    )
    .await;
    let gw = start(config(&format!("{EXTRA}{TWO_FORMATS}{NEW_FORMATS}"), &up), Persistence::Memory).await;
    let body = json!({"contents": [{"role": "user", "parts": [{"text": "one two three four five"}]}]});
    let req = http::Request::builder()
        .method("POST")
        .uri(gw.url("/v1beta/models/oai/slow:streamGenerateContent"))
        .header("content-type", "application/json")
        .header(KEY.0, KEY.1)
        .body(http_body_util::Full::new(bytes::Bytes::from(body.to_string())))
        .expect("request");
    let started = tokio::time::Instant::now();
    let resp = client().request(req).await.expect("response");
    assert_eq!(resp.headers().get("content-type").and_then(|v| v.to_str().ok()), Some("application/json"));
    let mut body = resp.into_body();
    let mut seen = String::new();
    let mut first_at = None;
    // The array as it stood when its first object was read.
    let mut first_seen = String::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.expect("frame").into_data() {
            seen.push_str(&String::from_utf8_lossy(&data));
            if first_at.is_none() && seen.contains('}') {
                first_at = Some(started.elapsed());
                first_seen = seen.clone();
            }
        }
    }
    let done = started.elapsed();
    let first = first_at.expect("an object arrived");
    assert!(seen.starts_with('['), "{seen}");
    let objects: Value = serde_json::from_str(&seen).unwrap_or_else(|e| panic!("one JSON array ({e}): {seen}"));
    assert!(objects.as_array().is_some_and(|a| a.len() >= 3), "{seen}");
    // Read as it grew: when the first object arrived, the rest had not.
    let objects_then = first_seen.matches("\"candidates\"").count();
    let objects_all = seen.matches("\"candidates\"").count();
    assert!(objects_then < objects_all, "{objects_then} of {objects_all} objects at the first read: {first_seen}");
    // Five words 400 ms apart: the first object is read about 1.6 s before the last.
    assert!(
        first + std::time::Duration::from_millis(1000) < done,
        "first object at {first:?}, whole array at {done:?}"
    );
}
