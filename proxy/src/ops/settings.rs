//! `GET|PATCH|DELETE /api/resilience/settings` (admin): the operator's runtime overrides of
//! `[resilience]`.
//!
//! - `GET` answers `effective` (what runs), `file` (the config's own settings, the environment
//!   applied), `overrides` (a partial `[resilience]` tree) and `error` (why stored overrides do
//!   not apply over a changed file, if they do not).
//! - `PATCH` takes a JSON merge patch (RFC 7396) of the overrides: objects merge, a value
//!   replaces, `null` removes an override. The result is checked by the same code as the config
//!   file ([`ResilienceSettings::overlay_json`]); a problem is a 422 naming every field, and
//!   nothing changes. Otherwise the overrides are stored, then applied at once, as a reload
//!   applies a config: requests in flight finish on the settings they started with.
//! - `DELETE` removes every override: the file's settings run again.
//!
//! Overrides are kept in the state store, so they survive a restart, and stay over the file's
//! settings across a reload.

use crate::edge::body::read_json;
use crate::edge::errors::{Body, ProxyError, Source, json_response};
use crate::ops::overrides::{OVERRIDES_SETTING, problems};
use crate::ops::reload::Serving;
use http::{Method, Request, Response};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::Connect;
use serde_json::{Map, Value, json};
use std::time::Duration;

/// Applies an RFC 7396 merge patch: objects merge, `null` removes, anything else replaces.
/// Objects left empty are removed.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else { return };
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
            continue;
        }
        let slot = t.entry(k.clone()).or_insert(Value::Null);
        merge_patch(slot, v);
        if slot.as_object().is_some_and(Map::is_empty) {
            t.remove(k);
        }
    }
}

/// The answer of every method: the settings that run, the file's, the overrides.
fn view<C: Connect + Clone + Send + Sync + 'static>(serving: &Serving<C>) -> Response<Body> {
    let gw = serving.current();
    let o = serving.overrides();
    let body = json!({
        "effective": gw.config.resilience,
        "file": o.file,
        "overrides": o.values,
        "error": o.error,
        "persisted": gw.store.is_some(),
    });
    json_response(200, body.to_string())
}

/// The endpoint.
pub async fn handle<C: Connect + Clone + Send + Sync + 'static>(
    serving: &Serving<C>,
    req: Request<Incoming>,
) -> Response<Body> {
    let next = match *req.method() {
        Method::GET => return view(serving),
        Method::DELETE => Value::Object(Map::new()),
        Method::PATCH => {
            let limit = Duration::from_millis(serving.current().config.server.body_read_timeout_ms);
            let patch = match read_json(req, 64 * 1024, limit).await {
                Ok((_, p)) => p,
                Err(e) => return e.into_response(),
            };
            let mut next = serving.overrides().values.clone();
            merge_patch(&mut next, &patch);
            next
        }
        // The router sends only these three.
        _ => return view(serving),
    };
    if let Err(resp) = set(serving, next) {
        return *resp;
    }
    view(serving)
}

/// Checks `next` over the file's settings, stores it, then runs with it; nothing changes on an
/// error.
fn set<C: Connect + Clone + Send + Sync + 'static>(
    serving: &Serving<C>,
    next: Value,
) -> Result<(), Box<Response<Body>>> {
    serving.exclusively(|| {
        let file = serving.overrides().file.clone();
        let effective = file.overlay_json(&next).map_err(|e| {
            let body = json!({
                "error": {
                    "message": "settings refused; nothing was changed",
                    "type": "invalid_request_error",
                    "code": "invalid_settings",
                    "problems": problems(&e),
                }
            });
            Box::new(json_response(422, body.to_string()))
        })?;
        let gw = serving.current();
        let wall = gw.clock.wall_now_ms();
        if let Some(store) = &gw.store
            && let Err(e) = store.save_setting(OVERRIDES_SETTING, &next.to_string(), wall)
        {
            tracing::error!(error = %e, "could not store the resilience overrides");
            let e = ProxyError::new(
                Source::Internal,
                500,
                "store_error",
                "the overrides could not be stored; nothing was changed",
            );
            return Err(Box::new(e.into_response()));
        }
        {
            let mut o = serving.overrides();
            o.values = next.clone();
            o.error = None;
        }
        let mut config = gw.config.clone();
        config.resilience = effective;
        serving.install(gw.successor(config));
        tracing::warn!(overrides = %next, "operator changed the resilience settings");
        gw.feed.publish("settings", wall, json!({"overrides": next}));
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_merge_patch_merges_objects_replaces_values_and_removes_nulls_and_emptied_objects() {
        let mut t =
            json!({"model_lockout": {"enabled": true, "base_cooldown_ms": 60000}, "routing": {"max_attempts": 3}});
        merge_patch(
            &mut t,
            &json!({"model_lockout": {"base_cooldown_ms": null, "max_cooldown_ms": 90000}, "routing": {"max_attempts": null}}),
        );
        assert_eq!(t, json!({"model_lockout": {"enabled": true, "max_cooldown_ms": 90000}}));
        merge_patch(&mut t, &json!({"model_lockout": null}));
        assert_eq!(t, json!({}));
    }
}
