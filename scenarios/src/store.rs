//! The simulation's shared-state store: a host that keeps what replicas share (a hash of the
//! latest state per field, a channel every change is published on, the exclusive leases and the
//! OAuth accounts' tokens) and answers the same operations as Redis does for Ferroute, over any
//! byte stream (simulated sockets in the simulation, loopback TCP in the contract suites that
//! hold it to Redis). Leases and tokens are Ferroute's own Redis scripts, run by an embedded Lua
//! ([`crate::store_lua`]), not a port of them.
//!
//! The protocol is one JSON object per line. A request names its `op`: `apply` (`ops`: `set`,
//! `delete`, `publish`), `fields`, `published` (how many messages ever were), `load`, `lease`
//! (`name`, `now`, `args`: an operation of `lease_redis.lua`), `tokens` (`name`, `now`,
//! `connection`, `args`: one of `oauth_redis.lua`), or `follow`, after which the connection
//! carries every published message as `{"msg": …}`. Replies are `{"ok": …}` or `{"err": "…"}`.
//! Ended leases are kept (Redis lets them lapse after a day of real time).

use crate::net::Listener;
use crate::store_lua::Scripts;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// One write of an `apply`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Write {
    /// Sets a field.
    Set {
        /// The field.
        field: String,
        /// Its value.
        value: String,
        /// When it stops mattering (Unix ms), if it does.
        #[serde(default)]
        expires_ms: Option<u64>,
    },
    /// Removes fields.
    Delete {
        /// The fields.
        fields: Vec<String>,
    },
    /// Publishes a message.
    Publish {
        /// The message.
        message: String,
    },
    /// Removes the fields whose end is at or before `now_ms` (Redis: `prune_redis.lua`).
    Prune {
        /// Now (Unix ms).
        now_ms: u64,
    },
}

/// Most expired fields one prune removes (the gateway's Redis store uses the same batch).
const PRUNE_BATCH: usize = 2_000;

/// A request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Applies writes in order.
    Apply {
        /// The writes.
        ops: Vec<Write>,
    },
    /// The fields of the hash.
    Fields,
    /// How many messages were ever published.
    Published,
    /// The whole hash, as `[field, value]` pairs.
    Load,
    /// Every message published from now on, on this connection.
    Follow,
    /// One lease operation.
    Lease {
        /// `acquire`, `lease`, `renew`, `release`, `invalidate` or `active`.
        name: String,
        /// Unix ms.
        now: u64,
        /// How long an ended lease stays readable (ms), as the gateway asks.
        retain_ms: u64,
        /// The operation's arguments.
        args: Vec<String>,
    },
    /// One OAuth token operation.
    Tokens {
        /// `read`, `seed`, `claim`, `publish`, `release` or `refuse`.
        name: String,
        /// Unix ms.
        now: u64,
        /// The connection.
        connection: String,
        /// The operation's arguments.
        args: Vec<String>,
    },
}

struct Inner {
    published: u64,
    followers: Vec<mpsc::UnboundedSender<String>>,
    /// Ferroute's lease, token and pruning scripts, over the keyspace that also holds the shared
    /// state (`sim:state`, with deadlines in `sim:expiry`).
    scripts: Scripts,
}

/// The store's contents, shared by every connection to it.
pub struct StoreHost {
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for StoreHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreHost").finish_non_exhaustive()
    }
}

impl StoreHost {
    /// An empty store.
    pub fn new() -> Arc<StoreHost> {
        // The scripts are compiled into the binary; a failure to load them is a build mistake.
        let scripts = Scripts::new().unwrap_or_else(|e| panic!("Ferroute's Redis scripts do not load: {e}"));
        let inner = Inner { published: 0, followers: Vec::new(), scripts };
        Arc::new(StoreHost { inner: Mutex::new(inner) })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The stored fields (for checks).
    pub fn fields(&self) -> Vec<String> {
        self.lock().scripts.state().into_iter().map(|(f, _)| f).collect()
    }

    /// Answers one request (not `follow`).
    pub fn handle(&self, req: Request) -> Value {
        let mut s = self.lock();
        match req {
            Request::Apply { ops } => {
                for op in ops {
                    let done = match op {
                        Write::Set { field, value, expires_ms } => s.scripts.set_field(&field, &value, expires_ms),
                        // As the gateway's Redis store runs it: batch after batch while one is full.
                        Write::Prune { now_ms } => loop {
                            match s.scripts.prune(now_ms, PRUNE_BATCH) {
                                Ok(gone) if gone as usize == PRUNE_BATCH => continue,
                                done => break done.map(|_| ()),
                            }
                        },
                        Write::Delete { fields } if fields.is_empty() => Ok(()),
                        Write::Delete { fields } => s.scripts.delete_fields(&fields),
                        Write::Publish { message } => {
                            s.published += 1;
                            s.followers.retain(|f| f.send(message.clone()).is_ok());
                            Ok(())
                        }
                    };
                    if let Err(e) = done {
                        return json!({ "err": e });
                    }
                }
                json!({"ok": null})
            }
            Request::Fields => json!({"ok": s.scripts.state().into_iter().map(|(f, _)| f).collect::<Vec<_>>()}),
            Request::Published => json!({"ok": s.published}),
            Request::Load => json!({"ok": s.scripts.state().into_iter().map(|(k, v)| [k, v]).collect::<Vec<_>>()}),
            Request::Lease { name, now, retain_ms, args } => match s.scripts.lease(&name, now, retain_ms, &args) {
                Ok(reply) => json!({ "ok": reply }),
                Err(e) => json!({ "err": e }),
            },
            Request::Tokens { name, now, connection, args } => match s.scripts.tokens(&name, now, &connection, &args) {
                Ok(reply) => json!({ "ok": reply }),
                Err(e) => json!({ "err": e }),
            },
            Request::Follow => json!({"err": "follow needs its own connection"}),
        }
    }
}

/// Serves `store` on `listener` until the task is dropped.
pub async fn serve_store<L: Listener>(mut listener: L, store: Arc<StoreHost>) {
    loop {
        let Ok((io, _peer)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        tokio::spawn(connection(io, Arc::clone(&store)));
    }
}

async fn connection<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(io: S, store: Arc<StoreHost>) {
    let (r, mut w) = tokio::io::split(io);
    let mut lines = BufReader::new(r).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let reply = match serde_json::from_str::<Request>(&line) {
            Ok(Request::Follow) => {
                let (tx, mut rx) = mpsc::unbounded_channel();
                store.lock().followers.push(tx);
                if send(&mut w, &json!({"ok": null})).await.is_err() {
                    return;
                }
                while let Some(m) = rx.recv().await {
                    if send(&mut w, &json!({ "msg": m })).await.is_err() {
                        return;
                    }
                }
                return;
            }
            Ok(req) => store.handle(req),
            Err(e) => json!({"err": format!("not a store request: {e}")}),
        };
        if send(&mut w, &reply).await.is_err() {
            return;
        }
    }
}

async fn send<W: AsyncWrite + Unpin>(w: &mut W, v: &Value) -> std::io::Result<()> {
    let mut line = v.to_string();
    line.push('\n');
    w.write_all(line.as_bytes()).await?;
    w.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_apply_in_order_and_leases_follow_the_script() {
        let s = StoreHost::new();
        let apply = |ops| s.handle(Request::Apply { ops });
        apply(vec![
            Write::Set { field: "a".into(), value: "1".into(), expires_ms: None },
            Write::Set { field: "b".into(), value: "2".into(), expires_ms: None },
            Write::Delete { fields: vec!["a".into()] },
        ]);
        assert_eq!(s.handle(Request::Load), json!({"ok": [["b", "2"]]}));
        // prune_redis.lua itself removes what has ended, and keeps a field rewritten without an end.
        apply(vec![
            Write::Set { field: "l1".into(), value: "x".into(), expires_ms: Some(500) },
            Write::Set { field: "l2".into(), value: "y".into(), expires_ms: Some(900) },
            Write::Set { field: "b".into(), value: "3".into(), expires_ms: Some(100) },
            Write::Set { field: "b".into(), value: "4".into(), expires_ms: None },
            Write::Prune { now_ms: 600 },
        ]);
        assert_eq!(s.handle(Request::Fields), json!({"ok": ["b", "l2"]}));
        let lease = |name: &str, now: u64, args: &[&str]| {
            let args = args.iter().map(|a| (*a).to_owned()).collect();
            s.handle(Request::Lease { name: name.into(), now, retain_ms: 10_000, args })
        };
        let a = lease("acquire", 1_000, &["o1", "team", "m", "5000", "c0", "c1"]);
        assert_eq!(a, json!({"ok": ["lease", "1", "team", "c0", "m", "ACTIVE", "1000", "1000", "6000"]}));
        let b = lease("acquire", 2_000, &["o2", "team", "m", "5000", "c0"]);
        assert_eq!(b, json!({"ok": ["full", "6000", "1"]}));
        let c = lease("acquire", 6_000, &["o2", "team", "m", "5000", "c0"]);
        assert_eq!(c["ok"][3], "c0", "o1's lease lapsed at 6 000: {c}");
        assert_eq!(lease("lease", 6_000, &["o1", "1"])["ok"][5], "EXPIRED");
        // The ended lease stays readable for `retain_ms` after it ended, and no longer.
        assert_eq!(lease("lease", 15_999, &["o1", "1"])["ok"][5], "EXPIRED");
        assert_eq!(lease("lease", 16_000, &["o1", "1"]), json!({"ok": ["none"]}));
        // o2's lease, which lapsed at 11 000 unread, is reclaimed on this read and kept from now.
        assert_eq!(lease("lease", 16_000, &["o2", "1"])["ok"][5], "EXPIRED");
        assert_eq!(lease("lease", 25_999, &["o2", "1"])["ok"][5], "EXPIRED");
        assert_eq!(lease("lease", 26_000, &["o2", "1"]), json!({"ok": ["none"]}));
        assert_eq!(lease("nope", 0, &[]), json!({"err": "unknown lease operation nope"}));
    }
}
