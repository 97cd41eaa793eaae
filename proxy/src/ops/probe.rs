//! `ferroute probe`: asks a running gateway's `/livez` or `/readyz` and exits 0 only on a 200,
//! for an image without a shell or curl (a container's `HEALTHCHECK`, a systemd
//! `ExecStartPost`). Plain blocking HTTP/1.1 over loopback, with a deadline.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// How long a probe waits for a connection and for the answer.
pub const DEADLINE: Duration = Duration::from_secs(3);

/// The address to probe for `listen`: an unspecified address (`0.0.0.0`, `[::]`) is probed on
/// its loopback.
pub fn target(listen: &str) -> Result<SocketAddr, String> {
    let addr = listen
        .to_socket_addrs()
        .map_err(|e| format!("cannot read the listen address {listen:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("the listen address {listen:?} names no address"))?;
    let ip = match addr.ip() {
        IpAddr::V4(v4) if v4.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(v6) if v6.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    Ok(SocketAddr::new(ip, addr.port()))
}

/// `GET path` on `addr`: `Ok(status line)` on a 200, `Err` naming what else happened.
pub fn probe(addr: SocketAddr, path: &str) -> Result<String, String> {
    let mut s = TcpStream::connect_timeout(&addr, DEADLINE).map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    s.set_read_timeout(Some(DEADLINE)).map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(DEADLINE)).map_err(|e| e.to_string())?;
    let request = format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
    s.write_all(request.as_bytes()).map_err(|e| format!("cannot send to {addr}: {e}"))?;
    let mut answer = Vec::new();
    s.take(64 * 1024).read_to_end(&mut answer).map_err(|e| format!("no answer from {addr}{path}: {e}"))?;
    let text = String::from_utf8_lossy(&answer);
    let status = text.lines().next().unwrap_or_default().trim().to_owned();
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b).trim();
    match status.split_whitespace().nth(1) {
        Some("200") => Ok(format!("{addr}{path}: {status}")),
        Some(_) => Err(format!("{addr}{path}: {status} {body}")),
        None => Err(format!("{addr}{path}: no HTTP answer")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn serve_once(answer: &'static str) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        #[allow(clippy::disallowed_methods)] // a test's blocking server, outside any simulation
        std::thread::spawn(move || {
            if let Ok((mut s, _)) = l.accept() {
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf);
                let _ = s.write_all(answer.as_bytes());
            }
        });
        addr
    }

    #[test]
    fn a_200_passes_and_anything_else_fails_with_what_it_was() {
        let ok = serve_once("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
        assert!(probe(ok, "/readyz").expect("ready").contains("200 OK"));
        let not = serve_once("HTTP/1.1 503 Service Unavailable\r\ncontent-length: 8\r\n\r\ndraining");
        let e = probe(not, "/readyz").expect_err("not ready");
        assert!(e.contains("503") && e.contains("draining"), "{e}");
        let closed = TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr");
        assert!(probe(closed, "/livez").expect_err("nobody").contains("cannot connect"));
    }

    #[test]
    fn an_unspecified_listen_address_is_probed_on_loopback() {
        assert_eq!(target("0.0.0.0:8787").expect("v4").to_string(), "127.0.0.1:8787");
        assert_eq!(target("[::]:9000").expect("v6").to_string(), "[::1]:9000");
        assert_eq!(target("10.1.2.3:80").expect("as is").to_string(), "10.1.2.3:80");
        assert!(target("no-port").is_err());
    }
}
