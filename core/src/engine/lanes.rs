//! The Claude usage-limit lanes (M4), as the engine exposes them.

use super::Engine;
use crate::usage_limit::{LaneRequest, LaneView, Lanes, Options as LaneOptions, ResetOutcome, Seen, Step as LaneStep};
use std::time::{Duration, Instant};

impl Engine {
    /// The Claude usage-limit lanes (M4).
    pub fn lanes(&self) -> &Lanes {
        &self.lanes
    }

    /// Whether a request sent to `connection` now goes in the low-priority lane (M4).
    pub fn lane_slow(&self, connection: &str, now: Instant) -> bool {
        self.lanes.slow(connection, now)
    }

    /// `connection`'s lane at `now` (M4).
    pub fn lane_view(&self, connection: &str, now: Instant) -> LaneView {
        self.lanes.view(connection, now)
    }

    /// What a response means for the connection's usage-limit handling (M4); a `Retry` keeps
    /// the response away from the cooldown path. Waits draw their jitter from the engine's RNG.
    pub fn lane_response(
        &mut self,
        seen: &Seen<'_>,
        opts: LaneOptions,
        req: &mut LaneRequest,
        start_left: Duration,
    ) -> LaneStep {
        self.lanes.on_response(seen, opts, req, start_left, &mut self.rng)
    }

    /// What a session-limit reset try came to (M4).
    pub fn lane_reset(
        &mut self,
        seen: &Seen<'_>,
        outcome: ResetOutcome,
        opts: LaneOptions,
        req: &mut LaneRequest,
    ) -> LaneStep {
        self.lanes.on_reset(seen, outcome, opts, req)
    }
}
