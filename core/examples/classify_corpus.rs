//! Classifies every answer of the corpus REPS times (the first argument), for an instruction
//! count under callgrind: run it with 1 and with 21 and divide the difference by 20 × answers (the
//! one-time building of the marker automaton falls out).

use ferroute_core::settings::ResilienceSettings;
#[path = "../benches/answers/mod.rs"]
mod answers;
use answers::{answers, classify_each};

fn main() {
    let reps: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1);
    let answers = answers();
    let settings = ResilienceSettings::default();
    for _ in 0..reps {
        classify_each(&answers, &settings);
    }
    println!("{} answers, {reps} times", answers.len());
}
