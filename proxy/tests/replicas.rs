//! Two real `ferroute` processes sharing resilience state through one real `redis-server`
//! (`[state] backend = "redis"`). Each test starts its own server on a free loopback port in a
//! temporary directory. `.ci/run` installs `redis-server` with `tests/redis/setup.sh`, and in CI
//! a missing server fails these tests; outside CI they run that script themselves, and say they
//! were skipped when it cannot install one (it needs apt-get and root).

mod common;

use chaos::client::{breaker, connection_status, health, health_field};
use common::{Proc, chat_at, spawn, upstream};
use scenarios::{Behaviour, Script, ScriptedUpstream};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::time::Instant;

/// A private `redis-server`, killed when dropped.
struct Redis {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Redis {
    /// A running server, or `None` (outside CI only) when none can be installed.
    async fn start() -> Option<Redis> {
        if !installed() {
            let in_ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
            assert!(!in_ci, "redis-server is missing: .ci/run installs it with tests/redis/setup.sh");
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/redis/setup.sh");
            let ran = Command::new("bash").arg(script).status().is_ok_and(|s| s.success());
            if !ran || !installed() {
                eprintln!("skipped: no redis-server and tests/redis/setup.sh could not install one");
                return None;
            }
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        let child = Redis::spawn(port, dir.path());
        let r = Redis { child, port, dir };
        r.wait_ready().await;
        Some(r)
    }

    fn spawn(port: u16, dir: &Path) -> Child {
        Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server")
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    async fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not listen on {}", self.port);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    async fn restart(&mut self) {
        self.kill();
        self.child = Redis::spawn(self.port, self.dir.path());
        self.wait_ready().await;
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

fn installed() -> bool {
    Command::new("redis-server").arg("--version").stdout(Stdio::null()).status().is_ok_and(|s| s.success())
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// One replica's config: provider `up` with `connections`, its breaker opening at `threshold`
/// failures, sharing through `redis` under `prefix` as `name`.
fn config(
    dir: &Path,
    up: SocketAddr,
    connections: &[&str],
    threshold: u32,
    redis: &str,
    prefix: &str,
    name: &str,
) -> String {
    let mut cfg = format!(
        "[server]\ndata_dir = \"{}\"\n[state]\nbackend = \"redis\"\nurl = \"{redis}\"\nprefix = \"{prefix}\"\nreplica = \"{name}\"\n\
         [[providers]]\nid = \"up\"\nbase_url = \"http://{up}/v1\"\nmodels = [\"down\", \"limited\", \"fine\"]\n\
         [resilience.breaker.api_key]\nfailure_threshold = {threshold}\ndegradation_threshold = {threshold}\nreset_timeout_ms = 600000\n",
        dir.join(format!("data-{name}")).display()
    );
    for c in connections {
        cfg.push_str(&format!("[[connections]]\nid = \"{c}\"\nprovider = \"up\"\napi_key = \"sk-{c}\"\n"));
    }
    cfg
}

async fn replica(dir: &Path, cfg: String, name: &str) -> Proc {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, cfg).expect("write config");
    let p = spawn(&["--config", &path.display().to_string()], dir).await;
    wait_for(&p.base, "the replica joins the shared state", |h| h["state"]["reachable"] == true).await;
    p
}

/// Polls `base`'s health until `ok` holds (5 s at most); returns that health.
async fn wait_for(base: &str, what: &str, ok: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let h = health(base).await.expect("health");
        if ok(&h) {
            return h;
        }
        assert!(Instant::now() < deadline, "{what}: not within 5 s; health: {h}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn script() -> ScriptedUpstream {
    ScriptedUpstream::new()
        .route("down", Script::always(Behaviour::status(503, "{}")))
        .route("limited", Script::always(Behaviour::status_with(429, &[("retry-after", "120")], "{}")))
        .route("fine", Script::always(Behaviour::echo()))
}

/// Milliseconds of the day of an RFC 3339 UTC time (`…THH:MM:SS.mmmZ`).
fn ms_of_day(t: &str) -> i64 {
    let time = t.split('T').nth(1).unwrap_or_else(|| panic!("not RFC 3339: {t}")).trim_end_matches('Z');
    let mut parts = time.split(':');
    let h: i64 = parts.next().and_then(|x| x.parse().ok()).expect("hours");
    let m: i64 = parts.next().and_then(|x| x.parse().ok()).expect("minutes");
    let s: f64 = parts.next().and_then(|x| x.parse().ok()).expect("seconds");
    (h * 3600 + m * 60) * 1000 + (s * 1000.0).round() as i64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_split_across_two_replicas_open_the_breaker_on_both() {
    let Some(redis) = Redis::start().await else { return };
    let (up, script) = upstream(script()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    // Each replica holds its own key of the provider, so each failure is a different
    // connection's (the breaker counts one failure per connection inside its window).
    let a = replica(dir.path(), config(dir.path(), up, &["k1"], 2, &redis.url(), "split", "a"), "a").await;
    let b = replica(dir.path(), config(dir.path(), up, &["k2"], 2, &redis.url(), "split", "b"), "b").await;

    assert_eq!(chat_at(&a.base, "up/down").await.status, 503);
    wait_for(&b.base, "B counts A's failure", |h| h["providers"][0]["failures"] == 1).await;
    assert_eq!(breaker(&health(&a.base).await.expect("health"), "up"), "CLOSED", "one failure of two");

    assert_eq!(chat_at(&b.base, "up/down").await.status, 503);
    let hb = health(&b.base).await.expect("health");
    assert_eq!(breaker(&hb, "up"), "OPEN", "B's own failure is the second: {hb}");
    let ha = wait_for(&a.base, "A opens on B's failure", |h| breaker(h, "up") == "OPEN").await;
    assert_eq!(script.calls("down"), 2);

    // Both refuse without calling the provider.
    for p in [&a, &b] {
        assert_eq!(chat_at(&p.base, "up/down").await.status, 503);
    }
    assert_eq!(script.calls("down"), 2, "neither replica sent anything once open");
    assert!(ha["state"]["applied"].as_u64().is_some_and(|n| n >= 1), "{ha}");
    assert_eq!(ha["state"]["backend"], "redis");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_started_late_sees_the_cooldowns_remaining_time() {
    let Some(redis) = Redis::start().await else { return };
    let (up, script) = upstream(script()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let a = replica(dir.path(), config(dir.path(), up, &["k1"], 5, &redis.url(), "late", "a"), "a").await;
    assert_eq!(chat_at(&a.base, "up/limited").await.status, 429);
    let ha = health(&a.base).await.expect("health");
    assert_eq!(connection_status(&ha, "k1"), "unavailable");
    let until_a = ms_of_day(&health_field(&ha, "connections", "k1", "rate_limited_until"));

    // A fresh 120 s cooldown taken now would end 1.5 s after A's.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let b = replica(dir.path(), config(dir.path(), up, &["k1"], 5, &redis.url(), "late", "b"), "b").await;
    let hb = health(&b.base).await.expect("health");
    assert_eq!(connection_status(&hb, "k1"), "unavailable", "B learned the cooldown from the store: {hb}");
    let until_b = ms_of_day(&health_field(&hb, "connections", "k1", "rate_limited_until"));
    let skew = (until_b - until_a).rem_euclid(86_400_000).min((until_a - until_b).rem_euclid(86_400_000));
    assert!(skew < 250, "B's cooldown ends with A's (A {until_a}, B {until_b} ms of the day)");
    assert_eq!(chat_at(&b.base, "up/limited").await.status, 429);
    assert_eq!(script.calls("limited"), 1, "B refused k1 without sending");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_gone_requests_are_served_and_the_replicas_resync_when_it_returns() {
    let Some(mut redis) = Redis::start().await else { return };
    let (up, script) = upstream(script()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let a = replica(dir.path(), config(dir.path(), up, &["k1"], 5, &redis.url(), "gone", "a"), "a").await;
    let b = replica(dir.path(), config(dir.path(), up, &["k1"], 5, &redis.url(), "gone", "b"), "b").await;

    redis.kill();
    wait_for(&a.base, "A notices the store is gone", |h| h["state"]["reachable"] == false).await;
    for _ in 0..20 {
        assert_eq!(chat_at(&a.base, "up/fine").await.status, 200, "served on local state");
        assert_eq!(chat_at(&b.base, "up/fine").await.status, 200, "served on local state");
    }
    assert_eq!(script.calls("fine"), 40);
    // A change made while the store is down reaches B once it is back (A resyncs in full).
    assert_eq!(chat_at(&a.base, "up/limited").await.status, 429);
    assert_eq!(connection_status(&health(&b.base).await.expect("health"), "k1"), "active");

    redis.restart().await;
    wait_for(&a.base, "A reconnects", |h| h["state"]["reachable"] == true).await;
    wait_for(&b.base, "B learns A's cooldown after the resync", |h| connection_status(h, "k1") == "unavailable").await;
}
