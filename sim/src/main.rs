//! `cargo run -p sim -- …`: list, run, sweep, swarm, svg, bench, replay.

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use scenarios::scenario::{Scenario, catalog_dir, load_catalog};
use sim::{many, report, svg, swarm};
use std::path::PathBuf;

/// Ferroute's deterministic simulation.
#[derive(Parser)]
#[command(name = "sim", about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List the catalog's scenarios.
    List,
    /// Run one scenario (a catalog name, a swarm-N name, or a path to a TOML file).
    Run {
        /// Scenario.
        scenario: String,
        /// Seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Print the timeline.
        #[arg(long)]
        trace: bool,
        /// Print each answer's body (its first 64 KiB), for writing `body_contains`.
        #[arg(long)]
        bodies: bool,
    },
    /// Run scenarios over many seeds (all of them when none is named).
    Sweep {
        /// Scenario (default: the whole catalog).
        scenario: Option<String>,
        /// Number of seeds.
        #[arg(long, default_value_t = 100)]
        seeds: u64,
        /// First seed.
        #[arg(long, default_value_t = 1)]
        start: u64,
        /// Seeds run at once, each on its own thread (default: the machine's cores). The
        /// output is the same for any number.
        #[arg(long)]
        jobs: Option<usize>,
    },
    /// Swarm: random fault mixes, one per seed.
    Swarm {
        /// Number of seeds.
        #[arg(long, default_value_t = 100)]
        seeds: u64,
        /// First seed.
        #[arg(long, default_value_t = 1)]
        start: u64,
        /// Print the generated scenario of the first seed as TOML and exit.
        #[arg(long)]
        print: bool,
        /// Give every seed its own focus instead of steering toward transitions not yet reached.
        #[arg(long)]
        no_steer: bool,
        /// Fail unless every expected transition was reached (the nightly run's goal).
        #[arg(long)]
        require_coverage: bool,
        /// Hand out no new seed after this many minutes (`--seeds` is then the most it runs):
        /// as many seeds as fit a time budget.
        #[arg(long)]
        minutes: Option<f64>,
        /// Seeds run at once, each on its own thread (default: the machine's cores). The
        /// output is the same for any number.
        #[arg(long)]
        jobs: Option<usize>,
    },
    /// Write an SVG timeline of breaker, cooldown and lockout states for one run.
    Svg {
        /// Scenario.
        scenario: String,
        /// Seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Output file.
        #[arg(long, default_value = "timeline.svg")]
        out: PathBuf,
    },
    /// Measure simulated seconds per wall second on a one-hour, 10 000-request scenario, and
    /// swarm seeds per wall minute on every core.
    Bench,
    /// Replay a recording (`ferroute recording export`) under the config it ran with and under
    /// candidates; print them side by side with the replay's fidelity, and draw each run.
    Replay {
        /// The exported recording.
        file: PathBuf,
        /// The config the gateway ran with.
        #[arg(long)]
        config: PathBuf,
        /// A candidate: the recorded config with KEY (a dotted path; `resilience.` may be left
        /// out) set to VALUE; repeat to set several in one candidate.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
        /// One candidate per value (each with the --set settings too): KEY=V1,V2,…
        #[arg(long, value_name = "KEY=V1,V2")]
        sweep: Vec<String>,
        /// Seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Where each run's SVG timeline goes.
        #[arg(long, default_value = "replay")]
        out: PathBuf,
    },
}

/// `KEY=VALUE`.
fn pair(s: &str) -> anyhow::Result<(String, String)> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_owned(), v.trim().to_owned())),
        _ => bail!("`{s}` is not KEY=VALUE"),
    }
}

/// The candidates `--set` and `--sweep` name: the `--set`s alone, or with each value of each
/// `--sweep` on top.
fn candidates(sets: &[String], sweeps: &[String]) -> anyhow::Result<Vec<sim::replay::Candidate>> {
    let base = sets.iter().map(|s| pair(s)).collect::<anyhow::Result<Vec<_>>>()?;
    let mut out = Vec::new();
    for sweep in sweeps {
        let (key, values) = pair(sweep)?;
        if values.split(',').all(|v| v.trim().is_empty()) {
            bail!("`--sweep {sweep}` names no value: give KEY=V1,V2,…");
        }
        for v in values.split(',').map(str::trim).filter(|v| !v.is_empty()) {
            let label = sets.iter().cloned().chain(std::iter::once(format!("{key}={v}"))).collect::<Vec<_>>().join(" ");
            out.push((label, base.iter().cloned().chain(std::iter::once((key.clone(), v.to_owned()))).collect()));
        }
    }
    if out.is_empty() && !base.is_empty() {
        out.push((sets.join(" "), base));
    }
    Ok(out)
}

fn find(name: &str) -> anyhow::Result<Scenario> {
    if name.starts_with("swarm-") {
        return swarm::from_name(name).context("swarm-N or swarm-N-FOCUS, FOCUS one of the swarm's foci");
    }
    if name == "bench-hour" {
        return Ok(sim::world::bench_scenario());
    }
    let path = PathBuf::from(name);
    if path.extension().is_some_and(|e| e == "toml") && path.exists() {
        let text = std::fs::read_to_string(&path)?;
        return Scenario::from_toml_str(
            &text,
            &path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default(),
        )
        .map_err(anyhow::Error::msg);
    }
    let all = load_catalog(&catalog_dir())?;
    match all.into_iter().find(|s| s.name == name) {
        Some(s) => Ok(s),
        None => bail!("no scenario named {name:?} (see `cargo run -p sim -- list`)"),
    }
}

fn bar(n: u64) -> ProgressBar {
    let pb = ProgressBar::new(n);
    if let Ok(style) = ProgressStyle::with_template("{bar:40} {pos}/{len} {msg} [{elapsed_precise}]") {
        pb.set_style(style);
    }
    pb
}

/// Prints above the progress bar, or plainly when the bar is hidden (not a terminal).
fn say(pb: &ProgressBar, text: String) {
    if pb.is_hidden() {
        eprint!("{text}");
    } else {
        pb.println(text.trim_end());
    }
}

/// `sim sweep`: the named scenario, or the whole catalog, over `seeds` seeds from `start`, on
/// `jobs` threads.
fn sweep(scenario: Option<String>, seeds: u64, start: u64, jobs: usize) -> anyhow::Result<()> {
    let list = match scenario {
        Some(name) => vec![find(&name)?],
        None => load_catalog(&catalog_dir())?,
    };
    let runs = seeds * list.len() as u64;
    let pb = bar(runs);
    #[allow(clippy::disallowed_methods)] // wall time of the whole sweep or swarm, for its speed
    let wall = std::time::Instant::now();
    let mut plan = many::Sweep::new(&list, start..start + seeds);
    plan.each = Box::new(|r| {
        pb.set_message(r.scenario.clone());
        if !r.passed() {
            say(&pb, report::failure(r));
        }
        pb.inc(1);
    });
    many::drive(&mut plan, jobs);
    pb.finish();
    let tally = plan.tally;
    if list.len() > 1 {
        print!("{}", sim::coverage::table(&tally.reached, runs));
    }
    println!("{runs} runs, {} failed", tally.failures.len());
    eprintln!("{}", per_minute(runs, wall.elapsed(), jobs));
    if !tally.failures.is_empty() {
        std::process::exit(1);
    }
    Ok(())
}

/// `runs` in `wall` on `jobs` threads, as runs per wall minute.
fn per_minute(runs: u64, wall: std::time::Duration, jobs: usize) -> String {
    let rate = runs as f64 * 60.0 / wall.as_secs_f64().max(1e-9);
    format!("{rate:.0} runs per wall minute on {jobs} jobs ({:.1} s)", wall.as_secs_f64())
}

/// `sim swarm`: `seeds` generated scenarios from `start` (or the first one's TOML, `print`), on
/// `jobs` threads. Each seed leans toward the focus [`swarm::steer`] picks for what the seeds
/// [`many::STEER_LAG`] places before it left unreached (its own focus with `no_steer`, or once
/// every aim is reached).
fn swarm_seeds(
    seeds: u64,
    start: u64,
    print: bool,
    no_steer: bool,
    require_coverage: bool,
    jobs: usize,
    budget: Option<std::time::Duration>,
) {
    if print {
        print!("{}", swarm::to_toml(&swarm::generate(start)));
        return;
    }
    let pb = if budget.is_some() { ProgressBar::new_spinner() } else { bar(seeds) };
    #[allow(clippy::disallowed_methods)] // wall time of the whole sweep or swarm, for its speed
    let wall = std::time::Instant::now();
    let mut plan = many::Swarm::new(start..start.saturating_add(seeds), no_steer);
    plan.until = budget.map(|b| wall + b);
    plan.each = Box::new(|r| {
        if !r.passed() {
            say(&pb, report::failure(r));
        }
        pb.inc(1);
    });
    many::drive(&mut plan, jobs);
    pb.finish();
    let tally = &plan.tally;
    let seeds = tally.runs;
    print!("{}", sim::coverage::table(&tally.reached, seeds));
    let foci: Vec<String> = plan.tried.iter().map(|(f, n)| format!("{} {n}", f.name())).collect();
    println!("seeds per focus: {}", foci.join(", "));
    if let Some(n) = tally.all_reached_after {
        println!("every expected transition reached within the first {n} seeds");
    }
    let playing = plan.answers.values().filter(|n| **n > 0).count();
    let corpus = sim::swarm::answers::corpus_size();
    println!("real answers: {playing} distinct corpus answers of {corpus} played across the seeds");
    if std::env::var_os("SIM_SHOW_UNPLAYED").is_some() {
        for id in sim::swarm::answers::ids().into_iter().filter(|id| !plan.answers.contains_key(id)) {
            println!("  not played: {id}");
        }
    }
    println!("{seeds} swarm seeds, {} failed", tally.failures.len());
    eprintln!("{}", per_minute(seeds, wall.elapsed(), jobs).replace("runs", "seeds"));
    let unreached = sim::coverage::EXPECTED.iter().filter(|e| !tally.reached.contains_key(**e)).count();
    if require_coverage && unreached > 0 {
        println!("{unreached} expected transitions never reached");
    }
    if !tally.failures.is_empty() || (require_coverage && unreached > 0) {
        std::process::exit(1);
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::List => {
            for s in load_catalog(&catalog_dir())? {
                println!("{:<44} {:<14} {}", s.name, s.mechanisms.join(","), s.description);
            }
        }
        Command::Run { scenario, seed, trace, bodies } => {
            let s = find(&scenario)?;
            let r = sim::run(&s, seed);
            if trace {
                print!("{}", report::timeline(&r));
            }
            if bodies {
                for o in &r.outcomes {
                    println!("{}#{} at {} ms: {}", o.client, o.seq, o.done_ms, o.body);
                }
            }
            println!(
                "{} seed {}: {} ({} responses, {:.1} s simulated in {:.2} s, log hash {:016x})",
                r.scenario,
                r.seed,
                if r.passed() { "passed" } else { "FAILED" },
                r.outcomes.len(),
                r.simulated.as_secs_f64(),
                r.wall.as_secs_f64(),
                r.hash
            );
            if !r.passed() {
                eprint!("{}", report::failure(&r));
                std::process::exit(1);
            }
        }
        Command::Sweep { scenario, seeds, start, jobs } => {
            sweep(scenario, seeds, start, jobs.unwrap_or_else(many::cores))?
        }
        Command::Swarm { seeds, start, print, no_steer, require_coverage, jobs, minutes } => {
            let budget = minutes.map(|m| std::time::Duration::from_secs_f64(m.max(0.0) * 60.0));
            swarm_seeds(seeds, start, print, no_steer, require_coverage, jobs.unwrap_or_else(many::cores), budget)
        }
        Command::Svg { scenario, seed, out } => {
            let r = sim::run(&find(&scenario)?, seed);
            std::fs::write(&out, svg::render(&r)).with_context(|| format!("cannot write {}", out.display()))?;
            println!(
                "wrote {} ({} spans; run {})",
                out.display(),
                r.spans.len(),
                if r.passed() { "passed" } else { "FAILED" }
            );
        }
        Command::Replay { file, config, sets, sweep, seed, out } => {
            let records =
                proxy::recording::writer::read(&file).with_context(|| format!("cannot read {}", file.display()))?;
            let rec = sim::replay::build::Recording::new(records).map_err(anyhow::Error::msg)?;
            let text = std::fs::read_to_string(&config).with_context(|| format!("cannot read {}", config.display()))?;
            let candidates = candidates(&sets, &sweep)?;
            let report = sim::replay::replay(&rec, &text, &candidates, seed).map_err(anyhow::Error::msg)?;
            print!("{}", sim::replay::render(&report));
            std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
            for (i, run) in report.runs.iter().enumerate() {
                let path = out.join(format!("run-{i}.svg"));
                std::fs::write(&path, svg::render(run)).with_context(|| format!("cannot write {}", path.display()))?;
            }
            println!(
                "timelines: {}/run-0.svg (the recorded config) … run-{}.svg",
                out.display(),
                report.runs.len() - 1
            );
        }
        Command::Bench => {
            let s = sim::world::bench_scenario();
            let r = sim::run(&s, 1);
            let ratio = r.simulated.as_secs_f64() / r.wall.as_secs_f64().max(1e-9);
            println!(
                "{}: {} requests, {:.0} s simulated in {:.2} s wall = {ratio:.0}x ({})",
                s.name,
                r.outcomes.len(),
                r.simulated.as_secs_f64(),
                r.wall.as_secs_f64(),
                if r.passed() { "passed" } else { "FAILED" }
            );
            if !r.passed() {
                eprint!("{}", report::failure(&r));
            }
            let (jobs, seeds) = (many::cores(), 48);
            #[allow(clippy::disallowed_methods)] // wall time of the whole sweep or swarm, for its speed
            let wall = std::time::Instant::now();
            let mut plan = many::Swarm::new(1..seeds + 1, false);
            many::drive(&mut plan, jobs);
            println!(
                "swarm: {} ({} of {seeds} failed)",
                per_minute(seeds, wall.elapsed(), jobs).replace("runs", "seeds"),
                plan.tally.failures.len()
            );
        }
    }
    Ok(())
}
