//! The dashboard's responsiveness under load: the page, its script and the APIs it reads, each
//! requested on a fixed schedule, first with the gateway idle, then while closed-loop clients
//! saturate it with proxied requests (gateway, upstream and clients in this one process, on
//! loopback). Latency runs from send to the full body.

use clap::Parser;
use load::{Latency, body, max_throughput, open_loop_get, start_gateway_with};
use scenarios::serve_upstream;
use std::sync::Arc;
use std::time::Duration;

/// Measure the dashboard's latency with the gateway idle and saturated.
#[derive(Parser, Debug)]
#[command(name = "dashboard")]
struct Cli {
    /// Seconds per measurement.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Closed-loop workers saturating the gateway.
    #[arg(long, default_value_t = 64)]
    workers: usize,
    /// Requests per second to each dashboard endpoint.
    #[arg(long, default_value_t = 20)]
    rate: u64,
}

const KEY: &str = "dashboard-load-key-0001";

fn ms(l: &Latency) -> String {
    format!("{:>7.2} / {:>7.2}", l.p50_us / 1000.0, l.p99_us / 1000.0)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if !(cli.seconds > 0.0 && cli.seconds <= 3600.0) || cli.workers == 0 || cli.rate == 0 {
        anyhow::bail!("--seconds in (0, 3600], --workers and --rate at least 1");
    }
    let dur = Duration::from_secs_f64(cli.seconds);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let up = listener.local_addr()?;
    tokio::spawn(serve_upstream(listener, Arc::new(load::bench_upstream())));
    let data = std::env::temp_dir().join(format!("ferroute-dashboard-load-{}", std::process::id()));
    let gw = start_gateway_with(Some(up), &data, &format!("[server]\nadmin_key = \"{KEY}\"\n")).await?;
    let admin = vec![("x-ferroute-admin-key", KEY.to_owned())];
    let endpoints: [(&str, Vec<(&'static str, String)>); 8] = [
        ("/dashboard", Vec::new()),
        ("/dashboard/app.js", Vec::new()),
        ("/dashboard/views.js", Vec::new()),
        ("/api/monitoring/health", Vec::new()),
        ("/api/resilience/settings", admin.clone()),
        ("/api/resilience/model-cooldowns", admin.clone()),
        ("/api/monitoring/dashboard", admin.clone()),
        ("/api/monitoring/timeline", admin),
    ];
    let proxied = format!("http://{gw}/v1/chat/completions");
    // Warm the paths.
    let _ = max_throughput(&proxied, body("bench/m", false), 8, Duration::from_millis(500)).await;
    println!(
        "dashboard under load: {} s per cell, {} rps to each endpoint, {} closed-loop proxied clients; latency p50 / p99 in ms\n",
        cli.seconds, cli.rate, cli.workers
    );
    println!("{:<34} | {:>17} | {:>17}", "endpoint", "idle", "saturated");
    let mut idle = Vec::new();
    for (path, headers) in &endpoints {
        idle.push(open_loop_get(&format!("http://{gw}{path}"), headers, cli.rate, dur).await);
    }
    let flood = tokio::spawn({
        let (url, workers) = (proxied.clone(), cli.workers);
        async move { max_throughput(&url, body("bench/m", false), workers, dur + Duration::from_secs(1)).await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let running: Vec<_> = endpoints
        .iter()
        .map(|(path, headers)| {
            let (url, headers, rate) = (format!("http://{gw}{path}"), headers.clone(), cli.rate);
            tokio::spawn(async move { open_loop_get(&url, &headers, rate, dur).await })
        })
        .collect();
    let mut measured = Vec::new();
    for r in running {
        measured.push(r.await?);
    }
    let rps = flood.await.unwrap_or(0.0);
    for (((path, _), i), s) in endpoints.iter().zip(&idle).zip(&measured) {
        let failed =
            if i.failed + s.failed > 0 { format!("  ({} failed)", i.failed + s.failed) } else { String::new() };
        println!("{path:<34} | {} | {}{failed}", ms(i), ms(s));
    }
    println!("\nproxied requests while saturated: {rps:.0} per second");
    let _ = std::fs::remove_dir_all(&data);
    Ok(())
}
