//! Real proxy processes for the egress tests: tinyproxy (an HTTP proxy opening `CONNECT`
//! tunnels, with Basic credentials) and Dante's `danted` (a SOCKS5 server), each started on a
//! free loopback port with a config of its own in a temporary directory and killed when
//! dropped. `tests/proxies/setup.sh` installs them (`.ci/run` runs it); in CI a missing one fails
//! the test, outside CI the test runs that script itself and says it was skipped when it cannot
//! install them.

use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::time::Instant;

/// A running proxy process, killed when dropped.
pub struct ProxyProcess {
    child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ProxyProcess {
    /// What the proxy logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    async fn wait_ready(&self, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "{what} did not listen on {}: {}", self.port, self.log());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Whether both proxies are installed (see `installed.rs`); `None` when the test is skipped.
pub fn available() -> Option<()> {
    crate::installed::ensure(installed, "proxies/setup.sh", "tinyproxy or danted").then_some(())
}

fn installed() -> bool {
    let ok = |cmd: &str| Command::new(cmd).arg("-v").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok();
    ok("tinyproxy") && ok("danted")
}

/// A private directory the proxies (which drop to `nobody` when started as root) can write.
fn open_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let _ = std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777));
    }
    dir
}

/// tinyproxy on a free port, demanding `user`:`pass` (Basic), logging each tunnel it opens.
pub async fn tinyproxy(user: &str, pass: &str) -> ProxyProcess {
    let dir = open_dir();
    let port = crate::installed::free_port();
    let log = dir.path().join("tinyproxy.log");
    let conf = dir.path().join("tinyproxy.conf");
    std::fs::write(
        &conf,
        format!(
            "Port {port}\nListen 127.0.0.1\nTimeout 30\nMaxClients 50\nBasicAuth {user} {pass}\nLogLevel Connect\nLogFile \"{}\"\nPidFile \"{}\"\n",
            log.display(),
            dir.path().join("tinyproxy.pid").display()
        ),
    )
    .expect("tinyproxy config");
    let child = Command::new("tinyproxy")
        .arg("-d")
        .arg("-c")
        .arg(&conf)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start tinyproxy");
    let p = ProxyProcess { child, port, log, _dir: dir };
    p.wait_ready("tinyproxy").await;
    p
}

/// Dante's SOCKS5 server on a free port (no authentication: Dante's user check is the
/// system's accounts), logging each connection it opens.
pub async fn danted() -> ProxyProcess {
    let dir = open_dir();
    let port = crate::installed::free_port();
    let log = dir.path().join("danted.log");
    let conf = dir.path().join("danted.conf");
    std::fs::write(
        &conf,
        format!(
            "logoutput: {}\ninternal: 127.0.0.1 port = {port}\nexternal: 127.0.0.1\nclientmethod: none\nsocksmethod: none\n\
             user.privileged: root\nuser.unprivileged: nobody\n\
             client pass {{\n    from: 127.0.0.0/8 to: 0.0.0.0/0\n}}\n\
             socks pass {{\n    from: 127.0.0.0/8 to: 0.0.0.0/0\n    command: connect\n    log: connect\n}}\n",
            log.display()
        ),
    )
    .expect("danted config");
    let child = Command::new("danted")
        .arg("-f")
        .arg(&conf)
        .args(["-N", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start danted");
    let p = ProxyProcess { child, port, log, _dir: dir };
    p.wait_ready("danted").await;
    p
}
