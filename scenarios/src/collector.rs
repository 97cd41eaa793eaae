//! An OTLP/HTTP collector for tests: keeps every request it receives (path, content type and
//! body) and answers 200, so that a test can decode what a gateway exported with the protocol's
//! own types and check where and how it was sent.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// One request the collector received.
#[derive(Debug, Clone)]
pub struct Received {
    /// Its path (`/v1/traces` for spans).
    pub path: String,
    /// Its `content-type` (`application/x-protobuf` for OTLP/HTTP protobuf).
    pub content_type: String,
    /// Its body.
    pub body: Bytes,
}

/// A running collector on a loopback port.
#[derive(Debug, Clone)]
pub struct Collector {
    /// Where it listens.
    pub addr: SocketAddr,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Collector {
    /// Starts one on an ephemeral loopback port (on the current tokio runtime).
    pub async fn start() -> std::io::Result<Collector> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let received: Arc<Mutex<Vec<Received>>> = Arc::default();
        let keep = Arc::clone(&received);
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                let keep = Arc::clone(&keep);
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                        let keep = Arc::clone(&keep);
                        async move {
                            let path = req.uri().path().to_owned();
                            let content_type = req
                                .headers()
                                .get("content-type")
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or("")
                                .to_owned();
                            let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                            keep.lock().unwrap_or_else(|p| p.into_inner()).push(Received { path, content_type, body });
                            Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(Bytes::new())))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(Collector { addr, received })
    }

    /// Everything received so far, in order.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
