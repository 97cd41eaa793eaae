//! The OAuth accounts of the gateway's connections: each one's current tokens (what requests
//! send), its refresh schedule ([`Account`]) and a signal that a refresh ended, shared by every
//! gateway a reload builds.
//!
//! Where the tokens come from at start and at each reload: the store's, while they descend
//! from the refresh token the config names (see [`crate::sessions::token_store`]); else the
//! config's, which are then written to the store (a new sign-in: the connection's `expired`
//! state ends, its id and history stay).

use crate::config::{Config, ConnectionConfig};
use crate::sessions::sealed::Sealer;
use crate::sessions::token_store::{StoredTokens, origin_of};
use crate::state::store::{Store, StoreError};
use ferroute_core::oauth::{Account, Answer, Begin, Flight, Lifetime, RefreshState, Why};
use http::HeaderValue;
use serde::Serialize;
use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::Notify;
use tokio::sync::futures::OwnedNotified;

/// What a request sends for an OAuth connection.
#[derive(Debug, Clone)]
pub struct Credential {
    /// `Bearer <access token>`, marked sensitive.
    pub authorization: HeaderValue,
    /// The tokens' generation (a refused request names it when it asks for a refresh).
    pub generation: u64,
    /// The account id the backend expects with them (the config's, or an import's).
    pub account_id: Option<HeaderValue>,
}

/// A refresh about to be made: the refresh token it presents, once (unless the flight only
/// looks, [`Flight::presents`]).
#[derive(Clone)]
pub struct Ticket {
    /// The flight it belongs to.
    pub flight: Flight,
    /// The refresh token to present.
    pub refresh_token: String,
}

/// What health and `ferroute accounts list` show of an account (never a token).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct View {
    /// When the access token expires (Unix ms).
    pub expires_at: u64,
    /// When the tokens were last refreshed (Unix ms).
    pub last_refresh: Option<u64>,
    /// When the next refresh is due (Unix ms).
    pub next_refresh: Option<u64>,
    /// Failed refreshes since the last success.
    pub failures: u32,
    /// `valid`, `refreshing`, `retrying`, `in_doubt` or `needs_sign_in`.
    pub state: &'static str,
    /// Whether the refresh token is in doubt: a refresh's answer was lost after the endpoint
    /// may have rotated it, so it is never presented again (the access token serves until it
    /// expires; then the account needs a new sign-in).
    pub in_doubt: bool,
}

struct Entry {
    account: Account,
    credential: Credential,
    access_token: String,
    refresh_token: String,
    origin: String,
    /// Wakes the requests waiting for a flight to end. Waiters register while the entry is
    /// locked, so none misses the end; a `Notify` wakes them in the order they came (a
    /// `watch` channel would spread them over randomly chosen slots, which the simulation
    /// would see as a different order per run).
    ended: Arc<Notify>,
}

/// Every OAuth connection's account, by connection id.
pub struct Accounts {
    sealer: Sealer,
    entries: Mutex<BTreeMap<String, Entry>>,
    /// Told when a refresh may have become due at another time (accounts added or replaced, a
    /// flight ended), so the background refresher waits for that or the next due time.
    changed: Arc<Notify>,
    /// Whether tokens were taken from the config or the local store since they were last
    /// offered to the store replicas share.
    unshared: AtomicBool,
}

impl std::fmt::Debug for Accounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Accounts").field("connections", &self.lock().keys().collect::<Vec<_>>()).finish()
    }
}

fn bearer(access_token: &str) -> Option<HeaderValue> {
    let mut v = HeaderValue::try_from(format!("Bearer {access_token}")).ok()?;
    v.set_sensitive(true);
    Some(v)
}

impl Accounts {
    /// No accounts yet; [`Accounts::sync`] adds the config's.
    pub fn new(sealer: Sealer) -> Accounts {
        Accounts {
            sealer,
            entries: Mutex::new(BTreeMap::new()),
            changed: Arc::new(Notify::new()),
            unshared: AtomicBool::new(true),
        }
    }

    /// What the background refresher waits on besides the next due time.
    pub fn changed(&self) -> Arc<Notify> {
        Arc::clone(&self.changed)
    }

    /// The sealer tokens are stored with.
    pub fn sealer(&self) -> &Sealer {
        &self.sealer
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Entry>> {
        // Each update is one synchronous step; a poisoned lock still holds consistent entries.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Brings the accounts in line with `config` (at start and after each reload): adds new
    /// OAuth connections, drops those gone, and takes the config's tokens where they are a new
    /// sign-in. Returns the connections signed in anew (their `expired` state should end) and
    /// the problems met (an undecryptable store row, a failed write), each naming its
    /// connection.
    pub fn sync(&self, config: &Config, store: Option<&Store>, now_ms: u64) -> (Vec<String>, Vec<String>) {
        let mut renewed = Vec::new();
        let mut problems = Vec::new();
        let mut entries = self.lock();
        entries.retain(|id, _| config.connections.iter().any(|c| &c.id == id && c.oauth.is_some()));
        for c in &config.connections {
            let Some(o) = &c.oauth else { continue };
            let origin = origin_of(&o.refresh_token);
            // A row that does not open (another key, altered) is left as it is: it may hold the
            // only live refresh token, and a corrected key opens it again.
            let mut unreadable = false;
            let stored = match store.map(|s| s.load_tokens(&c.id, &self.sealer)) {
                Some(Ok(t)) => t,
                Some(Err(e)) => {
                    problems
                        .push(format!("{}: {e}; using the config's tokens without storing them over the row", c.id));
                    unreadable = true;
                    None
                }
                None => None,
            };
            // The same sign-in as the one held, and nothing newer stored (an import): keep it.
            let held = entries.get(&c.id).filter(|e| e.origin == origin).map(|e| e.account.generation());
            if held.is_some_and(|g| stored.as_ref().is_none_or(|t| t.origin != origin || t.generation <= g)) {
                if let Some(e) = entries.get_mut(&c.id) {
                    e.account.set_refresh_at(o.refresh_at());
                }
                continue;
            }
            let (tokens, new_sign_in) = match stored {
                Some(t) if t.origin == origin => (t, held.is_some()),
                other => {
                    let generation = other.map_or(0, |t| t.generation + 1);
                    let tokens = StoredTokens {
                        access_token: o.access_token.clone(),
                        refresh_token: o.refresh_token.clone(),
                        lifetime: o.lifetime(now_ms),
                        generation,
                        origin: origin.clone(),
                        last_refresh_ms: None,
                    };
                    if let Some(s) = store.filter(|_| !unreadable)
                        && let Err(e) = s.save_tokens(&c.id, &tokens, &self.sealer, now_ms)
                    {
                        problems.push(format!("{}: {e}", c.id));
                    }
                    (tokens, entries.contains_key(&c.id) || generation > 0)
                }
            };
            let Some(authorization) = bearer(&tokens.access_token) else {
                problems.push(format!("{}: the access token cannot be sent as a header", c.id));
                continue;
            };
            let mut account = Account::new(tokens.lifetime, o.refresh_at(), tokens.generation)
                .with_last_refresh(tokens.last_refresh_ms);
            // A flight written down and never settled: its refresh token may have been used.
            match store.filter(|_| !unreadable).map(|s| s.open_flight(&c.id)) {
                Some(Ok(Some(g))) if g == tokens.generation => {
                    tracing::warn!(connection = %c.id, "a refresh of these OAuth tokens never settled: the refresh token is in doubt and is not presented again");
                    account = account.in_doubt();
                }
                Some(Err(e)) => problems.push(format!("{}: {e}", c.id)),
                _ => {}
            }
            if new_sign_in {
                renewed.push(c.id.clone());
            }
            let ended = entries.remove(&c.id).map_or_else(|| Arc::new(Notify::new()), |e| e.ended);
            let imported = match store.map(|s| s.load_account_id(&c.id)) {
                Some(Err(e)) => {
                    problems.push(format!("{}: {e}", c.id));
                    None
                }
                Some(Ok(a)) => a,
                None => None,
            };
            let account_id = o.account_id.clone().or(imported).and_then(|a| HeaderValue::try_from(a).ok());
            let credential = Credential { authorization, generation: account.generation(), account_id };
            let (access_token, refresh_token) = (tokens.access_token, tokens.refresh_token);
            entries.insert(c.id.clone(), Entry { account, credential, access_token, refresh_token, origin, ended });
            self.unshared.store(true, Ordering::Relaxed);
        }
        drop(entries);
        self.changed.notify_one();
        (renewed, problems)
    }

    /// Whether tokens were taken from the config or the local store since this was last asked
    /// (they should be offered to the store replicas share).
    pub fn take_unshared(&self) -> bool {
        self.unshared.swap(false, Ordering::Relaxed)
    }

    /// Whether `connection` is an OAuth account.
    pub fn contains(&self, connection: &str) -> bool {
        self.lock().contains_key(connection)
    }

    /// What a request to `connection` sends now.
    pub fn credential(&self, connection: &str) -> Option<Credential> {
        self.lock().get(connection).map(|e| e.credential.clone())
    }

    /// Asks for a refresh of `connection` at `now_ms`: the ticket when this caller is to make
    /// it, and a waiter that completes when the flight in progress ends.
    pub fn begin(
        &self,
        connection: &str,
        now_ms: u64,
        why: Why,
    ) -> (Begin, Option<Ticket>, Option<Pin<Box<OwnedNotified>>>) {
        let mut entries = self.lock();
        let Some(e) = entries.get_mut(connection) else { return (Begin::No, None, None) };
        let begin = e.account.begin(now_ms, why);
        let ticket = match begin {
            Begin::Refresh(flight) => Some(Ticket { flight, refresh_token: e.refresh_token.clone() }),
            _ => None,
        };
        let mut waiter = Box::pin(Arc::clone(&e.ended).notified_owned());
        waiter.as_mut().enable();
        (begin, ticket, Some(waiter))
    }

    /// Ends a flight. With new tokens (`Some`), they are written to `store` first and requests
    /// send them from then on — all under the accounts lock, so that a refresh a new sign-in
    /// overtook (a reload, an import) neither overwrites the stored sign-in nor is adopted.
    /// Returns whether the answer was taken (a stale flight's is not).
    pub fn finish(
        &self,
        connection: &str,
        ticket: &Ticket,
        answer: Answer,
        new: Option<(&StoredTokens, Option<&Store>)>,
        now_ms: u64,
    ) -> bool {
        let mut entries = self.lock();
        let Some(e) = entries.get_mut(connection) else { return false };
        if let Some((t, Some(store))) = new
            && e.account.is_current(ticket.flight)
            && let Err(err) = store.save_tokens(connection, t, &self.sealer, now_ms)
        {
            tracing::error!(connection, error = %err, "could not store refreshed OAuth tokens; using them anyway");
        }
        let taken = e.account.finish(ticket.flight, answer, now_ms);
        if taken && let Some((t, _)) = new {
            match bearer(&t.access_token) {
                Some(authorization) => {
                    let account_id = e.credential.account_id.take();
                    e.credential = Credential { authorization, generation: e.account.generation(), account_id };
                    e.access_token.clone_from(&t.access_token);
                    e.refresh_token.clone_from(&t.refresh_token);
                }
                None => tracing::error!(connection, "the refreshed access token cannot be sent as a header"),
            }
        }
        e.ended.notify_waiters();
        self.changed.notify_one();
        taken
    }

    /// The tokens to store after a refresh of `connection` that returned `access`, `refresh`
    /// and `lifetime` (the generation and origin carried on).
    pub fn next_tokens(
        &self,
        connection: &str,
        access: String,
        refresh: String,
        lifetime: Lifetime,
        now_ms: u64,
    ) -> Option<StoredTokens> {
        let entries = self.lock();
        let e = entries.get(connection)?;
        Some(StoredTokens {
            access_token: access,
            refresh_token: refresh,
            lifetime,
            generation: e.account.generation() + 1,
            origin: e.origin.clone(),
            last_refresh_ms: Some(now_ms),
        })
    }

    /// `connection`'s current tokens in full (to offer them to the store replicas share).
    pub fn snapshot(&self, connection: &str) -> Option<StoredTokens> {
        self.lock().get(connection).map(|e| StoredTokens {
            access_token: e.access_token.clone(),
            refresh_token: e.refresh_token.clone(),
            lifetime: e.account.lifetime(),
            generation: e.account.generation(),
            origin: e.origin.clone(),
            last_refresh_ms: e.account.last_refresh_ms(),
        })
    }

    /// The OAuth connections, by id.
    pub fn connections(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    /// Takes tokens another replica stored, outside any flight of this one (found when joining
    /// the shared store): when they descend from the same sign-in at a later generation, or
    /// are another sign-in. They are written to `store` too. Returns whether they were taken.
    pub fn take(&self, connection: &str, t: &StoredTokens, store: Option<&Store>, now_ms: u64) -> bool {
        let mut entries = self.lock();
        let Some(e) = entries.get_mut(connection) else { return false };
        if e.origin == t.origin && t.generation <= e.account.generation() {
            return false;
        }
        let Some(authorization) = bearer(&t.access_token) else { return false };
        if let Some(s) = store
            && let Err(err) = s.save_tokens(connection, t, &self.sealer, now_ms)
        {
            tracing::error!(connection, error = %err, "could not store the shared OAuth tokens; using them anyway");
        }
        let refresh_at = e.account.refresh_at();
        e.account = Account::new(t.lifetime, refresh_at, t.generation).with_last_refresh(t.last_refresh_ms);
        e.credential =
            Credential { authorization, generation: t.generation, account_id: e.credential.account_id.take() };
        e.access_token.clone_from(&t.access_token);
        e.refresh_token.clone_from(&t.refresh_token);
        e.origin.clone_from(&t.origin);
        e.ended.notify_waiters();
        drop(entries);
        self.changed.notify_one();
        true
    }

    /// The earliest time any account's refresh is due (Unix ms).
    pub fn next_due_ms(&self) -> Option<u64> {
        self.lock().values().filter_map(|e| e.account.next_refresh_ms()).min()
    }

    /// Starts the refresh of every account due at `now_ms`: each one's flight and the refresh
    /// token it presents; and the accounts whose in-doubt refresh token lapsed with the access
    /// token (they need a new sign-in from now on).
    pub fn start_due(&self, now_ms: u64) -> (Vec<(String, Ticket)>, Vec<String>) {
        let mut entries = self.lock();
        let (mut started, mut lapsed) = (Vec::new(), Vec::new());
        for (id, e) in entries.iter_mut() {
            match e.account.begin(now_ms, Why::Scheduled) {
                Begin::Refresh(flight) => {
                    started.push((id.clone(), Ticket { flight, refresh_token: e.refresh_token.clone() }));
                }
                Begin::Lapsed => lapsed.push(id.clone()),
                Begin::No | Begin::InFlight | Begin::Newer => {}
            }
        }
        (started, lapsed)
    }

    /// What health shows of `connection`'s account.
    pub fn view(&self, connection: &str) -> Option<View> {
        self.lock().get(connection).map(|e| View {
            expires_at: e.account.lifetime().expires_at_ms,
            last_refresh: e.account.last_refresh_ms(),
            next_refresh: e.account.next_refresh_ms(),
            failures: e.account.failures(),
            state: e.account.state().as_str(),
            in_doubt: e.account.doubted(),
        })
    }

    /// Whether `connection`'s account waits for a new sign-in.
    pub fn needs_sign_in(&self, connection: &str) -> bool {
        self.lock().get(connection).is_some_and(|e| e.account.state() == RefreshState::NeedsSignIn)
    }
}

/// Writes tokens read from a file an official client stored (`ferroute accounts import`) for
/// OAuth connection `c`, so that the gateway's next start (or reload) uses them: they descend
/// from the config's sign-in, one generation past what the store held.
pub fn import(
    store: &Store,
    sealer: &Sealer,
    c: &ConnectionConfig,
    (access_token, refresh_token, account_id): (String, String, Option<&str>),
    lifetime: Lifetime,
    now_ms: u64,
) -> Result<StoredTokens, StoreError> {
    let o = c.oauth.as_ref().ok_or_else(|| StoreError::Corrupt(format!("{} is not an OAuth connection", c.id)))?;
    let previous = store.load_tokens(&c.id, sealer).ok().flatten();
    let tokens = StoredTokens {
        access_token,
        refresh_token,
        lifetime,
        generation: previous.map_or(0, |t| t.generation + 1),
        origin: origin_of(&o.refresh_token),
        last_refresh_ms: Some(now_ms),
    };
    store.save_tokens(&c.id, &tokens, sealer, now_ms)?;
    if let Some(a) = account_id {
        store.save_account_id(&c.id, a)?;
    }
    Ok(tokens)
}

#[cfg(test)]
#[path = "accounts_tests.rs"]
mod tests;
