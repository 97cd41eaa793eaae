//! Client and admin authentication. Keys are compared in constant time and never logged.

use crate::config::{Config, KeyConfig};
use crate::edge::errors::{ProxyError, Source};
use http::{HeaderMap, HeaderName};
use std::net::SocketAddr;
use subtle::ConstantTimeEq;

/// Anthropic's key header, which clients may authenticate with.
pub(crate) static X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");
/// `x-goog-api-key`: a key for Google's Gemini API, ours from Gemini clients or a provider's.
pub(crate) static X_GOOG_API_KEY: HeaderName = HeaderName::from_static("x-goog-api-key");
/// The admin key header.
static ADMIN_KEY: HeaderName = HeaderName::from_static("x-ferroute-admin-key");

fn eq(a: &str, b: &str) -> bool {
    a.as_bytes().ct_eq(b.as_bytes()).into()
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// The client behind a request: a configured key, or a loopback peer when no keys exist.
#[derive(Debug, Clone)]
pub enum Client {
    /// A loopback peer; no keys are configured.
    Loopback,
    /// A configured key.
    Key(KeyConfig),
}

impl Client {
    /// Whether this client may use every connection (loopback, or a key without a list).
    pub fn may_use_all(&self) -> bool {
        match self {
            Client::Loopback => true,
            Client::Key(k) => k.allowed_connections.is_empty(),
        }
    }

    /// Whether this client may use `connection`.
    pub fn may_use(&self, connection: &str) -> bool {
        match self {
            Client::Loopback => true,
            Client::Key(k) => k.allowed_connections.is_empty() || k.allowed_connections.iter().any(|c| c == connection),
        }
    }
}

/// Every endpoint: with no client keys configured, only loopback peers are served.
pub fn check_peer(config: &Config, peer: SocketAddr) -> Result<(), ProxyError> {
    if config.keys.is_empty() && !peer.ip().is_loopback() {
        return Err(ProxyError::new(
            Source::Downstream,
            403,
            "loopback_only",
            "no client keys are configured, so only loopback clients are served",
        ));
    }
    Ok(())
}

/// Inference endpoints: `Authorization: Bearer KEY` (or `x-api-key` when `allow_x_api_key`).
pub fn client(config: &Config, headers: &HeaderMap, allow_x_api_key: bool) -> Result<Client, ProxyError> {
    if config.keys.is_empty() {
        return Ok(Client::Loopback);
    }
    let given = bearer(headers)
        .or_else(|| allow_x_api_key.then(|| headers.get(&X_API_KEY).and_then(|v| v.to_str().ok())).flatten());
    check_key(config, given)
}

/// The Gemini API's clients: the key as `x-goog-api-key`, as `?key=` in the query (like
/// Google's own API), or as a bearer token.
pub fn gemini_client(config: &Config, headers: &HeaderMap, query: Option<&str>) -> Result<Client, ProxyError> {
    if config.keys.is_empty() {
        return Ok(Client::Loopback);
    }
    let from_query = query
        .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("key=")).map(crate::edge::gemini::percent_decoded));
    let header = headers.get(&X_GOOG_API_KEY).and_then(|v| v.to_str().ok());
    match header.or_else(|| bearer(headers)) {
        Some(given) => check_key(config, Some(given)),
        None => check_key(config, from_query.as_deref()),
    }
}

fn check_key(config: &Config, given: Option<&str>) -> Result<Client, ProxyError> {
    let Some(given) = given else {
        return Err(ProxyError::new(
            Source::Downstream,
            401,
            "missing_api_key",
            "missing client key: send Authorization: Bearer <key>",
        ));
    };
    // Compare against every key so that timing does not reveal which one matched.
    let mut found = None;
    for k in &config.keys {
        if eq(&k.key, given) {
            found = Some(k.clone());
        }
    }
    found
        .map(Client::Key)
        .ok_or_else(|| ProxyError::new(Source::Downstream, 401, "invalid_api_key", "invalid client key"))
}

/// Admin endpoints: `Authorization: Bearer ADMIN_KEY` or `X-Ferroute-Admin-Key`.
pub fn admin(config: &Config, headers: &HeaderMap) -> Result<(), ProxyError> {
    let Some(expected) = config.server.admin_key.as_deref() else {
        return Err(ProxyError::new(
            Source::Downstream,
            401,
            "admin_disabled",
            "the admin API is disabled: set server.admin_key (or FERROUTE_ADMIN_KEY)",
        ));
    };
    let given = headers.get(&ADMIN_KEY).and_then(|v| v.to_str().ok()).or_else(|| bearer(headers));
    match given {
        Some(g) if eq(expected, g) => Ok(()),
        Some(_) => Err(ProxyError::new(Source::Downstream, 401, "invalid_admin_key", "invalid admin key")),
        None => Err(ProxyError::new(
            Source::Downstream,
            401,
            "missing_admin_key",
            "missing admin key: send X-Ferroute-Admin-Key or Authorization: Bearer",
        )),
    }
}
