//! The scenario schema: upstream scripts, a workload, network faults, and expectations with
//! times. Scenarios are data (TOML under `scenarios/catalog/`); the simulation runs them.

use crate::script::Script;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Name (defaults to the file stem).
    #[serde(default)]
    pub name: String,
    /// What it shows.
    pub description: String,
    /// Mechanisms it covers (`M1`, `M3`, …).
    #[serde(default)]
    pub mechanisms: Vec<String>,
    /// Simulated time allowed before unfinished requests count as hung.
    #[serde(default = "default_duration")]
    pub duration_ms: u64,
    /// Simulation tick.
    #[serde(default = "default_tick")]
    pub tick_ms: u64,
    /// Network message latency range.
    #[serde(default)]
    pub latency_ms: Option<[u64; 2]>,
    /// The gateway's config (TOML); upstreams are reached as `http://HOST:9000/v1`.
    pub gateway: String,
    /// More replicas of the gateway (host names, each with the same config): with any, every
    /// replica shares its state through a simulated store host named `store`, as replicas
    /// share it through Redis (`[state] backend = "redis"`).
    #[serde(default)]
    pub replicas: Vec<String>,
    /// Scripted upstream hosts.
    #[serde(default)]
    pub upstreams: Vec<UpstreamSpec>,
    /// Client requests.
    #[serde(default)]
    pub workload: Vec<Workload>,
    /// Network faults.
    #[serde(default)]
    pub faults: Vec<Fault>,
    /// An OAuth token server for the gateway's subscription accounts.
    #[serde(default)]
    pub token_server: Option<crate::token_server::TokenServerSpec>,
    /// Whether the gateway's interleaving points pause (a seeded draw at each store call,
    /// before each send and before each outcome is recorded), so that requests interleave as on
    /// a multi-threaded runtime. The swarm always turns them on.
    #[serde(default)]
    pub interleave: bool,
    /// What must hold.
    #[serde(default)]
    pub expect: Expect,
}

fn default_duration() -> u64 {
    300_000
}

fn default_tick() -> u64 {
    5
}

/// One scripted upstream host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamSpec {
    /// Host name (`http://HOST:9000/v1`).
    pub host: String,
    /// Scripts by model (`*` for any other).
    pub routes: BTreeMap<String, Script>,
}

/// A group of requests from one client host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// Client host name.
    #[serde(default = "default_client")]
    pub client: String,
    /// The gateway host to send to (`gateway`, or one of the scenario's `replicas`).
    #[serde(default)]
    pub gateway: Option<String>,
    /// First request.
    #[serde(default)]
    pub start_ms: u64,
    /// Gap between requests (0: all at once).
    #[serde(default)]
    pub every_ms: u64,
    /// Number of requests.
    #[serde(default = "one")]
    pub count: u64,
    /// The `model` asked for (unused when `body` is given); `{seq}` is replaced by the
    /// request's number, so one workload can ask for many models.
    #[serde(default)]
    pub model: String,
    /// Whether to stream.
    #[serde(default)]
    pub stream: bool,
    /// `/v1/messages` instead of chat completions.
    #[serde(default)]
    pub anthropic: bool,
    /// Gemini's `generateContent` (`streamGenerateContent?alt=sse` when streaming) instead of
    /// chat completions, the key in `x-goog-api-key`.
    #[serde(default)]
    pub gemini: bool,
    /// Extra request headers; one the client sends itself (`authorization`, `content-type`) is
    /// replaced, and an empty value leaves it out.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The user message; `{seq}` and `{client}` are replaced (default: `request {seq} from
    /// {client}`, different for every request).
    #[serde(default)]
    pub prompt: Option<String>,
    /// Bytes of padding appended to the user message (a long context).
    #[serde(default)]
    pub pad_bytes: u64,
    /// Function tools the request offers.
    #[serde(default)]
    pub tools: u32,
    /// Another endpoint to call (`/api/v1/session-leases`), instead of the inference one.
    #[serde(default)]
    pub path: Option<String>,
    /// The method (`POST`, `DELETE` or `GET`; `POST` when not named).
    #[serde(default)]
    pub method: Method,
    /// The exact JSON body to send, instead of a generated request.
    #[serde(default)]
    pub body: Option<String>,
    /// The client gives up on its requests this way (an expected abort, never a violation).
    #[serde(default)]
    pub abort: Option<Abort>,
    /// The bound of `before_headers` and `random` aborts (ms).
    #[serde(default)]
    pub abort_after_ms: u64,
}

/// The HTTP method of a workload's requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Method {
    /// `POST` (inference, leases, admin actions).
    #[default]
    Post,
    /// `DELETE` (clearing model lockouts).
    Delete,
    /// `GET` (health, listings).
    Get,
}

impl Method {
    /// The method as `http` spells it.
    pub fn as_http(self) -> http::Method {
        match self {
            Method::Post => http::Method::POST,
            Method::Delete => http::Method::DELETE,
            Method::Get => http::Method::GET,
        }
    }
}

/// How a client gives up (a person presses Ctrl-C, an agent's tool call times out).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Abort {
    /// No response headers within `abort_after_ms`: the client hangs up.
    BeforeHeaders,
    /// The client hangs up as soon as the first piece of the body arrives.
    AfterFirstChunk,
    /// The client hangs up at a moment drawn from the run's seed, before `abort_after_ms`.
    Random,
    /// The client reads for `abort_after_ms` and hangs up, keeping what arrived: for a stream
    /// that does not end (the operator's `GET /api/monitoring/events`).
    After,
}

fn default_client() -> String {
    "client".into()
}

fn one() -> u64 {
    1
}

/// A network fault at a simulated time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    /// When.
    pub at_ms: u64,
    /// What.
    pub action: FaultAction,
    /// One side; for `restart`, `"gateway"`; for `reload`, the gateway host that reloads
    /// (`"gateway"` or one of `replicas`).
    pub a: String,
    /// The other side (empty for `restart` and `reload`).
    #[serde(default)]
    pub b: String,
    /// `reload`: the gateway's new config (TOML, as the scenario's `gateway`; the simulated
    /// clients' key is added the same way). An invalid one is refused, as in production.
    #[serde(default)]
    pub gateway: Option<String>,
}

/// Network fault kinds (turmoil's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultAction {
    /// Drop messages between `a` and `b`.
    Partition,
    /// Undo a partition.
    Repair,
    /// Hold messages until released.
    Hold,
    /// Deliver held messages.
    Release,
    /// Restart host `a` (only `gateway`): its software starts again on the same state file
    /// (a scenario with a restart keeps the gateway's state in SQLite on disk, as production
    /// does). Requests in flight at that moment are lost, so scenarios restart between them.
    Restart,
    /// Reload the config of host `a` (only `gateway`) from `gateway`, as SIGHUP or the admin
    /// endpoint does: requests in flight finish on the config they started with.
    Reload,
}

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

/// A scenario file that failed to load.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// Unreadable.
    #[error("{path}: {source}")]
    Io {
        /// File.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Not a scenario.
    #[error("{path}: {message}")]
    Parse {
        /// File.
        path: String,
        /// Why.
        message: String,
    },
}

impl Scenario {
    /// Parses one scenario; `name` is used when the file has none.
    pub fn from_toml_str(text: &str, name: &str) -> Result<Scenario, String> {
        let mut s: Scenario = toml::from_str(text).map_err(|e| e.to_string())?;
        if s.name.is_empty() {
            s.name = name.to_owned();
        }
        if s.tick_ms == 0 {
            return Err("tick_ms must be positive".into());
        }
        Ok(s)
    }
}

/// The catalog directory.
pub fn catalog_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("catalog")
}

/// Every scenario in `dir`, sorted by name.
pub fn load_catalog(dir: &Path) -> Result<Vec<Scenario>, CatalogError> {
    let io = |e, p: &Path| CatalogError::Io { path: p.display().to_string(), source: e };
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| io(e, dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p).map_err(|e| io(e, p))?;
            let stem = p.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            Scenario::from_toml_str(&text, &stem)
                .map_err(|message| CatalogError::Parse { path: p.display().to_string(), message })
        })
        .collect()
}
