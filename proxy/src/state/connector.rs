//! The production connector: TCP that leaves as each connection's [`Via`] says, and TLS to the
//! upstream over it (rustls on the ring provider, trusting what [`crate::state::trust`]
//! gathered). The provider is named explicitly: when another crate in the build enables
//! rustls's aws-lc-rs feature too, rustls cannot pick one by itself and would panic.

use crate::config::ServerConfig;
use crate::state::gateway::outbound::Egress;
use crate::state::outbound::{BoxError, Leg, Outbound, Via};
use http::Uri;
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::HttpConnector;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_service::Service;

/// HTTP and HTTPS to the upstreams, directly or through a proxy.
#[derive(Clone)]
pub struct Upstream {
    https: HttpsConnector<Outbound>,
    tls: Arc<rustls::ClientConfig>,
    http: HttpConnector,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream").finish_non_exhaustive()
    }
}

impl Upstream {
    /// Direct connections, trusting the roots `server` names.
    pub fn new(server: &ServerConfig) -> Result<Upstream, String> {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(std::time::Duration::from_secs(10)));
        let ssl_cert_file = std::env::var("SSL_CERT_FILE").ok();
        let (roots, notes) = crate::state::trust::roots(server, ssl_cert_file.as_deref())?;
        for note in notes {
            tracing::warn!("{note}");
        }
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS setup failed: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let tls = Arc::new(tls);
        Ok(Upstream { https: https(&tls, Outbound::new(http.clone(), Via::Direct)), tls, http })
    }
}

fn https(tls: &Arc<rustls::ClientConfig>, outbound: Outbound) -> HttpsConnector<Outbound> {
    hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config((**tls).clone())
        .https_or_http()
        .enable_http1()
        .wrap_connector(outbound)
}

impl Egress for Upstream {
    fn via(&self, via: &Via) -> Self {
        let outbound = Outbound::new(self.http.clone(), via.clone());
        Upstream { https: https(&self.tls, outbound), tls: Arc::clone(&self.tls), http: self.http.clone() }
    }
}

impl Service<Uri> for Upstream {
    type Response = MaybeHttpsStream<Leg>;
    type Error = BoxError;
    type Future = <HttpsConnector<Outbound> as Service<Uri>>::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.https.poll_ready(cx)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        self.https.call(dst)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_connector_builds_whatever_rustls_features_are_unified() {
        assert!(super::Upstream::new(&crate::config::ServerConfig::default()).is_ok());
    }
}
