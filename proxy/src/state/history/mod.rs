//! What the dashboard shows of the recent past, kept in memory with fixed bounds: answers per
//! provider and minute ([`rates`]), the last hour of state changes ([`timeline`]), each
//! combo's last request paths ([`paths`]) and each connection's last error message. Production and the simulation keep it alike: it is
//! fed from the request path and the engine's events.

pub mod paths;
pub mod rates;
pub mod timeline;

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

/// Characters of an upstream's error message kept.
const MESSAGE_CHARS: usize = 300;
/// Connections whose last error is kept (a bound beyond any config's size).
const MAX_CONNECTIONS: usize = 4096;

/// A connection's last failed attempt as the upstream (or the transport) told it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LastError {
    /// When (RFC 3339).
    pub at: String,
    /// The upstream's status (0: the transport failed).
    pub status: u16,
    /// Its message, cut to 300 characters: upstream text, which the dashboard shows as text.
    pub message: String,
}

/// The records.
#[derive(Debug, Default)]
pub struct History {
    rates: Mutex<rates::Rates>,
    timeline: Mutex<timeline::Timeline>,
    paths: Mutex<paths::Paths>,
    errors: Mutex<BTreeMap<String, LastError>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Each update leaves the record consistent: a poisoned lock is still usable.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl History {
    /// The answers per provider and minute.
    pub fn rates(&self) -> MutexGuard<'_, rates::Rates> {
        lock(&self.rates)
    }

    /// The last hour of state changes.
    pub fn timeline(&self) -> MutexGuard<'_, timeline::Timeline> {
        lock(&self.timeline)
    }

    /// The combos' last request paths.
    pub fn paths(&self) -> MutexGuard<'_, paths::Paths> {
        lock(&self.paths)
    }

    /// Keeps `error` as `connection`'s last.
    pub fn note_error(&self, connection: &str, mut error: LastError) {
        if let Some((cut, _)) = error.message.char_indices().nth(MESSAGE_CHARS) {
            error.message.truncate(cut);
        }
        let mut errors = lock(&self.errors);
        if errors.len() < MAX_CONNECTIONS || errors.contains_key(connection) {
            errors.insert(connection.to_owned(), error);
        }
    }

    /// `connection`'s last error, if it had one.
    pub fn last_error(&self, connection: &str) -> Option<LastError> {
        lock(&self.errors).get(connection).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_message_is_cut_at_a_character_boundary() {
        let h = History::default();
        let message = "é".repeat(1_000);
        h.note_error("k1", LastError { at: String::new(), status: 500, message });
        let kept = h.last_error("k1").map(|e| e.message).unwrap_or_default();
        assert_eq!(kept.chars().count(), MESSAGE_CHARS);
        assert!(h.last_error("k2").is_none());
    }
}
