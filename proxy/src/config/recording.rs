//! `[recording]`: the flight recorder (see `crate::recording`). Off by default.

use super::error::err;
use ferroute_core::settings::FieldError;
use serde::{Deserialize, Serialize};

/// `[recording]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RecordingConfig {
    /// Whether attempts and requests are recorded.
    pub enabled: bool,
    /// The directory of the recording files (default: `recording` in the data directory).
    pub path: Option<String>,
    /// The most the directory holds (MiB); the oldest files go first.
    pub max_mb: u64,
}

impl Default for RecordingConfig {
    fn default() -> Self {
        RecordingConfig { enabled: false, path: None, max_mb: 256 }
    }
}

impl RecordingConfig {
    pub(super) fn validate_into(&self, errors: &mut Vec<FieldError>) {
        if !(1..=1_048_576).contains(&self.max_mb) {
            errors.push(err("recording.max_mb", format!("is out of range: {} (allowed 1..=1048576)", self.max_mb)));
        }
        if self.path.as_deref().is_some_and(|p| p.trim().is_empty()) {
            errors.push(err("recording.path", "must not be empty (leave it out for the data directory's)"));
        }
    }

    /// The directory, given the data directory.
    pub fn dir(&self, data_dir: &str) -> std::path::PathBuf {
        match &self.path {
            Some(p) => p.into(),
            None => std::path::Path::new(data_dir).join("recording"),
        }
    }
}
