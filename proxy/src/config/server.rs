//! `[server]`: where the gateway listens and keeps its state, and how it takes requests and
//! stops.

use serde::{Deserialize, Serialize};

/// Default listen address: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8787";
/// Default data directory (SQLite state lives in `state.db` inside it).
pub const DEFAULT_DATA_DIR: &str = "./ferroute-data";
/// Default request body limit: 10 MiB.
pub const DEFAULT_MAX_BODY_BYTES: u64 = 10 * 1024 * 1024;

/// `[server]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Listen address.
    pub listen: String,
    /// Where state is kept.
    pub data_dir: String,
    /// Admin key (`env:NAME` reads a variable); without one the admin API answers 401.
    pub admin_key: Option<String>,
    /// The AES-256-GCM key OAuth tokens are encrypted with at rest: 32 bytes in base64
    /// (`env:NAME` reads a variable). Without one, tokens are stored as they are.
    pub secret_key: Option<String>,
    /// Request body limit; larger bodies get 413.
    pub max_body_bytes: u64,
    /// How long in-flight requests may finish after SIGTERM.
    pub shutdown_grace_ms: u64,
    /// How long a client may take to send its request body; slower bodies get 408.
    pub body_read_timeout_ms: u64,
    /// On SIGTERM, how long `GET /readyz` answers 503 while requests are still taken, before
    /// the listener closes: the time a load balancer needs to stop sending (0 by default).
    pub unready_delay_ms: u64,
    /// Which certificate authorities upstream TLS trusts: `bundled` (the webpki roots built
    /// in), `system` (the operating system's store) or `both` (the default).
    pub tls_roots: TlsRoots,
    /// A PEM file of more certificate authorities to trust (a private CA, a TLS-inspecting
    /// proxy's); `SSL_CERT_FILE` adds one too.
    pub extra_ca: Option<String>,
    /// Whether connections without a `proxy` of their own or their provider's leave through
    /// the proxy `HTTPS_PROXY`, `HTTP_PROXY` or `ALL_PROXY` names, except for hosts `NO_PROXY`
    /// lists (upper or lower case, as curl reads them).
    pub proxy_from_env: bool,
    /// Serve HTTPS with this certificate and key instead of plain HTTP (read again on reload).
    pub tls: Option<super::tls::ServeTls>,
}

/// `[server] tls_roots`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TlsRoots {
    /// The webpki roots built into the binary.
    Bundled,
    /// The operating system's certificate store.
    System,
    /// Both.
    #[default]
    Both,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: DEFAULT_LISTEN.into(),
            data_dir: DEFAULT_DATA_DIR.into(),
            admin_key: None,
            secret_key: None,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            // Long enough for a typical completion to finish; short enough for a deploy.
            shutdown_grace_ms: 30_000,
            // A 10 MiB body needs well under a minute on any link a coding agent uses; a
            // client trickling its body must not hold a task forever.
            body_read_timeout_ms: 60_000,
            unready_delay_ms: 0,
            tls_roots: TlsRoots::Both,
            extra_ca: None,
            proxy_from_env: true,
            tls: None,
        }
    }
}
