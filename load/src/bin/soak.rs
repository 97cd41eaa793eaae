//! `soak`: the goose soak of the health endpoint, short (30 s) or long (30 min). Starts the
//! gateway in-process unless `--url` points at a running one (loopback only).

use clap::Parser;
use load::soak::{SoakOptions, run};

/// Soak the gateway's health endpoint.
#[derive(Parser, Debug)]
#[command(name = "soak", about)]
struct Cli {
    /// A running gateway (loopback only); without it the soak starts one in-process.
    #[arg(long)]
    url: Option<String>,
    /// How long to run, e.g. 30s (short) or 30m (long).
    #[arg(long, default_value = "30s")]
    duration: String,
    /// Concurrent users.
    #[arg(long, default_value_t = 10)]
    users: usize,
    /// Threshold: 95th-percentile latency in ms.
    #[arg(long, default_value_t = 500)]
    p95_ms: u64,
    /// Threshold: error rate in percent.
    #[arg(long, default_value_t = 1.0)]
    max_error_rate: f64,
    /// Where goose writes its HTML report.
    #[arg(long, default_value = "goose-report.html")]
    report: String,
}

fn seconds(s: &str) -> anyhow::Result<usize> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: usize = num.parse().map_err(|_| anyhow::anyhow!("--duration {s:?}: expected e.g. 30s or 30m"))?;
    Ok(match unit {
        "" | "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => anyhow::bail!("--duration {s:?}: the unit must be s, m or h"),
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let seconds = seconds(&cli.duration)?;
    let data = std::env::temp_dir().join(format!("ferroute-soak-{}", std::process::id()));
    let url = match cli.url {
        Some(u) => u,
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
    for (rule, observed, ok) in &report.thresholds {
        println!("threshold {rule}: observed {observed} ({})", if *ok { "pass" } else { "FAIL" });
    }
    println!("{} requests; goose report in {}", report.requests, cli.report);
    if !report.passed() {
        anyhow::bail!("the soak failed its thresholds");
    }
    Ok(())
}
