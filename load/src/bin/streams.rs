//! `streams`: what an open SSE stream costs the real `ferroute` binary, with few and with many
//! open at once. For each count (`--small`, then `--large`) a fresh binary starts (a provider
//! of eight keys round robin to the scripted upstream in this process), answers one warm-up
//! stream, and its resident set is read; then that many streams are opened and held open by
//! the upstream (events `gap` apart for `--hold`). Once every stream has its first event the
//! resident set is read again, and over `--window` the binary's CPU time (from `/proc`) and
//! the events the clients received give CPU per event. Printed: KiB per open stream (the
//! growth over the warm binary, divided by the count) and µs of CPU per event, small and large,
//! and their ratio.
//!
//! The few streams each run fast (an event every millisecond) and the many slowly (every 500
//! ms), so both load the binary with thousands of events a second and its CPU time is read to
//! well within the clock's tick. Each stream holds two sockets in the binary (client and
//! upstream) and two here: 10 000 streams need more than 20 000 open files; the tool refuses a
//! `--large` the limit (`ulimit -n`) cannot hold, naming the most it can.

use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use load::proxied::{cpu_ticks, rss_kib, start_binary};
use scenarios::{Behaviour, Script, ScriptedUpstream, SseEvent, serve_upstream};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// Measure memory per open stream and CPU per event, with few and many streams open.
#[derive(Parser, Debug)]
#[command(name = "streams")]
struct Cli {
    /// The binary.
    #[arg(long, default_value = "target/release/ferroute")]
    bin: PathBuf,
    /// Streams open at the small end.
    #[arg(long, default_value_t = 10)]
    small: usize,
    /// Streams open at the large end (10 000 needs an open-files limit above 20 200).
    #[arg(long, default_value_t = 9_800)]
    large: usize,
    /// How long each stream stays open, in seconds (it must outlast opening them all and the
    /// window).
    #[arg(long, default_value_t = 150)]
    hold: u64,
    /// The CPU measuring window, in seconds.
    #[arg(long, default_value_t = 10)]
    window: u64,
}

/// Milliseconds between events when `streams` are open: a millisecond for a few, 500 ms for
/// thousands.
fn gap_ms(streams: usize) -> u64 {
    if streams <= 100 { 1 } else { 500 }
}

/// The upstream: model `slow-<gap>` streams text events for `hold` seconds, the first at
/// once and the others `gap` ms apart.
fn upstream(gaps: &[u64], hold: u64) -> ScriptedUpstream {
    let mut up = ScriptedUpstream::new();
    for &gap in gaps {
        let n = (hold * 1000 / gap).max(1);
        let events: Vec<SseEvent> = (0..n)
            .map(|i| SseEvent::text(if i == 0 { 0 } else { gap }, &format!("t{i} ")))
            .chain([SseEvent::done(0)])
            .collect();
        up = up.route(&format!("slow-{gap}"), Script::always(Behaviour::stream(events, false)));
    }
    up
}

fn config_text(up: SocketAddr, gaps: &[u64]) -> String {
    let models: Vec<String> = gaps.iter().map(|g| format!("\"slow-{g}\"")).collect();
    let mut text = format!(
        "[[providers]]\nid = \"bench\"\nbase_url = \"http://{up}/v1\"\nmodels = [{}]\nconnection_strategy = \"round-robin\"\n",
        models.join(", ")
    );
    for k in 1..=load::BENCH_KEYS {
        text += &format!("[[connections]]\nid = \"bench-{k}\"\nprovider = \"bench\"\napi_key = \"sk-bench-{k}\"\n");
    }
    text
}

type Http = Client<HttpConnector, Full<Bytes>>;

/// What the clients saw.
#[derive(Default)]
struct Seen {
    open: AtomicU64,
    events: AtomicU64,
    failed: AtomicU64,
}

/// Opens one stream and reads it to its end, counting events.
async fn one_stream(http: Http, url: String, model: String, seen: Arc<Seen>) {
    let body = format!(r#"{{"model":"bench/{model}","stream":true,"messages":[{{"role":"user","content":"hold"}}]}}"#);
    let Ok(req) =
        hyper::Request::post(url).header("content-type", "application/json").body(Full::new(Bytes::from(body)))
    else {
        seen.failed.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let resp = match http.request(req).await {
        Ok(r) if r.status().is_success() => r,
        _ => {
            seen.failed.fetch_add(1, Ordering::Relaxed);
            return;
        }
    };
    let mut body = resp.into_body();
    let mut first = true;
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            seen.failed.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if let Some(data) = frame.data_ref() {
            let events = data.windows(2).filter(|w| w == b"\n\n").count() as u64;
            seen.events.fetch_add(events, Ordering::Relaxed);
            if first && events > 0 {
                first = false;
                seen.open.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// One count's figures: KiB per open stream, µs of CPU per event, events in the window.
struct Figures {
    warm_kib: u64,
    open_kib: u64,
    per_stream_kib: f64,
    cpu_us_per_event: f64,
    events: u64,
}

async fn measure(cli: &Cli, up: SocketAddr, gaps: &[u64], streams: usize) -> anyhow::Result<Figures> {
    let dir = tempfile::tempdir()?;
    let gateway = start_binary(&cli.bin, dir.path(), &config_text(up, gaps)).await?;
    let pid = gateway.pid();
    let url = format!("{}/v1/chat/completions", gateway.base);
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    let http: Http = Client::builder(TokioExecutor::new()).pool_max_idle_per_host(0).build(http);
    // Warm-up: one short stream, then the binary's resident set at rest.
    let warm = Arc::new(Seen::default());
    let warm_up = tokio::spawn(one_stream(http.clone(), url.clone(), format!("slow-{}", gaps[0]), warm.clone()));
    let deadline = Instant::now() + Duration::from_secs(30);
    while warm.open.load(Ordering::Relaxed) == 0 {
        anyhow::ensure!(Instant::now() < deadline, "the warm-up stream never opened");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    warm_up.abort();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let warm_kib = rss_kib(pid).ok_or_else(|| anyhow::anyhow!("cannot read the binary's resident set"))?;
    let seen = Arc::new(Seen::default());
    let model = format!("slow-{}", gap_ms(streams));
    // Opened 250 at a time, each batch once the previous ones have their first event, so
    // that no listen queue overflows.
    let mut tasks = Vec::with_capacity(streams);
    let opening = cli.hold - cli.window - 10;
    let deadline = Instant::now() + Duration::from_secs(opening);
    while tasks.len() < streams {
        let batch = (streams - tasks.len()).min(250);
        tasks.extend(
            (0..batch).map(|_| tokio::spawn(one_stream(http.clone(), url.clone(), model.clone(), seen.clone()))),
        );
        while (seen.open.load(Ordering::Relaxed) as usize) < tasks.len() {
            let failed = seen.failed.load(Ordering::Relaxed);
            anyhow::ensure!(failed == 0, "{failed} of {streams} streams failed to open");
            anyhow::ensure!(
                Instant::now() < deadline,
                "only {} of {streams} streams open after {opening} s",
                seen.open.load(Ordering::Relaxed)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let open_kib = rss_kib(pid).unwrap_or(0);
    let (c0, e0) = (cpu_ticks(pid).unwrap_or(0), seen.events.load(Ordering::Relaxed));
    tokio::time::sleep(Duration::from_secs(cli.window)).await;
    let (c1, e1) = (cpu_ticks(pid).unwrap_or(0), seen.events.load(Ordering::Relaxed));
    let failed = seen.failed.load(Ordering::Relaxed);
    let still_open = streams - tasks.iter().filter(|t| t.is_finished()).count();
    for t in tasks {
        t.abort();
    }
    anyhow::ensure!(
        failed == 0 && still_open == streams,
        "{failed} streams failed, {still_open} of {streams} open at the end of the window"
    );
    let events = e1 - e0;
    anyhow::ensure!(events > 0, "no events in the window");
    Ok(Figures {
        warm_kib,
        open_kib,
        per_stream_kib: open_kib.saturating_sub(warm_kib) as f64 / streams as f64,
        cpu_us_per_event: (c1 - c0) as f64 * 10_000.0 / events as f64,
        events,
    })
}

/// This process's limit on open files (the binary inherits it), from `/proc/self/limits`.
fn open_files_limit() -> Option<usize> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    anyhow::ensure!(cli.small > 0 && cli.large >= cli.small, "--small must be at least 1 and --large at least --small");
    // Two sockets a stream in the binary (client, upstream) and two here, and some to spare.
    if let Some(limit) = open_files_limit() {
        let most = limit.saturating_sub(200) / 2;
        anyhow::ensure!(
            cli.large <= most,
            "{} streams need {} open files in the binary and here; the limit is {limit} (ulimit -n): at most --large {most}",
            cli.large,
            2 * cli.large + 200
        );
    }
    anyhow::ensure!(cli.hold > cli.window + 10, "--hold must outlast --window by more than 10 s");
    let gaps = [gap_ms(cli.small), gap_ms(cli.large)];
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let up = listener.local_addr()?;
    tokio::spawn(serve_upstream(listener, Arc::new(upstream(&gaps, cli.hold))));
    println!(
        "open SSE streams through {} (a fresh binary for each count; CPU over {} s)",
        cli.bin.display(),
        cli.window
    );
    println!(
        "{:>8} {:>8} {:>12} {:>12} {:>16} {:>14} {:>10}",
        "streams", "gap ms", "warm KiB", "open KiB", "KiB per stream", "CPU µs/event", "events"
    );
    let mut got = Vec::new();
    for n in [cli.small, cli.large] {
        let f = measure(&cli, up, &gaps, n).await?;
        println!(
            "{n:>8} {:>8} {:>12} {:>12} {:>16.1} {:>14.2} {:>10}",
            gap_ms(n),
            f.warm_kib,
            f.open_kib,
            f.per_stream_kib,
            f.cpu_us_per_event,
            f.events
        );
        got.push(f);
    }
    println!(
        "CPU per event, {} vs {} streams: {:.2}x; memory per open stream at {}: {:.1} KiB (limit 64)",
        cli.large,
        cli.small,
        got[1].cpu_us_per_event / got[0].cpu_us_per_event,
        cli.large,
        got[1].per_stream_kib
    );
    Ok(())
}
