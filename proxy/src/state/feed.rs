//! The operator's feed of state changes (`GET /api/monitoring/events`, see
//! [`crate::ops::events`]): a ring of the last [`CAPACITY`] changes, each with an id that
//! increases by one, which any number of event streams read at their own pace. A stream holds
//! only its place in the ring, so a slow or stalled reader costs the gateway nothing beyond the
//! ring itself; one that falls more than the ring behind is told to resync.

use crate::state::clock::{Clock, ms, rfc3339};
use ferroute_core::engine::Event;
use ferroute_core::usage_limit::LaneChange;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// How many changes the ring keeps.
pub const CAPACITY: usize = 1024;

/// One change.
#[derive(Debug)]
pub struct Item {
    /// Its id (1, 2, …; one more than the change before it).
    pub id: u64,
    /// What kind of change: `breaker`, `cooldown`, `terminal`, `recovered`, `lockout`,
    /// `lockout_ended`, `lockouts_cleared`, `lane`, `reload`, `settings`, `emergency`, `lease`,
    /// `oauth`.
    pub kind: &'static str,
    /// The change as JSON (with `at`, its wall-clock time).
    pub data: String,
}

/// What a reader gets after its place.
#[derive(Debug)]
pub enum Read {
    /// The changes after it, oldest first (none: nothing new).
    Items(Vec<Arc<Item>>),
    /// It fell out of the ring, or names a change this process never made (another process's
    /// id): it must reload the state it shows; the feed goes on after `newest`.
    Behind {
        /// The newest change's id.
        newest: u64,
    },
}

#[derive(Default)]
struct Ring {
    items: VecDeque<Arc<Item>>,
    newest: u64,
    closed: bool,
}

/// The feed.
#[derive(Default)]
pub struct Feed {
    ring: Mutex<Ring>,
    wake: tokio::sync::Notify,
}

impl Feed {
    fn ring(&self) -> MutexGuard<'_, Ring> {
        // Each update is one push and pop: a poisoned lock is still consistent.
        self.ring.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a change of `kind` (its `at` is added to `data`) and wakes the readers.
    pub fn publish(&self, kind: &'static str, at_wall_ms: u64, mut data: Value) -> u64 {
        if let Value::Object(m) = &mut data {
            m.insert("at".into(), Value::String(rfc3339(at_wall_ms)));
        }
        let id = {
            let mut r = self.ring();
            r.newest += 1;
            let id = r.newest;
            r.items.push_back(Arc::new(Item { id, kind, data: data.to_string() }));
            if r.items.len() > CAPACITY {
                r.items.pop_front();
            }
            id
        };
        self.wake.notify_waiters();
        id
    }

    /// The newest change's id (0 before the first).
    pub fn newest(&self) -> u64 {
        self.ring().newest
    }

    /// Up to `max` changes after `after` (a change's id; 0 for the start of this process).
    pub fn after(&self, after: u64, max: usize) -> Read {
        let r = self.ring();
        let oldest = r.items.front().map_or(r.newest + 1, |i| i.id);
        if after > r.newest || after + 1 < oldest {
            return Read::Behind { newest: r.newest };
        }
        let skip = usize::try_from(after + 1 - oldest).unwrap_or(usize::MAX);
        Read::Items(r.items.iter().skip(skip).take(max).cloned().collect())
    }

    /// Waits until a change after `after` is published or the feed closes; returns at once if
    /// one already was.
    pub async fn changed(&self, after: u64) {
        let notified = self.wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        {
            let r = self.ring();
            if r.newest != after || r.closed {
                return;
            }
        }
        notified.await;
    }

    /// Ends every stream (the gateway is shutting down).
    pub fn close(&self) {
        self.ring().closed = true;
        self.wake.notify_waiters();
    }

    /// Whether the feed was closed.
    pub fn is_closed(&self) -> bool {
        self.ring().closed
    }

    /// Publishes an engine event (session pins are not published: their keys may name clients).
    pub fn engine_event(&self, ev: &Event, clock: &Clock, now: Instant) {
        let Some((kind, data)) = describe(ev, clock) else { return };
        self.publish(kind, clock.wall_ms(now), data);
    }
}

/// An engine event as a feed change.
fn describe(ev: &Event, clock: &Clock) -> Option<(&'static str, Value)> {
    let named = |v: &Option<Arc<str>>| v.as_deref().map(str::to_owned);
    Some(match ev {
        Event::Breaker(t) => (
            "breaker",
            json!({"provider": &*t.provider, "from": t.from.as_str(), "to": t.to.as_str(), "reason": format!("{:?}", t.reason)}),
        ),
        Event::ConnectionCooldown { connection, until, level, reason } => (
            "cooldown",
            json!({"connection": &**connection, "until": rfc3339(clock.wall_ms(*until)), "level": level, "reason": reason.as_str()}),
        ),
        Event::ConnectionTerminal { connection, state } => {
            ("terminal", json!({"connection": &**connection, "state": state.as_str()}))
        }
        Event::ConnectionRecovered { connection } => ("recovered", json!({"connection": &**connection})),
        Event::Lockout { provider, connection, model, cooldown } => (
            "lockout",
            json!({"provider": &**provider, "connection": &**connection, "model": &**model, "cooldown_ms": ms(*cooldown)}),
        ),
        Event::LockoutDecayed { provider, connection, model } => {
            ("lockout_ended", json!({"provider": &**provider, "connection": &**connection, "model": &**model}))
        }
        Event::LockoutsCleared { provider, connection, model, removed } => (
            "lockouts_cleared",
            json!({"provider": named(provider), "connection": named(connection), "model": named(model), "removed": removed}),
        ),
        Event::Lane { connection, change } => {
            let change = match change {
                LaneChange::Accepted { until } => json!({"accepted": rfc3339(clock.wall_ms(*until))}),
                LaneChange::Ended(why) => json!({"ended": why.as_str()}),
                LaneChange::Reset(outcome) => json!({"reset": outcome.as_str()}),
            };
            ("lane", json!({"connection": &**connection, "change": change}))
        }
        Event::Pin(_) => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(r: Read) -> Vec<u64> {
        match r {
            Read::Items(v) => v.iter().map(|i| i.id).collect(),
            Read::Behind { newest } => panic!("behind (newest {newest})"),
        }
    }

    #[test]
    fn readers_get_what_came_after_their_place_and_fall_behind_past_the_ring() {
        let f = Feed::default();
        assert_eq!(ids(f.after(0, 10)), Vec::<u64>::new());
        for n in 0..3 {
            f.publish("reload", 0, json!({"n": n}));
        }
        assert_eq!(ids(f.after(0, 10)), vec![1, 2, 3]);
        assert_eq!(ids(f.after(1, 1)), vec![2]);
        assert_eq!(ids(f.after(3, 10)), Vec::<u64>::new());
        // An id this process never gave out (another process's) must resync.
        assert!(matches!(f.after(9, 10), Read::Behind { newest: 3 }));
        for n in 0..CAPACITY {
            f.publish("reload", 0, json!({"n": n}));
        }
        let newest = 3 + CAPACITY as u64;
        assert!(matches!(f.after(2, 10), Read::Behind { newest: n } if n == newest), "2 fell out of the ring");
        assert_eq!(ids(f.after(3, 1)), vec![4], "3 is the last one the ring let go: its successor is still there");
        let Read::Items(last) = f.after(newest - 1, 10) else { panic!("behind") };
        assert_eq!(last[0].data, format!(r#"{{"at":"1970-01-01T00:00:00.000Z","n":{}}}"#, CAPACITY - 1));
    }

    #[tokio::test]
    async fn a_reader_wakes_for_a_new_change_and_when_the_feed_closes() {
        let f = Arc::new(Feed::default());
        f.changed(f.newest() + 7).await; // not the newest: returns at once
        let g = Arc::clone(&f);
        let waiting = tokio::spawn(async move { g.changed(0).await });
        tokio::task::yield_now().await;
        f.publish("emergency", 0, json!({"enabled": true}));
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting).await.expect("woken").expect("joined");
        let g = Arc::clone(&f);
        let waiting = tokio::spawn(async move { g.changed(1).await });
        tokio::task::yield_now().await;
        f.close();
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting).await.expect("woken").expect("joined");
        assert!(f.is_closed());
    }
}
