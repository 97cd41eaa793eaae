//! Sessions (M5): which conversation a request belongs to, and the connection it is pinned to.
//!
//! A coding agent's session moves between accounts at a cost (the provider's prompt cache is
//! per account, and a cold account may answer 429 at first), so a session is pinned to one
//! connection per provider while the pin is fresh and the connection eligible (M5); a managed
//! client may instead hold one connection exclusively under a fenced lease (M14).

pub mod affinity;
pub mod key;
pub mod lease;

pub use affinity::{Affinity, PinEvent};
pub use key::session_key;
