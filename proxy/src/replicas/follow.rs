//! The follower: how a replica joins the shared state, publishes its changes and applies the
//! others'.
//!
//! Each replica keeps deciding from its own core, so the request path never waits on Redis.
//! What a replica's own outcomes change leaves its core as [`SharedChange`]s; a publisher task
//! writes each to the hash `{prefix}:state` (the latest change per breaker, connection and
//! lock, read by replicas that start later) and publishes it on `{prefix}:changes`. A
//! subscriber task hands the other replicas' changes to the core, which merges them (later
//! deadlines win, a terminal state is never overwritten). A replica that starts, or finds Redis
//! again after losing it, first loads the hash and then publishes its own state in full, so
//! that what it learned alone reaches the others. While Redis is unreachable requests are
//! served on local state; the log says so once, and `/health` and `/metrics` show it.

use super::link::{Envelope, ReplicaStats, Replicas};
use super::shared_store::{RedisStore, SharedStore, StoreError, StoreOp};
use super::shared_tokens::SharedTokens;
use crate::config::StateConfig;
use crate::ops::reload::Serving;
use crate::sessions::lease_shared::SharedLeases;
use ferroute_core::engine::SharedChange;
use futures_util::StreamExt;
use hyper_util::client::legacy::connect::Connect;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::mpsc;

/// Outgoing changes waiting for the publisher; beyond this many, new ones are dropped (and
/// counted) rather than block a request.
const QUEUE: usize = 10_000;
/// Longest wait between two attempts to reach the store.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// How often a follower checks that it has received everything the store published.
const LIVENESS: Duration = Duration::from_secs(1);
/// Longest wait for the store's answer to that check.
const LIVENESS_TIMEOUT: Duration = Duration::from_secs(2);

/// Joins the shared state named by `cfg` (its `url` set) in Redis: see [`start_with`]. Fails
/// only on a URL that does not parse; an unreachable server is retried in the background.
pub fn start<C>(serving: Arc<Serving<C>>, cfg: &StateConfig) -> anyhow::Result<Arc<Replicas>>
where
    C: Connect + Clone + Send + Sync + 'static,
{
    let url = cfg.url.as_deref().ok_or_else(|| anyhow::anyhow!("state.url is required with backend = \"redis\""))?;
    let client = redis::Client::open(url).map_err(|e| anyhow::anyhow!("state.url is not a Redis URL: {e}"))?;
    let name = cfg.replica.clone().unwrap_or_else(|| format!("replica-{:016x}", rand_name()));
    tracing::info!(replica = %name, prefix = %cfg.prefix, "sharing resilience state through redis");
    Ok(start_with(serving, Arc::new(RedisStore::new(client, &cfg.prefix)), name))
}

/// Joins the shared state in `store` as replica `name`: turns on sharing in the core, then
/// starts the publisher and the subscriber on the current tokio runtime.
pub fn start_with<C>(serving: Arc<Serving<C>>, store: Arc<dyn SharedStore>, name: String) -> Arc<Replicas>
where
    C: Connect + Clone + Send + Sync + 'static,
{
    let stats = Arc::new(ReplicaStats::default());
    let (tx, rx) = mpsc::channel(QUEUE);
    let leases = SharedLeases::new(Arc::clone(&store));
    let tokens = SharedTokens::new(Arc::clone(&store));
    let replicas = Arc::new(Replicas { name: name.clone(), stats: Arc::clone(&stats), tx, leases, tokens });
    let gw = serving.current();
    gw.with_engine(|e| e.set_sharing(true));
    gw.share_with(Arc::clone(&replicas));
    tokio::spawn(publisher(Arc::clone(&store), name, Arc::clone(&stats), rx));
    tokio::spawn(subscriber(store, serving, Arc::clone(&replicas)));
    tokio::spawn(async move {
        if let Err(e) = crate::sessions::leases::invalidate_stale_shared(&gw).await {
            tracing::error!(error = %e, "could not check the shared leases against the config");
        }
    });
    replicas
}

/// A name unlikely to repeat: the process id and the start time's nanoseconds.
fn rand_name() -> u64 {
    #[allow(clippy::disallowed_methods)] // a name, not a decision: any instant will do
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    (nanos as u64) ^ (u64::from(std::process::id()) << 40)
}

/// Writes and publishes queued changes, in order, a batch at a time.
async fn publisher(
    store: Arc<dyn SharedStore>,
    name: String,
    stats: Arc<ReplicaStats>,
    mut rx: mpsc::Receiver<(u64, SharedChange)>,
) {
    let mut batch = Vec::new();
    while rx.recv_many(&mut batch, 256).await > 0 {
        match write(store.as_ref(), &name, &batch).await {
            Ok(()) => {
                stats.published.fetch_add(batch.len() as u64, Ordering::Relaxed);
            }
            Err(e) => {
                stats.errors.fetch_add(1, Ordering::Relaxed);
                stats.dropped.fetch_add(batch.len() as u64, Ordering::Relaxed);
                tracing::debug!(error = %e, dropped = batch.len(), "could not publish resilience state");
            }
        }
        batch.clear();
    }
}

/// One batch as store writes: each change's latest state under its field (a dropped pin or a
/// clear removes fields; a lockout's or a pin's field carries its end), and the change
/// published; then the fields whose end has passed are pruned, so that the stored state tracks
/// live state rather than every lock and pin there ever was.
async fn write(store: &dyn SharedStore, name: &str, batch: &[(u64, SharedChange)]) -> Result<(), StoreError> {
    let mut ops = Vec::with_capacity(batch.len() * 2 + 1);
    let now_ms = batch.iter().map(|(wall_ms, _)| *wall_ms).max().unwrap_or(0);
    for (wall_ms, change) in batch {
        let envelope = Envelope { replica: name.to_owned(), wall_ms: *wall_ms, change: change.clone() };
        let json = serde_json::to_string(&envelope).unwrap_or_default();
        if let SharedChange::LockoutsCleared { provider, connection, model } = change {
            let fields = store.fields().await?;
            let gone: Vec<String> = fields
                .into_iter()
                .filter(|f| cleared(f, provider.as_deref(), connection.as_deref(), model.as_deref()))
                .collect();
            ops.push(StoreOp::Delete { fields: gone });
        } else if let Some(field) = change.store_key() {
            if matches!(change, SharedChange::PinDropped { .. }) {
                ops.push(StoreOp::Delete { fields: vec![field] });
            } else {
                ops.push(StoreOp::Set { field, value: json.clone(), expires_ms: expires(*wall_ms, change) });
            }
        }
        ops.push(StoreOp::Publish { message: json });
    }
    ops.push(StoreOp::Prune { now_ms });
    store.apply(ops).await
}

/// When a stored change stops mattering: a lockout's or a pin's end. Breakers and connections
/// are kept (one field each, and their escalation outlives any deadline).
fn expires(wall_ms: u64, change: &SharedChange) -> Option<u64> {
    match change {
        SharedChange::Lockout { remaining_ms, .. } | SharedChange::Pin { remaining_ms, .. } => {
            Some(wall_ms.saturating_add(*remaining_ms))
        }
        _ => None,
    }
}

/// Whether the stored lock `field` (`lockout:provider:connection:model`) is one a clear removes.
fn cleared(field: &str, provider: Option<&str>, connection: Option<&str>, model: Option<&str>) -> bool {
    let Some(rest) = field.strip_prefix("lockout:") else { return false };
    let mut parts = rest.splitn(3, ':');
    let (Some(p), Some(c), Some(m)) = (parts.next(), parts.next(), parts.next()) else { return false };
    provider.is_none_or(|x| x == p)
        && connection.is_none_or(|x| x == c)
        && model.is_none_or(|x| x.trim().eq_ignore_ascii_case(m))
}

/// Follows the other replicas' changes, reconnecting with backoff; each (re)connection starts
/// with a resync.
async fn subscriber<C>(store: Arc<dyn SharedStore>, serving: Arc<Serving<C>>, me: Arc<Replicas>)
where
    C: Connect + Clone + Send + Sync + 'static,
{
    let mut backoff = Duration::from_millis(100);
    let mut lost_since_warned = false;
    loop {
        match follow(store.as_ref(), &serving, &me, &mut backoff, &mut lost_since_warned).await {
            Ok(()) => tracing::warn!("lost the shared state store; serving on local state and reconnecting"),
            Err(e) => {
                me.stats.errors.fetch_add(1, Ordering::Relaxed);
                if !lost_since_warned {
                    tracing::warn!(error = %e, "shared state store unreachable; serving on local state and reconnecting");
                }
            }
        }
        lost_since_warned = true;
        me.stats.reachable.store(false, Ordering::Relaxed);
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

async fn follow<C>(
    store: &dyn SharedStore,
    serving: &Arc<Serving<C>>,
    me: &Replicas,
    backoff: &mut Duration,
    lost_since_warned: &mut bool,
) -> Result<(), StoreError>
where
    C: Connect + Clone + Send + Sync + 'static,
{
    // The store follows the channel before it reads the state, so nothing published during the
    // load is missed (a change seen twice merges to the same state).
    let (stored, mut messages) = store.join().await?;
    let gw = serving.current();
    let wall = gw.clock.wall_now_ms();
    let mut changes = Vec::with_capacity(stored.len());
    for (field, json) in &stored {
        match serde_json::from_str::<Envelope>(json) {
            Ok(e) if e.replica == me.name => {}
            Ok(e) => changes.push(e.aged(wall)),
            Err(e) => {
                me.stats.errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%field, error = %e, "skipped an unreadable entry of the shared state");
            }
        }
    }
    let loaded = changes.len();
    gw.apply_shared(changes);
    me.stats.applied.fetch_add(loaded as u64, Ordering::Relaxed);
    let mine = gw.with_engine(|e| e.shared_state(gw.clock.now()));
    me.publish(mine, wall);
    crate::sessions::refresh_shared::seed(&gw, me.tokens()).await;
    me.stats.reachable.store(true, Ordering::Relaxed);
    me.stats.joined.store(true, Ordering::Relaxed);
    *backoff = Duration::from_millis(100);
    if *lost_since_warned {
        tracing::info!(loaded, "shared state store reachable again; resynchronised");
    } else {
        tracing::info!(loaded, "joined the shared resilience state");
    }
    *lost_since_warned = false;
    // A link can lose messages without breaking (a partition, a dropped connection nobody
    // reset): every LIVENESS the store says how many messages it has published, and a follower
    // that has not received as many as it said one check earlier lost some, and resyncs. A
    // store that does not answer in time is treated as lost too.
    let mut received = store.published().await?;
    let mut said: Option<u64> = None;
    let mut check = tokio::time::interval(LIVENESS);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    check.tick().await;
    loop {
        // Biased: polled in order, never at random, so a simulated run replays exactly.
        tokio::select! {
            biased;
            msg = messages.next() => {
                let Some(msg) = msg else { return Ok(()) };
                received += 1;
                let Ok(envelope) = serde_json::from_slice::<Envelope>(&msg) else {
                    me.stats.errors.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                if envelope.replica == me.name {
                    continue;
                }
                let gw = serving.current();
                let change = envelope.aged(gw.clock.wall_now_ms());
                gw.apply_shared([change]);
                me.stats.applied.fetch_add(1, Ordering::Relaxed);
            }
            _ = check.tick() => {
                let count = match tokio::time::timeout(LIVENESS_TIMEOUT, store.published()).await {
                    Ok(r) => r?,
                    Err(_) => return Err(StoreError("the store did not answer the liveness check".to_owned())),
                };
                if let Some(due) = said
                    && received < due
                {
                    return Err(StoreError(format!("{} published changes never arrived", due - received)));
                }
                said = Some(count);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clear_removes_the_stored_locks_it_names() {
        let f = "lockout:openai:k1:gpt-4o";
        assert!(cleared(f, None, None, None), "every lock");
        assert!(cleared(f, Some("openai"), Some("k1"), Some(" GPT-4o")));
        assert!(cleared(f, Some("openai"), None, Some("gpt-4o")), "the model on every connection");
        assert!(cleared(f, None, Some("k1"), None), "every lock of the connection");
        assert!(!cleared(f, Some("openai"), Some("k2"), Some("gpt-4o")));
        assert!(!cleared(f, Some("anthropic"), None, None));
        assert!(!cleared("breaker:openai", None, None, None), "only locks");
    }

    #[test]
    fn an_envelope_ages_by_the_time_since_it_was_taken() {
        let change =
            SharedChange::BreakerOpened { provider: "p".into(), open_remaining_ms: 30_000, open_cycle_count: 0 };
        let e = Envelope { replica: "a".into(), wall_ms: 1_000, change };
        let aged = e.clone().aged(4_000);
        assert_eq!(
            aged,
            SharedChange::BreakerOpened { provider: "p".into(), open_remaining_ms: 27_000, open_cycle_count: 0 }
        );
        assert_eq!(e.clone().aged(500), e.change, "a clock behind the sender's ages nothing");
    }
}
