//! Swarm mode (after TigerBeetle's VOPR): a seed picks a random mix of upstream faults and a
//! random workload, over providers of both wire formats and clients of both APIs. A safety phase runs with faults; then every fault heals and a liveness
//! phase requires every breaker to close, every cooldown to end, every connection to serve and
//! every permit to return within a bound.

use ferroute_core::strategy::Strategy;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use scenarios::scenario::{
    Abort, Expect, Fault, FaultAction, ResponseExpect, Scenario, StateExpect, UpstreamSpec, Workload,
};
use scenarios::token_server::{TokenFaultSpec, TokenServerSpec};
use scenarios::{Behaviour, Mode, Script, Window};
use std::collections::BTreeMap;

/// Length of the safety phase.
pub const SAFETY_MS: u64 = 120_000;
/// Time allowed after the safety phase for everything to heal. The longest self-healing
/// timer the swarm can cause is an API-key breaker after repeated failed probes
/// (30 s × multiplier 4 = 120 s), plus one request interval.
pub const LIVENESS_BOUND_MS: u64 = 150_000;

fn fault(rng: &mut ChaCha8Rng) -> Behaviour {
    match rng.random_range(0..7) {
        0 => Behaviour::status(503, r#"{"error":{"message":"service unavailable"}}"#),
        1 => Behaviour::status(500, r#"{"error":{"message":"internal error"}}"#),
        2 => {
            let s = rng.random_range(1..8).to_string();
            Behaviour::status_with(429, &[("retry-after", s.as_str())], r#"{"error":{"message":"Rate limit reached"}}"#)
        }
        3 => Behaviour::Reset { latency_ms: rng.random_range(0..200) },
        4 => Behaviour::Stall,
        5 => Behaviour::Respond {
            status: 200,
            headers: BTreeMap::new(),
            body: r#"{"choices":[{"message":{"role":"assistant","content":"slow"}}]}"#.into(),
            pad_to: None,
            latency_ms: rng.random_range(500..2500),
        },
        _ => Behaviour::Echo { latency_ms: rng.random_range(0..100), chunk_ms: rng.random_range(0..50) },
    }
}

/// The scenario a swarm seed stands for.
pub fn generate(seed: u64) -> Scenario {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_5a17);
    let providers = rng.random_range(1..=3usize);
    let mut gateway = String::new();
    let mut upstreams = Vec::new();
    let mut targets = Vec::new();
    let mut connections = Vec::new();
    for p in 0..providers {
        let host = format!("up-{p}");
        let class = if rng.random_bool(0.5) { "api_key" } else { "local" };
        // Providers of both wire formats: requests cross formats wherever client and provider differ.
        let format = if rng.random_bool(0.5) { "anthropic" } else { "openai" };
        let within = Strategy::FOR_CONNECTIONS[rng.random_range(0..Strategy::FOR_CONNECTIONS.len())].as_str();
        gateway.push_str(&format!(
            "[[providers]]\nid = \"p{p}\"\nformat = \"{format}\"\nbase_url = \"http://{host}:9000/v1\"\nclass = \"{class}\"\nmodels = [\"m\"]\nstart_timeout_ms = 3000\nconnection_strategy = \"{within}\"\n"
        ));
        for c in 0..rng.random_range(1..=3usize) {
            let id = format!("p{p}-k{c}");
            gateway.push_str(&format!("[[connections]]\nid = \"{id}\"\nprovider = \"p{p}\"\napi_key = \"sk-{id}\"\n"));
            if rng.random_bool(0.3) {
                gateway.push_str(&format!("max_concurrent = {}\n", rng.random_range(1..3)));
            }
            connections.push(id);
        }
        // Faults in 5 s slices during the safety phase, healthy afterwards.
        let slices = SAFETY_MS / 5_000;
        let mut windows = Vec::new();
        for k in 0..slices {
            if rng.random_bool(0.6) {
                windows.push(Window { from_ms: k * 5_000, to_ms: (k + 1) * 5_000, behaviour: fault(&mut rng) });
            }
        }
        let healthy = Behaviour::Echo { latency_ms: rng.random_range(0..50), chunk_ms: 10 };
        let script = Script(Mode::Schedule { period_ms: 1_000_000_000, windows, otherwise: Box::new(healthy) });
        upstreams.push(UpstreamSpec { host: host.clone(), routes: [("m".to_owned(), script)].into_iter().collect() });
        targets.push(format!("\"p{p}/m\""));
    }
    // Mostly a routing strategy; sometimes a multi-call one (fusion judged by the first
    // provider, or a pipeline), which needs two targets.
    let multi = if targets.len() >= 2 { rng.random_range(0..10u32) } else { 9 };
    let strategy = match multi {
        0 => "fusion\"\njudge = \"p0/m".to_owned(),
        1 => "pipeline".to_owned(),
        _ => Strategy::ALL[rng.random_range(0..Strategy::ALL.len())].as_str().to_owned(),
    };
    gateway.push_str(&format!(
        "[[combos]]\nname = \"swarm\"\nstrategy = \"{strategy}\"\ntargets = [{}]\n",
        targets.join(", ")
    ));
    if rng.random_bool(0.5) {
        gateway.push_str("[resilience.throughput_watchdog]\nenabled = true\nwarmup_ms = 1000\nwindow_ms = 2000\nmin_bytes_per_second = 1\n");
    }
    gateway.push_str("[resilience.request_queue]\nexecution_max_wait_ms = 20000\n");
    let affinity = rng.random_bool(0.5);
    if affinity {
        gateway.push_str("[resilience.session_affinity]\nttl_ms = 600000\n");
    }

    let mut workload = Vec::new();
    let mut faults = Vec::new();
    // Safety phase: a random mix of combo and direct requests, some streaming.
    let groups = rng.random_range(2..5u64);
    for g in 0..groups {
        let model =
            if rng.random_bool(0.5) { "swarm".to_owned() } else { format!("p{}/m", rng.random_range(0..providers)) };
        workload.push(Workload {
            gateway: None,
            client: format!("safety-{g}"),
            start_ms: rng.random_range(0..10_000),
            every_ms: rng.random_range(300..3_000),
            count: rng.random_range(10..40),
            model,
            stream: rng.random_bool(0.4),
            anthropic: rng.random_bool(0.4),
            // Some groups are one agent session (with affinity on, pinned to one key).
            headers: if affinity && rng.random_bool(0.5) {
                [("x-session-id".to_owned(), format!("swarm-session-{g}"))].into_iter().collect()
            } else {
                BTreeMap::new()
            },
            prompt: None,
            pad_bytes: 0,
            tools: 0,
            path: None,
            method: Default::default(),
            body: None,
            // Some groups are impatient clients: expected aborts, which must never count.
            abort: match rng.random_range(0..8u32) {
                0 => Some(Abort::BeforeHeaders),
                1 => Some(Abort::AfterFirstChunk),
                2 => Some(Abort::Random),
                _ => None,
            },
            abort_after_ms: rng.random_range(50..3_000),
        });
    }
    // The gateway's link to `host` fails at `at` and heals `for_ms` later.
    let mut cut = |host: String, at: u64, for_ms: u64| {
        faults.push(Fault {
            at_ms: at,
            action: FaultAction::Partition,
            a: "gateway".into(),
            b: host.clone(),
            gateway: None,
        });
        faults.push(Fault {
            at_ms: at + for_ms,
            action: FaultAction::Repair,
            a: "gateway".into(),
            b: host,
            gateway: None,
        });
    };
    for p in 0..providers {
        if rng.random_bool(0.4) {
            let at = rng.random_range(0..SAFETY_MS / 2);
            cut(format!("up-{p}"), at, rng.random_range(1_000..20_000));
        }
    }
    // Now and then a client's own network fails: what it misses is an expected abort.
    if rng.random_bool(0.3) {
        let at = rng.random_range(0..SAFETY_MS / 2);
        let client = format!("safety-{}", rng.random_range(0..groups));
        cut(client, at, rng.random_range(1_000..10_000));
    }
    // Liveness phase: every provider is probed until the bound; the last requests must succeed.
    let check_at = SAFETY_MS + LIVENESS_BOUND_MS;
    let mut responses: Vec<ResponseExpect> = Vec::new();
    for p in 0..providers {
        let client = format!("live-{p}");
        let count = (check_at + 10_000 - SAFETY_MS) / 2_000;
        workload.push(steady(&client, format!("p{p}/m"), SAFETY_MS, count, false, rng.random_bool(0.5)));
        responses.push(ResponseExpect { client, seq: count - 1, status: Some(200), ..Default::default() });
    }
    let mut states = Vec::new();
    for p in 0..providers {
        states.push(StateExpect {
            at_ms: check_at,
            provider: Some(format!("p{p}")),
            breaker: Some("CLOSED".into()),
            ..Default::default()
        });
    }
    for c in &connections {
        states.push(StateExpect {
            at_ms: check_at,
            connection: Some(c.clone()),
            status: Some("active".into()),
            ..Default::default()
        });
    }
    // Some seeds run a second replica sharing state through the store: some safety groups send
    // to it, and its links to the store or to upstreams fail now and then. (Its own stream of
    // the seed, so that the rest of the scenario is what it was without replicas.)
    let mut rr = ChaCha8Rng::seed_from_u64(seed ^ 0x2e91_1ca5);
    let mut replicas = Vec::new();
    if rr.random_bool(0.3) {
        replicas.push("gateway-b".to_owned());
        for w in workload.iter_mut().filter(|w| w.client.starts_with("safety-")) {
            if rr.random_bool(0.5) {
                w.gateway = Some("gateway-b".into());
            }
        }
        let mut links = vec!["store".to_owned()];
        links.extend((0..providers).map(|p| format!("up-{p}")));
        for host in links {
            if rr.random_bool(0.4) {
                let at = rr.random_range(0..SAFETY_MS / 2);
                let heal = at + rr.random_range(1_000..20_000);
                for (at_ms, action) in [(at, FaultAction::Partition), (heal, FaultAction::Repair)] {
                    faults.push(Fault { at_ms, action, a: "gateway-b".into(), b: host.clone(), gateway: None });
                }
            }
        }
    }
    let token_server =
        oauth_accounts(seed, &replicas, &mut gateway, &mut upstreams, &mut workload, &mut responses, &mut states);
    Scenario {
        replicas,
        name: format!("swarm-{seed}"),
        description: "generated: random upstream faults and workload, then healed".into(),
        mechanisms: vec!["swarm".into()],
        duration_ms: check_at + 60_000,
        tick_ms: 10,
        latency_ms: Some([0, 5]),
        gateway,
        upstreams,
        workload,
        faults,
        token_server,
        interleave: true,
        expect: Expect {
            responses,
            counts: Vec::new(),
            states,
            calls: Vec::new(),
            targets: Vec::new(),
            log: Vec::new(),
        },
    }
}

/// A seed's scenario as TOML (to inspect or keep as a regression).
pub fn to_toml(s: &Scenario) -> String {
    toml::to_string(s).unwrap_or_else(|e| format!("# could not serialise: {e}\n"))
}

/// A patient client: a request for `model` every 2 s from `start_ms` on, `count` of them.
fn steady(client: &str, model: String, start_ms: u64, count: u64, stream: bool, anthropic: bool) -> Workload {
    Workload {
        gateway: None,
        client: client.to_owned(),
        start_ms,
        every_ms: 2_000,
        count,
        model,
        stream,
        anthropic,
        headers: BTreeMap::new(),
        prompt: None,
        pad_bytes: 0,
        tools: 0,
        path: None,
        method: Default::default(),
        body: None,
        abort: None,
        abort_after_ms: 0,
    }
}

/// Some seeds add a subscription provider `po` whose one or two OAuth accounts refresh at a
/// token server that is down, slow or revokes access tokens now and then — never long enough to
/// outlast a token, so every account must still serve when the liveness phase ends. With a
/// second replica, both serve the accounts and refresh them through the store; tokens then live
/// at least 120 s, so that the 20 % of a life between a refresh and the expiry (24 s) outlasts
/// the longest cut between a replica and the store (20 s): a claim's holder cut off from the
/// store publishes before the other replica's token expires. (Its own stream of the seed, so
/// that the rest of the scenario is what it was without it.)
fn oauth_accounts(
    seed: u64,
    replicas: &[String],
    gateway: &mut String,
    upstreams: &mut Vec<UpstreamSpec>,
    workload: &mut Vec<Workload>,
    responses: &mut Vec<ResponseExpect>,
    states: &mut Vec<StateExpect>,
) -> Option<TokenServerSpec> {
    let mut ro = ChaCha8Rng::seed_from_u64(seed ^ 0x0a07_4e11);
    if !ro.random_bool(0.3) {
        return None;
    }
    let shortest = if replicas.is_empty() { 60_000 } else { 120_000 };
    let lifetime_ms = ro.random_range(shortest..180_000u64);
    gateway.push_str(
        "[[providers]]\nid = \"po\"\nformat = \"anthropic\"\nbase_url = \"http://up-o:9000/v1\"\nclass = \"oauth\"\nmodels = [\"m\"]\n",
    );
    let mut accounts = Vec::new();
    for c in 0..ro.random_range(1..=2usize) {
        let id = format!("po-c{c}");
        gateway.push_str(&format!("[[connections]]\nid = \"{id}\"\nprovider = \"po\"\n{{oauth:{id}}}\n"));
        accounts.push(id);
    }
    let healthy = Behaviour::Echo { latency_ms: ro.random_range(0..50), chunk_ms: 10 };
    upstreams.push(UpstreamSpec {
        host: "up-o".into(),
        routes: [("m".to_owned(), Script::always(healthy))].into_iter().collect(),
    });
    // Outages of at most 10 s: shorter than the 20 % of a token's life between its refresh and
    // its expiry, so a token never expires while the endpoint is down.
    let mut faults = Vec::new();
    let mut quiet = Vec::new();
    for _ in 0..ro.random_range(0..3u32) {
        let at = ro.random_range(0..SAFETY_MS);
        let until = at + ro.random_range(1_000..10_000);
        let fault = if ro.random_bool(0.5) { "down" } else { "slow" };
        faults.push(TokenFaultSpec { at_ms: at, fault: fault.into(), slow_ms: ro.random_range(100..2_000) });
        faults.push(TokenFaultSpec { at_ms: until, fault: "none".into(), slow_ms: 0 });
        quiet.push(at.saturating_sub(1_000)..until + 1_000);
    }
    faults.sort_by_key(|f| f.at_ms);
    // Outages may overlap: the last word before any time is what holds, so keep the windows apart.
    faults.dedup_by_key(|f| f.at_ms);
    if ro.random_bool(0.5) {
        let at = ro.random_range(0..SAFETY_MS);
        if !quiet.iter().any(|w| w.contains(&at)) {
            faults.push(TokenFaultSpec { at_ms: at, fault: "expire_access".into(), slow_ms: 0 });
        }
    }
    let client = "live-oauth".to_owned();
    let check_at = SAFETY_MS + LIVENESS_BOUND_MS;
    let count = (check_at + 10_000) / 2_000;
    let stream = ro.random_bool(0.3);
    workload.push(steady(&client, "po/m".into(), 0, count, stream, ro.random_bool(0.5)));
    responses.push(ResponseExpect { client, seq: count - 1, status: Some(200), ..Default::default() });
    for replica in replicas {
        let client = format!("live-oauth-{replica}");
        let mut w = steady(&client, "po/m".into(), 1_000, count, stream, ro.random_bool(0.5));
        w.gateway = Some(replica.clone());
        workload.push(w);
        responses.push(ResponseExpect { client, seq: count - 1, status: Some(200), ..Default::default() });
    }
    for id in &accounts {
        states.push(StateExpect {
            at_ms: check_at,
            connection: Some(id.clone()),
            status: Some("active".into()),
            ..Default::default()
        });
    }
    Some(TokenServerSpec {
        lifetime_ms,
        accounts,
        guards: vec!["up-o".into()],
        faults,
        refreshed: None,
        refused: Some(0),
    })
}
