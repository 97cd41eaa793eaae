//! The scenario's workload as client hosts: each client sends its requests at their times and
//! records every answer (or its absence) for the checkers.

use crate::check::Outcome;
use crate::client::request;
use crate::net::SimConnector;
use crate::shared::{Shared, lock, ms, sim_now};
use bytes::Bytes;
use ferroute_core::strategy::stable_hash;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use scenarios::scenario::{Abort, Scenario, Workload};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One client host per workload client, sending its requests in time order.
pub(crate) fn add_clients(
    sim: &mut turmoil::Sim<'_>,
    scenario: &Scenario,
    shared: &Arc<Mutex<Shared>>,
    abort_seed: u64,
) {
    let mut clients: BTreeMap<String, Vec<Workload>> = BTreeMap::new();
    for w in &scenario.workload {
        clients.entry(w.client.clone()).or_default().push(w.clone());
    }
    for (name, groups) in clients {
        let shared = Arc::clone(shared);
        let client_name = name.clone();
        sim.client(name.as_str(), async move {
            let http: Client<SimConnector, Full<Bytes>> = Client::builder(TokioExecutor::new()).build(SimConnector);
            let start = tokio::time::Instant::now();
            let mut plan: Vec<(u64, Workload)> = Vec::new();
            for g in groups {
                for k in 0..g.count {
                    plan.push((g.start_ms + k * g.every_ms, g.clone()));
                }
            }
            plan.sort_by_key(|(at, _)| *at);
            let mut tasks = Vec::new();
            for (seq, (at, mut w)) in (0u64..).zip(plan) {
                let (http, shared, client) = (http.clone(), Arc::clone(&shared), client_name.clone());
                w.model = w.model.replace("{seq}", &seq.to_string());
                lock(&shared).rec.issued.insert((client.clone(), seq), None);
                tasks.push(tokio::spawn(async move {
                    tokio::time::sleep_until(start + Duration::from_millis(at)).await;
                    send(&http, &shared, &w, client, seq, abort_seed).await;
                }));
            }
            for t in tasks {
                let _ = t.await;
            }
            Ok(())
        });
    }
}

/// Sends request `seq` of `client` now and records what came back.
async fn send(
    http: &Client<SimConnector, Full<Bytes>>,
    shared: &Arc<Mutex<Shared>>,
    w: &Workload,
    client: String,
    seq: u64,
    abort_seed: u64,
) {
    let issued = ms(sim_now());
    {
        let mut s = lock(shared);
        s.rec.issued.insert((client.clone(), seq), Some(issued));
        s.rec.note(issued, format!("request {client}#{seq} {}{}", w.model, if w.stream { " stream" } else { "" }));
    }
    let give_up = match w.abort {
        Some(Abort::BeforeHeaders | Abort::After) => Some(Duration::from_millis(w.abort_after_ms)),
        Some(Abort::Random) => {
            // Its own stream of the run's seed per client and request.
            let seed = abort_seed ^ stable_hash(client.as_bytes()) ^ seq;
            let at = ChaCha8Rng::seed_from_u64(seed).random_range(0..w.abort_after_ms.max(1));
            Some(Duration::from_millis(at))
        }
        _ => None,
    };
    let outcome = request(http, w, client, seq, issued, give_up).await;
    record(&mut lock(shared), outcome, w.stream);
}

/// Records an answer: a client cut off from the gateway meanwhile gave up (an expected abort);
/// any other request without an HTTP answer is a violation.
fn record(s: &mut Shared, mut outcome: Outcome, stream: bool) {
    if outcome.status.is_none()
        && !outcome.aborted
        && let Some(why) = s.cut_off(&outcome.client, outcome.issued_ms, outcome.done_ms)
    {
        outcome.aborted = true;
        outcome.error = Some(why.into());
    }
    let line = format!("response {}", outcome.describe(stream));
    let state = match (outcome.aborted, outcome.status) {
        (true, _) => "gave up",
        (_, Some(200..=299)) => "2xx",
        (_, Some(400..=499)) => "4xx",
        (_, Some(_)) => "5xx",
        (_, None) => "no answer",
    };
    s.rec.spans.push(crate::check::Span {
        lane: format!("client:{}", outcome.client),
        state: state.into(),
        from_ms: outcome.issued_ms,
        to_ms: Some(outcome.done_ms),
        note: line.clone(),
    });
    s.rec.note(outcome.done_ms, line);
    if outcome.status.is_none() && !outcome.aborted {
        let what = format!(
            "request {}#{} got no HTTP response: {}",
            outcome.client,
            outcome.seq,
            outcome.error.clone().unwrap_or_default()
        );
        s.rec.violate(outcome.done_ms, what);
    }
    s.rec.outcomes.push(outcome);
}
