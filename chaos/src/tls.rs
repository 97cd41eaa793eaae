//! Real TLS on loopback for the tests: a private CA and server certificates made with rcgen,
//! and a scripted upstream served over rustls (or one that hangs up mid-handshake).

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, date_time_ymd};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use scenarios::net::Listener;
use scenarios::{ScriptedUpstream, serve_upstream};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio_rustls::TlsAcceptor;

/// A server certificate and its key.
pub type Leaf = (CertificateDer<'static>, PrivateKeyDer<'static>);

/// A private certificate authority.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    /// A new CA named `name`.
    pub fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().expect("CA key");
        Ca { issuer: CertifiedIssuer::self_signed(params, key).expect("CA") }
    }

    /// The CA's certificate in PEM (what `extra_ca` names).
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A server certificate for `names` (host names or IP addresses), valid from 2020 until
    /// the start of year `until`.
    pub fn leaf(&self, names: &[&str], until: i32) -> Leaf {
        let (cert, key) = self.signed(names, until);
        (cert.der().clone(), PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())))
    }

    fn signed(&self, names: &[&str], until: i32) -> (rcgen::Certificate, KeyPair) {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names).expect("leaf params");
        params.not_before = date_time_ymd(2020, 1, 1);
        params.not_after = date_time_ymd(until, 1, 1);
        let key = KeyPair::generate().expect("leaf key");
        let cert = params.signed_by(&key, &self.issuer).expect("signed");
        (cert, key)
    }

    /// The same as PEM files in `dir` (`cert.pem`, `key.pem`, what `[server] tls` names), with
    /// the certificate's DER to compare with what a client was shown.
    pub fn leaf_files(&self, names: &[&str], until: i32, dir: &std::path::Path) -> (String, String, Vec<u8>) {
        let (cert, key) = self.signed(names, until);
        let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
        std::fs::write(&cert_path, cert.pem()).expect("cert.pem");
        std::fs::write(&key_path, key.serialize_pem()).expect("key.pem");
        (cert_path.display().to_string(), key_path.display().to_string(), cert.der().to_vec())
    }
}

/// A TLS client that trusts exactly the CA of `ca_pem`.
pub fn client_trusting(ca_pem: &str) -> tokio_rustls::TlsConnector {
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.expect("CA PEM")).expect("CA root");
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// What one HTTPS request got: the status, the body, and the certificate the server showed.
#[derive(Debug)]
pub struct HttpsAnswer {
    /// Status code.
    pub status: u16,
    /// Body (as text; `connection: close` framing).
    pub body: String,
    /// The server's certificate (DER).
    pub cert: Vec<u8>,
}

/// `method path` with `body` (JSON, when not empty) to `addr` over TLS as `host`, on a new
/// connection; `Err` with the handshake's or the connection's error.
pub async fn https_request(
    client: &tokio_rustls::TlsConnector,
    addr: SocketAddr,
    host: &str,
    (method, path, body): (&str, &str, &str),
) -> io::Result<HttpsAnswer> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = rustls::pki_types::ServerName::try_from(host.to_owned()).map_err(io::Error::other)?;
    let mut tls = client.connect(name, tcp).await?;
    let cert = tls.get_ref().1.peer_certificates().and_then(|c| c.first()).map(|c| c.to_vec()).unwrap_or_default();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    tls.write_all(head.as_bytes()).await?;
    tls.write_all(body.as_bytes()).await?;
    let mut raw = Vec::new();
    // A server that closes without close_notify still gave what it sent.
    if let Err(e) = tls.read_to_end(&mut raw).await
        && raw.is_empty()
    {
        return Err(e);
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or(String::new(), |(_, b)| b.to_owned());
    Ok(HttpsAnswer { status, body, cert })
}

/// A TCP listener that does the server's TLS handshake (or, with no acceptor, hangs up as soon
/// as the client has sent its hello).
pub struct TlsListener {
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

/// `script` served over TLS with `leaf` on a free loopback port (or hanging up mid-handshake
/// without one), until the runtime ends.
pub async fn tls_upstream(leaf: Option<Leaf>, script: Arc<ScriptedUpstream>) -> SocketAddr {
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
    tokio::spawn(serve_upstream(TlsListener { tcp, acceptor }, script));
    addr
}
