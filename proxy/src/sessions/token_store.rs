//! OAuth tokens in the SQLite store: one row per connection, the access and refresh tokens
//! sealed together ([`Sealer`]), their lifetime, their generation, and which sign-in they
//! descend from (the SHA-256 of the config's refresh token at that sign-in), so that the store
//! wins over the config until the config names a new refresh token.
//!
//! Before a refresh token is presented, its flight is written down (`oauth_flights`); an
//! answer that settles it (new tokens, a refusal, a try that safely got no answer) clears it.
//! A flight found written at start-up (the process died mid-refresh, or the answer was lost)
//! leaves that refresh token in doubt: it is never presented again.

use crate::sessions::sealed::Sealer;
use crate::state::store::{Store, StoreError};
use ferroute_core::oauth::Lifetime;
use rusqlite::{OptionalExtension, params};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// One connection's tokens as stored.
#[derive(Clone, PartialEq, Eq)]
pub struct StoredTokens {
    /// The access token.
    pub access_token: String,
    /// The refresh token (rotated by each refresh).
    pub refresh_token: String,
    /// The access token's lifetime.
    pub lifetime: Lifetime,
    /// One more after each refresh or sign-in.
    pub generation: u64,
    /// The SHA-256 (hex) of the config's refresh token these tokens descend from.
    pub origin: String,
    /// When they were last refreshed (Unix ms).
    pub last_refresh_ms: Option<u64>,
}

impl std::fmt::Debug for StoredTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredTokens")
            .field("lifetime", &self.lifetime)
            .field("generation", &self.generation)
            .field("last_refresh_ms", &self.last_refresh_ms)
            .finish_non_exhaustive()
    }
}

#[derive(Serialize, Deserialize)]
struct Secrets {
    access_token: String,
    refresh_token: String,
}

/// The SHA-256 of a refresh token, in hex: what the store remembers of a sign-in.
pub fn origin_of(refresh_token: &str) -> String {
    Sha256::digest(refresh_token.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

fn corrupt(connection: &str, why: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("OAuth tokens of {connection}: {why}"))
}

/// `connection`'s access and refresh tokens sealed into one printable blob (what the store
/// replicas share holds): `1:` and the base64 of the ciphertext, or `0:` and of the plain JSON
/// when no `secret_key` is set.
pub fn seal_blob(sealer: &Sealer, connection: &str, t: &StoredTokens) -> Result<String, StoreError> {
    use base64::Engine as _;
    let plain =
        serde_json::to_vec(&Secrets { access_token: t.access_token.clone(), refresh_token: t.refresh_token.clone() })
            .map_err(|e| corrupt(connection, e))?;
    let (bytes, sealed) = sealer.seal(connection, &plain).map_err(|e| corrupt(connection, e))?;
    Ok(format!("{}:{}", u8::from(sealed), base64::engine::general_purpose::STANDARD.encode(bytes)))
}

/// The access and refresh tokens in a blob [`seal_blob`] made.
pub fn open_blob(sealer: &Sealer, connection: &str, blob: &str) -> Result<(String, String), StoreError> {
    use base64::Engine as _;
    let (sealed, b64) = match blob.split_once(':') {
        Some(("1", b)) => (true, b),
        Some(("0", b)) => (false, b),
        _ => return Err(corrupt(connection, "the shared blob has no seal marker")),
    };
    let bytes = base64::engine::general_purpose::STANDARD.decode(b64).map_err(|e| corrupt(connection, e))?;
    let plain = sealer.open(connection, &bytes, sealed).map_err(|e| corrupt(connection, e))?;
    let s: Secrets = serde_json::from_slice(&plain).map_err(|e| corrupt(connection, e))?;
    Ok((s.access_token, s.refresh_token))
}

impl Store {
    /// The tokens stored for `connection`, if any.
    pub fn load_tokens(&self, connection: &str, sealer: &Sealer) -> Result<Option<StoredTokens>, StoreError> {
        let conn = self.lock();
        let row = conn
            .query_row(
                "SELECT secrets, sealed, issued_at_ms, expires_at_ms, generation, origin, last_refresh_ms
                 FROM oauth_tokens WHERE connection = ?1",
                params![connection],
                |r| {
                    Ok((
                        r.get::<_, Vec<u8>>(0)?,
                        r.get::<_, bool>(1)?,
                        r.get::<_, i64>(2)?,
                        r.get::<_, i64>(3)?,
                        r.get::<_, i64>(4)?,
                        r.get::<_, String>(5)?,
                        r.get::<_, Option<i64>>(6)?,
                    ))
                },
            )
            .optional()?;
        let Some((secrets, sealed, issued, expires, generation, origin, last)) = row else { return Ok(None) };
        let plain = sealer.open(connection, &secrets, sealed).map_err(|e| corrupt(connection, e))?;
        let s: Secrets = serde_json::from_slice(&plain).map_err(|e| corrupt(connection, e))?;
        Ok(Some(StoredTokens {
            access_token: s.access_token,
            refresh_token: s.refresh_token,
            lifetime: Lifetime { issued_at_ms: issued.max(0) as u64, expires_at_ms: expires.max(0) as u64 },
            generation: generation.max(0) as u64,
            origin,
            last_refresh_ms: last.map(|l| l.max(0) as u64),
        }))
    }

    /// Writes `connection`'s tokens (replacing what was stored), sealed by `sealer`.
    pub fn save_tokens(
        &self,
        connection: &str,
        t: &StoredTokens,
        sealer: &Sealer,
        wall_ms: u64,
    ) -> Result<(), StoreError> {
        let plain = serde_json::to_vec(&Secrets {
            access_token: t.access_token.clone(),
            refresh_token: t.refresh_token.clone(),
        })
        .map_err(|e| corrupt(connection, e))?;
        let (secrets, sealed) = sealer.seal(connection, &plain).map_err(|e| corrupt(connection, e))?;
        let i = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let conn = self.lock();
        conn.execute(
            "INSERT INTO oauth_tokens (connection, secrets, sealed, issued_at_ms, expires_at_ms, generation, origin, last_refresh_ms, saved_at_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
             ON CONFLICT(connection) DO UPDATE SET secrets = ?2, sealed = ?3, issued_at_ms = ?4, expires_at_ms = ?5,
               generation = ?6, origin = ?7, last_refresh_ms = ?8, saved_at_ms = ?9",
            params![
                connection,
                secrets,
                sealed,
                i(t.lifetime.issued_at_ms),
                i(t.lifetime.expires_at_ms),
                i(t.generation),
                t.origin,
                t.last_refresh_ms.map(i),
                i(wall_ms)
            ],
        )?;
        // A flight of an older generation is settled by these tokens.
        conn.execute(
            "DELETE FROM oauth_flights WHERE connection = ?1 AND generation < ?2",
            params![connection, i(t.generation)],
        )?;
        Ok(())
    }

    /// Writes down that `connection`'s refresh token of `generation` is about to be presented.
    pub fn begin_flight(&self, connection: &str, generation: u64, wall_ms: u64) -> Result<(), StoreError> {
        let i = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        self.lock().execute(
            "INSERT INTO oauth_flights (connection, generation, started_at_ms) VALUES (?1, ?2, ?3)
             ON CONFLICT(connection) DO UPDATE SET generation = ?2, started_at_ms = ?3",
            params![connection, i(generation), i(wall_ms)],
        )?;
        Ok(())
    }

    /// Clears the flight of `generation`: its answer settled the refresh token.
    pub fn end_flight(&self, connection: &str, generation: u64) -> Result<(), StoreError> {
        let i = i64::try_from(generation).unwrap_or(i64::MAX);
        self.lock()
            .execute("DELETE FROM oauth_flights WHERE connection = ?1 AND generation = ?2", params![connection, i])?;
        Ok(())
    }

    /// Records the account id an imported sign-in names (ChatGPT's, for the `codex` preset).
    pub fn save_account_id(&self, connection: &str, account_id: &str) -> Result<(), StoreError> {
        self.lock().execute(
            "INSERT INTO oauth_account_ids (connection, account_id) VALUES (?1, ?2)
             ON CONFLICT(connection) DO UPDATE SET account_id = ?2",
            params![connection, account_id],
        )?;
        Ok(())
    }

    /// The account id an imported sign-in named, if any.
    pub fn load_account_id(&self, connection: &str) -> Result<Option<String>, StoreError> {
        let conn = self.lock();
        let sql = "SELECT account_id FROM oauth_account_ids WHERE connection = ?1";
        Ok(conn.query_row(sql, params![connection], |r| r.get::<_, String>(0)).optional()?)
    }

    /// The generation whose flight was written down and never settled, if any.
    pub fn open_flight(&self, connection: &str) -> Result<Option<u64>, StoreError> {
        let g = self
            .lock()
            .query_row("SELECT generation FROM oauth_flights WHERE connection = ?1", params![connection], |r| {
                r.get::<_, i64>(0)
            })
            .optional()?;
        Ok(g.map(|g| g.max(0) as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(generation: u64) -> StoredTokens {
        StoredTokens {
            access_token: format!("access-{generation}"),
            refresh_token: format!("refresh-{generation}"),
            lifetime: Lifetime { issued_at_ms: 1_000, expires_at_ms: 61_000 },
            generation,
            origin: origin_of("refresh-0"),
            last_refresh_ms: (generation > 0).then_some(1_000),
        }
    }

    #[test]
    fn tokens_round_trip_sealed_and_the_database_file_holds_no_token() {
        let dir = tempfile::tempdir().expect("a dir");
        let sealer = Sealer::new(Some("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=")).expect("a key");
        {
            let store = Store::open_dir(dir.path()).expect("a store");
            assert_eq!(store.load_tokens("c1", &sealer).expect("read"), None);
            store.save_tokens("c1", &tokens(0), &sealer, 5).expect("saved");
            store.save_tokens("c1", &tokens(1), &sealer, 6).expect("saved");
        }
        let store = Store::open_dir(dir.path()).expect("reopened");
        assert_eq!(store.load_tokens("c1", &sealer).expect("read"), Some(tokens(1)));
        drop(store);
        let mut bytes = Vec::new();
        for f in std::fs::read_dir(dir.path()).expect("files") {
            bytes.extend(std::fs::read(f.expect("a file").path()).expect("bytes"));
        }
        assert!(!bytes.windows(9).any(|w| w == b"refresh-1"), "a refresh token in the database file");
        assert!(!bytes.windows(8).any(|w| w == b"access-1"), "an access token in the database file");
        // Without the key they do not open, and say why.
        let err = Store::open_dir(dir.path()).expect("reopened").load_tokens("c1", &Sealer::new(None).expect("none"));
        assert!(err.expect_err("no key").to_string().contains("server.secret_key is not set"));
    }

    #[test]
    fn a_blob_opens_with_the_key_it_was_sealed_with_and_for_its_connection_only() {
        let key = Sealer::new(Some("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=")).expect("a key");
        let blob = seal_blob(&key, "c1", &tokens(3)).expect("sealed");
        assert!(blob.starts_with("1:") && !blob.contains("refresh-3"), "{blob}");
        assert_eq!(open_blob(&key, "c1", &blob).expect("opens"), ("access-3".to_owned(), "refresh-3".to_owned()));
        assert!(open_blob(&key, "c2", &blob).is_err(), "sealed for c1 only");
        assert!(open_blob(&Sealer::new(None).expect("none"), "c1", &blob).is_err());
        let plain = seal_blob(&Sealer::new(None).expect("none"), "c1", &tokens(3)).expect("plain");
        assert!(plain.starts_with("0:"));
        assert!(open_blob(&key, "c1", "garbage").is_err());
    }

    #[test]
    fn a_flight_stays_written_until_settled_or_overtaken_by_newer_tokens() {
        let dir = tempfile::tempdir().expect("a dir");
        let sealer = Sealer::new(None).expect("none");
        {
            let store = Store::open_dir(dir.path()).expect("a store");
            store.save_tokens("c1", &tokens(0), &sealer, 5).expect("saved");
            store.begin_flight("c1", 0, 6).expect("written");
            store.end_flight("c1", 0).expect("settled");
            assert_eq!(store.open_flight("c1").expect("read"), None);
            store.begin_flight("c1", 0, 7).expect("written");
        }
        // A restart finds it: that refresh token is in doubt.
        let store = Store::open_dir(dir.path()).expect("reopened");
        assert_eq!(store.open_flight("c1").expect("read"), Some(0));
        assert_eq!(store.open_flight("c2").expect("read"), None);
        store.end_flight("c1", 1).expect("another generation's");
        assert_eq!(store.open_flight("c1").expect("read"), Some(0));
        // Its late answer's tokens settle it.
        store.save_tokens("c1", &tokens(1), &sealer, 8).expect("saved");
        assert_eq!(store.open_flight("c1").expect("read"), None);
    }

    #[test]
    fn an_origin_is_the_sha256_of_the_refresh_token() {
        assert_eq!(origin_of("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }
}
