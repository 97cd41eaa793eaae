//! Operating the gateway: the [`admin`] API (health, resets, lockouts, the emergency switch),
//! the operator's [`dashboard`] and what it reads beyond health ([`overview`]), the [`events`] stream of state changes, runtime [`settings`] overrides,
//! config [`reload`] without a restart, and the built-in [`demo`] provider the embedded
//! defaults serve.
//!
//! Imports [`crate::state`], [`crate::sessions`], [`crate::edge`]'s vocabulary and
//! [`crate::config`].

pub mod accounts;
pub mod admin;
pub mod dashboard;
pub mod demo;
pub mod events;
pub mod google;
pub mod overrides;
pub mod overview;
pub mod probe;
pub mod reload;
pub mod settings;
