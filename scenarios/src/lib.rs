//! Ferroute's one fault vocabulary.
//!
//! A [`Script`] says how an upstream behaves, call by call or by the clock: answer with a
//! status, headers and body after some latency; stream SSE events on a timeline; echo the
//! request; reset the connection before or during the response; accept and never answer. The
//! [`ScriptedUpstream`] is a hyper service that plays scripts, so the demo provider, the
//! simulation and the chaos suite all inject faults the same way. [`Toxic`]s describe
//! transport faults, which the chaos suite's middlebox executes on real sockets.

pub mod answer;
pub mod codex_backend;
pub mod collector;
pub mod corpus;
pub mod dialect;
mod expectations;
mod http_host;
mod in_flight;
pub mod net;
pub mod scenario;
pub mod script;
mod sse_out;
pub mod store;
pub mod store_lua;
pub mod token_server;
pub mod toxic;
pub mod upstream;
mod workload;

pub use scenario::{Scenario, load_catalog};
pub use script::{Behaviour, Mode, Script, SseEvent, Window};
pub use token_server::{TokenFault, TokenServer, serve_token_server};
pub use toxic::Toxic;
pub use upstream::{ScriptedUpstream, serve_upstream};
