//! A setting's problems: each names its field, and validation reports them all at once.

use std::fmt;

/// One problem with one setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Dotted path (`resilience.model_lockout.max_cooldown_ms`) or environment variable name.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Every problem found, or a parse failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The TOML did not parse (syntax, wrong type, unknown key); the message names the key.
    #[error("invalid settings: {0}")]
    Parse(String),
    /// Values parsed but are out of range or inconsistent.
    #[error("invalid settings:\n{}", .0.iter().map(|e| format!("  - {e}")).collect::<Vec<_>>().join("\n"))]
    Invalid(Vec<FieldError>),
}
