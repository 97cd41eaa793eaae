//! One refresh token presented: the flight written down in the store before it goes out and
//! cleared once an answer settles it, and the answer of a lost flight taken if it still comes.

use crate::config::OAuthConfig;
use crate::sessions::accounts::Ticket;
use crate::sessions::refresh_outcome::{next_tokens, refreshed};
use crate::sessions::token_endpoint::{Reply, ask};
use crate::sessions::token_store::StoredTokens;
use crate::state::gateway::Gateway;
use ferroute_core::oauth::Answer;
use hyper_util::client::legacy::connect::Connect;
use std::sync::Arc;
use tokio::sync::oneshot;

/// Presents `ticket`'s refresh token to the token endpoint once, the flight written down in the
/// store first (a restart then knows the token may have been used) and cleared when the answer
/// settles the token without new ones (those clear it as they are stored).
pub(crate) async fn present<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Gateway<C>,
    connection: &str,
    o: &OAuthConfig,
    ticket: &Ticket,
) -> Reply {
    let generation = ticket.flight.generation;
    if let Some(store) = gw.store.as_deref()
        && let Err(e) = store.begin_flight(connection, generation, gw.clock.wall_now_ms())
    {
        return Reply::Retry(format!("the refresh could not be written down first ({e}); nothing was presented"));
    }
    let reply = ask(gw, connection, o, &ticket.refresh_token).await;
    if matches!(reply, Reply::Retry(_) | Reply::Refused(_))
        && let Some(store) = gw.store.as_deref()
        && let Err(e) = store.end_flight(connection, generation)
    {
        tracing::warn!(connection, error = %e, "could not clear a settled OAuth refresh in the store");
    }
    reply
}

/// Waits for the answer `ticket`'s lost refresh may still get; new tokens are stored and taken
/// as if they had come in time (`publish` first, when replicas share the tokens).
pub(crate) async fn take_late<C: Connect + Clone + Send + Sync + 'static>(
    gw: Arc<Gateway<C>>,
    connection: String,
    ticket: Ticket,
    late: oneshot::Receiver<Reply>,
    publish: impl AsyncFnOnce(&Arc<Gateway<C>>, &StoredTokens) -> bool,
) {
    let Ok(Reply::Tokens { access, refresh, lifetime }) = late.await else {
        tracing::warn!(connection, "the lost OAuth refresh answer did not come: the refresh token stays in doubt");
        return;
    };
    let now = gw.clock.wall_now_ms();
    let Some(tokens) = next_tokens(&gw, &connection, &ticket, access, refresh, lifetime, now) else { return };
    if !publish(&gw, &tokens).await {
        return;
    }
    tracing::info!(connection, "the lost OAuth refresh answer came late; taking its tokens");
    let new = Some((&tokens, gw.store.as_deref()));
    let taken = gw.accounts.finish(&connection, &ticket, Answer::Refreshed(lifetime), new, now);
    refreshed(&gw, &connection, lifetime, taken);
}
