//! OAuth tokens in the store replicas share: the typed face of `oauth_redis.lua` (and of the
//! simulation's port of it). The store is the tokens' source of truth across replicas:
//! - one replica at a time holds the **claim** to refresh an account, with a fencing token;
//! - it presents the refresh token, then **publishes** the new tokens under that fence; the
//!   store takes them only from the last claim's holder and only as the next generation, so a
//!   replica never writes tokens older than the stored ones;
//! - the others, finding the claim held, look again until the new generation is stored and take
//!   it (`newer`) without presenting anything;
//! - a claim that lapsed before its holder published, or whose holder lost the token endpoint's
//!   answer, leaves the refresh token **in doubt** (it may have been presented and rotated):
//!   nobody presents it again; the holder can still publish (it reached the store again, or
//!   the answer came late), and otherwise the accounts end when their access tokens do.
//!
//! Tokens travel as a sealed blob (the replicas share `[server] secret_key`); this module never
//! opens it.

use super::shared_store::{LeaseReply, SharedStore, StoreError};
use ferroute_core::oauth::Lifetime;
use std::sync::Arc;
use std::time::Duration;

/// Longest wait for one token operation, connecting included.
pub const TIMEOUT: Duration = Duration::from_secs(2);

/// One account's tokens as the store holds them.
#[derive(Clone, PartialEq, Eq)]
pub struct Row {
    /// One more after each refresh or sign-in.
    pub generation: u64,
    /// The SHA-256 (hex) of the config's refresh token they descend from.
    pub origin: String,
    /// The access and refresh tokens, sealed.
    pub blob: String,
    /// The access token's lifetime.
    pub lifetime: Lifetime,
    /// When they were last refreshed (Unix ms).
    pub last_refresh_ms: Option<u64>,
    /// Whether the token endpoint refused this generation's refresh token.
    pub refused: bool,
}

impl std::fmt::Debug for Row {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Row")
            .field("generation", &self.generation)
            .field("lifetime", &self.lifetime)
            .field("refused", &self.refused)
            .finish_non_exhaustive()
    }
}

/// What a claim found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// Nothing stored for the account (seed it first).
    Nothing,
    /// A later generation is stored: take it.
    Newer(Row),
    /// The store holds an older generation than the caller (its own publish has not landed).
    Behind,
    /// The stored refresh token was refused: the account needs a new sign-in.
    Refused,
    /// Another replica holds the claim until `until_ms`.
    Busy {
        /// The claim's deadline (Unix ms).
        until_ms: u64,
    },
    /// A claim lapsed unpublished: the refresh token may have been presented; it is never
    /// presented again (look again for the holder's publication while the access token works).
    Doubt,
    /// The caller holds the claim: present the refresh token, then publish under `fence`.
    Granted {
        /// The fencing token.
        fence: u64,
    },
}

/// The shared tokens of every replica.
#[derive(Clone)]
pub struct SharedTokens {
    store: Arc<dyn SharedStore>,
}

impl std::fmt::Debug for SharedTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedTokens").finish_non_exhaustive()
    }
}

fn bad(op: &str, reply: &LeaseReply) -> StoreError {
    StoreError(format!("unexpected reply to token {op}: {} fields", reply.len()))
}

fn word(reply: &LeaseReply, i: usize) -> &str {
    reply.get(i).and_then(|w| w.as_deref()).unwrap_or("")
}

fn number(op: &str, reply: &LeaseReply, i: usize) -> Result<u64, StoreError> {
    word(reply, i).parse().map_err(|_| bad(op, reply))
}

/// The row of a `tokens`/`newer` reply.
fn row(op: &str, reply: &LeaseReply) -> Result<Row, StoreError> {
    let generation = number(op, reply, 1)?;
    let last = word(reply, 6);
    Ok(Row {
        generation,
        origin: word(reply, 2).to_owned(),
        blob: word(reply, 3).to_owned(),
        lifetime: Lifetime { issued_at_ms: number(op, reply, 4)?, expires_at_ms: number(op, reply, 5)? },
        last_refresh_ms: if last.is_empty() { None } else { Some(number(op, reply, 6)?) },
        refused: word(reply, 7) == generation.to_string(),
    })
}

fn row_args(r: &Row) -> [String; 5] {
    [
        r.generation.to_string(),
        r.blob.clone(),
        r.lifetime.issued_at_ms.to_string(),
        r.lifetime.expires_at_ms.to_string(),
        r.last_refresh_ms.map_or(String::new(), |l| l.to_string()),
    ]
}

impl SharedTokens {
    /// The tokens kept in `store`.
    pub fn new(store: Arc<dyn SharedStore>) -> Self {
        SharedTokens { store }
    }

    async fn run(
        &self,
        op: &'static str,
        now_ms: u64,
        conn: &str,
        args: Vec<String>,
    ) -> Result<LeaseReply, StoreError> {
        match tokio::time::timeout(TIMEOUT, self.store.tokens(op, now_ms, conn, args)).await {
            Ok(r) => r,
            Err(_) => Err(StoreError(format!("the store did not answer within {} ms", TIMEOUT.as_millis()))),
        }
    }

    /// The tokens stored for `conn`.
    pub async fn read(&self, conn: &str, now_ms: u64) -> Result<Option<Row>, StoreError> {
        let reply = self.run("read", now_ms, conn, Vec::new()).await?;
        match word(&reply, 0) {
            "none" => Ok(None),
            "tokens" => row("read", &reply).map(Some),
            _ => Err(bad("read", &reply)),
        }
    }

    /// Offers this replica's tokens for `conn`: stored when the store has none, or has the same
    /// sign-in at an older generation, or a different sign-in that expires sooner or was
    /// refused. Returns what the store holds afterwards.
    pub async fn seed(&self, conn: &str, now_ms: u64, offered: &Row) -> Result<Row, StoreError> {
        let mut args = vec![offered.origin.clone()];
        args.extend(row_args(offered));
        let reply = self.run("seed", now_ms, conn, args).await?;
        match word(&reply, 0) {
            "tokens" => row("seed", &reply),
            _ => Err(bad("seed", &reply)),
        }
    }

    /// Asks to refresh `conn` from generation `from` as `owner`, holding the claim for `ttl`.
    pub async fn claim(
        &self,
        conn: &str,
        now_ms: u64,
        owner: &str,
        from: u64,
        ttl: Duration,
    ) -> Result<Claim, StoreError> {
        let ttl = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).to_string();
        let args = vec![owner.to_owned(), from.to_string(), ttl];
        let reply = self.run("claim", now_ms, conn, args).await?;
        Ok(match word(&reply, 0) {
            "none" => Claim::Nothing,
            "newer" => Claim::Newer(row("claim", &reply)?),
            "behind" => Claim::Behind,
            "refused" => Claim::Refused,
            "busy" => Claim::Busy { until_ms: number("claim", &reply, 1)? },
            "doubt" => Claim::Doubt,
            "granted" => Claim::Granted { fence: number("claim", &reply, 1)? },
            _ => return Err(bad("claim", &reply)),
        })
    }

    /// Publishes the tokens a refresh under `fence` got (`new.generation` is the next one);
    /// `Err(reason)` inside when the store did not take them.
    pub async fn publish(
        &self,
        conn: &str,
        now_ms: u64,
        fence: u64,
        new: &Row,
    ) -> Result<Result<(), String>, StoreError> {
        let mut args = vec![fence.to_string()];
        args.extend(row_args(new));
        let reply = self.run("publish", now_ms, conn, args).await?;
        match word(&reply, 0) {
            "published" => Ok(Ok(())),
            "stale" => Ok(Err(word(&reply, 1).to_owned())),
            _ => Err(bad("publish", &reply)),
        }
    }

    /// Gives up the claim under `fence`: no tokens came, and the refresh token was not used.
    /// Returns whether the claim was still the caller's.
    pub async fn release(&self, conn: &str, now_ms: u64, fence: u64) -> Result<bool, StoreError> {
        let reply = self.run("release", now_ms, conn, vec![fence.to_string()]).await?;
        Ok(word(&reply, 0) == "released")
    }

    /// Records that the holder of the claim under `fence` lost the token endpoint's answer: the
    /// refresh token is in doubt for every replica from now on. Returns whether the claim was
    /// still the caller's.
    pub async fn doubt(&self, conn: &str, now_ms: u64, fence: u64) -> Result<bool, StoreError> {
        let reply = self.run("doubt", now_ms, conn, vec![fence.to_string()]).await?;
        Ok(word(&reply, 0) == "doubted")
    }

    /// Records that the token endpoint refused the refresh token of the claim under `fence`.
    pub async fn refuse(&self, conn: &str, now_ms: u64, fence: u64) -> Result<bool, StoreError> {
        let reply = self.run("refuse", now_ms, conn, vec![fence.to_string()]).await?;
        Ok(word(&reply, 0) == "refused")
    }
}
