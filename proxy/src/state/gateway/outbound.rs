//! The upstream clients by way out (see [`crate::state::outbound`]): one per distinct proxy, so
//! connections that leave the same way share a pool, kept across reloads; and each
//! connection's, per config.

use crate::config::Config;
use crate::state::outbound::Via;
use bytes::Bytes;
use http_body_util::Full;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// The upstream client (the gateway's `UpstreamClient`).
type UpstreamClient<C> = hyper_util::client::legacy::Client<C, Full<Bytes>>;

/// A connector that can leave through a proxy.
pub trait Egress: Clone {
    /// The same connector, leaving through `via`.
    fn via(&self, via: &Via) -> Self;
}

/// The test harness's and the load tools' plain connector: always direct (a `proxy` setting
/// takes effect with the production connector, [`crate::state::connector::Upstream`]).
impl Egress for hyper_util::client::legacy::connect::HttpConnector {
    fn via(&self, _via: &Via) -> Self {
        self.clone()
    }
}

/// Makes a client for a way out.
type Make<C> = dyn Fn(&Via) -> UpstreamClient<C> + Send + Sync;

/// The clients, by way out, shared by every gateway a reload builds.
pub struct Pool<C> {
    make: Box<Make<C>>,
    by_key: Mutex<BTreeMap<String, UpstreamClient<C>>>,
}

impl<C: Clone> Pool<C> {
    /// Clients made by `make`.
    pub fn new(make: Box<Make<C>>) -> Self {
        Pool { make, by_key: Mutex::default() }
    }

    /// Each connection's client, how it leaves, and that as health shows it, for `config`; `get`
    /// reads the environment. A proxy setting the config check let through cannot fail here;
    /// should one, the connection goes direct and the log says why.
    pub fn routes(
        &self,
        config: &Config,
        get: &dyn Fn(&str) -> Option<String>,
    ) -> Vec<(UpstreamClient<C>, Via, String)> {
        let mut by_key = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
        (0..config.connections.len())
            .map(|i| {
                let via = crate::state::outbound::via_of(config, i, get).unwrap_or_else(|e| {
                    tracing::error!(connection = %config.connections[i].id, error = %e, "the proxy setting is not usable; going direct");
                    Via::Direct
                });
                let client = by_key.entry(via.key()).or_insert_with(|| (self.make)(&via)).clone();
                let shown = via.shown();
                (client, via, shown)
            })
            .collect()
    }
}

/// The process's environment, for `proxy_from_env`.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Shared between gateways.
pub type SharedPool<C> = Arc<Pool<C>>;
