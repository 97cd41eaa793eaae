//! Classification cost per real answer: every answer of the corpus (`scenarios/corpus/`), each
//! classified as a provider of its format and class with default settings would. Criterion
//! reports the time per element (one answer).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ferroute_core::settings::ResilienceSettings;

#[path = "answers/mod.rs"]
mod answers;
use answers::{answers, classify_each};

fn corpus(c: &mut Criterion) {
    let answers = answers();
    assert!(answers.len() >= 120, "the corpus loads: {} answers", answers.len());
    let settings = ResilienceSettings::default();
    let mut g = c.benchmark_group("classify_corpus");
    g.throughput(Throughput::Elements(answers.len() as u64));
    g.bench_function("every_answer", |b| {
        b.iter(|| {
            classify_each(&answers, &settings);
        });
    });
    g.finish();
}

criterion_group!(benches, corpus);
criterion_main!(benches);
