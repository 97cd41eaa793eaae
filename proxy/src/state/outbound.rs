//! How a connection's upstream requests leave: directly, through an HTTP proxy (a `CONNECT`
//! tunnel, TLS to the upstream inside it) or a SOCKS5 proxy, as the connection's or its
//! provider's `proxy` says, else as `HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY` and `NO_PROXY`
//! say (`[server] proxy_from_env`). The tunnels are hyper-util's own (`Tunnel`, `SocksV5`). A
//! plain `http` upstream behind an HTTP proxy is reached without a tunnel: its requests go to
//! the proxy in absolute form, with the proxy's credentials in `Proxy-Authorization`.

use crate::config::Config;
pub use crate::config::proxy::{Via, mask};
use http::Uri;
use hyper_util::client::legacy::connect::proxy::{SocksV5, Tunnel};
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tower_service::Service;

/// The error of a connection attempt.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A connection's own egress proxy refused or could not be reached: the connection's failure,
/// not its provider's (the request path finds it in the error's causes).
#[derive(Debug)]
pub struct EgressError(pub String);

impl std::fmt::Display for EgressError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for EgressError {}

/// Whether `e`, or one of its causes, is an [`EgressError`].
pub fn is_egress(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut at = Some(e);
    while let Some(x) = at {
        if x.is::<EgressError>() {
            return true;
        }
        at = x.source();
    }
    false
}

impl Via {
    /// A plain `http` upstream behind an HTTP proxy is asked through the proxy in absolute form
    /// rather than inside a tunnel, so each request carries the proxy's credentials itself.
    /// `None` when a request to `dst` goes straight to it or inside a tunnel; else the HTTP
    /// proxy it goes to in absolute form (as health shows it) and the credentials it carries.
    pub fn absolute_form(&self, dst: &Uri) -> Option<(String, Option<http::HeaderValue>)> {
        if dst.scheme_str() != Some("http") {
            return None;
        }
        match self.resolve(dst) {
            Via::Http { auth, shown, .. } => Some((shown, auth)),
            _ => None,
        }
    }

    /// What `dst` goes through: `Env` resolved for it.
    fn resolve(&self, dst: &Uri) -> Via {
        let Via::Env(m) = self else { return self.clone() };
        let Some(i) = m.intercept(dst) else { return Via::Direct };
        let shown = mask(&i.uri().to_string());
        let bare = || i.uri().clone();
        match i.uri().scheme_str() {
            Some(s @ ("socks5" | "socks5h")) => Via::Socks {
                proxy: bare(),
                auth: i.raw_auth().map(|(u, p)| (u.to_owned(), p.to_owned())),
                remote_dns: s == "socks5h",
                shown,
            },
            _ => Via::Http { proxy: bare(), auth: i.basic_auth().cloned(), shown },
        }
    }
}

/// A TCP connector that leaves as its [`Via`] says; TLS to the upstream is laid over it.
#[derive(Clone)]
pub struct Outbound {
    http: HttpConnector,
    via: Via,
}

impl Outbound {
    /// Connections by `http`, leaving through `via`.
    pub fn new(http: HttpConnector, via: Via) -> Self {
        Outbound { http, via }
    }
}

/// One connection to an upstream or to the proxy in front of it. `proxied`: a plain `http`
/// upstream reached through an HTTP proxy without a tunnel, so that the client sends each
/// request to the proxy in absolute form (`GET http://host/path`), as HTTP proxies expect
/// (most refuse `CONNECT` to ports other than 443).
pub struct Leg {
    io: TokioIo<tokio::net::TcpStream>,
    proxied: bool,
}

impl Connection for Leg {
    fn connected(&self) -> Connected {
        self.io.connected().proxy(self.proxied)
    }
}

impl hyper::rt::Read for Leg {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for Leg {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
}

impl Service<Uri> for Outbound {
    type Response = Leg;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let http = self.http.clone();
        let via = self.via.resolve(&dst);
        Box::pin(async move {
            let io = match via {
                Via::Direct | Via::Env(_) => {
                    let mut http = http;
                    http.call(dst).await.map_err(Into::into)
                }
                Via::Http { proxy, shown, .. } if dst.scheme_str() == Some("http") => {
                    let mut http = http;
                    let io = http.call(proxy).await.map_err(|e| {
                        let why = format!("the proxy {shown} cannot be reached: {}", chain(&e));
                        Box::new(EgressError(why)) as BoxError
                    })?;
                    return Ok(Leg { io, proxied: true });
                }
                Via::Http { proxy, auth, shown } => {
                    let mut t = Tunnel::new(proxy, http);
                    if let Some(a) = auth {
                        t = t.with_auth(a);
                    }
                    t.call(dst).await.map_err(|e| {
                        let why = format!("the proxy {shown} did not open a tunnel: {}", chain(&e));
                        Box::new(EgressError(why)) as BoxError
                    })
                }
                Via::Socks { proxy, auth, remote_dns, shown } => {
                    let mut s = SocksV5::new(proxy, http).local_dns(!remote_dns);
                    if let Some((u, p)) = auth {
                        s = s.with_auth(u, p);
                    }
                    s.call(dst).await.map_err(|e| {
                        Box::new(EgressError(format!("the SOCKS5 proxy {shown} refused: {}", chain(&e)))) as BoxError
                    })
                }
            }?;
            Ok(Leg { io, proxied: false })
        })
    }
}

/// How connection `i` of `config` leaves, with `get` reading the environment.
pub fn via_of(config: &Config, i: usize, get: &dyn Fn(&str) -> Option<String>) -> Result<Via, String> {
    let c = &config.connections[i];
    let provider = config.provider(&c.provider).and_then(|p| p.proxy.as_deref());
    match c.proxy.as_deref().or(provider) {
        Some(v) => Via::parse(v),
        None if config.server.proxy_from_env => Ok(Via::from_env(get)),
        None => Ok(Via::Direct),
    }
}

/// An error and its causes, `: `-separated (a TLS handshake's or a proxy's reason lies a few
/// levels down).
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut at = e.source();
    while let Some(s) = at {
        out.push_str(": ");
        out.push_str(&s.to_string());
        at = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_decides_per_upstream_and_no_proxy_bypasses() {
        let env = |name: &str| match name {
            "https_proxy" => Some("http://proxy.corp:3128".to_owned()),
            "NO_PROXY" => Some("internal.corp,127.0.0.1".to_owned()),
            _ => None,
        };
        let via = Via::from_env(&env);
        assert!(matches!(via.resolve(&"https://api.openai.com/v1".parse().expect("uri")), Via::Http { .. }));
        assert!(matches!(via.resolve(&"https://llm.internal.corp/v1".parse().expect("uri")), Via::Direct));
        assert!(matches!(via.resolve(&"http://api.openai.com/v1".parse().expect("uri")), Via::Direct), "no HTTP_PROXY");
    }
}
