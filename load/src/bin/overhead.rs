//! The overhead benchmark: one request mix sent (a) straight to the scripted upstream, (b)
//! through a bare hyper pass-through, (c) through the minimal gateway (the pass-through that
//! also reads the body for `model`, picks one of 8 keys round robin and counts the request: the
//! least any gateway must do, and the yardstick) and (d) through ferroute (8 keys, round robin),
//! at fixed open-loop rates and at closed-loop maximum, JSON and SSE; all measured in one run,
//! interleaved, on loopback. (e) sends the same chat requests through ferroute to an
//! Anthropic-format provider, so the cost of translating requests, answers and streams shows
//! beside the same-format hop.

use clap::Parser;
use load::{Latency, body, max_throughput, open_loop, start_gateway, start_minimal, start_passthrough};
use scenarios::serve_upstream;
use std::sync::Arc;
use std::time::Duration;

/// Measure ferroute's added latency and throughput against the bare upstream, a bare
/// pass-through and the minimal gateway.
#[derive(Parser, Debug)]
#[command(name = "overhead")]
struct Cli {
    /// Fixed rates (requests per second).
    #[arg(long, value_delimiter = ',', default_value = "500,1000,2000")]
    rates: Vec<u64>,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Closed-loop workers for the maximum-throughput measurement.
    #[arg(long, default_value_t = 64)]
    workers: usize,
}

fn ms(us: f64) -> String {
    format!("{:.2}", us / 1000.0)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if cli.rates.contains(&0) || !(cli.seconds > 0.0 && cli.seconds <= 3600.0) || cli.workers == 0 {
        anyhow::bail!("--rates must be positive, --seconds in (0, 3600], --workers at least 1");
    }
    let dur = Duration::from_secs_f64(cli.seconds);
    let script = load::bench_upstream();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let up = listener.local_addr()?;
    tokio::spawn(serve_upstream(listener, Arc::new(script)));
    let pass = start_passthrough(up).await?;
    let minimal = start_minimal(up).await?;
    let data = std::env::temp_dir().join(format!("ferroute-overhead-{}", std::process::id()));
    let gw = start_gateway(Some(up), &data).await?;
    let targets = [
        ("direct", format!("http://{up}/v1/chat/completions"), ""),
        ("pass-through", format!("http://{pass}/v1/chat/completions"), ""),
        ("minimal", format!("http://{minimal}/v1/chat/completions"), ""),
        ("ferroute", format!("http://{gw}/v1/chat/completions"), "bench/"),
        ("translated", format!("http://{gw}/v1/chat/completions"), "bench-ant/"),
    ];
    let model_of = load::bench_model;
    // Warm every path (connections, pools, allocator).
    for (_, url, prefix) in &targets {
        let _ = open_loop(url, body(&model_of(prefix, false), false), 200, Duration::from_millis(500)).await;
        let _ = open_loop(url, body(&model_of(prefix, true), true), 200, Duration::from_millis(500)).await;
    }
    println!(
        "overhead benchmark: {} s per cell, open-loop at fixed rates; latency in ms from send to full body; all on loopback in one process\n",
        cli.seconds
    );
    println!(
        "{:<5} {:>5} | {:>13} | {:>13} | {:>13} | {:>13} | {:>15} | {:>13} | {:>13}",
        "mode", "rps", "direct", "pass-through", "minimal", "ferroute", "added vs direct", "x pass", "x minimal"
    );
    println!(
        "{:<5} {:>5} | {:>13} | {:>13} | {:>13} | {:>13} | {:>15} | {:>13} | {:>13}",
        "", "", "p50 / p99", "p50 / p99", "p50 / p99", "p50 / p99", "p50 / p99", "p50 / p99", "p50 / p99"
    );
    let mut translated = Vec::new();
    for (mode, stream) in [("json", false), ("sse", true)] {
        for &rps in &cli.rates {
            let mut got: Vec<Latency> = Vec::new();
            for (_, url, prefix) in &targets {
                got.push(open_loop(url, body(&model_of(prefix, stream), stream), rps, dur).await);
            }
            let (d, p, m, f) = (got[0], got[1], got[2], got[3]);
            translated.push((mode, rps, f, got[4]));
            let failed: usize = got.iter().map(|l| l.failed).sum();
            println!(
                "{mode:<5} {rps:>5} | {:>5} / {:<5} | {:>5} / {:<5} | {:>5} / {:<5} | {:>5} / {:<5} | {:>6} / {:<6} | {:>5.2} / {:<5.2} | {:>5.2} / {:<5.2}{}",
                ms(d.p50_us),
                ms(d.p99_us),
                ms(p.p50_us),
                ms(p.p99_us),
                ms(m.p50_us),
                ms(m.p99_us),
                ms(f.p50_us),
                ms(f.p99_us),
                ms(f.p50_us - d.p50_us),
                ms(f.p99_us - d.p99_us),
                f.p50_us / p.p50_us,
                f.p99_us / p.p99_us,
                f.p50_us / m.p50_us,
                f.p99_us / m.p99_us,
                if failed > 0 { format!("  ({failed} failed)") } else { String::new() }
            );
        }
    }
    print_translation(&translated);
    print_max_throughput(&targets, cli.workers, dur).await;
    let _ = std::fs::remove_dir_all(&data);
    Ok(())
}

/// The same chat requests, same format against translated, per rate.
fn print_translation(translated: &[(&str, u64, Latency, Latency)]) {
    println!(
        "\ntranslation: the same chat requests through ferroute to an OpenAI-format provider (same format) and to an Anthropic-format one (translated both ways)"
    );
    for (mode, rps, same, tr) in translated {
        println!(
            "{mode:<5} {rps:>5} | same format {:>5} / {:<5} | translated {:>5} / {:<5} | translated/same {:>5.2} / {:<5.2}",
            ms(same.p50_us),
            ms(same.p99_us),
            ms(tr.p50_us),
            ms(tr.p99_us),
            tr.p50_us / same.p50_us,
            tr.p99_us / same.p99_us
        );
    }
}

/// Closed-loop maximum throughput of every target, JSON and SSE.
async fn print_max_throughput(targets: &[(&str, String, &str)], workers: usize, dur: Duration) {
    println!("\nmaximum throughput, closed loop with {} workers:", workers);
    for (mode, stream) in [("json", false), ("sse", true)] {
        let mut rps = Vec::new();
        for (_, url, prefix) in targets {
            rps.push(max_throughput(url, body(&load::bench_model(prefix, stream), stream), workers, dur).await);
        }
        println!(
            "{mode:<5} direct {:>8.0} rps | pass-through {:>8.0} rps | minimal {:>8.0} rps | ferroute {:>8.0} rps | ferroute/pass-through {:.2} | ferroute/minimal {:.2} | translated {:>8.0} rps = {:.2} x same format",
            rps[0],
            rps[1],
            rps[2],
            rps[3],
            rps[3] / rps[1],
            rps[3] / rps[2],
            rps[4],
            rps[4] / rps[3]
        );
    }
}
