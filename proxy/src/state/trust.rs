//! Which certificate authorities upstream TLS trusts (`[server] tls_roots`, `extra_ca`,
//! `SSL_CERT_FILE`), gathered once at start.

use crate::config::{ServerConfig, TlsRoots};
use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// The roots for `server`, with `ssl_cert_file` (the `SSL_CERT_FILE` variable) as one more
/// CA file, and what to tell the operator about them (the system store's unreadable entries).
/// An `extra_ca` file that cannot be read, or holds no certificate, is an error naming it.
pub fn roots(server: &ServerConfig, ssl_cert_file: Option<&str>) -> Result<(RootCertStore, Vec<String>), String> {
    let mut store = RootCertStore::empty();
    let mut notes = Vec::new();
    if matches!(server.tls_roots, TlsRoots::Bundled | TlsRoots::Both) {
        store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    }
    if matches!(server.tls_roots, TlsRoots::System | TlsRoots::Both) {
        let found = rustls_native_certs::load_native_certs();
        notes.extend(found.errors.iter().map(|e| format!("the system certificate store: {e}")));
        let (added, ignored) = store.add_parsable_certificates(found.certs);
        if ignored > 0 {
            notes.push(format!("{ignored} of the system's certificates do not parse and are not trusted"));
        }
        if added == 0 && server.tls_roots == TlsRoots::System {
            notes.push("the system certificate store holds no certificate: no upstream TLS will be trusted".into());
        }
    }
    if let Some(path) = &server.extra_ca {
        add_file(&mut store, path, "server.extra_ca")?;
    }
    if let Some(path) = ssl_cert_file.filter(|p| !p.trim().is_empty()) {
        add_file(&mut store, path, "SSL_CERT_FILE")?;
    }
    Ok((store, notes))
}

/// Adds every certificate of the PEM file at `path` (named `what` in errors).
fn add_file(store: &mut RootCertStore, path: &str, what: &str) -> Result<(), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{what}: cannot read {path}: {e}"))?;
    let mut added = 0;
    for cert in CertificateDer::pem_slice_iter(&bytes) {
        let cert = cert.map_err(|e| format!("{what}: {path} is not a PEM certificate file: {e}"))?;
        store
            .add(cert)
            .map_err(|e| format!("{what}: a certificate in {path} is not a CA certificate rustls can use: {e}"))?;
        added += 1;
    }
    if added == 0 {
        return Err(format!("{what}: {path} holds no certificate (a PEM file of CERTIFICATE blocks is expected)"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_roots_alone_and_a_bad_extra_ca_is_named() {
        let server = ServerConfig { tls_roots: TlsRoots::Bundled, ..ServerConfig::default() };
        let (store, notes) = roots(&server, None).expect("bundled");
        assert_eq!((store.len(), notes.len()), (webpki_roots::TLS_SERVER_ROOTS.len(), 0));
        let dir = tempfile::tempdir().expect("dir");
        let not_pem = dir.path().join("ca.pem");
        std::fs::write(&not_pem, "hello").expect("written");
        let server = ServerConfig { extra_ca: Some(not_pem.display().to_string()), ..server };
        let e = roots(&server, None).expect_err("no certificate");
        assert!(e.contains("server.extra_ca") && e.contains("holds no certificate"), "{e}");
        let e = roots(&ServerConfig { extra_ca: None, ..server }, Some("/no/such/ca.pem")).expect_err("missing");
        assert!(e.starts_with("SSL_CERT_FILE: cannot read /no/such/ca.pem"), "{e}");
    }
}
