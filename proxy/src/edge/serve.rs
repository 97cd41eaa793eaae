//! The accept loop and router, generic over the listener and the upstream connector so that
//! production and simulation run the same service.

use crate::edge::auth;
use crate::edge::errors::{Body, ErrorShape};
use crate::ops::admin;
use crate::ops::reload::Serving;
use crate::request::exchange;
use crate::request::forward::forward;
use crate::state::gateway::Gateway;
use crate::translate::ClientApi;
use http::{Method, Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::connect::Connect;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use scenarios::net::Listener;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Routes one request on the gateway current when it arrives (it keeps that gateway, and so
/// its config, to its end; see [`crate::ops::reload`]).
pub async fn route<C: Connect + Clone + Send + Sync + 'static>(
    serving: &Serving<C>,
    req: Request<Incoming>,
    peer: SocketAddr,
) -> Response<Body> {
    let gw = serving.current();
    let method = req.method().clone();
    let google_client = req.headers().contains_key("x-goog-api-key")
        || req.headers().contains_key("x-goog-api-client")
        || req.uri().query().is_some_and(|q| q.split('&').any(|kv| kv.starts_with("key=")));
    let gemini = crate::edge::gemini::call(req.uri().path(), &method, google_client);
    let api = match req.uri().path() {
        "/v1/chat/completions" => Some(ClientApi::Chat),
        "/v1/messages" => Some(ClientApi::Messages),
        "/v1/responses" => Some(ClientApi::Responses),
        _ => None,
    };
    match req.uri().path() {
        "/livez" => return probe(true, Vec::new()),
        "/readyz" => return probe(false, not_ready(serving)),
        _ => {}
    }
    if let Some(call) = gemini {
        // Boxed, as every path rarer than the request path is: an async fn's future is as
        // large as its largest path, and the request path's is moved into place per request.
        return Box::pin(google(&gw, req, peer, call)).await;
    }
    let shape = api.map_or(ErrorShape::OpenAi, exchange::error_shape);
    if let Err(e) = auth::check_peer(&gw.config, peer) {
        return e.into_response_as(shape);
    }
    match (api, &method) {
        (Some(api), &Method::POST) => {
            return match auth::client(&gw.config, req.headers(), api == ClientApi::Messages) {
                Ok(client) => forward(gw, req, client, api).await,
                Err(e) => e.into_response_as(shape),
            };
        }
        (Some(_), _) => return admin::method_not_allowed(req.uri().path(), "POST"),
        (None, _) => {}
    }
    // Boxed, as every path rarer than the request path is (see `google` above).
    Box::pin(operator(serving, gw, req, method)).await
}

/// Why the gateway should not be sent requests now (none: ready). The config is loaded and the
/// store opened by the time anything is served; what can still be missing is the shared store
/// (not joined yet since start) and the will to serve (shutdown has begun).
fn not_ready<C: Connect + Clone + Send + Sync + 'static>(serving: &Serving<C>) -> Vec<&'static str> {
    let mut why = Vec::new();
    if serving.draining() {
        why.push("shutting down");
    }
    if serving.current().replicas().is_some_and(|r| !r.stats().joined()) {
        why.push("the shared state store has not been joined yet");
    }
    why
}

/// `GET /livez` (the process answers) or `GET /readyz` (`why` it is not ready, if anything):
/// no key needed, a few bytes.
fn probe(live: bool, why: Vec<&'static str>) -> Response<Body> {
    let body = match (live, why.is_empty()) {
        (true, _) => serde_json::json!({"status": "live"}),
        (false, true) => serde_json::json!({"status": "ready"}),
        (false, false) => serde_json::json!({"status": "not_ready", "reasons": why}),
    };
    crate::edge::errors::json_response(if live || why.is_empty() { 200 } else { 503 }, body.to_string())
}

/// Every endpoint but the APIs' requests: models, health, metrics, the operator's API and
/// dashboard. The peer has been checked.
async fn operator<C: Connect + Clone + Send + Sync + 'static>(
    serving: &Serving<C>,
    gw: Arc<Gateway<C>>,
    req: Request<Incoming>,
    method: Method,
) -> Response<Body> {
    // Owned: some routes take the request.
    let path = req.uri().path().to_owned();
    match (path.as_str(), &method) {
        ("/v1/models", &Method::GET) => match auth::client(&gw.config, req.headers(), true) {
            Ok(_) => admin::models(&gw, req.headers().contains_key("anthropic-version")),
            Err(e) => e.into_response(),
        },
        ("/api/monitoring/health", &Method::GET) => admin::health(&gw, serving.override_values()).await,
        ("/metrics", &Method::GET) => admin::metrics(&gw).await,
        ("/api/config/reload", &Method::POST) => match auth::admin(&gw.config, req.headers()) {
            Ok(()) => admin::reload(serving),
            Err(e) => e.into_response(),
        },
        ("/api/config/reload", _) => admin::method_not_allowed(&path, "POST"),
        ("/api/resilience/reset", &Method::POST) => match auth::admin(&gw.config, req.headers()) {
            Ok(()) => admin::reset(&gw),
            Err(e) => e.into_response(),
        },
        ("/api/resilience/model-cooldowns", &Method::GET) => match auth::admin(&gw.config, req.headers()) {
            Ok(()) => admin::list_lockouts(&gw),
            Err(e) => e.into_response(),
        },
        ("/api/resilience/model-cooldowns", &Method::DELETE) => match auth::admin(&gw.config, req.headers()) {
            Ok(()) => admin::clear_lockouts(gw, req).await,
            Err(e) => e.into_response(),
        },
        ("/api/v1/session-leases", &Method::POST) => crate::sessions::leases::handle(gw, req).await,
        ("/api/v1/session-leases", _) => admin::method_not_allowed(&path, "POST"),
        ("/api/resilience/emergency-fallback", &Method::GET | &Method::POST) => {
            match auth::admin(&gw.config, req.headers()) {
                Ok(()) => admin::emergency(gw, req).await,
                Err(e) => e.into_response(),
            }
        }
        ("/api/resilience/emergency-fallback", _) => admin::method_not_allowed(&path, "GET, POST"),
        (p, &Method::GET) if p == "/dashboard" || p.starts_with("/dashboard/") => {
            crate::ops::dashboard::asset(p).unwrap_or_else(|| admin::not_found(p))
        }
        ("/api/monitoring/events", &Method::GET) => match auth::admin(&gw.config, req.headers()) {
            Ok(()) => crate::ops::events::stream(&gw, req.headers(), req.uri().query()),
            Err(e) => e.into_response(),
        },
        ("/api/monitoring/events", _) => admin::method_not_allowed(&path, "GET"),
        ("/api/monitoring/dashboard", &Method::GET) => match auth::admin(&gw.config, req.headers()) {
            Ok(()) => crate::ops::overview::dashboard(&gw).await,
            Err(e) => e.into_response(),
        },
        ("/api/monitoring/timeline", &Method::GET) => match auth::admin(&gw.config, req.headers()) {
            Ok(()) => crate::ops::overview::timeline(&gw),
            Err(e) => e.into_response(),
        },
        ("/api/monitoring/dashboard", _) | ("/api/monitoring/timeline", _) => admin::method_not_allowed(&path, "GET"),
        ("/api/resilience/settings", &Method::GET | &Method::PATCH | &Method::DELETE) => {
            match auth::admin(&gw.config, req.headers()) {
                Ok(()) => crate::ops::settings::handle(serving, req).await,
                Err(e) => e.into_response(),
            }
        }
        ("/api/resilience/settings", _) => admin::method_not_allowed(&path, "GET, PATCH, DELETE"),
        ("/api/resilience/reset", _) => admin::method_not_allowed(&path, "POST"),
        ("/api/resilience/model-cooldowns", _) => admin::method_not_allowed(&path, "GET, DELETE"),
        ("/api/monitoring/health", _) | ("/metrics", _) | ("/v1/models", _) => admin::method_not_allowed(&path, "GET"),
        _ => admin::not_found(&path),
    }
}

/// A call of the Gemini API, answered with Google's error shape.
async fn google<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Arc<Gateway<C>>,
    req: Request<Incoming>,
    peer: SocketAddr,
    call: crate::edge::gemini::Call,
) -> Response<Body> {
    use crate::edge::gemini::Call;
    let shape = ErrorShape::Google;
    if let Err(e) = auth::check_peer(&gw.config, peer) {
        return e.into_response_as(shape);
    }
    let client = match auth::gemini_client(&gw.config, req.headers(), req.uri().query()) {
        Ok(c) => c,
        Err(e) => return e.into_response_as(shape),
    };
    match call {
        Call::Generate { .. } => forward(Arc::clone(gw), req, client, ClientApi::Gemini).await,
        Call::CountTokens { model } => crate::ops::google::count_tokens(gw, req, &client, &model).await,
        Call::List => crate::ops::google::list(gw),
        Call::Get { model } => crate::ops::google::get(gw, &model),
        Call::Unknown { method } => crate::edge::errors::ProxyError::new(
            crate::edge::errors::Source::Downstream,
            404,
            "unknown_method",
            format!("Ferroute serves generateContent, streamGenerateContent and countTokens, not {method:?}"),
        )
        .into_response_as(shape),
    }
}

/// How long a client has to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// One HTTPS connection: the handshake (in its own task, with a deadline, so that a slow or
/// silent client holds nothing else up), then HTTP/1.1 inside it.
async fn serve_tls<I, S>(
    acceptor: tokio_rustls::TlsAcceptor,
    io: I,
    peer: SocketAddr,
    builder: hyper::server::conn::http1::Builder,
    svc: S,
    watcher: hyper_util::server::graceful::Watcher,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::HttpService<Incoming, ResBody = Body> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(io)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, %peer, "TLS handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "TLS handshake timed out");
            return;
        }
    };
    if let Err(e) = watcher.watch(builder.serve_connection(TokioIo::new(stream), svc)).await {
        tracing::debug!(error = %e, %peer, "connection ended with an error");
    }
}

/// Serves `gw` on `listener` until `shutdown` resolves, without reloads (see [`serve_live`]).
pub async fn serve_gateway<L, C>(gw: Arc<Gateway<C>>, listener: L, shutdown: impl Future<Output = ()>)
where
    L: Listener,
    C: Connect + Clone + Send + Sync + 'static,
{
    serve_live(Serving::new(gw, None), listener, shutdown).await;
}

/// Serves the current gateway of `serving` on `listener` until `shutdown` resolves; then stops
/// accepting, lets in-flight requests finish within the grace period, and flushes state.
pub async fn serve_live<L, C>(serving: Arc<Serving<C>>, mut listener: L, shutdown: impl Future<Output = ()>)
where
    L: Listener,
    C: Connect + Clone + Send + Sync + 'static,
{
    let gw = serving.current();
    let graceful = GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(Duration::from_secs(30)).auto_date_header(false);
    tokio::pin!(shutdown);
    let sweeper = {
        let gw = Arc::clone(&gw);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(15)).await;
                gw.sweep();
            }
        })
    };
    let refresher = {
        let serving = Arc::clone(&serving);
        tokio::spawn(crate::sessions::refresh::run(move || serving.current()))
    };
    // Once shutdown begins, readiness is off, and requests are still taken for
    // `unready_delay_ms` (a load balancer stops sending), then the listener closes.
    let closing = tokio::time::sleep(Duration::from_secs(100 * 365 * 86_400));
    tokio::pin!(closing);
    loop {
        tokio::select! {
            biased;
            () = &mut shutdown, if !serving.draining() => {
                serving.drain();
                let delay = Duration::from_millis(serving.current().config.server.unready_delay_ms);
                if delay.is_zero() {
                    break;
                }
                tracing::info!(delay_ms = delay.as_millis() as u64, "shutting down: readiness off, still taking requests");
                closing.as_mut().reset(tokio::time::Instant::now() + delay);
            }
            () = &mut closing => break,
            accepted = listener.accept() => {
                let (io, peer) = match accepted {
                    Ok(x) => x,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let tls = serving.tls();
                let serving = Arc::clone(&serving);
                let svc = service_fn(move |req| {
                    let serving = Arc::clone(&serving);
                    async move { Ok::<_, Infallible>(route(&serving, req, peer).await) }
                });
                if let Some(acceptor) = tls {
                    tokio::spawn(serve_tls(acceptor, io, peer, builder.clone(), svc, graceful.watcher()));
                    continue;
                }
                let conn = builder.serve_connection(TokioIo::new(io), svc);
                let watched = graceful.watch(conn);
                tokio::spawn(async move {
                    if let Err(e) = watched.await {
                        tracing::debug!(error = %e, %peer, "connection ended with an error");
                    }
                });
            }
        }
    }
    tracing::info!("shutting down: no new connections; waiting for in-flight requests");
    let gw = serving.current();
    // Event streams never end by themselves: they end now, not at the end of the grace period.
    gw.feed.close();
    let grace = Duration::from_millis(gw.config.server.shutdown_grace_ms);
    if tokio::time::timeout(grace, graceful.shutdown()).await.is_err() {
        tracing::warn!(
            grace_ms = grace.as_millis() as u64,
            "in-flight requests did not finish within the grace period"
        );
    }
    sweeper.abort();
    refresher.abort();
    gw.flush();
    tracing::info!("state flushed; stopped");
}
