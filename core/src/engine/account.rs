//! What a subscription account's sign-in does to its connection (M3): a refresh token the token
//! endpoint refused ends the connection as `expired` at once, without waiting for a request to
//! fail; new tokens (a refresh, a new sign-in) end an `expired` state, and only that one.

use super::change::Pending;
use super::{Engine, Event};
use crate::connection::Applied;
use crate::types::{ConnectionStatus, Reason, TerminalState};
use std::time::Instant;

impl Engine {
    /// Ends connection `id` as `expired`: its account needs a new sign-in. Returns whether its
    /// state changed (a terminal state is never overwritten).
    pub fn end_connection(&mut self, now: Instant, id: &str, message: &str) -> bool {
        let state = self.conns.get_mut(id);
        let applied = state.end(now, TerminalState::Expired, Reason::AuthError, 401, message);
        if applied == Applied::Unchanged {
            return false;
        }
        let connection = self.conns.slot(id).1;
        self.push(Event::ConnectionTerminal { connection: connection.clone(), state: TerminalState::Expired });
        self.collect(Pending::Connection { connection, reason: Reason::AuthError });
        true
    }

    /// New credentials for connection `id` (a refresh, a new sign-in): an `expired` connection
    /// serves again; a ban, exhausted credits or a cooldown stay. Returns whether it changed.
    pub fn renew_connection(&mut self, now: Instant, id: &str) -> bool {
        if self.connection(id).status(now) != ConnectionStatus::Expired {
            return false;
        }
        // Expired => Available
        self.reset_connection(id);
        true
    }
}
