//! End-to-end combo routing over real loopback sockets: a nested combo falling back across
//! providers of both wire formats, the combo headers and diagnostics, a provider without
//! connections, and the emergency target switched at runtime through the admin API.

mod common;

use common::*;
use proxy::Persistence;
use scenarios::{Behaviour, Script, ScriptedUpstream};

const NESTED: &str = r#"
[server]
admin_key = "env:ADMIN"
[[providers]]
id = "oai"
format = "openai"
base_url = "{UP}"
models = ["down", "echo"]
[[connections]]
id = "oai-1"
provider = "oai"
api_key = "sk-oai"
[[connections]]
id = "oai-2"
provider = "oai"
api_key = "sk-oai-2"
[[providers]]
id = "ant"
format = "anthropic"
base_url = "{UP}"
models = ["echo"]
[[connections]]
id = "ant-1"
provider = "ant"
api_key = "sk-ant"
[[providers]]
id = "later"
base_url = "{UP}"
models = ["echo"]
[[combos]]
name = "inner"
targets = [{ target = "oai/down", weight = 2 }, { target = "oai/busy", connection = "oai-2" }]
[[combos]]
name = "outer"
targets = ["inner", "ant/echo"]
[[combos]]
name = "nowhere"
targets = ["later/echo"]
[[combos]]
name = "fragile"
targets = ["oai/down"]
[emergency_fallback]
target = "ant/echo"
"#;

fn script() -> ScriptedUpstream {
    let down = Behaviour::status(500, r#"{"error":{"message":"upstream exploded"}}"#);
    let busy = Behaviour::status(503, r#"{"error":{"message":"overloaded"}}"#);
    ScriptedUpstream::new()
        .route("down", Script::always(down))
        .route("busy", Script::always(busy))
        .route("echo", Script::always(Behaviour::echo()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_combo_falls_back_across_providers_and_formats() {
    let up = upstream(script()).await;
    let gw = start(config(NESTED, &up), Persistence::Memory).await;
    let r = chat(&gw, "outer", false).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-ferroute-selected-connection-id"), Some("ant-1"));
    assert_eq!(r.json()["choices"][0]["message"]["content"], "hello from the test");
    // Pool: oai/down, oai/busy (pinned to oai-2), ant/echo. Attempts: oai/down on both keys
    // (a 500 is provider-level: the next key is tried), oai/busy on its pinned key, then
    // ant/echo.
    assert_eq!(r.header("x-ferroute-combo-pool-size"), Some("3"));
    assert_eq!(r.header("x-ferroute-combo-attempted"), Some("4"));
    assert_eq!(r.header("x-ferroute-combo-terminal-reason"), None);
    let seen: Vec<(String, String)> = up
        .script
        .requests()
        .iter()
        .map(|q| {
            (
                q.model.clone(),
                q.headers.get("authorization").or(q.headers.get("x-api-key")).cloned().unwrap_or_default(),
            )
        })
        .collect();
    let busy_keys: Vec<&str> = seen.iter().filter(|(m, _)| m == "busy").map(|(_, k)| k.as_str()).collect();
    assert_eq!(busy_keys, vec!["Bearer sk-oai-2"], "the pinned connection only: {seen:?}");
    assert_eq!(seen.iter().filter(|(m, _)| m == "down").count(), 2, "{seen:?}");
    // The Anthropic provider got a Messages request.
    let last = up.script.requests().last().cloned().expect("a request");
    assert_eq!(last.path, "/v1/messages");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_combo_says_what_happened_and_a_provider_without_keys_is_a_404() {
    let up = upstream(script()).await;
    let gw = start(config(NESTED, &up), Persistence::Memory).await;
    let r = chat(&gw, "fragile", false).await;
    assert_eq!(r.status, 500, "{}", r.body);
    assert_eq!(r.header("x-ferroute-combo-pool-size"), Some("1"));
    assert_eq!(r.header("x-ferroute-combo-attempted"), Some("2"));
    assert_eq!(r.header("x-ferroute-combo-terminal-reason"), Some("server_error"));
    let body = r.json();
    assert_eq!(body["error"]["diagnostics"]["attempted"], 2);
    assert_eq!(body["error"]["diagnostics"]["attempt_order"][0]["model"], "down");
    assert_eq!(body["error"]["recovery_hint"]["action"], "retry");

    let before = up.script.requests().len();
    let r = chat(&gw, "nowhere", false).await;
    assert_eq!(r.status, 404, "{}", r.body);
    let body = r.json();
    assert_eq!(body["error"]["code"], "no_executable_targets");
    assert_eq!(body["error"]["diagnostics"]["pool_size"], 1);
    assert_eq!(body["error"]["recovery_hint"]["action"], "switch-combo");
    assert_eq!(up.script.requests().len(), before, "nothing was dispatched for a provider without connections");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operators_switch_the_emergency_target_at_runtime() {
    let up = upstream(script()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let gw = start(config(NESTED, &up), Persistence::Dir(dir.path().to_owned())).await;
    let admin = [("authorization", "Bearer admin-secret-1"), ("content-type", "application/json")];
    assert_eq!(health(&gw).await["emergency_fallback"], serde_json::json!({"target": "ant/echo", "enabled": false}));
    assert_eq!(chat(&gw, "fragile", false).await.status, 500, "off by default");

    // Without the admin key: 401; with bad input: a 400 naming the field; nothing changes.
    let url = gw.url("/api/resilience/emergency-fallback");
    assert_eq!(send("POST", &url, &[("content-type", "application/json")], r#"{"enabled":true}"#).await.status, 401);
    let bad = send("POST", &url, &admin, r#"{"enabled":"yes"}"#).await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert_eq!(bad.json()["error"]["code"], "missing_enabled");
    assert_eq!(health(&gw).await["emergency_fallback"]["enabled"], false);

    let on = send("POST", &url, &admin, r#"{"enabled":true}"#).await;
    assert_eq!(on.status, 200, "{}", on.body);
    assert_eq!(on.json()["enabled"], true);
    let r = chat(&gw, "fragile", false).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-ferroute-selected-connection-id"), Some("ant-1"));
    assert_eq!(health(&gw).await["emergency_fallback"]["enabled"], true);

    // The switch survives a restart.
    gw.stop().await;
    let gw = start(config(NESTED, &up), Persistence::Dir(dir.path().to_owned())).await;
    assert_eq!(health(&gw).await["emergency_fallback"]["enabled"], true);
    let off = send("POST", &gw.url("/api/resilience/emergency-fallback"), &admin, r#"{"enabled":false}"#).await;
    assert_eq!(off.status, 200, "{}", off.body);
    assert_eq!(chat(&gw, "fragile", false).await.status, 500);
}

const MULTI: &str = r#"
[[providers]]
id = "oai"
format = "openai"
base_url = "{UP}"
models = ["echo"]
[[connections]]
id = "oai-1"
provider = "oai"
api_key = "sk-oai"
[[providers]]
id = "ant"
format = "anthropic"
base_url = "{UP}"
models = ["echo"]
[[connections]]
id = "ant-1"
provider = "ant"
api_key = "sk-ant"
[[combos]]
name = "panel"
strategy = "fusion"
targets = ["oai/echo", "ant/echo", "oai/down"]
judge = "ant/judge"
[[combos]]
name = "chain"
strategy = "pipeline"
targets = ["oai/echo", "oai/down", "ant/echo"]
"#;

fn multi_script() -> ScriptedUpstream {
    script().route("judge", Script::always(Behaviour::echo()))
}

fn bodies(up: &Upstream, model: &str) -> Vec<serde_json::Value> {
    up.script
        .requests()
        .iter()
        .filter(|q| q.model == model)
        .map(|q| serde_json::from_str(&q.body).unwrap_or(serde_json::Value::Null))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fusion_asks_the_panel_then_the_judge_with_their_answers() {
    let up = upstream(multi_script()).await;
    let gw = start(config(MULTI, &up), Persistence::Memory).await;
    for (path, body) in [
        (
            "/v1/chat/completions",
            serde_json::json!({"model": "panel", "messages": [{"role": "user", "content": "what is 2+2"}]}),
        ),
        (
            "/v1/messages",
            serde_json::json!({"model": "panel", "max_tokens": 64, "messages": [{"role": "user", "content": "what is 2+2"}]}),
        ),
    ] {
        let r = post(&gw, path, &body).await;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        assert_eq!(r.header("x-ferroute-combo-members"), Some("2/3"), "{path}");
        assert_eq!(r.header("x-ferroute-selected-connection-id"), Some("ant-1"), "the judge answered");
    }
    // A streaming client gets the judge's answer as a stream (the panel is asked whole).
    let streamed =
        serde_json::json!({"model": "panel", "stream": true, "messages": [{"role": "user", "content": "what is 2+2"}]});
    let r = post(&gw, "/v1/chat/completions", &streamed).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("data: [DONE]"), "{}", r.body);
    let panel_streams =
        up.script.requests().iter().filter(|q| q.model != "judge" && q.body.contains("\"stream\":true")).count();
    assert_eq!(panel_streams, 0, "panel members are asked for whole answers");
    // Each judge request carries both panel answers (the echo of the question) after the
    // question, as one user turn in Anthropic's alternating format.
    let judged = bodies(&up, "judge");
    assert_eq!(judged.len(), 3);
    for j in &judged {
        let turns = j["messages"].as_array().expect("messages");
        let last = turns.last().expect("a turn");
        assert_eq!(last["role"], "user");
        let text = last["content"].to_string();
        assert!(text.contains("<answer 1>") && text.contains("<answer 2>") && !text.contains("<answer 3>"), "{text}");
        assert_eq!(text.matches("what is 2+2").count(), 3, "the question and two answers echoing it: {text}");
    }
    // A request with tools bypasses the panel: routed in order, first target serves.
    let tools = serde_json::json!({"model": "panel", "messages": [{"role": "user", "content": "x"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]});
    let before = up.script.requests().len();
    let r = post(&gw, "/v1/chat/completions", &tools).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-ferroute-combo-members"), None);
    assert_eq!(up.script.requests().len(), before + 1);
    // A body nested beyond the JSON depth limit cannot be rewritten for the panel: a 400
    // naming the body, and nothing sent upstream.
    let deep = format!(
        r#"{{"model":"panel","messages":[{{"role":"user","content":"x"}}],"metadata":{}1{}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    let before = up.script.requests().len();
    let r = send("POST", &gw.url("/v1/chat/completions"), &[], &deep).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.json()["error"]["param"], "body", "{}", r.body);
    assert_eq!(up.script.requests().len(), before, "no member was asked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipeline_feeds_each_answer_to_the_next_step_and_streams_the_last() {
    let up = upstream(multi_script()).await;
    let gw = start(config(MULTI, &up), Persistence::Memory).await;
    let body = serde_json::json!({"model": "chain", "stream": true, "messages": [{"role": "user", "content": "draft a haiku"}]});
    let r = post(&gw, "/v1/chat/completions", &body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("data: [DONE]"), "the last step streams: {}", r.body);
    // Step 1 (oai/echo) answered, step 2 (oai/down) failed and was skipped, step 3 (ant/echo)
    // got the first answer as an assistant turn and the request to improve it.
    let log: Vec<(String, String)> = up.script.requests().iter().map(|q| (q.model.clone(), q.body.clone())).collect();
    assert_eq!(r.header("x-ferroute-combo-members"), Some("2/3"), "{log:?}");
    let last = up.script.requests().last().cloned().expect("a request");
    assert_eq!(last.path, "/v1/messages");
    let sent: serde_json::Value = serde_json::from_str(&last.body).expect("json");
    let turns = sent["messages"].as_array().expect("messages");
    assert_eq!(turns.len(), 3, "{sent}");
    assert_eq!(turns[1]["role"], "assistant");
    assert!(turns[1]["content"].to_string().contains("draft a haiku"), "{sent}");
    assert!(turns[2]["content"].to_string().contains("Improve the answer above"), "{sent}");
}
