//! `[server] tls = { cert, key }`: Ferroute serving HTTPS itself (a small team on its LAN, no
//! reverse proxy in front). The files are read at start, by `check-config`, and again on every
//! reload (SIGHUP), so a renewed certificate is served without a restart.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// `[server] tls`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeTls {
    /// The certificate chain, PEM: the server's certificate first, then its intermediates.
    pub cert: String,
    /// Its private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key: String,
}

/// The rustls server config of `tls` (HTTP/1.1 by ALPN), or what is wrong with its files.
pub fn server_config(tls: &ServeTls) -> Result<Arc<rustls::ServerConfig>, String> {
    let certs = std::fs::read(&tls.cert).map_err(|e| format!("cannot read the certificate {}: {e}", tls.cert))?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&certs)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{} is not a PEM certificate chain: {e}", tls.cert))?;
    if certs.is_empty() {
        return Err(format!("{} holds no certificate", tls.cert));
    }
    let key = std::fs::read(&tls.key).map_err(|e| format!("cannot read the key {}: {e}", tls.key))?;
    let key = PrivateKeyDer::from_pem_slice(&key).map_err(|e| format!("{} holds no PEM private key: {e}", tls.key))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("{} and {} do not make a server identity: {e}", tls.cert, tls.key))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_and_malformed_files_are_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cert = dir.path().join("cert.pem");
        let key = dir.path().join("key.pem");
        let tls = |c: &std::path::Path, k: &std::path::Path| ServeTls {
            cert: c.display().to_string(),
            key: k.display().to_string(),
        };
        let e = server_config(&tls(&cert, &key)).expect_err("missing");
        assert!(e.starts_with("cannot read the certificate") && e.contains("cert.pem"), "{e}");
        std::fs::write(&cert, "not pem").expect("write");
        assert!(server_config(&tls(&cert, &key)).expect_err("empty").contains("holds no certificate"));
        let k = rcgen::KeyPair::generate().expect("key");
        let c =
            rcgen::CertificateParams::new(vec!["localhost".to_owned()]).expect("params").self_signed(&k).expect("cert");
        std::fs::write(&cert, c.pem()).expect("write");
        let e = server_config(&tls(&cert, &key)).expect_err("no key");
        assert!(e.starts_with("cannot read the key"), "{e}");
        std::fs::write(&key, "junk").expect("write");
        assert!(server_config(&tls(&cert, &key)).expect_err("junk").contains("holds no PEM private key"));
        let other = rcgen::KeyPair::generate().expect("key");
        std::fs::write(&key, other.serialize_pem()).expect("write");
        assert!(server_config(&tls(&cert, &key)).expect_err("mismatch").contains("do not make a server identity"));
        std::fs::write(&key, k.serialize_pem()).expect("write");
        let ok = server_config(&tls(&cert, &key)).expect("serves");
        assert_eq!(ok.alpn_protocols, vec![b"http/1.1".to_vec()]);
    }
}
