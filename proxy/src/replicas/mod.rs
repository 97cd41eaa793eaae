//! Several gateway replicas sharing resilience state through Redis (`[state] backend =
//! "redis"`): the store they share ([`shared_store`], with the lease and token scripts; the
//! OAuth tokens' claims and publications in [`shared_tokens`]), this replica's
//! [`link`] that the gateway publishes its changes through, and the [`follow`]er that joins,
//! publishes and applies the others' changes.
//!
//! [`shared_store`] and [`link`] import only the core and each other, so that
//! [`crate::state`] can hold a link; [`follow`] imports the gateway, [`crate::ops::reload`]'s
//! serving handle and [`crate::sessions::leases`].

pub mod follow;
pub mod link;
pub mod shared_store;
pub mod shared_tokens;
