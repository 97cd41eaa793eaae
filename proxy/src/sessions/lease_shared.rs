//! Exclusive leases (M14) held in the store replicas share (`[state] backend = "redis"`).
//! Unlike the rest of the shared state, which each replica keeps in its own core and passes on,
//! the store is the leases' source of truth: every acquire, renew, release and invalidation is
//! one operation run atomically in the store (in Redis, one Lua script, `lease_redis.lua`), so
//! one owner and one connection hold at most one active lease across all replicas. When the
//! store does not answer within [`TIMEOUT`] an operation fails, and the caller answers 503
//! `LEASE_SERVICE_UNAVAILABLE` rather than risk a double grant.
//!
//! An ended lease stays readable (its state, for `status`) for [`RETAIN`]; SQLite keeps them.

use crate::replicas::shared_store::{LeaseReply, SharedStore, StoreError};
use crate::sessions::lease_store::{Acquired, ActiveLease, NoCapacity};
use ferroute_core::session::lease::{Lease, LeaseState};
use std::sync::Arc;
use std::time::Duration;

/// Longest wait for one lease operation, connecting included.
pub const TIMEOUT: Duration = Duration::from_secs(2);
/// How long an ended lease stays readable.
pub const RETAIN: Duration = Duration::from_secs(24 * 3600);

/// The leases of every replica sharing one store.
#[derive(Clone)]
pub struct SharedLeases {
    store: Arc<dyn SharedStore>,
}

impl std::fmt::Debug for SharedLeases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedLeases").finish_non_exhaustive()
    }
}

type Reply = LeaseReply;

impl SharedLeases {
    /// The leases kept in `store`.
    pub fn new(store: Arc<dyn SharedStore>) -> Self {
        SharedLeases { store }
    }

    async fn run(&self, op: &'static str, now_ms: u64, args: &[&str]) -> Result<Reply, StoreError> {
        let args = args.iter().map(|a| (*a).to_owned()).collect();
        match tokio::time::timeout(TIMEOUT, self.store.lease(op, now_ms, RETAIN, args)).await {
            Ok(r) => r,
            Err(_) => Err(StoreError(format!("the lease store did not answer within {} ms", TIMEOUT.as_millis()))),
        }
    }

    /// Acquires a lease for `owner_hash` on the first of `eligible` (in routing order) that no
    /// other owner holds; the owner's active lease when it already holds one it may keep.
    pub async fn acquire(
        &self,
        owner_hash: &str,
        key_id: &str,
        model: &str,
        eligible: &[String],
        ttl: Duration,
        now_ms: u64,
    ) -> Result<Acquired, StoreError> {
        let ttl = (ttl.as_millis() as u64).to_string();
        let mut args = vec![owner_hash, key_id, model, ttl.as_str()];
        args.extend(eligible.iter().map(String::as_str));
        let reply = self.run("acquire", now_ms, &args).await?;
        match word(&reply, 0) {
            "busy" => Ok(Acquired::OwnerBusy),
            "full" => Ok(Acquired::Full(NoCapacity {
                soonest_expiry_ms: word(&reply, 1).parse().ok(),
                eligible: word(&reply, 2).parse().unwrap_or(eligible.len()),
                free: 0,
            })),
            _ => lease(owner_hash, &reply)?.map(Acquired::Lease).ok_or_else(|| malformed(&reply)),
        }
    }

    /// The owner's lease of that generation (a lapsed one reclaimed first).
    pub async fn lease(&self, owner_hash: &str, generation: u64, now_ms: u64) -> Result<Option<Lease>, StoreError> {
        self.one("lease", owner_hash, generation, now_ms, None).await
    }

    /// Extends an active lease to `now + ttl`; an inactive one comes back unchanged.
    pub async fn renew(
        &self,
        owner_hash: &str,
        generation: u64,
        ttl: Duration,
        now_ms: u64,
    ) -> Result<Option<Lease>, StoreError> {
        self.one("renew", owner_hash, generation, now_ms, Some(ttl)).await
    }

    /// Releases an active lease.
    pub async fn release(&self, owner_hash: &str, generation: u64, now_ms: u64) -> Result<Option<Lease>, StoreError> {
        self.one("release", owner_hash, generation, now_ms, None).await
    }

    /// Ends an active lease as INVALIDATED; whether this call ended it (the store says so,
    /// atomically: another replica may have ended it first).
    pub async fn invalidate(&self, owner_hash: &str, generation: u64, now_ms: u64) -> Result<bool, StoreError> {
        let g = generation.to_string();
        let reply = self.run("invalidate", now_ms, &[owner_hash, g.as_str()]).await?;
        match word(&reply, 0) {
            "ended" => Ok(true),
            "kept" => Ok(false),
            _ => Err(malformed(&reply)),
        }
    }

    /// Every active lease (lapsed ones reclaimed first).
    pub async fn active(&self, now_ms: u64) -> Result<Vec<ActiveLease>, StoreError> {
        let reply = self.run("active", now_ms, &[]).await?;
        if word(&reply, 0) != "active" || reply.len() % 4 != 1 {
            return Err(malformed(&reply));
        }
        Ok(reply[1..]
            .chunks(4)
            .filter_map(|c| {
                Some(ActiveLease {
                    owner_hash: c[0].clone()?,
                    generation: c[1].as_deref()?.parse().ok()?,
                    key_id: c[2].clone()?,
                    connection: c[3].clone()?,
                })
            })
            .collect())
    }

    async fn one(
        &self,
        op: &'static str,
        owner_hash: &str,
        generation: u64,
        now_ms: u64,
        ttl: Option<Duration>,
    ) -> Result<Option<Lease>, StoreError> {
        let generation = generation.to_string();
        let ttl = ttl.map(|t| (t.as_millis() as u64).to_string());
        let mut args = vec![owner_hash, generation.as_str()];
        args.extend(ttl.as_deref());
        let reply = self.run(op, now_ms, &args).await?;
        if word(&reply, 0) == "none" {
            return Ok(None);
        }
        lease(owner_hash, &reply)
    }
}

fn word(reply: &Reply, i: usize) -> &str {
    reply.get(i).and_then(|w| w.as_deref()).unwrap_or("")
}

fn malformed(reply: &Reply) -> StoreError {
    StoreError(format!("unexpected reply from the lease script: {reply:?}"))
}

/// A `lease` reply: generation, key, connection, model, state, acquired, renewed, expires.
fn lease(owner_hash: &str, reply: &Reply) -> Result<Option<Lease>, StoreError> {
    if word(reply, 0) != "lease" {
        return Err(malformed(reply));
    }
    let num = |i: usize| word(reply, i).parse::<u64>().map_err(|_| malformed(reply));
    Ok(Some(Lease {
        owner_hash: owner_hash.to_owned(),
        generation: num(1)?,
        key_id: word(reply, 2).to_owned(),
        connection: word(reply, 3).to_owned(),
        model: word(reply, 4).to_owned(),
        state: LeaseState::parse(word(reply, 5)).unwrap_or(LeaseState::Invalidated),
        acquired_at_ms: num(6)?,
        renewed_at_ms: num(7)?,
        expires_at_ms: num(8)?,
    }))
}
