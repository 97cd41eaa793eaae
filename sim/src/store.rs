//! A replica's link to the simulation's store host ([`scenarios::store`]): the gateway's
//! [`SharedStore`] interface over byte streams, so that the same replication code that talks to
//! Redis in production talks to the store host over simulated sockets (where partitions and
//! delays between a replica and the store are scenarios). Every request opens its own
//! connection and waits at most [`TIMEOUT`] for its answer; `join` keeps one open for the feed.

use futures_util::future::BoxFuture;
use proxy::replicas::shared_store::{Feed, Joined, LeaseReply, SharedStore, StoreError, StoreOp};
use scenarios::store::{Request, Write};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, Lines, ReadHalf};

/// Longest wait to connect to the store, or for one of its answers.
pub const TIMEOUT: Duration = Duration::from_secs(2);

/// A byte stream to the store.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Io for T {}

/// Opens a stream to the store.
pub type Dial = Arc<dyn Fn() -> BoxFuture<'static, std::io::Result<Box<dyn Io>>> + Send + Sync>;

/// The store host's client.
pub struct StoreClient {
    dial: Dial,
}

impl std::fmt::Debug for StoreClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreClient").finish_non_exhaustive()
    }
}

type Reader = Lines<BufReader<ReadHalf<Box<dyn Io>>>>;

impl StoreClient {
    /// A client that reaches the store through `dial`.
    pub fn new(dial: Dial) -> Self {
        StoreClient { dial }
    }

    /// A client of the store host `host:port` in the simulated network.
    pub fn simulated(host: &str, port: u16) -> Self {
        let host = host.to_owned();
        StoreClient::new(Arc::new(move || {
            let host = host.clone();
            Box::pin(async move {
                let s = turmoil::net::TcpStream::connect((host.as_str(), port)).await?;
                Ok(Box::new(s) as Box<dyn Io>)
            })
        }))
    }

    /// Sends `req` on a new connection and reads its answer; the connection, for more.
    async fn call(&self, req: &Request) -> Result<(Value, Reader, tokio::io::WriteHalf<Box<dyn Io>>), StoreError> {
        let exchange = async {
            let io = (self.dial)().await.map_err(|e| StoreError(format!("store unreachable: {e}")))?;
            let (r, mut w) = tokio::io::split(io);
            let mut line = serde_json::to_string(req).map_err(|e| StoreError(e.to_string()))?;
            line.push('\n');
            w.write_all(line.as_bytes()).await.map_err(|e| StoreError(format!("store write: {e}")))?;
            let mut lines = BufReader::new(r).lines();
            let answer = lines
                .next_line()
                .await
                .map_err(|e| StoreError(format!("store read: {e}")))?
                .ok_or_else(|| StoreError("the store closed the connection".to_owned()))?;
            let v: Value = serde_json::from_str(&answer).map_err(|e| StoreError(format!("store answer: {e}")))?;
            if let Some(e) = v.get("err") {
                return Err(StoreError(format!("store: {e}")));
            }
            Ok((v.get("ok").cloned().unwrap_or(Value::Null), lines, w))
        };
        match tokio::time::timeout(TIMEOUT, exchange).await {
            Ok(r) => r,
            Err(_) => Err(StoreError(format!("the store did not answer within {} ms", TIMEOUT.as_millis()))),
        }
    }

    async fn ok(&self, req: &Request) -> Result<Value, StoreError> {
        Ok(self.call(req).await?.0)
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_owned)).collect()).unwrap_or_default()
}

impl SharedStore for StoreClient {
    fn apply(&self, ops: Vec<StoreOp>) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let ops = ops
                .into_iter()
                .map(|op| match op {
                    StoreOp::Set { field, value, expires_ms } => Write::Set { field, value, expires_ms },
                    StoreOp::Delete { fields } => Write::Delete { fields },
                    StoreOp::Publish { message } => Write::Publish { message },
                    StoreOp::Prune { now_ms } => Write::Prune { now_ms },
                })
                .collect();
            self.ok(&Request::Apply { ops }).await.map(|_| ())
        })
    }

    fn fields(&self) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        Box::pin(async move { Ok(strings(&self.ok(&Request::Fields).await?)) })
    }

    fn published(&self) -> BoxFuture<'_, Result<u64, StoreError>> {
        Box::pin(async move { Ok(self.ok(&Request::Published).await?.as_u64().unwrap_or(0)) })
    }

    fn join(&self) -> BoxFuture<'_, Result<Joined, StoreError>> {
        Box::pin(async move {
            let (_, lines, w) = self.call(&Request::Follow).await?;
            let stored = self.ok(&Request::Load).await?;
            let stored = stored
                .as_array()
                .map(|pairs| {
                    pairs
                        .iter()
                        .filter_map(|p| Some((p.get(0)?.as_str()?.to_owned(), p.get(1)?.as_str()?.to_owned())))
                        .collect()
                })
                .unwrap_or_default();
            // The write half stays with the feed: dropping it would close the connection.
            let feed: Feed = Box::pin(futures_util::stream::unfold((lines, w), |(mut lines, w)| async move {
                let line = lines.next_line().await.ok()??;
                let v: Value = serde_json::from_str(&line).ok()?;
                let msg = v.get("msg")?.as_str()?.as_bytes().to_vec();
                Some((msg, (lines, w)))
            }));
            Ok((stored, feed))
        })
    }

    fn lease(
        &self,
        op: &'static str,
        now_ms: u64,
        retain: Duration,
        args: Vec<String>,
    ) -> BoxFuture<'_, Result<LeaseReply, StoreError>> {
        let retain_ms = proxy::state::clock::ms(retain);
        Box::pin(async move {
            let v = self.ok(&Request::Lease { name: op.to_owned(), now: now_ms, retain_ms, args }).await?;
            Ok(reply(&v))
        })
    }

    fn tokens(
        &self,
        op: &'static str,
        now_ms: u64,
        connection: &str,
        args: Vec<String>,
    ) -> BoxFuture<'_, Result<LeaseReply, StoreError>> {
        let req = Request::Tokens { name: op.to_owned(), now: now_ms, connection: connection.to_owned(), args };
        Box::pin(async move { Ok(reply(&self.ok(&req).await?)) })
    }
}

/// A script's reply: words as strings, absent values as `None`.
fn reply(v: &Value) -> LeaseReply {
    v.as_array().map(|a| a.iter().map(|x| x.as_str().map(str::to_owned)).collect()).unwrap_or_default()
}
