//! The OAuth token endpoint (RFC 6749 §6, `grant_type=refresh_token`): one refresh request and
//! what its answer means (new tokens, try again later, the refresh token in doubt because the
//! answer was lost after the request may have been acted on, or the refresh token is dead).

use crate::config::OAuthConfig;
use crate::edge::body::whole;
use crate::state::gateway::Gateway;
use bytes::Bytes;
use ferroute_core::oauth::Lifetime;
use http::{Request, StatusCode, header};
use http_body_util::{Full, Limited};
use hyper_util::client::legacy::connect::Connect;
use serde::Deserialize;
use std::time::Duration;
use tokio::sync::oneshot;

/// How long the token endpoint may take to answer.
pub const TOKEN_TIMEOUT: Duration = Duration::from_secs(30);
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

/// The claims of a JWT (its payload, unverified: only read for what the token says of itself),
/// if the token is one.
pub fn jwt_claims(token: &str) -> Option<serde_json::Value> {
    use base64::Engine as _;
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The `exp` claim (Unix seconds) of a JWT, if the token is one.
pub fn jwt_expiry_ms(token: &str) -> Option<u64> {
    jwt_claims(token)?.get("exp")?.as_u64()?.checked_mul(1000)
}

/// How long a lost answer is still waited for after [`TOKEN_TIMEOUT`]: one that arrives in
/// time is taken (the refresh token it replaces is in doubt until then).
pub const LATE_ANSWER: Duration = Duration::from_secs(10 * 60);

/// What the token endpoint said.
pub enum Reply {
    /// New tokens (the refresh token only when the endpoint rotated it).
    Tokens {
        /// The access token.
        access: String,
        /// The new refresh token.
        refresh: Option<String>,
        /// The access token's lifetime.
        lifetime: Lifetime,
    },
    /// No answer about the refresh token, and the endpoint did not act on it (a connect error,
    /// a 408 or 429, a 5xx naming an OAuth error): it may be presented again.
    Retry(String),
    /// The answer was lost after the request may have reached the endpoint (a timeout, a reset
    /// after sending, a 5xx without an OAuth error, a success that broke off): the refresh token
    /// is in doubt. `late` yields the answer if it still comes within [`LATE_ANSWER`].
    Lost {
        /// Why.
        why: String,
        /// The answer still awaited, if the request is still in flight.
        late: Option<oneshot::Receiver<Reply>>,
    },
    /// The refresh token is dead.
    Refused(String),
}

/// What came back at the transport level.
enum Exchange {
    /// The status and the whole body.
    Answer(StatusCode, Bytes),
    /// Nothing was sent (the connection was not made).
    NotSent(String),
    /// The request went out (or may have) and its answer was lost.
    Lost(String),
}

/// Presents `refresh_token` to `o`'s token endpoint once (through `connection`'s proxy, if
/// it has one).
pub async fn ask<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Gateway<C>,
    connection: &str,
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
    let mut req = match req {
        Ok(r) => r,
        Err(e) => return Reply::Refused(format!("the token request cannot be built: {e}")),
    };
    // On its own task, so that an answer later than the timeout is still read and taken.
    let i = gw.config.connections.iter().position(|c| c.id == connection);
    if let Some(i) = i {
        let _ = gw.authorize_for_proxy(i, &mut req);
    }
    let client = i.map_or(&gw.client, |i| gw.client_for(i)).clone();
    let clock = gw.clock;
    let (tx, rx) = oneshot::channel();
    tokio::spawn(async move {
        let exchange = tokio::time::timeout(TOKEN_TIMEOUT + LATE_ANSWER, exchange(&client, req)).await;
        let exchange = exchange.unwrap_or_else(|_| Exchange::Lost("no answer came at all".to_owned()));
        let _ = tx.send(reply_of(exchange, clock.wall_now_ms()));
    });
    let mut rx = rx;
    match tokio::time::timeout(TOKEN_TIMEOUT, &mut rx).await {
        Ok(Ok(reply)) => reply,
        Ok(Err(_)) => Reply::Lost { why: "the token request was dropped".to_owned(), late: None },
        Err(_) => Reply::Lost {
            why: format!("the token endpoint did not answer within {} s", TOKEN_TIMEOUT.as_secs()),
            late: Some(rx),
        },
    }
}

/// Sends `req` and reads the whole answer.
async fn exchange<C: Connect + Clone + Send + Sync + 'static>(
    client: &crate::state::gateway::UpstreamClient<C>,
    req: Request<Full<Bytes>>,
) -> Exchange {
    let resp = match client.request(req).await {
        Ok(r) => r,
        Err(e) if e.is_connect() => return Exchange::NotSent(format!("the token endpoint is unreachable: {e}")),
        Err(e) => return Exchange::Lost(format!("the token request failed after it was sent: {e}")),
    };
    let status = resp.status();
    match whole(Limited::new(resp.into_body(), MAX_TOKEN_BODY)).await {
        Ok(b) => Exchange::Answer(status, b),
        Err(_) => Exchange::Lost(format!("the token endpoint's {status} answer broke off")),
    }
}

/// What an exchange means for the refresh token, at wall time `now`.
fn reply_of(exchange: Exchange, now: u64) -> Reply {
    let (status, bytes) = match exchange {
        Exchange::Answer(status, bytes) => (status, bytes),
        Exchange::NotSent(why) => return Reply::Retry(why),
        Exchange::Lost(why) => return Reply::Lost { why, late: None },
    };
    let error_code = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|v| v.get("error").and_then(|e| e.as_str().map(str::to_owned)));
    let code = || error_code.clone().unwrap_or_else(|| "no error code".to_owned());
    if status.as_u16() == 429 || status.as_u16() == 408 {
        return Reply::Retry(format!("the token endpoint answered {status} ({})", code()));
    }
    if status.is_server_error() {
        // An OAuth error (RFC 6749 §5.2, e.g. `temporarily_unavailable`) says the grant was not
        // acted on; anything else (an empty body, a proxy's page) may have come after it was.
        let why = format!("the token endpoint answered {status} ({})", code());
        return if error_code.is_some() { Reply::Retry(why) } else { Reply::Lost { why, late: None } };
    }
    if !status.is_success() {
        return Reply::Refused(format!("the token endpoint refused the refresh token: {status} ({})", code()));
    }
    let Ok(t) = serde_json::from_slice::<TokenResponse>(&bytes) else {
        // A success the endpoint sent may have rotated the refresh token.
        return Reply::Lost { why: format!("the token endpoint's {status} answer has no access_token"), late: None };
    };
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
