//! The session-limit reset client (M4): asks the usage endpoint whether the once-a-week reset
//! of the 5-hour window is armed and available, and if so posts it. The core reads both
//! bodies and decides what the outcome means; this file only speaks HTTP.

use crate::config::{ConnectionConfig, UsageLimitConfig};
use crate::edge::body::whole;
use crate::state::gateway::Gateway;
use bytes::Bytes;
use ferroute_core::usage_limit::reset::{self, ResetOutcome};
use http::{Method, Request};
use http_body_util::{Full, Limited};
use hyper_util::client::legacy::connect::Connect;
use std::time::Duration;

/// The longest either call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest body read from either endpoint.
const MAX_BODY: usize = 64 * 1024;

/// One try: the usage query, then the reset post when offered. Every failure (unreachable,
/// timed out, a non-2xx status, an unreadable body) is `Failed`. `left` bounds the whole try.
pub(crate) async fn try_reset<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Gateway<C>,
    connection: &ConnectionConfig,
    cfg: &UsageLimitConfig,
    left: Duration,
) -> ResetOutcome {
    let deadline = gw.clock.now() + left;
    let base = cfg.base_url();
    let usage_url = format!("{base}{}", reset::USAGE_PATH);
    let Some(body) = call(gw, connection, Method::GET, &usage_url, None, deadline).await else {
        return ResetOutcome::Failed;
    };
    if let Some(outcome) = reset::usage_verdict(&body).outcome() {
        return outcome;
    }
    let Some(org) = cfg.organization.as_deref() else { return ResetOutcome::Failed };
    let reset_url = format!("{base}{}", reset::reset_path(org));
    match call(gw, connection, Method::POST, &reset_url, Some(reset::reset_body()), deadline).await {
        Some(body) => reset::result_of(&body),
        None => ResetOutcome::Failed,
    }
}

async fn call<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Gateway<C>,
    connection: &ConnectionConfig,
    method: Method,
    url: &str,
    body: Option<String>,
    deadline: std::time::Instant,
) -> Option<Bytes> {
    let mut b = Request::builder()
        .method(method)
        .uri(url)
        .header(http::header::ACCEPT, "application/json")
        .header("anthropic-beta", "oauth-2025-04-20");
    if let Some(c) = gw.accounts.credential(&connection.id) {
        b = b.header(http::header::AUTHORIZATION, c.authorization);
    } else if let Some(key) = connection.api_key.as_deref() {
        b = b.header(http::header::AUTHORIZATION, format!("Bearer {key}"));
    }
    if body.is_some() {
        b = b.header(http::header::CONTENT_TYPE, "application/json");
    }
    let mut req = b.body(Full::new(Bytes::from(body.unwrap_or_default()))).ok()?;
    if let Some(i) = gw.config.connections.iter().position(|c| c.id == connection.id) {
        let _ = gw.authorize_for_proxy(i, &mut req);
    }
    let limit = deadline.saturating_duration_since(gw.clock.now()).min(CALL_TIMEOUT);
    let fetch = async {
        let i = gw.config.connections.iter().position(|c| c.id == connection.id);
        let client = i.map_or(&gw.client, |i| gw.client_for(i));
        let resp = client.request(req).await.ok()?;
        if !resp.status().is_success() {
            tracing::info!(connection = %connection.id, status = resp.status().as_u16(), %url, "usage limit: endpoint answered with an error");
            return None;
        }
        whole(Limited::new(resp.into_body(), MAX_BODY)).await.ok()
    };
    match tokio::time::timeout(limit, fetch).await {
        Ok(body) => body,
        Err(_) => {
            tracing::info!(connection = %connection.id, %url, "usage limit: endpoint timed out");
            None
        }
    }
}
