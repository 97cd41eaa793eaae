//! One simulated run: the real gateway, scripted upstream hosts and client hosts in a turmoil
//! network, with checkers at every step.

use crate::expect::{check_state, end_checks};
use crate::faults::{check_hosts, load_config, reload, reload_line};
use crate::net::{SimConnector, SimListener};
use crate::shared::{
    GATEWAY_PORT, GatewayHandle, RunResult, STORE_HOST, STORE_PORT, Shared, UPSTREAM_PORT, WALL_START_MS, lock, ms,
    sim_now,
};
use proxy::ops::reload::{Loader, Serving};
use proxy::state::gateway::{Observed, Tap};
use proxy::{Persistence, build_observed};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use scenarios::scenario::{Fault, FaultAction, Scenario, Workload};
use scenarios::{ScriptedUpstream, serve_upstream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Spawns, on gateway host `host`, the task a `reload` fault wakes: the reload runs inside the
/// host, on its simulated clock, as a SIGHUP runs inside the process; its outcome is noted
/// (prefixed with the host's name on a replica other than the first).
fn follow_reloads(shared: &Arc<Mutex<Shared>>, serving: &Arc<Serving<SimConnector>>, host: &str, primary: bool) {
    let wake = Arc::clone(lock(shared).reload.entry(host.to_owned()).or_default());
    let (reloading, noted) = (Arc::clone(serving), Arc::clone(shared));
    let on = if primary { String::new() } else { format!("{host}: ") };
    tokio::spawn(async move {
        loop {
            wake.notified().await;
            let line = reload_line(reloading.reload());
            let mut noted = lock(&noted);
            noted.rec.note(ms(sim_now()), format!("{on}{line}"));
            noted.rec.reloaded();
        }
    });
}

/// Runs `scenario` with `seed`.
pub fn run(scenario: &Scenario, seed: u64) -> RunResult {
    #[allow(clippy::disallowed_methods)] // wall time of the run itself, for the speed report
    let wall_start = std::time::Instant::now();
    let shared = Arc::new(Mutex::new(Shared::default()));
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let turmoil_seed = rng.next_u64();
    let proxy_seed = rng.next_u64();
    let abort_seed = rng.next_u64();
    let interleave_seed = rng.next_u64();
    // Drawn for every run, so that turning points on changes nothing else of the seed's run.
    let _points = scenario.interleave.then(|| proxy::state::interleave::enable(interleave_seed));

    if let Err(problem) = check_hosts(scenario) {
        lock(&shared).rec.violate(0, format!("the scenario is invalid: {problem}"));
        return finish(scenario, seed, &shared, Duration::ZERO, wall_start);
    }
    let (tokens, gateway_text) = match crate::oauth::prepare(scenario) {
        Ok(x) => x,
        Err(e) => {
            lock(&shared).rec.violate(0, format!("the scenario's token server is invalid: {e}"));
            return finish(scenario, seed, &shared, Duration::ZERO, wall_start);
        }
    };
    let config = match load_config(&gateway_text) {
        Ok(c) => c,
        Err(e) => {
            lock(&shared).rec.violate(0, format!("the scenario's gateway config is invalid: {e}"));
            return finish(scenario, seed, &shared, Duration::ZERO, wall_start);
        }
    };

    lock(&shared).rec.max_attempts = u32::try_from(config.resilience.routing.max_attempts.max(1)).unwrap_or(u32::MAX);
    lock(&shared).rec.ladder_tops = config
        .connections
        .iter()
        .filter_map(|c| {
            let class = config.provider(&c.provider)?.class;
            Some((c.id.clone(), config.resilience.cooldown_profile(class).max_steps))
        })
        .collect();
    let mut b = turmoil::Builder::new();
    let limit = Duration::from_millis(scenario.duration_ms);
    let [lo, hi] = scenario.latency_ms.unwrap_or([0, 5]);
    b.simulation_duration(limit + Duration::from_secs(3600))
        .tick_duration(Duration::from_millis(scenario.tick_ms))
        .min_message_latency(Duration::from_millis(lo))
        .max_message_latency(Duration::from_millis(hi.max(lo)))
        .rng_seed(turmoil_seed);
    let mut sim = b.build();

    if let Some(t) = &tokens {
        crate::oauth::host(&mut sim, t, &shared);
        lock(&shared).sign_ins.clone_from(&t.tables);
    }
    add_upstreams(&mut sim, scenario, tokens.as_ref(), &shared);

    // A scenario that restarts the gateway keeps its state where production does: in a SQLite
    // file, here in a directory of its own that lives as long as the run.
    let restarts = scenario.faults.iter().any(|f| f.action == FaultAction::Restart);
    let state_dir = if restarts {
        match tempfile::tempdir() {
            Ok(d) => Some(d),
            Err(e) => {
                lock(&shared).rec.violate(0, format!("no directory for the gateway's state file: {e}"));
                return finish(scenario, seed, &shared, Duration::ZERO, wall_start);
            }
        }
    } else {
        None
    };
    let state_path = state_dir.as_ref().map(|d| d.path().to_owned());
    add_gateways(&mut sim, scenario, &config, &shared, state_path, proxy_seed);
    crate::workload::add_clients(&mut sim, scenario, &shared, abort_seed);

    drive(&mut sim, scenario, &shared);
    let simulated = sim.elapsed();
    end_checks(scenario, &shared, ms(simulated));
    if let Some(t) = &tokens {
        crate::oauth::end_checks(t, &shared, ms(simulated));
    }
    drop(sim);
    drop(state_dir);
    finish(scenario, seed, &shared, simulated, wall_start)
}

/// Steps the simulation until every client is done and every fault and state check is due, the
/// scenario's time is up, or a check fails: faults and state checks happen at their times.
fn drive(sim: &mut turmoil::Sim<'_>, scenario: &Scenario, shared: &Arc<Mutex<Shared>>) {
    let mut faults = scenario.faults.clone();
    faults.sort_by_key(|f| f.at_ms);
    let mut next_fault = 0;
    let mut states: Vec<(usize, &scenarios::scenario::StateExpect)> =
        scenario.expect.states.iter().enumerate().collect();
    states.sort_by_key(|(_, s)| s.at_ms);
    let mut next_state = 0;
    let mut clients_done = scenario.workload.is_empty();
    loop {
        let t = ms(sim.elapsed());
        while next_fault < faults.len() && faults[next_fault].at_ms <= t {
            apply_fault(sim, scenario, shared, &faults[next_fault], t);
            next_fault += 1;
        }
        while next_state < states.len() && states[next_state].1.at_ms <= t {
            check_state(shared, states[next_state].1, t);
            next_state += 1;
        }
        if !lock(shared).rec.violations.is_empty() {
            break;
        }
        let all_due_checked = next_state >= states.len() && next_fault >= faults.len();
        if clients_done && all_due_checked {
            break;
        }
        if t > scenario.duration_ms {
            break;
        }
        match sim.step() {
            Ok(done) => clients_done = clients_done || done,
            Err(e) => {
                lock(shared).rec.violate(t, format!("simulation error: {e}"));
                break;
            }
        }
    }
}

/// The shared store (with replicas) and the gateway hosts: `gateway` and each replica, every
/// one the real gateway over simulated sockets. Only the first restarts, keeping its state in
/// the file under `state_path` across that.
fn add_gateways(
    sim: &mut turmoil::Sim<'_>,
    scenario: &Scenario,
    config: &proxy::config::Config,
    shared: &Arc<Mutex<Shared>>,
    state_path: Option<std::path::PathBuf>,
    proxy_seed: u64,
) {
    let sharing = !scenario.replicas.is_empty();
    if sharing {
        sim.host(STORE_HOST, || async {
            let listener = SimListener::bind(STORE_PORT).await?;
            scenarios::store::serve_store(listener, scenarios::store::StoreHost::new()).await;
            Ok(())
        });
    }
    for host in std::iter::once("gateway".to_owned()).chain(scenario.replicas.iter().cloned()) {
        let shared = Arc::clone(shared);
        let config = config.clone();
        let primary = host == "gateway";
        let state_path = if primary { state_path.clone() } else { None };
        let name = host.clone();
        sim.host(name.as_str(), move || {
            let persistence = state_path.clone().map_or(Persistence::Memory, Persistence::Dir);
            let gateway = GatewayHost { shared: Arc::clone(&shared), host: host.clone(), sharing, primary, proxy_seed };
            gateway.serve(config.clone(), persistence)
        });
    }
}

/// One gateway host, as it (re)starts.
struct GatewayHost {
    shared: Arc<Mutex<Shared>>,
    host: String,
    sharing: bool,
    primary: bool,
    proxy_seed: u64,
}

impl GatewayHost {
    /// Builds the gateway with a tap into the run's recorder, joins the shared state, follows
    /// reloads, and serves until the run (or a restart) ends it.
    async fn serve(self, config: proxy::config::Config, persistence: Persistence) -> turmoil::Result {
        let GatewayHost { shared, host, sharing, primary, proxy_seed } = self;
        let base = tokio::time::Instant::now().into_std();
        let e0 = sim_now();
        let tap_shared = Arc::clone(&shared);
        let ms_of = move |at: Instant| ms(e0) + ms(at.saturating_duration_since(base));
        let tap_host = host.clone();
        let tap: Tap = Box::new(move |at: Instant, what: Observed<'_>| {
            let mut s = lock(&tap_shared);
            s.rec.observe_on(&tap_host, ms_of(at), &what, &ms_of);
        });
        // A restarted gateway's wall clock goes on from where the simulation is.
        let wall = WALL_START_MS + ms(e0);
        let gw = build_observed(config, SimConnector, persistence, wall, proxy_seed, Some(tap))
            .map_err(|e| e.to_string())?;
        // A reload reads the text the `reload` fault left; no text, no reload.
        let (next, reader) = (Arc::clone(&shared), host.clone());
        let loader: Loader = Box::new(move || {
            let text = lock(&next).next_config.remove(&reader).unwrap_or_default();
            load_config(&text)
        });
        let serving = Serving::new(gw, Some(loader));
        if sharing {
            let store = Arc::new(crate::store::StoreClient::simulated(STORE_HOST, STORE_PORT));
            proxy::replicas::follow::start_with(Arc::clone(&serving), store, host.clone());
        }
        follow_reloads(&shared, &serving, &host, primary);
        if primary {
            if ms(e0) > 0 {
                lock(&shared).rec.started_again(ms(e0));
            }
            lock(&shared).gateway = Some(GatewayHandle { serving: Arc::clone(&serving), base, e0 });
        }
        let listener = SimListener::bind(GATEWAY_PORT).await?;
        proxy::edge::serve::serve_live(serving, listener, std::future::pending()).await;
        Ok(())
    }
}

/// Applies fault `f` at `t`, and notes it.
fn apply_fault(sim: &mut turmoil::Sim<'_>, scenario: &Scenario, shared: &Arc<Mutex<Shared>>, f: &Fault, t: u64) {
    match f.action {
        FaultAction::Partition => sim.partition(f.a.as_str(), f.b.as_str()),
        FaultAction::Repair => sim.repair(f.a.as_str(), f.b.as_str()),
        FaultAction::Hold => sim.hold(f.a.as_str(), f.b.as_str()),
        FaultAction::Release => sim.release(f.a.as_str(), f.b.as_str()),
        FaultAction::Restart => sim.bounce(f.a.as_str()),
        FaultAction::Reload => reload(shared, f, t),
    }
    let mut s = lock(shared);
    // A client on either end of a partition with the gateway: what it misses meanwhile is an
    // expected abort, not a lost request.
    let client = [&f.a, &f.b].into_iter().find(|h| scenario.workload.iter().any(|w| &w.client == *h));
    if f.action == FaultAction::Restart {
        s.restarts.push(t);
    }
    if let Some(c) = client {
        let cuts = s.cuts.entry(c.clone()).or_default();
        match f.action {
            FaultAction::Partition => cuts.push((t, None)),
            FaultAction::Repair => {
                if let Some(open) = cuts.last_mut().filter(|(_, until)| until.is_none()) {
                    open.1 = Some(t);
                }
            }
            _ => {}
        }
    }
    s.rec.note(t, format!("fault {:?} {} {}", f.action, f.a, f.b));
}

/// The scenario's scripted upstream hosts (those the token server guards answer only its valid
/// access tokens), each registered in `shared` once it runs.
fn add_upstreams(
    sim: &mut turmoil::Sim<'_>,
    scenario: &Scenario,
    tokens: Option<&crate::oauth::Tokens>,
    shared: &Arc<Mutex<Shared>>,
) {
    for u in &scenario.upstreams {
        let routes = u.routes.clone();
        let guard = tokens.filter(|t| t.guards(&u.host)).map(|t| Arc::clone(&t.server));
        let shared = Arc::clone(shared);
        let host = u.host.clone();
        let codex = u.codex_backend;
        sim.host(u.host.as_str(), move || {
            let routes = routes.clone();
            let shared = Arc::clone(&shared);
            let host = host.clone();
            let guard = guard.clone();
            async move {
                let up = routes
                    .into_iter()
                    .fold(ScriptedUpstream::new().wall_clock(WALL_START_MS), |acc, (model, script)| {
                        acc.route(&model, script)
                    });
                let up = if codex { up.codex_backend() } else { up };
                let up = Arc::new(match guard {
                    Some(server) => up.require_tokens(server),
                    None => up,
                });
                lock(&shared).upstreams.insert(host, Arc::clone(&up));
                let listener = SimListener::bind(UPSTREAM_PORT).await?;
                serve_upstream(listener, up).await;
                Ok(())
            }
        });
    }
}

fn finish(
    scenario: &Scenario,
    seed: u64,
    shared: &Arc<Mutex<Shared>>,
    simulated: Duration,
    wall_start: std::time::Instant,
) -> RunResult {
    let mut s = lock(shared);
    let rec = std::mem::take(&mut s.rec);
    s.gateway = None;
    s.upstreams.clear();
    #[allow(clippy::disallowed_methods)]
    let wall = wall_start.elapsed();
    RunResult {
        scenario: scenario.name.clone(),
        seed,
        hash: rec.hash(),
        violations: rec.violations,
        log: rec.log,
        outcomes: rec.outcomes,
        simulated,
        wall,
        spans: rec.spans,
        coverage: rec.coverage,
    }
}

/// A one-hour scenario with 10 000 requests, for measuring simulation speed.
pub fn bench_scenario() -> Scenario {
    let gateway = "[[providers]]\nid = \"a\"\nbase_url = \"http://up-a:9000/v1\"\nmodels = [\"m\"]\n[[connections]]\nid = \"a1\"\nprovider = \"a\"\napi_key = \"sk\"\n[[connections]]\nid = \"a2\"\nprovider = \"a\"\napi_key = \"sk\"\n".to_owned();
    let script = scenarios::Script(scenarios::Mode::Cycle {
        steps: vec![
            scenarios::Behaviour::echo(),
            scenarios::Behaviour::echo(),
            scenarios::Behaviour::echo(),
            scenarios::Behaviour::status_with(
                429,
                &[("retry-after", "1")],
                r#"{"error":{"message":"Rate limit reached"}}"#,
            ),
        ],
    });
    Scenario {
        replicas: Vec::new(),
        name: "bench-hour".into(),
        description: "one simulated hour, 10 000 requests, one in four rate-limited".into(),
        mechanisms: vec!["speed".into()],
        duration_ms: 3_700_000,
        tick_ms: 10,
        latency_ms: Some([0, 5]),
        gateway,
        upstreams: vec![scenarios::scenario::UpstreamSpec {
            host: "up-a".into(),
            routes: [("m".to_owned(), script)].into_iter().collect(),
            codex_backend: false,
        }],
        workload: vec![Workload { every_ms: 360, count: 10_000, ..Workload::of("client", "a/m") }],
        faults: Vec::new(),
        token_server: None,
        interleave: false,
        expect: scenarios::scenario::Expect::default(),
    }
}
