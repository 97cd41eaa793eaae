//! Load tools, checked functionally (timings are the benchmarks' job, not the tests'):
//! a two-second soak always runs; the 30-second soak runs with `RUN_SOAK=1`.

use load::soak::{SoakOptions, is_loopback, run};
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
    };
    let err = run(&opts).await.expect_err("0 s would run forever");
    assert!(err.to_string().contains("at least 1 second"), "{err}");
    let far = SoakOptions { url: "http://10.1.2.3:8787".into(), seconds: 1, ..opts };
    assert!(run(&far).await.is_err());
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
