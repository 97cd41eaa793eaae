//! The real `ferroute` binary as a child process: built once, started with its own config and
//! data directory on a free loopback port, killed with SIGKILL or stopped with SIGTERM.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

static BINARY: OnceLock<Result<PathBuf, String>> = OnceLock::new();

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default()
}

/// Builds `ferroute` (`cargo build -p proxy --bin ferroute`) once per test process and returns
/// its path.
pub fn ferroute() -> Result<PathBuf, String> {
    BINARY
        .get_or_init(|| {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let out = Command::new(cargo)
                .args(["build", "-p", "proxy", "--bin", "ferroute"])
                .current_dir(workspace_root())
                .output()
                .map_err(|e| format!("cannot run cargo: {e}"))?;
            if !out.status.success() {
                return Err(format!("building ferroute failed:\n{}", String::from_utf8_lossy(&out.stderr)));
            }
            let target = std::env::var("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|_| workspace_root().join("target"));
            let path = target.join("debug").join("ferroute");
            if path.exists() { Ok(path) } else { Err(format!("{} was not built", path.display())) }
        })
        .clone()
}

/// A running gateway process.
pub struct Gateway {
    child: Child,
    /// `http://127.0.0.1:PORT`, as the process announced it.
    pub base: String,
    /// Its config file.
    pub config: PathBuf,
}

impl Gateway {
    /// Starts `ferroute --config CONFIG --listen 127.0.0.1:0` and reads the address it
    /// announces on stdout (an ephemeral port: concurrent tests never race for one).
    pub async fn start(config: &Path) -> Result<Gateway, String> {
        Gateway::start_with(&ferroute()?, config).await
    }

    /// The same with the binary at `bin` (a release build, say).
    pub async fn start_with(bin: &Path, config: &Path) -> Result<Gateway, String> {
        let mut child = Command::new(bin)
            .args(["--config"])
            .arg(config)
            .args(["--listen", "127.0.0.1:0"])
            .env("FERROUTE_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start ferroute: {e}"))?;
        let Some(stdout) = child.stdout.take() else { return Err("no stdout".into()) };
        let announced = tokio::task::spawn_blocking(move || {
            use std::io::BufRead;
            std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .find_map(|l| l.strip_prefix("ferroute listening on ").map(str::to_owned))
        });
        match tokio::time::timeout(Duration::from_secs(30), announced).await {
            Ok(Ok(Some(base))) => Ok(Gateway { child, base, config: config.to_owned() }),
            other => {
                let _ = child.kill();
                let _ = child.wait();
                Err(format!("ferroute did not announce its address: {other:?}"))
            }
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Resident set size in KiB, from `/proc/PID/status`.
    pub fn rss_kib(&self) -> Option<u64> {
        rss_kib_of(self.pid())
    }

    /// SIGKILL: no chance to flush anything.
    pub fn kill_9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then waits for a clean exit.
    pub async fn terminate(mut self) -> Result<(), String> {
        let pid = self.pid().to_string();
        let status = Command::new("kill").args(["-TERM", &pid]).status().map_err(|e| e.to_string())?;
        if !status.success() {
            return Err("kill -TERM failed".into());
        }
        for _ in 0..400 {
            if let Ok(Some(s)) = self.child.try_wait() {
                return if s.success() { Ok(()) } else { Err(format!("exited with {s}")) };
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        Err("did not stop within 10 s of SIGTERM".into())
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A process's resident set size in KiB, from `/proc/PID/status`.
pub fn rss_kib_of(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}
