//! Upstream TLS for real: a private CA and certificates made with rcgen, a scripted upstream
//! served over rustls on loopback, and the gateway's production connector
//! (`proxy::https_connector`). A trusted certificate serves; an unknown CA, a certificate for
//! another host, an expired one, and a server that hangs up mid-handshake are each a transport
//! failure naming the reason, and the combo falls back to a plain upstream; `extra_ca` makes the
//! private CA trusted.

mod common;

use chaos::tls::Ca;
use common::{Reply, start_production, team_chat, upstream};
use proxy::config::{Config, ServerConfig, TlsRoots};
use proxy::https_connector;
use scenarios::{Behaviour, Script, ScriptedUpstream};
use std::net::SocketAddr;
use std::sync::Arc;

/// An echoing upstream served over TLS with `leaf` (or hanging up mid-handshake).
async fn tls_echo(leaf: Option<chaos::tls::Leaf>) -> SocketAddr {
    chaos::tls::tls_upstream(leaf, Arc::new(ScriptedUpstream::new().route("m", Script::always(Behaviour::echo()))))
        .await
}

/// A gateway on the production connector: provider `tls` at `https://{host}:{port}` first, a
/// plain upstream second, in combo `team`.
async fn gateway(server: ServerConfig, host: &str, port: u16, plain: SocketAddr) -> (SocketAddr, Arc<Https>) {
    let text = format!(
        "[[providers]]\nid = \"tls\"\nbase_url = \"https://{host}:{port}/v1\"\nmodels = [\"m\"]\n\
         [[connections]]\nid = \"t1\"\nprovider = \"tls\"\napi_key = \"sk-t\"\n\
         [[providers]]\nid = \"plain\"\nbase_url = \"http://{plain}/v1\"\nmodels = [\"m\"]\n\
         [[connections]]\nid = \"p1\"\nprovider = \"plain\"\napi_key = \"sk-p\"\n\
         [[combos]]\nname = \"team\"\ntargets = [\"tls/m\", \"plain/m\"]\n"
    );
    let mut config = Config::from_toml_str(&text, &|_| None, &[]).unwrap_or_else(|e| panic!("{e}"));
    config.server = server;
    start_production(config).await
}

async fn chat(addr: SocketAddr) -> Reply {
    team_chat(addr, "over tls").await
}

type Https = common::Production;

/// The TLS connection's last error, as the dashboard shows it.
fn last_error(gw: &Https) -> String {
    gw.history.last_error("t1").map(|e| format!("{} {}", e.status, e.message)).unwrap_or_default()
}

fn with_ca(ca: &Ca, dir: &std::path::Path) -> ServerConfig {
    let path = dir.join("private-ca.pem");
    std::fs::write(&path, ca.pem()).expect("CA file");
    ServerConfig { tls_roots: TlsRoots::Bundled, extra_ca: Some(path.display().to_string()), ..ServerConfig::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_of_the_extra_ca_serves_and_each_bad_one_is_a_named_transport_failure_that_falls_back() {
    let plain = upstream(ScriptedUpstream::new().route("m", Script::always(Behaviour::echo()))).await;
    let dir = tempfile::tempdir().expect("dir");
    let ca = Ca::new("Ferroute private test CA");
    let trusting = with_ca(&ca, dir.path());

    // Trusted through extra_ca: served by the TLS upstream itself.
    let good = tls_echo(Some(ca.leaf(&["localhost", "127.0.0.1"], 4000))).await;
    let (gw, _g) = gateway(trusting.clone(), "localhost", good.port(), plain.addr).await;
    let r = chat(gw).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-ferroute-selected-connection-id"), Some("t1"), "{r:?}");

    // The same certificate without the private CA: an unknown issuer.
    let bundled = ServerConfig { tls_roots: TlsRoots::Bundled, ..ServerConfig::default() };
    let (gw, g) = gateway(bundled, "localhost", good.port(), plain.addr).await;
    let r = chat(gw).await;
    assert_eq!((r.status, r.header("x-ferroute-selected-connection-id")), (200, Some("p1")), "fell back: {r:?}");
    let said = last_error(&g);
    assert!(said.contains("UnknownIssuer"), "the reason is named: {said}");

    // A certificate for another host.
    let other = tls_echo(Some(ca.leaf(&["upstream.example"], 4000))).await;
    let (gw, g) = gateway(trusting.clone(), "localhost", other.port(), plain.addr).await;
    let r = chat(gw).await;
    assert_eq!(r.header("x-ferroute-selected-connection-id"), Some("p1"), "{r:?}");
    let said = last_error(&g);
    assert!(said.contains("not valid for name \"localhost\""), "{said}");

    // An expired certificate.
    let expired = tls_echo(Some(ca.leaf(&["localhost"], 2021))).await;
    let (gw, g) = gateway(trusting.clone(), "localhost", expired.port(), plain.addr).await;
    let r = chat(gw).await;
    assert_eq!(r.header("x-ferroute-selected-connection-id"), Some("p1"), "{r:?}");
    let said = last_error(&g);
    assert!(said.contains("expired"), "{said}");

    // A server that hangs up after the client's hello.
    let rude = tls_echo(None).await;
    let (gw, g) = gateway(trusting, "localhost", rude.port(), plain.addr).await;
    let r = chat(gw).await;
    assert_eq!(r.header("x-ferroute-selected-connection-id"), Some("p1"), "{r:?}");
    let said = last_error(&g);
    assert!(said.contains("tls is unreachable") && said.contains("Connection reset by peer"), "{said}");
}

#[test]
fn an_extra_ca_that_is_not_a_certificate_stops_the_start_naming_the_file() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("ca.pem");
    std::fs::write(&path, "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n").expect("file");
    let server = ServerConfig { extra_ca: Some(path.display().to_string()), ..ServerConfig::default() };
    let e = https_connector(&server).expect_err("refused").to_string();
    assert!(e.contains("server.extra_ca") && e.contains("holds no certificate"), "{e}");
    // The system's store and the bundled roots together (the default) build.
    assert!(https_connector(&ServerConfig::default()).is_ok());
}
