//! M13: which connections share an egress IP. A connection's IP is its configured
//! `egress_ip`; else, when it leaves through a proxy of its own or its provider's, that proxy
//! (every connection through it shares its address); else the local address its last upstream
//! response left from (best effort: behind NAT that is not the public IP, and a connection
//! never seen has none, so only the failing connection cools).

use crate::request::resolve::Target;
use crate::state::gateway::Gateway;
use hyper_util::client::legacy::connect::Connect;
use std::net::IpAddr;

/// Notes the local address connection `index` was last seen leaving from.
pub fn observe<C: Connect + Clone + Send + Sync + 'static>(gw: &Gateway<C>, index: usize, ip: IpAddr) {
    let c = &gw.config.connections[index];
    if c.egress_ip.is_none() {
        let mut seen = gw.egress.lock().unwrap_or_else(|p| p.into_inner());
        seen.insert(c.id.clone(), ip);
    }
}

/// The egress IP of connection `index`, if known.
pub fn ip_of<C: Connect + Clone + Send + Sync + 'static>(gw: &Gateway<C>, index: usize) -> Option<IpAddr> {
    let c = &gw.config.connections[index];
    match c.egress_ip.as_deref().and_then(|s| s.parse().ok()) {
        Some(ip) => Some(ip),
        None => gw.egress.lock().unwrap_or_else(|p| p.into_inner()).get(&c.id).copied(),
    }
}

/// Where connection `index` leaves from, as a bucket: its IP, or the proxy it goes through.
fn bucket_of<C: Connect + Clone + Send + Sync + 'static>(gw: &Gateway<C>, index: usize) -> Option<String> {
    let c = &gw.config.connections[index];
    let proxy = gw.route_shown(index);
    if c.egress_ip.is_none() && proxy != "none" && proxy != "from the environment" {
        return Some(format!("proxy {proxy}"));
    }
    ip_of(gw, index).map(|ip| ip.to_string())
}

/// The other connections of `target`'s provider that leave from the same IP, with their
/// `disable_cooling`; empty when the provider does not lock by IP or the IP is unknown.
pub fn siblings<C: Connect + Clone + Send + Sync + 'static>(gw: &Gateway<C>, target: &Target) -> Vec<(String, bool)> {
    let (provider, _) = gw.parts(target);
    if !provider.egress_ip_lock {
        return Vec::new();
    }
    let Some(bucket) = bucket_of(gw, target.connection) else { return Vec::new() };
    gw.config
        .connections
        .iter()
        .enumerate()
        .filter(|(i, c)| *i != target.connection && c.provider == provider.id)
        .filter(|(i, _)| bucket_of(gw, *i).as_deref() == Some(bucket.as_str()))
        .map(|(_, c)| (c.id.clone(), c.disable_cooling))
        .collect()
}
