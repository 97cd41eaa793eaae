//! The flight recorder on the real binary: with `[recording]` on, every client request and
//! upstream attempt is written (compressed, never a prompt, an answer or a key), and
//! `ferroute recording export` cuts a window into one file; bad input is refused plainly.

mod common;

use common::{chat_at, spawn, upstream};
use proxy::recording::record::{AttemptEnd, Record};
use scenarios::{Behaviour, Script, ScriptedUpstream};
use std::process::Command;
use std::time::Duration;

fn export(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ferroute"))
        .args(["--config", "ferroute.toml", "recording", "export"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("ferroute recording export")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_and_attempts_are_recorded_and_a_window_is_exported_without_secrets() {
    let (addr, _) = upstream(
        ScriptedUpstream::new()
            .route(
                "busy#sk-secret-one",
                Script::always(Behaviour::status_with(
                    429,
                    &[("retry-after", "7")],
                    r#"{"error":{"message":"slow down"}}"#,
                )),
            )
            .route("busy", Script::always(Behaviour::echo())),
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let text = format!(
        "[recording]\nenabled = true\n[[providers]]\nid = \"up\"\nbase_url = \"http://{addr}/v1\"\nmodels = [\"busy\"]\n\
         [[connections]]\nid = \"k1\"\nprovider = \"up\"\napi_key = \"sk-secret-one\"\n\
         [[connections]]\nid = \"k2\"\nprovider = \"up\"\napi_key = \"sk-secret-two\"\n"
    );
    std::fs::write(dir.path().join("ferroute.toml"), text).expect("config");
    let p = spawn(&["--config", "ferroute.toml"], dir.path()).await;
    // The gateway's wall clock is its start-up anchor plus whole milliseconds since, so it can read
    // up to 2 ms behind the system's: a record made right after this line may be stamped before it.
    let before = proxy::state::clock::system_wall_ms().saturating_sub(1_000);
    for _ in 0..3 {
        assert_eq!(chat_at(&p.base, "up/busy").await.status, 200);
    }
    let after = proxy::state::clock::system_wall_ms() + 1;
    // The writer takes moments; the export reads what is on disk.
    let out = dir.path().join("incident.jsonl.gz");
    let mut records = Vec::new();
    for _ in 0..50 {
        let o = export(
            dir.path(),
            &["--since", &before.to_string(), "--until", &after.to_string(), "-o", "incident.jsonl.gz"],
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        records = proxy::recording::writer::read(&out).expect("export");
        if records.len() == 6 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let requests = records.iter().filter(|r| matches!(r, Record::Request(_))).count();
    assert_eq!(requests, 3, "{records:?}");
    let attempts: Vec<_> =
        records.iter().filter_map(|r| if let Record::Attempt(a) = r { Some(a) } else { None }).collect();
    // k1 answered 429 with its hint once and cooled; every request was served by k2 or k1.
    let limited = attempts.iter().find(|a| a.status == 429).expect("the 429");
    assert_eq!(limited.connection, "k1");
    assert_eq!(limited.end, AttemptEnd::Failed);
    assert_eq!(limited.hints, vec![("retry-after".to_owned(), "7".to_owned())]);
    assert_eq!(limited.message.as_deref(), Some("slow down"));
    assert!(limited.changed.iter().any(|c| c.starts_with("cooldown k1 ")), "{limited:?}");
    assert_eq!(attempts.iter().filter(|a| a.end == AttemptEnd::Served).count(), 3);
    // After k1 cooled, the picks of k2 saw it excluded; the echo reports its tokens.
    let after = attempts.iter().rfind(|a| a.connection == "k2").expect("k2");
    assert_eq!(after.excluded, vec!["k1 unavailable".to_owned()], "{after:?}");
    assert!(after.usage.is_some_and(|u| u.input_tokens == 1 && u.output_tokens == 1), "{after:?}");
    let raw = String::from_utf8_lossy(&{
        use std::io::Read;
        let mut s = Vec::new();
        flate2::read::MultiGzDecoder::new(std::fs::File::open(&out).expect("file")).read_to_end(&mut s).expect("gzip");
        s
    })
    .into_owned();
    for secret in ["sk-secret-one", "sk-secret-two", "\"hi\"", "content"] {
        assert!(!raw.contains(secret), "{secret} in the recording: {raw}");
    }
    // A window before anything happened is empty; bad bounds are refused.
    let o = export(dir.path(), &["--since", "0", "--until", "1000", "-o", "empty.jsonl.gz"]);
    assert!(o.status.success());
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "empty.jsonl.gz: 0 requests, 0 attempts");
    let o = export(dir.path(), &["--since", "yesterday", "--until", "1000", "-o", "x.gz"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("RFC 3339"), "{}", String::from_utf8_lossy(&o.stderr));
    let o = export(dir.path(), &["--since", "2000", "--until", "1000", "-o", "x.gz"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("--until must be after --since"));
    // Its counters.
    let m = chaos::client::send("GET", &format!("{}/metrics", p.base), &[], "", Duration::from_secs(5))
        .await
        .expect("metrics");
    assert!(m.body.contains("ferroute_recording_records_total{event=\"dropped\"} 0"), "{}", m.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_stream_counts_its_events_and_bytes() {
    let (addr, _) = upstream(ScriptedUpstream::new().route("talk", Script::always(Behaviour::echo()))).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let text = format!(
        "[recording]\nenabled = true\n[[providers]]\nid = \"up\"\nbase_url = \"http://{addr}/v1\"\nmodels = [\"talk\"]\n\
         [[connections]]\nid = \"k1\"\nprovider = \"up\"\napi_key = \"sk-one\"\n"
    );
    std::fs::write(dir.path().join("ferroute.toml"), text).expect("config");
    let p = spawn(&["--config", "ferroute.toml"], dir.path()).await;
    // The gateway's wall clock is its start-up anchor plus whole milliseconds since, so it can read
    // up to 2 ms behind the system's: a record made right after this line may be stamped before it.
    let before = proxy::state::clock::system_wall_ms().saturating_sub(1_000);
    let body = r#"{"model":"up/talk","stream":true,"messages":[{"role":"user","content":"two words"}]}"#;
    let r = chaos::client::send("POST", &format!("{}/v1/chat/completions", p.base), &[], body, Duration::from_secs(30))
        .await
        .expect("stream");
    assert_eq!(r.status, 200);
    let after = proxy::state::clock::system_wall_ms() + 1;
    // The echo streams a chunk per word, a finish, a usage chunk and `[DONE]`.
    let events = scenarios::answer::sse_data(&r.body);
    assert_eq!(events.len(), 5, "{}", r.body);
    let out = dir.path().join("stream.jsonl.gz");
    let mut timing = None;
    for _ in 0..50 {
        let o = export(
            dir.path(),
            &["--since", &before.to_string(), "--until", &after.to_string(), "-o", "stream.jsonl.gz"],
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let records = proxy::recording::writer::read(&out).expect("export");
        timing = records.iter().find_map(|r| if let Record::Attempt(a) = r { a.timing.clone() } else { None });
        if timing.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let timing = timing.expect("the stream's attempt, with its timing");
    assert_eq!(timing.events, 5, "{timing:?}");
    assert_eq!(timing.bytes, r.body.len() as u64, "{timing:?}");
}
