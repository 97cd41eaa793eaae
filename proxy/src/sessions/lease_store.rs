//! Exclusive leases in SQLite (M14). Every operation is one immediate transaction that first
//! expires the leases past their deadline (lazy reclaim), and two partial unique indexes make
//! "one active lease per owner" and "one active lease per connection" hold whatever the
//! interleaving of acquires, and across restarts.

use crate::state::store::{Store, StoreError};
use ferroute_core::session::lease::{Lease, LeaseState};
use rusqlite::{OptionalExtension, Transaction, TransactionBehavior, params};
use std::time::Duration;

/// One active lease as the store lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveLease {
    /// SHA-256 (hex) of the owner id.
    pub owner_hash: String,
    /// Its generation.
    pub generation: u64,
    /// The client key's id.
    pub key_id: String,
    /// The leased connection.
    pub connection: String,
}

/// Why an acquire found nothing free.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoCapacity {
    /// When the soonest lease on an eligible connection lapses (Unix ms).
    pub soonest_expiry_ms: Option<u64>,
    /// Eligible connections.
    pub eligible: usize,
    /// Free ones among them (0).
    pub free: usize,
}

/// What an acquire did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquired {
    /// A new lease (or the owner's active one, acquired again for a connection it may use).
    Lease(Lease),
    /// The owner holds an active lease on a connection that cannot serve this acquire.
    OwnerBusy,
    /// Every eligible connection is held by another owner.
    Full(NoCapacity),
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Lease> {
    let state: String = r.get(5)?;
    Ok(Lease {
        owner_hash: r.get(0)?,
        generation: r.get::<_, i64>(1)?.max(0) as u64,
        key_id: r.get(2)?,
        connection: r.get(3)?,
        model: r.get(4)?,
        state: LeaseState::parse(&state).unwrap_or(LeaseState::Invalidated),
        acquired_at_ms: r.get::<_, i64>(6)?.max(0) as u64,
        renewed_at_ms: r.get::<_, i64>(7)?.max(0) as u64,
        expires_at_ms: r.get::<_, i64>(8)?.max(0) as u64,
    })
}

const COLUMNS: &str =
    "owner_hash, generation, key_id, connection, model, state, acquired_at_ms, renewed_at_ms, expires_at_ms";

fn reclaim(tx: &Transaction<'_>, now_ms: u64) -> rusqlite::Result<()> {
    tx.execute(
        "UPDATE leases SET state = 'EXPIRED' WHERE state = 'ACTIVE' AND expires_at_ms <= ?1",
        params![now_ms as i64],
    )?;
    Ok(())
}

fn find(tx: &Transaction<'_>, owner_hash: &str, generation: u64) -> rusqlite::Result<Option<Lease>> {
    tx.query_row(
        &format!("SELECT {COLUMNS} FROM leases WHERE owner_hash = ?1 AND generation = ?2"),
        params![owner_hash, generation as i64],
        row,
    )
    .optional()
}

impl Store {
    fn lease_tx<R>(&self, f: impl FnOnce(&Transaction<'_>) -> rusqlite::Result<R>) -> Result<R, StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let out = f(&tx)?;
        tx.commit()?;
        Ok(out)
    }

    /// Acquires a lease for `owner_hash` on the first of `eligible` (in routing order) that no
    /// other owner holds.
    pub fn acquire_lease(
        &self,
        owner_hash: &str,
        key_id: &str,
        model: &str,
        eligible: &[String],
        ttl: Duration,
        now_ms: u64,
    ) -> Result<Acquired, StoreError> {
        self.lease_tx(|tx| {
            reclaim(tx, now_ms)?;
            let own: Option<Lease> = tx
                .query_row(
                    &format!("SELECT {COLUMNS} FROM leases WHERE owner_hash = ?1 AND state = 'ACTIVE'"),
                    params![owner_hash],
                    row,
                )
                .optional()?;
            if let Some(l) = own {
                return Ok(if l.key_id == key_id && eligible.contains(&l.connection) {
                    Acquired::Lease(l)
                } else {
                    Acquired::OwnerBusy
                });
            }
            let mut held: Vec<(String, u64)> = Vec::new();
            {
                let mut stmt = tx.prepare("SELECT connection, expires_at_ms FROM leases WHERE state = 'ACTIVE'")?;
                let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?.max(0) as u64)))?;
                for r in rows {
                    let (c, at) = r?;
                    if eligible.contains(&c) {
                        held.push((c, at));
                    }
                }
            }
            let Some(free) = eligible.iter().find(|c| !held.iter().any(|(h, _)| h == *c)) else {
                return Ok(Acquired::Full(NoCapacity {
                    soonest_expiry_ms: held.iter().map(|(_, at)| *at).min(),
                    eligible: eligible.len(),
                    free: 0,
                }));
            };
            let generation: i64 = tx.query_row(
                "SELECT COALESCE(MAX(generation), 0) + 1 FROM leases WHERE owner_hash = ?1",
                params![owner_hash],
                |r| r.get(0),
            )?;
            let expires = now_ms.saturating_add(ttl.as_millis() as u64);
            tx.execute(
                &format!("INSERT INTO leases ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, 'ACTIVE', ?6, ?6, ?7)"),
                params![owner_hash, generation, key_id, free, model, now_ms as i64, expires as i64],
            )?;
            Ok(Acquired::Lease(Lease {
                owner_hash: owner_hash.to_owned(),
                generation: generation.max(0) as u64,
                key_id: key_id.to_owned(),
                connection: free.clone(),
                model: model.to_owned(),
                state: LeaseState::Active,
                acquired_at_ms: now_ms,
                renewed_at_ms: now_ms,
                expires_at_ms: expires,
            }))
        })
    }

    /// The owner's lease of that generation, with expired leases reclaimed first.
    pub fn lease(&self, owner_hash: &str, generation: u64, now_ms: u64) -> Result<Option<Lease>, StoreError> {
        self.lease_tx(|tx| {
            reclaim(tx, now_ms)?;
            find(tx, owner_hash, generation)
        })
    }

    /// Extends an active lease to `now + ttl`; `None` when there is no such lease. An inactive
    /// one is returned unchanged (the caller refuses it as stale).
    pub fn renew_lease(
        &self,
        owner_hash: &str,
        generation: u64,
        ttl: Duration,
        now_ms: u64,
    ) -> Result<Option<Lease>, StoreError> {
        self.lease_tx(|tx| {
            reclaim(tx, now_ms)?;
            let expires = now_ms.saturating_add(ttl.as_millis() as u64);
            tx.execute(
                "UPDATE leases SET renewed_at_ms = ?3, expires_at_ms = ?4
                 WHERE owner_hash = ?1 AND generation = ?2 AND state = 'ACTIVE'",
                params![owner_hash, generation as i64, now_ms as i64, expires as i64],
            )?;
            find(tx, owner_hash, generation)
        })
    }

    /// Releases an active lease; `None` when there is no such lease.
    pub fn release_lease(&self, owner_hash: &str, generation: u64, now_ms: u64) -> Result<Option<Lease>, StoreError> {
        self.lease_tx(|tx| {
            reclaim(tx, now_ms)?;
            tx.execute(
                "UPDATE leases SET state = 'RELEASED', renewed_at_ms = ?3
                 WHERE owner_hash = ?1 AND generation = ?2 AND state = 'ACTIVE'",
                params![owner_hash, generation as i64, now_ms as i64],
            )?;
            find(tx, owner_hash, generation)
        })
    }

    /// Marks INVALIDATED every active lease whose key may no longer use its connection
    /// (`allowed(key_id, connection)` is false: the key, the connection or the permission
    /// left the config). Returns how many.
    pub fn invalidate_leases(&self, allowed: &dyn Fn(&str, &str) -> bool, now_ms: u64) -> Result<usize, StoreError> {
        self.lease_tx(|tx| {
            reclaim(tx, now_ms)?;
            let active: Vec<(String, i64, String, String)> = {
                let mut st =
                    tx.prepare("SELECT owner_hash, generation, key_id, connection FROM leases WHERE state = 'ACTIVE'")?;
                st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
                    .collect::<rusqlite::Result<_>>()?
            };
            let mut n = 0;
            for (owner, generation, key, connection) in active {
                if !allowed(&key, &connection) {
                    n += tx.execute(
                        "UPDATE leases SET state = 'INVALIDATED', renewed_at_ms = ?3
                         WHERE owner_hash = ?1 AND generation = ?2 AND state = 'ACTIVE'",
                        params![owner, generation, now_ms as i64],
                    )?;
                }
            }
            Ok(n)
        })
    }

    /// Active leases at `now_ms`, oldest first, by owner hash (the owners themselves are never
    /// stored).
    pub fn list_leases(&self, now_ms: u64) -> Result<Vec<ActiveLease>, StoreError> {
        let conn = self.lock();
        let mut st = conn.prepare(
            "SELECT owner_hash, generation, key_id, connection FROM leases
             WHERE state = 'ACTIVE' AND expires_at_ms > ?1 ORDER BY generation",
        )?;
        let rows = st.query_map(params![now_ms as i64], |r| {
            Ok(ActiveLease {
                owner_hash: r.get(0)?,
                generation: r.get::<_, i64>(1)?.max(0) as u64,
                key_id: r.get(2)?,
                connection: r.get(3)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// How many leases are active at `now_ms`.
    pub fn active_leases(&self, now_ms: u64) -> Result<u64, StoreError> {
        let conn = self.lock();
        let n: i64 = conn.query_row(
            "SELECT COUNT(*) FROM leases WHERE state = 'ACTIVE' AND expires_at_ms > ?1",
            params![now_ms as i64],
            |r| r.get(0),
        )?;
        Ok(n.max(0) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    const TTL: Duration = Duration::from_secs(120);

    fn conns(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("c{i}")).collect()
    }

    #[test]
    fn acquire_renew_release_and_expiry() {
        let s = Store::in_memory().expect("store");
        let Acquired::Lease(a) = s.acquire_lease("o1", "team", "m", &conns(2), TTL, 1_000).expect("acquire") else {
            panic!("expected a lease")
        };
        assert_eq!((a.connection.as_str(), a.generation, a.expires_at_ms), ("c0", 1, 121_000));
        // Acquiring again is idempotent for the owner.
        assert_eq!(
            s.acquire_lease("o1", "team", "m", &conns(2), TTL, 2_000).expect("again"),
            Acquired::Lease(a.clone())
        );
        // Another owner gets the other connection; a third finds none free.
        let Acquired::Lease(b) = s.acquire_lease("o2", "team", "m", &conns(2), TTL, 3_000).expect("b") else {
            panic!()
        };
        assert_eq!(b.connection, "c1");
        match s.acquire_lease("o3", "team", "m", &conns(2), TTL, 4_000).expect("c") {
            Acquired::Full(n) => assert_eq!(n, NoCapacity { soonest_expiry_ms: Some(121_000), eligible: 2, free: 0 }),
            other => panic!("{other:?}"),
        }
        let renewed = s.renew_lease("o1", 1, TTL, 100_000).expect("renew").expect("exists");
        assert_eq!(renewed.expires_at_ms, 220_000);
        assert_eq!(s.release_lease("o1", 1, 101_000).expect("release").map(|l| l.state), Some(LeaseState::Released));
        // The released connection is free; the owner's next lease has the next generation.
        let Acquired::Lease(c) = s.acquire_lease("o1", "team", "m", &conns(2), TTL, 102_000).expect("re") else {
            panic!()
        };
        assert_eq!((c.generation, c.connection.as_str()), (2, "c0"));
        // o2's lease lapses at 123 000 and is reclaimed: o3 gets c1.
        let Acquired::Lease(d) = s.acquire_lease("o3", "team", "m", &conns(2), TTL, 123_000).expect("d") else {
            panic!()
        };
        assert_eq!(d.connection, "c1");
        assert_eq!(s.lease("o2", 1, 123_000).expect("read").map(|l| l.state), Some(LeaseState::Expired));
        assert_eq!(s.active_leases(123_000).expect("count"), 2);
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

            /// Against a reference model: at most one active lease per owner and per
            /// connection, generations of an owner only grow, and what the store says matches
            /// the model after every step.
            #[test]
            fn one_active_lease_per_owner_and_connection(
                ops in proptest::collection::vec((0u8..4, 0usize..5, 1u64..90_000), 1..60),
            ) {
                let s = Store::in_memory().expect("store");
                let pool = conns(3);
                let mut now = 1_000u64;
                let mut last_gen: BTreeMap<String, u64> = BTreeMap::new();
                for (op, who, dt) in ops {
                    now += dt;
                    let owner = format!("o{who}");
                    match op {
                        0 | 1 => {
                            if let Acquired::Lease(l) = s.acquire_lease(&owner, "team", "m", &pool, TTL, now).expect("acquire") {
                                let prev = last_gen.get(&owner).copied().unwrap_or(0);
                                prop_assert!(l.generation >= prev);
                                last_gen.insert(owner.clone(), l.generation);
                            }
                        }
                        2 => {
                            if let Some(g) = last_gen.get(&owner) {
                                s.renew_lease(&owner, *g, TTL, now).expect("renew");
                            }
                        }
                        _ => {
                            if let Some(g) = last_gen.get(&owner) {
                                s.release_lease(&owner, *g, now).expect("release");
                            }
                        }
                    }
                    let mut owners = BTreeSet::new();
                    let mut held = BTreeSet::new();
                    for who in 0..5 {
                        let owner = format!("o{who}");
                        if let Some(g) = last_gen.get(&owner)
                            && let Some(l) = s.lease(&owner, *g, now).expect("read")
                            && l.state_at(now) == LeaseState::Active
                        {
                            prop_assert!(owners.insert(owner.clone()));
                            prop_assert!(held.insert(l.connection.clone()), "connection {} held twice", l.connection);
                        }
                    }
                    prop_assert_eq!(s.active_leases(now).expect("count"), held.len() as u64);
                }
            }
        }
    }
}
