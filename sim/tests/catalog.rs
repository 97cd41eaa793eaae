//! `cargo test -p sim`: every catalog scenario over `SIM_SEEDS` seeds, the determinism check,
//! and swarm seeds. A failure prints scenario, seed, the first violated property and the
//! command that replays it.

use scenarios::scenario::{catalog_dir, load_catalog};
use sim::{many, report, run, seeds_from_env, swarm};

#[test]
fn catalog_has_at_least_thirty_scenarios_covering_every_mechanism() {
    let all = load_catalog(&catalog_dir()).expect("catalog loads");
    assert!(all.len() >= 30, "{} scenarios", all.len());
    for m in ["M1", "M2", "M3", "M6", "M7", "M9", "M10", "M11", "M12", "M15"] {
        assert!(all.iter().any(|s| s.mechanisms.iter().any(|x| x == m)), "no scenario for {m}");
    }
}

#[test]
fn every_scenario_passes_over_seeds() {
    let all = load_catalog(&catalog_dir()).expect("catalog loads");
    let mut plan = many::Sweep::new(&all, seeds_from_env());
    plan.each = Box::new(|r| {
        if !r.passed() {
            eprint!("{}", report::failure(r));
        }
    });
    many::drive(&mut plan, many::cores());
    let t = plan.tally;
    assert!(
        t.failures.is_empty(),
        "{} of {} runs failed; replay with:\n{}",
        t.failures.len(),
        t.runs,
        t.failures.join("\n")
    );
}

/// Seeds run on many threads give what they give on one: the same runs in the same order, with
/// the same logs, and a steered swarm steers the same way.
#[test]
fn many_jobs_give_what_one_job_gives() {
    let all = load_catalog(&catalog_dir()).expect("catalog loads");
    let some: Vec<_> = all.into_iter().step_by(40).collect();
    let sweep = |jobs| {
        let mut plan = many::Sweep::new(&some, 1..3);
        many::drive(&mut plan, jobs);
        plan.tally
    };
    let (one, three) = (sweep(1), sweep(3));
    assert_eq!(one.runs, 2 * some.len() as u64);
    assert_eq!(one, three, "a sweep on three jobs differs from one on one job");
    let steered = |jobs| {
        let mut plan = many::Swarm::new(1..9, false);
        plan.lag = 2;
        many::drive(&mut plan, jobs);
        (plan.foci, plan.tally)
    };
    let (one, three) = (steered(1), steered(3));
    assert_eq!(one.1.runs, 8);
    assert_eq!(one, three, "a swarm on three jobs differs from one on one job");
}

#[test]
fn the_same_seed_gives_the_same_event_log() {
    let all = load_catalog(&catalog_dir()).expect("catalog loads");
    for s in &all {
        let (a, b) = (run(s, 42), run(s, 42));
        assert!(!a.log.is_empty(), "{}: empty log", s.name);
        assert_eq!(
            a.hash,
            b.hash,
            "{} is not deterministic with seed 42:\n{}",
            s.name,
            first_difference(&a.log, &b.log)
        );
    }
}

/// Nothing carries over from one run to the next inside one process: every tenth scenario is
/// run in catalog order, then again in reverse order after all the others have run in between
/// (and on the same thread), and each gives the same log both times. `SIM_CARRY_OVER=all`
/// checks the whole catalog.
#[test]
fn a_run_gives_the_same_log_whatever_ran_before_it_in_the_process() {
    let all = load_catalog(&catalog_dir()).expect("catalog loads");
    let step = if std::env::var("SIM_CARRY_OVER").as_deref() == Ok("all") { 1 } else { 10 };
    let picked: Vec<_> = all.iter().step_by(step).collect();
    let first: Vec<_> = picked.iter().map(|s| run(s, 7)).collect();
    for (s, a) in picked.iter().zip(&first).rev() {
        let b = run(s, 7);
        assert_eq!(
            a.hash,
            b.hash,
            "{} gives another log with seed 7 after other runs in this process:\n{}",
            s.name,
            first_difference(&a.log, &b.log)
        );
    }
}

fn first_difference(a: &[(u64, String)], b: &[(u64, String)]) -> String {
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        if x != y {
            return format!("line {i}: {x:?} vs {y:?}");
        }
    }
    format!("lengths {} vs {}", a.len(), b.len())
}

#[test]
fn swarm_seeds_stay_safe_and_heal() {
    let n: u64 = std::env::var("SIM_SWARM_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    let mut plan = many::Swarm::new(1..n + 1, true);
    plan.each = Box::new(|r| {
        if !r.passed() {
            eprint!("{}", report::failure(r));
        }
    });
    many::drive(&mut plan, many::cores());
    assert!(plan.tally.failures.is_empty(), "swarm seeds failed:\n{}", plan.tally.failures.join("\n"));
}

/// Each focus of the swarm on one seed: the mixes steering leans on stay safe and heal too,
/// and each reaches at least one of the transitions it aims at.
#[test]
fn every_swarm_focus_stays_safe_heals_and_reaches_what_it_aims_at() {
    let mut failures = Vec::new();
    for focus in swarm::Focus::ALL {
        let s = swarm::generate_with(11, focus);
        let r = run(&s, 11);
        if !r.passed() {
            eprint!("{}", report::failure(&r));
            failures.push(r.replay_command());
        }
        if !focus.aims().is_empty() && !focus.aims().iter().any(|a| r.coverage.contains_key(*a)) {
            failures.push(format!("{} reached none of {:?}", s.name, focus.aims()));
        }
    }
    assert!(failures.is_empty(), "swarm foci failed:\n{}", failures.join("\n"));
}

#[test]
fn a_failure_report_names_the_seed_and_the_replay_command() {
    let mut s = load_catalog(&catalog_dir())
        .expect("catalog")
        .into_iter()
        .find(|s| s.name == "m1-breaker-opens-and-recovers")
        .expect("scenario");
    s.expect.calls[0].max = Some(1);
    let r = run(&s, 9);
    assert!(!r.passed());
    let text = report::failure(&r);
    assert!(text.contains("seed 9"), "{text}");
    assert!(text.contains("cargo run -p sim -- run m1-breaker-opens-and-recovers --seed 9 --trace"), "{text}");
    assert!(text.contains("upstream up-a"), "{text}");
}

#[test]
fn seeds_change_the_run() {
    let s = load_catalog(&catalog_dir())
        .expect("catalog")
        .into_iter()
        .find(|s| s.name == "partitioned-upstream")
        .expect("scenario");
    let hashes: std::collections::BTreeSet<u64> = (1..=4).map(|seed| run(&s, seed).hash).collect();
    assert!(hashes.len() > 1, "network latency should differ between seeds");
}

#[test]
fn a_scenario_naming_an_unknown_host_is_reported_not_a_panic() {
    let mut s = load_catalog(&catalog_dir())
        .expect("catalog")
        .into_iter()
        .find(|s| s.name == "partitioned-upstream")
        .expect("scenario");
    s.faults[0].b = "up-z".into();
    let r = run(&s, 1);
    assert!(r.violations[0].what.contains("unknown host \"up-z\""), "{:?}", r.violations);
    let mut s2 = load_catalog(&catalog_dir())
        .expect("catalog")
        .into_iter()
        .find(|s| s.name == "fallback-across-providers")
        .expect("scenario");
    s2.upstreams[1].host = "up-a".into();
    assert!(run(&s2, 1).violations[0].what.contains("defined twice"));
}

/// The swarm meets real answers: its seeds draw answers of the corpus as faults (each format's
/// that heal within the liveness bound), and the first seeds that draw them stay safe and heal.
#[test]
fn swarm_seeds_meet_real_answers_stay_safe_and_heal() {
    for format in ["openai", "anthropic", "responses", "gemini"] {
        let n = swarm::answers::drawable(format, false).len();
        assert!(n >= 5, "only {n} {format} answers of the corpus are drawable");
        eprintln!(
            "{n} {format} answers of the corpus are drawable ({} where one gateway renews its keys)",
            swarm::answers::drawable(format, true).len()
        );
    }
    let mut met = std::collections::BTreeSet::new();
    let mut runs = Vec::new();
    for seed in 1..=40 {
        let s = swarm::generate(seed);
        let drawn = swarm::answers::drawn(&s);
        if !drawn.is_empty() && runs.len() < 3 {
            runs.push((seed, s));
        }
        met.extend(drawn);
    }
    assert!(met.len() >= 20, "40 seeds met only {} corpus answers: {met:?}", met.len());
    eprintln!(
        "40 swarm seeds met {} corpus answers; running seeds {:?}",
        met.len(),
        runs.iter().map(|r| r.0).collect::<Vec<_>>()
    );
    let mut failures = Vec::new();
    for (seed, s) in &runs {
        let r = run(s, *seed);
        if !r.passed() {
            eprint!("{}", report::failure(&r));
            failures.push(r.replay_command());
        }
    }
    assert!(failures.is_empty(), "swarm seeds with real answers failed:\n{}", failures.join("\n"));
}

/// The swarm's providers speak all four formats: its first 200 seeds draw every one (a seed
/// whose providers all keep an older format keeps the scenario it had before the newer ones).
#[test]
fn swarm_seeds_draw_every_provider_format() {
    let mut seen = std::collections::BTreeSet::new();
    let mut newer = Vec::new();
    for seed in 1..=200u64 {
        let s = swarm::generate(seed);
        let formats: Vec<&str> = ["openai", "anthropic", "responses", "gemini"]
            .into_iter()
            .filter(|f| s.gateway.contains(&format!("format = \"{f}\"")))
            .collect();
        if formats.iter().any(|f| matches!(*f, "responses" | "gemini")) {
            newer.push(seed);
        }
        seen.extend(formats);
    }
    assert_eq!(seen.len(), 4, "formats drawn: {seen:?}");
    eprintln!("{} of 200 seeds have a provider of a newer format: {newer:?}", newer.len());
}
