//! Ferroute's production gateway: a thin hyper/tokio shell around the resilience core.
//!
//! [`serve`] is generic over the accept source and the upstream connector, so the
//! deterministic simulation runs this same service over simulated sockets.
//!
//! The crate is in rooms by concern, each a folder whose module doc says what it owns and what
//! it imports. No module depends on itself through others (`tests/tests/layout.rs` checks it):
//!
//! | room | owns |
//! |---|---|
//! | [`edge`] | the HTTP edge: the accept loop and its routes, body and head reading, client and admin auth, error bodies |
//! | [`request`] | the request path in the order a request takes it: plan, resolve, exchange, forward, dispatch, multi-call, one upstream attempt, its bookkeeping, the stream relay, refusals |
//! | [`state`] | the gateway's shared state: the engine behind its lock, admission queues, persistence, clock, event log, metrics |
//! | [`sessions`] | what a client or an account holds over time: leases and their stores, the usage-limit reset, egress IPs |
//! | [`replicas`] | several gateways sharing state: the Redis store, the link every change is published through, the follower |
//! | [`ops`] | operating the gateway: the admin API, config reload, the built-in demo provider |
//! | [`recording`] | the flight recorder: attempt and request records, their rolling files, exports |
//! | [`config`] | the typed configuration, its parsing and validation |
//! | [`translate`] | pure request, answer and stream translation between the client APIs and provider formats |

pub mod config;
pub mod edge;
pub mod ops;
pub mod recording;
pub mod replicas;
pub mod request;
pub mod sessions;
pub mod state;
pub mod translate;

use crate::config::Config;
use crate::state::clock::Clock;
use crate::state::gateway::Gateway;
pub use crate::state::gateway::outbound::Egress;
use crate::state::store::Store;
use hyper_util::client::legacy::connect::Connect;
pub use scenarios::net::Listener;
use std::future::Future;
use std::sync::Arc;

/// Where state is kept.
pub enum Persistence {
    /// `data_dir/state.db` (SQLite, WAL).
    Dir(std::path::PathBuf),
    /// In memory only.
    Memory,
}

/// Everything `serve` needs besides the config, listener and connector.
pub struct ServeOptions<S> {
    /// Where state is kept.
    pub persistence: Persistence,
    /// Wall clock at start-up (Unix ms); the simulation passes a fixed value.
    pub wall_start_ms: u64,
    /// Seed of the core's RNG.
    pub seed: u64,
    /// Resolves when the gateway should shut down.
    pub shutdown: S,
}

/// Builds the gateway (restoring persisted state) without serving it.
pub fn build<C: Connect + Egress + Send + Sync + 'static>(
    config: Config,
    connector: C,
    persistence: Persistence,
    wall_start_ms: u64,
    seed: u64,
) -> anyhow::Result<Arc<Gateway<C>>> {
    build_observed(config, connector, persistence, wall_start_ms, seed, None)
}

/// Builds the gateway with an observer of everything it does (used by the simulation).
pub fn build_observed<C: Connect + Egress + Send + Sync + 'static>(
    config: Config,
    connector: C,
    persistence: Persistence,
    wall_start_ms: u64,
    seed: u64,
    tap: Option<state::gateway::Tap>,
) -> anyhow::Result<Arc<Gateway<C>>> {
    // Anchored first: `wall_start_ms` was read just now, and opening the store takes a while
    // (the wall clock would lag by as long).
    let clock = Clock::anchored(wall_start_ms);
    let store = match persistence {
        Persistence::Dir(dir) => Store::open_dir(&dir)?,
        Persistence::Memory => Store::in_memory()?,
    };
    Ok(Arc::new(Gateway::new(config, connector, Some(store), clock, seed, tap)?))
}

/// Serves the gateway on `listener` until `opts.shutdown` resolves.
pub async fn serve<L, C, S>(config: Config, listener: L, connector: C, opts: ServeOptions<S>) -> anyhow::Result<()>
where
    L: Listener,
    C: Connect + Egress + Send + Sync + 'static,
    S: Future<Output = ()>,
{
    let gw = build(config, connector, opts.persistence, opts.wall_start_ms, opts.seed)?;
    edge::serve::serve_gateway(gw, listener, opts.shutdown).await;
    Ok(())
}

/// The production connector (see [`state::connector`]).
pub fn https_connector(server: &config::ServerConfig) -> anyhow::Result<state::connector::Upstream> {
    state::connector::Upstream::new(server).map_err(|e| anyhow::anyhow!("{e}"))
}
