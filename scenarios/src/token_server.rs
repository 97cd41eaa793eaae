//! A scripted OAuth token server (RFC 6749 §6 refresh, RFC 9700 §4.14 rotation): every refresh
//! returns a new access token and a new refresh token, and a refresh token presented a second
//! time is reuse — the whole family (every token descended from that sign-in) is revoked and
//! the reuse is counted. It can be made slow, down (503) or to refuse every grant
//! (`invalid_grant`). A [`crate::ScriptedUpstream`] that requires its tokens answers 401 to a
//! request whose bearer token is unknown, revoked or expired.
//!
//! Time is the server's own clock: since its creation by tokio's clock by default, or one it is
//! given ([`TokenServer::with_clock`]: the simulation's, the same on every host).

use crate::net::Listener;
use crate::sse_out::UpBody;
use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the token server does to the next refreshes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenFault {
    /// Answers every refresh.
    None,
    /// Answers 503 to every refresh.
    Down,
    /// Answers after this long.
    Slow(Duration),
    /// Refuses every refresh with `invalid_grant`.
    InvalidGrant,
    /// Rotates the refresh token, then loses the answer: the connection closes without one
    /// (a reset after the request was sent).
    Lose,
    /// Rotates the refresh token, then never answers (the client times out).
    Hang,
    /// Rotates the refresh token, then answers 503 with an empty body (a proxy in front of the
    /// endpoint that lost the answer).
    Blank503,
}

/// Tokens of one sign-in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Grant {
    /// The access token.
    pub access_token: String,
    /// The refresh token.
    pub refresh_token: String,
    /// Seconds until the access token expires.
    pub expires_in: u64,
}

/// What the token server saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TokenStats {
    /// Refreshes answered with new tokens.
    pub refreshed: u64,
    /// Refresh tokens presented again after they were used (each revokes its family).
    pub reused: u64,
    /// Refreshes refused (unknown, revoked or reused tokens, or the `InvalidGrant` fault).
    pub refused: u64,
    /// Refreshes answered 503 (the `Down` fault).
    pub unavailable: u64,
    /// Refreshes that rotated the refresh token and lost their answer (`Lose`, `Hang`,
    /// `Blank503`).
    pub lost: u64,
    /// Requests an upstream refused because their access token was expired.
    pub expired_presented: u64,
    /// Requests an upstream refused because their access token was unknown or revoked.
    pub invalid_presented: u64,
    /// Of the expired ones, those whose sign-in had a newer access token issued before they
    /// expired (the client had it in time and sent the old one).
    pub stale_presented: u64,
}

struct RefreshEntry {
    family: u64,
    used: bool,
}

struct AccessEntry {
    family: u64,
    issued: Duration,
    expires: Duration,
}

struct State {
    next: u64,
    revoked: Vec<u64>,
    refresh: BTreeMap<String, RefreshEntry>,
    access: BTreeMap<String, AccessEntry>,
    fault: TokenFault,
    stats: TokenStats,
}

/// The token server.
pub struct TokenServer {
    lifetime: Duration,
    clock: Box<dyn Fn() -> Duration + Send + Sync>,
    state: Mutex<State>,
}

fn json(status: u16, body: String) -> Response<UpBody> {
    let mut resp = Response::new(Full::new(Bytes::from(body)).map_err(|never| match never {}).boxed());
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

fn invalid_grant(why: &str) -> Response<UpBody> {
    json(400, serde_json::json!({"error": "invalid_grant", "error_description": why}).to_string())
}

impl TokenServer {
    /// A token server whose access tokens live `lifetime` (whole seconds are announced).
    pub fn new(lifetime: Duration) -> Self {
        let start = tokio::time::Instant::now();
        TokenServer {
            lifetime,
            clock: Box::new(move || start.elapsed()),
            state: Mutex::new(State {
                next: 0,
                revoked: Vec::new(),
                refresh: BTreeMap::new(),
                access: BTreeMap::new(),
                fault: TokenFault::None,
                stats: TokenStats::default(),
            }),
        }
    }

    /// The same server on `clock` (the time since a common start).
    pub fn with_clock(mut self, clock: impl Fn() -> Duration + Send + Sync + 'static) -> Self {
        self.clock = Box::new(clock);
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn issue(&self, s: &mut State, family: u64) -> Grant {
        s.next += 1;
        let n = s.next;
        let access_token = format!("at-{family}-{n}");
        let refresh_token = format!("rt-{family}-{n}");
        let now = (self.clock)();
        s.access.insert(access_token.clone(), AccessEntry { family, issued: now, expires: now + self.lifetime });
        s.refresh.insert(refresh_token.clone(), RefreshEntry { family, used: false });
        Grant { access_token, refresh_token, expires_in: self.lifetime.as_secs().max(1) }
    }

    /// A new sign-in: a fresh family of tokens.
    pub fn sign_in(&self) -> Grant {
        let mut s = self.lock();
        s.next += 1;
        let family = s.next;
        self.issue(&mut s, family)
    }

    /// Sets what the next refreshes meet.
    pub fn set_fault(&self, fault: TokenFault) {
        self.lock().fault = fault;
    }

    /// Ends every access token issued so far (as a provider that revokes its sessions): the
    /// next request with one is refused, its refresh token still works.
    pub fn expire_access_tokens(&self) {
        let now = (self.clock)();
        for a in self.lock().access.values_mut() {
            a.expires = a.expires.min(now);
        }
    }

    /// What it saw so far.
    pub fn stats(&self) -> TokenStats {
        self.lock().stats
    }

    /// Whether a request carrying `authorization` may be served; counts why not.
    pub fn admits(&self, authorization: Option<&str>) -> bool {
        let mut s = self.lock();
        let token = authorization.and_then(|a| a.strip_prefix("Bearer ")).unwrap_or("");
        let now = (self.clock)();
        let verdict = match s.access.get(token) {
            Some(a) if s.revoked.contains(&a.family) => Err(None),
            Some(a) if now >= a.expires => Err(Some((a.family, a.issued, a.expires))),
            Some(_) => Ok(()),
            None => Err(None),
        };
        match verdict {
            Ok(()) => true,
            Err(Some((family, issued, expires))) => {
                s.stats.expired_presented += 1;
                // A newer token of the same sign-in was issued before this one expired: the
                // client had it in time and should have sent it.
                if s.access.values().any(|a| a.family == family && a.issued > issued && a.issued < expires) {
                    s.stats.stale_presented += 1;
                }
                false
            }
            Err(None) => {
                s.stats.invalid_presented += 1;
                false
            }
        }
    }

    /// Answers one token request (`grant_type=refresh_token`, as JSON or a form).
    pub async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Result<Response<UpBody>, io::Error> {
        let body = http_body_util::Limited::new(req.into_body(), 64 * 1024)
            .collect()
            .await
            .map_err(|e| io::Error::other(e.to_string()))?
            .to_bytes();
        let fields: BTreeMap<String, String> = match serde_json::from_slice::<serde_json::Value>(&body) {
            Ok(serde_json::Value::Object(m)) => {
                m.into_iter().filter_map(|(k, v)| v.as_str().map(|v| (k, v.to_owned()))).collect()
            }
            _ => String::from_utf8_lossy(&body)
                .split('&')
                .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
                .collect(),
        };
        let fault = self.lock().fault;
        match fault {
            TokenFault::Slow(d) => tokio::time::sleep(d).await,
            TokenFault::Down => {
                self.lock().stats.unavailable += 1;
                return Ok(json(503, r#"{"error":"temporarily_unavailable"}"#.to_owned()));
            }
            TokenFault::None
            | TokenFault::InvalidGrant
            | TokenFault::Lose
            | TokenFault::Hang
            | TokenFault::Blank503 => {}
        }
        if fields.get("grant_type").map(String::as_str) != Some("refresh_token") {
            return Ok(json(400, r#"{"error":"unsupported_grant_type"}"#.to_owned()));
        }
        let presented = fields.get("refresh_token").cloned().unwrap_or_default();
        let answer = self.refresh(&presented, fault);
        if answer.is_none() && fault == TokenFault::Hang {
            std::future::pending::<()>().await;
        }
        answer.ok_or_else(|| io::Error::new(io::ErrorKind::ConnectionReset, "the token answer is lost"))
    }

    /// Rotates `presented` (or refuses it); `None` when `fault` loses the answer to a
    /// rotation.
    fn refresh(&self, presented: &str, fault: TokenFault) -> Option<Response<UpBody>> {
        let mut s = self.lock();
        if fault == TokenFault::InvalidGrant {
            s.stats.refused += 1;
            return Some(invalid_grant("refresh refused by the scripted fault"));
        }
        let family = match s.refresh.get_mut(presented) {
            None => None,
            Some(e) if e.used => {
                // Reuse: revoke the whole family (RFC 9700 §4.14).
                let family = e.family;
                s.stats.reused += 1;
                s.stats.refused += 1;
                s.revoked.push(family);
                return Some(invalid_grant("refresh token reused; the family is revoked"));
            }
            Some(e) => {
                e.used = true;
                Some(e.family)
            }
        };
        let Some(family) = family.filter(|f| !s.revoked.contains(f)) else {
            s.stats.refused += 1;
            return Some(invalid_grant("unknown or revoked refresh token"));
        };
        let grant = self.issue(&mut s, family);
        if matches!(fault, TokenFault::Lose | TokenFault::Hang | TokenFault::Blank503) {
            // Rotated: the presented refresh token is used up, and the answer never arrives.
            s.stats.lost += 1;
            return (fault == TokenFault::Blank503).then(|| json(503, String::new()));
        }
        s.stats.refreshed += 1;
        let mut body = serde_json::to_value(&grant).unwrap_or_default();
        body["token_type"] = "Bearer".into();
        Some(json(200, body.to_string()))
    }
}

/// Serves `server` on `listener` until the task is dropped.
pub async fn serve_token_server<L: Listener>(listener: L, server: Arc<TokenServer>) {
    crate::http_host::serve(listener, server, TokenServer::handle).await;
}

/// The 401 an upstream that requires the token server's tokens answers (Anthropic's shape).
pub fn refusal() -> Response<UpBody> {
    json(
        401,
        r#"{"type":"error","error":{"type":"authentication_error","message":"OAuth token has expired or is invalid. Please obtain a new token or refresh your existing token."}}"#
            .to_owned(),
    )
}

/// The token server's host name in a simulated scenario, and its port.
pub const TOKEN_HOST: &str = "tokens";
/// The token server's port in a simulated scenario.
pub const TOKEN_PORT: u16 = 9100;

/// `[token_server]` in a scenario: a token server host named [`TOKEN_HOST`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenServerSpec {
    /// How long its access tokens live.
    pub lifetime_ms: u64,
    /// Connections signed in at the start: `{oauth:ID}` in the gateway's config becomes
    /// connection ID's `oauth` table (the `claude` preset, this server's tokens and URL).
    pub accounts: Vec<String>,
    /// Upstream hosts that answer only its valid access tokens.
    #[serde(default)]
    pub guards: Vec<String>,
    /// What refreshes meet from when on.
    #[serde(default)]
    pub faults: Vec<TokenFaultSpec>,
    /// Refreshes answered with new tokens: at least, at most.
    #[serde(default)]
    pub refreshed: Option<[u64; 2]>,
    /// Refreshes refused (`invalid_grant`), exactly.
    #[serde(default)]
    pub refused: Option<u64>,
    /// Refreshes that rotated the refresh token and lost their answer, exactly.
    #[serde(default)]
    pub lost: Option<u64>,
    /// The accounts' preset: `claude` (the default) or `codex` (with account id
    /// [`SIM_ACCOUNT_ID`]).
    #[serde(default)]
    pub preset: Option<String>,
}

/// From `at_ms` on, refreshes meet `fault`: `none`, `down`, `invalid_grant`, `slow` (by
/// `slow_ms`; past the gateway's 30 s the answer comes late), or one that rotates the refresh
/// token and loses the answer: `lose` (the connection closes), `hang` (no answer ever) or
/// `blank_503` (a 503 without a body); or, at `at_ms`, `expire_access` ends every access token
/// issued so far.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenFaultSpec {
    /// When.
    pub at_ms: u64,
    /// `none`, `down`, `invalid_grant`, `slow`, `lose`, `hang`, `blank_503` or `expire_access`.
    pub fault: String,
    /// How slow, for `slow`.
    #[serde(default)]
    pub slow_ms: u64,
}

impl TokenFaultSpec {
    /// The fault it names (`None` for `expire_access`, which is done once, not a mode).
    pub fn fault(&self) -> Result<Option<TokenFault>, String> {
        match self.fault.as_str() {
            "none" => Ok(Some(TokenFault::None)),
            "down" => Ok(Some(TokenFault::Down)),
            "invalid_grant" => Ok(Some(TokenFault::InvalidGrant)),
            "slow" => Ok(Some(TokenFault::Slow(Duration::from_millis(self.slow_ms)))),
            "lose" => Ok(Some(TokenFault::Lose)),
            "hang" => Ok(Some(TokenFault::Hang)),
            "blank_503" => Ok(Some(TokenFault::Blank503)),
            "expire_access" => Ok(None),
            other => Err(format!(
                "unknown token fault {other:?} (none, down, invalid_grant, slow, lose, hang, blank_503, expire_access)"
            )),
        }
    }
}

/// The ChatGPT account id of a simulated `codex` sign-in.
pub const SIM_ACCOUNT_ID: &str = "acct-sim-1";

/// A connection's `oauth` table for `grant` under `preset`, expiring at `expires_at_ms`,
/// refreshed at `token_url`.
pub fn oauth_table(grant: &Grant, expires_at_ms: u64, token_url: &str, preset: &str) -> String {
    let account = if preset == "codex" { format!(", account_id = \"{SIM_ACCOUNT_ID}\"") } else { String::new() };
    format!(
        "oauth = {{ preset = \"{preset}\", access_token = \"{}\", refresh_token = \"{}\", expires_at = {expires_at_ms}, token_url = \"{token_url}\"{account} }}",
        grant.access_token, grant.refresh_token
    )
}
