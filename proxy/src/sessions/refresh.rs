//! Refreshing an OAuth account's tokens (RFC 6749 §6, `grant_type=refresh_token`), never on a
//! request's path unless an upstream refused the token: in the background when a refresh is
//! due ([`run`]), at once after a 401 ([`renew`]).
//!
//! One refresh per connection at a time (the account's flight); the new tokens are stored
//! before any request sends them; a refresh token is presented once, and again only after a
//! try that got no answer (transport error, timeout, 5xx, 429). A refused grant (400 or 401
//! from the token endpoint) ends the connection as `expired` until a new sign-in.

use crate::config::OAuthConfig;
use crate::sessions::accounts::Ticket;
use crate::state::gateway::{Gateway, Observed};
use bytes::Bytes;
use ferroute_core::engine::OutcomeKind;
use ferroute_core::oauth::{Answer, Begin, Lifetime, Why};
use http::{Request, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::connect::Connect;
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

/// How long the token endpoint may take to answer.
const TOKEN_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest token response read.
const MAX_TOKEN_BODY: usize = 64 * 1024;
/// An access token's lifetime when the token endpoint does not say (`expires_in`) and the
/// token is not a JWT with an `exp`.
const DEFAULT_LIFETIME_MS: u64 = 3_600_000;

#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
    #[serde(default)]
    refresh_token: Option<String>,
    #[serde(default)]
    expires_in: Option<u64>,
}

/// The `exp` claim (Unix seconds) of a JWT, if the token is one.
pub fn jwt_expiry_ms(token: &str) -> Option<u64> {
    use base64::Engine as _;
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    v.get("exp")?.as_u64()?.checked_mul(1000)
}

/// What the token endpoint said.
enum Reply {
    Tokens { access: String, refresh: Option<String>, lifetime: Lifetime },
    Retry(String),
    Refused(String),
}

async fn ask<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Gateway<C>,
    o: &OAuthConfig,
    refresh_token: &str,
) -> Reply {
    let mut body = serde_json::json!({
        "grant_type": "refresh_token",
        "refresh_token": refresh_token,
        "client_id": o.client_id(),
    });
    if let Some(scope) = o.preset().and_then(|p| p.scope) {
        body["scope"] = scope.into();
    }
    let req = Request::post(o.token_url())
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json")
        .body(Full::new(Bytes::from(body.to_string())));
    let req = match req {
        Ok(r) => r,
        Err(e) => return Reply::Refused(format!("the token request cannot be built: {e}")),
    };
    let resp = match tokio::time::timeout(TOKEN_TIMEOUT, gw.client.request(req)).await {
        Err(_) => {
            return Reply::Retry(format!("the token endpoint did not answer within {} s", TOKEN_TIMEOUT.as_secs()));
        }
        Ok(Err(e)) => return Reply::Retry(format!("the token endpoint is unreachable: {e}")),
        Ok(Ok(r)) => r,
    };
    let status = resp.status();
    let bytes =
        match tokio::time::timeout(TOKEN_TIMEOUT, Limited::new(resp.into_body(), MAX_TOKEN_BODY).collect()).await {
            Ok(Ok(c)) => c.to_bytes(),
            _ => return Reply::Retry(format!("the token endpoint's {status} answer broke off")),
        };
    let error_code = || {
        serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| v.get("error").and_then(|e| e.as_str().map(str::to_owned)))
            .unwrap_or_else(|| "no error code".to_owned())
    };
    if status.is_server_error() || status.as_u16() == 429 || status.as_u16() == 408 {
        return Reply::Retry(format!("the token endpoint answered {status} ({})", error_code()));
    }
    if !status.is_success() {
        return Reply::Refused(format!("the token endpoint refused the refresh token: {status} ({})", error_code()));
    }
    let Ok(t) = serde_json::from_slice::<TokenResponse>(&bytes) else {
        return Reply::Retry("the token endpoint's answer has no access_token".to_owned());
    };
    let now = gw.clock.wall_now_ms();
    let expires = t
        .expires_in
        .map(|s| now.saturating_add(s.saturating_mul(1000)))
        .or_else(|| jwt_expiry_ms(&t.access_token))
        .unwrap_or(now + DEFAULT_LIFETIME_MS);
    Reply::Tokens {
        access: t.access_token,
        refresh: t.refresh_token,
        lifetime: Lifetime { issued_at_ms: now, expires_at_ms: expires.max(now) },
    }
}

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
        (Begin::Refresh(_), Some(ticket)) => make(gw, connection, &o, &ticket).await,
        (Begin::InFlight, _) => {
            if let Some(ended) = ended {
                let _ = tokio::time::timeout(wait, ended).await;
            }
            gw.accounts.credential(connection).map(|c| c.generation) != before
        }
        (Begin::No | Begin::Refresh(_), _) => false,
    }
}

/// Makes the refresh `ticket` allows: asks the token endpoint once, stores what it answers
/// before anything sends it, and ends the flight. Returns whether new tokens are in use.
async fn make<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Arc<Gateway<C>>,
    connection: &str,
    o: &OAuthConfig,
    ticket: &Ticket,
) -> bool {
    let reply = ask(gw, o, &ticket.refresh_token).await;
    let now = gw.clock.wall_now_ms();
    match reply {
        Reply::Tokens { access, refresh, lifetime } => {
            let refresh = refresh.unwrap_or_else(|| ticket.refresh_token.clone());
            let Some(tokens) = gw.accounts.next_tokens(connection, access, refresh, lifetime, now) else {
                return false;
            };
            // Stored before any request sends them: a restart must not present the refresh
            // token this refresh just used up.
            let new = Some((&tokens, gw.store.as_deref()));
            let taken = gw.accounts.finish(connection, ticket, Answer::Refreshed(lifetime), new, now);
            // A connection a refused token ended (while the endpoint was down) serves again.
            let at = gw.clock.now();
            if taken && gw.with_engine(|e| e.renew_connection(at, connection)) {
                tracing::info!(connection, "OAuth tokens refreshed: the expired connection serves again");
                gw.settle();
            }
            gw.metrics.oauth_refresh(connection, "refreshed");
            tracing::info!(connection, expires_at_ms = lifetime.expires_at_ms, "OAuth tokens refreshed");
            taken
        }
        Reply::Retry(why) => {
            gw.accounts.finish(connection, ticket, Answer::Retryable, None, now);
            gw.metrics.oauth_refresh(connection, "retry");
            let next_ms = gw.accounts.view(connection).and_then(|v| v.next_refresh);
            tracing::warn!(connection, %why, ?next_ms, "OAuth refresh failed; trying again later");
            false
        }
        Reply::Refused(why) => {
            gw.accounts.finish(connection, ticket, Answer::InvalidGrant, None, now);
            gw.metrics.oauth_refresh(connection, "invalid_grant");
            tracing::error!(connection, %why, "OAuth refresh token refused: the account needs a new sign-in");
            let at = gw.clock.now();
            // The token endpoint's refusal is an account-level outcome of this connection.
            if let Some(c) = gw.config.connections.iter().find(|c| c.id == connection) {
                let outcome = Observed::Outcome { provider: &c.provider, connection, kind: OutcomeKind::AccountLevel };
                gw.observe(at, outcome);
            }
            gw.with_engine(|e| e.end_connection(at, connection, &format!("{why}; sign in again")));
            gw.settle();
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
        let now = gw.clock.wall_now_ms();
        for (connection, ticket) in gw.accounts.start_due(now) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jwt_tells_its_expiry_and_other_tokens_do_not() {
        use base64::Engine as _;
        let claims = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(br#"{"exp":1790000000,"sub":"x"}"#);
        assert_eq!(jwt_expiry_ms(&format!("eyJhbGciOiJSUzI1NiJ9.{claims}.sig")), Some(1_790_000_000_000));
        assert_eq!(jwt_expiry_ms("sk-ant-oat01-not-a-jwt"), None);
        assert_eq!(jwt_expiry_ms("a.b.c"), None);
    }
}
