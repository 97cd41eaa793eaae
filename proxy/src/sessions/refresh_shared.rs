//! Refreshing an OAuth account when replicas share state: the store is the tokens' source of
//! truth (see [`crate::replicas::shared_tokens`]). A replica whose refresh is due claims it
//! there; with the claim it presents the refresh token once and publishes the new tokens under
//! the claim's fence before any of its requests send them; without it, it looks again until the
//! holder has published and takes the stored tokens, presenting nothing. A replica that cannot
//! reach the store does not refresh (another one may be presenting the same refresh token).
//!
//! When the store cannot be reached *after* the token endpoint answered, the tokens are used
//! here at once (they are the only copy; the claim, lapsed unpublished, keeps every other
//! replica from presenting the old refresh token) and published from a task that tries until
//! the store takes them or a newer generation makes them moot.
//!
//! When the token endpoint's answer is lost, the holder tells the store the refresh token is
//! in doubt (its claim lapses at once, unpublished): no replica presents it again. The holder
//! still publishes the answer if it comes late; every replica looks for that while its access
//! token works, and its connection ends (a new sign-in is needed) when the access token does.

use crate::config::OAuthConfig;
use crate::replicas::link::Replicas;
use crate::replicas::shared_tokens::{Claim, Row, SharedTokens};
use crate::sessions::accounts::Ticket;
use crate::sessions::flight::{present as present_once, take_late};
use crate::sessions::refresh_outcome::{lost, next_tokens, observe, refreshed, refused, retry, taken};
use crate::sessions::token_endpoint::{Reply, TOKEN_TIMEOUT};
use crate::sessions::token_store::{StoredTokens, open_blob, seal_blob};
use crate::state::gateway::Gateway;
use crate::state::interleave::call;
use ferroute_core::oauth::Answer;
use hyper_util::client::legacy::connect::Connect;
use std::sync::Arc;
use std::time::Duration;

/// How long a claim holds: longer than a token request may take, so that a live holder always
/// publishes before its claim lapses.
pub const CLAIM_TTL: Duration = Duration::from_secs(2 * TOKEN_TIMEOUT.as_secs());
/// How often a replica that found the refresh claimed by another looks again.
const LOOK_AGAIN: Duration = Duration::from_millis(250);
/// When the store did not answer a claim: how long until the account is looked at again.
const UNREACHABLE: Duration = Duration::from_secs(1);
/// When a refresh token is in doubt, or this replica's own publication has not landed: how
/// long until the account is looked at again.
const DEFER: Duration = Duration::from_secs(5);

fn row_of(t: &StoredTokens, blob: String) -> Row {
    Row {
        generation: t.generation,
        origin: t.origin.clone(),
        blob,
        lifetime: t.lifetime,
        last_refresh_ms: t.last_refresh_ms,
        refused: false,
    }
}

/// The tokens in a stored row, opened with this replica's key.
fn tokens_of<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Gateway<C>,
    connection: &str,
    row: &Row,
) -> Option<StoredTokens> {
    match open_blob(gw.accounts.sealer(), connection, &row.blob) {
        Ok((access_token, refresh_token)) => Some(StoredTokens {
            access_token,
            refresh_token,
            lifetime: row.lifetime,
            generation: row.generation,
            origin: row.origin.clone(),
            last_refresh_ms: row.last_refresh_ms,
        }),
        Err(e) => {
            tracing::error!(connection, error = %e, "the shared OAuth tokens do not open (is server.secret_key the same on every replica?)");
            None
        }
    }
}

/// Offers every account's tokens to the shared store (on joining it, and again after finding
/// it lost) and takes what the store holds where that is further along or another sign-in.
pub async fn seed<C: Connect + Clone + Send + Sync + 'static>(gw: &Gateway<C>, shared: &SharedTokens) {
    for connection in gw.accounts.connections() {
        let Some(mine) = gw.accounts.snapshot(&connection) else { continue };
        let blob = match seal_blob(gw.accounts.sealer(), &connection, &mine) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(connection, error = %e, "cannot seal OAuth tokens for the shared store");
                continue;
            }
        };
        let now = gw.clock.wall_now_ms();
        let stored = match shared.seed(&connection, now, &row_of(&mine, blob)).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(connection, error = %e, "could not offer OAuth tokens to the shared store");
                continue;
            }
        };
        if stored.origin == mine.origin && stored.generation <= mine.generation {
            continue;
        }
        let Some(t) = tokens_of(gw, &connection, &stored) else { continue };
        if gw.accounts.take(&connection, &t, gw.store.as_deref(), now) {
            taken(gw, &connection, t.generation, !stored.refused);
        }
    }
}

/// Makes the refresh `ticket` allows through the shared store (see the module's text).
pub async fn make<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Arc<Gateway<C>>,
    link: &Replicas,
    connection: &str,
    o: &OAuthConfig,
    ticket: &Ticket,
) -> bool {
    let shared = link.tokens();
    let give_up_ms = gw.clock.wall_now_ms().saturating_add(ms(CLAIM_TTL));
    let mut seeded = false;
    loop {
        let now = gw.clock.wall_now_ms();
        let from = ticket.flight.generation;
        let claim = call("tokens.claim", shared.claim(connection, now, link.name(), from, CLAIM_TTL)).await;
        let now = gw.clock.wall_now_ms();
        let defer = |at_ms: u64| {
            gw.accounts.finish(connection, ticket, Answer::Deferred { at_ms }, None, now);
            observe(gw, connection, "deferred");
            false
        };
        match claim {
            Err(e) => {
                // Not this account's failure: the follower already says the store is lost.
                // Looked at again soon, to take what another replica refreshed meanwhile.
                tracing::debug!(connection, error = %e, "the shared store is unreachable: the refresh is not claimed");
                gw.metrics.oauth_refresh(connection, "retry");
                return defer(now.saturating_add(ms(UNREACHABLE)));
            }
            Ok(Claim::Nothing) if !seeded => {
                seed(gw, shared).await;
                seeded = true;
            }
            Ok(Claim::Nothing | Claim::Behind) => return defer(now.saturating_add(ms(DEFER))),
            Ok(Claim::Newer(row)) => {
                let Some(t) = tokens_of(gw, connection, &row) else { return defer(now.saturating_add(ms(DEFER))) };
                let answer = Answer::Taken { lifetime: t.lifetime, generation: t.generation };
                let used = gw.accounts.finish(connection, ticket, answer, Some((&t, gw.store.as_deref())), now);
                taken(gw, connection, t.generation, used);
                return used;
            }
            Ok(Claim::Refused) => {
                gw.accounts.finish(connection, ticket, Answer::InvalidGrant, None, now);
                refused(gw, connection, "another replica's refresh of this refresh token was refused");
                return false;
            }
            Ok(Claim::Busy { until_ms }) if now >= give_up_ms => return defer(until_ms),
            Ok(Claim::Busy { .. }) => tokio::time::sleep(LOOK_AGAIN).await,
            Ok(Claim::Doubt) => {
                if ticket.flight.presents {
                    tracing::warn!(
                        connection,
                        "a claim to refresh lapsed unpublished: the refresh token is in doubt and is not presented again"
                    );
                    lost(gw, connection, "another replica's refresh of this refresh token got no settled answer");
                }
                let look_at_ms = Some(now.saturating_add(ms(DEFER)));
                gw.accounts.finish(connection, ticket, Answer::Lost { look_at_ms }, None, now);
                return false;
            }
            Ok(Claim::Granted { fence }) if !ticket.flight.presents => {
                // The store forgot the doubt (lost, then seeded again): this replica has not.
                if let Err(e) = shared.doubt(connection, now, fence).await {
                    tracing::warn!(connection, error = %e, "could not tell the shared store the refresh token is in doubt; the claim lapses by itself");
                }
                let look_at_ms = Some(now.saturating_add(ms(DEFER)));
                gw.accounts.finish(connection, ticket, Answer::Lost { look_at_ms }, None, now);
                return false;
            }
            Ok(Claim::Granted { fence }) => return present(gw, shared, connection, o, ticket, fence).await,
        }
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Holding the claim under `fence`: presents the refresh token and settles the claim.
async fn present<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Arc<Gateway<C>>,
    shared: &SharedTokens,
    connection: &str,
    o: &OAuthConfig,
    ticket: &Ticket,
    fence: u64,
) -> bool {
    let reply = present_once(gw, connection, o, ticket).await;
    let now = gw.clock.wall_now_ms();
    match reply {
        Reply::Tokens { access, refresh, lifetime } => {
            let Some(tokens) = next_tokens(gw, connection, ticket, access, refresh, lifetime, now) else {
                return false;
            };
            if !publish(gw, shared, connection, fence, &tokens).await {
                gw.accounts.finish(connection, ticket, Answer::Deferred { at_ms: now }, None, now);
                return false;
            }
            let new = Some((&tokens, gw.store.as_deref()));
            let taken = gw.accounts.finish(connection, ticket, Answer::Refreshed(lifetime), new, now);
            refreshed(gw, connection, lifetime, taken);
            taken
        }
        Reply::Retry(why) => {
            if let Err(e) = shared.release(connection, now, fence).await {
                tracing::warn!(connection, error = %e, "could not release the claim to refresh; it lapses by itself");
            }
            gw.accounts.finish(connection, ticket, Answer::Retryable, None, now);
            retry(gw, connection, &why);
            false
        }
        Reply::Lost { why, late } => {
            if let Err(e) = shared.doubt(connection, now, fence).await {
                tracing::warn!(connection, error = %e, "could not tell the shared store the refresh token is in doubt; the claim lapses by itself");
            }
            let look_at_ms = Some(now.saturating_add(ms(DEFER)));
            gw.accounts.finish(connection, ticket, Answer::Lost { look_at_ms }, None, now);
            lost(gw, connection, &why);
            if let Some(late) = late {
                let (gw, shared, connection, ticket) =
                    (Arc::clone(gw), shared.clone(), connection.to_owned(), ticket.clone());
                let name = connection.clone();
                let publish =
                    async move |gw: &Arc<Gateway<C>>, t: &StoredTokens| publish(gw, &shared, &name, fence, t).await;
                tokio::spawn(take_late(gw, connection, ticket, late, publish));
            }
            false
        }
        Reply::Refused(why) => {
            if let Err(e) = shared.refuse(connection, now, fence).await {
                tracing::warn!(connection, error = %e, "could not tell the shared store the refresh token was refused");
            }
            gw.accounts.finish(connection, ticket, Answer::InvalidGrant, None, now);
            refused(gw, connection, &why);
            false
        }
    }
}

/// Publishes the tokens a refresh under `fence` got; when the store cannot be reached, they are
/// used here anyway and published from a task once it answers. False when the store refused
/// them (another replica's newer tokens won).
async fn publish<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Arc<Gateway<C>>,
    shared: &SharedTokens,
    connection: &str,
    fence: u64,
    tokens: &StoredTokens,
) -> bool {
    let row = match seal_blob(gw.accounts.sealer(), connection, tokens) {
        Ok(blob) => row_of(tokens, blob),
        Err(e) => {
            tracing::error!(connection, error = %e, "cannot seal the refreshed OAuth tokens");
            return false;
        }
    };
    let now = gw.clock.wall_now_ms();
    match call("tokens.publish", shared.publish(connection, now, fence, &row)).await {
        Ok(Ok(())) => true,
        Ok(Err(why)) => {
            // Only if the store lost this claim and another sign-in or replica's tokens won:
            // the store holds what won.
            tracing::error!(connection, %why, "the shared store did not take the refreshed OAuth tokens");
            false
        }
        Err(e) => {
            tracing::warn!(connection, error = %e, "could not publish the refreshed OAuth tokens; using them here and publishing them when the store answers");
            let (gw, shared, connection) = (Arc::clone(gw), shared.clone(), connection.to_owned());
            tokio::spawn(async move { publish_later(&gw, &shared, &connection, fence, row).await });
            true
        }
    }
}

/// Publishes tokens the store could not take when they came, until it takes them or holds a
/// generation at least as new.
async fn publish_later<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Gateway<C>,
    shared: &SharedTokens,
    connection: &str,
    fence: u64,
    row: Row,
) {
    loop {
        tokio::time::sleep(LOOK_AGAIN).await;
        let now = gw.clock.wall_now_ms();
        match shared.publish(connection, now, fence, &row).await {
            Ok(Ok(())) => {
                tracing::info!(connection, generation = row.generation, "published the refreshed OAuth tokens");
                observe(gw, connection, "published");
                return;
            }
            Ok(Err(why)) => {
                tracing::error!(connection, %why, "the shared store no longer takes the refreshed OAuth tokens");
                return;
            }
            Err(_) => {}
        }
    }
}
