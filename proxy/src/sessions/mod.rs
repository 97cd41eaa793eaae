//! What a client or an account holds over time, beyond one request: a managed client's
//! [`leases`] (M14) with their SQLite store ([`lease_store`]) and their Redis store for
//! replicas ([`lease_shared`]); OAuth subscription accounts ([`accounts`]) refreshed alone
//! ([`refresh`]) or through the store replicas share ([`refresh_shared`]) at the
//! [`token_endpoint`] (each refresh token presented once, its flight written down first:
//! [`flight`]), what a finished refresh does ([`refresh_outcome`]), and their tokens at
//! rest ([`token_store`], [`sealed`]); a Claude subscription's weekly usage-limit reset
//! ([`usage_reset`], M4), and which connections share an egress IP ([`egress`], M13).
//!
//! Imports [`crate::state`], [`crate::edge`]'s vocabulary, [`crate::config`] and the shared
//! store of [`crate::replicas`].

pub mod accounts;
pub mod egress;
pub mod flight;
pub mod lease_shared;
pub mod lease_store;
pub mod leases;
pub mod refresh;
pub mod refresh_outcome;
pub mod refresh_shared;
pub mod sealed;
pub mod token_endpoint;
pub mod token_store;
pub mod usage_reset;
