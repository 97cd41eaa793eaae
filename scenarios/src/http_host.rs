//! Serving one scripted host's handler (an upstream, a token server) on a listener, real or
//! simulated: one task per connection, HTTP/1.1, no `Date` header (it would differ per run).

use crate::net::Listener;
use crate::sse_out::UpBody;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

/// Serves `host` on `listener` with `handle` until the task is dropped.
pub(crate) async fn serve<L, T, F, Fut>(mut listener: L, host: Arc<T>, handle: F)
where
    L: Listener,
    T: Send + Sync + 'static,
    F: Fn(Arc<T>, Request<Incoming>) -> Fut + Copy + Send + Sync + 'static,
    Fut: Future<Output = Result<Response<UpBody>, io::Error>> + Send + 'static,
{
    loop {
        let Ok((io, _peer)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let host = Arc::clone(&host);
        tokio::spawn(async move {
            let svc = service_fn(move |req| handle(Arc::clone(&host), req));
            let _ = hyper::server::conn::http1::Builder::new()
                .auto_date_header(false)
                .serve_connection(TokioIo::new(io), svc)
                .await;
        });
    }
}
