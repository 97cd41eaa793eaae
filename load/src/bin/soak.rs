//! `soak`: the goose soak of the health endpoint, short (30 s) or long (30 min). Starts the
//! gateway in-process unless a URL points at a running one (loopback only). It reads the same
//! variables as `load/k6-soak.js` (`BASE_URL`, `SOAK_DURATION`, `SOAK_VUS`), checks the same
//! thresholds, prints a k6-style summary and, like k6, exits with 99 when a threshold is
//! breached.

use clap::Parser;
use load::soak::{SoakOptions, THRESHOLDS_BREACHED, parse_duration, run};

/// Soak the gateway's health endpoint.
#[derive(Parser, Debug)]
#[command(name = "soak")]
struct Cli {
    /// A running gateway (loopback only); without it the soak starts one in-process.
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
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let seconds = parse_duration(&cli.duration)?;
    let data = std::env::temp_dir().join(format!("ferroute-soak-{}", std::process::id()));
    let url = match cli.url {
        Some(u) => u.trim_end_matches('/').to_owned(),
        None => format!("http://{}", load::start_gateway(None, &data).await?),
    };
    println!(
        "soak: GET {url}/api/monitoring/health, {} users, {seconds} s; thresholds p95 < {} ms, errors < {} %",
        cli.users, cli.p95_ms, cli.max_error_rate
    );
    let opts = SoakOptions {
        url,
        seconds,
        users: cli.users,
        p95_ms: cli.p95_ms,
        max_error_rate: cli.max_error_rate,
        report: cli.report.clone(),
    };
    let report = run(&opts).await;
    let _ = std::fs::remove_dir_all(&data);
    let report = report?;
    println!("\n{}", report.k6_summary());
    for (rule, observed, ok) in &report.thresholds {
        println!("goose threshold {rule}: observed {observed} ({})", if *ok { "pass" } else { "FAIL" });
    }
    println!("{} requests; goose report in {}", report.requests, cli.report);
    if !report.passed() {
        eprintln!("soak: thresholds breached");
        std::process::exit(THRESHOLDS_BREACHED);
    }
    Ok(())
}
