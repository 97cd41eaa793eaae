//! Test harness: a scripted upstream and a gateway on real loopback sockets, and a small
//! HTTP client.
#![allow(dead_code)]

pub mod answers;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use proxy::config::Config;
use proxy::state::gateway::Gateway;
use proxy::{Persistence, build};
use scenarios::{ScriptedUpstream, serve_upstream};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

/// One provider with two keys, `k1` then `k2`, serving model `m`.
pub const ONE_PROVIDER: &str = r#"
[[providers]]
id = "up"
base_url = "{UP}"
models = ["m"]
[[connections]]
id = "k1"
provider = "up"
api_key = "sk-one"
[[connections]]
id = "k2"
provider = "up"
api_key = "sk-two"
"#;

/// Two providers on one upstream host, one per wire format (`oai` speaks chat completions,
/// `ant` Anthropic messages), and two combos that fall back across them: `mixed` tries
/// `ant/failing` then `oai/tools`, `mixed-back` tries `oai/failing` then `ant/tools`.
pub const TWO_FORMATS: &str = r#"
[[providers]]
id = "oai"
format = "openai"
base_url = "{UP}"
models = ["tools", "echo"]
[[connections]]
id = "oai-1"
provider = "oai"
api_key = "sk-oai"
[[providers]]
id = "ant"
format = "anthropic"
base_url = "{UP}"
models = ["tools", "echo"]
[[connections]]
id = "ant-1"
provider = "ant"
api_key = "sk-ant"
[[combos]]
name = "mixed"
targets = ["ant/failing", "oai/tools"]
[[combos]]
name = "mixed-back"
targets = ["oai/failing", "ant/tools"]
"#;

/// The two formats `TWO_FORMATS` lacks: a Responses-format and a Gemini-format provider.
pub const NEW_FORMATS: &str = r#"
[[providers]]
id = "rsp"
format = "responses"
base_url = "{UP}"
models = ["tools", "echo"]
[[connections]]
id = "rsp-1"
provider = "rsp"
api_key = "sk-rsp"
[[providers]]
id = "gem"
format = "gemini"
base_url = "{UP}"
models = ["tools", "echo"]
[[connections]]
id = "gem-1"
provider = "gem"
api_key = "sk-gem"
"#;

/// A running scripted upstream.
pub struct Upstream {
    pub addr: SocketAddr,
    pub script: Arc<ScriptedUpstream>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn upstream(script: ScriptedUpstream) -> Upstream {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind upstream");
    let addr = listener.local_addr().expect("addr");
    let script = Arc::new(script);
    let task = tokio::spawn(serve_upstream(listener, Arc::clone(&script)));
    Upstream { addr, script, task }
}

/// A running gateway.
pub struct Running {
    pub addr: SocketAddr,
    pub gw: Arc<Gateway<HttpConnector>>,
    stop: Option<oneshot::Sender<()>>,
    pub task: Option<tokio::task::JoinHandle<()>>,
}

impl Running {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Graceful shutdown; waits for it to finish.
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(30), t).await;
        }
    }

    /// Asks for a graceful shutdown without waiting.
    pub fn signal_stop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(t) = &self.task {
            t.abort();
        }
    }
}

/// Parses a config with `{UP}` replaced by the upstream's base URL.
pub fn config(text: &str, up: &Upstream) -> Config {
    let text = text.replace("{UP}", &format!("http://{}/v1", up.addr));
    let env = |name: &str| match name {
        "ADMIN" => Some("admin-secret-1".to_owned()),
        _ => None,
    };
    Config::from_toml_str(&text, &env, &[]).unwrap_or_else(|e| panic!("test config: {e}"))
}

pub async fn start(config: Config, persistence: Persistence) -> Running {
    start_at(config, persistence, scenarios::upstream::DEFAULT_WALL_START_MS).await
}

/// A gateway whose wall clock starts at `wall_start_ms` (a restart starts later than the first
/// start did).
pub async fn start_at(config: Config, persistence: Persistence, wall_start_ms: u64) -> Running {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind gateway");
    let addr = listener.local_addr().expect("addr");
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    let gw = build(config, http, persistence, wall_start_ms, 7).expect("gateway");
    let (tx, rx) = oneshot::channel::<()>();
    let g = Arc::clone(&gw);
    let task = tokio::spawn(async move {
        proxy::edge::serve::serve_gateway(g, listener, async {
            let _ = rx.await;
        })
        .await;
    });
    Running { addr, gw, stop: Some(tx), task: Some(task) }
}

/// A gateway on the production connector (TLS and its trust roots, egress proxies).
pub type Production = Gateway<proxy::state::connector::Upstream>;

/// `config` served on the production connector on a free loopback port until the test ends.
pub async fn start_production(config: Config) -> (SocketAddr, Arc<Production>) {
    let connector = proxy::https_connector(&config.server).expect("connector");
    let gw = build(config, connector, Persistence::Memory, scenarios::upstream::DEFAULT_WALL_START_MS, 7).expect("gw");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind gateway");
    let addr = listener.local_addr().expect("addr");
    let g = Arc::clone(&gw);
    tokio::spawn(async move { proxy::edge::serve::serve_gateway(g, listener, std::future::pending()).await });
    (addr, gw)
}

/// A chat request for combo `team` saying `content`, to the gateway at `addr`.
pub async fn team_chat(addr: SocketAddr, content: &str) -> Reply {
    let body = serde_json::json!({"model": "team", "messages": [{"role": "user", "content": content}]});
    let url = format!("http://{addr}/v1/chat/completions");
    send("POST", &url, &[("content-type", "application/json")], &body.to_string()).await
}

/// A response as the client saw it.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

pub fn client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build(HttpConnector::new())
}

pub async fn send(method: &str, url: &str, headers: &[(&str, &str)], body: &str) -> Reply {
    let mut b = http::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let req = b.body(Full::new(Bytes::from(body.to_owned()))).expect("request");
    let resp =
        tokio::time::timeout(Duration::from_secs(30), client().request(req)).await.expect("no hang").expect("response");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = tokio::time::timeout(Duration::from_secs(30), resp.into_body().collect())
        .await
        .expect("no hang")
        .expect("body")
        .to_bytes();
    Reply { status, headers, body: String::from_utf8_lossy(&body).into_owned() }
}

/// A JSON `POST` to the gateway.
pub async fn post(gw: &Running, path: &str, body: &serde_json::Value) -> Reply {
    send("POST", &gw.url(path), &[("content-type", "application/json")], &body.to_string()).await
}

pub async fn chat(gw: &Running, model: &str, stream: bool) -> Reply {
    let body = serde_json::json!({"model": model, "stream": stream, "messages": [{"role": "user", "content": "hello from the test"}]});
    send("POST", &gw.url("/v1/chat/completions"), &[("content-type", "application/json")], &body.to_string()).await
}

pub async fn health(gw: &Running) -> serde_json::Value {
    send("GET", &gw.url("/api/monitoring/health"), &[], "").await.json()
}

pub fn provider<'a>(health: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    health["providers"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["id"] == id))
        .unwrap_or_else(|| panic!("provider {id} in {health}"))
}

pub fn connection<'a>(health: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    health["connections"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["id"] == id))
        .unwrap_or_else(|| panic!("connection {id} in {health}"))
}

#[allow(unused_imports)]
pub use scenarios::answer::sse_data;
