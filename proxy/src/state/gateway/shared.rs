//! The gateway's side of shared state: joining the other replicas, applying their changes,
//! the operators' emergency switch (which travels to them), and the leases a key may hold.

use super::{EMERGENCY_SETTING, Gateway, Observed};
use crate::replicas::link::Replicas;
use crate::state::store::StoreError;
use ferroute_core::engine::SharedChange;
use hyper_util::client::legacy::connect::Connect;
use std::sync::Arc;

impl<C: Connect + Clone + Send + Sync + 'static> Gateway<C> {
    /// Shares this gateway's resilience state with other replicas from now on (once; see
    /// [`crate::replicas::follow`]).
    pub fn share_with(&self, replicas: Arc<Replicas>) {
        let _ = self.replicas.set(replicas);
    }

    /// The link to the other replicas, when state is shared.
    pub fn replicas(&self) -> Option<&Arc<Replicas>> {
        self.replicas.get()
    }

    /// The client connection `connection`'s requests go through (its proxy's, if any).
    pub fn client_for(&self, connection: usize) -> &super::UpstreamClient<C> {
        self.routes.get(connection).map_or(&self.client, |(c, _, _)| c)
    }

    /// How connection `connection` leaves (`none`, a proxy with its password masked, or `from
    /// the environment`).
    pub fn route_shown(&self, connection: usize) -> &str {
        self.routes.get(connection).map_or("none", |(_, _, s)| s.as_str())
    }

    /// When connection `connection` sends `req` to a plain `http` upstream through an HTTP
    /// proxy (in absolute form, not inside a tunnel): adds the proxy's credentials, and returns
    /// the proxy as health shows it (its answers about itself, a 407, are then the connection's
    /// egress failure). `None`, and nothing added, otherwise.
    pub fn authorize_for_proxy<B>(&self, connection: usize, req: &mut http::Request<B>) -> Option<String> {
        if req.uri().scheme_str() != Some("http") {
            return None;
        }
        let (shown, auth) = self.routes.get(connection)?.1.absolute_form(req.uri())?;
        if let Some(auth) = auth {
            req.headers_mut().insert(http::header::PROXY_AUTHORIZATION, auth);
        }
        Some(shown)
    }

    /// Applies other replicas' changes (already aged for their transit), then settles: what
    /// they change is logged and persisted like a local change, and never shared back.
    pub fn apply_shared(&self, changes: impl IntoIterator<Item = SharedChange>) {
        let changes: Vec<SharedChange> = changes.into_iter().collect();
        let now = self.clock.now();
        if changes.is_empty() {
            return;
        }
        self.observe(now, Observed::Peers { changes: changes.len() });
        let class_of = |p: &str| self.config.provider(p).map(|p| p.class);
        let mut emergency = None;
        self.with_engine(|e| {
            for change in changes {
                if let SharedChange::Emergency { enabled } = change {
                    emergency = Some(enabled);
                }
                e.apply_shared(now, &change, &class_of);
            }
        });
        if let Some(enabled) = emergency {
            self.switch_emergency(enabled, false);
        }
        self.settle();
    }

    /// M16: turns the emergency fallback on or off and stores the choice; `share` passes it to
    /// the other replicas (an operator's switch), else it came from one of them. Turning it on
    /// without a configured target does nothing.
    pub fn switch_emergency(&self, enabled: bool, share: bool) {
        if enabled && self.config.emergency_fallback.target.is_none() {
            return;
        }
        let was = self.emergency.swap(enabled, std::sync::atomic::Ordering::Relaxed);
        if was != enabled {
            let target = self.config.emergency_fallback.target.clone();
            let data = serde_json::json!({"enabled": enabled, "target": target, "by": if share { "operator" } else { "replica" }});
            self.feed.publish("emergency", self.clock.wall_now_ms(), data);
        }
        if let Some(store) = &self.store
            && was != enabled
            && let Err(e) =
                store.save_setting(EMERGENCY_SETTING, if enabled { "true" } else { "false" }, self.clock.wall_now_ms())
        {
            tracing::error!(error = %e, "could not persist the emergency-fallback switch");
        }
        if share && let Some(r) = self.replicas.get() {
            r.publish(vec![SharedChange::Emergency { enabled }], self.clock.wall_now_ms());
        } else if !share && was != enabled {
            tracing::warn!(enabled, "another replica switched the emergency fallback");
        }
    }

    /// M14: a lease whose key may no longer use its connection (the key, the connection or the
    /// permission left the config) ends as INVALIDATED; its fence refuses from now on. Run at
    /// start and after each reload.
    pub fn invalidate_stale_leases(&self) -> Result<usize, StoreError> {
        let Some(store) = &self.store else { return Ok(0) };
        let allowed = |key_id: &str, connection: &str| self.may_hold_lease(key_id, connection);
        let invalidated = store.invalidate_leases(&allowed, self.clock.wall_now_ms())?;
        if invalidated > 0 {
            tracing::warn!(invalidated, "leases whose key may no longer use their connection were invalidated");
        }
        Ok(invalidated)
    }

    /// Whether key `key_id` may hold a lease on `connection` under this config.
    pub fn may_hold_lease(&self, key_id: &str, connection: &str) -> bool {
        self.config.keys.iter().any(|k| k.id == key_id && k.may_lease_connection(connection))
            && self.config.connections.iter().any(|c| c.id == connection)
    }
}
