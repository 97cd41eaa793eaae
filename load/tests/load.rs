//! Load tools, checked functionally (timings are the benchmarks' job, not the tests'):
//! a two-second soak always runs; the 30-second soak runs with `RUN_SOAK=1`.

use load::soak::{SoakOptions, Target, is_loopback, run};
use std::time::Duration;

async fn soak(seconds: usize) -> load::soak::SoakReport {
    let dir = tempfile::tempdir().expect("tempdir");
    let addr = load::start_gateway(None, dir.path()).await.expect("gateway");
    let report = dir.path().join("goose-report.html");
    let opts = SoakOptions {
        url: format!("http://{addr}"),
        seconds,
        users: 4,
        p95_ms: 500,
        max_error_rate: 1.0,
        report: report.display().to_string(),
        target: Target::Health,
    };
    let r = run(&opts).await.expect("soak runs");
    assert!(report.exists(), "goose wrote its HTML report");
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_soak_meets_its_thresholds() {
    let r = soak(2).await;
    assert!(r.requests > 100, "{} requests", r.requests);
    assert_eq!(r.thresholds.len(), 2);
    assert!(r.passed(), "{:?}", r.thresholds);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_thirty_second_soak() {
    if std::env::var("RUN_SOAK").as_deref() != Ok("1") {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "soak: skipped (set RUN_SOAK=1 to run the 30 s soak)");
        return;
    }
    let r = soak(30).await;
    assert!(r.passed(), "{:?}", r.thresholds);
}

#[tokio::test]
async fn a_soak_that_would_never_end_is_refused() {
    let opts = SoakOptions {
        url: "http://127.0.0.1:1".into(),
        seconds: 0,
        users: 1,
        p95_ms: 1,
        max_error_rate: 1.0,
        report: "x.html".into(),
        target: Target::Health,
    };
    let err = run(&opts).await.expect_err("0 s would run forever");
    assert!(err.to_string().contains("at least 1 second"), "{err}");
    let far = SoakOptions { url: "http://10.1.2.3:8787".into(), seconds: 1, ..opts };
    assert!(run(&far).await.is_err());
}

/// The proxied soak's request: every answer through the combo is a chat completion (either
/// format's target), none fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_soak_through_the_combo_gets_chat_completions() {
    use scenarios::serve_upstream;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let up = listener.local_addr().expect("addr");
    tokio::spawn(serve_upstream(listener, std::sync::Arc::new(load::bench_upstream())));
    let dir = tempfile::tempdir().expect("tempdir");
    let combo = format!(
        "[[combos]]\nname = \"{}\"\nstrategy = \"round-robin\"\ntargets = [\"bench/m\", \"bench-ant/m\"]\n",
        load::proxied::COMBO
    );
    let gw = load::start_gateway_with(Some(up), dir.path(), &combo).await.expect("gateway");
    let report = dir.path().join("goose-report.html");
    let opts = SoakOptions {
        url: format!("http://{gw}"),
        seconds: 2,
        users: 2,
        p95_ms: 500,
        max_error_rate: 0.0001,
        report: report.display().to_string(),
        target: Target::Combo,
    };
    let r = run(&opts).await.expect("soak runs");
    assert!(r.requests > 100, "{} requests", r.requests);
    assert_eq!(r.failed, 0);
    // The same request where no combo answers (the upstream itself) fails every time: the
    // check can fail.
    let nowhere = SoakOptions { url: format!("http://{up}"), ..opts };
    let r = run(&nowhere).await.expect("soak runs");
    assert!(r.requests > 0 && r.failed == r.requests, "{} of {} failed", r.failed, r.requests);
}

#[test]
fn only_loopback_is_a_target() {
    assert!(is_loopback("http://127.0.0.1:8787"));
    assert!(is_loopback("http://localhost:1/x"));
    assert!(is_loopback("http://[::1]:8787"));
    assert!(!is_loopback("http://10.0.0.1:8787"));
    assert!(!is_loopback("http://example.com"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_load_generator_reaches_every_target() {
    use scenarios::{Behaviour, Script, ScriptedUpstream, serve_upstream};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let up = listener.local_addr().expect("addr");
    tokio::spawn(serve_upstream(
        listener,
        std::sync::Arc::new(ScriptedUpstream::new().route("m", Script::always(Behaviour::echo()))),
    ));
    let pass = load::start_passthrough(up).await.expect("pass-through");
    let dir = tempfile::tempdir().expect("tempdir");
    let gw = load::start_gateway(Some(up), dir.path()).await.expect("gateway");
    for (url, model) in
        [(format!("http://{up}"), "m"), (format!("http://{pass}"), "m"), (format!("http://{gw}"), "bench/m")]
    {
        let l = load::open_loop(
            &format!("{url}/v1/chat/completions"),
            load::body(model, false),
            100,
            Duration::from_millis(300),
        )
        .await;
        assert_eq!((l.ok, l.failed), (30, 0), "{url}");
    }
}

/// The k6 script and the goose soak agree: the same variables, thresholds and defaults.
#[test]
fn the_k6_script_and_the_goose_soak_agree() {
    let k6 = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/k6-soak.js")).expect("k6-soak.js");
    for needle in [
        "__ENV.BASE_URL",
        "__ENV.SOAK_VUS || 10",
        "__ENV.SOAK_DURATION || '30s'",
        "http_req_failed: ['rate<0.01']",
        "http_req_duration: ['p(95)<500']",
        "/api/monitoring/health",
    ] {
        assert!(k6.contains(needle), "k6-soak.js lacks {needle}");
    }
    let soak = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/bin/soak.rs")).expect("soak.rs");
    for needle in [
        r#"env = "BASE_URL""#,
        r#"env = "SOAK_DURATION", default_value = "30s""#,
        r#"env = "SOAK_VUS", default_value_t = 10"#,
        "p95_ms: u64",
        "default_value_t = 500)]\n    p95_ms",
        "default_value_t = 1.0)]\n    max_error_rate",
    ] {
        assert!(soak.contains(needle), "the goose soak lacks {needle:?}");
    }
    assert_eq!(load::soak::THRESHOLDS_BREACHED, 99, "k6's exit code for breached thresholds");
}

#[test]
fn durations_are_read_as_k6_writes_them() {
    use load::soak::parse_duration;
    for (s, want) in
        [("30s", 30), ("30m", 1800), ("1h30m", 5400), ("1m30s", 90), ("500ms", 1), ("45", 45), ("2h", 7200)]
    {
        assert_eq!(parse_duration(s).expect(s), want, "{s}");
    }
    for bad in ["", "m", "30x", "1.5m", "-3s", "30 s"] {
        assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
    }
}

/// The soak binary, configured by k6's variables alone: 0 when the thresholds hold, 99 (as k6)
/// when one is breached, with a k6-style summary either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_soak_binary_reads_k6_variables_and_exits_as_k6() {
    let dir = tempfile::tempdir().expect("tempdir");
    let addr = load::start_gateway(None, dir.path()).await.expect("gateway");
    // A loopback port nobody listens on: every request fails.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port");
    let run = |base: String| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_soak"));
        cmd.env("BASE_URL", base)
            .env("SOAK_DURATION", "1500ms")
            .env("SOAK_VUS", "2")
            .arg("--report")
            .arg(dir.path().join("r.html"))
            .current_dir(dir.path());
        async move { tokio::task::spawn_blocking(move || cmd.output().expect("soak runs")).await.expect("joined") }
    };
    let ok = run(format!("http://{addr}/")).await;
    let out = String::from_utf8_lossy(&ok.stdout).into_owned();
    assert_eq!(ok.status.code(), Some(0), "{out}\n{}", String::from_utf8_lossy(&ok.stderr));
    assert!(out.contains("2 users, 2 s"), "{out}");
    assert!(
        out.contains("✓ 'http_req_duration: p(95)<500'") && out.contains("✓ 'http_req_failed: rate<0.01'"),
        "{out}"
    );
    assert!(out.contains("http_reqs......................: "), "{out}");
    let breached = run(format!("http://{closed}")).await;
    let out = String::from_utf8_lossy(&breached.stdout).into_owned();
    assert_eq!(breached.status.code(), Some(99), "{out}");
    assert!(out.contains("✗ 'http_req_failed: rate<0.01'") && out.contains("100.00%"), "{out}");
}
