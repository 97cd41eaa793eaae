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
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names).expect("leaf params");
        params.not_before = date_time_ymd(2020, 1, 1);
        params.not_after = date_time_ymd(until, 1, 1);
        let key = KeyPair::generate().expect("leaf key");
        let cert = params.signed_by(&key, &self.issuer).expect("signed");
        (cert.der().clone(), PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())))
    }
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
