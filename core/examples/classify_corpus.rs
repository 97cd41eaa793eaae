//! Classifies every answer of the corpus REPS times (the first argument), for an instruction
//! count under callgrind: run it with 1 and with 21 and divide the difference by 20 × answers (the
//! one-time building of the marker automaton falls out).

use ferroute_core::classify::{ErrorInput, classify, default_profile};
use ferroute_core::settings::ResilienceSettings;
#[path = "../benches/answers/mod.rs"]
mod answers;
use answers::answers;
use std::hint::black_box;

fn main() {
    let reps: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1);
    let answers = answers();
    let settings = ResilienceSettings::default();
    for _ in 0..reps {
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
    }
    println!("{} answers, {reps} times", answers.len());
}
