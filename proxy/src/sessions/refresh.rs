//! Refreshing an OAuth account's tokens (RFC 6749 §6, `grant_type=refresh_token`), never on a
//! request's path unless an upstream refused the token: in the background when a refresh is
//! due ([`run`]), at once after a 401 ([`renew`]).
//!
//! One refresh per connection at a time (the account's flight); the flight is written down
//! before the refresh token is presented, and the new tokens are stored before any request
//! sends them. A refresh token is presented once, and again only after a try the endpoint did
//! not act on (a connect error, a 429, a 5xx naming an OAuth error). A try whose answer was lost
//! after sending (a timeout, a reset) leaves it in doubt: never presented again, the connection
//! serves on its access token, takes the lost answer if it still comes, and ends as `expired`
//! (needs a new sign-in) when the access token does. A refused grant (400 or 401 from the token
//! endpoint) ends the connection as `expired` until a new sign-in.

use crate::config::OAuthConfig;
use crate::sessions::accounts::Ticket;
use crate::sessions::flight::{present, take_late};
use crate::sessions::refresh_outcome::{lapsed, lost, next_tokens, refreshed, refused, retry};
use crate::sessions::token_endpoint::Reply;
use crate::state::gateway::Gateway;
use ferroute_core::oauth::{Answer, Begin, Why};
use hyper_util::client::legacy::connect::Connect;
use std::sync::Arc;
use std::time::Duration;

/// Refreshes `connection`'s tokens if `why` calls for it and no refresh is in flight; waits
/// (at most `wait`) for one that is. Returns whether newer tokens than the caller had are now
/// in use.
pub async fn refresh<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Arc<Gateway<C>>,
    connection: &str,
    why: Why,
    wait: Duration,
) -> bool {
    let Some(o) = gw.config.connections.iter().find(|c| c.id == connection).and_then(|c| c.oauth.clone()) else {
        return false;
    };
    let before = gw.accounts.credential(connection).map(|c| c.generation);
    let (begin, ticket, ended) = gw.accounts.begin(connection, gw.clock.wall_now_ms(), why);
    match (begin, ticket) {
        (Begin::Newer, _) => true,
        // On its own task: a caller that stops waiting must not abandon a refresh half made
        // (a refresh token presented and its answer never stored).
        (Begin::Refresh(_), Some(ticket)) => {
            let (gw, connection) = (Arc::clone(gw), connection.to_owned());
            tokio::spawn(async move { make(&gw, &connection, &o, &ticket).await }).await.unwrap_or(false)
        }
        (Begin::InFlight, _) => {
            if let Some(ended) = ended {
                let _ = tokio::time::timeout(wait, ended).await;
            }
            gw.accounts.credential(connection).map(|c| c.generation) != before
        }
        (Begin::Lapsed, _) => {
            lapsed(gw, connection);
            false
        }
        (Begin::No | Begin::Refresh(_), _) => false,
    }
}

/// Makes the refresh `ticket` allows: asks the token endpoint once, stores what it answers
/// before anything sends it, and ends the flight. With replicas sharing state, the claim and
/// the publication go through the shared store ([`crate::sessions::refresh_shared`]). Returns
/// whether new tokens are in use.
async fn make<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Arc<Gateway<C>>,
    connection: &str,
    o: &OAuthConfig,
    ticket: &Ticket,
) -> bool {
    if let Some(link) = gw.replicas() {
        let link = Arc::clone(link);
        return crate::sessions::refresh_shared::make(gw, &link, connection, o, ticket).await;
    }
    if !ticket.flight.presents {
        // In doubt, and no other replica to have published anything: wait for the expiry.
        let now = gw.clock.wall_now_ms();
        gw.accounts.finish(connection, ticket, Answer::Lost { look_at_ms: None }, None, now);
        return false;
    }
    let reply = present(gw, connection, o, ticket).await;
    let now = gw.clock.wall_now_ms();
    match reply {
        Reply::Tokens { access, refresh, lifetime } => {
            let Some(tokens) = next_tokens(gw, connection, ticket, access, refresh, lifetime, now) else {
                return false;
            };
            // Stored before any request sends them: a restart must not present the refresh
            // token this refresh just used up.
            let new = Some((&tokens, gw.store.as_deref()));
            let taken = gw.accounts.finish(connection, ticket, Answer::Refreshed(lifetime), new, now);
            refreshed(gw, connection, lifetime, taken);
            taken
        }
        Reply::Retry(why) => {
            gw.accounts.finish(connection, ticket, Answer::Retryable, None, now);
            retry(gw, connection, &why);
            false
        }
        Reply::Lost { why, late } => {
            gw.accounts.finish(connection, ticket, Answer::Lost { look_at_ms: None }, None, now);
            lost(gw, connection, &why);
            if let Some(late) = late {
                let (gw, connection, ticket) = (Arc::clone(gw), connection.to_owned(), ticket.clone());
                tokio::spawn(take_late(gw, connection, ticket, late, async |_, _| true));
            }
            false
        }
        Reply::Refused(why) => {
            gw.accounts.finish(connection, ticket, Answer::InvalidGrant, None, now);
            refused(gw, connection, &why);
            false
        }
    }
}

/// After an upstream refused the token a request carried (`generation`): refreshes (or waits
/// for the refresh in flight, at most `wait`). Returns whether the request should be sent
/// again with newer tokens.
pub async fn renew<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Arc<Gateway<C>>,
    connection: &str,
    generation: u64,
    wait: Duration,
) -> bool {
    tracing::info!(connection, "an upstream refused the OAuth access token; refreshing");
    tokio::time::timeout(wait, refresh(gw, connection, Why::Refused { generation }, wait)).await.unwrap_or(false)
}

/// The background refresher: starts the refresh of every account that is due (each on its own
/// task), then waits for the next due time or for the accounts to change (a reload, an import
/// taken, a flight that ended), whichever comes first.
pub async fn run<C: Connect + Clone + Send + Sync + 'static>(current: impl Fn() -> Arc<Gateway<C>>) {
    loop {
        let gw = current();
        let changed = gw.accounts.changed();
        // Tokens a reload took (a new sign-in, an import) reach the other replicas.
        if let Some(link) = gw.replicas()
            && gw.accounts.take_unshared()
        {
            crate::sessions::refresh_shared::seed(&gw, link.tokens()).await;
        }
        let now = gw.clock.wall_now_ms();
        let (due, ended) = gw.accounts.start_due(now);
        for connection in ended {
            lapsed(&gw, &connection);
        }
        for (connection, ticket) in due {
            let Some(o) = gw.config.connections.iter().find(|c| c.id == connection).and_then(|c| c.oauth.clone())
            else {
                // Not in this config (a reload raced the look): let the next look start it again.
                gw.accounts.finish(&connection, &ticket, Answer::Retryable, None, now);
                continue;
            };
            let gw = Arc::clone(&gw);
            tokio::spawn(async move { make(&gw, &connection, &o, &ticket).await });
        }
        let wait = gw.accounts.next_due_ms().map(|due| Duration::from_millis(due.saturating_sub(now)));
        drop(gw);
        match wait {
            Some(wait) => {
                tokio::select! {
                    biased;
                    () = changed.notified() => {}
                    () = tokio::time::sleep(wait) => {}
                }
            }
            None => changed.notified().await,
        }
    }
}
