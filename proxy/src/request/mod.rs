//! The request path, in the order a request takes it:
//!
//! 1. [`forward`] reads an inference request and [`plan`]s it: [`resolve`] turns its `model`
//!    into targets, and [`exchange`] fixes the client API and what translation each provider
//!    format needs;
//! 2. [`dispatch`] walks the targets in the core's order (or [`multicall`] asks several at
//!    once), through the admission queues;
//! 3. [`upstream`] makes one attempt to one connection at its prepared [`endpoint`], with
//!    [`attempt`]'s bookkeeping recording its outcome exactly once (the client's
//!    [`api_headers`] carried along, and ChatGPT's [`codex`] backend's demands met);
//! 4. [`stream`] relays an event stream under the watchdog;
//! 5. [`refuse`] answers when nothing could serve.
//!
//! Imports [`crate::state`] (the gateway), [`crate::sessions`] (lease fences, the usage-limit
//! reset, egress IPs), [`crate::edge`]'s vocabulary, [`crate::translate`] and
//! [`crate::config`]; only [`crate::edge::serve`] and [`crate::ops`] import it back, apart
//! from the state's use of [`resolve`]'s targets and the prepared [`endpoint`]s.

pub mod answer;
pub mod api_headers;
pub mod attempt;
pub mod codex;
pub mod dispatch;
pub mod endpoint;
pub mod exchange;
pub mod forward;
pub mod multicall;
pub mod peek;
pub mod plan;
pub mod refuse;
pub mod resolve;
pub mod stream;
pub mod unsuited;
pub mod upstream;
