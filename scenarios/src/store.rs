//! The simulation's shared-state store: a host that keeps what replicas share (a hash of the
//! latest state per field, a channel every change is published on, and the exclusive leases)
//! and answers the same operations as Redis does for Ferroute, over any byte stream (simulated
//! sockets in the simulation, loopback TCP in the contract suite that holds it to Redis).
//!
//! The protocol is one JSON object per line. A request names its `op`: `apply` (`ops`: `set`,
//! `delete`, `publish`), `fields`, `published` (how many messages ever were), `load`, `lease` (`name`, `now`, `args`: the operations and
//! replies of Ferroute's `lease_redis.lua`), `tokens` (`name`, `now`, `connection`, `args`:
//! those of `oauth_redis.lua`, in [`crate::store_tokens`]), or `follow`, after which the connection carries
//! every published message as `{"msg": …}`. Replies are `{"ok": …}` or `{"err": "…"}`.
//! Ended leases are kept (Redis lets them lapse after a day of real time).

use crate::net::Listener;
use crate::store_tokens::TokenTable;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
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
}

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

#[derive(Debug, Clone)]
struct Record {
    key: String,
    conn: String,
    model: String,
    state: &'static str,
    acq: u64,
    ren: u64,
    exp: u64,
}

#[derive(Default)]
struct Inner {
    hash: BTreeMap<String, String>,
    published: u64,
    followers: Vec<mpsc::UnboundedSender<String>>,
    records: BTreeMap<(String, u64), Record>,
    owner_ptr: BTreeMap<String, u64>,
    conn_ptr: BTreeMap<String, (String, u64)>,
    generations: BTreeMap<String, u64>,
    active: BTreeSet<(String, u64)>,
    tokens: TokenTable,
}

/// The store's contents, shared by every connection to it.
#[derive(Default)]
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
        Arc::new(StoreHost::default())
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The stored fields (for checks).
    pub fn fields(&self) -> Vec<String> {
        self.lock().hash.keys().cloned().collect()
    }

    /// Answers one request (not `follow`).
    pub fn handle(&self, req: Request) -> Value {
        let mut s = self.lock();
        match req {
            Request::Apply { ops } => {
                for op in ops {
                    match op {
                        Write::Set { field, value } => {
                            s.hash.insert(field, value);
                        }
                        Write::Delete { fields } => {
                            for f in fields {
                                s.hash.remove(&f);
                            }
                        }
                        Write::Publish { message } => {
                            s.published += 1;
                            s.followers.retain(|f| f.send(message.clone()).is_ok());
                        }
                    }
                }
                json!({"ok": null})
            }
            Request::Fields => json!({"ok": s.hash.keys().collect::<Vec<_>>()}),
            Request::Published => json!({"ok": s.published}),
            Request::Load => json!({"ok": s.hash.iter().map(|(k, v)| [k, v]).collect::<Vec<_>>()}),
            Request::Lease { name, now, args } => match s.lease(&name, now, &args) {
                Ok(reply) => json!({ "ok": reply }),
                Err(e) => json!({ "err": e }),
            },
            Request::Tokens { name, now, connection, args } => match s.tokens.run(&name, now, &connection, &args) {
                Ok(reply) => json!({ "ok": reply }),
                Err(e) => json!({ "err": e }),
            },
            Request::Follow => json!({"err": "follow needs its own connection"}),
        }
    }
}

fn words(w: &[&str]) -> Vec<Option<String>> {
    w.iter().map(|x| Some((*x).to_owned())).collect()
}

impl Inner {
    /// Ends an active lease as `state`, freeing its owner and its connection.
    fn finish(&mut self, id: &(String, u64), state: &'static str, now: u64) {
        let Some(r) = self.records.get_mut(id) else { return };
        r.state = state;
        if state != "EXPIRED" {
            r.ren = now;
        }
        let conn = r.conn.clone();
        if self.owner_ptr.get(&id.0) == Some(&id.1) {
            self.owner_ptr.remove(&id.0);
        }
        if self.conn_ptr.get(&conn) == Some(id) {
            self.conn_ptr.remove(&conn);
        }
        self.active.remove(id);
    }

    /// The state of a lease now (`None` when there is none); a lapsed one is reclaimed first.
    fn state(&mut self, id: &(String, u64), now: u64) -> Option<&'static str> {
        let r = self.records.get(id)?;
        if r.state == "ACTIVE" && r.exp <= now {
            self.finish(id, "EXPIRED", now);
            return Some("EXPIRED");
        }
        Some(r.state)
    }

    fn pack(&self, id: &(String, u64)) -> Vec<Option<String>> {
        let Some(r) = self.records.get(id) else { return words(&["none"]) };
        let mut out = words(&["lease"]);
        for v in [
            id.1.to_string(),
            r.key.clone(),
            r.conn.clone(),
            r.model.clone(),
            r.state.to_owned(),
            r.acq.to_string(),
            r.ren.to_string(),
            r.exp.to_string(),
        ] {
            out.push(Some(v));
        }
        out
    }

    fn lease(&mut self, op: &str, now: u64, args: &[String]) -> Result<Vec<Option<String>>, String> {
        let arg = |i: usize| args.get(i).cloned().ok_or_else(|| format!("{op}: argument {i} missing"));
        let num = |i: usize| arg(i).and_then(|a| a.parse::<u64>().map_err(|e| format!("{op}: argument {i}: {e}")));
        match op {
            "acquire" => {
                let (o, key, model, ttl) = (arg(0)?, arg(1)?, arg(2)?, num(3)?);
                let eligible = &args[4.min(args.len())..];
                if let Some(&g) = self.owner_ptr.get(&o) {
                    let id = (o.clone(), g);
                    if self.state(&id, now) == Some("ACTIVE") {
                        let r = &self.records[&id];
                        return Ok(if r.key == key && eligible.contains(&r.conn) {
                            self.pack(&id)
                        } else {
                            words(&["busy"])
                        });
                    }
                    if self.owner_ptr.get(&o) == Some(&g) {
                        self.owner_ptr.remove(&o);
                    }
                }
                let mut soonest: Option<u64> = None;
                for c in eligible {
                    let holder = self.conn_ptr.get(c).cloned();
                    let mut held = false;
                    if let Some(h) = holder {
                        if self.state(&h, now) == Some("ACTIVE") {
                            held = true;
                            let exp = self.records[&h].exp;
                            soonest = Some(soonest.map_or(exp, |s| s.min(exp)));
                        } else if self.conn_ptr.get(c) == Some(&h) {
                            self.conn_ptr.remove(c);
                        }
                    }
                    if !held {
                        let g = self.generations.entry(o.clone()).or_insert(0);
                        *g += 1;
                        let id = (o.clone(), *g);
                        let r = Record {
                            key,
                            conn: c.clone(),
                            model,
                            state: "ACTIVE",
                            acq: now,
                            ren: now,
                            exp: now.saturating_add(ttl),
                        };
                        self.records.insert(id.clone(), r);
                        self.owner_ptr.insert(o, id.1);
                        self.conn_ptr.insert(c.clone(), id.clone());
                        self.active.insert(id.clone());
                        return Ok(self.pack(&id));
                    }
                }
                Ok(vec![
                    Some("full".to_owned()),
                    Some(soonest.map_or(String::new(), |s| s.to_string())),
                    Some(eligible.len().to_string()),
                ])
            }
            "invalidate" => {
                let id = (arg(0)?, num(1)?);
                if self.state(&id, now) == Some("ACTIVE") {
                    self.finish(&id, "INVALIDATED", now);
                    return Ok(words(&["ended"]));
                }
                Ok(words(&["kept"]))
            }
            "lease" | "renew" | "release" => {
                let id = (arg(0)?, num(1)?);
                let Some(state) = self.state(&id, now) else { return Ok(words(&["none"])) };
                if state == "ACTIVE" {
                    match op {
                        "renew" => {
                            let ttl = num(2)?;
                            if let Some(r) = self.records.get_mut(&id) {
                                r.ren = now;
                                r.exp = now.saturating_add(ttl);
                            }
                        }
                        "release" => self.finish(&id, "RELEASED", now),
                        _ => {}
                    }
                }
                Ok(self.pack(&id))
            }
            "active" => {
                let mut out = words(&["active"]);
                let members: Vec<(String, u64)> = self.active.iter().cloned().collect();
                for id in members {
                    if self.state(&id, now) == Some("ACTIVE") {
                        let r = &self.records[&id];
                        out.extend([
                            Some(id.0.clone()),
                            Some(id.1.to_string()),
                            Some(r.key.clone()),
                            Some(r.conn.clone()),
                        ]);
                    } else {
                        self.active.remove(&id);
                    }
                }
                Ok(out)
            }
            other => Err(format!("unknown lease operation {other}")),
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
            Write::Set { field: "a".into(), value: "1".into() },
            Write::Set { field: "b".into(), value: "2".into() },
            Write::Delete { fields: vec!["a".into()] },
        ]);
        assert_eq!(s.handle(Request::Load), json!({"ok": [["b", "2"]]}));
        let lease = |name: &str, now: u64, args: &[&str]| {
            s.handle(Request::Lease { name: name.into(), now, args: args.iter().map(|a| (*a).to_owned()).collect() })
        };
        let a = lease("acquire", 1_000, &["o1", "team", "m", "5000", "c0", "c1"]);
        assert_eq!(a, json!({"ok": ["lease", "1", "team", "c0", "m", "ACTIVE", "1000", "1000", "6000"]}));
        let b = lease("acquire", 2_000, &["o2", "team", "m", "5000", "c0"]);
        assert_eq!(b, json!({"ok": ["full", "6000", "1"]}));
        let c = lease("acquire", 6_000, &["o2", "team", "m", "5000", "c0"]);
        assert_eq!(c["ok"][3], "c0", "o1's lease lapsed at 6 000: {c}");
        assert_eq!(lease("lease", 6_000, &["o1", "1"])["ok"][5], "EXPIRED");
        assert_eq!(lease("nope", 0, &[]), json!({"err": "unknown lease operation nope"}));
    }
}
