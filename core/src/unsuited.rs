//! Credentials that cannot serve a client kind: a Claude subscription's token that answers
//! "only authorized for use with Claude Code" to any other client, a key that needs a workspace
//! header this client does not send. Such an answer says nothing about the account's health, so
//! nothing is penalised; but asking the same credential again for the same kind of client would
//! fail the same way. For [`UNSUITED_FOR`] a connection that refused a client kind is skipped for
//! that kind's requests while another connection can serve them.

use rustc_hash::FxHashMap;
use std::time::{Duration, Instant};

/// How long a refusal is remembered.
pub const UNSUITED_FOR: Duration = Duration::from_secs(600);
/// The most (connection, client kind) pairs remembered; past it, a new refusal is not.
pub const MAX_REMEMBERED: usize = 10_000;

/// What each connection refused, by client kind, until when.
#[derive(Debug, Default)]
pub struct Unsuited {
    by_connection: FxHashMap<Box<str>, Vec<(Box<str>, Instant)>>,
    len: usize,
}

impl Unsuited {
    /// Nothing remembered.
    pub fn new() -> Self {
        Unsuited::default()
    }

    /// `connection` refused a client of `kind` at `now`.
    pub fn note(&mut self, now: Instant, connection: &str, kind: &str) {
        if self.len >= MAX_REMEMBERED {
            for kinds in self.by_connection.values_mut() {
                kinds.retain(|(_, until)| *until > now);
            }
            self.by_connection.retain(|_, kinds| !kinds.is_empty());
            self.len = self.by_connection.values().map(Vec::len).sum();
        }
        let until = now + UNSUITED_FOR;
        if let Some(kinds) = self.by_connection.get_mut(connection)
            && let Some(known) = kinds.iter_mut().find(|(k, _)| **k == *kind)
        {
            known.1 = until;
            return;
        }
        if self.len < MAX_REMEMBERED {
            self.by_connection.entry(Box::from(connection)).or_default().push((Box::from(kind), until));
            self.len += 1;
        }
    }

    /// Whether `connection` refused a client of `kind` less than [`UNSUITED_FOR`] before `now`.
    pub fn refuses(&self, now: Instant, connection: &str, kind: &str) -> bool {
        self.by_connection
            .get(connection)
            .is_some_and(|kinds| kinds.iter().any(|(k, until)| **k == *kind && *until > now))
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::t0;

    #[test]
    fn a_refusal_is_remembered_for_its_kind_and_for_a_while() {
        let mut u = Unsuited::new();
        let now = t0();
        assert!(u.is_empty() && !u.refuses(now, "c1", "chat:openai"));
        u.note(now, "c1", "chat:openai");
        assert!(u.refuses(now + Duration::from_secs(599), "c1", "chat:openai"));
        assert!(!u.refuses(now, "c1", "messages:claude-cli"), "another kind is asked");
        assert!(!u.refuses(now, "c2", "chat:openai"), "another connection is asked");
        assert!(!u.refuses(now + UNSUITED_FOR, "c1", "chat:openai"), "forgotten after a while");
    }

    #[test]
    fn memory_is_bounded_and_makes_room_from_what_expired() {
        let mut u = Unsuited::new();
        let now = t0();
        for i in 0..MAX_REMEMBERED {
            u.note(now, &format!("c{i}"), "k");
        }
        u.note(now, "late", "k");
        assert!(!u.refuses(now, "late", "k"), "full: not remembered");
        let later = now + UNSUITED_FOR;
        u.note(later, "late", "k");
        assert!(u.refuses(later, "late", "k"), "the expired made room");
    }
}
