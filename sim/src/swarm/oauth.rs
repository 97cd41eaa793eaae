//! The swarm's subscription provider `po`: one or two OAuth accounts refreshing at a token
//! server that is down, slow or revokes access tokens now and then.

use super::draft::{CHECK_AT_MS, Draft, SAFETY_MS, steady};
use super::focus::Focus;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use scenarios::scenario::{StateExpect, UpstreamSpec};
use scenarios::token_server::{TokenFaultSpec, TokenServerSpec};
use scenarios::{Behaviour, Script};

/// Some seeds (every seed of the OAuth foci) add `po`. Outages never outlast a token, so every
/// account must still serve when the liveness phase ends — except under [`Focus::Refused`],
/// where the token server refuses the refresh token and each account must have ended instead.
/// With a second replica, both serve the accounts and refresh them through the store; tokens
/// then live at least 120 s, so that the 20 % of a life between a refresh and the expiry (24 s)
/// outlasts the longest cut between a replica and the store (20 s): a claim's holder cut off
/// from the store publishes before the other replica's token expires. (Its own stream of the
/// seed, so that the rest of the scenario is what it was without it.)
pub(super) fn accounts(seed: u64, focus: Focus, d: &mut Draft) -> Option<TokenServerSpec> {
    let mut ro = ChaCha8Rng::seed_from_u64(seed ^ 0x0a07_4e11);
    if !focus.oauth(ro.random_bool(0.3)) {
        return None;
    }
    let shortest = if d.replicas.is_empty() { 60_000 } else { 120_000 };
    let mut lifetime_ms = ro.random_range(shortest..180_000u64);
    d.gateway.push_str(
        "[[providers]]\nid = \"po\"\nformat = \"anthropic\"\nbase_url = \"http://up-o:9000/v1\"\nclass = \"oauth\"\nmodels = [\"m\"]\n",
    );
    let mut accounts = Vec::new();
    for c in 0..ro.random_range(1..=2usize) {
        let id = format!("po-c{c}");
        d.gateway.push_str(&format!("[[connections]]\nid = \"{id}\"\nprovider = \"po\"\n{{oauth:{id}}}\n"));
        accounts.push(id);
    }
    let healthy = Behaviour::Echo { latency_ms: ro.random_range(0..50), chunk_ms: 10 };
    d.upstreams.push(UpstreamSpec {
        host: "up-o".into(),
        routes: [("m".to_owned(), Script::always(healthy))].into_iter().collect(),
        codex_backend: false,
    });
    let faults = match focus {
        Focus::SharedRefresh => {
            lifetime_ms = ro.random_range(120_000..150_000u64);
            cut_around_refresh(d, &mut ro, lifetime_ms)
        }
        Focus::Refused => {
            let at = ro.random_range(10_000..90_000);
            vec![
                TokenFaultSpec { at_ms: at, fault: "invalid_grant".into(), slow_ms: 0 },
                TokenFaultSpec { at_ms: at, fault: "expire_access".into(), slow_ms: 0 },
            ]
        }
        _ => outages(&mut ro),
    };
    let client = "live-oauth".to_owned();
    let count = CHECK_AT_MS.div_ceil(2_000) + 5;
    let stream = ro.random_bool(0.3);
    d.workload.push(steady(&client, "po/m".into(), 0, count, stream, ro.random_bool(0.5)));
    let heals = focus != Focus::Refused;
    if heals {
        d.must_heal(&client, count - 1, None);
    }
    for replica in d.replicas.clone() {
        let client = format!("live-oauth-{replica}");
        let mut w = steady(&client, "po/m".into(), 1_000, count, stream, ro.random_bool(0.5));
        w.gateway = Some(replica.clone());
        d.workload.push(w);
        if heals {
            d.must_heal(&client, count - 1, None);
        }
    }
    for id in &accounts {
        d.states.push(StateExpect {
            at_ms: CHECK_AT_MS,
            connection: Some(id.clone()),
            status: Some(if heals { "active" } else { "expired" }.into()),
            ..Default::default()
        });
    }
    Some(TokenServerSpec {
        lifetime_ms,
        accounts,
        guards: vec!["up-o".into()],
        faults,
        refreshed: None,
        refused: heals.then_some(0),
        lost: Some(0),
        preset: None,
    })
}

/// Outages of at most 10 s: shorter than the 20 % of a token's life between its refresh and
/// its expiry, so a token never expires while the endpoint is down.
fn outages(ro: &mut ChaCha8Rng) -> Vec<TokenFaultSpec> {
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
    faults
}

/// [`Focus::SharedRefresh`]: the token endpoint takes 1–3 s, and around the first refresh
/// (due at 80 % of a token's life) the replicas lose the store: one a little before the refresh
/// is due (it must defer, not present the token), the other just after it claimed it (it must
/// keep the new tokens and publish them once the store is back). Cuts of at most 8 s.
fn cut_around_refresh(d: &mut Draft, ro: &mut ChaCha8Rng, lifetime_ms: u64) -> Vec<TokenFaultSpec> {
    let due = lifetime_ms * 4 / 5;
    let slow_ms = ro.random_range(1_000..3_000);
    let replicas: Vec<String> = std::iter::once("gateway".to_owned()).chain(d.replicas.iter().cloned()).collect();
    let first = ro.random_range(0..replicas.len());
    for (i, host) in replicas.iter().enumerate() {
        let (at, for_ms) = if i == first {
            (due.saturating_sub(ro.random_range(500..3_000)), ro.random_range(4_000..8_000))
        } else {
            (due + ro.random_range(100..slow_ms), ro.random_range(3_000..8_000))
        };
        d.cut(host, "store", at, for_ms);
    }
    vec![TokenFaultSpec { at_ms: 0, fault: "slow".into(), slow_ms }]
}
