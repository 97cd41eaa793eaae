//! The client headers that carry meaning for a provider's API, read once per request.

use http::{HeaderMap, HeaderName, HeaderValue};

/// `anthropic-beta`.
pub static ANTHROPIC_BETA: HeaderName = HeaderName::from_static("anthropic-beta");
/// `anthropic-version`.
pub static ANTHROPIC_VERSION_HEADER: HeaderName = HeaderName::from_static("anthropic-version");
/// `OpenAI-Beta`.
pub static OPENAI_BETA: HeaderName = HeaderName::from_static("openai-beta");

/// W3C trace context.
static TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

/// Client headers that carry meaning for a provider's API, as the client sent them (values
/// that are visible ASCII only; others are not forwarded).
#[derive(Debug, Clone, Default)]
pub struct ApiHeaders {
    /// `anthropic-beta`.
    pub anthropic_beta: Option<HeaderValue>,
    /// `anthropic-version`.
    pub anthropic_version: Option<HeaderValue>,
    /// `OpenAI-Beta`.
    pub openai_beta: Option<HeaderValue>,
    /// The client's W3C `traceparent`.
    pub traceparent: Option<HeaderValue>,
    /// `User-Agent`: which client it is (a credential may serve only its own client).
    pub user_agent: Option<HeaderValue>,
    /// What the Codex backend reads of the client (its originator and session id).
    pub codex: crate::request::codex::ClientIds,
}

impl ApiHeaders {
    /// Reads them from a request.
    pub fn from(headers: &HeaderMap) -> Self {
        let get = |n: &HeaderName| headers.get(n).filter(|v| v.to_str().is_ok()).cloned();
        ApiHeaders {
            anthropic_beta: get(&ANTHROPIC_BETA),
            anthropic_version: get(&ANTHROPIC_VERSION_HEADER),
            openai_beta: get(&OPENAI_BETA),
            traceparent: get(&TRACEPARENT),
            user_agent: get(&http::header::USER_AGENT),
            codex: crate::request::codex::ClientIds::from(headers),
        }
    }
}
