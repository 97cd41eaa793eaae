//! Load tools: an in-process gateway for the soak, a minimal hyper pass-through (the physical
//! limit a proxy can reach), and an open-loop load generator for the overhead benchmark.
//! Everything stays on loopback.

pub mod proxied;
pub mod soak;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use proxy::config::Config;
use proxy::{Persistence, build};
use scenarios::{Behaviour, Script, ScriptedUpstream, SseEvent};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// Starts the real gateway in this process on an ephemeral loopback port. With `upstream`
/// it proxies `bench/m` (and `bench/s` for streams) to that address; without, it serves the
/// built-in demo provider. State goes to `data_dir`.
pub async fn start_gateway(upstream: Option<SocketAddr>, data_dir: &std::path::Path) -> anyhow::Result<SocketAddr> {
    start_gateway_with(upstream, data_dir, "").await
}

/// [`start_gateway`] with `head` (TOML, e.g. a `[server]` table) before the benchmark's
/// providers.
pub async fn start_gateway_with(
    upstream: Option<SocketAddr>,
    data_dir: &std::path::Path,
    head: &str,
) -> anyhow::Result<SocketAddr> {
    start_gateway_scaled(upstream, data_dir, head, Scale::default()).await
}

/// How large the benchmark's config is.
#[derive(Debug, Clone, Copy)]
pub struct Scale {
    /// Keys of each benchmark provider (taken round robin).
    pub keys: usize,
    /// Providers besides the benchmark's (one key each, never used).
    pub extra_providers: usize,
}

impl Default for Scale {
    fn default() -> Self {
        Scale { keys: BENCH_KEYS, extra_providers: 0 }
    }
}

/// [`start_gateway_with`] with `scale` keys and providers.
pub async fn start_gateway_scaled(
    upstream: Option<SocketAddr>,
    data_dir: &std::path::Path,
    head: &str,
    scale: Scale,
) -> anyhow::Result<SocketAddr> {
    let env = |_: &str| None;
    let mut config = match upstream {
        Some(addr) => {
            let mut text = head.to_owned();
            for i in 0..scale.extra_providers {
                text += &format!(
                    "[[providers]]\nid = \"x{i:04}\"\nbase_url = \"http://{addr}/v1\"\nmodels = [\"m\"]\n\
                     [[connections]]\nid = \"x{i:04}-k\"\nprovider = \"x{i:04}\"\napi_key = \"sk-x{i}\"\n"
                );
            }
            text += &bench_config(addr, scale.keys);
            Config::from_toml_str(&text, &env, &[]).map_err(|e| anyhow::anyhow!("{e}"))?
        }
        None => Config::embedded(&env, &[]).map_err(|e| anyhow::anyhow!("{e}"))?,
    };
    if config.demo {
        let demo = proxy::ops::demo::start().await?;
        for p in &mut config.providers {
            if p.base_url == proxy::config::demo::BASE_URL {
                p.base_url = format!("http://{demo}/v1");
            }
        }
    }
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    // `[telemetry]` in `head` exports spans, as the binary does.
    let telemetry = proxy::recording::telemetry::Telemetry::for_config(&config.telemetry, &env, 1)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let gw = build(config, http, Persistence::Dir(data_dir.to_owned()), proxy::state::clock::system_wall_ms(), 1)?;
    if let Some(t) = telemetry {
        let _ = gw.telemetry.set(Arc::new(t));
    }
    tokio::spawn(proxy::edge::serve::serve_gateway(gw, listener, std::future::pending()));
    Ok(addr)
}

/// Keys each benchmark provider has, taken round robin (as the minimal gateway does).
pub const BENCH_KEYS: usize = 8;

/// The benchmark's providers: `bench` (OpenAI format: `m`, `s`), `bench-ant` (Anthropic
/// format: `m`, `as`), `bench-rsp` (Responses) and `bench-gem` (Gemini), each with `keys` keys
/// taken round robin.
fn bench_config(addr: SocketAddr, keys: usize) -> String {
    let mut text = String::new();
    for (id, format, models) in [
        ("bench", "openai", "\"m\", \"s\""),
        ("bench-ant", "anthropic", "\"m\", \"as\""),
        ("bench-rsp", "responses", "\"m\""),
        ("bench-gem", "gemini", "\"m\""),
    ] {
        text += &format!(
            "[[providers]]\nid = \"{id}\"\nformat = \"{format}\"\nbase_url = \"http://{addr}/v1\"\nmodels = [{models}]\nconnection_strategy = \"round-robin\"\n"
        );
        for k in 1..=keys {
            text += &format!("[[connections]]\nid = \"{id}-{k}\"\nprovider = \"{id}\"\napi_key = \"sk-bench-{k}\"\n");
        }
    }
    text
}

/// An HTTP sink that answers every request 200 with an empty body (an OTLP collector that
/// keeps nothing).
pub async fn start_sink() -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let Ok((io, _)) = listener.accept().await else { continue };
            tokio::spawn(async move {
                let svc = service_fn(|req: hyper::Request<Incoming>| async move {
                    let _ = req.into_body().collect().await;
                    Ok::<_, std::io::Error>(hyper::Response::new(Full::new(Bytes::new())))
                });
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(io), svc).await;
            });
        }
    });
    Ok(addr)
}

type PassBody = BoxBody<Bytes, hyper::Error>;

/// A minimal HTTP/1 pass-through to `upstream`: what any proxy costs at the very least.
pub async fn start_passthrough(upstream: SocketAddr) -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    let client: Client<HttpConnector, Incoming> = Client::builder(TokioExecutor::new()).build(http);
    tokio::spawn(async move {
        loop {
            let Ok((io, _)) = listener.accept().await else { continue };
            let _ = io.set_nodelay(true);
            let client = client.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |mut req: hyper::Request<Incoming>| {
                    let client = client.clone();
                    async move {
                        let pq = req.uri().path_and_query().map(|p| p.as_str().to_owned()).unwrap_or_default();
                        *req.uri_mut() =
                            format!("http://{upstream}{pq}").parse().map_err(|_| std::io::Error::other("bad uri"))?;
                        let resp = client.request(req).await.map_err(std::io::Error::other)?;
                        Ok::<_, std::io::Error>(resp.map(|b| b.boxed() as PassBody))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(io), svc).await;
            });
        }
    });
    Ok(addr)
}

/// The least any gateway must do, the yardstick for ferroute's own cost: the pass-through
/// above that also reads the whole body, parses it as JSON for `model` (a 400 without one),
/// picks one of [`BENCH_KEYS`] keys round robin, sets that key's `Authorization` header and
/// counts the request. Answers stream back as they come.
pub async fn start_minimal(upstream: SocketAddr) -> anyhow::Result<SocketAddr> {
    #[derive(serde::Deserialize)]
    struct Head<'a> {
        #[serde(borrow)]
        model: std::borrow::Cow<'a, str>,
    }
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new()).build(http);
    let keys: Arc<[http::HeaderValue]> = (1..=BENCH_KEYS)
        .map(|k| http::HeaderValue::from_str(&format!("Bearer sk-bench-{k}")))
        .collect::<Result<_, _>>()?;
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let served = Arc::new(std::sync::atomic::AtomicU64::new(0));
    tokio::spawn(async move {
        loop {
            let Ok((io, _)) = listener.accept().await else { continue };
            let _ = io.set_nodelay(true);
            let (client, keys, next, served) = (client.clone(), keys.clone(), next.clone(), served.clone());
            tokio::spawn(async move {
                let svc = service_fn(move |req: hyper::Request<Incoming>| {
                    let (client, keys, next, served) = (client.clone(), keys.clone(), next.clone(), served.clone());
                    async move {
                        let (mut parts, body) = req.into_parts();
                        let body = body.collect().await?.to_bytes();
                        match serde_json::from_slice::<Head<'_>>(&body) {
                            Ok(head) if !head.model.is_empty() => {}
                            _ => {
                                let mut resp = hyper::Response::new(Full::new(Bytes::from_static(
                                    br#"{"error":{"message":"the body needs a model"}}"#,
                                )));
                                *resp.status_mut() = hyper::StatusCode::BAD_REQUEST;
                                return Ok(resp.map(|b| b.map_err(|never| match never {}).boxed()));
                            }
                        }
                        let pq = parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
                        parts.uri =
                            format!("http://{upstream}{pq}").parse().map_err(|_| std::io::Error::other("bad uri"))?;
                        let key = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % keys.len();
                        parts.headers.insert(http::header::AUTHORIZATION, keys[key].clone());
                        served.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let resp = client.request(hyper::Request::from_parts(parts, Full::new(body))).await;
                        let resp = resp.map_err(std::io::Error::other)?;
                        Ok::<_, anyhow::Error>(resp.map(|b| b.boxed() as PassBody))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(io), svc).await;
            });
        }
    });
    Ok(addr)
}

/// Latency percentiles of one measurement, in microseconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Latency {
    /// Median.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// Requests completed.
    pub ok: usize,
    /// Requests failed.
    pub failed: usize,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// One request and its full body.
async fn one(client: &Client<HttpConnector, Full<Bytes>>, url: &str, body: &Bytes) -> bool {
    let req = match hyper::Request::post(url).header("content-type", "application/json").body(Full::new(body.clone())) {
        Ok(r) => r,
        Err(_) => return false,
    };
    match client.request(req).await {
        Ok(resp) if resp.status().is_success() => resp.into_body().collect().await.is_ok(),
        _ => false,
    }
}

/// The benchmark's upstream: `m` echoes (either format), `s` streams ten chat chunks, `as`
/// streams ten tokens as Anthropic events.
pub fn bench_upstream() -> ScriptedUpstream {
    let events: Vec<SseEvent> = (0..10)
        .map(|i| SseEvent::text(0, &format!("token{i} ")))
        .chain([SseEvent::usage(0), SseEvent::done(0)])
        .collect();
    let tokens: Vec<String> = (0..10).map(|i| format!("token{i} ")).collect();
    let anthropic = SseEvent::anthropic_text_stream("as", &tokens, 0);
    ScriptedUpstream::new()
        .route("m", Script::always(Behaviour::echo()))
        .route("s", Script::always(Behaviour::stream(events, false)))
        .route("as", Script::always(Behaviour::stream(anthropic, false)))
}

/// The model a benchmark target asks for: `prefix` names the provider (`""` straight to the
/// upstream, `bench/` the same-format one, `bench-ant/` the Anthropic-format one).
pub fn bench_model(prefix: &str, stream: bool) -> String {
    match (prefix, stream) {
        ("bench-ant/", true) => "bench-ant/as".to_owned(),
        (p, true) => format!("{p}s"),
        (p, false) => format!("{p}m"),
    }
}

/// Sends `count` requests one after another and returns how many succeeded.
pub async fn sequential(url: &str, body: Bytes, count: usize) -> usize {
    let client = client();
    let mut ok = 0;
    for _ in 0..count {
        if one(&client, url, &body).await {
            ok += 1;
        }
    }
    ok
}

/// The request body for model `model`.
pub fn body(model: &str, stream: bool) -> Bytes {
    Bytes::from(serde_json::json!({"model": model, "stream": stream, "messages": [{"role": "user", "content": "measure the overhead of this gateway"}]}).to_string())
}

fn client() -> Client<HttpConnector, Full<Bytes>> {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    Client::builder(TokioExecutor::new()).pool_max_idle_per_host(4096).build(http)
}

/// Open loop: requests start on a fixed schedule whatever the responses do, so a slow server
/// cannot slow the sender down (no coordinated omission). Latency runs from the moment each
/// request is actually sent: the timer's own wake-up lateness (up to a millisecond) belongs to
/// the generator, not to the target.
pub async fn open_loop(url: &str, body: Bytes, rps: u64, duration: Duration) -> Latency {
    let url = url.to_owned();
    scheduled(rps, duration, move |client| {
        let (url, body) = (url.clone(), body.clone());
        async move { one(&client, &url, &body).await }
    })
    .await
}

/// [`open_loop`] for `GET url` with `headers`: latency to the full body.
pub async fn open_loop_get(url: &str, headers: &[(&'static str, String)], rps: u64, duration: Duration) -> Latency {
    let (url, headers) = (url.to_owned(), headers.to_vec());
    scheduled(rps, duration, move |client| {
        let mut req = hyper::Request::get(url.as_str());
        for (k, v) in &headers {
            req = req.header(*k, v.as_str());
        }
        async move {
            match req.body(Full::new(Bytes::new())) {
                Ok(req) => match client.request(req).await {
                    Ok(resp) if resp.status().is_success() => resp.into_body().collect().await.is_ok(),
                    _ => false,
                },
                Err(_) => false,
            }
        }
    })
    .await
}

/// Starts `send(client)` `rps` times a second for `duration` on a fixed schedule; each
/// request's latency runs from when it was sent to when its future ends (true: it succeeded).
async fn scheduled<F, Fut>(rps: u64, duration: Duration, send: F) -> Latency
where
    F: Fn(Client<HttpConnector, Full<Bytes>>) -> Fut,
    Fut: std::future::Future<Output = bool> + Send + 'static,
{
    let client = client();
    let n = (rps as f64 * duration.as_secs_f64()) as u64;
    let interval = Duration::from_secs_f64(1.0 / rps as f64);
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::with_capacity(n as usize);
    for i in 0..n {
        tokio::time::sleep_until(start + interval * i as u32).await;
        let request = send(client.clone());
        tasks.push(tokio::spawn(async move {
            let sent = tokio::time::Instant::now();
            let ok = request.await;
            (ok, sent.elapsed().as_secs_f64() * 1e6)
        }));
    }
    summarize(tasks).await
}

/// Closed loop with `workers` concurrent clients for `duration`: the most requests per second
/// the target sustains.
pub async fn max_throughput(url: &str, body: Bytes, workers: usize, duration: Duration) -> f64 {
    let client = client();
    let deadline = tokio::time::Instant::now() + duration;
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            let (client, url, body, done) = (client.clone(), url.to_owned(), body.clone(), Arc::clone(&done));
            tokio::spawn(async move {
                while tokio::time::Instant::now() < deadline {
                    if one(&client, &url, &body).await {
                        done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        let _ = t.await;
    }
    done.load(std::sync::atomic::Ordering::Relaxed) as f64 / duration.as_secs_f64()
}

async fn summarize(tasks: Vec<tokio::task::JoinHandle<(bool, f64)>>) -> Latency {
    let mut lat = Vec::with_capacity(tasks.len());
    let mut failed = 0;
    for t in tasks {
        match t.await {
            Ok((true, us)) => lat.push(us),
            _ => failed += 1,
        }
    }
    lat.sort_by(f64::total_cmp);
    Latency { p50_us: percentile(&lat, 0.5), p99_us: percentile(&lat, 0.99), ok: lat.len(), failed }
}
