//! Egress proxies on loopback for the tests: an HTTP proxy that opens `CONNECT` tunnels and a
//! SOCKS5 server (RFC 1928, user and password per RFC 1929), each optionally demanding
//! credentials and counting what it carried, so a test can tell a request went through it.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A running proxy: its address and the destinations it opened, in order.
pub struct Proxy {
    /// Where it listens.
    pub addr: SocketAddr,
    carried: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Proxy {
    /// The destinations (`host:port`) it opened a tunnel to so far.
    pub fn carried(&self) -> Vec<String> {
        self.carried.lock().map(|c| c.clone()).unwrap_or_default()
    }
}

async fn start<F, Fut>(serve: F) -> Proxy
where
    F: Fn(TcpStream, Arc<Mutex<Vec<String>>>) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = std::io::Result<()>> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
    let addr = listener.local_addr().expect("addr");
    let carried = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&carried);
    let serve = Arc::new(serve);
    let task = tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let (serve, log) = (Arc::clone(&serve), Arc::clone(&log));
            tokio::spawn(async move {
                let _ = serve(s, log).await;
            });
        }
    });
    Proxy { addr, carried, task }
}

/// An HTTP proxy that opens `CONNECT` tunnels; with `credentials`, only to a request whose
/// `Proxy-Authorization` is `Basic` of them (else 407).
pub async fn http_connect(credentials: Option<(&str, &str)>) -> Proxy {
    let expected = credentials.map(|(u, p)| base64(&format!("{u}:{p}")));
    start(move |mut s, log| {
        let expected = expected.clone();
        async move {
            let head = read_head(&mut s).await?;
            let mut lines = head.lines();
            let request = lines.next().unwrap_or_default().to_owned();
            let mut parts = request.split_whitespace();
            let (method, target) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default().to_owned());
            let auth = lines
                .filter_map(|l| l.split_once(':'))
                .find(|(k, _)| k.trim().eq_ignore_ascii_case("proxy-authorization"))
                .and_then(|(_, v)| v.trim().split_once(' ').filter(|(scheme, _)| scheme.eq_ignore_ascii_case("basic")))
                .map(|(_, token)| token.trim().to_owned());
            // Credentials first, as Squid does: any request without them gets 407.
            if expected.is_some() && auth != expected {
                return s.write_all(b"HTTP/1.1 407 Proxy Authentication Required\r\ncontent-length: 0\r\n\r\n").await;
            }
            if method != "CONNECT" {
                return s.write_all(b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n").await;
            }
            let Ok(mut up) = TcpStream::connect(&target).await else {
                return s.write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n").await;
            };
            if let Ok(mut l) = log.lock() {
                l.push(target);
            }
            s.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await?;
            tokio::io::copy_bidirectional(&mut s, &mut up).await.map(|_| ())
        }
    })
    .await
}

/// A SOCKS5 server; with `credentials`, only for a client that authenticates with them.
pub async fn socks5(credentials: Option<(&str, &str)>) -> Proxy {
    let expected = credentials.map(|(u, p)| (u.to_owned(), p.to_owned()));
    start(move |mut s, log| {
        let expected = expected.clone();
        async move {
            let mut hello = [0u8; 2];
            s.read_exact(&mut hello).await?;
            let mut methods = vec![0u8; usize::from(hello[1])];
            s.read_exact(&mut methods).await?;
            let wanted = if expected.is_some() { 2 } else { 0 };
            if hello[0] != 5 || !methods.contains(&wanted) {
                return s.write_all(&[5, 0xff]).await;
            }
            s.write_all(&[5, wanted]).await?;
            if let Some((user, pass)) = &expected {
                let mut v = [0u8; 2];
                s.read_exact(&mut v).await?;
                let mut u = vec![0u8; usize::from(v[1])];
                s.read_exact(&mut u).await?;
                let mut plen = [0u8; 1];
                s.read_exact(&mut plen).await?;
                let mut p = vec![0u8; usize::from(plen[0])];
                s.read_exact(&mut p).await?;
                let ok = u == user.as_bytes() && p == pass.as_bytes();
                s.write_all(&[1, if ok { 0 } else { 1 }]).await?;
                if !ok {
                    return Ok(());
                }
            }
            let mut req = [0u8; 4];
            s.read_exact(&mut req).await?;
            let host = match req[3] {
                1 => {
                    let mut ip = [0u8; 4];
                    s.read_exact(&mut ip).await?;
                    std::net::Ipv4Addr::from(ip).to_string()
                }
                3 => {
                    let mut len = [0u8; 1];
                    s.read_exact(&mut len).await?;
                    let mut name = vec![0u8; usize::from(len[0])];
                    s.read_exact(&mut name).await?;
                    String::from_utf8_lossy(&name).into_owned()
                }
                _ => return s.write_all(&[5, 8, 0, 1, 0, 0, 0, 0, 0, 0]).await,
            };
            let mut port = [0u8; 2];
            s.read_exact(&mut port).await?;
            let target = format!("{host}:{}", u16::from_be_bytes(port));
            let Ok(mut up) = TcpStream::connect(&target).await else {
                return s.write_all(&[5, 5, 0, 1, 0, 0, 0, 0, 0, 0]).await;
            };
            if let Ok(mut l) = log.lock() {
                l.push(target);
            }
            s.write_all(&[5, 0, 0, 1, 127, 0, 0, 1, 0, 0]).await?;
            tokio::io::copy_bidirectional(&mut s, &mut up).await.map(|_| ())
        }
    })
    .await
}

/// Reads a request head (to the blank line).
async fn read_head(s: &mut TcpStream) -> std::io::Result<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte).await? == 0 || head.len() > 16 * 1024 {
            break;
        }
        head.push(byte[0]);
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

fn base64(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(s)
}

#[cfg(test)]
mod tests {
    #[test]
    fn basic_credentials_encode_as_rfc_7617_says() {
        // RFC 7617 §2's example.
        assert_eq!(super::base64("Aladdin:open sesame"), "QWxhZGRpbjpvcGVuIHNlc2FtZQ==");
    }
}
