//! The accept side of a transport, generic so that one service runs over real and simulated
//! sockets alike.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use tokio::io::{AsyncRead, AsyncWrite};

/// Something that accepts byte streams: a tokio `TcpListener`, or a simulated one.
pub trait Listener: Send + 'static {
    /// One accepted stream.
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// Waits for the next stream and its peer address.
    fn accept(&mut self) -> impl Future<Output = io::Result<(Self::Io, SocketAddr)>> + Send;
    /// The bound address.
    fn local_addr(&self) -> io::Result<SocketAddr>;
}

impl Listener for tokio::net::TcpListener {
    type Io = tokio::net::TcpStream;

    async fn accept(&mut self) -> io::Result<(Self::Io, SocketAddr)> {
        let (s, a) = tokio::net::TcpListener::accept(self).await?;
        // Small SSE frames must leave at once.
        let _ = s.set_nodelay(true);
        Ok((s, a))
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        tokio::net::TcpListener::local_addr(self)
    }
}
