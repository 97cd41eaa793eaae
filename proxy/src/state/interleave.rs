//! Interleaving points (FoundationDB's BUGGIFY, on our own shell): named places where, under
//! the simulation only, a seeded draw may make the task yield to the others or pause a few
//! (simulated) milliseconds — before and after each store call, before sending upstream, before
//! an outcome is recorded. The simulation runs the gateway on one thread, so without them two
//! requests never interleave between a check and a write that are separate calls; with them,
//! the swarm and scenarios that ask for it (`interleave = true`) see the orders a
//! multi-threaded runtime can produce.
//!
//! Off unless a simulation run turns them on for its thread ([`enable`]): in production a
//! point is one relaxed atomic load.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// How many threads have points on (none in production).
static ON: AtomicUsize = AtomicUsize::new(0);

/// The share of visits to a point that pause.
const CHANCE: f64 = 0.3;

struct Draws {
    rng: ChaCha8Rng,
    /// Visits and pauses per point.
    hits: BTreeMap<&'static str, (u64, u64)>,
}

thread_local! {
    static DRAWS: RefCell<Option<Draws>> = const { RefCell::new(None) };
}

/// Points on for this thread while the guard lives.
#[derive(Debug)]
pub struct Enabled(());

impl Drop for Enabled {
    fn drop(&mut self) {
        DRAWS.with(|d| d.borrow_mut().take());
        ON.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Turns the points on for the current thread (one simulation run), drawing from `seed`.
pub fn enable(seed: u64) -> Enabled {
    DRAWS.with(|d| *d.borrow_mut() = Some(Draws { rng: ChaCha8Rng::seed_from_u64(seed), hits: BTreeMap::new() }));
    ON.fetch_add(1, Ordering::Relaxed);
    Enabled(())
}

/// Each point's visits and pauses so far on this thread.
pub fn hits() -> BTreeMap<&'static str, (u64, u64)> {
    DRAWS.with(|d| d.borrow().as_ref().map(|d| d.hits.clone()).unwrap_or_default())
}

enum Pause {
    Yield(u32),
    Sleep(Duration),
}

fn draw(name: &'static str) -> Option<Pause> {
    DRAWS.with(|d| {
        let mut d = d.borrow_mut();
        let d = d.as_mut()?;
        let pause = d.rng.random_bool(CHANCE).then(|| {
            if d.rng.random_bool(0.5) {
                Pause::Yield(d.rng.random_range(1..=4))
            } else {
                Pause::Sleep(Duration::from_millis(d.rng.random_range(1..=20)))
            }
        });
        let h = d.hits.entry(name).or_default();
        h.0 += 1;
        h.1 += u64::from(pause.is_some());
        pause
    })
}

/// Interleaving point `name`: nothing, unless this thread's simulation run turned points on.
pub async fn point(name: &'static str) {
    if ON.load(Ordering::Relaxed) == 0 {
        return;
    }
    match draw(name) {
        None => {}
        Some(Pause::Yield(n)) => {
            for _ in 0..n {
                tokio::task::yield_now().await;
            }
        }
        Some(Pause::Sleep(d)) => tokio::time::sleep(d).await,
    }
}

/// A store call `f` between two visits of point `name` (before it starts, and after it ends
/// before its caller goes on).
pub async fn call<F: Future>(name: &'static str, f: F) -> F::Output {
    point(name).await;
    let out = f.await;
    point(name).await;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn points_pause_only_while_enabled_and_the_same_seed_pauses_alike() {
        let start = tokio::time::Instant::now();
        for _ in 0..50 {
            point("off").await;
        }
        assert_eq!((start.elapsed(), hits().len()), (Duration::ZERO, 0));
        let run = |seed| async move {
            let on = enable(seed);
            let start = tokio::time::Instant::now();
            for _ in 0..200 {
                point("p").await;
            }
            let seen = (start.elapsed(), hits());
            drop(on);
            seen
        };
        let (a, b, c) = (run(1).await, run(1).await, run(2).await);
        assert_eq!(a, b);
        assert_ne!(a, c);
        let (visits, pauses) = a.1["p"];
        assert_eq!(visits, 200);
        assert!((30..=90).contains(&pauses), "{pauses} pauses in 200 visits");
        assert!(hits().is_empty(), "off again once the guard is dropped");
    }
}
