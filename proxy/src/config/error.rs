//! A config's problems: each names its field, and a config that fails to load reports them all.

use ferroute_core::settings::FieldError;
use std::fmt;

/// A config that failed to load: every problem, each naming its field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError(pub Vec<FieldError>);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "invalid config ({} problem{}):", self.0.len(), if self.0.len() == 1 { "" } else { "s" })?;
        for e in &self.0 {
            writeln!(f, "  - {e}")?;
        }
        Ok(())
    }
}

/// One problem with one field.
pub fn field_error(field: impl Into<String>, message: impl Into<String>) -> FieldError {
    err(field, message)
}

pub(super) fn err(field: impl Into<String>, message: impl Into<String>) -> FieldError {
    FieldError { field: field.into(), message: message.into() }
}
