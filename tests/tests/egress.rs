//! Egress proxies for real, over loopback: an HTTPS upstream (a private CA's certificate) reached
//! through an HTTP proxy's `CONNECT` tunnel and through a SOCKS5 proxy, each demanding
//! credentials (`chaos::proxies`), and through real tinyproxy and Dante processes
//! (`chaos::proxy_processes`), with the gateway's production connector. The proxy carries
//! the request (it says which destination it opened), health shows the proxy without its
//! password, a connection's own `proxy` wins over its provider's, and a proxy that refuses is a
//! failure of that connection (it cools; the provider's breaker is not told) the combo falls
//! back from.

mod common;

use chaos::proxies::{Proxy, http_connect, socks5};
use chaos::tls::Ca;
use common::{Production, Reply, send, start_production, team_chat, upstream};
use proxy::config::Config;
use scenarios::{Behaviour, Script, ScriptedUpstream};
use std::net::SocketAddr;
use std::sync::Arc;

/// A gateway on the production connector trusting `ca`, with `providers` (TOML) and a plain
/// fallback provider; combo `team` tries `tls/m`, then `plain/m`.
async fn gateway(dir: &std::path::Path, ca: &Ca, providers: &str, plain: SocketAddr) -> (SocketAddr, Arc<Production>) {
    let ca_path = dir.join("ca.pem");
    std::fs::write(&ca_path, ca.pem()).expect("CA file");
    let text = format!(
        "[server]\nproxy_from_env = false\nextra_ca = \"{}\"\n{providers}\
         [[providers]]\nid = \"plain\"\nbase_url = \"http://{plain}/v1\"\nmodels = [\"m\"]\n\
         [[connections]]\nid = \"p1\"\nprovider = \"plain\"\napi_key = \"sk-p\"\n\
         [[combos]]\nname = \"team\"\ntargets = [\"tls/m\", \"plain/m\"]\n",
        ca_path.display()
    );
    start_production(Config::from_toml_str(&text, &|_| None, &[]).unwrap_or_else(|e| panic!("{e}"))).await
}

fn tls_provider(port: u16, provider_proxy: &str, connection_proxy: Option<&str>) -> String {
    let own = connection_proxy.map(|p| format!("proxy = \"{p}\"\n")).unwrap_or_default();
    format!(
        "[[providers]]\nid = \"tls\"\nbase_url = \"https://localhost:{port}/v1\"\nmodels = [\"m\"]\nproxy = \"{provider_proxy}\"\n\
         [[connections]]\nid = \"t1\"\nprovider = \"tls\"\napi_key = \"sk-t\"\n{own}"
    )
}

async fn chat(addr: SocketAddr) -> Reply {
    team_chat(addr, "through the proxy").await
}

async fn health_of(addr: SocketAddr) -> serde_json::Value {
    send("GET", &format!("http://{addr}/api/monitoring/health"), &[], "").await.json()
}

struct World {
    ca: Ca,
    tls: SocketAddr,
    plain: common::Upstream,
    dir: tempfile::TempDir,
}

async fn world() -> World {
    let ca = Ca::new("Ferroute egress test CA");
    let script = Arc::new(ScriptedUpstream::new().route("m", Script::always(Behaviour::echo())));
    let tls = chaos::tls::tls_upstream(Some(ca.leaf(&["localhost"], 4000)), script).await;
    let plain = upstream(ScriptedUpstream::new().route("m", Script::always(Behaviour::echo()))).await;
    World { ca, tls, plain, dir: tempfile::tempdir().expect("dir") }
}

fn served_by(r: &Reply) -> Option<&str> {
    r.header("x-ferroute-selected-connection-id")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_through_an_http_connect_proxy_with_credentials() {
    let w = world().await;
    let proxy: Proxy = http_connect(Some(("team", "s3cret"))).await;
    let url = format!("http://team:s3cret@{}", proxy.addr);
    let (gw, g) = gateway(w.dir.path(), &w.ca, &tls_provider(w.tls.port(), &url, None), w.plain.addr).await;
    let r = chat(gw).await;
    let why = g.history.last_error("t1").map(|e| e.message).unwrap_or_default();
    assert_eq!((r.status, served_by(&r)), (200, Some("t1")), "{} {why}", r.body);
    assert_eq!(proxy.carried(), vec![format!("localhost:{}", w.tls.port())], "the request went through the proxy");
    let h = health_of(gw).await.to_string();
    assert!(h.contains(&format!("http://team:***@{}", proxy.addr)) && !h.contains("s3cret"), "{h}");

    // The wrong password: the proxy answers 407, a transport failure that falls back.
    let wrong = format!("http://team:nope@{}", proxy.addr);
    let (gw, g2) = gateway(w.dir.path(), &w.ca, &tls_provider(w.tls.port(), &wrong, None), w.plain.addr).await;
    let r = chat(gw).await;
    assert_eq!((r.status, served_by(&r)), (200, Some("p1")), "{}", r.body);
    let said = g2.history.last_error("t1").map(|e| e.message).unwrap_or_default();
    assert!(said.contains("did not open a tunnel") && said.contains("proxy authorization required"), "{said}");
    assert!(!said.contains("nope"), "no password in the error: {said}");
    // The connection's own way out failed, not the provider: the connection cools (M3), the
    // provider's breaker is not told.
    let h = health_of(gw).await;
    let t1 = h["connections"].as_array().and_then(|a| a.iter().find(|c| c["id"] == "t1")).cloned().unwrap_or_default();
    let tls = h["providers"].as_array().and_then(|a| a.iter().find(|p| p["id"] == "tls")).cloned().unwrap_or_default();
    assert_eq!((t1["status"].as_str(), t1["backoff_level"].as_u64()), (Some("unavailable"), Some(1)), "{t1}");
    assert_eq!((tls["state"].as_str(), tls["failures"].as_u64()), (Some("CLOSED"), Some(0)), "{tls}");
    drop(g);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_through_a_socks5_proxy_and_a_connections_own_proxy_wins() {
    let w = world().await;
    let socks = socks5(Some(("agent", "pa55"))).await;
    // The provider's proxy does not answer; the connection's own SOCKS5 proxy (socks5h: the
    // proxy resolves `localhost`) carries the request.
    let own = format!("socks5h://agent:pa55@{}", socks.addr);
    let text = tls_provider(w.tls.port(), "http://127.0.0.1:1", Some(&own));
    let (gw, _g) = gateway(w.dir.path(), &w.ca, &text, w.plain.addr).await;
    let r = chat(gw).await;
    assert_eq!((r.status, served_by(&r)), (200, Some("t1")), "{}", r.body);
    assert_eq!(socks.carried(), vec![format!("localhost:{}", w.tls.port())]);
    let h = health_of(gw).await.to_string();
    assert!(h.contains(&format!("socks5h://agent:***@{}", socks.addr)) && !h.contains("pa55"), "{h}");

    // `proxy = "none"` on the connection goes direct whatever the provider says.
    let text = tls_provider(w.tls.port(), &own, Some("none"));
    let (gw, _g) = gateway(w.dir.path(), &w.ca, &text, w.plain.addr).await;
    let r = chat(gw).await;
    assert_eq!((r.status, served_by(&r)), (200, Some("t1")), "{}", r.body);
    assert_eq!(socks.carried().len(), 1, "not through the proxy");
}

#[test]
fn a_proxy_setting_that_cannot_work_is_refused_at_load_naming_the_field() {
    let text = "[[providers]]\nid = \"a\"\nbase_url = \"https://x.example/v1\"\nproxy = \"https://p.example:3128\"\n\
                [[connections]]\nid = \"k\"\nprovider = \"a\"\napi_key = \"sk\"\nproxy = \"ftp://u:hunter2@p:1\"\n";
    let e = Config::from_toml_str(text, &|_| None, &[]).expect_err("refused").to_string();
    assert!(e.contains("providers[0].proxy") && e.contains("not supported"), "{e}");
    assert!(e.contains("connections[0].proxy") && e.contains("unknown proxy scheme"), "{e}");
    assert!(!e.contains("hunter2"), "{e}");
}

/// M13 with proxies: connections that leave through the same proxy share its address, so a
/// 429 on one cools its siblings through that proxy, and not a sibling that goes direct.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_through_one_proxy_share_an_egress_bucket() {
    let limited = Behaviour::status_with(
        429,
        &[("retry-after", "30")],
        r#"{"error":{"message":"Rate limit reached for requests"}}"#,
    );
    let up = upstream(
        ScriptedUpstream::new().route("m#sk-1", Script::always(limited)).route("m", Script::always(Behaviour::echo())),
    )
    .await;
    let socks = socks5(None).await;
    let via = format!("socks5://{}", socks.addr);
    let text = format!(
        "[server]\nproxy_from_env = false\n[[providers]]\nid = \"free\"\nbase_url = \"http://{}/v1\"\nmodels = [\"m\"]\negress_ip_lock = true\n\
         [[connections]]\nid = \"k1\"\nprovider = \"free\"\napi_key = \"sk-1\"\nproxy = \"{via}\"\n\
         [[connections]]\nid = \"k2\"\nprovider = \"free\"\napi_key = \"sk-2\"\nproxy = \"{via}\"\n\
         [[connections]]\nid = \"k3\"\nprovider = \"free\"\napi_key = \"sk-3\"\nproxy = \"none\"\n",
        up.addr
    );
    let (gw, _g) =
        start_production(Config::from_toml_str(&text, &|_| None, &[]).unwrap_or_else(|e| panic!("{e}"))).await;
    let body = serde_json::json!({"model": "free/m", "messages": [{"role": "user", "content": "hi"}]});
    let r = send(
        "POST",
        &format!("http://{gw}/v1/chat/completions"),
        &[("content-type", "application/json")],
        &body.to_string(),
    )
    .await;
    assert_eq!((r.status, served_by(&r)), (200, Some("k3")), "k1 limited, k2 shares its proxy, k3 serves: {}", r.body);
    let h = health_of(gw).await;
    let status = |id: &str| {
        h["connections"].as_array().and_then(|a| a.iter().find(|c| c["id"] == id)).map(|c| c["status"].to_string())
    };
    assert_eq!(
        (status("k1"), status("k2"), status("k3")),
        (Some("\"unavailable\"".into()), Some("\"unavailable\"".into()), Some("\"active\"".into()))
    );
    assert_eq!(socks.carried().len(), 1, "only k1's request went through the proxy");
}

/// The same through real proxy processes: tinyproxy with Basic credentials, and Dante's SOCKS5
/// server (socks5h: Dante resolves `localhost`). Their own logs show the tunnels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_through_real_tinyproxy_and_dante() {
    if chaos::proxy_processes::available().is_none() {
        return;
    }
    let w = world().await;
    let tiny = chaos::proxy_processes::tinyproxy("team", "s3cret").await;
    let url = format!("http://team:s3cret@127.0.0.1:{}", tiny.port);
    let (gw, _g) = gateway(w.dir.path(), &w.ca, &tls_provider(w.tls.port(), &url, None), w.plain.addr).await;
    let r = chat(gw).await;
    assert_eq!((r.status, served_by(&r)), (200, Some("t1")), "{}", r.body);
    let log = tiny.log();
    assert!(log.contains(&format!("CONNECT localhost:{}", w.tls.port())), "tinyproxy's log: {log}");

    let dante = chaos::proxy_processes::danted().await;
    let url = format!("socks5h://127.0.0.1:{}", dante.port);
    let (gw, _g) = gateway(w.dir.path(), &w.ca, &tls_provider(w.tls.port(), &url, None), w.plain.addr).await;
    let r = chat(gw).await;
    assert_eq!((r.status, served_by(&r)), (200, Some("t1")), "{}", r.body);
    let log = dante.log();
    assert!(
        log.contains(&format!(".{}", w.tls.port())) || log.contains(&format!(":{}", w.tls.port())),
        "Dante's log: {log}"
    );
}

/// A plain `http` upstream behind an HTTP proxy is reached without a tunnel, as HTTP proxies
/// expect (tinyproxy, like most, refuses `CONNECT` to ports other than 443): each request goes
/// to the real tinyproxy in absolute form with its credentials in `Proxy-Authorization`, which
/// the proxy takes off before the upstream sees the request. Wrong credentials are the
/// connection's failure, never the provider's, and the combo falls back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_through_real_tinyproxy_in_absolute_form_with_credentials() {
    if chaos::proxy_processes::available().is_none() {
        return;
    }
    let w = world().await;
    let lan = upstream(ScriptedUpstream::new().route("m", Script::always(Behaviour::echo()))).await;
    let tiny = chaos::proxy_processes::tinyproxy("team", "s3cret").await;
    // Provider `tls` of the combo, here a plain http upstream.
    let provider = |proxy: &str| {
        format!(
            "[[providers]]\nid = \"tls\"\nbase_url = \"http://{}/v1\"\nmodels = [\"m\"]\nproxy = \"{proxy}\"\n\
             [[connections]]\nid = \"t1\"\nprovider = \"tls\"\napi_key = \"sk-t\"\n",
            lan.addr
        )
    };
    let good = format!("http://team:s3cret@127.0.0.1:{}", tiny.port);
    let (gw, g) = gateway(w.dir.path(), &w.ca, &provider(&good), w.plain.addr).await;
    let r = chat(gw).await;
    let why = g.history.last_error("t1").map(|e| e.message).unwrap_or_default();
    assert_eq!((r.status, served_by(&r)), (200, Some("t1")), "{} {why}", r.body);
    let log = tiny.log();
    assert!(log.contains(&format!("): POST http://{}/v1/chat/completions HTTP/1.1", lan.addr)), "{log}");
    assert!(!log.contains("): CONNECT "), "no tunnel for a plain upstream: {log}");
    let seen = lan.script.requests();
    assert_eq!(seen.len(), 1);
    assert!(
        !seen[0].headers.contains_key("proxy-authorization"),
        "the proxy takes its credentials off: {:?}",
        seen[0].headers
    );
    assert_eq!(seen[0].headers.get("authorization").map(String::as_str), Some("Bearer sk-t"));

    // tinyproxy answers wrong credentials on a plain request with 401 (not 407): the
    // connection's authentication failure, never the provider's; the combo falls back.
    let wrong = format!("http://team:nope@127.0.0.1:{}", tiny.port);
    let (gw, g2) = gateway(w.dir.path(), &w.ca, &provider(&wrong), w.plain.addr).await;
    let r = chat(gw).await;
    assert_eq!((r.status, served_by(&r)), (200, Some("p1")), "{}", r.body);
    let h = health_of(gw).await;
    let tls = h["providers"].as_array().and_then(|a| a.iter().find(|p| p["id"] == "tls")).cloned().unwrap_or_default();
    assert_eq!((tls["state"].as_str(), tls["failures"].as_u64()), (Some("CLOSED"), Some(0)), "{tls}");
    assert_eq!(lan.script.requests().len(), 1, "the upstream saw nothing of the refused request");
    drop(g2);

    // A proxy that answers 407 (as Squid does): the connection's egress failure, named.
    let strict = http_connect(Some(("team", "s3cret"))).await;
    let (gw, g3) =
        gateway(w.dir.path(), &w.ca, &provider(&format!("http://team:nope@{}", strict.addr)), w.plain.addr).await;
    let r = chat(gw).await;
    assert_eq!((r.status, served_by(&r)), (200, Some("p1")), "{}", r.body);
    let said = g3.history.last_error("t1").map(|e| e.message).unwrap_or_default();
    assert!(said.contains("refused the credentials (407)") && !said.contains("nope"), "{said}");
    let h = health_of(gw).await;
    let tls = h["providers"].as_array().and_then(|a| a.iter().find(|p| p["id"] == "tls")).cloned().unwrap_or_default();
    assert_eq!((tls["state"].as_str(), tls["failures"].as_u64()), (Some("CLOSED"), Some(0)), "{tls}");
    drop(g);
}
