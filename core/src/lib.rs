//! Ferroute's resilience core.
//!
//! Pure, synchronous state machines and decisions: the provider circuit breaker (M1), the
//! provider cooldown tracker (M2), connection cooldowns and terminal states (M3), model
//! lockout (M6), request admission (M9), the slow-stream watchdog (M10), status restatement
//! (M11) and error classification (M12), and the [`engine::Engine`] that composes them for
//! routing. No sockets, no runtime, no clock: every time-dependent call takes `now`, and the
//! only randomness is a caller-seeded ChaCha RNG. The production proxy and the deterministic
//! simulation run this same code.

#![cfg_attr(test, allow(clippy::field_reassign_with_default))]

pub mod admission;
pub mod breaker;
pub mod calendar;
pub mod classify;
pub mod connection;
pub mod engine;
pub mod exclusion;
pub mod hint;
pub mod lockout;
pub mod oauth;
pub mod provider_cooldown;
pub mod quota;
pub mod restate;
pub mod rules;
pub mod session;
pub mod settings;
pub mod sse;
pub mod strategy;
pub mod timeline;
pub mod tried;
pub mod types;
pub mod unsuited;
pub mod usage_limit;
pub mod watchdog;

#[cfg(test)]
mod testutil;

pub use types::{ConnectionStatus, ProviderClass, Reason, Scope, TerminalState};
