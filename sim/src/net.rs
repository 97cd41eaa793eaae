//! Turmoil's sockets behind the same traits as tokio's: the gateway's `Listener`, and a
//! hyper-util connector for its upstream client (and for simulated clients).

use hyper::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;
use std::future::Future;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A simulated listener.
pub struct SimListener(pub turmoil::net::TcpListener);

impl SimListener {
    /// Binds `0.0.0.0:port` on the current simulated host.
    pub async fn bind(port: u16) -> io::Result<Self> {
        Ok(SimListener(turmoil::net::TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)).await?))
    }
}

impl scenarios::net::Listener for SimListener {
    type Io = turmoil::net::TcpStream;

    async fn accept(&mut self) -> io::Result<(Self::Io, SocketAddr)> {
        self.0.accept().await
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }
}

/// A simulated stream that hyper-util's client accepts (a local newtype, because `TokioIo<T>`
/// is a `Connection` only when `T` is).
pub struct SimStream(turmoil::net::TcpStream);

impl AsyncRead for SimStream {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for SimStream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl Connection for SimStream {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

/// Dials simulated hosts by name (`http://up-a:9000/v1`).
#[derive(Clone, Copy, Debug, Default)]
pub struct SimConnector;

/// The simulated network has no proxies: every connection goes straight to its host.
impl proxy::Egress for SimConnector {
    fn via(&self, _via: &proxy::state::outbound::Via) -> Self {
        SimConnector
    }
}

impl tower_service::Service<Uri> for SimConnector {
    type Response = TokioIo<SimStream>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        Box::pin(async move {
            let host = uri
                .host()
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("no host in {uri}")))?
                .to_owned();
            let port = uri.port_u16().unwrap_or(80);
            let stream = turmoil::net::TcpStream::connect((host.as_str(), port)).await?;
            Ok(TokioIo::new(SimStream(stream)))
        })
    }
}
