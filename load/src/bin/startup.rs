//! Start-up time of the real `ferroute` binary, small and large: from spawning the process to
//! its first `200` on `/api/monitoring/health`, and to its first answered chat completion.
//! The small world is one provider with one key and an empty state store; the large one has
//! `--providers` providers with one key each and a state store already holding `--pins`
//! session pins (restored at start-up). Each world is started `--runs` times, alternating; the
//! medians are printed. Build the binary first: `cargo build --release -p proxy --bin ferroute`.

use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use proxy::state::store::{PinWrite, Store};
use scenarios::serve_upstream;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Measure how long the binary takes to serve, with a small and a large config and state.
#[derive(Parser, Debug)]
#[command(name = "startup")]
struct Cli {
    /// The binary.
    #[arg(long, default_value = "target/release/ferroute")]
    bin: PathBuf,
    /// Providers (one key each) in the large world.
    #[arg(long, default_value_t = 1_000)]
    providers: usize,
    /// Session pins in the large world's state store.
    #[arg(long, default_value_t = 100_000)]
    pins: usize,
    /// Starts of each world.
    #[arg(long, default_value_t = 5)]
    runs: usize,
}

type Http = Client<HttpConnector, Full<Bytes>>;

/// One world: a config file and a data directory.
struct World {
    name: &'static str,
    config: PathBuf,
    data: PathBuf,
}

fn config_text(up: SocketAddr, providers: usize) -> String {
    let mut text = String::new();
    for i in 0..providers {
        text += &format!(
            "[[providers]]\nid = \"p{i:04}\"\nbase_url = \"http://{up}/v1\"\nmodels = [\"m\"]\n\
             [[connections]]\nid = \"p{i:04}-k\"\nprovider = \"p{i:04}\"\napi_key = \"sk-{i}\"\n"
        );
    }
    text
}

fn world(dir: &Path, name: &'static str, up: SocketAddr, providers: usize, pins: usize) -> anyhow::Result<World> {
    let root = dir.join(name);
    let data = root.join("data");
    std::fs::create_dir_all(&data)?;
    let config = root.join("ferroute.toml");
    std::fs::write(&config, config_text(up, providers))?;
    if pins > 0 {
        let store = Store::open_dir(&data)?;
        let now = proxy::state::clock::system_wall_ms();
        let day = 86_400_000;
        let writes: Vec<PinWrite> = (0..pins)
            .map(|i| {
                let p = format!("p{:04}", i % providers);
                PinWrite::Set(format!("session-{i}"), p.clone(), format!("{p}-k"), now + day)
            })
            .collect();
        store.save_pins(&writes, now)?;
    }
    Ok(World { name, config, data })
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

async fn status(http: &Http, req: hyper::Request<Full<Bytes>>) -> Option<u16> {
    let resp = http.request(req).await.ok()?;
    let status = resp.status().as_u16();
    resp.into_body().collect().await.ok()?;
    Some(status)
}

/// Milliseconds from spawn to health 200 and to a first chat answer.
async fn start_once(bin: &Path, w: &World, http: &Http) -> anyhow::Result<(f64, f64)> {
    let port = free_port()?;
    let base = format!("http://127.0.0.1:{port}");
    let started = Instant::now();
    let mut child = Command::new(bin)
        .arg("--config")
        .arg(&w.config)
        .arg("--data-dir")
        .arg(&w.data)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .env("FERROUTE_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let result = async {
        let deadline = started + Duration::from_secs(60);
        let health = loop {
            let req = hyper::Request::get(format!("{base}/api/monitoring/health")).body(Full::new(Bytes::new()))?;
            if status(http, req).await == Some(200) {
                break started.elapsed();
            }
            anyhow::ensure!(Instant::now() < deadline, "{}: no health answer within 60 s", w.name);
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        let body = Bytes::from_static(br#"{"model":"p0000/m","messages":[{"role":"user","content":"hi"}]}"#);
        let req = hyper::Request::post(format!("{base}/v1/chat/completions"))
            .header("content-type", "application/json")
            .body(Full::new(body))?;
        let code = status(http, req).await;
        anyhow::ensure!(code == Some(200), "{}: the first chat answered {code:?}", w.name);
        Ok((health.as_secs_f64() * 1e3, started.elapsed().as_secs_f64() * 1e3))
    }
    .await;
    let _ = child.kill();
    let _ = child.wait();
    result
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    anyhow::ensure!(
        cli.bin.is_file(),
        "no binary at {} (cargo build --release -p proxy --bin ferroute)",
        cli.bin.display()
    );
    anyhow::ensure!(cli.providers > 0 && cli.runs > 0, "--providers and --runs must be at least 1");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let up = listener.local_addr()?;
    tokio::spawn(serve_upstream(listener, Arc::new(load::bench_upstream())));
    let dir = tempfile::tempdir()?;
    let worlds = [world(dir.path(), "small", up, 1, 0)?, world(dir.path(), "large", up, cli.providers, cli.pins)?];
    let http: Http = Client::builder(TokioExecutor::new()).build(HttpConnector::new());
    let mut got: Vec<(Vec<f64>, Vec<f64>)> = vec![(Vec::new(), Vec::new()); worlds.len()];
    for _ in 0..cli.runs {
        for (w, g) in worlds.iter().zip(&mut got) {
            let (health, first) = start_once(&cli.bin, w, &http).await?;
            g.0.push(health);
            g.1.push(first);
        }
    }
    println!("start-up of {} ({} runs each, medians)", cli.bin.display(), cli.runs);
    for (w, (health, first)) in worlds.iter().zip(got) {
        let what = match w.name {
            "small" => "1 provider, empty state store".to_owned(),
            _ => format!("{} providers and keys, {} session pins stored", cli.providers, cli.pins),
        };
        println!(
            "{:<6} {:<48} health {:>7.1} ms   first answer {:>7.1} ms",
            w.name,
            what,
            median(health),
            median(first)
        );
    }
    Ok(())
}
