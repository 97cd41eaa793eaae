//! The system packages some tests need (redis-server, tinyproxy, dante-server): installed by a
//! script under `tests/` that `.ci/run` runs. In CI a missing one fails the test; outside CI the
//! test runs the script itself, and is skipped (said on stderr) only when that cannot install it.

use std::path::Path;
use std::process::Command;

/// Whether `what` is there (`installed` says), after running `tests/{script}` if it was not.
pub(crate) fn ensure(installed: impl Fn() -> bool, script: &str, what: &str) -> bool {
    if installed() {
        return true;
    }
    let in_ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
    assert!(!in_ci, "{what} is missing: .ci/run installs it with tests/{script}");
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests").join(script);
    let ran = Command::new("bash").arg(path).status().is_ok_and(|s| s.success());
    if !ran || !installed() {
        eprintln!("skipped: no {what}, and tests/{script} could not install it");
        return false;
    }
    true
}

/// A loopback port nobody listens on now.
pub(crate) fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}
