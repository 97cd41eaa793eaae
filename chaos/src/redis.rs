//! A private `redis-server` per test (for the tests that need a real Redis): started on a free loopback port in a temporary
//! directory. `.ci/run` installs `redis-server` with `tests/redis/setup.sh`, and in CI a missing
//! server fails the test; outside CI the test runs that script itself, and says it was skipped
//! when it cannot install one (it needs apt-get and root).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::time::Instant;

/// A private `redis-server`, killed when dropped.
pub struct Redis {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Redis {
    /// A running server, or `None` (outside CI only) when none can be installed.
    pub async fn start() -> Option<Redis> {
        if !crate::installed::ensure(installed, "redis/setup.sh", "redis-server") {
            return None;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let port = crate::installed::free_port();
        let child = Redis::spawn(port, dir.path());
        let r = Redis { child, port, dir };
        r.wait_ready().await;
        Some(r)
    }

    fn spawn(port: u16, dir: &Path) -> Child {
        Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server")
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    async fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not listen on {}", self.port);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Kills the server (a restart brings it back on the same port, empty).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Kills the server and starts a new one on the same port.
    pub async fn restart(&mut self) {
        self.kill();
        self.child = Redis::spawn(self.port, self.dir.path());
        self.wait_ready().await;
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

fn installed() -> bool {
    Command::new("redis-server").arg("--version").stdout(Stdio::null()).status().is_ok_and(|s| s.success())
}
