//! The gateway's shared state: config, the core engine behind one lock, admission queues,
//! the store, metrics and the upstream client.

use crate::config::Config;
use crate::recording::telemetry::Telemetry;
use crate::recording::writer::Recorder;
use crate::replicas::link::Replicas;
use crate::request::endpoint::Endpoints;
use crate::request::resolve::Plan;
use crate::sessions::accounts::Accounts;
use crate::sessions::sealed::Sealer;
use crate::state::clock::Clock;
use crate::state::metrics::Metrics;
use crate::state::outbound as outbound_via;
use crate::state::store::{PinWrite, Store, StoreError};
use bytes::Bytes;
use ferroute_core::admission::AdmissionQueue;
use ferroute_core::engine::{Engine, Event, Slot, Strategy};
use ferroute_core::session::PinEvent;
use ferroute_core::usage_limit::LaneChange;
use http_body_util::Full;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::Connect;
use hyper_util::rt::TokioExecutor;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// The upstream client.
pub type UpstreamClient<C> = HyperClient<C, Full<Bytes>>;

/// The store key of the emergency switch (M16).
pub const EMERGENCY_SETTING: &str = "emergency_fallback.enabled";

pub use observed::Observed;

/// An observer of the gateway; called synchronously, never with a lock held.
pub type Tap = Box<dyn Fn(Instant, Observed<'_>) + Send + Sync>;

/// A shared observer (a reloaded gateway keeps its predecessor's).
type SharedTap = Arc<dyn Fn(Instant, Observed<'_>) + Send + Sync>;

/// The gateway: one config and everything that outlives it. A reload (see [`crate::ops::reload`])
/// builds a new `Gateway` for the new config that shares the state of this one (the engine,
/// queues, store, metrics, counters and upstream client); requests already running keep the
/// `Gateway` they started with, so their targets stay valid.
pub struct Gateway<C> {
    /// The config.
    pub config: Config,
    engine: Arc<Mutex<Engine>>,
    queues: Arc<Mutex<rustc_hash::FxHashMap<String, QueueEntry>>>,
    /// The store, if persistence is on.
    pub store: Option<Arc<Store>>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// The clock.
    pub clock: Clock,
    /// The upstream client of requests that belong to no connection (direct, or as the
    /// environment's proxy variables say).
    pub client: UpstreamClient<C>,
    /// The clients by way out, and each connection's with how it leaves (by index).
    pool: outbound::SharedPool<C>,
    routes: Vec<(UpstreamClient<C>, crate::state::outbound::Via, String)>,
    /// Upstream endpoints and credentials, prepared once per config.
    pub endpoints: Endpoints,
    /// Each provider's connection strategy, and whether its keys are tried in turn (by index).
    connection_strategies: Vec<(Strategy, bool)>,
    /// Each connection's place in the engine's tables and the engine's copy of its id, by
    /// index: candidates carry both, so the core finds a connection without hashing its id.
    connection_keys: Vec<(Slot, Arc<str>)>,
    /// Each provider's listed models with their targets, built once per config.
    listed: Vec<std::collections::BTreeMap<Box<str>, crate::request::resolve::Listing>>,
    /// Each provider's daily reset zone, by index.
    daily_resets: Vec<ferroute_core::calendar::DailyReset>,
    /// M16: whether the emergency target is switched on (operators flip it at runtime).
    pub emergency: Arc<std::sync::atomic::AtomicBool>,
    /// M13: the egress IP last observed per connection id.
    pub egress: Arc<Mutex<BTreeMap<String, std::net::IpAddr>>>,
    tap: Option<SharedTap>,
    ids: Arc<std::sync::atomic::AtomicU64>,
    requests: Arc<std::sync::atomic::AtomicU64>,
    /// The other replicas, when state is shared (`[state] backend = "redis"`).
    replicas: Arc<std::sync::OnceLock<Arc<Replicas>>>,
    /// The OAuth accounts' tokens and refresh schedules.
    pub accounts: Arc<Accounts>,
    /// The operator's feed of state changes.
    pub feed: Arc<crate::state::feed::Feed>,
    /// The recent past the dashboard shows: answer rates, the last hour, combo paths.
    pub history: Arc<crate::state::history::History>,
    /// The flight recorder, when `[recording]` is on.
    pub recorder: Option<Arc<Recorder>>,
    /// OpenTelemetry export, when an endpoint is set (the binary sets it at start).
    pub telemetry: Arc<std::sync::OnceLock<Arc<Telemetry>>>,
    /// The client kinds each connection's credential refused lately (not a failure of it).
    unsuited: Arc<Mutex<ferroute_core::unsuited::Unsuited>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // State machines are updated in single synchronous calls, so a panic elsewhere cannot
    // leave one half-updated: a poisoned lock is still consistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl<C: Connect + Clone + Send + Sync + 'static> Gateway<C> {
    /// Builds the gateway and restores persisted state.
    pub fn new(
        config: Config,
        connector: C,
        store: Option<Store>,
        clock: Clock,
        seed: u64,
        tap: Option<Tap>,
    ) -> Result<Self, StoreError>
    where
        C: outbound::Egress,
    {
        let from_env = config.server.proxy_from_env;
        let make = move |via: &outbound_via::Via| {
            HyperClient::builder(TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(90))
                .pool_timer(hyper_util::rt::TokioTimer::new())
                .build(connector.via(via))
        };
        let default =
            if from_env { outbound_via::Via::from_env(&outbound::process_env) } else { outbound_via::Via::Direct };
        let client = make(&default);
        let pool = Arc::new(outbound::Pool::new(Box::new(make)));
        let routes = pool.routes(&config, &outbound::process_env);
        let mut engine = Engine::new(config.resilience.clone(), seed);
        let connection_keys = config.connections.iter().map(|c| engine.slot(&c.id)).collect();
        let emergency = std::sync::atomic::AtomicBool::new(config.emergency_fallback.enabled);
        let sealer = Sealer::new(config.server.secret_key.as_deref()).map_err(|e| StoreError::Key(e.to_string()))?;
        let gw = Gateway {
            accounts: Arc::new(Accounts::new(sealer)),
            endpoints: Endpoints::new(&config),
            connection_strategies: Self::strategies(&config),
            connection_keys,
            listed: crate::request::resolve::listed(&config),
            daily_resets: config.providers.iter().map(|p| p.daily_reset()).collect(),
            emergency: Arc::new(emergency),
            egress: Arc::default(),
            config,
            engine: Arc::new(Mutex::new(engine)),
            queues: Arc::default(),
            store: store.map(Arc::new),
            metrics: Arc::new(Metrics::new()),
            clock,
            client,
            pool,
            routes,
            tap: tap.map(|t| -> SharedTap { Arc::from(t) }),
            ids: Arc::default(),
            requests: Arc::default(),
            replicas: Arc::default(),
            feed: Arc::default(),
            history: Arc::default(),
            recorder: None,
            telemetry: Arc::default(),
            unsuited: Arc::default(),
        };
        let gw = Gateway { recorder: Recorder::for_config(&gw.config, None)?, ..gw };
        gw.restore()?;
        gw.sync_accounts();
        Ok(gw)
    }

    /// A gateway for `config` that shares this one's state (see [`crate::ops::reload`]). Settings
    /// reach the engine at once; breakers, connections, lockouts, pins, queues and leases carry
    /// over by id.
    pub fn successor(&self, config: Config) -> Gateway<C> {
        let routes = self.pool.routes(&config, &outbound::process_env);
        let connection_keys = self.with_engine(|e| {
            e.set_settings(config.resilience.clone());
            config.connections.iter().map(|c| e.slot(&c.id)).collect()
        });
        let gw = Gateway {
            accounts: Arc::clone(&self.accounts),
            endpoints: Endpoints::new(&config),
            connection_strategies: Self::strategies(&config),
            connection_keys,
            listed: crate::request::resolve::listed(&config),
            daily_resets: config.providers.iter().map(|p| p.daily_reset()).collect(),
            emergency: Arc::clone(&self.emergency),
            egress: Arc::clone(&self.egress),
            config,
            engine: Arc::clone(&self.engine),
            queues: Arc::clone(&self.queues),
            store: self.store.clone(),
            metrics: Arc::clone(&self.metrics),
            clock: self.clock,
            client: self.client.clone(),
            routes,
            pool: Arc::clone(&self.pool),
            tap: self.tap.clone(),
            ids: Arc::clone(&self.ids),
            requests: Arc::clone(&self.requests),
            replicas: Arc::clone(&self.replicas),
            feed: Arc::clone(&self.feed),
            history: Arc::clone(&self.history),
            recorder: None,
            telemetry: Arc::clone(&self.telemetry),
            unsuited: Arc::clone(&self.unsuited),
        };
        let recorder = Recorder::for_config(&gw.config, self.recorder.as_ref()).unwrap_or_else(|e| {
            tracing::error!(error = %e, "recording stays off: its directory cannot be written");
            None
        });
        let gw = Gateway { recorder, ..gw };
        gw.sync_accounts();
        gw
    }

    /// Brings the OAuth accounts in line with the config; a connection signed in anew leaves
    /// its `expired` state.
    fn sync_accounts(&self) {
        let wall = self.clock.wall_now_ms();
        let (renewed, problems) = self.accounts.sync(&self.config, self.store.as_deref(), wall);
        for p in problems {
            tracing::error!(problem = %p, "OAuth tokens");
        }
        if !renewed.is_empty() {
            tracing::info!(connections = ?renewed, "OAuth connections signed in anew");
            let now = self.clock.now();
            self.with_engine(|e| renewed.iter().for_each(|id| _ = e.renew_connection(now, id)));
            self.settle();
        }
    }

    fn restore(&self) -> Result<(), StoreError> {
        let Some(store) = &self.store else { return Ok(()) };
        let loaded = store.load()?;
        let now = self.clock.now();
        let wall = self.clock.wall_ms(now);
        let mut engine = lock(&self.engine);
        for (provider, snap, saved) in loaded.breakers {
            let Some(p) = self.config.provider(&provider) else { continue };
            let cfg = self.config.resilience.breaker_config(p.class);
            engine.breakers_mut().restore(&provider, &cfg, &snap.aged(wall.saturating_sub(saved)), now);
        }
        // Each connection's provider, looked up once per stored entry (not a pass over the
        // config per entry: 100 000 pins and 1 000 connections made that 160 ms of start-up).
        let provider_of: hashbrown::HashMap<&str, &str, rustc_hash::FxBuildHasher> =
            self.config.connections.iter().map(|c| (c.id.as_str(), c.provider.as_str())).collect();
        for (id, snap, saved) in loaded.connections {
            if provider_of.contains_key(id.as_str()) {
                engine.restore_connection(&id, &snap.aged(wall.saturating_sub(saved)), now);
            }
        }
        // M5: pins keep their wall-clock expiry across a restart; pins to connections no longer
        // configured are left to lapse.
        let pins = loaded
            .pins
            .into_iter()
            .filter(|(_, provider, connection, _)| provider_of.get(connection.as_str()) == Some(&provider.as_str()))
            .map(|(s, p, c, expires)| (s, p, c, Duration::from_millis(expires.saturating_sub(wall))));
        engine.affinity_mut().restore_all(now, pins);
        drop(engine);
        self.invalidate_stale_leases()?;
        if self.config.emergency_fallback.target.is_some()
            && let Some(v) = store.setting(EMERGENCY_SETTING)?
        {
            self.emergency.store(v == "true", std::sync::atomic::Ordering::Relaxed);
        }
        let settings = serde_json::to_string(&self.config.resilience).unwrap_or_default();
        store.save_setting("resilience.effective", &settings, wall)?;
        Ok(())
    }

    /// Runs `f` on the engine (one synchronous call; never held across `.await`).
    pub fn with_engine<R>(&self, f: impl FnOnce(&mut Engine) -> R) -> R {
        f(&mut lock(&self.engine))
    }

    /// Runs `f` on the client kinds each credential refused lately (as [`Self::with_engine`]).
    pub fn with_unsuited<R>(&self, f: impl FnOnce(&mut ferroute_core::unsuited::Unsuited) -> R) -> R {
        f(&mut lock(&self.unsuited))
    }

    /// Drains the engine's events: logs them and persists what they changed; returns them.
    pub fn settle(&self) -> Vec<Event> {
        let settled = self.with_engine(|e| {
            let mut events = Vec::new();
            while let Some(ev) = e.poll_event() {
                events.push(ev);
            }
            // Most outcomes change nothing worth a word (a success on a healthy connection).
            if events.is_empty() && !e.has_shared() {
                return None;
            }
            let now = self.clock.now();
            let shared = e.take_shared(now);
            let mut providers = BTreeSet::new();
            let mut conns = BTreeSet::new();
            for ev in &events {
                match ev {
                    Event::Breaker(t) => {
                        providers.insert(t.provider.clone());
                    }
                    Event::ConnectionCooldown { connection, .. }
                    | Event::ConnectionTerminal { connection, .. }
                    | Event::ConnectionRecovered { connection } => {
                        conns.insert(connection.to_string());
                    }
                    Event::Lockout { .. }
                    | Event::LockoutDecayed { .. }
                    | Event::LockoutsCleared { .. }
                    | Event::Pin(_)
                    | Event::Lane { .. } => {}
                }
            }
            let breakers: Vec<_> = providers
                .into_iter()
                .filter_map(|p| e.breakers().get(&p).map(|b| (p.clone(), b.snapshot(now))))
                .collect();
            let connections: Vec<_> = conns
                .into_iter()
                .map(|c| {
                    let s = e.connection(&c).snapshot(now);
                    (c, s)
                })
                .collect();
            Some((now, events, breakers, connections, shared))
        });
        let Some((now, events, breakers, connections, shared)) = settled else { return Vec::new() };
        if let Some(r) = self.replicas.get()
            && !shared.is_empty()
        {
            r.publish(shared, self.clock.wall_ms(now));
        }
        for ev in &events {
            crate::state::event_log::log_event(ev, &self.clock);
            self.feed.engine_event(ev, &self.clock, now);
            self.history.timeline().event(ev, self.clock.wall_ms(now), |i| self.clock.wall_ms(i));
            if let Event::Lane { connection, change } = ev {
                let event = match change {
                    LaneChange::Accepted { .. } => "accepted".to_owned(),
                    LaneChange::Ended(why) => format!("ended_{}", why.as_str()),
                    LaneChange::Reset(outcome) => format!("reset_{}", outcome.as_str()),
                };
                self.metrics.usage_limit(connection, &event);
            }
            self.observe(now, Observed::Core(ev));
        }
        if let Some(store) = &self.store
            && let Err(e) = store.save(&breakers, &connections, self.clock.wall_ms(now))
        {
            tracing::error!(error = %e, "could not persist resilience state");
        }
        let pins: Vec<PinWrite> = events
            .iter()
            .filter_map(|ev| match ev {
                Event::Pin(PinEvent::Set { session, provider, connection, expires_at }) => Some(PinWrite::Set(
                    session.clone(),
                    provider.clone(),
                    connection.clone(),
                    self.clock.wall_ms(*expires_at),
                )),
                Event::Pin(PinEvent::Dropped { session, provider }) => {
                    Some(PinWrite::Drop(session.clone(), provider.clone()))
                }
                _ => None,
            })
            .collect();
        if let Some(store) = &self.store
            && let Err(e) = store.save_pins(&pins, self.clock.wall_ms(now))
        {
            tracing::error!(error = %e, "could not persist session pins");
        }
        events
    }

    /// Tells the observer, if any.
    pub fn observe(&self, now: Instant, what: Observed<'_>) {
        if let Some(tap) = &self.tap {
            tap(now, what);
        }
    }

    /// Writes every breaker and connection (shutdown).
    pub fn flush(&self) {
        let now = self.clock.now();
        let (b, c) = self.with_engine(|e| {
            let b: Vec<_> = e.breakers().iter().map(|(p, br)| (p.to_owned(), br.snapshot(now))).collect();
            let c: Vec<_> = e.connections().map(|(id, s)| (id.to_owned(), s.snapshot(now))).collect();
            (b, c)
        });
        if let Some(store) = &self.store
            && let Err(e) = store.save(&b, &c, self.clock.wall_ms(now))
        {
            tracing::error!(error = %e, "could not flush resilience state");
        }
    }

    /// Resolves a request's `model` (see [`crate::request::resolve::resolve`]).
    pub fn resolve(&self, model: &str) -> Result<Plan, String> {
        crate::request::resolve::resolve_with(&self.config, model, &self.listed)
    }

    /// M16: the emergency target as a plan of its own, when it is configured and switched on.
    pub fn emergency_plan(&self, key: &str) -> Option<Plan> {
        if !self.emergency.load(std::sync::atomic::Ordering::Relaxed) {
            return None;
        }
        crate::request::resolve::emergency(&self.config, key)
    }

    /// A fresh id for objects Ferroute names itself (Responses API responses): unique within
    /// this process and across restarts (it starts from the wall clock at start-up).
    pub fn next_id(&self) -> String {
        let n = self.ids.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("{:x}{n:06x}", self.clock.wall_ms(self.clock.start()))
    }

    /// Counts a client's answer of `status` for `provider` (`""`: none), in the metrics and
    /// the dashboard's rates.
    pub fn count_answer(&self, status: u16, provider: &str) {
        self.metrics.request(status, provider);
        self.history.rates().add(self.clock.wall_now_ms() / 60_000, provider, status);
    }

    /// A number for one client request, for observers (unique in this process).
    pub fn next_request(&self) -> u64 {
        self.requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// Runs the engine's periodic sweep.
    pub fn sweep(&self) {
        let now = self.clock.now();
        self.with_engine(|e| e.sweep(now));
    }
}

/// Seconds since an instant, for latency metrics.
pub fn seconds_since(start: Instant, now: Instant) -> f64 {
    now.saturating_duration_since(start).as_secs_f64()
}

/// One admission queue, and how to wake the requests waiting in it (see [`queues`]).
struct QueueEntry {
    /// The queue's key, shared by its slots.
    key: Arc<str>,
    queue: AdmissionQueue,
    wakers: BTreeMap<u64, oneshot::Sender<()>>,
    /// The depth its gauge was last set to (`usize::MAX`: never set).
    published: usize,
}

mod candidates;
mod observed;
pub mod outbound;
pub mod queues;
mod shared;
