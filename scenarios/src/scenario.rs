//! The scenario schema: upstream scripts, a workload, network faults, and expectations with
//! times. Scenarios are data (TOML under `scenarios/catalog/`); the simulation runs them.

use crate::script::Script;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use crate::expectations::{
    CallExpect, CountExpect, Expect, LogExpect, ResponseExpect, SessionsExpect, StateExpect, TargetExpect,
};

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
    /// Whether it plays ChatGPT's Codex backend (its request rules and 400s).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub codex_backend: bool,
}

/// A group of requests from one client host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// Client host name.
    #[serde(default = "crate::expectations::default_client")]
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
    /// The bound of `before_headers`, `random` and `after` aborts (ms; above 0 for
    /// `before_headers` and `after`).
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
    /// `PATCH` (runtime settings).
    Patch,
}

impl Method {
    /// The method as `http` spells it.
    pub fn as_http(self) -> http::Method {
        match self {
            Method::Post => http::Method::POST,
            Method::Delete => http::Method::DELETE,
            Method::Get => http::Method::GET,
            Method::Patch => http::Method::PATCH,
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
    /// Reload the config of host `a` (`gateway` or one of `replicas`) from `gateway`, as SIGHUP or the admin
    /// endpoint does: requests in flight finish on the config they started with.
    Reload,
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
