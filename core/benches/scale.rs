//! A routing decision's cost as the world grows: `scale WORLD COUNT` builds one world, makes
//! 20 warm-up decisions and then COUNT more, and exits. Each decision is the decision bench's
//! (a pick among 8 keys of one provider, round robin, with a session; a 429 classified and
//! recorded; events drained). Run it under callgrind for two counts and subtract, and the
//! difference is a per-decision cost free of the world's build: `scripts/scale-instructions`
//! does so for every world and prints each as a multiple of `base`.
//!
//! Worlds: `base` (nothing else), or an axis and a size: `providers-N` (N-1 more providers,
//! each breaker holding a failure), `lockouts-spread-N` (N active model lockouts on 1 000 other
//! connections), `lockouts-one-key-N` (N active lockouts of other models, all on `k1`, one of
//! the 8), `pins-N` (N session pins on 1 000 other connections, at most the 100 000 the gateway
//! keeps: every 429 moves the pins of the key it cools, and that must not cost a pass over all
//! of them). `scripts/curves` draws each axis from 0 (or 1) to its large end.

use ferroute_core::engine::{AttemptOutcome, Engine, Route, Selection, SharedChange, Strategy};
use ferroute_core::tried::Tried;
use ferroute_core::types::{ProviderClass, Reason};
use std::hint::black_box;
use std::time::{Duration, Instant};

mod common;
use common::{BODY, HEADERS, start};

/// Longer than any run: the world's state stays active throughout.
const YEARS_MS: u64 = 10 * 365 * 24 * 3_600_000;

fn build(engine: &mut Engine, world: &str, now: Instant) -> Result<(), String> {
    let class = |_: &str| Some(ProviderClass::ApiKey);
    let mut apply = |change: SharedChange| engine.apply_shared(now, &change, &class);
    let lockout = |connection: String, model: String| SharedChange::Lockout {
        provider: "openai".to_owned(),
        connection,
        model,
        reason: Reason::RateLimitExceeded,
        remaining_ms: YEARS_MS,
    };
    let (axis, n) = match world.rsplit_once('-') {
        Some((axis, n)) => (axis, n.parse::<usize>().map_err(|_| format!("unknown world {world:?}"))?),
        None if world == "base" => ("base", 0),
        None => return Err(format!("unknown world {world:?}")),
    };
    match axis {
        "base" => {}
        "providers" => {
            for i in 0..n.saturating_sub(1) {
                apply(SharedChange::ProviderFailure { provider: format!("p{i:04}"), connection: format!("p{i:04}-k") });
            }
        }
        "lockouts-spread" => {
            for i in 0..n {
                apply(lockout(format!("c{:04}", i % 1_000), format!("m{}", i / 1_000)));
            }
        }
        "lockouts-one-key" => {
            for i in 0..n {
                apply(lockout("k1".to_owned(), format!("m{i}")));
            }
        }
        "pins" => {
            // The bench's own session takes one place.
            for i in 0..n.min(ferroute_core::session::affinity::MAX_PINS - 1) {
                apply(SharedChange::Pin {
                    session: format!("s{i}"),
                    provider: "openai".to_owned(),
                    connection: format!("c{:04}", i % 1_000),
                    remaining_ms: YEARS_MS,
                });
            }
        }
        _ => return Err(format!("unknown world {world:?}")),
    }
    while engine.poll_event().is_some() {}
    Ok(())
}

fn main() -> Result<(), String> {
    // `cargo bench` passes `--bench`; the world and count are the first two other arguments.
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let world = args.first().map_or("base", String::as_str);
    let count: u64 = match args.get(1) {
        Some(n) => n.parse().map_err(|_| format!("COUNT must be a number, not {n:?}"))?,
        None => 1_000,
    };
    let mut engine = Engine::new(common::settings(), 1);
    let keys = common::slots(&mut engine);
    let cands = common::slotted(&keys);
    let mut now = start();
    build(&mut engine, world, now)?;
    let skip = Tried::new();
    let route = Route {
        session: Some("bench-session"),
        session_ttl: Duration::from_secs(86_400),
        ..Route::new(Strategy::RoundRobin, "bench")
    };
    for _ in 0..20 + count {
        // An hour on, the cooldowns and lockouts the loop itself made have passed (the world's
        // own last for years), so each iteration is one whole decision.
        now += Duration::from_secs(3600);
        match engine.select(now, &cands, &route, &skip) {
            Selection::Pick { index, ticket } => {
                let outcome = AttemptOutcome::Upstream { status: 429, headers: HEADERS, body: BODY };
                black_box(engine.record(now, &cands[index], "openai", ticket, outcome, false, false, None));
            }
            other => return Err(format!("every key is available again an hour later: {other:?}")),
        }
        while engine.poll_event().is_some() {}
    }
    println!("{world}: {count} decisions");
    Ok(())
}
