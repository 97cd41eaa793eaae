//! Many runs on many cores: `sim sweep`, `sim swarm` and the catalog test hand their seeds to a
//! [`Plan`], and [`drive`] runs them on `jobs` threads. Each seed is still one deterministic
//! turmoil run on one thread (turmoil and the interleaving points keep their state per thread),
//! and a plan sees the results in the order it handed the seeds out, whatever order they finish
//! in. So the output of `--jobs 8` is the output of `--jobs 1`, line for line.
//!
//! The swarm steers each seed toward what the seeds before it left unreached. To steer the same
//! way on any number of cores, a seed steers by the seeds folded [`STEER_LAG`] places before it:
//! seed `n` is chosen once seeds up to `n - STEER_LAG - 1` are in, so up to `STEER_LAG + 1` seeds
//! can run at once, on one core or sixteen.

use crate::RunResult;
use crate::coverage::EXPECTED;
use crate::swarm::{self, Focus};
use scenarios::scenario::Scenario;
use std::collections::BTreeMap;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

/// How many seeds behind a swarm seed's steering looks.
pub const STEER_LAG: u64 = 15;

/// The cores this machine has (the default `--jobs`).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// What to run, and what to do with each result.
pub trait Plan {
    /// The next run, if the results folded so far allow one; `None` to wait for more results
    /// (or when every run has been handed out).
    fn next(&mut self) -> Option<(Scenario, u64)>;
    /// One result, in the order [`Plan::next`] handed the runs out.
    fn fold(&mut self, r: RunResult);
}

/// Runs `plan` on `jobs` threads (at least one).
pub fn drive(plan: &mut dyn Plan, jobs: usize) {
    let (task_tx, task_rx) = mpsc::channel::<(usize, Scenario, u64)>();
    let (done_tx, done_rx) = mpsc::channel::<(usize, std::thread::Result<RunResult>)>();
    let task_rx = Arc::new(Mutex::new(task_rx));
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            let (task_rx, done_tx) = (Arc::clone(&task_rx), done_tx.clone());
            scope.spawn(move || {
                loop {
                    let task = match task_rx.lock() {
                        Ok(rx) => rx.recv(),
                        Err(_) => return,
                    };
                    let Ok((i, s, seed)) = task else { return };
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| crate::run(&s, seed)));
                    if done_tx.send((i, r)).is_err() {
                        return;
                    }
                }
            });
        }
        drop(done_tx);
        // A plan decides its next runs after every single fold, so what it decides depends on
        // how many results are in, never on how they arrived.
        let task_tx = task_tx;
        let (mut handed, mut folded) = (0usize, 0usize);
        let hand_out = |plan: &mut dyn Plan, handed: &mut usize| {
            while let Some((s, seed)) = plan.next() {
                if task_tx.send((*handed, s, seed)).is_err() {
                    return;
                }
                *handed += 1;
            }
        };
        hand_out(plan, &mut handed);
        let mut waiting = BTreeMap::new();
        while handed > folded {
            let Ok((i, r)) = done_rx.recv() else { break };
            // A run that panicked stops the whole drive with its panic, as it would on one thread.
            let r = r.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            waiting.insert(i, r);
            while let Some(r) = waiting.remove(&folded) {
                plan.fold(r);
                folded += 1;
                hand_out(plan, &mut handed);
            }
        }
        // The workers end once the last sender is gone.
        drop(task_tx);
    });
}

/// What many runs add up to: the failed runs' reports and replay commands, how many runs reached
/// each state machine transition, and each run's log hash in order.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Each failed run's report ([`crate::report::failure`]).
    pub reports: Vec<String>,
    /// Each failed run's replay command.
    pub failures: Vec<String>,
    /// Runs that reached each transition.
    pub reached: BTreeMap<String, u64>,
    /// Runs folded.
    pub runs: u64,
    /// The run after which every expected transition had been reached.
    pub all_reached_after: Option<u64>,
    /// `(scenario, seed, log hash)` of every run, in order.
    pub hashes: Vec<(String, u64, u64)>,
}

impl Tally {
    /// Adds one run.
    pub fn add(&mut self, r: RunResult) {
        if !r.passed() {
            self.reports.push(crate::report::failure(&r));
            self.failures.push(r.replay_command());
        }
        self.hashes.push((r.scenario.clone(), r.seed, r.hash));
        for t in r.coverage.into_keys() {
            *self.reached.entry(t).or_default() += 1;
        }
        self.runs += 1;
        if self.all_reached_after.is_none() && EXPECTED.iter().all(|e| self.reached.contains_key(*e)) {
            self.all_reached_after = Some(self.runs);
        }
    }
}

/// Every scenario of `list` over `seeds`, scenario by scenario.
pub struct Sweep<'a> {
    list: &'a [Scenario],
    seeds: std::ops::Range<u64>,
    at: (usize, u64),
    /// The runs so far.
    pub tally: Tally,
    /// Called with each result before it is tallied (a progress bar).
    pub each: Box<dyn FnMut(&RunResult) + 'a>,
}

impl<'a> Sweep<'a> {
    /// A sweep of `list` over `seeds`.
    pub fn new(list: &'a [Scenario], seeds: std::ops::Range<u64>) -> Self {
        let at = (0, seeds.start);
        Sweep { list, seeds, at, tally: Tally::default(), each: Box::new(|_| {}) }
    }
}

impl Plan for Sweep<'_> {
    fn next(&mut self) -> Option<(Scenario, u64)> {
        if self.seeds.is_empty() {
            return None;
        }
        let (i, seed) = self.at;
        let s = self.list.get(i)?;
        self.at = if seed + 1 < self.seeds.end { (i, seed + 1) } else { (i + 1, self.seeds.start) };
        Some((s.clone(), seed))
    }

    fn fold(&mut self, r: RunResult) {
        (self.each)(&r);
        self.tally.add(r);
    }
}

/// Generated scenarios, one per seed, each steered by the seeds [`STEER_LAG`] before it.
pub struct Swarm<'a> {
    seeds: std::ops::Range<u64>,
    next: u64,
    no_steer: bool,
    /// How many seeds behind a seed's steering looks ([`STEER_LAG`] unless a test sets it).
    pub lag: u64,
    /// No seed is handed out after this (a nightly run's time budget); the seeds already
    /// running finish.
    pub until: Option<std::time::Instant>,
    /// How often each focus was chosen.
    pub tried: BTreeMap<Focus, u32>,
    /// The focus of each seed, in order.
    pub foci: Vec<(u64, Focus)>,
    /// The corpus answers the seeds handed out play, with how many seeds play each.
    pub answers: BTreeMap<&'static str, u32>,
    /// The runs so far.
    pub tally: Tally,
    /// Called with each result before it is tallied (a progress bar).
    pub each: Box<dyn FnMut(&RunResult) + 'a>,
}

impl<'a> Swarm<'a> {
    /// A swarm over `seeds`; `no_steer` gives every seed its own drawn focus.
    pub fn new(seeds: std::ops::Range<u64>, no_steer: bool) -> Self {
        let next = seeds.start;
        Swarm {
            seeds,
            next,
            no_steer,
            lag: STEER_LAG,
            until: None,
            tried: BTreeMap::new(),
            foci: Vec::new(),
            answers: BTreeMap::new(),
            tally: Tally::default(),
            each: Box::new(|_| {}),
        }
    }
}

impl Plan for Swarm<'_> {
    fn next(&mut self) -> Option<(Scenario, u64)> {
        let seed = self.next;
        let behind = seed - self.seeds.start;
        if seed >= self.seeds.end || self.tally.runs + self.lag < behind {
            return None;
        }
        #[allow(clippy::disallowed_methods)] // the wall-clock budget of a whole swarm, outside every run
        if self.until.is_some_and(|t| std::time::Instant::now() >= t) {
            return None;
        }
        let focus =
            if self.no_steer { Focus::drawn(seed) } else { swarm::steer(&self.tally.reached, &self.tried, seed) };
        *self.tried.entry(focus).or_insert(0) += 1;
        self.foci.push((seed, focus));
        self.next += 1;
        let s = swarm::generate_with(seed, focus);
        for a in swarm::answers::drawn(&s).into_iter().collect::<std::collections::BTreeSet<_>>() {
            *self.answers.entry(a).or_default() += 1;
        }
        Some((s, seed))
    }

    fn fold(&mut self, r: RunResult) {
        (self.each)(&r);
        self.tally.add(r);
    }
}
