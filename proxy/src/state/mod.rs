//! The gateway's shared state: the [`gateway`] itself (one config, the core engine behind one
//! lock, the admission queues, the upstream client), where state is persisted ([`store`],
//! SQLite), the [`clock`] (simulated under the simulation), the event log of the core's
//! changes, the operator's [`feed`] of them, the dashboard's [`history`], [`metrics`], the certificate authorities upstream TLS
//! [`trust`]s, how upstream connections leave ([`outbound`], proxies) and the production
//! [`connector`], and the [`interleave`] points the simulation may pause at.
//!
//! Imports [`crate::config`], the prepared endpoints and resolved targets of
//! [`crate::request`], and the replica link ([`crate::replicas::link`]) it publishes changes
//! through; never the rooms that act on a request.

pub mod clock;
pub mod connector;
mod event_log;
pub mod feed;
pub mod gateway;
pub mod history;
pub mod interleave;
pub mod metrics;
pub mod outbound;
pub mod store;
pub mod trust;
