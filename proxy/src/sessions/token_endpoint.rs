//! The OAuth token endpoint (RFC 6749 §6, `grant_type=refresh_token`): one refresh request and
//! what its answer means (new tokens, try again later, or the refresh token is dead).

use crate::config::OAuthConfig;
use crate::edge::body::whole;
use crate::state::gateway::Gateway;
use bytes::Bytes;
use ferroute_core::oauth::Lifetime;
use http::{Request, header};
use http_body_util::{Full, Limited};
use hyper_util::client::legacy::connect::Connect;
use serde::Deserialize;
use std::time::Duration;

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

/// The `exp` claim (Unix seconds) of a JWT, if the token is one.
pub fn jwt_expiry_ms(token: &str) -> Option<u64> {
    use base64::Engine as _;
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    v.get("exp")?.as_u64()?.checked_mul(1000)
}

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
    /// No answer about the refresh token (transport error, timeout, 5xx, 429): try again.
    Retry(String),
    /// The refresh token is dead.
    Refused(String),
}

/// Presents `refresh_token` to `o`'s token endpoint once.
pub async fn ask<C: Connect + Clone + Send + Sync + 'static>(
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
    let bytes = match tokio::time::timeout(TOKEN_TIMEOUT, whole(Limited::new(resp.into_body(), MAX_TOKEN_BODY))).await {
        Ok(Ok(b)) => b,
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
