//! The inbound request path: arbitrary headers and bodies sent over a real HTTP/1.1 connection
//! (an in-memory duplex) to the gateway's own router, for every client endpoint, the health,
//! admin and lease endpoints. Every request gets one well-formed answer (a JSON body whenever
//! it says JSON) within the time limit; never a panic or a hang. Upstreams refuse every
//! connection, so dispatched requests exercise fallback and error answers too.
#![no_main]

use bytes::Bytes;
use http::Uri;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use libfuzzer_sys::fuzz_target;
use proxy::config::Config;
use proxy::state::gateway::Gateway;
use std::convert::Infallible;
use std::future::{Ready, ready};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Refuses every upstream connection at once.
#[derive(Clone, Copy)]
struct Refuse;

impl tower_service::Service<Uri> for Refuse {
    type Response = TokioIo<tokio::net::TcpStream>;
    type Error = std::io::Error;
    type Future = Ready<Result<Self::Response, Self::Error>>;
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }
    fn call(&mut self, _uri: Uri) -> Self::Future {
        ready(Err(std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "fuzz: no upstreams")))
    }
}

const CONFIG: &str = r#"
[server]
admin_key = "admin-fuzz"
max_body_bytes = 65536
[[keys]]
id = "team"
key = "sk-team-fuzz-key"
permissions = ["lease:exclusive"]
allowed_connections = ["o1", "a1"]
[[providers]]
id = "oai"
format = "openai"
base_url = "http://upstream.invalid/v1"
models = ["m"]
[[providers]]
id = "ant"
format = "anthropic"
base_url = "http://upstream.invalid/v1"
models = ["c"]
[[connections]]
id = "o1"
provider = "oai"
api_key = "sk-1"
[[connections]]
id = "a1"
provider = "ant"
api_key = "sk-2"
[[combos]]
name = "both"
targets = ["oai/m", "ant/c"]
[resilience.session_affinity]
ttl_ms = 60000
"#;

const PATHS: &[(&str, &str)] = &[
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/messages"),
    ("POST", "/v1/responses"),
    ("POST", "/api/v1/session-leases"),
    ("DELETE", "/api/resilience/model-cooldowns"),
    ("POST", "/api/resilience/emergency-fallback"),
    ("GET", "/api/monitoring/health"),
    ("GET", "/v1/models"),
];

struct World {
    rt: tokio::runtime::Runtime,
    gw: Mutex<(Arc<Gateway<Refuse>>, u32)>,
}

fn gateway() -> Arc<Gateway<Refuse>> {
    let config = Config::from_toml_str(CONFIG, &|_| None, &[]).expect("the fuzz config loads");
    proxy::build(config, Refuse, proxy::Persistence::Memory, 1_800_000_000_000, 7).expect("the gateway builds")
}

fn world() -> &'static World {
    static W: OnceLock<World> = OnceLock::new();
    W.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let gw = rt.block_on(async { gateway() });
        World { rt, gw: Mutex::new((gw, 0)) }
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else { return };
    let (method, path) = PATHS[usize::from(pick) % PATHS.len()];
    let text = String::from_utf8_lossy(rest);
    let (head, body) = text.split_once("\n\n").unwrap_or(("", &text));
    let mut request = format!("{method} {path} HTTP/1.1\r\nhost: gateway\r\nconnection: close\r\n");
    for line in head.lines() {
        if let Some((name, value)) = line.split_once(':') {
            let name = name.trim();
            if name.eq_ignore_ascii_case("content-length") || name.eq_ignore_ascii_case("transfer-encoding") {
                continue;
            }
            request.push_str(&format!("{name}:{}\r\n", value.replace('\r', "")));
        }
    }
    request.push_str(&format!("content-length: {}\r\n\r\n{body}", body.len()));

    let w = world();
    let gw = {
        let mut g = w.gw.lock().unwrap_or_else(|p| p.into_inner());
        // A fresh gateway now and then, so that state built up by earlier inputs (open
        // breakers, leases) does not hide paths for ever.
        g.1 += 1;
        if g.1 % 5_000 == 0 {
            g.0 = w.rt.block_on(async { gateway() });
        }
        proxy::ops::reload::Serving::new(Arc::clone(&g.0), None)
    };
    let answer = w.rt.block_on(async move {
        let (client, server) = tokio::io::duplex(1 << 16);
        let peer: std::net::SocketAddr = ([127, 0, 0, 1], 40_000).into();
        let svc = service_fn(move |req| {
            let serving = Arc::clone(&gw);
            async move { Ok::<_, Infallible>(proxy::edge::serve::route(&serving, req, peer).await) }
        });
        let conn = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(server), svc);
        let served = tokio::spawn(conn);
        let (mut rd, mut wr) = tokio::io::split(client);
        let exchange = async {
            wr.write_all(request.as_bytes()).await?;
            let mut out = Vec::new();
            rd.read_to_end(&mut out).await?;
            Ok::<_, std::io::Error>(out)
        };
        let out = tokio::time::timeout(Duration::from_secs(30), exchange).await;
        let _ = served.await;
        out
    });
    let Ok(Ok(answer)) = answer else { panic!("no answer within 30 s: {answer:?}") };
    let answer = Bytes::from(answer);
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 "), "not an HTTP answer: {text:?}");
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status: u16 = head.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    assert!((100..600).contains(&status), "status line {head:?}");
    assert_ne!(status, 500, "an internal error: {text}");
    let json = head.lines().any(|l| l.to_ascii_lowercase().starts_with("content-type: application/json"));
    if json && !head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        assert!(serde_json::from_str::<serde_json::Value>(body).is_ok(), "a JSON answer that is not JSON: {text}");
    }
});
