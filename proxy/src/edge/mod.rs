//! The HTTP edge: where a client's bytes come in and an answer goes out.
//!
//! [`serve`] is the accept loop and its table of routes; it is the top of the crate and hands
//! each request to the room that owns it (the request path, sessions, ops). The rest of the
//! room is the HTTP vocabulary every other room speaks, and imports only [`crate::config`]:
//! reading a body ([`body`]) and the fields routing needs from it ([`head`]), who the caller
//! is ([`auth`]), and the one error type with its JSON bodies ([`errors`]).

pub mod auth;
pub mod body;
pub mod errors;
pub mod gemini;
pub mod gemini_array;
pub mod head;
pub mod serve;
