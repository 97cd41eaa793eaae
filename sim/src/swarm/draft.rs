//! What the swarm's generator builds a scenario in, and the pieces every part of it uses.

use scenarios::scenario::{Fault, FaultAction, ResponseExpect, StateExpect, UpstreamSpec, Workload};

/// Length of the safety phase.
pub const SAFETY_MS: u64 = 120_000;
/// Time allowed after the safety phase for everything to heal. The longest self-healing
/// timer the swarm can cause is an API-key breaker after repeated failed probes
/// (30 s × multiplier 4 = 120 s), plus one request interval.
pub const LIVENESS_BOUND_MS: u64 = 150_000;
/// When the liveness phase checks that everything healed.
pub const CHECK_AT_MS: u64 = SAFETY_MS + LIVENESS_BOUND_MS;

/// A scenario being drawn: what each part of the generator adds to.
#[derive(Default)]
pub(crate) struct Draft {
    pub gateway: String,
    pub upstreams: Vec<UpstreamSpec>,
    pub workload: Vec<Workload>,
    pub faults: Vec<Fault>,
    pub responses: Vec<ResponseExpect>,
    pub states: Vec<StateExpect>,
    pub replicas: Vec<String>,
    /// The API-key connections.
    pub connections: Vec<String>,
    pub providers: usize,
    /// Keys may end or stay locked past the liveness bound (real answers that do so were
    /// drawn): the operator renews every key as the safety phase ends.
    pub renew: bool,
    /// Whether such answers may be drawn (a seed of one gateway, whose reload renews them).
    pub renewable: bool,
}

impl Draft {
    /// The gateway's link to `host` (from `from`) fails at `at` and heals `for_ms` later.
    pub fn cut(&mut self, from: &str, host: &str, at: u64, for_ms: u64) {
        for (at_ms, action) in [(at, FaultAction::Partition), (at + for_ms, FaultAction::Repair)] {
            self.faults.push(Fault { at_ms, action, a: from.into(), b: host.into(), gateway: None });
        }
    }

    /// `client`'s last request must be answered 200, and `connection` (if any) be active, when
    /// the liveness phase ends.
    pub fn must_heal(&mut self, client: &str, seq: u64, connection: Option<&str>) {
        self.responses.push(ResponseExpect { client: client.into(), seq, status: Some(200), ..Default::default() });
        if let Some(c) = connection {
            self.states.push(active(c));
        }
    }
}

/// Connection `c` is active when the liveness phase ends.
pub(crate) fn active(c: &str) -> StateExpect {
    StateExpect {
        at_ms: CHECK_AT_MS,
        connection: Some(c.to_owned()),
        status: Some("active".into()),
        ..Default::default()
    }
}

/// A patient client: a request for `model` every 2 s from `start_ms` on, `count` of them.
pub(crate) fn steady(
    client: &str,
    model: String,
    start_ms: u64,
    count: u64,
    stream: bool,
    anthropic: bool,
) -> Workload {
    Workload { start_ms, every_ms: 2_000, count, stream, anthropic, ..Workload::of(client, &model) }
}
