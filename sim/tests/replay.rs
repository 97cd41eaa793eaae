//! The flight recorder end to end: the real gateway (in this process, on loopback, recording and
//! exporting spans to an OTLP receiver that decodes them) records three
//! incidents against scripted upstreams (a 429 storm on one key of two; a 503 burst on one
//! provider of a combo; streams that slow down until the watchdog cuts them); the recording is cut with the export code and replayed in the
//! simulator. Under the recorded config at least 95 % of requests get their recorded answer
//! class; a candidate config's report differs where it should.

use chaos::client::send;
use proxy::config::Config;
use proxy::recording::export;
use proxy::recording::record::Record;
use proxy::{Persistence, build};
use scenarios::collector::Collector;
use scenarios::{Behaviour, Mode, Script, ScriptedUpstream, Window, serve_upstream};
use sim::replay::build::Recording;
use sim::replay::{Report, render, replay};
use std::sync::Arc;
use std::time::Duration;

/// Spans the collector received (each export decoded as OTLP protobuf).
fn spans(otlp: &Collector) -> usize {
    use prost::Message;
    otlp.received()
        .iter()
        .map(|r| {
            let req =
                opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest::decode(r.body.as_ref())
                    .expect("OTLP protobuf");
            req.resource_spans.iter().flat_map(|rs| &rs.scope_spans).map(|ss| ss.spans.len()).sum::<usize>()
        })
        .sum()
}

/// Runs the gateway under `config` (its `{UP}` the upstream's base URL, recording into a
/// fresh directory) while `requests` models are asked for, `every_ms` apart, each without
/// waiting for the one before; returns the recording and the config text.
async fn incident(
    config: &str,
    upstream: ScriptedUpstream,
    requests: &[&str],
    every_ms: u64,
    stream: bool,
) -> (Vec<Record>, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind upstream");
    let up = listener.local_addr().expect("addr");
    let up_task = tokio::spawn(serve_upstream(listener, Arc::new(upstream)));
    let dir = tempfile::tempdir().expect("tempdir");
    let text = config.replace("{UP}", &format!("http://{up}/v1"));
    let with_recording =
        format!("{text}\n[recording]\nenabled = true\npath = \"{}\"\n", dir.path().join("rec").display());
    let otlp = Collector::start().await.expect("collector");
    let collector = otlp.addr;
    let with_recording = format!("{with_recording}[telemetry]\notlp_endpoint = \"http://{collector}\"\n");
    let cfg = Config::from_toml_str(&with_recording, &|_| None, &[]).expect("config");
    let wall = proxy::state::clock::system_wall_ms();
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.set_nodelay(true);
    // Spans too, as the binary exports them.
    let telemetry = proxy::recording::telemetry::Telemetry::for_config(&cfg.telemetry, &|_| None, wall)
        .expect("telemetry")
        .expect("an endpoint is set");
    let gw = build(cfg, http, Persistence::Memory, wall, 7).expect("gateway");
    let _ = gw.telemetry.set(Arc::new(telemetry));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind gateway");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(proxy::edge::serve::serve_gateway(Arc::clone(&gw), listener, async {
        let _ = stopped.await;
    }));
    let mut clients = Vec::new();
    for (i, model) in requests.iter().enumerate() {
        let url = format!("http://{addr}/v1/chat/completions");
        let body =
            serde_json::json!({"model": model, "stream": stream, "messages": [{"role": "user", "content": "hi"}]})
                .to_string();
        clients.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(i as u64 * every_ms)).await;
            send("POST", &url, &[("content-type", "application/json")], &body, Duration::from_secs(60)).await
        }));
    }
    for c in clients {
        let r = c.await.expect("client").expect("answer");
        assert!(r.status == 200 || r.status >= 400, "{}", r.body);
    }
    // The writer flushes a batch a second after its first record: wait until the count has
    // stood still for longer than that.
    let recorder = gw.recorder.clone().expect("recording is on");
    let (mut last, mut still) = (u64::MAX, 0);
    while still < 6 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = recorder.written();
        still = if now == last && now > 0 { still + 1 } else { 0 };
        last = now;
    }
    assert_eq!(recorder.dropped(), 0);
    let _ = stop.send(());
    let _ = serving.await;
    up_task.abort();
    let records = export::window(&dir.path().join("rec"), 0, u64::MAX).expect("recording");
    // One span per record (every request is sampled), all received.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while spans(&otlp) < records.len() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(spans(&otlp), records.len(), "a span per record");
    (records, text)
}

fn schedule(windows: Vec<(u64, u64, Behaviour)>, otherwise: Behaviour) -> Script {
    Script(Mode::Schedule {
        period_ms: 3_600_000,
        windows: windows.into_iter().map(|(from_ms, to_ms, behaviour)| Window { from_ms, to_ms, behaviour }).collect(),
        otherwise: Box::new(otherwise),
    })
}

/// The simulator runs its own runtime: replay off this test's.
async fn replayed(rec: Recording, config: String, candidate: sim::replay::Candidate) -> Report {
    tokio::task::spawn_blocking(move || replay(&rec, &config, &[candidate], 1).expect("replay"))
        .await
        .expect("replay task")
}

fn check(report: &Report, what: &str) {
    eprintln!("{what}:\n{}", render(report));
    let (same, all) = report.fidelity;
    assert!(all > 0 && same * 100 >= all * 95, "{what}: fidelity {same}/{all}:\n{}", render(report));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_storm_on_one_key_of_two_replays_faithfully_and_a_longer_cooldown_sends_fewer_calls_to_it() {
    let config = "[[providers]]\nid = \"up\"\nbase_url = \"{UP}\"\nmodels = [\"m\"]\n\
                  [[connections]]\nid = \"k1\"\nprovider = \"up\"\napi_key = \"sk-one\"\n\
                  [[connections]]\nid = \"k2\"\nprovider = \"up\"\napi_key = \"sk-two\"\n";
    let limited = Behaviour::status_with(
        429,
        &[("retry-after", "1")],
        r#"{"error":{"message":"Rate limit reached for requests","type":"requests","code":"rate_limit_exceeded"}}"#,
    );
    // k1 for 4 s, k2 for 2 s in the middle: then both cool at once and clients get 429s.
    let upstream = ScriptedUpstream::new()
        .route("m#sk-one", schedule(vec![(0, 4_000, limited.clone())], Behaviour::echo()))
        .route("m#sk-two", schedule(vec![(1_000, 3_000, limited)], Behaviour::echo()))
        .route("m", Script::always(Behaviour::echo()));
    let models = vec!["up/m"; 40];
    let (records, config) = incident(config, upstream, &models, 150, false).await;
    // `FERROUTE_SAVE_INCIDENT=DIR` keeps this incident (examples/incident-429 was made so).
    if let Ok(dir) = std::env::var("FERROUTE_SAVE_INCIDENT") {
        let dir = std::path::Path::new(&dir);
        std::fs::create_dir_all(dir).expect("incident dir");
        export::write(&records, &dir.join("recording.jsonl.gz")).expect("recording");
        let up = config.split("base_url = \"").nth(1).and_then(|r| r.split('"').next()).unwrap_or_default();
        std::fs::write(dir.join("ferroute.toml"), config.replace(up, "https://api.example.com/v1")).expect("config");
    }
    let rec = Recording::new(records).expect("recording");
    assert_eq!(rec.requests.len(), 40);
    assert!(rec.attempts.iter().any(|a| a.status == 429 && a.connection == "k1"), "the storm was recorded");
    let candidate = (
        "base cooldown 30 s".to_owned(),
        vec![("resilience.connection_cooldown.api_key.base_cooldown_ms".to_owned(), "30000".to_owned())],
    );
    // The hint (1 s) decides the recorded config's cooldowns; the candidate ignores hints and
    // cools k1 for 30 s, so it sends it fewer calls and k1 spends longer cooling.
    let candidate = (
        candidate.0,
        [
            candidate.1,
            vec![("resilience.connection_cooldown.api_key.use_upstream_retry_hints".to_owned(), "false".to_owned())],
        ]
        .concat(),
    );
    let report = replayed(rec, config, candidate).await;
    check(&report, "429 storm");
    let (recorded, cand) = (&report.columns[1], &report.columns[2]);
    assert!(cand.upstream_calls < recorded.upstream_calls, "{}", render(&report));
    assert!(cand.cooling_s > recorded.cooling_s, "{}", render(&report));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_burst_on_one_provider_of_a_combo_replays_faithfully_and_a_doubled_breaker_threshold_opens_it_later() {
    let config = "[[providers]]\nid = \"a\"\nbase_url = \"{UP}\"\nmodels = [\"ma\"]\n\
                  [[connections]]\nid = \"a1\"\nprovider = \"a\"\napi_key = \"sk-a1\"\n\
                  [[connections]]\nid = \"a2\"\nprovider = \"a\"\napi_key = \"sk-a2\"\n\
                  [[providers]]\nid = \"b\"\nbase_url = \"{UP}\"\nmodels = [\"mb\"]\n\
                  [[connections]]\nid = \"b1\"\nprovider = \"b\"\napi_key = \"sk-b1\"\n\
                  [[combos]]\nname = \"team\"\ntargets = [\"a/ma\", \"b/mb\"]\n\
                  [resilience.breaker.api_key]\nfailure_threshold = 3\ndegradation_threshold = 2\ndedupe_window_ms = 100\n";
    let down = Behaviour::status(503, r#"{"error":{"message":"The server is temporarily unavailable"}}"#);
    let upstream = ScriptedUpstream::new()
        .route("ma", schedule(vec![(0, 3_000, down)], Behaviour::echo()))
        .route("mb", Script::always(Behaviour::echo()));
    let models = vec!["team"; 30];
    let (records, config) = incident(config, upstream, &models, 150, false).await;
    let rec = Recording::new(records).expect("recording");
    assert!(
        rec.attempts.iter().flat_map(|a| a.changed.iter()).any(|c| c == "breaker a OPEN"),
        "the burst opened a's breaker"
    );
    let candidate = (
        "breaker threshold doubled".to_owned(),
        vec![("resilience.breaker.api_key.failure_threshold".to_owned(), "6".to_owned())],
    );
    let report = replayed(rec, config, candidate).await;
    check(&report, "503 burst");
    let (recorded, cand) = (&report.columns[1], &report.columns[2]);
    assert!(cand.upstream_calls > recorded.upstream_calls, "more calls reach a before it opens: {}", render(&report));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_that_slow_down_replay_faithfully_and_without_the_watchdog_none_is_cut() {
    let config = "[[providers]]\nid = \"up\"\nclass = \"local\"\nbase_url = \"{UP}\"\nmodels = [\"m\"]\n\
                  [[connections]]\nid = \"k1\"\nprovider = \"up\"\napi_key = \"sk-one\"\n\
                  [[connections]]\nid = \"k2\"\nprovider = \"up\"\napi_key = \"sk-two\"\n\
                  [resilience.throughput_watchdog]\nenabled = true\nwarmup_ms = 500\nwindow_ms = 1000\nmin_bytes_per_second = 20\n";
    let slow = Behaviour::SlowDrip { text: "x".repeat(40), chunk_ms: 400 };
    let upstream = ScriptedUpstream::new().route("m", schedule(vec![(0, 2_500, slow)], Behaviour::echo()));
    let models = vec!["up/m"; 12];
    let (records, config) = incident(config, upstream, &models, 400, true).await;
    let rec = Recording::new(records).expect("recording");
    let cut = rec.attempts.iter().filter(|a| a.end == proxy::recording::record::AttemptEnd::Watchdog).count();
    assert!(cut > 0, "the watchdog cut the slow streams");
    let candidate =
        ("watchdog off".to_owned(), vec![("resilience.throughput_watchdog.enabled".to_owned(), "false".to_owned())]);
    let report = replayed(rec, config, candidate).await;
    check(&report, "slow streams");
    let (recorded, cand) = (&report.columns[1], &report.columns[2]);
    assert!(cand.latency_ms.1 > recorded.latency_ms.1, "uncut slow streams last longer: {}", render(&report));
}
