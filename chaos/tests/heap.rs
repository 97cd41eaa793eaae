//! Heap guard: about 500 SSE streams through the real gateway, sequential and 50 at a time,
//! every other one translated from an Anthropic-format provider; the gateway's RSS must stay
//! under a ceiling and come back to its warm baseline.
//! Gated: `RUN_CHAOS_INT=1 cargo test -p chaos`.

use chaos::binary::Gateway;
use chaos::client::chat;
use chaos::enabled;
use scenarios::{Behaviour, Script, ScriptedUpstream, SseEvent, serve_upstream};
use std::sync::Arc;

/// Peak RSS allowed while streaming (the debug binary idles at a few tens of MiB).
const CEILING_KIB: u64 = 256 * 1024;
/// RSS after the run may exceed the warm baseline by at most this fraction.
const GROWTH_ALLOWED: f64 = 0.10;

async fn streams(base: &str, n: usize, parallel: usize, peak: &mut u64, gw: &Gateway) {
    let mut done = 0;
    while done < n {
        let batch = parallel.min(n - done);
        let tasks: Vec<_> = (0..batch)
            .map(|i| {
                let base = base.to_owned();
                let model = if (done + i) % 2 == 0 { "up/m" } else { "ant/echo" };
                tokio::spawn(async move { chat(&base, model, true).await })
            })
            .collect();
        for t in tasks {
            let r = t.await.expect("join").expect("response");
            assert_eq!(r.status, 200);
            assert!(r.body.contains("[DONE]"), "{}", r.body);
            assert!(
                r.body.contains("chat.completion.chunk"),
                "translated streams reach the client as chat chunks: {}",
                r.body
            );
        }
        *peak = (*peak).max(gw.rss_kib().unwrap_or(0));
        done += batch;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_streams_do_not_grow_the_heap() {
    if !enabled("heap") {
        return;
    }
    let events: Vec<SseEvent> = (0..10).map(|_| SseEvent::text(0, "x")).chain([SseEvent::done(0)]).collect();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    // The echo streams ten words in either format (the Anthropic provider is reached at
    // /v1/messages and answers with Anthropic events).
    let up = Arc::new(
        ScriptedUpstream::new()
            .route("m", Script::always(Behaviour::stream(events, false)))
            .route("*", Script::always(Behaviour::echo())),
    );
    tokio::spawn(serve_upstream(listener, up));
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("ferroute.toml");
    let text = format!(
        "[server]\ndata_dir = \"{}\"\n[[providers]]\nid = \"up\"\nbase_url = \"http://{addr}/v1\"\nmodels = [\"m\"]\n[[connections]]\nid = \"k1\"\nprovider = \"up\"\napi_key = \"sk\"\n[[providers]]\nid = \"ant\"\nformat = \"anthropic\"\nbase_url = \"http://{addr}/v1\"\n[[connections]]\nid = \"a1\"\nprovider = \"ant\"\napi_key = \"sk\"\n",
        dir.path().join("data").display()
    );
    std::fs::write(&cfg, text).expect("config");
    let gw = Gateway::start(&cfg).await.expect("gateway");
    let before = gw.rss_kib().expect("rss");
    let mut peak = before;
    // Warm-up in the same shape as the run, so the allocator has reached its working set.
    streams(&gw.base, 50, 1, &mut peak, &gw).await;
    streams(&gw.base, 50, 50, &mut peak, &gw).await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let warm = gw.rss_kib().expect("rss");
    streams(&gw.base, 250, 1, &mut peak, &gw).await;
    streams(&gw.base, 250, 50, &mut peak, &gw).await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let after = gw.rss_kib().expect("rss");
    let per_stream = (after as f64 - warm as f64) * 1024.0 / 500.0;
    eprintln!(
        "heap: RSS before {before} KiB, warm {warm} KiB, peak {peak} KiB, after {after} KiB; {per_stream:.0} bytes per stream over 500 streams"
    );
    assert!(peak <= CEILING_KIB, "peak RSS {peak} KiB passes the ceiling {CEILING_KIB} KiB");
    assert!(
        (after as f64) <= warm as f64 * (1.0 + GROWTH_ALLOWED),
        "RSS after ({after} KiB) is not within 10 % of the warm baseline ({warm} KiB)"
    );
}
