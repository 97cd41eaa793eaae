//! M9: request queue admission (per provider + connection), and the M7 `max_concurrent`
//! semaphore, as one pure queue machine.
//!
//! The admission check is a pure function of the queue depth. The queue machine holds counts
//! and deadlines only; the shell parks waiters and wakes the ones the machine promotes.

use crate::settings::RequestQueueSettings;
use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, Instant};

/// Times are clamped to this range.
pub const MIN_TIME: Duration = Duration::from_millis(1);
/// Times are clamped to this range.
pub const MAX_TIME: Duration = Duration::from_secs(86_400);
/// Depth limit range.
pub const MAX_DEPTH: usize = 100_000;

/// The local queue error codes. None of them trips a breaker or cools a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueCode {
    /// Too many requests already wait (429).
    QueueFull,
    /// The queue-wait budget ran out (503).
    QueueTimeout,
    /// The execution budget ran out (504).
    ExecutionTimeout,
}

impl QueueCode {
    /// The wire code.
    pub fn as_str(self) -> &'static str {
        match self {
            QueueCode::QueueFull => "RATE_LIMIT_QUEUE_FULL",
            QueueCode::QueueTimeout => "RATE_LIMIT_QUEUE_TIMEOUT",
            QueueCode::ExecutionTimeout => "RATE_LIMIT_EXECUTION_TIMEOUT",
        }
    }

    /// The HTTP status the client gets.
    pub fn status(self) -> u16 {
        match self {
            QueueCode::QueueFull => 429,
            QueueCode::QueueTimeout => 503,
            QueueCode::ExecutionTimeout => 504,
        }
    }
}

impl fmt::Display for QueueCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A local refusal, as a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueRejection {
    /// Which.
    pub code: QueueCode,
    /// A message naming the limit and the queue.
    pub message: String,
}

/// The pure admission check: reject when `queued` already reaches a positive `max_depth`.
pub fn check_queue_admission(queued: usize, max_depth: i64, identity: &str) -> Result<(), QueueRejection> {
    if max_depth <= 0 || (queued as u64) < max_depth as u64 {
        return Ok(());
    }
    Err(QueueRejection {
        code: QueueCode::QueueFull,
        message: format!("request queue for {identity} is full: {queued} waiting, maxQueueDepth {max_depth}"),
    })
}

/// A partial override (stored settings or one connection's `[connections.request_queue]`).
/// A time of 0 means "no override".
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QueueOverride {
    /// Queue-wait budget.
    pub max_wait_ms: Option<i64>,
    /// Execution budget.
    pub execution_max_wait_ms: Option<i64>,
    /// Depth limit (0 = unbounded).
    pub max_queue_depth: Option<i64>,
    /// Concurrency (0 = unlimited).
    pub concurrent_requests: Option<i64>,
}

/// Effective limits of one queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueLimits {
    /// Queue-wait budget.
    pub max_wait: Duration,
    /// Execution budget (raised to the executor's own start timeout when that is longer).
    pub execution_max_wait: Duration,
    /// Waiting requests allowed (0 = unbounded).
    pub max_queue_depth: usize,
    /// Executing requests allowed (0 = unlimited).
    pub concurrent: usize,
}

fn clamp_time(ms: i64) -> Duration {
    Duration::from_millis(ms.max(0) as u64).clamp(MIN_TIME, MAX_TIME)
}

impl QueueLimits {
    /// Precedence: `env_defaults` (settings after env overrides) < `stored` < `connection`.
    /// Times are clamped to 1 ms – 24 h, depths to 0 – 100 000.
    pub fn resolve(
        env_defaults: &RequestQueueSettings,
        stored: Option<&QueueOverride>,
        connection: Option<&QueueOverride>,
        executor_start_timeout: Option<Duration>,
    ) -> Self {
        let pick_time = |base: i64, f: fn(&QueueOverride) -> Option<i64>| {
            [stored, connection].into_iter().flatten().filter_map(f).rfind(|v| *v > 0).unwrap_or(base)
        };
        let pick_count = |base: i64, f: fn(&QueueOverride) -> Option<i64>| {
            [stored, connection].into_iter().flatten().filter_map(f).rfind(|v| *v >= 0).unwrap_or(base)
        };
        let max_wait = clamp_time(pick_time(env_defaults.max_wait_ms, |o| o.max_wait_ms));
        let mut execution = clamp_time(pick_time(env_defaults.execution_max_wait_ms, |o| o.execution_max_wait_ms));
        if let Some(t) = executor_start_timeout {
            execution = execution.max(t.min(MAX_TIME));
        }
        QueueLimits {
            max_wait,
            execution_max_wait: execution,
            max_queue_depth: pick_count(env_defaults.max_queue_depth, |o| o.max_queue_depth).clamp(0, MAX_DEPTH as i64)
                as usize,
            concurrent: pick_count(env_defaults.concurrent_requests, |o| o.concurrent_requests)
                .clamp(0, MAX_DEPTH as i64) as usize,
        }
    }
}

/// What to do when the queue is full or a wait times out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailMode {
    /// Reject (M9 request queue).
    Closed,
    /// Go ahead without a slot (M7 quota-share semaphore: never reject a dispatchable request).
    Open,
}

/// A running slot; hand it back with [`AdmissionQueue::release`].
#[derive(Debug, PartialEq, Eq)]
pub struct Permit {
    id: u64,
}

impl Permit {
    /// The id of the waiter or entry this permit belongs to.
    pub fn id(&self) -> u64 {
        self.id
    }
}

/// What `try_enter` decided.
#[derive(Debug, PartialEq, Eq)]
pub enum Enter {
    /// Run now.
    Run(Permit),
    /// Wait until promoted or `deadline`.
    Wait {
        /// The waiter's id.
        waiter: u64,
        /// When the queue-wait budget ends.
        deadline: Instant,
    },
    /// Fail-open: run without a slot.
    Bypass,
    /// Rejected at once.
    Reject(QueueRejection),
}

/// How a wait ended when the deadline fired.
#[derive(Debug, PartialEq, Eq)]
pub enum WaitExpiry {
    /// The waiter had already been promoted: run with this permit.
    Promoted(Permit),
    /// Timed out and removed (fail-closed).
    TimedOut(QueueRejection),
    /// Timed out and removed (fail-open): run without a slot.
    Bypass,
}

/// One queue: bounded running and waiting counts, FIFO promotion.
#[derive(Debug, Clone)]
pub struct AdmissionQueue {
    identity: String,
    limits: QueueLimits,
    mode: FailMode,
    running: usize,
    waiting: VecDeque<(u64, Instant)>,
    promoted: Vec<u64>,
    next_id: u64,
}

impl AdmissionQueue {
    /// A queue named `identity` (used in messages).
    pub fn new(identity: &str, limits: QueueLimits, mode: FailMode) -> Self {
        AdmissionQueue {
            identity: identity.to_owned(),
            limits,
            mode,
            running: 0,
            waiting: VecDeque::new(),
            promoted: Vec::new(),
            next_id: 0,
        }
    }

    /// Replaces the limits (settings changed); running and waiting requests are kept.
    pub fn set_limits(&mut self, limits: QueueLimits) {
        self.limits = limits;
    }

    /// The limits.
    pub fn limits(&self) -> QueueLimits {
        self.limits
    }

    /// Requests running (holding a permit).
    pub fn running(&self) -> usize {
        self.running
    }

    /// Requests waiting.
    pub fn queued(&self) -> usize {
        self.waiting.len()
    }

    fn permit(&mut self) -> Permit {
        self.next_id += 1;
        self.running += 1;
        Permit { id: self.next_id }
    }

    /// Asks to run one request.
    pub fn try_enter(&mut self, now: Instant) -> Enter {
        if self.limits.concurrent == 0 || (self.running < self.limits.concurrent && self.waiting.is_empty()) {
            return Enter::Run(self.permit());
        }
        if let Err(rejection) =
            check_queue_admission(self.waiting.len(), self.limits.max_queue_depth as i64, &self.identity)
        {
            return match self.mode {
                FailMode::Closed => Enter::Reject(rejection),
                FailMode::Open => Enter::Bypass,
            };
        }
        self.next_id += 1;
        let deadline = now + self.limits.max_wait;
        self.waiting.push_back((self.next_id, deadline));
        Enter::Wait { waiter: self.next_id, deadline }
    }

    /// Returns a slot; promotes the next waiter, whose id is returned for the shell to wake.
    pub fn release(&mut self, permit: Permit) -> Option<u64> {
        let _ = permit;
        self.running = self.running.saturating_sub(1);
        self.promote()
    }

    fn promote(&mut self) -> Option<u64> {
        if self.limits.concurrent != 0 && self.running >= self.limits.concurrent {
            return None;
        }
        let (id, _) = self.waiting.pop_front()?;
        self.running += 1;
        self.promoted.push(id);
        Some(id)
    }

    /// The shell calls this once for a promoted waiter to take its permit.
    pub fn take_promoted(&mut self, waiter: u64) -> Option<Permit> {
        let pos = self.promoted.iter().position(|w| *w == waiter)?;
        self.promoted.swap_remove(pos);
        Some(Permit { id: waiter })
    }

    /// The waiter's deadline fired (or the shell gave up waiting).
    pub fn expire(&mut self, waiter: u64) -> WaitExpiry {
        if let Some(p) = self.take_promoted(waiter) {
            return WaitExpiry::Promoted(p);
        }
        self.waiting.retain(|(id, _)| *id != waiter);
        match self.mode {
            FailMode::Open => WaitExpiry::Bypass,
            FailMode::Closed => WaitExpiry::TimedOut(QueueRejection {
                code: QueueCode::QueueTimeout,
                message: format!(
                    "request waited longer than maxWaitMs {} in the queue for {}",
                    self.limits.max_wait.as_millis(),
                    self.identity
                ),
            }),
        }
    }

    /// A waiting client went away: remove it (or hand back its promoted slot).
    pub fn cancel(&mut self, waiter: u64) -> Option<u64> {
        if let Some(p) = self.take_promoted(waiter) {
            return self.release(p);
        }
        self.waiting.retain(|(id, _)| *id != waiter);
        None
    }

    /// The earliest waiter deadline.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.waiting.iter().map(|(_, d)| *d).min()
    }
}

#[cfg(test)]
#[path = "admission_tests.rs"]
mod tests;
