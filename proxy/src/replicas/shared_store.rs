//! The store replicas share state through, behind one interface: Redis in production
//! ([`RedisStore`]); the simulation's store host offers the same interface over simulated
//! sockets (`sim::store`), and `sim/tests/store_contract.rs` runs one suite against both, so the
//! two cannot drift.
//!
//! The store holds a hash of the latest state per breaker, connection, lock and pin (read by
//! replicas that join later), a channel on which every change is published, the exclusive
//! leases and the OAuth accounts' tokens, whose operations run atomically in the store
//! (`lease_redis.lua` and `oauth_redis.lua` in Redis).

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use redis::AsyncCommands;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::time::Duration;

/// A store operation that did not complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreError(pub String);

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StoreError {}

impl From<redis::RedisError> for StoreError {
    fn from(e: redis::RedisError) -> Self {
        StoreError(format!("redis: {e}"))
    }
}

/// One write of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreOp {
    /// Sets a field of the stored state.
    Set {
        /// The field (a change's [`store_key`](ferroute_core::engine::SharedChange::store_key)).
        field: String,
        /// Its value.
        value: String,
        /// When it stops mattering (Unix ms: a lockout's or a pin's end), if it does.
        expires_ms: Option<u64>,
    },
    /// Removes fields of the stored state.
    Delete {
        /// The fields.
        fields: Vec<String>,
    },
    /// Publishes a message to every replica following the channel.
    Publish {
        /// The message.
        message: String,
    },
    /// Removes every field whose `expires_ms` is at or before `now_ms`, atomically.
    Prune {
        /// Now (Unix ms).
        now_ms: u64,
    },
}

/// Messages published from a [`SharedStore::join`] on.
pub type Feed = BoxStream<'static, Vec<u8>>;

/// What a [`SharedStore::join`] finds: the stored state as (field, value) pairs, and the feed.
pub type Joined = (Vec<(String, String)>, Feed);

/// A lease operation's reply: words and numbers as strings, absent values as `None` (see
/// `lease_redis.lua` for each operation's shape).
pub type LeaseReply = Vec<Option<String>>;

/// What replicas share through.
pub trait SharedStore: Send + Sync + 'static {
    /// Applies `ops` in order, in one round trip.
    fn apply(&self, ops: Vec<StoreOp>) -> BoxFuture<'_, Result<(), StoreError>>;
    /// The fields of the stored state.
    fn fields(&self) -> BoxFuture<'_, Result<Vec<String>, StoreError>>;
    /// How many messages were ever published. A follower that has received fewer than this
    /// count said a while ago lost some (a link that dropped them without breaking).
    fn published(&self) -> BoxFuture<'_, Result<u64, StoreError>>;
    /// Follows the channel, then reads the stored state: that state, and every message
    /// published from the moment of following (one published during the read may be in both).
    fn join(&self) -> BoxFuture<'_, Result<Joined, StoreError>>;
    /// Runs lease operation `op` at `now_ms` with its arguments, atomically; ended leases stay
    /// readable for `retain`.
    fn lease(
        &self,
        op: &'static str,
        now_ms: u64,
        retain: Duration,
        args: Vec<String>,
    ) -> BoxFuture<'_, Result<LeaseReply, StoreError>>;
    /// Runs OAuth token operation `op` on `connection` at `now_ms` with its arguments,
    /// atomically (see `oauth_redis.lua` for each operation and its reply).
    fn tokens(
        &self,
        op: &'static str,
        now_ms: u64,
        connection: &str,
        args: Vec<String>,
    ) -> BoxFuture<'_, Result<LeaseReply, StoreError>>;
}

/// Shared state in Redis under a key prefix: the hash `<prefix>:state`, the channel
/// `<prefix>:changes`, and the lease keys of `lease_redis.lua`.
pub struct RedisStore {
    client: redis::Client,
    prefix: String,
    state: String,
    expiry: String,
    channel: String,
    counter: String,
    conn: tokio::sync::Mutex<Option<ConnectionManager>>,
    script: redis::Script,
    tokens: redis::Script,
    prune: redis::Script,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

/// Most expired fields one call of `prune_redis.lua` removes.
const PRUNE_BATCH: usize = 2_000;

/// Longest wait to connect to Redis, or for one of its answers.
const REDIS_TIMEOUT: Duration = Duration::from_secs(2);

impl RedisStore {
    /// The store under `prefix` on the server of `client` (nothing connects until first use).
    pub fn new(client: redis::Client, prefix: &str) -> Self {
        RedisStore {
            client,
            prefix: prefix.to_owned(),
            state: format!("{prefix}:state"),
            expiry: format!("{prefix}:expiry"),
            channel: format!("{prefix}:changes"),
            counter: format!("{prefix}:published"),
            conn: tokio::sync::Mutex::new(None),
            script: redis::Script::new(include_str!("lease_redis.lua")),
            tokens: redis::Script::new(include_str!("oauth_redis.lua")),
            prune: redis::Script::new(include_str!("prune_redis.lua")),
        }
    }

    /// One connection for every command (it reconnects by itself once made).
    async fn connection(&self) -> Result<ConnectionManager, StoreError> {
        let mut slot = self.conn.lock().await;
        if let Some(c) = slot.as_ref() {
            return Ok(c.clone());
        }
        let cfg = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(REDIS_TIMEOUT))
            .set_response_timeout(Some(REDIS_TIMEOUT))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(200));
        let c = self.client.get_connection_manager_with_config(cfg).await?;
        *slot = Some(c.clone());
        Ok(c)
    }
}

impl RedisStore {
    /// Runs `script` with ARGV `head` then `args` (both scripts take the operation, the prefix
    /// and the time first, then one more common argument).
    async fn invoke(
        &self,
        script: &redis::Script,
        head: [String; 4],
        args: Vec<String>,
    ) -> Result<LeaseReply, StoreError> {
        let mut conn = self.connection().await?;
        let mut inv = script.prepare_invoke();
        for a in head.iter().chain(&args) {
            inv.arg(a);
        }
        Ok(inv.invoke_async(&mut conn).await?)
    }
}

impl SharedStore for RedisStore {
    fn apply(&self, ops: Vec<StoreOp>) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let mut conn = self.connection().await?;
            let mut pipe = redis::pipe();
            let published = ops.iter().filter(|op| matches!(op, StoreOp::Publish { .. })).count();
            let mut prune = None;
            let writes = ops.iter().any(|op| match op {
                StoreOp::Prune { .. } => false,
                StoreOp::Delete { fields } => !fields.is_empty(),
                _ => true,
            });
            for op in ops {
                match op {
                    StoreOp::Set { field, value, expires_ms } => {
                        pipe.hset(&self.state, &field, value).ignore();
                        match expires_ms {
                            Some(at) => pipe.zadd(&self.expiry, field, at).ignore(),
                            None => pipe.zrem(&self.expiry, field).ignore(),
                        }
                    }
                    StoreOp::Delete { fields } if fields.is_empty() => continue,
                    StoreOp::Delete { fields } => {
                        pipe.hdel(&self.state, &fields).ignore();
                        pipe.zrem(&self.expiry, fields).ignore()
                    }
                    StoreOp::Publish { message } => pipe.publish(&self.channel, message).ignore(),
                    StoreOp::Prune { now_ms } => {
                        prune = Some(now_ms);
                        continue;
                    }
                };
            }
            if published > 0 {
                pipe.incr(&self.counter, published).ignore();
            }
            if writes {
                pipe.query_async::<()>(&mut conn).await?;
            }
            // A call removes at most PRUNE_BATCH fields, so that Redis is never held long.
            while let Some(now_ms) = prune {
                let mut inv = self.prune.prepare_invoke();
                inv.arg(&self.prefix).arg(now_ms).arg(PRUNE_BATCH);
                let gone: usize = inv.invoke_async(&mut conn).await?;
                prune = prune.filter(|_| gone == PRUNE_BATCH);
            }
            Ok(())
        })
    }

    fn published(&self) -> BoxFuture<'_, Result<u64, StoreError>> {
        Box::pin(async move {
            let mut conn = self.connection().await?;
            let n: Option<u64> = conn.get(&self.counter).await?;
            Ok(n.unwrap_or(0))
        })
    }

    fn fields(&self) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        Box::pin(async move {
            let mut conn = self.connection().await?;
            Ok(conn.hkeys(&self.state).await?)
        })
    }

    fn join(&self) -> BoxFuture<'_, Result<Joined, StoreError>> {
        Box::pin(async move {
            let mut pubsub = self.client.get_async_pubsub().await?;
            pubsub.subscribe(&self.channel).await?;
            let mut conn = self.client.get_multiplexed_async_connection().await?;
            let stored: Vec<(String, String)> = conn.hgetall(&self.state).await?;
            let feed: Feed = Box::pin(pubsub.into_on_message().map(|m| m.get_payload_bytes().to_vec()));
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
        let retain = crate::state::clock::ms(retain).to_string();
        Box::pin(self.invoke(&self.script, [op.to_owned(), self.prefix.clone(), now_ms.to_string(), retain], args))
    }

    fn tokens(
        &self,
        op: &'static str,
        now_ms: u64,
        connection: &str,
        args: Vec<String>,
    ) -> BoxFuture<'_, Result<LeaseReply, StoreError>> {
        let head = [op.to_owned(), self.prefix.clone(), now_ms.to_string(), connection.to_owned()];
        Box::pin(self.invoke(&self.tokens, head, args))
    }
}
