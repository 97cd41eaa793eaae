//! `soak`: the goose soak, short (30 s) or long (30 min), of one of two targets.
//!
//! - `--target health` (the default): `GET /api/monitoring/health`. Starts the gateway
//!   in-process unless a URL points at a running one (loopback only). It reads the same
//!   variables as `load/k6-soak.js` (`BASE_URL`, `SOAK_DURATION`, `SOAK_VUS`), checks the same
//!   thresholds, prints a k6-style summary and, like k6, exits with 99 when a threshold is
//!   breached.
//! - `--target combo`: chat completions through a combo of two providers (OpenAI format passed
//!   through, Anthropic format translated; eight keys each, round robin) to the benchmark
//!   upstream, which answers at once. The real binary runs in its own process so that its
//!   resident set can be sampled. First a baseline of the same request straight to the
//!   upstream, then the soak; it reports requests per second, p95 added latency (the soak's p95
//!   less the baseline's), errors, and the binary's resident set at the start, middle and end
//!   of the load, and exits with 99 when a threshold (p95, errors, `--min-rps`, RSS flat within
//!   10 %) is breached.

use clap::{Parser, ValueEnum};
use load::proxied::{RssSampler, rss_flatness, start_binary};
use load::soak::{SoakOptions, SoakReport, THRESHOLDS_BREACHED, Target, parse_duration, run};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone, Copy, ValueEnum)]
enum What {
    Health,
    Combo,
}

/// Soak the gateway.
#[derive(Parser, Debug)]
#[command(name = "soak")]
struct Cli {
    /// What to soak.
    #[arg(long, value_enum, default_value = "health")]
    target: What,
    /// A running gateway (loopback only; health only); without it the soak starts one
    /// in-process.
    #[arg(long, env = "BASE_URL")]
    url: Option<String>,
    /// How long to run, as k6 writes it: 30s, 30m, 1h30m.
    #[arg(long, env = "SOAK_DURATION", default_value = "30s")]
    duration: String,
    /// Concurrent users (k6's virtual users).
    #[arg(long, env = "SOAK_VUS", default_value_t = 10)]
    users: usize,
    /// Threshold: 95th-percentile latency in ms (k6: `http_req_duration: p(95)<500`).
    #[arg(long, default_value_t = 500)]
    p95_ms: u64,
    /// Threshold: error rate in percent (k6: `http_req_failed: rate<0.01`).
    #[arg(long, default_value_t = 1.0)]
    max_error_rate: f64,
    /// Where goose writes its HTML report.
    #[arg(long, default_value = "goose-report.html")]
    report: String,
    /// Combo: the binary to soak.
    #[arg(long, default_value = "target/release/ferroute")]
    bin: PathBuf,
    /// Combo: threshold on requests per second through the gateway.
    #[arg(long, default_value_t = 1000.0)]
    min_rps: f64,
    /// Combo: how long the baseline straight to the upstream runs.
    #[arg(long, default_value = "20s")]
    baseline: String,
    /// Combo: where the resident-set samples go (CSV: seconds, KiB).
    #[arg(long, default_value = "soak-rss.csv")]
    rss_csv: PathBuf,
}

fn print_report(report: &SoakReport, file: &str) {
    println!("\n{}", report.k6_summary());
    for (rule, observed, ok) in &report.thresholds {
        println!("goose threshold {rule}: observed {observed} ({})", if *ok { "pass" } else { "FAIL" });
    }
    println!("{} requests; goose report in {file}", report.requests);
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let seconds = parse_duration(&cli.duration)?;
    let opts = SoakOptions {
        url: String::new(),
        seconds,
        users: cli.users,
        p95_ms: cli.p95_ms,
        max_error_rate: cli.max_error_rate,
        report: cli.report.clone(),
        target: Target::Health,
    };
    let passed = match cli.target {
        What::Health => health(&cli, opts).await?,
        What::Combo => combo(&cli, opts).await?,
    };
    if !passed {
        eprintln!("soak: thresholds breached");
        std::process::exit(THRESHOLDS_BREACHED);
    }
    Ok(())
}

async fn health(cli: &Cli, mut opts: SoakOptions) -> anyhow::Result<bool> {
    let data = std::env::temp_dir().join(format!("ferroute-soak-{}", std::process::id()));
    opts.url = match &cli.url {
        Some(u) => u.trim_end_matches('/').to_owned(),
        None => format!("http://{}", load::start_gateway(None, &data).await?),
    };
    println!(
        "soak: GET {}/api/monitoring/health, {} users, {} s; thresholds p95 < {} ms, errors < {} %",
        opts.url, opts.users, opts.seconds, opts.p95_ms, opts.max_error_rate
    );
    let report = run(&opts).await;
    let _ = std::fs::remove_dir_all(&data);
    let report = report?;
    print_report(&report, &cli.report);
    Ok(report.passed())
}

async fn combo(cli: &Cli, opts: SoakOptions) -> anyhow::Result<bool> {
    anyhow::ensure!(cli.url.is_none(), "--url is for the health soak; the combo soak starts the binary itself");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let upstream = listener.local_addr()?;
    tokio::spawn(scenarios::serve_upstream(listener, Arc::new(load::bench_upstream())));
    // Started first so that a missing binary is named at once; it idles through the baseline.
    let dir = tempfile::tempdir()?;
    let gateway = start_binary(&cli.bin, dir.path(), &load::proxied::config_text(upstream)).await?;
    let baseline = SoakOptions {
        url: format!("http://{upstream}"),
        seconds: parse_duration(&cli.baseline)?,
        target: Target::Direct,
        report: format!("{}.baseline.html", cli.report.trim_end_matches(".html")),
        ..opts.clone()
    };
    println!(
        "baseline: POST {}/v1/chat/completions (model m), {} users, {} s",
        baseline.url, baseline.users, baseline.seconds
    );
    let direct = run(&baseline).await?;
    let sampler = RssSampler::start(gateway.pid(), Duration::from_secs(5));
    let soak = SoakOptions { url: gateway.base.clone(), target: Target::Combo, ..opts };
    println!(
        "soak: POST {}/v1/chat/completions (combo {}), {} users, {} s; thresholds p95 < {} ms, errors < {} %, ≥ {} requests/s, RSS flat within 10 %",
        soak.url,
        load::proxied::COMBO,
        soak.users,
        soak.seconds,
        soak.p95_ms,
        soak.max_error_rate,
        cli.min_rps
    );
    let report = run(&soak).await?;
    let samples = sampler.samples();
    drop(gateway);
    print_report(&report, &cli.report);
    let mut csv = String::from("seconds,rss_kib\n");
    for (t, kib) in &samples {
        csv += &format!("{t:.1},{kib}\n");
    }
    std::fs::write(&cli.rss_csv, csv)?;
    let rps = report.requests as f64 / report.seconds.max(1) as f64;
    let p95 = |r: &SoakReport| r.times_us[4] as f64 / 1000.0;
    println!(
        "baseline straight to the upstream: {} requests, {:.0}/s, p95 {:.2} ms",
        direct.requests,
        direct.requests as f64 / direct.seconds.max(1) as f64,
        p95(&direct)
    );
    println!(
        "through the combo: {} requests, {rps:.0}/s ({}), {} failed, p95 {:.2} ms, p95 added {:.2} ms",
        report.requests,
        if rps >= cli.min_rps { "pass" } else { "FAIL" },
        report.failed,
        p95(&report),
        p95(&report) - p95(&direct)
    );
    // Goose starts every user within its first second; 10 s in, the load is steady.
    let flat = match rss_flatness(&samples, 10.0, 0.10) {
        Some(([start, middle, end], flat)) => {
            println!(
                "ferroute resident set: start {start} KiB, middle {middle} KiB, end {end} KiB ({}; {} samples in {})",
                if flat { "flat within 10 %" } else { "GREW more than 10 %: FAIL" },
                samples.len(),
                cli.rss_csv.display()
            );
            flat
        }
        None => {
            println!("ferroute resident set: too few samples ({}) to judge", samples.len());
            false
        }
    };
    Ok(report.passed() && direct.failed == 0 && rps >= cli.min_rps && flat)
}
