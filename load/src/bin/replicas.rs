//! Two real `ferroute` processes, A and B, share state through one private `redis-server`
//! (`[state] backend = "redis"`).
//!
//! First, the cost of the Redis backend: the same requests, one at a time, to replica A and to a
//! third process C with the default SQLite backend, in alternating blocks of 100 — answers
//! that change nothing (200) and 429s that each lock a new model (a change A publishes).
//!
//! Then, how fast one replica's state change reaches the other: each change is an upstream 429
//! on A that locks a new model (so none is refused before it reaches the upstream); the time is
//! from sending that request to A until B's `/metrics` counts one more applied change. It
//! includes A's own request and B's polling interval (one `/metrics` call): an upper bound.
//!
//! Last, an outage: clients keep sending to both replicas while `redis-server` is killed for
//! `--outage-s` seconds and started again. Every answer is checked (200 for most requests, the
//! upstream's 429 for every tenth, which locks a new model: a change to share); a request lost
//! is one that fails, times out or gets any other status. After Redis is back, B must hold the
//! locks A took during the outage (A's resync).
//!
//! `cargo build --release -p proxy && cargo run --release -p load --bin replicas`

use chaos::binary::Gateway;
use chaos::client::{health, send};
use clap::Parser;
use scenarios::{Behaviour, Script, ScriptedUpstream, serve_upstream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// Measure the propagation of state changes between two ferroute replicas through Redis.
#[derive(Parser, Debug)]
#[command(name = "replicas")]
struct Cli {
    /// State changes to measure.
    #[arg(long, default_value_t = 1000)]
    changes: usize,
    /// Requests of each kind to each backend for the overhead comparison (0: none).
    #[arg(long, default_value_t = 2000)]
    requests: usize,
    /// Seconds Redis is down while both replicas are under load (0: no outage phase).
    #[arg(long, default_value_t = 10)]
    outage_s: u64,
    /// Clients sending at once during the outage phase.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// The ferroute binary (default: the one beside this tool).
    #[arg(long)]
    ferroute: Option<PathBuf>,
}

/// A child process killed when dropped.
struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if !(1..=100_000).contains(&cli.changes) {
        anyhow::bail!("--changes must be in 1..=100000");
    }
    let ferroute = match cli.ferroute {
        Some(p) => p,
        None => std::env::current_exe()?.with_file_name("ferroute"),
    };
    if !ferroute.exists() {
        anyhow::bail!("{} not found: build it with `cargo build --release -p proxy`", ferroute.display());
    }
    let dir = std::env::temp_dir().join(format!("ferroute-replicas-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;

    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        l.local_addr()?.port()
    };
    let mut redis = start_redis(port, &dir).await?;
    let limited = Script::always(Behaviour::status_with(
        429,
        &[("retry-after", "600")],
        r#"{"error":{"message":"Rate limit reached"}}"#,
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let up = listener.local_addr()?;
    tokio::spawn(serve_upstream(
        listener,
        Arc::new(ScriptedUpstream::new().route("*", limited).route("echo", Script::always(Behaviour::echo()))),
    ));

    // Every model is addressed as up/<model>, so none needs listing.
    let config = |name: &str, redis: bool| {
        let state = if redis {
            format!(
                "[state]\nbackend = \"redis\"\nurl = \"redis://127.0.0.1:{port}\"\nprefix = \"bench\"\nreplica = \"{name}\"\n"
            )
        } else {
            String::new()
        };
        format!(
            "[server]\ndata_dir = \"{}\"\n{state}\
             [[providers]]\nid = \"up\"\nbase_url = \"http://{up}/v1\"\nmodels = [\"echo\"]\n\
             [[connections]]\nid = \"k1\"\nprovider = \"up\"\napi_key = \"sk-1\"\ndisable_cooling = true\n\
             [resilience.model_lockout]\nenabled = true\n",
            dir.join(format!("data-{name}")).display(),
        )
    };
    let (a, _a) = replica(&ferroute, &dir, "a", &config("a", true)).await?;
    let (b, _b) = replica(&ferroute, &dir, "b", &config("b", true)).await?;
    for base in [&a, &b] {
        wait(base, |h| h["state"]["reachable"] == true).await?;
    }

    if cli.requests > 0 {
        let (c, _c) = replica(&ferroute, &dir, "c", &config("c", false)).await?;
        println!("\nthe same requests, one at a time, in alternating blocks of 100 (ms from send to answer):");
        for (kind, status) in [("200, nothing changes", 200), ("429, a new model locked each", 429)] {
            let mut redis = Vec::new();
            let mut sqlite = Vec::new();
            for block in 0..cli.requests.div_ceil(100) {
                for (base, out, tag) in [(&a, &mut redis, "r"), (&c, &mut sqlite, "s")] {
                    for i in 0..100.min(cli.requests - block * 100) {
                        let model = if status == 200 { "echo".to_owned() } else { format!("{tag}{}", block * 100 + i) };
                        out.push(timed(base, &model, status).await?);
                    }
                }
            }
            let (r, s) = (quantiles(&mut redis), quantiles(&mut sqlite));
            println!(
                "{kind:<30} | redis p50 {:.3} / p99 {:.3} | sqlite p50 {:.3} / p99 {:.3} | redis/sqlite {:.2} / {:.2}",
                r.0,
                r.1,
                s.0,
                s.1,
                r.0 / s.0,
                r.1 / s.1
            );
        }
    }
    let applied = |h: &serde_json::Value| h["state"]["applied"].as_u64().unwrap_or(0);
    let mut times = Vec::with_capacity(cli.changes);
    let mut polls = 0u64;
    for i in 0..cli.changes {
        let before = applied_metric(&b).await?;
        let body = format!(r#"{{"model":"up/m{i}","messages":[{{"role":"user","content":"hi"}}]}}"#);
        let t0 = Instant::now();
        let r = send("POST", &format!("{a}/v1/chat/completions"), &[], &body, Duration::from_secs(10))
            .await
            .map_err(anyhow::Error::msg)?;
        anyhow::ensure!(r.status == 429, "expected the upstream's 429, got {}: {}", r.status, r.body);
        loop {
            polls += 1;
            if applied_metric(&b).await? > before {
                break;
            }
            anyhow::ensure!(t0.elapsed() < Duration::from_secs(10), "change {i} did not reach replica B in 10 s");
        }
        times.push(t0.elapsed());
    }
    times.sort();
    let q = |p: f64| times[((times.len() as f64 * p).ceil() as usize).clamp(1, times.len()) - 1];
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let hb = health(&b).await.map_err(anyhow::Error::msg)?;
    println!(
        "{} changes from replica A to replica B through redis: p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({} /metrics polls of B; B applied {}, dropped {}, errors {})",
        times.len(),
        ms(q(0.50)),
        ms(q(0.90)),
        ms(q(0.99)),
        ms(q(1.0)),
        polls,
        applied(&hb),
        hb["state"]["dropped"],
        hb["state"]["errors"],
    );
    if cli.outage_s > 0 {
        outage(&a, &b, &mut redis, port, &dir, Duration::from_secs(cli.outage_s), cli.clients.max(1)).await?;
    }
    drop(redis);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

async fn start_redis(port: u16, dir: &Path) -> anyhow::Result<Kill> {
    let child = Kill(
        Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| anyhow::anyhow!("cannot start redis-server ({e}): install it with tests/redis/setup.sh"))?,
    );
    let listening = Instant::now() + Duration::from_secs(10);
    while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        anyhow::ensure!(Instant::now() < listening, "redis-server did not listen on {port}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(child)
}

/// One answer of the outage phase: the phase it was sent in (0 before, 1 during, 2 after the
/// outage), whether it was the expected one, and its time in ms.
type Answer = (u8, bool, f64);

/// `clients` clients send to A and B in turn while Redis is killed for `down` and restarted.
async fn outage(
    a: &str,
    b: &str,
    redis: &mut Kill,
    port: u16,
    dir: &Path,
    down: Duration,
    clients: usize,
) -> anyhow::Result<()> {
    let phase = Arc::new(AtomicU8::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let base = if c % 2 == 0 { a.to_owned() } else { b.to_owned() };
            let (phase, stop) = (Arc::clone(&phase), Arc::clone(&stop));
            tokio::spawn(async move {
                let mut out: Vec<Answer> = Vec::new();
                let mut locked = Vec::new();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let (model, want) =
                        if i.is_multiple_of(10) { (format!("c{c}-{i}"), 429) } else { ("echo".to_owned(), 200) };
                    let body = format!(r#"{{"model":"up/{model}","messages":[{{"role":"user","content":"hi"}}]}}"#);
                    let p = phase.load(Ordering::Relaxed);
                    let t0 = Instant::now();
                    let r =
                        send("POST", &format!("{base}/v1/chat/completions"), &[], &body, Duration::from_secs(10)).await;
                    let ok = r.as_ref().is_ok_and(|r| r.status == want);
                    if !ok {
                        eprintln!("lost: {model} via {base}: {:?}", r.map(|r| (r.status, r.body)));
                    }
                    if want == 429 && p == 1 && c % 2 == 0 {
                        locked.push(model);
                    }
                    out.push((p, ok, t0.elapsed().as_secs_f64() * 1000.0));
                }
                (out, locked)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let _ = redis.0.kill();
    let _ = redis.0.wait();
    phase.store(1, Ordering::Relaxed);
    tokio::time::sleep(down).await;
    *redis = start_redis(port, dir).await?;
    phase.store(2, Ordering::Relaxed);
    let back = Instant::now();
    for base in [a, b] {
        wait(base, |h| h["state"]["reachable"] == true).await?;
    }
    let rejoined = back.elapsed();
    tokio::time::sleep(Duration::from_secs(5)).await;
    stop.store(true, Ordering::Relaxed);
    let mut answers = Vec::new();
    let mut locked_by_a = Vec::new();
    for t in tasks {
        let (out, locked) = t.await?;
        answers.extend(out);
        locked_by_a.extend(locked);
    }
    println!("\n{clients} clients on A and B, redis killed for {} s after 5 s, then started again:", down.as_secs());
    let mut lost_total = 0;
    for (p, name) in [(0u8, "before"), (1, "redis down"), (2, "after")] {
        let mut times: Vec<f64> = answers.iter().filter(|x| x.0 == p).map(|x| x.2).collect();
        let lost = answers.iter().filter(|x| x.0 == p && !x.1).count();
        lost_total += lost;
        let (p50, p99) = if times.is_empty() { (0.0, 0.0) } else { quantiles(&mut times) };
        println!("{name:<11} | {:>6} requests | {lost} lost | p50 {p50:.3} ms / p99 {p99:.3} ms", times.len());
    }
    let hb = health(b).await.map_err(anyhow::Error::msg)?;
    let known = hb["model_lockouts"].as_array().map_or(0, |l| {
        locked_by_a.iter().filter(|m| l.iter().any(|x| x["model"].as_str() == Some(m.as_str()))).count()
    });
    println!(
        "both replicas reachable again {:.0} ms after redis restarted; B holds {known} of the {} locks A took while redis was down",
        rejoined.as_secs_f64() * 1000.0,
        locked_by_a.len()
    );
    anyhow::ensure!(lost_total == 0, "{lost_total} requests lost");
    anyhow::ensure!(known == locked_by_a.len(), "B misses locks A took during the outage");
    Ok(())
}

/// One chat request for `up/<model>`, expecting `status`; its time in ms.
async fn timed(base: &str, model: &str, status: u16) -> anyhow::Result<f64> {
    let body = format!(r#"{{"model":"up/{model}","messages":[{{"role":"user","content":"hi"}}]}}"#);
    let t0 = Instant::now();
    let r = send("POST", &format!("{base}/v1/chat/completions"), &[], &body, Duration::from_secs(10))
        .await
        .map_err(anyhow::Error::msg)?;
    anyhow::ensure!(r.status == status, "expected {status}, got {}: {}", r.status, r.body);
    Ok(t0.elapsed().as_secs_f64() * 1000.0)
}

/// p50 and p99 of `v` (sorted in place).
fn quantiles(v: &mut [f64]) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    let q = |p: f64| v[((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1];
    (q(0.5), q(0.99))
}

async fn replica(bin: &Path, dir: &Path, name: &str, config: &str) -> anyhow::Result<(String, Gateway)> {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, config)?;
    let gw = Gateway::start_with(bin, &path).await.map_err(|e| anyhow::anyhow!("replica {name}: {e}"))?;
    Ok((gw.base.clone(), gw))
}

/// B's count of applied changes, from `/metrics` (cheaper than the health JSON, which lists
/// every lockout).
async fn applied_metric(base: &str) -> anyhow::Result<u64> {
    let r =
        send("GET", &format!("{base}/metrics"), &[], "", Duration::from_secs(10)).await.map_err(anyhow::Error::msg)?;
    Ok(r.body
        .lines()
        .find_map(|l| l.strip_prefix("ferroute_shared_state_changes_total{event=\"applied\"} "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0))
}

async fn wait(base: &str, ok: impl Fn(&serde_json::Value) -> bool) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if health(base).await.is_ok_and(|h| ok(&h)) {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "{base} did not join the shared state in 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
