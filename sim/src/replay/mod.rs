//! `sim replay`: a recorded incident run again in the simulator, under the config it ran with
//! and under candidates, compared side by side ([`build`] turns the recording into a
//! scenario). Under the recorded config, the share of client requests that get the answer class
//! they got in production is the replay's fidelity.

pub mod build;

use crate::shared::RunResult;
use build::Recording;
use proxy::recording::record::{AttemptEnd, class_of};
use std::collections::BTreeMap;
use std::fmt::Write;

/// A candidate config: its label and the settings it sets over the recorded config.
pub type Candidate = (String, Vec<(String, String)>);

/// One column of the report.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// What it is: `recording`, `recorded config`, or a candidate's settings.
    pub label: String,
    /// Client requests by answer class (`served`, `429`, `503`, `no answer`, …).
    pub classes: BTreeMap<String, usize>,
    /// Upstream calls.
    pub upstream_calls: u64,
    /// Upstream calls per client request.
    pub calls_per_request: f64,
    /// Seconds connections spent cooling, summed (`None`: the recording does not say).
    pub cooling_s: Option<f64>,
    /// Breaker openings.
    pub breaker_openings: u64,
    /// Client latency p50 and p99 (ms).
    pub latency_ms: (u64, u64),
    /// Upstream calls that had no recorded counterpart (answered by the nearest recorded
    /// outcome; 0 for the recording).
    pub unrecorded_calls: u64,
}

/// A request whose replayed answer class differs from the recorded one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// The request's place in the recording.
    pub index: usize,
    /// What it asked for.
    pub model: String,
    /// Its recorded class.
    pub recorded: String,
    /// Its replayed class.
    pub replayed: String,
    /// Why, as far as the two runs tell it.
    pub why: String,
}

/// A replay's report.
#[derive(Debug)]
pub struct Report {
    /// The recording's column, then the recorded config's, then each candidate's.
    pub columns: Vec<Summary>,
    /// The recorded config's mismatches.
    pub mismatches: Vec<Mismatch>,
    /// Requests whose class matched under the recorded config, of all.
    pub fidelity: (usize, usize),
    /// Each run, in the columns' order after the recording.
    pub runs: Vec<RunResult>,
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// The recording's own column.
pub fn recorded(rec: &Recording) -> Summary {
    let mut classes = BTreeMap::new();
    for q in &rec.requests {
        *classes.entry(q.class.clone()).or_insert(0) += 1;
    }
    // To the end of the answer, as the runs measure it: a stream ends with its served attempt.
    let ends: BTreeMap<u64, u64> = rec.attempts.iter().map(|a| (a.request, a.ended_ms)).collect();
    let mut lat: Vec<u64> = rec
        .requests
        .iter()
        .map(|q| {
            let end = if q.stream { ends.get(&q.request).copied().unwrap_or(q.answered_ms) } else { q.answered_ms };
            end.max(q.answered_ms).saturating_sub(q.at_ms)
        })
        .collect();
    lat.sort_unstable();
    let calls = rec.attempts.iter().filter(|a| a.end != AttemptEnd::Aborted || a.headers_ms.is_some()).count() as u64;
    Summary {
        label: "recording".into(),
        classes,
        upstream_calls: calls,
        calls_per_request: calls as f64 / rec.requests.len().max(1) as f64,
        cooling_s: None,
        breaker_openings: rec
            .attempts
            .iter()
            .flat_map(|a| a.changed.iter())
            .filter(|c| c.starts_with("breaker ") && c.ends_with(" OPEN"))
            .count() as u64,
        latency_ms: (percentile(&lat, 0.5), percentile(&lat, 0.99)),
        unrecorded_calls: 0,
    }
}

/// The class of the replayed request `i` (client `r{i}`).
fn replayed_classes(run: &RunResult) -> BTreeMap<usize, (String, &crate::check::Outcome)> {
    run.outcomes
        .iter()
        .filter_map(|o| {
            let i = o.client.strip_prefix('r')?.parse().ok()?;
            let class = o.status.map_or_else(|| "no answer".to_owned(), class_of);
            Some((i, (class, o)))
        })
        .collect()
}

/// `provider/model to connection` of each dispatch line of the run's log.
fn dispatches(run: &RunResult) -> BTreeMap<(String, String), u64> {
    let mut out = BTreeMap::new();
    for (_, line) in &run.log {
        let Some(rest) = line.split("dispatch ").nth(1) else { continue };
        let Some((target, conn)) = rest.split_once(" to ") else { continue };
        let conn = conn.split_whitespace().next().unwrap_or_default();
        *out.entry((target.to_owned(), conn.to_owned())).or_insert(0) += 1;
    }
    out
}

/// A run's column.
pub fn summarize(rec: &Recording, run: &RunResult, label: &str) -> Summary {
    let classes_by = replayed_classes(run);
    let mut classes = BTreeMap::new();
    for i in 0..rec.requests.len() {
        let class = classes_by.get(&i).map_or("no answer", |(c, _)| c.as_str());
        *classes.entry(class.to_owned()).or_insert(0) += 1;
    }
    let mut lat: Vec<u64> = classes_by.values().map(|(_, o)| o.done_ms.saturating_sub(o.issued_ms)).collect();
    lat.sort_unstable();
    let calls = dispatches(run);
    let upstream_calls = calls.values().sum();
    let mut recorded: BTreeMap<(String, String), u64> = BTreeMap::new();
    for a in &rec.attempts {
        *recorded.entry((format!("{}/{}", a.provider, a.model), a.connection.clone())).or_insert(0) += 1;
    }
    let unrecorded_calls = calls.iter().map(|(k, n)| n.saturating_sub(recorded.get(k).copied().unwrap_or(0))).sum();
    let cooling_ms: u64 = run
        .spans
        .iter()
        .filter(|s| s.lane.starts_with("conn:") && s.state == "cooldown")
        .map(|s| s.to_ms.unwrap_or(run.simulated.as_millis() as u64).saturating_sub(s.from_ms))
        .sum();
    Summary {
        label: label.to_owned(),
        classes,
        upstream_calls,
        calls_per_request: upstream_calls as f64 / rec.requests.len().max(1) as f64,
        cooling_s: Some(cooling_ms as f64 / 1000.0),
        breaker_openings: run.log.iter().filter(|(_, l)| l.contains("breaker ") && l.contains("-> OPEN")).count()
            as u64,
        latency_ms: (percentile(&lat, 0.5), percentile(&lat, 0.99)),
        unrecorded_calls,
    }
}

/// The requests whose class differs between the recording and `run`.
pub fn mismatches(rec: &Recording, run: &RunResult) -> Vec<Mismatch> {
    let replayed = replayed_classes(run);
    rec.requests
        .iter()
        .enumerate()
        .filter_map(|(i, q)| {
            let (class, o) = match replayed.get(&i) {
                Some((c, o)) => (c.clone(), Some(*o)),
                None => ("no answer".to_owned(), None),
            };
            if class == q.class {
                return None;
            }
            let tried: Vec<String> = rec
                .attempts
                .iter()
                .filter(|a| a.request == q.request)
                .map(|a| {
                    format!(
                        "{} {}",
                        a.connection,
                        if a.status == 0 { "no answer".into() } else { a.status.to_string() }
                    )
                })
                .collect();
            let why = format!(
                "recorded after {} ({}); replayed {}{}",
                if tried.is_empty() { "no attempt".to_owned() } else { format!("{} attempt(s)", tried.len()) },
                tried.join(", "),
                o.map_or_else(|| "without an answer".to_owned(), |o| o.describe(q.stream)),
                o.and_then(|o| o.code.as_deref()).map(|c| format!(" [{c}]")).unwrap_or_default(),
            );
            Some(Mismatch { index: i, model: q.model.clone(), recorded: q.class.clone(), replayed: class, why })
        })
        .collect()
}

/// The report as a table, the fidelity and every mismatch.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let classes: std::collections::BTreeSet<&String> = report.columns.iter().flat_map(|c| c.classes.keys()).collect();
    let widths: Vec<usize> = report.columns.iter().map(|c| c.label.chars().count().max(10)).collect();
    let _ = write!(out, "{:<28}", "");
    for (c, w) in report.columns.iter().zip(&widths) {
        let _ = write!(out, " | {:>w$}", c.label);
    }
    out.push('\n');
    let mut row = |name: &str, cell: &dyn Fn(&Summary) -> String| {
        let _ = write!(out, "{name:<28}");
        for (c, w) in report.columns.iter().zip(&widths) {
            let _ = write!(out, " | {:>w$}", cell(c));
        }
        out.push('\n');
    };
    for class in &classes {
        row(&format!("requests {class}"), &|c| c.classes.get(*class).copied().unwrap_or(0).to_string());
    }
    row("upstream calls", &|c| c.upstream_calls.to_string());
    row("calls per request", &|c| format!("{:.2}", c.calls_per_request));
    row("connection cooling (s)", &|c| c.cooling_s.map_or_else(|| "n/a".into(), |s| format!("{s:.1}")));
    row("breaker openings", &|c| c.breaker_openings.to_string());
    row("client latency p50 (ms)", &|c| c.latency_ms.0.to_string());
    row("client latency p99 (ms)", &|c| c.latency_ms.1.to_string());
    row("calls without a recording", &|c| c.unrecorded_calls.to_string());
    let (same, all) = report.fidelity;
    let _ = writeln!(
        out,
        "\nfidelity under the recorded config: {same} of {all} requests got their recorded answer class ({:.1} %)",
        100.0 * same as f64 / all.max(1) as f64
    );
    for m in &report.mismatches {
        let _ = writeln!(
            out,
            "  request {} ({}): recorded {}, replayed {}: {}",
            m.index, m.model, m.recorded, m.replayed, m.why
        );
    }
    out
}

/// Replays `rec` under `config` (the config it ran with) and under each candidate (a label and
/// settings to set over `config`), with `seed`.
pub fn replay(
    rec: &Recording,
    config: &str,
    candidates: &[(String, Vec<(String, String)>)],
    seed: u64,
) -> Result<Report, String> {
    let mut runs = Vec::new();
    let mut columns = vec![recorded(rec)];
    let all = std::iter::once(("recorded config".to_owned(), Vec::new())).chain(candidates.iter().cloned());
    for (i, (label, sets)) in all.enumerate() {
        let (gateway, providers) = build::gateway_config(config, &sets)?;
        let scenario = build::scenario(rec, &gateway, &providers, &format!("replay-{i}"))?;
        let run = crate::world::run(&scenario, seed);
        columns.push(summarize(rec, &run, &label));
        runs.push(run);
    }
    let mismatches = mismatches(rec, &runs[0]);
    let total = rec.requests.len();
    Ok(Report { fidelity: (total - mismatches.len(), total), mismatches, columns, runs })
}
