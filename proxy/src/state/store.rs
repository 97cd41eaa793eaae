//! SQLite persistence (M20): breaker snapshots, connection states, session pins (M5) and the
//! effective settings (leases and OAuth tokens are read and written by `sessions`).
//!
//! WAL mode, every write in a transaction, so a crash mid-write leaves a consistent store and
//! `kill -9` loses nothing already written. Snapshots carry times relative to when they were
//! saved, with the wall-clock save time beside them, so a restart subtracts the downtime.
//! Model lockouts stay in memory.

use ferroute_core::breaker::BreakerSnapshot;
use ferroute_core::connection::ConnectionSnapshot;
use rusqlite::{Connection, params};
use std::path::Path;
use std::sync::Mutex;

/// A store error, naming what failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite failed.
    #[error("state store: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The data directory could not be created.
    #[error("state store: cannot create {path}: {source}")]
    Dir {
        /// The directory.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The key secrets are sealed with is unusable.
    #[error("state store: {0}")]
    Key(String),
    /// A stored snapshot did not decode.
    #[error("state store: corrupt snapshot for {0}")]
    Corrupt(String),
}

/// Everything loaded at start-up.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Breaker snapshots by provider, with the wall time they were saved.
    pub breakers: Vec<(String, BreakerSnapshot, u64)>,
    /// Connection snapshots by id, with the wall time they were saved.
    pub connections: Vec<(String, ConnectionSnapshot, u64)>,
    /// Session pins: session, provider, connection, wall time the pin lapses.
    pub pins: Vec<(String, String, String, u64)>,
}

/// A session pin change to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PinWrite {
    /// Set: session, provider, connection, wall time the pin lapses.
    Set(String, String, String, u64),
    /// Delete: session, provider.
    Drop(String, String),
}

/// The store.
pub struct Store {
    conn: Mutex<Connection>,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS breakers (provider TEXT PRIMARY KEY, snapshot TEXT NOT NULL, saved_at_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS connections (id TEXT PRIMARY KEY, snapshot TEXT NOT NULL, saved_at_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL, saved_at_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS session_pins (session TEXT NOT NULL, provider TEXT NOT NULL, connection TEXT NOT NULL, expires_at_ms INTEGER NOT NULL, PRIMARY KEY (session, provider));
CREATE TABLE IF NOT EXISTS leases (
    owner_hash TEXT NOT NULL,
    generation INTEGER NOT NULL,
    key_id TEXT NOT NULL,
    connection TEXT NOT NULL,
    model TEXT NOT NULL,
    state TEXT NOT NULL,
    acquired_at_ms INTEGER NOT NULL,
    renewed_at_ms INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL,
    PRIMARY KEY (owner_hash, generation)
);
CREATE UNIQUE INDEX IF NOT EXISTS leases_one_active_per_owner ON leases(owner_hash) WHERE state = 'ACTIVE';
CREATE UNIQUE INDEX IF NOT EXISTS leases_one_active_per_connection ON leases(connection) WHERE state = 'ACTIVE';
CREATE TABLE IF NOT EXISTS oauth_tokens (
    connection TEXT PRIMARY KEY,
    secrets BLOB NOT NULL,
    sealed INTEGER NOT NULL,
    issued_at_ms INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL,
    generation INTEGER NOT NULL,
    origin TEXT NOT NULL,
    last_refresh_ms INTEGER,
    saved_at_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS oauth_account_ids (connection TEXT PRIMARY KEY, account_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS oauth_flights (connection TEXT PRIMARY KEY, generation INTEGER NOT NULL, started_at_ms INTEGER NOT NULL);
INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', '1');
";

impl Store {
    /// Opens (creating) `dir/state.db`.
    pub fn open_dir(dir: &Path) -> Result<Store, StoreError> {
        std::fs::create_dir_all(dir).map_err(|source| StoreError::Dir { path: dir.display().to_string(), source })?;
        let conn = Connection::open(dir.join("state.db"))?;
        // WAL survives a killed process; NORMAL sync is durable against process crashes.
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        Self::init(conn)
    }

    /// An in-memory store (for tests and simulation).
    pub fn in_memory() -> Result<Store, StoreError> {
        Self::init(Connection::open_in_memory()?)
    }

    fn init(conn: Connection) -> Result<Store, StoreError> {
        conn.execute_batch(SCHEMA)?;
        Ok(Store { conn: Mutex::new(conn) })
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic while holding the lock leaves SQLite itself consistent (transactions), so a
        // poisoned lock is still usable.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads every snapshot.
    pub fn load(&self) -> Result<Loaded, StoreError> {
        let conn = self.lock();
        let mut out = Loaded::default();
        let mut stmt = conn.prepare("SELECT provider, snapshot, saved_at_ms FROM breakers ORDER BY provider")?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, i64>(2)?)))?;
        for row in rows {
            let (id, json, at) = row?;
            let snap = serde_json::from_str(&json).map_err(|_| StoreError::Corrupt(format!("breaker {id}")))?;
            out.breakers.push((id, snap, at.max(0) as u64));
        }
        let mut stmt = conn.prepare("SELECT id, snapshot, saved_at_ms FROM connections ORDER BY id")?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, i64>(2)?)))?;
        for row in rows {
            let (id, json, at) = row?;
            let snap = serde_json::from_str(&json).map_err(|_| StoreError::Corrupt(format!("connection {id}")))?;
            out.connections.push((id, snap, at.max(0) as u64));
        }
        // In the table's own order: sorting by the key walks its index and seeks each row
        // (a third of start-up with 100 000 pins); the order of restored pins does not matter.
        let mut stmt = conn.prepare("SELECT session, provider, connection, expires_at_ms FROM session_pins")?;
        let rows = stmt.query_map([], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?, r.get::<_, i64>(3)?))
        })?;
        for row in rows {
            let (s, p, c, at) = row?;
            out.pins.push((s, p, c, at.max(0) as u64));
        }
        Ok(out)
    }

    /// Applies session pin changes in one transaction, and drops pins that lapsed before
    /// `wall_ms`.
    pub fn save_pins(&self, writes: &[PinWrite], wall_ms: u64) -> Result<(), StoreError> {
        if writes.is_empty() {
            return Ok(());
        }
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        for w in writes {
            match w {
                PinWrite::Set(s, p, c, at) => {
                    tx.prepare_cached(
                        "INSERT INTO session_pins (session, provider, connection, expires_at_ms) VALUES (?1, ?2, ?3, ?4)
                         ON CONFLICT(session, provider) DO UPDATE SET connection = excluded.connection, expires_at_ms = excluded.expires_at_ms",
                    )?
                    .execute(params![s, p, c, *at as i64])?;
                }
                PinWrite::Drop(s, p) => {
                    tx.prepare_cached("DELETE FROM session_pins WHERE session = ?1 AND provider = ?2")?
                        .execute(params![s, p])?;
                }
            }
        }
        tx.prepare_cached("DELETE FROM session_pins WHERE expires_at_ms <= ?1")?.execute(params![wall_ms as i64])?;
        tx.commit()?;
        Ok(())
    }

    /// Writes snapshots in one transaction.
    pub fn save(
        &self,
        breakers: &[(String, BreakerSnapshot)],
        connections: &[(String, ConnectionSnapshot)],
        wall_ms: u64,
    ) -> Result<(), StoreError> {
        if breakers.is_empty() && connections.is_empty() {
            return Ok(());
        }
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        upsert(&tx, "breakers", "provider", breakers, wall_ms)?;
        upsert(&tx, "connections", "id", connections, wall_ms)?;
        tx.commit()?;
        Ok(())
    }

    /// Records a settings document (the effective settings at start-up, for operators).
    pub fn save_setting(&self, key: &str, value: &str, wall_ms: u64) -> Result<(), StoreError> {
        let conn = self.lock();
        conn.execute(
            "INSERT INTO settings (key, value, saved_at_ms) VALUES (?1, ?2, ?3)
             ON CONFLICT(key) DO UPDATE SET value = excluded.value, saved_at_ms = excluded.saved_at_ms",
            params![key, value, wall_ms as i64],
        )?;
        Ok(())
    }

    /// A stored settings document.
    pub fn setting(&self, key: &str) -> Result<Option<String>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare("SELECT value FROM settings WHERE key = ?1")?;
        let mut rows = stmt.query(params![key])?;
        Ok(match rows.next()? {
            Some(r) => Some(r.get(0)?),
            None => None,
        })
    }
}

/// Writes `rows` as JSON snapshots into `table` (keyed by `key`), inside the caller's
/// transaction. Table and column names are this module's constants, never input.
fn upsert<T: serde::Serialize>(
    tx: &rusqlite::Transaction<'_>,
    table: &str,
    key: &str,
    rows: &[(String, T)],
    wall_ms: u64,
) -> Result<(), StoreError> {
    if rows.is_empty() {
        return Ok(());
    }
    let sql = format!(
        "INSERT INTO {table} ({key}, snapshot, saved_at_ms) VALUES (?1, ?2, ?3)
         ON CONFLICT({key}) DO UPDATE SET snapshot = excluded.snapshot, saved_at_ms = excluded.saved_at_ms"
    );
    // Parsed once per connection to the file and kept: the gateway writes these on its
    // request path, after every failure that changes a breaker or a connection.
    let mut stmt = tx.prepare_cached(&sql)?;
    for (id, snap) in rows {
        let json = serde_json::to_string(snap).map_err(|_| StoreError::Corrupt(id.clone()))?;
        stmt.execute(params![id, json, wall_ms as i64])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroute_core::breaker::BreakerState;

    #[test]
    fn round_trip_and_ageing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open_dir(dir.path()).expect("open");
        let b = BreakerSnapshot {
            state: BreakerState::Open,
            failure_count: 12,
            open_cycle_count: 0,
            open_remaining_ms: 20_000,
        };
        let c = ConnectionSnapshot { cooldown_remaining_ms: 5_000, backoff_level: 2, ..Default::default() };
        store.save(&[("openai".into(), b.clone())], &[("k1".into(), c.clone())], 1_000).expect("save");
        drop(store);
        let store = Store::open_dir(dir.path()).expect("reopen");
        let loaded = store.load().expect("load");
        assert_eq!(loaded.breakers, vec![("openai".to_owned(), b.clone(), 1_000)]);
        assert_eq!(loaded.connections[0].1, c);
        let aged = b.aged(25_000);
        assert_eq!((aged.state, aged.open_remaining_ms), (BreakerState::HalfOpen, 0));
        assert_eq!(c.clone().aged(1_000).cooldown_remaining_ms, 4_000);
        assert_eq!(c.clone().aged(1_000).cooldown_ended_ms_ago, None);
        // A cooldown that ended while the process was down ended that long before the restart,
        // and an ended one keeps ageing.
        let ended = c.aged(12_000);
        assert_eq!((ended.cooldown_remaining_ms, ended.cooldown_ended_ms_ago), (0, Some(7_000)));
        assert_eq!(ended.aged(3_000).cooldown_ended_ms_ago, Some(10_000));
        store.save_setting("resilience.effective", "{}", 5).expect("setting");
        assert_eq!(store.setting("resilience.effective").expect("read").as_deref(), Some("{}"));
        assert_eq!(store.setting("missing").expect("read"), None);
    }

    #[test]
    fn pins_are_upserted_dropped_and_lapse() {
        let store = Store::in_memory().expect("store");
        let set = |s: &str, c: &str, at: u64| PinWrite::Set(s.into(), "p".into(), c.into(), at);
        store
            .save_pins(&[set("s1", "k1", 10_000), set("s2", "k2", 10_000), set("s3", "k3", 2_000)], 1_000)
            .expect("save");
        // Moving s1, dropping s2; s3 lapsed by wall time 5 000.
        store.save_pins(&[set("s1", "k9", 20_000), PinWrite::Drop("s2".into(), "p".into())], 5_000).expect("save");
        let pins = store.load().expect("load").pins;
        assert_eq!(pins, vec![("s1".to_owned(), "p".to_owned(), "k9".to_owned(), 20_000)]);
    }
}
