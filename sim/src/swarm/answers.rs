//! Real answers as faults: a swarm seed replaces some of its 5 s fault slices with answers of
//! the corpus (`scenarios/corpus/`), so that real answers meet partitions, restarts and replica
//! races. A seed draws only answers whose effect heals within the liveness bound (read at the
//! simulation's wall clock, as both of the swarm's provider classes would read them): passed,
//! fallen back from, counted by the breaker, or cooling a key for at most 10 s; an answer that
//! ends a key only under the terminal focus, whose operator renews every key.

use rand::RngExt;
use rand_chacha::ChaCha8Rng;
use scenarios::Behaviour;
use scenarios::corpus::Answer;
use scenarios::scenario::Scenario;
use std::sync::LazyLock;
use std::time::Duration;

use ferroute_core::classify::{ConnectionEffect, Decision};
use ferroute_core::types::ProviderClass;

/// The corpus, read once (none when it does not load; the corpus's own tests fail then).
static CORPUS: LazyLock<Vec<Answer>> = LazyLock::new(|| scenarios::corpus::load().unwrap_or_default());

/// The share of fault slices a corpus answer replaces.
const SHARE: f64 = 0.2;

/// Whether a decision heals by itself within the liveness bound (`ended`: a terminal state
/// counts, the operator renewing keys).
fn heals(d: &Decision, ended: bool) -> bool {
    if d.lock.scope.is_some() {
        return false;
    }
    match d.connection {
        ConnectionEffect::None => true,
        ConnectionEffect::Cooldown { duration, .. } => duration <= Duration::from_secs(10),
        ConnectionEffect::Terminal(_) => ended,
        ConnectionEffect::RequestRejected => false,
    }
}

/// The answers a provider of `format` may draw (`ended`: also those that end a key).
pub fn drawable(format: &str, ended: bool) -> Vec<&'static Answer> {
    let wall = crate::shared::WALL_START_MS;
    CORPUS
        .iter()
        .filter(|a| a.format.name() == format)
        .filter(|a| {
            [ProviderClass::ApiKey, ProviderClass::Local].into_iter().all(|c| heals(&a.classify_as(c, wall), ended))
        })
        .collect()
}

/// A corpus answer instead of a drawn fault, for a share of slices (its own random stream, so
/// the rest of a seed's scenario is what it was without the corpus).
pub fn instead(rc: &mut ChaCha8Rng, format: &str, ended: bool) -> Option<Behaviour> {
    if !rc.random_bool(SHARE) {
        return None;
    }
    let pool = drawable(format, ended);
    if pool.is_empty() {
        return None;
    }
    let a = pool[rc.random_range(0..pool.len())];
    let headers: Vec<(&str, &str)> = a.headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    Some(Behaviour::status_with(a.status, &headers, &a.body))
}

/// The ids of the corpus answers `s`'s upstreams play.
pub fn drawn(s: &Scenario) -> Vec<&'static str> {
    let mut out = Vec::new();
    for up in &s.upstreams {
        for script in up.routes.values() {
            let scenarios::Mode::Schedule { windows, .. } = &script.0 else { continue };
            for w in windows {
                if let Behaviour::Respond { status, body, .. } = &w.behaviour
                    && let Some(a) = CORPUS.iter().find(|a| a.status == *status && a.body == *body)
                {
                    out.push(a.id.as_str());
                }
            }
        }
    }
    out
}
