//! A ChatGPT account (the `codex` preset) on its real backend's wire, over loopback: the
//! scripted upstream plays ChatGPT's Codex backend (`scenarios::codex_backend`: a request that
//! breaks one of its rules gets the backend's own 400), the token server signs the account in.
//! Chat, Messages, Gemini and Responses clients each get an answer through it, with what Codex
//! itself sends there; the backend's usage-limit 429 is honoured with its stated reset.

mod common;

use common::*;
use proxy::Persistence;
use scenarios::codex_backend::{USAGE_LIMIT, USAGE_LIMIT_HEADERS};
use scenarios::token_server::{Grant, TokenServer, serve_token_server};
use scenarios::upstream::DEFAULT_WALL_START_MS;
use scenarios::{Behaviour, Script, ScriptedUpstream};
use std::sync::Arc;
use std::time::Duration;

const MODEL: &str = "gpt-5.1-codex";

/// A `responses` provider `chatgpt` with one codex account `c1` (account id `acct-e2e`),
/// leaving `base_url` to the preset when `base` is `None`.
fn codex_config(base: Option<String>, grant: &Grant, token_addr: std::net::SocketAddr) -> String {
    let base = base.map(|b| format!("base_url = \"{b}\"\n")).unwrap_or_default();
    format!(
        "[[providers]]\nid = \"chatgpt\"\nformat = \"responses\"\nclass = \"oauth\"\n{base}models = [\"{MODEL}\"]\n\
         [[connections]]\nid = \"c1\"\nprovider = \"chatgpt\"\n\
         oauth = {{ preset = \"codex\", access_token = \"{}\", refresh_token = \"{}\", expires_at = {}, token_url = \"http://{token_addr}/oauth/token\", account_id = \"acct-e2e\" }}\n",
        grant.access_token,
        grant.refresh_token,
        DEFAULT_WALL_START_MS + 3_600_000,
    )
}

struct Backend {
    up: Upstream,
    tokens: Arc<TokenServer>,
    grant: Grant,
    token_task: tokio::task::JoinHandle<()>,
    gw: Running,
}

async fn backend(script: Script) -> Backend {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind token server");
    let token_addr = listener.local_addr().expect("addr");
    let tokens = Arc::new(TokenServer::new(Duration::from_secs(3600)));
    let token_task = tokio::spawn(serve_token_server(listener, Arc::clone(&tokens)));
    let grant = tokens.sign_in();
    let up = upstream(ScriptedUpstream::new().route(MODEL, script).require_tokens(Arc::clone(&tokens)).codex_backend())
        .await;
    let text = codex_config(Some(format!("http://{}/backend-api/codex", up.addr)), &grant, token_addr);
    let gw = start(config(&text, &up), Persistence::Memory).await;
    Backend { up, tokens, grant, token_task, gw }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codex_account_serves_every_client_api_on_the_backends_own_terms() {
    let b = backend(Script::always(Behaviour::echo())).await;
    let json = [("content-type", "application/json")];
    let chat = serde_json::json!({"model": format!("chatgpt/{MODEL}"), "max_tokens": 64, "temperature": 0.2,
        "messages": [{"role": "user", "content": "hi from chat"}]});
    let r = send("POST", &b.gw.url("/v1/chat/completions"), &json, &chat.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.json()["choices"][0]["message"]["content"].as_str().is_some_and(|c| c.contains("hi from chat")),
        "{}",
        r.body
    );
    let dropped = r.header("x-ferroute-translation-dropped").unwrap_or_default();
    assert!(dropped.contains("temperature") && dropped.contains("max_output_tokens"), "{dropped}");
    let messages = serde_json::json!({"model": format!("chatgpt/{MODEL}"), "max_tokens": 64, "stream": true,
        "system": "be brief", "messages": [{"role": "user", "content": "hi from messages"}]});
    let r = send("POST", &b.gw.url("/v1/messages"), &json, &messages.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("message_stop") && r.body.contains("\"text\":\"messages\""), "{}", r.body);
    let gemini = serde_json::json!({"contents": [{"role": "user", "parts": [{"text": "hi from gemini"}]}]});
    let url = b.gw.url(&format!("/v1beta/models/chatgpt/{MODEL}:generateContent"));
    let r = send("POST", &url, &json, &gemini.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("hi from gemini"), "{}", r.body);
    // A Responses client, as Codex itself would call through the gateway: its own originator
    // and session id reach the backend.
    let responses =
        serde_json::json!({"model": format!("chatgpt/{MODEL}"), "input": "hi from responses", "store": true});
    let session = "0199a213-81c0-7800-8aa1-bbab2a035a53";
    let headers = [("content-type", "application/json"), ("originator", "codex_cli_rs"), ("session_id", session)];
    let r = send("POST", &b.gw.url("/v1/responses"), &headers, &responses.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["status"], "completed", "{}", r.body);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert!(r.header("x-ferroute-translation-dropped").is_some_and(|d| d.contains("store")), "{:?}", r.headers);

    let seen = b.up.script.requests();
    assert_eq!(seen.len(), 4, "one upstream call per client request: {seen:?}");
    for (i, s) in seen.iter().enumerate() {
        assert_eq!(s.path, "/backend-api/codex/responses", "request {i}");
        let h = |n: &str| s.headers.get(n).map(String::as_str);
        assert_eq!(h("authorization"), Some(format!("Bearer {}", b.grant.access_token).as_str()), "request {i}");
        assert_eq!(h("chatgpt-account-id"), Some("acct-e2e"), "request {i}");
        assert_eq!(h("accept"), Some("text/event-stream"), "request {i}");
        assert!(h("user-agent").is_none(), "no user agent is added: {:?}", s.headers);
        let body: serde_json::Value = serde_json::from_str(&s.body).expect("JSON");
        assert_eq!((body["store"].as_bool(), body["stream"].as_bool()), (Some(false), Some(true)), "{body}");
        assert!(body["instructions"].is_string() && body["input"].is_array(), "{body}");
        assert!(!s.body.contains("You are Codex"), "no prompt of anyone else's is added: {body}");
    }
    let h = |i: usize, n: &str| seen[i].headers.get(n).cloned();
    assert_eq!(h(0, "originator").as_deref(), Some("ferroute"), "Ferroute names itself, never another client");
    assert_eq!(h(0, "session_id"), None, "no session id is made up");
    assert_eq!(h(3, "originator").as_deref(), Some("codex_cli_rs"), "the client's own originator");
    assert_eq!(h(3, "session_id").as_deref(), Some(session));
    let messages_body: serde_json::Value = serde_json::from_str(&seen[1].body).expect("JSON");
    assert_eq!(messages_body["instructions"], "be brief", "the client's system prompt, and only it");
    let stats = b.tokens.stats();
    assert_eq!((stats.reused, stats.invalid_presented), (0, 0), "{stats:?}");
    b.gw.stop().await;
    b.token_task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_usage_limit_from_the_codex_backend_cools_the_account_until_its_stated_reset() {
    let limit = Behaviour::status_with(429, &USAGE_LIMIT_HEADERS, USAGE_LIMIT);
    let b = backend(Script::sequence(vec![limit, Behaviour::echo()])).await;
    let body = serde_json::json!({"model": format!("chatgpt/{MODEL}"), "input": "hi"});
    let r = send("POST", &b.gw.url("/v1/responses"), &[("content-type", "application/json")], &body.to_string()).await;
    assert_eq!(r.status, 429, "{}", r.body);
    let retry_after: u64 = r.header("retry-after").and_then(|v| v.parse().ok()).expect("Retry-After");
    assert!((595..=601).contains(&retry_after), "Retry-After {retry_after}");
    let h = health(&b.gw).await;
    let c1 = connection(&h, "c1");
    assert_eq!(c1["status"], "unavailable", "{c1}");
    let until = c1["rate_limited_until"].as_str().and_then(ferroute_core::hint::parse_rfc3339_ms).expect("until");
    let left = until as i64 - b.gw.gw.clock.wall_ms(b.gw.gw.clock.now()) as i64;
    assert!((595_000..=601_000).contains(&left), "cooled for {left} ms, the backend said 600 s");
    // Cooled: the next request does not reach the backend.
    let r = send("POST", &b.gw.url("/v1/responses"), &[("content-type", "application/json")], &body.to_string()).await;
    assert_eq!(r.status, 429, "{}", r.body);
    assert_eq!(b.up.script.calls(MODEL), 1);
    b.gw.stop().await;
    b.token_task.abort();
}

/// A provider left without `base_url` gets the backend Codex reaches with a ChatGPT sign-in.
#[test]
fn the_codex_preset_names_its_backend() {
    let tokens = TokenServer::new(Duration::from_secs(60));
    let grant = tokens.sign_in();
    let text = codex_config(None, &grant, "127.0.0.1:9".parse().expect("addr"));
    let cfg = proxy::config::Config::from_toml_str(&text, &|_| None, &[]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cfg.providers[0].base_url, "https://chatgpt.com/backend-api/codex");
    let wrong = text.replace("format = \"responses\"", "format = \"openai\"");
    let e = proxy::config::Config::from_toml_str(&wrong, &|_| None, &[]).expect_err("refused").to_string();
    assert!(e.contains(r#"the codex preset needs a provider of format = "responses""#), "{e}");
}
