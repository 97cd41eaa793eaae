//! Real answers as faults: a swarm seed replaces some of its 5 s fault slices with answers of
//! the corpus (`scenarios/corpus/`), so that real answers meet partitions, restarts and replica
//! races. A seed of two replicas draws only answers whose effect heals within the liveness bound
//! (read at the simulation's wall clock, as both of the swarm's provider classes would read
//! them): passed, fallen back from, counted by the breaker, or cooling a key for at most 10 s.
//! A seed of one gateway draws any answer; when one that ends a key, locks a model or cools a
//! key for longer is drawn, its operator renews every key as the safety phase ends.

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

/// The ids of every corpus answer.
pub fn ids() -> Vec<&'static str> {
    CORPUS.iter().map(|a| a.id.as_str()).collect()
}

/// How many answers the corpus holds.
pub fn corpus_size() -> usize {
    CORPUS.len()
}

/// Whether `a` heals within the liveness bound by itself, read as both of the swarm's provider
/// classes would read it (`ended`: a terminal state counts as healing).
fn heals_as_both(a: &Answer, ended: bool) -> bool {
    let wall = crate::shared::WALL_START_MS;
    [ProviderClass::ApiKey, ProviderClass::Local].into_iter().all(|c| heals(&a.classify_as(c, wall), ended))
}

/// The answers a provider of `format` may draw: those that heal by themselves, or with
/// `renewable` (a seed whose operator renews every key as the safety phase ends) all of them.
pub fn drawable(format: &str, renewable: bool) -> Vec<&'static Answer> {
    CORPUS.iter().filter(|a| a.format.name() == format && (renewable || heals_as_both(a, false))).collect()
}

/// A corpus answer instead of a drawn fault, for a share of slices (its own random stream, so
/// the rest of a seed's scenario is what it was without the corpus), with whether it heals by
/// itself (else the seed's operator must renew its keys).
pub fn instead(rc: &mut ChaCha8Rng, format: &str, renewable: bool) -> Option<(Behaviour, bool)> {
    if !rc.random_bool(SHARE) {
        return None;
    }
    let pool = drawable(format, renewable);
    if pool.is_empty() {
        return None;
    }
    let a = pool[rc.random_range(0..pool.len())];
    let headers: Vec<(&str, &str)> = a.headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    Some((Behaviour::status_with(a.status, &headers, &a.body), heals_as_both(a, false)))
}

/// The ids of the corpus answers `s`'s upstreams play.
pub fn drawn(s: &Scenario) -> Vec<&'static str> {
    let mut out = Vec::new();
    for up in &s.upstreams {
        for script in up.routes.values() {
            let scenarios::Mode::Schedule { windows, .. } = &script.0 else { continue };
            for w in windows {
                // Answers may share a status and body and differ only in their headers.
                let same = |a: &Answer, headers: &std::collections::BTreeMap<String, String>| {
                    a.headers.len() == headers.len()
                        && a.headers.iter().all(|(n, v)| headers.get(n.as_str()).is_some_and(|h| h == v))
                };
                if let Behaviour::Respond { status, headers, body, .. } = &w.behaviour
                    && let Some(a) = CORPUS.iter().find(|a| a.status == *status && a.body == *body && same(a, headers))
                {
                    out.push(a.id.as_str());
                }
            }
        }
    }
    out
}
