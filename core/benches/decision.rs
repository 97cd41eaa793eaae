//! One routing decision on the hot path: choose among 8 connections, classify an upstream
//! error, and update breaker, connection and lockout state.

use criterion::{Criterion, criterion_group, criterion_main};
use ferroute_core::classify::{ErrorInput, classify};
use ferroute_core::engine::{AttemptOutcome, Candidate, Engine, Route, Selection, Strategy, Traits};
use ferroute_core::settings::ResilienceSettings;
use ferroute_core::tried::Tried;
use ferroute_core::types::{Format, ProviderClass};
use std::hint::black_box;
use std::time::Duration;

mod common;
use common::{BODY, HEADERS, start};

fn decision(c: &mut Criterion) {
    let cands = common::round_robin_of_8();
    let settings = common::settings();
    let skip = Tried::new();

    c.bench_function("select_classify_record_429_of_8", |b| {
        let mut engine = Engine::new(settings.clone(), 1);
        // The keys' places, resolved once as the gateway does per config.
        let keys = common::slots(&mut engine);
        let cands = common::slotted(&keys);
        let mut now = start();
        b.iter(|| {
            // An hour on, every cooldown and lockout of earlier iterations has passed, so each
            // iteration is one whole decision: a pick among 8, a 429 classified and recorded.
            now += Duration::from_secs(3600);
            match engine.select(now, &cands, &Route::new(Strategy::RoundRobin, "bench"), &skip) {
                Selection::Pick { index, ticket } => {
                    let outcome = AttemptOutcome::Upstream { status: 429, headers: HEADERS, body: BODY };
                    black_box(engine.record(now, &cands[index], "openai", ticket, outcome, false, false, None));
                }
                other => panic!("every key is available again an hour later: {other:?}"),
            }
            while engine.poll_event().is_some() {}
        });
    });

    // Every key cooling: the decision is a refusal with the soonest retry.
    c.bench_function("select_none_of_8_cooling", |b| {
        let mut engine = Engine::new(settings.clone(), 1);
        let now = start();
        let long: &[(&str, &str)] = &[("content-type", "application/json"), ("retry-after", "3600")];
        for c in &cands {
            if let Selection::Pick { ticket, .. } =
                engine.select(now, std::slice::from_ref(c), &Route::new(Strategy::RoundRobin, "bench"), &skip)
            {
                let outcome = AttemptOutcome::Upstream { status: 429, headers: long, body: BODY };
                engine.record(now, c, "openai", ticket, outcome, false, false, None);
            }
        }
        while engine.poll_event().is_some() {}
        b.iter(|| match engine.select(now, &cands, &Route::new(Strategy::RoundRobin, "bench"), &skip) {
            Selection::NoneEligible(excluded) => black_box(excluded),
            other => panic!("every key is cooling: {other:?}"),
        });
    });

    // The same keys in config order (the default connection strategy).
    let in_order: Vec<Candidate<'_>> = cands.iter().map(|c| Candidate { traits: Traits::default(), ..*c }).collect();
    for (name, set) in [("select_and_succeed_of_8", &in_order), ("select_round_robin_and_succeed_of_8", &cands)] {
        c.bench_function(name, |b| {
            let mut engine = Engine::new(settings.clone(), 1);
            let now = start();
            b.iter(|| {
                if let Selection::Pick { index, ticket } =
                    engine.select(now, set, &Route::new(Strategy::Priority, "bench"), &skip)
                {
                    black_box(engine.record(
                        now,
                        &set[index],
                        "openai",
                        ticket,
                        AttemptOutcome::Success,
                        false,
                        false,
                        None,
                    ));
                }
            });
        });
    }

    let profile = settings.cooldown_profile(ProviderClass::ApiKey);
    c.bench_function("classify_misreported_403", |b| {
        let body = r#"{"error":{"message":"用户额度不足，请充值","type":"insufficient_user_quota"}}"#;
        b.iter(|| {
            let input = ErrorInput {
                provider: "agentrouter",
                provider_id: "agentrouter",
                format: Format::Openai,
                class: ProviderClass::ApiKey,
                status: 403,
                headers: HEADERS,
                body,
                backoff_level: 0,
                wall_now_ms: None,
                until_daily_reset: None,
            };
            black_box(classify(black_box(&input), &profile, &[]))
        });
    });
}

criterion_group!(benches, decision);

fn pieces(c: &mut Criterion) {
    let settings = ResilienceSettings::default();
    let profile = settings.cooldown_profile(ProviderClass::ApiKey);
    c.bench_function("classify_429_rate_limit", |b| {
        b.iter(|| {
            let input = ErrorInput {
                provider: "openai",
                provider_id: "openai",
                format: Format::Openai,
                class: ProviderClass::ApiKey,
                status: 429,
                headers: HEADERS,
                body: BODY,
                backoff_level: 0,
                wall_now_ms: None,
                until_daily_reset: None,
            };
            black_box(classify(black_box(&input), &profile, &[]))
        });
    });
}
criterion_group!(pieces_group, pieces);
criterion_main!(benches, pieces_group);
