//! Upstream TLS for real: a private CA and certificates made with rcgen, a scripted upstream
//! served over rustls on loopback, and the gateway's production connector
//! (`proxy::https_connector`). A trusted certificate serves; an unknown CA, a certificate for
//! another host, an expired one, and a server that hangs up mid-handshake are each a transport
//! failure naming the reason, and the combo falls back to a plain upstream; `extra_ca` makes the
//! private CA trusted.

mod common;

use common::{Reply, send, upstream};
use hyper_util::client::legacy::connect::HttpConnector;
use proxy::config::{Config, ServerConfig, TlsRoots};
use proxy::{Persistence, build, https_connector};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, date_time_ymd};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use scenarios::net::Listener;
use scenarios::{Behaviour, Script, ScriptedUpstream, serve_upstream};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio_rustls::TlsAcceptor;

/// A private CA.
struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().expect("key");
        Ca { issuer: CertifiedIssuer::self_signed(params, key).expect("CA") }
    }

    /// A server certificate for `names`, valid until `until` (year).
    fn leaf(&self, names: &[&str], until: i32) -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
        let mut params =
            CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>()).expect("params");
        params.not_before = date_time_ymd(2020, 1, 1);
        params.not_after = date_time_ymd(until, 1, 1);
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("signed");
        (cert.der().clone(), PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())))
    }
}

/// A TCP listener that does the server's TLS handshake (or, with no acceptor, hangs up as soon
/// as the client has sent its hello).
struct TlsListener {
    tcp: tokio::net::TcpListener,
    acceptor: Option<TlsAcceptor>,
}

impl Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;

    async fn accept(&mut self) -> io::Result<(Self::Io, SocketAddr)> {
        let (mut s, peer) = self.tcp.accept().await?;
        let Some(acceptor) = &self.acceptor else {
            use tokio::io::AsyncReadExt as _;
            let mut hello = [0u8; 64];
            let _ = s.read(&mut hello).await;
            drop(s);
            return Err(io::Error::other("hung up mid-handshake on purpose"));
        };
        Ok((acceptor.accept(s).await?, peer))
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp.local_addr()
    }
}

/// An echoing upstream served over TLS with `leaf` (or hanging up mid-handshake).
async fn tls_upstream(leaf: Option<(CertificateDer<'static>, PrivateKeyDer<'static>)>) -> SocketAddr {
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = tcp.local_addr().expect("addr");
    let acceptor = leaf.map(|(cert, key)| {
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .expect("server config");
        TlsAcceptor::from(Arc::new(config))
    });
    let script = Arc::new(ScriptedUpstream::new().route("m", Script::always(Behaviour::echo())));
    tokio::spawn(serve_upstream(TlsListener { tcp, acceptor }, script));
    addr
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
    let config = Config::from_toml_str(&text, &|_| None, &[]).unwrap_or_else(|e| panic!("{e}"));
    let connector = https_connector(&server).expect("connector");
    let gw =
        build(config, connector, Persistence::Memory, scenarios::upstream::DEFAULT_WALL_START_MS, 7).expect("gateway");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind gateway");
    let addr = listener.local_addr().expect("addr");
    let g = Arc::clone(&gw);
    tokio::spawn(async move { proxy::edge::serve::serve_gateway(g, listener, std::future::pending()).await });
    (addr, gw)
}

async fn chat(addr: SocketAddr) -> Reply {
    let body = serde_json::json!({"model": "team", "messages": [{"role": "user", "content": "over tls"}]});
    send(
        "POST",
        &format!("http://{addr}/v1/chat/completions"),
        &[("content-type", "application/json")],
        &body.to_string(),
    )
    .await
}

type Https = proxy::state::gateway::Gateway<hyper_rustls::HttpsConnector<HttpConnector>>;

/// The TLS connection's last error, as the dashboard shows it.
fn last_error(gw: &Https) -> String {
    gw.history.last_error("t1").map(|e| format!("{} {}", e.status, e.message)).unwrap_or_default()
}

fn with_ca(ca: &Ca, dir: &std::path::Path) -> ServerConfig {
    let path = dir.join("private-ca.pem");
    std::fs::write(&path, ca.issuer.pem()).expect("CA file");
    ServerConfig { tls_roots: TlsRoots::Bundled, extra_ca: Some(path.display().to_string()), ..ServerConfig::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_of_the_extra_ca_serves_and_each_bad_one_is_a_named_transport_failure_that_falls_back() {
    let plain = upstream(ScriptedUpstream::new().route("m", Script::always(Behaviour::echo()))).await;
    let dir = tempfile::tempdir().expect("dir");
    let ca = Ca::new("Ferroute private test CA");
    let trusting = with_ca(&ca, dir.path());

    // Trusted through extra_ca: served by the TLS upstream itself.
    let good = tls_upstream(Some(ca.leaf(&["localhost", "127.0.0.1"], 4000))).await;
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
    let other = tls_upstream(Some(ca.leaf(&["upstream.example"], 4000))).await;
    let (gw, g) = gateway(trusting.clone(), "localhost", other.port(), plain.addr).await;
    let r = chat(gw).await;
    assert_eq!(r.header("x-ferroute-selected-connection-id"), Some("p1"), "{r:?}");
    let said = last_error(&g);
    assert!(said.contains("not valid for name \"localhost\""), "{said}");

    // An expired certificate.
    let expired = tls_upstream(Some(ca.leaf(&["localhost"], 2021))).await;
    let (gw, g) = gateway(trusting.clone(), "localhost", expired.port(), plain.addr).await;
    let r = chat(gw).await;
    assert_eq!(r.header("x-ferroute-selected-connection-id"), Some("p1"), "{r:?}");
    let said = last_error(&g);
    assert!(said.contains("expired"), "{said}");

    // A server that hangs up after the client's hello.
    let rude = tls_upstream(None).await;
    let (gw, g) = gateway(trusting, "localhost", rude.port(), plain.addr).await;
    let r = chat(gw).await;
    assert_eq!(r.header("x-ferroute-selected-connection-id"), Some("p1"), "{r:?}");
    let said = last_error(&g);
    assert!(said.contains("tls is unreachable"), "{said}");
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
