//! Swarm mode (after TigerBeetle's VOPR): a seed picks a random mix of upstream faults and a
//! random workload, over providers of all four wire formats and clients of both APIs. A safety
//! phase runs with faults; then every fault heals and a liveness phase requires every breaker
//! to close, every cooldown to end, every connection to serve and every permit to return within
//! a bound. A seed may lean toward a [`Focus`]: a mix that makes some transitions likely (quota
//! and auth cooldowns, terminal states, model lockouts, the usage-limit lane, OAuth refreshes
//! across a cut store); `sim swarm` steers toward the transitions no seed has reached yet.

pub mod answers;
mod draft;
mod focus;
mod oauth;

pub use draft::{CHECK_AT_MS, LIVENESS_BOUND_MS, SAFETY_MS};
pub use focus::{Focus, steer};

use draft::{Draft, active, steady};

use ferroute_core::strategy::Strategy;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use scenarios::scenario::{Abort, Expect, Scenario, StateExpect, UpstreamSpec};
use scenarios::{Behaviour, Mode, Script, SseEvent, Window};
use std::collections::BTreeMap;

/// A fault for a 5 s slice on a provider of `format`: errors with and without hints, resets,
/// stalls, slow answers, and streams that send only keep-alives.
fn fault(rng: &mut ChaCha8Rng, format: &str) -> Behaviour {
    match rng.random_range(0..9) {
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
        // The same reason without a hint: the backoff decides.
        6 => Behaviour::status(429, r#"{"error":{"message":"Too many requests"}}"#),
        // A stream that is alive but says nothing: pings (Anthropic) or empty deltas (OpenAI).
        // (The newer formats have no keep-alive events: a slow echo stands in.)
        7 => match keep_alives(rng, format) {
            _ if matches!(format, "responses" | "gemini") => {
                Behaviour::Echo { latency_ms: rng.random_range(0..100), chunk_ms: rng.random_range(200..1_000) }
            }
            ka => ka,
        },
        _ => Behaviour::Echo { latency_ms: rng.random_range(0..100), chunk_ms: rng.random_range(0..50) },
    }
}

/// A 200 stream of keep-alive events only, one every 0.5–2 s, then a short answer.
fn keep_alives(rng: &mut ChaCha8Rng, format: &str) -> Behaviour {
    let gap = rng.random_range(500..2_000);
    let (event, data) = if format == "anthropic" {
        (Some("ping".to_owned()), r#"{"type":"ping"}"#)
    } else {
        (None, r#"{"choices":[{"index":0,"delta":{}}]}"#)
    };
    let mut events: Vec<SseEvent> = (0..rng.random_range(3..8))
        .map(|_| SseEvent { after_ms: gap, event: event.clone(), data: data.into(), pad_to: None })
        .collect();
    if format == "anthropic" {
        events.push(SseEvent {
            after_ms: gap,
            event: Some("message_stop".into()),
            data: r#"{"type":"message_stop"}"#.into(),
            pad_to: None,
        });
    } else {
        events.push(SseEvent { after_ms: gap, event: None, data: "[DONE]".into(), pad_to: None });
    }
    Behaviour::Stream {
        latency_ms: 0,
        events,
        reset_after: false,
        chunk_bytes: None,
        line_ending: Default::default(),
        bom: false,
    }
}

/// The scenario a swarm seed stands for (leaning toward the seed's own focus).
pub fn generate(seed: u64) -> Scenario {
    generate_with(seed, Focus::drawn(seed))
}

/// The scenario of `seed` leaning toward `focus`. Named `swarm-SEED` when that is the seed's
/// own focus, `swarm-SEED-FOCUS` otherwise (both replay with `sim run NAME`).
pub fn generate_with(seed: u64, focus: Focus) -> Scenario {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_5a17);
    let mut rf = ChaCha8Rng::seed_from_u64(seed ^ 0xf0c5_0f0c);
    let mut d = Draft { providers: rng.random_range(1..=3usize), ..Default::default() };
    // Some seeds run a second replica sharing state through the store. (Its own stream of the
    // seed, so that the rest of the scenario is what it was without replicas.)
    let mut rr = ChaCha8Rng::seed_from_u64(seed ^ 0x2e91_1ca5);
    let replicas = focus.replicas(rr.random_bool(0.3));
    // One gateway renews its keys with a reload: such a seed may draw any real answer.
    d.renewable = !replicas;
    let mut rc = ChaCha8Rng::seed_from_u64(seed ^ 0xa45e_c0de);
    let mut rn = ChaCha8Rng::seed_from_u64(seed ^ 0x6e77_f0a7);
    providers(&mut d, (&mut rng, &mut rf, &mut rc, &mut rn), focus);
    let targets: Vec<String> = (0..d.providers).map(|p| format!("\"p{p}/m\"")).collect();
    // Mostly a routing strategy; sometimes a multi-call one (fusion judged by the first
    // provider, or a pipeline), which needs two targets.
    let multi = if targets.len() >= 2 { rng.random_range(0..10u32) } else { 9 };
    let strategy = match multi {
        0 => "fusion\"\njudge = \"p0/m".to_owned(),
        1 => "pipeline".to_owned(),
        _ => Strategy::ALL[rng.random_range(0..Strategy::ALL.len())].as_str().to_owned(),
    };
    d.gateway.push_str(&format!(
        "[[combos]]\nname = \"swarm\"\nstrategy = \"{strategy}\"\ntargets = [{}]\n",
        targets.join(", ")
    ));
    if rng.random_bool(0.5) {
        d.gateway.push_str("[resilience.throughput_watchdog]\nenabled = true\nwarmup_ms = 1000\nwindow_ms = 2000\nmin_bytes_per_second = 1\n");
    }
    d.gateway.push_str("[resilience.request_queue]\nexecution_max_wait_ms = 20000\n");
    let affinity = rng.random_bool(0.5);
    if affinity {
        d.gateway.push_str("[resilience.session_affinity]\nttl_ms = 600000\n");
    }
    safety_workload(&mut d, &mut rng, affinity);
    liveness(&mut d, &mut rng);
    if replicas {
        second_replica(&mut d, &mut rr);
    }
    let token_server = oauth::accounts(seed, focus, &mut d);
    focus::apply(focus, &mut d, &mut rf);
    if d.renew && focus != Focus::Terminal {
        focus::renew_keys(&mut d);
    }
    let name =
        if focus == Focus::drawn(seed) { format!("swarm-{seed}") } else { format!("swarm-{seed}-{}", focus.name()) };
    Scenario {
        replicas: d.replicas,
        name,
        description: format!("generated: random upstream faults and workload, then healed (focus: {})", focus.name()),
        mechanisms: vec!["swarm".into()],
        duration_ms: CHECK_AT_MS + 60_000,
        tick_ms: 10,
        latency_ms: Some([0, 5]),
        gateway: d.gateway,
        upstreams: d.upstreams,
        workload: d.workload,
        faults: d.faults,
        token_server,
        interleave: true,
        expect: Expect {
            responses: d.responses,
            counts: Vec::new(),
            states: d.states,
            calls: Vec::new(),
            targets: Vec::new(),
            log: Vec::new(),
            sessions: None,
        },
    }
}

/// The scenario a `swarm-SEED` or `swarm-SEED-FOCUS` name stands for.
pub fn from_name(name: &str) -> Option<Scenario> {
    let rest = name.strip_prefix("swarm-")?;
    let (seed, focus) = match rest.split_once('-') {
        Some((seed, focus)) => (seed.parse().ok()?, Focus::parse(focus)?),
        None => {
            let seed = rest.parse().ok()?;
            (seed, Focus::drawn(seed))
        }
    };
    Some(generate_with(seed, focus))
}

/// The API-key providers `p0…`, each with one to three connections and a script of 5 s fault
/// slices over the safety phase (healthy afterwards), some of them real answers of the corpus.
/// `rngs`: the seed's main stream, its focus's, its corpus draws' and its newer formats'.
fn providers(d: &mut Draft, rngs: (&mut ChaCha8Rng, &mut ChaCha8Rng, &mut ChaCha8Rng, &mut ChaCha8Rng), focus: Focus) {
    let (rng, rf, rc, rn) = rngs;
    for p in 0..d.providers {
        let host = format!("up-{p}");
        let drawn = if rng.random_bool(0.5) { "api_key" } else { "local" };
        let class = focus.class(p, drawn);
        // Providers of every wire format: requests cross formats wherever client and provider
        // differ. A quarter of them speak the newer formats (on a stream of their own, so that
        // a seed whose providers all keep their older format keeps its scenario): a chat
        // provider becomes a Responses one, an Anthropic one a Gemini one.
        let older = if rng.random_bool(0.5) { "anthropic" } else { "openai" };
        let format = match (older, rn.random_bool(0.25)) {
            ("openai", true) => "responses",
            ("anthropic", true) => "gemini",
            (f, _) => f,
        };
        let within = Strategy::FOR_CONNECTIONS[rng.random_range(0..Strategy::FOR_CONNECTIONS.len())].as_str();
        d.gateway.push_str(&format!(
            "[[providers]]\nid = \"p{p}\"\nformat = \"{format}\"\nbase_url = \"http://{host}:9000/v1\"\nclass = \"{class}\"\nmodels = [\"m\"]\nstart_timeout_ms = 3000\nconnection_strategy = \"{within}\"\n"
        ));
        let keys = focus.connections(p, rng.random_range(1..=3usize));
        for c in 0..keys {
            let id = format!("p{p}-k{c}");
            d.gateway
                .push_str(&format!("[[connections]]\nid = \"{id}\"\nprovider = \"p{p}\"\napi_key = \"sk-{id}\"\n"));
            if rng.random_bool(0.3) {
                d.gateway.push_str(&format!("max_concurrent = {}\n", rng.random_range(1..3)));
            }
            d.connections.push(id);
        }
        // Faults in 5 s slices during the safety phase, healthy afterwards; a focus replaces
        // some slices with its own.
        let slices = SAFETY_MS / 5_000;
        let mut windows = Vec::new();
        for k in 0..slices {
            if rng.random_bool(0.6) {
                let drawn = fault(rng, format);
                let drawn = match answers::instead(rc, format, d.renewable) {
                    Some((real, heals)) => {
                        d.renew |= !heals;
                        real
                    }
                    None => drawn,
                };
                let behaviour = focus::slice(focus, rf).unwrap_or(drawn);
                windows.push(Window { from_ms: k * 5_000, to_ms: (k + 1) * 5_000, behaviour });
            }
        }
        focus::windows(focus, rf, p, &mut windows);
        let healthy = Behaviour::Echo { latency_ms: rng.random_range(0..50), chunk_ms: 10 };
        let script = Script(Mode::Schedule { period_ms: 1_000_000_000, windows, otherwise: Box::new(healthy) });
        d.upstreams.push(UpstreamSpec {
            host,
            routes: [("m".to_owned(), script)].into_iter().collect(),
            codex_backend: false,
        });
    }
}

/// Safety phase: a random mix of combo and direct requests, some streaming, some from
/// impatient clients, and network cuts between the gateway and upstreams or clients.
fn safety_workload(d: &mut Draft, rng: &mut ChaCha8Rng, affinity: bool) {
    let groups = rng.random_range(2..5u64);
    for g in 0..groups {
        let model =
            if rng.random_bool(0.5) { "swarm".to_owned() } else { format!("p{}/m", rng.random_range(0..d.providers)) };
        let mut w = steady(&format!("safety-{g}"), model, rng.random_range(0..10_000), 0, false, false);
        w.every_ms = rng.random_range(300..3_000);
        w.count = rng.random_range(10..40);
        w.stream = rng.random_bool(0.4);
        w.anthropic = rng.random_bool(0.4);
        // Some groups are one agent session (with affinity on, pinned to one key).
        if affinity && rng.random_bool(0.5) {
            w.headers.insert("x-session-id".to_owned(), format!("swarm-session-{g}"));
        }
        // Some groups are impatient clients: expected aborts, which must never count.
        w.abort = match rng.random_range(0..8u32) {
            0 => Some(Abort::BeforeHeaders),
            1 => Some(Abort::AfterFirstChunk),
            2 => Some(Abort::Random),
            _ => None,
        };
        w.abort_after_ms = rng.random_range(50..3_000);
        d.workload.push(w);
    }
    for p in 0..d.providers {
        if rng.random_bool(0.4) {
            let at = rng.random_range(0..SAFETY_MS / 2);
            d.cut("gateway", &format!("up-{p}"), at, rng.random_range(1_000..20_000));
        }
    }
    // Now and then a client's own network fails: what it misses is an expected abort.
    if rng.random_bool(0.3) {
        let at = rng.random_range(0..SAFETY_MS / 2);
        let client = format!("safety-{}", rng.random_range(0..groups));
        d.cut("gateway", &client, at, rng.random_range(1_000..10_000));
    }
}

/// Liveness phase: every provider is probed until the bound; the last requests must succeed,
/// every breaker be closed and every connection active.
fn liveness(d: &mut Draft, rng: &mut ChaCha8Rng) {
    for p in 0..d.providers {
        let client = format!("live-{p}");
        let count = (CHECK_AT_MS + 10_000 - SAFETY_MS) / 2_000;
        d.workload.push(steady(&client, format!("p{p}/m"), SAFETY_MS, count, false, rng.random_bool(0.5)));
        d.must_heal(&client, count - 1, None);
        d.states.push(StateExpect {
            at_ms: CHECK_AT_MS,
            provider: Some(format!("p{p}")),
            breaker: Some("CLOSED".into()),
            ..Default::default()
        });
    }
    for c in d.connections.clone() {
        d.states.push(active(&c));
    }
}

/// A second replica sharing state through the store: some safety groups send to it, it may
/// join the store late, and its links to the store or to upstreams fail now and then.
fn second_replica(d: &mut Draft, rr: &mut ChaCha8Rng) {
    d.replicas.push("gateway-b".to_owned());
    for w in d.workload.iter_mut().filter(|w| w.client.starts_with("safety-")) {
        if rr.random_bool(0.5) {
            w.gateway = Some("gateway-b".into());
        }
    }
    // Now and then it joins late: it reaches the store only after the first one has cooled,
    // locked and opened things (at most 20 s, the longest cut OAuth replicas tolerate).
    if rr.random_bool(0.3) {
        d.cut("gateway-b", "store", 0, rr.random_range(1_000..20_000));
    }
    let mut links = vec!["store".to_owned()];
    links.extend((0..d.providers).map(|p| format!("up-{p}")));
    for host in links {
        if rr.random_bool(0.4) {
            let at = rr.random_range(0..SAFETY_MS / 2);
            d.cut("gateway-b", &host, at, rr.random_range(1_000..20_000));
        }
    }
}

/// A seed's scenario as TOML (to inspect or keep as a regression).
pub fn to_toml(s: &Scenario) -> String {
    toml::to_string(s).unwrap_or_else(|e| format!("# could not serialise: {e}\n"))
}
