//! The official Python SDKs (OpenAI, Anthropic, Google Gen AI) in the virtualenv that `.ci/run`
//! creates with `tests/sdk/setup.sh`; outside CI the first test that needs it creates it the
//! same way. In CI a missing virtualenv fails the test.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `tests/sdk`: the setup script and the SDK clients.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("tests").join("sdk")
}

/// The virtualenv's python (`FERROUTE_SDK_VENV`, else `target/sdk-venv`), creating the
/// virtualenv outside CI; `None` (with the reason printed) where it cannot be made.
pub fn python() -> Option<PathBuf> {
    let venv = std::env::var_os("FERROUTE_SDK_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("target").join("sdk-venv"));
    let python = venv.join("bin").join("python");
    let ready = || {
        Command::new(&python).args(["-c", "import openai, anthropic, google.genai"]).status().is_ok_and(|s| s.success())
    };
    if ready() {
        return Some(python);
    }
    let in_ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
    assert!(
        !in_ci,
        "the SDK virtualenv {} is missing or broken: .ci/run creates it with tests/sdk/setup.sh",
        venv.display()
    );
    let made = Command::new("bash").arg(dir().join("setup.sh")).arg(&venv).status().is_ok_and(|s| s.success());
    if made && ready() {
        return Some(python);
    }
    eprintln!(
        "skipped: could not create the SDK virtualenv (needs python3 with venv and access to PyPI); run tests/sdk/setup.sh"
    );
    None
}
