//! Classification cost per real answer: every answer of the corpus (`scenarios/corpus/`), each
//! classified as a provider of its format and class with default settings would. Criterion
//! reports the time per element (one answer).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ferroute_core::classify::{ErrorInput, classify, default_profile};
use ferroute_core::settings::ResilienceSettings;

#[path = "answers/mod.rs"]
mod answers;
use answers::answers;
use std::hint::black_box;

fn corpus(c: &mut Criterion) {
    let answers = answers();
    assert!(answers.len() >= 120, "the corpus loads: {} answers", answers.len());
    let settings = ResilienceSettings::default();
    let mut g = c.benchmark_group("classify_corpus");
    g.throughput(Throughput::Elements(answers.len() as u64));
    g.bench_function("every_answer", |b| {
        b.iter(|| {
            for a in &answers {
                let headers: Vec<(&str, &str)> = a.headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
                let input = ErrorInput {
                    provider: default_profile(a.format, a.class),
                    provider_id: "bench",
                    format: a.format,
                    class: a.class,
                    status: a.status,
                    headers: &headers,
                    body: &a.body,
                    backoff_level: 0,
                    wall_now_ms: Some(1_767_225_600_000),
                    until_daily_reset: None,
                };
                black_box(classify(black_box(&input), &settings.cooldown_profile(a.class), &[]));
            }
        });
    });
    g.finish();
}

criterion_group!(benches, corpus);
criterion_main!(benches);
