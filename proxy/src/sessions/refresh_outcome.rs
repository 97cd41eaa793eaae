//! What a refresh that ended does to the rest of the gateway, however it was made (alone, or
//! through the store replicas share): the metric, the log line, and the connection's state.

use crate::sessions::accounts::Ticket;
use crate::sessions::token_store::StoredTokens;
use crate::state::gateway::{Gateway, Observed};
use ferroute_core::engine::OutcomeKind;
use ferroute_core::oauth::Lifetime;
use hyper_util::client::legacy::connect::Connect;

/// Tells the gateway's observer (the simulation's log) what happened to `connection`'s tokens.
pub fn observe<C: Connect + Clone + Send + Sync + 'static>(gw: &Gateway<C>, connection: &str, what: &'static str) {
    let generation = gw.accounts.credential(connection).map_or(0, |c| c.generation);
    gw.observe(gw.clock.now(), Observed::Tokens { connection, what, generation });
    let data = serde_json::json!({"connection": connection, "what": what, "generation": generation});
    gw.feed.publish("oauth", gw.clock.wall_now_ms(), data);
}

/// The tokens to store after the token endpoint answered `ticket`'s refresh of `connection`
/// (the refresh token kept when the endpoint did not rotate it).
pub fn next_tokens<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Gateway<C>,
    connection: &str,
    ticket: &Ticket,
    access: String,
    refresh: Option<String>,
    lifetime: Lifetime,
    now_ms: u64,
) -> Option<StoredTokens> {
    let refresh = refresh.unwrap_or_else(|| ticket.refresh_token.clone());
    gw.accounts.next_tokens(connection, access, refresh, lifetime, now_ms)
}

/// New tokens with `lifetime` are in use (`taken`; else a newer sign-in overtook them): a
/// connection a refused token ended (while the endpoint was down) serves again.
pub fn refreshed<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Gateway<C>,
    connection: &str,
    lifetime: Lifetime,
    taken: bool,
) {
    observe(gw, connection, "refreshed");
    if taken {
        serves_again(gw, connection);
    }
    gw.metrics.oauth_refresh(connection, "refreshed");
    tracing::info!(connection, expires_at_ms = lifetime.expires_at_ms, "OAuth tokens refreshed");
}

/// Tokens another replica stored (generation `generation`) are in use here; with `renew`, a
/// connection a refused token ended serves again.
pub fn taken<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Gateway<C>,
    connection: &str,
    generation: u64,
    renew: bool,
) {
    observe(gw, connection, "taken");
    tracing::info!(connection, generation, "took the OAuth tokens another replica stored");
    if renew {
        serves_again(gw, connection);
    }
}

/// New credentials end the connection's `expired` state (never a ban, a cooldown or exhausted
/// credits).
fn serves_again<C: Connect + Clone + Send + Sync + 'static>(gw: &Gateway<C>, connection: &str) {
    let at = gw.clock.now();
    if gw.with_engine(|e| e.renew_connection(at, connection)) {
        tracing::info!(connection, "new OAuth tokens: the expired connection serves again");
        gw.settle();
    }
}

/// The refresh got no answer about the refresh token (`why`): the account tries again later.
pub fn retry<C: Connect + Clone + Send + Sync + 'static>(gw: &Gateway<C>, connection: &str, why: &str) {
    gw.metrics.oauth_refresh(connection, "retry");
    observe(gw, connection, "retry");
    let next_ms = gw.accounts.view(connection).and_then(|v| v.next_refresh);
    tracing::warn!(connection, %why, ?next_ms, "OAuth refresh failed; trying again later");
}

/// The refresh token was refused (`why`): an account-level outcome of the connection, which
/// ends as `expired` until a new sign-in.
pub fn refused<C: Connect + Clone + Send + Sync + 'static>(gw: &Gateway<C>, connection: &str, why: &str) {
    gw.metrics.oauth_refresh(connection, "invalid_grant");
    observe(gw, connection, "refused");
    tracing::error!(connection, %why, "OAuth refresh token refused: the account needs a new sign-in");
    end(gw, connection, &format!("{why}; sign in again"));
}

/// Ends `connection` as `expired` until a new sign-in (an account-level outcome), saying `why`.
fn end<C: Connect + Clone + Send + Sync + 'static>(gw: &Gateway<C>, connection: &str, why: &str) {
    let at = gw.clock.now();
    if let Some(c) = gw.config.connections.iter().find(|c| c.id == connection) {
        let outcome = Observed::Outcome { provider: &c.provider, connection, kind: OutcomeKind::AccountLevel };
        gw.observe(at, outcome);
    }
    gw.with_engine(|e| e.end_connection(at, connection, why));
    gw.settle();
}

/// The refresh's answer was lost after its request may have reached the endpoint (`why`): the
/// refresh token is in doubt and is not presented again; the access token serves until it
/// expires.
pub fn lost<C: Connect + Clone + Send + Sync + 'static>(gw: &Gateway<C>, connection: &str, why: &str) {
    gw.metrics.oauth_refresh(connection, "lost");
    observe(gw, connection, "in doubt");
    let expires_at_ms = gw.accounts.view(connection).map(|v| v.expires_at);
    tracing::error!(
        connection,
        %why,
        ?expires_at_ms,
        "OAuth refresh answer lost: the refresh token may have been rotated, so it is not presented again; serving on the access token until it expires"
    );
}

/// The access token expired while the refresh token was in doubt: the connection ends as
/// `expired` until a new sign-in, and says why.
pub fn lapsed<C: Connect + Clone + Send + Sync + 'static>(gw: &Gateway<C>, connection: &str) {
    gw.metrics.oauth_refresh(connection, "lapsed");
    observe(gw, connection, "lapsed");
    let why = "the refresh token is in doubt (a refresh's answer was lost, and the endpoint may have rotated it) and the access token has expired; sign in again";
    tracing::error!(connection, "{why}");
    end(gw, connection, why);
}
