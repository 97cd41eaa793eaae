//! `GET /api/monitoring/events` on the real binary: admin-only; a breaker opening, a cooldown,
//! the emergency switch and a reload arrive within a second, each with an id; a client resumes
//! with `Last-Event-ID` and gets exactly what it missed; an id the gateway no longer keeps (or
//! never gave out) gets `resync`; a client that stops reading while thousands of changes happen
//! gets `resync` when it reads again, and the gateway stays responsive meanwhile.

mod common;

use chaos::client::send;
use common::{Proc, chat_at, spawn, upstream};
use scenarios::{Behaviour, Script, ScriptedUpstream};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

const KEY: &str = "admin-key-0001";
const ADMIN: (&str, &str) = ("x-ferroute-admin-key", KEY);

/// An open event stream, read as text (chunked framing and all: each event is one chunk).
struct Events {
    conn: TcpStream,
    seen: String,
}

impl Events {
    /// Opens `/api/monitoring/events{query}` with `extra` headers; returns the stream and what
    /// came up to its `ready` event.
    async fn open(p: &Proc, query: &str, extra: &str) -> (Events, String) {
        Events::open_with(p, query, extra, None).await
    }

    /// [`Events::open`] with the socket's receive buffer set to `rcvbuf` bytes.
    async fn open_with(p: &Proc, query: &str, extra: &str, rcvbuf: Option<u32>) -> (Events, String) {
        let host = p.base.trim_start_matches("http://");
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        if let Some(n) = rcvbuf {
            socket.set_recv_buffer_size(n).expect("SO_RCVBUF");
        }
        let mut conn = socket.connect(host.parse().expect("address")).await.expect("connect");
        let req = format!(
            "GET /api/monitoring/events{query} HTTP/1.1\r\nhost: {host}\r\nx-ferroute-admin-key: {KEY}\r\n{extra}accept: text/event-stream\r\n\r\n"
        );
        conn.write_all(req.as_bytes()).await.expect("write");
        let mut e = Events { conn, seen: String::new() };
        let head = e.until("event: ready", Duration::from_secs(5)).await;
        assert!(head.starts_with("HTTP/1.1 200") && head.contains("text/event-stream"), "{head}");
        (e, head)
    }

    /// Reads until a whole `kind` event arrived; returns the text up to its end.
    async fn event(&mut self, kind: &str) -> String {
        let head = self.until(&format!("event: {kind}\n"), Duration::from_secs(2)).await;
        head + &self.until("\n\n", Duration::from_secs(2)).await
    }

    /// Reads until `what` has been seen (after what earlier calls consumed); returns the text up
    /// to and including it.
    async fn until(&mut self, what: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        let mut buf = vec![0u8; 64 * 1024];
        // Where the search goes on from: only what arrived since, plus what a match may span
        // (a stalled reader drains megabytes; searching them all again per read is quadratic).
        let mut from = 0;
        loop {
            if let Some(at) = self.seen[from..].find(what).map(|at| from + at) {
                let rest = self.seen.split_off(at + what.len());
                return std::mem::replace(&mut self.seen, rest);
            }
            from = self.seen.len().saturating_sub(what.len());
            while !self.seen.is_char_boundary(from) {
                from -= 1;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.conn.read(&mut buf)).await {
                Ok(Ok(n)) if n > 0 => self.seen.push_str(&String::from_utf8_lossy(&buf[..n])),
                other => panic!("{what:?} did not arrive within {within:?} ({other:?}); read so far:\n{}", self.seen),
            }
        }
    }
}

/// The id of the last `id:` line in `text`.
fn last_id(text: &str) -> u64 {
    text.lines().rev().find_map(|l| l.strip_prefix("id: ").and_then(|i| i.trim().parse().ok())).expect("an id")
}

async fn switch(p: &Proc, on: bool) -> u16 {
    let url = format!("{}/api/resilience/emergency-fallback", p.base);
    let body = format!("{{\"enabled\": {on}}}");
    send("POST", &url, &[ADMIN], &body, Duration::from_secs(10)).await.expect("switch").status
}

/// `n` switches of the emergency fallback (off, on, off, …), pipelined on one connection.
async fn many_switches(p: &Proc, n: usize) {
    let host = p.base.trim_start_matches("http://").to_owned();
    let conn = TcpStream::connect(&host).await.expect("connect");
    let (mut rd, mut wr) = conn.into_split();
    let reader = tokio::spawn(async move {
        let (mut buf, mut tail, mut answered) = (vec![0u8; 64 * 1024], String::new(), 0usize);
        while answered < n {
            let got = rd.read(&mut buf).await.expect("read");
            assert!(got > 0, "the gateway closed the connection after {answered} answers");
            tail.push_str(&String::from_utf8_lossy(&buf[..got]));
            answered += tail.matches("HTTP/1.1 200").count();
            // Fewer characters than a status line: what may be the start of the next one.
            tail = tail.chars().skip(tail.chars().count().saturating_sub(11)).collect();
        }
    });
    for batch in (0..n).collect::<Vec<_>>().chunks(500) {
        let mut out = String::new();
        for i in batch {
            let body = format!("{{\"enabled\": {}}}", i % 2 == 1);
            out.push_str(&format!(
                "POST /api/resilience/emergency-fallback HTTP/1.1\r\nhost: {host}\r\nx-ferroute-admin-key: {KEY}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            ));
        }
        wr.write_all(out.as_bytes()).await.expect("write");
    }
    tokio::time::timeout(Duration::from_secs(120), reader).await.expect("every switch answered").expect("reader");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_changes_stream_live_resume_by_id_and_a_stalled_reader_resyncs() {
    let (addr, _) = upstream(
        ScriptedUpstream::new()
            .route("down", Script::always(Behaviour::status(503, r#"{"error":{"message":"overloaded"}}"#)))
            .route("limited", Script::always(Behaviour::status_with(429, &[("retry-after", "30")], "{}")))
            .route("fine", Script::always(Behaviour::echo())),
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("ferroute.toml");
    let text = format!(
        "[server]\nadmin_key = \"{KEY}\"\n[[providers]]\nid = \"local\"\nclass = \"local\"\nbase_url = \"http://{addr}/v1\"\nmodels = [\"down\"]\n[[connections]]\nid = \"l1\"\nprovider = \"local\"\napi_key = \"sk-l1\"\n[[connections]]\nid = \"l2\"\nprovider = \"local\"\napi_key = \"sk-l2\"\n[[providers]]\nid = \"keys\"\nbase_url = \"http://{addr}/v1\"\nmodels = [\"limited\", \"fine\"]\n[[connections]]\nid = \"k1\"\nprovider = \"keys\"\napi_key = \"sk-1\"\n[emergency_fallback]\ntarget = \"keys/fine\"\n"
    );
    std::fs::write(&cfg, text).expect("config");
    let cfg_arg = cfg.display().to_string();
    let p = spawn(&["--config", &cfg_arg], dir.path()).await;

    // Admin only.
    let url = format!("{}/api/monitoring/events", p.base);
    let r = send("GET", &url, &[("x-ferroute-admin-key", "wrong-key-0000")], "", Duration::from_secs(5)).await;
    let r = r.expect("refused");
    assert_eq!(r.status, 401, "{}", r.body);
    assert!(r.body.contains("error"), "a JSON error: {}", r.body);
    let r = send("POST", &url, &[ADMIN], "", Duration::from_secs(5)).await.expect("405");
    assert_eq!(r.status, 405);

    let (mut live, _) = Events::open(&p, "", "").await;
    // A local provider opens at two failures (its two keys fail once each).
    let t = Instant::now();
    assert_eq!(chat_at(&p.base, "local/down").await.status, 503);
    let opened = live.event("breaker").await;
    assert!(opened.contains("\"to\":\"OPEN\"") && opened.contains("\"provider\":\"local\""), "{opened}");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    // A 429 cools k1; the switch and a reload are changes too.
    assert_eq!(chat_at(&p.base, "keys/limited").await.status, 429);
    let cooled = live.event("cooldown").await;
    assert!(cooled.contains("\"connection\":\"k1\"") && cooled.contains("rate_limit"), "{cooled}");
    assert_eq!(switch(&p, true).await, 200);
    let switched = live.event("emergency").await;
    let r = send("POST", &format!("{}/api/config/reload", p.base), &[ADMIN], "", Duration::from_secs(10)).await;
    assert_eq!(r.expect("reload").status, 200);
    let reloaded = live.event("reload").await;
    let (switch_id, reload_id) = (last_id(&switched), last_id(&reloaded));
    assert_eq!(reload_id, switch_id + 1, "ids increase by one:\n{switched}\n{reloaded}");

    // Resuming after the switch gives the reload and nothing before it.
    let (mut resumed, head) = Events::open(&p, "", &format!("last-event-id: {switch_id}\r\n")).await;
    let again = resumed.until("event: reload", Duration::from_secs(2)).await;
    assert!(!head.contains("resync") && !again.contains("event: emergency"), "{head}{again}");
    assert_eq!(last_id(&again), reload_id);
    // `?after=` does the same; an id this process never gave out gets `resync` first.
    let (mut by_query, _) = Events::open(&p, &format!("?after={switch_id}"), "").await;
    assert_eq!(last_id(&by_query.until("event: reload", Duration::from_secs(2)).await), reload_id);
    let (_, head) = Events::open(&p, "", "last-event-id: 999999\r\n").await;
    assert!(head.contains(&format!("event: resync\ndata: {{\"newest\":{reload_id}}}")), "{head}");

    // A reader that stops: 60 000 changes later (about 7 MB of events, more than the ring and
    // the sockets' buffers, up to 4 MiB here, hold), the gateway still answers at once, and the
    // reader, reading again, is told to resync (its place fell out of the ring) — then goes on.
    let (mut stalled, _) = Events::open_with(&p, "", "", Some(4096)).await;
    let rss = |p: &Proc| {
        let status = std::fs::read_to_string(format!("/proc/{}/status", p.child.id())).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches(" kB").parse::<u64>().ok())
    };
    let before = rss(&p);
    many_switches(&p, 60_000).await;
    let after = rss(&p);
    eprintln!("gateway RSS with a stalled event reader, before and after 60 000 changes: {before:?} kB, {after:?} kB");
    if let (Some(b), Some(a)) = (before, after) {
        assert!(a < b + 32 * 1024, "the gateway grew from {b} kB to {a} kB with a stalled reader");
    }
    let t = Instant::now();
    let h = send("GET", &format!("{}/api/monitoring/health", p.base), &[], "", Duration::from_secs(5)).await;
    assert_eq!(h.expect("health").status, 200);
    assert!(t.elapsed() < Duration::from_secs(1), "health took {:?}", t.elapsed());
    stalled.until("event: resync", Duration::from_secs(10)).await;
    assert_eq!(switch(&p, false).await, 200, "the last of the many switched it on");
    stalled.until("event: emergency", Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_acquired_and_released_is_announced_with_the_owner_hashed() {
    let (addr, _) = upstream(ScriptedUpstream::new().route("m", Script::always(Behaviour::echo()))).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("ferroute.toml");
    let text = format!(
        "[server]\nadmin_key = \"{KEY}\"\n[[keys]]\nid = \"team\"\nkey = \"team-key-0001\"\npermissions = [\"lease:exclusive\"]\nallowed_connections = [\"c0\"]\n[[providers]]\nid = \"up\"\nbase_url = \"http://{addr}/v1\"\nmodels = [\"m\"]\n[[connections]]\nid = \"c0\"\nprovider = \"up\"\napi_key = \"sk-0\"\n"
    );
    std::fs::write(&cfg, text).expect("config");
    let cfg_arg = cfg.display().to_string();
    let p = spawn(&["--config", &cfg_arg], dir.path()).await;
    let (mut live, _) = Events::open(&p, "", "").await;
    let owner = format!("vlo_{}", "A".repeat(43));
    let lease = |body: &'static str| {
        let headers = [
            ("content-type", "application/json"),
            ("authorization", "Bearer team-key-0001"),
            ("x-ferroute-lease-owner", owner.as_str()),
        ];
        let url = format!("{}/api/v1/session-leases", p.base);
        async move { send("POST", &url, &headers, body, Duration::from_secs(10)).await.expect("lease") }
    };
    let a = lease(r#"{"action":"acquire","model":"up/m"}"#).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let acquired = live.event("lease").await;
    assert!(acquired.contains("\"what\":\"acquired\"") && acquired.contains("\"connection\":\"c0\""), "{acquired}");
    assert!(!acquired.contains(&owner), "the owner only as its hash: {acquired}");
    let r = lease(r#"{"action":"release","generation":1}"#).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let released = live.event("lease").await;
    assert!(released.contains("\"what\":\"released\""), "{released}");
}
