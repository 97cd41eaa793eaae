//! The gateway's admission queues (M9, and M7's per-connection semaphores): waiting for a
//! slot, giving it back, and what health and reloads read of them.

use super::{Gateway, QueueEntry, lock};
use ferroute_core::admission::{AdmissionQueue, Enter, FailMode, Permit, QueueLimits, QueueRejection, WaitExpiry};
use hyper_util::client::legacy::connect::Connect;
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::oneshot;

impl<C: Connect + Clone + Send + Sync + 'static> Gateway<C> {
    /// Waits for a slot in queue `key`. Dropping the returned future (client gone) gives its
    /// place back.
    pub async fn admit(
        self: &Arc<Self>,
        key: &str,
        limits: QueueLimits,
        mode: FailMode,
    ) -> Result<Slot<C>, QueueRejection> {
        let now = self.clock.now();
        let (rx, waiter, deadline) = {
            let mut queues = lock(&self.queues);
            // Looked up by reference: a request through an existing queue copies no key.
            let entry = match queues.get_mut(key) {
                Some(entry) => entry,
                None => queues.entry(key.to_owned()).or_insert_with(|| QueueEntry {
                    key: Arc::from(key),
                    queue: AdmissionQueue::new(key, limits, mode),
                    wakers: BTreeMap::new(),
                    // Never set: the first release makes its series (at 0), as before.
                    published: usize::MAX,
                }),
            };
            entry.queue.set_limits(limits);
            match entry.queue.try_enter(now) {
                Enter::Run(p) => {
                    return Ok(Slot { gw: Arc::clone(self), key: Arc::clone(&entry.key), permit: Some(p) });
                }
                Enter::Bypass => return Ok(Slot { gw: Arc::clone(self), key: Arc::clone(&entry.key), permit: None }),
                Enter::Reject(r) => return Err(r),
                Enter::Wait { waiter, deadline } => {
                    let (tx, rx) = oneshot::channel();
                    entry.wakers.insert(waiter, tx);
                    self.publish(key, entry);
                    (rx, waiter, deadline)
                }
            }
        };
        let mut cancel = CancelWait { gw: Arc::clone(self), key: key.to_owned(), waiter, armed: true };
        let woken = tokio::select! {
            biased;
            r = rx => r.is_ok(),
            () = tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)) => false,
        };
        cancel.armed = false;
        let mut queues = lock(&self.queues);
        let Some(entry) = queues.get_mut(key) else {
            return Ok(Slot { gw: Arc::clone(self), key: Arc::from(key), permit: None });
        };
        entry.wakers.remove(&waiter);
        let result = if woken {
            match entry.queue.take_promoted(waiter) {
                Some(p) => Ok(Some(p)),
                None => map_expiry(entry.queue.expire(waiter)),
            }
        } else {
            map_expiry(entry.queue.expire(waiter))
        };
        self.publish(key, entry);
        result.map(|permit| Slot { gw: Arc::clone(self), key: Arc::clone(&entry.key), permit })
    }

    /// Sets queue `key`'s depth gauge, when the depth moved since it was last set (a slot
    /// taken and given back without a wait leaves it where it was).
    fn publish(&self, key: &str, entry: &mut QueueEntry) {
        let queued = entry.queue.queued();
        if queued != entry.published {
            entry.published = queued;
            self.metrics.queue(key, queued);
        }
    }

    fn release(&self, key: &str, permit: Permit) {
        let mut queues = lock(&self.queues);
        if let Some(entry) = queues.get_mut(key) {
            if let Some(next) = entry.queue.release(permit)
                && let Some(tx) = entry.wakers.remove(&next)
            {
                let _ = tx.send(());
            }
            self.publish(key, entry);
        }
    }

    fn cancel_wait(&self, key: &str, waiter: u64) {
        let mut queues = lock(&self.queues);
        if let Some(entry) = queues.get_mut(key) {
            entry.wakers.remove(&waiter);
            if let Some(next) = entry.queue.cancel(waiter)
                && let Some(tx) = entry.wakers.remove(&next)
            {
                let _ = tx.send(());
            }
        }
    }

    /// Forgets queues nobody waits in or runs through (a reload prunes the queues of removed
    /// connections this way; a queue is recreated when a request needs it).
    pub fn prune_idle_queues(&self) {
        lock(&self.queues).retain(|_, e| e.queue.queued() > 0 || e.queue.running() > 0 || !e.wakers.is_empty());
    }

    /// Queue depths by queue.
    pub fn queue_depths(&self) -> Vec<(String, usize, usize)> {
        let mut depths: Vec<_> =
            lock(&self.queues).iter().map(|(k, e)| (k.clone(), e.queue.queued(), e.queue.running())).collect();
        depths.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        depths
    }
}

fn map_expiry(e: WaitExpiry) -> Result<Option<Permit>, QueueRejection> {
    match e {
        WaitExpiry::Promoted(p) => Ok(Some(p)),
        WaitExpiry::Bypass => Ok(None),
        WaitExpiry::TimedOut(r) => Err(r),
    }
}

/// A held queue slot (or a fail-open pass); released on drop.
pub struct Slot<C: Connect + Clone + Send + Sync + 'static> {
    gw: Arc<Gateway<C>>,
    key: Arc<str>,
    permit: Option<Permit>,
}

impl<C: Connect + Clone + Send + Sync + 'static> Drop for Slot<C> {
    fn drop(&mut self) {
        if let Some(p) = self.permit.take() {
            self.gw.release(&self.key, p);
        }
    }
}

struct CancelWait<C: Connect + Clone + Send + Sync + 'static> {
    gw: Arc<Gateway<C>>,
    key: String,
    waiter: u64,
    armed: bool,
}

impl<C: Connect + Clone + Send + Sync + 'static> Drop for CancelWait<C> {
    fn drop(&mut self) {
        if self.armed {
            self.gw.cancel_wait(&self.key, self.waiter);
        }
    }
}
