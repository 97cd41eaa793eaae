//! What a scenario expects: of responses, counts, gateway state at times, upstream calls,
//! targets, the event log and sessions (`[expect]` in a scenario file).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Expectations.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// Individual responses.
    #[serde(default)]
    pub responses: Vec<ResponseExpect>,
    /// Counts of responses.
    #[serde(default)]
    pub counts: Vec<CountExpect>,
    /// Gateway state at simulated times.
    #[serde(default)]
    pub states: Vec<StateExpect>,
    /// Upstream call counts at the end.
    #[serde(default)]
    pub calls: Vec<CallExpect>,
    /// Dispatches by target (`provider/model`) at the end.
    #[serde(default)]
    pub targets: Vec<TargetExpect>,
    /// Lines of the run's event log containing a text, counted (`lane c1 ended max_wait`).
    #[serde(default)]
    pub log: Vec<LogExpect>,
    /// Sessions (M5): each session's answers came from one connection.
    #[serde(default)]
    pub sessions: Option<SessionsExpect>,
}

/// Every successful answer of one session (the request's session header: `x-codex-session-id`,
/// `x-session-id` or `x-ferroute-session`) came from the same connection; `min_sessions` and `min_connections` keep the check from passing vacuously
/// (sessions spread over that many connections).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionsExpect {
    /// Sessions with at least two successful answers, at least.
    #[serde(default)]
    pub min_sessions: u64,
    /// Connections serving sessions, at least.
    #[serde(default)]
    pub min_connections: u64,
}

/// How many event-log lines contain `contains`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogExpect {
    /// The text.
    pub contains: String,
    /// At least.
    #[serde(default)]
    pub min: Option<u64>,
    /// At most.
    #[serde(default)]
    pub max: Option<u64>,
}

/// Dispatches by target: one target's count, or how many distinct targets were used.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetExpect {
    /// `provider/model`; without it the expectation is about distinct targets.
    #[serde(default)]
    pub target: Option<String>,
    /// At least (dispatches to the target, or distinct targets).
    #[serde(default)]
    pub min: Option<u64>,
    /// At most.
    #[serde(default)]
    pub max: Option<u64>,
}

/// What one response must look like.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResponseExpect {
    /// Client host.
    #[serde(default = "default_client")]
    pub client: String,
    /// Request number within that client (0-based, in issue order).
    pub seq: u64,
    /// HTTP status.
    #[serde(default)]
    pub status: Option<u16>,
    /// `error.code` (or the SSE error event's code).
    #[serde(default)]
    pub code: Option<String>,
    /// `Retry-After` in seconds.
    #[serde(default)]
    pub retry_after_s: Option<u64>,
    /// `X-Ferroute-Selected-Connection-Id`.
    #[serde(default)]
    pub connection: Option<String>,
    /// For streams: whether `[DONE]` arrived.
    #[serde(default)]
    pub done: Option<bool>,
    /// Texts the answer's body contains (its first 64 KiB).
    #[serde(default)]
    pub body_contains: Vec<String>,
    /// Texts the answer's body does not contain.
    #[serde(default)]
    pub body_lacks: Vec<String>,
    /// The answer's body is byte for byte that of another request, `client#seq` (a settings
    /// read before and after a refused change).
    #[serde(default)]
    pub same_body_as: Option<String>,
    /// The exchange took at least this long, from the request to its end (ms).
    #[serde(default)]
    pub min_ms: Option<u64>,
    /// Response headers that must be present with these values (names in lower case); an empty
    /// value expects the header absent.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Whether the request ended as an expected abort: its client gave up (the workload's
    /// `abort`), or a partition cut the client off from the gateway before the answer was
    /// complete.
    #[serde(default)]
    pub aborted: Option<bool>,
}

/// How many responses match.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CountExpect {
    /// Only this client.
    #[serde(default)]
    pub client: Option<String>,
    /// Status to count.
    #[serde(default)]
    pub status: Option<u16>,
    /// Code to count.
    #[serde(default)]
    pub code: Option<String>,
    /// Served by this connection.
    #[serde(default)]
    pub connection: Option<String>,
    /// At least.
    #[serde(default)]
    pub min: Option<u64>,
    /// At most.
    #[serde(default)]
    pub max: Option<u64>,
}

/// Gateway state at a simulated time.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateExpect {
    /// When (checked at the first step at or after it).
    pub at_ms: u64,
    /// Breaker state of this provider.
    #[serde(default)]
    pub provider: Option<String>,
    /// `CLOSED | DEGRADED | OPEN | HALF_OPEN`.
    #[serde(default)]
    pub breaker: Option<String>,
    /// The breaker's failure count, as health's `failures` shows it.
    #[serde(default)]
    pub failures: Option<u32>,
    /// How many probes the breaker has admitted and not yet seen end.
    #[serde(default)]
    pub probes_in_flight: Option<u32>,
    /// This connection's…
    #[serde(default)]
    pub connection: Option<String>,
    /// …status (`active | unavailable | banned | expired | credits_exhausted`).
    #[serde(default)]
    pub status: Option<String>,
    /// …backoff level.
    #[serde(default)]
    pub backoff_level: Option<u32>,
    /// …remaining cooldown, `[min, max]` ms.
    #[serde(default)]
    pub cooldown_ms: Option<[u64; 2]>,
    /// A model locked (or not) on `connection` of `provider`.
    #[serde(default)]
    pub model: Option<String>,
    /// Whether `model` is locked.
    #[serde(default)]
    pub locked: Option<bool>,
    /// M4: the connection's usage-limit lane (`off`, `active`, `guard`, `budget_exhausted`).
    #[serde(default)]
    pub lane: Option<String>,
    /// M4: time until the connection's next session-limit reset try (health's
    /// `next_reset_try`), `[min, max]` ms.
    #[serde(default)]
    pub reset_try_in_ms: Option<[u64; 2]>,
    /// Whether the connection is cooling down (health shows `rate_limited_until`).
    #[serde(default)]
    pub cooling: Option<bool>,
    /// The last upstream status the connection failed with (health's `last_error_code`).
    #[serde(default)]
    pub error_code: Option<u16>,
}

/// Upstream calls, checked at the end.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallExpect {
    /// Upstream host.
    pub host: String,
    /// Model (`*` for all).
    #[serde(default = "star")]
    pub model: String,
    /// At least.
    #[serde(default)]
    pub min: Option<u64>,
    /// At most.
    #[serde(default)]
    pub max: Option<u64>,
    /// At most this many calls answered at once (from arrival to response headers).
    #[serde(default)]
    pub max_in_flight: Option<u64>,
}

fn star() -> String {
    "*".into()
}

/// The client a workload or an expectation names when it names none.
pub(crate) fn default_client() -> String {
    "client".into()
}
