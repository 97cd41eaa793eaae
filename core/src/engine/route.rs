//! Routing decisions: which candidate to try next (targets by the route's strategy, then
//! connections by their provider's), the M7 gate, and whether a combo waits for a cooldown
//! (M8).

use super::*;
use crate::strategy::simple::extend_rotated;
use crate::strategy::{Item, rank, stable_hash};
use crate::tried::Tried;
use rand::RngExt;
use turn::{Run, in_turn};

impl Engine {
    /// Picks one eligible candidate by the route's strategies, admits it through its
    /// provider's breaker and marks the connection selected. `tried` says what this request
    /// already tried (those candidates, and connections a connection-level failure exhausted,
    /// are skipped); once its attempts reach `[resilience.routing] max_attempts` nothing more
    /// is picked.
    pub fn select(
        &mut self,
        now: Instant,
        candidates: &[Candidate<'_>],
        route: &Route<'_>,
        tried: &Tried,
    ) -> Selection {
        if let Some(spent) = self.budget_spent(tried) {
            return spent;
        }
        if in_turn(candidates, route) {
            return self.select_keys_in_turn(now, candidates.len(), |i| candidates[i], route, tried);
        }
        let mut excluded = Vec::new();
        // The eligible indices and their order are kept between calls (cleared, not freed).
        let mut eligible = std::mem::take(&mut self.scratch.eligible);
        let mut order = std::mem::take(&mut self.scratch.order);
        eligible.clear();
        order.clear();
        let facts = self.eligible_into(now, candidates, route, tried, &mut excluded, &mut eligible);
        // Try eligible candidates in strategy order; the breaker may still refuse (a probe
        // slot was taken by the previous candidate of the same provider).
        self.order_into(now, candidates, &eligible, facts, route, &mut order);
        let mut picked = None;
        for &i in &order {
            match self.admit(now, (i, &candidates[i]), route) {
                Ok(ticket) => {
                    picked = Some(Selection::Pick { index: i, ticket });
                    break;
                }
                Err(e) => excluded.push(e),
            }
        }
        self.scratch.eligible = eligible;
        self.scratch.order = order;
        picked.unwrap_or_else(|| {
            excluded.sort_by_key(|e| e.index);
            Selection::NoneEligible(excluded)
        })
    }

    /// Checks every candidate (in a function of its own: a small frame keeps the loop's state
    /// in registers): the excluded go to `excluded` with why, the eligible to `eligible`.
    /// Returns whether the eligible share one target, and whether any of them has a
    /// `max_concurrent` (M7).
    #[inline(never)]
    fn eligible_into(
        &self,
        now: Instant,
        candidates: &[Candidate<'_>],
        route: &Route<'_>,
        tried: &Tried,
        excluded: &mut Vec<Exclusion>,
        eligible: &mut Vec<usize>,
    ) -> (bool, bool) {
        let mut run = Run::default();
        // What the ordering needs of the eligible: whether they share one target, and whether
        // any is limited to a number of requests at once (M7).
        let mut target: Option<usize> = None;
        let (mut one_target, mut gated) = (true, false);
        for (i, c) in candidates.iter().enumerate() {
            match self.shut_out(now, (i, c), route, tried, &mut run) {
                Some(e) => excluded.push(e),
                None => {
                    one_target &= *target.get_or_insert(c.traits.target) == c.traits.target;
                    gated |= c.traits.max_concurrent.is_some();
                    eligible.push(i);
                }
            }
        }
        (one_target, gated)
    }

    /// The order in which `eligible` candidates are tried, appended to `out`: targets by the
    /// route's strategy, then each target's connections by its provider's connection strategy,
    /// a connection saturated at its `max_concurrent` behind the others (the M7 gate only
    /// deprioritises).
    /// `one_target_gated`: whether the eligible share one target, and whether any of them has
    /// a `max_concurrent`.
    fn order_into<'c>(
        &mut self,
        now: Instant,
        candidates: &[Candidate<'c>],
        eligible: &[usize],
        (one_target, gated): (bool, bool),
        route: &Route<'_>,
        out: &mut Vec<usize>,
    ) {
        if eligible.len() <= 1 && route.session.is_none() {
            out.extend_from_slice(eligible);
            return;
        }
        // M5: a pin is per (session, provider); only the first target of a provider in this
        // order moves it. Later targets of the same provider only read it, so that a combo with
        // several targets on one provider does not re-pin the session once per target.
        let mut decided: Vec<&'c str> = Vec::new();
        // One target (a plain model, or one combo target left): its connections in order.
        if one_target && !eligible.is_empty() {
            self.order_target(now, candidates, eligible, gated, route, &mut decided, out);
            return;
        }
        // Targets, in first-seen order, each with its eligible candidates.
        let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
        for &i in eligible {
            let t = candidates[i].traits.target;
            match groups.iter_mut().find(|(g, _)| *g == t) {
                Some((_, members)) => members.push(i),
                None => groups.push((t, vec![i])),
            }
        }
        for g in self.rank_targets(now, candidates, &groups, route) {
            let members = &groups[g].1;
            let gated = members.iter().any(|&m| candidates[m].traits.max_concurrent.is_some());
            self.order_target(now, candidates, members, gated, route, &mut decided, out);
        }
    }

    /// Appends one target's eligible connections (`members`) to `out`, in its provider's
    /// connection strategy, the M7 gate (`gated`: some member has a `max_concurrent`) and the
    /// session's pin.
    #[allow(clippy::too_many_arguments)]
    fn order_target<'c>(
        &mut self,
        now: Instant,
        candidates: &[Candidate<'c>],
        members: &[usize],
        gated: bool,
        route: &Route<'_>,
        decided: &mut Vec<&'c str>,
        out: &mut Vec<usize>,
    ) {
        if members.len() == 1 {
            let c = &candidates[members[0]];
            if let Some(session) = route.session
                && !decided.contains(&c.provider)
            {
                // Keeps (or moves) the session's pin to the one key that can serve.
                decided.push(c.provider);
                self.affinity.choose(now, session, c.provider, &[c.connection], route.session_ttl);
            }
            out.push(members[0]);
            return;
        }
        let first = &candidates[members[0]];
        let strategy = first.traits.connection_strategy;
        // Cursors, decks and credit among a provider's keys are the provider's own, shared by
        // every combo and model that uses it.
        if !gated && route.session.is_none() && matches!(strategy, Strategy::Priority | Strategy::RoundRobin) {
            // Nothing reorders them afterwards: written straight to `out`.
            let start = match strategy {
                Strategy::RoundRobin => self.connection_memory.rotate(first.provider, members.len()),
                _ => 0,
            };
            extend_rotated(out, members, start);
            return;
        }
        let mut within: Vec<usize> = if strategy == Strategy::Priority {
            members.to_vec()
        } else if strategy == Strategy::RoundRobin {
            let start = self.connection_memory.rotate(first.provider, members.len());
            let mut rotated = Vec::with_capacity(members.len());
            extend_rotated(&mut rotated, members, start);
            rotated
        } else {
            let usage = strategy.reads_usage();
            let items: Vec<Item> = members
                .iter()
                .map(|&m| {
                    let c = &candidates[m];
                    let mut item = Item {
                        index: m,
                        id: stable_hash(c.connection.as_bytes()),
                        weight: c.traits.connection_weight,
                        capacity: c.traits.max_concurrent,
                        ..Item::default()
                    };
                    if usage {
                        item.load = self.in_flight_of(c);
                        item.used = self.dispatched_count(c);
                        item.quota = self.usage.quotas.get(c.connection).map(|q| q.at(now)).unwrap_or_default();
                    }
                    item
                })
                .collect();
            rank(strategy, &items, &route.ask, first.provider, &mut self.connection_memory, &mut self.rng)
                .into_iter()
                .map(|p| members[p])
                .collect()
        };
        // M7: a connection at its max_concurrent goes behind those with room (stable).
        if gated {
            within.sort_by_key(|&m| {
                let c = &candidates[m];
                c.traits.max_concurrent.is_some_and(|max| self.in_flight_of(c) >= max)
            });
        }
        // M5: an eligible pin wins over the strategy and the gate.
        if let Some(session) = route.session {
            let pool: Vec<&str> = within.iter().map(|&m| candidates[m].connection).collect();
            let i = if decided.contains(&first.provider) {
                let pinned = self.affinity.pinned(now, session, first.provider);
                pool.iter().position(|c| Some(*c) == pinned)
            } else {
                decided.push(first.provider);
                self.affinity.choose(now, session, first.provider, &pool, route.session_ttl)
            };
            if let Some(i) = i
                && i > 0
            {
                let pinned = within.remove(i);
                within.insert(0, pinned);
            }
        }
        out.extend(within);
    }

    /// Orders the targets (groups of candidates) by the route's strategy.
    fn rank_targets(
        &mut self,
        now: Instant,
        candidates: &[Candidate<'_>],
        groups: &[(usize, Vec<usize>)],
        route: &Route<'_>,
    ) -> Vec<usize> {
        let last_good = self.usage.last_good.get(route.key);
        let target_items: Vec<Item> = groups
            .iter()
            .map(|(t, members)| {
                let c = &candidates[members[0]];
                let quota = members
                    .iter()
                    .filter_map(|&m| self.usage.quotas.get(candidates[m].connection).map(|q| q.at(now)))
                    .max_by(|a, b| a.remaining.unwrap_or(0.5).total_cmp(&b.remaining.unwrap_or(0.5)))
                    .unwrap_or_default();
                Item {
                    index: *t,
                    id: target_id(c),
                    weight: c.traits.weight,
                    cost: c.traits.cost,
                    context_window: c.traits.context_window,
                    load: members.iter().map(|&m| self.in_flight_of(&candidates[m])).sum(),
                    used: members.iter().map(|&m| self.dispatched_count(&candidates[m])).sum(),
                    quota,
                    health: self.health(now, c.provider),
                    latency_ms: self.usage.latency_ms.get(c.provider).copied(),
                    last_good: last_good.is_some_and(|(p, m)| p == c.provider && m == c.model),
                    capacity: None,
                }
            })
            .collect();
        rank(route.strategy, &target_items, &route.ask, route.key, &mut self.memory, &mut self.rng)
    }

    fn health(&self, now: Instant, provider: &str) -> f64 {
        match self.breaker_state(now, provider) {
            BreakerState::Closed => 1.0,
            BreakerState::Degraded => 0.7,
            BreakerState::HalfOpen => 0.5,
            BreakerState::Open => 0.0,
        }
    }

    /// M8: how long a combo request that ended on `reason` should wait before dispatching its
    /// whole set again, given the soonest moment a target is eligible (`wait`), the waits
    /// already taken and the time spent waiting. Never for quota, auth or not-found reasons;
    /// only within `max_wait_ms`, `max_attempts` and `budget_ms`. The wait includes a 50 ms
    /// margin past the deadline.
    pub fn cooldown_wait(&self, reason: Reason, wait: Duration, waits: u32, waited: Duration) -> Option<Duration> {
        let cw = &self.settings.combo_cooldown_wait;
        if !cw.enabled || cw.max_wait_ms <= 0 || cw.max_attempts <= 0 || !waitable(reason) || wait.is_zero() {
            return None;
        }
        let wait = wait + Duration::from_millis(50);
        let max_wait = Duration::from_millis(cw.max_wait_ms as u64);
        let budget = Duration::from_millis(cw.budget_ms.max(0) as u64);
        (wait <= max_wait && i64::from(waits) < cw.max_attempts && budget.saturating_sub(waited) >= wait)
            .then_some(wait)
    }

    /// M13: after `failing` got a 429 classified quota_exhausted or rate_limit_exceeded (see
    /// `decision`), cool every sibling connection (same provider, same egress IP, given by the
    /// shell with its `disable_cooling`) until the failing connection's own deadline. Returns
    /// the siblings that were cooled.
    pub fn cool_siblings(
        &mut self,
        now: Instant,
        failing: &str,
        decision: &Decision,
        siblings: &[(&str, bool)],
    ) -> Vec<String> {
        let ip_bucketed = decision.upstream_status == 429
            && matches!(decision.reason, Reason::QuotaExhausted | Reason::RateLimitExceeded);
        // The failing key's own deadline; a key that never cools (`disable_cooling`) still
        // names the IP bucket's wait through the decision.
        let own = self.conns.get(failing).and_then(|s| s.rate_limited_until(now));
        let decided = match decision.connection {
            ConnectionEffect::Cooldown { duration, .. } if !duration.is_zero() => Some(now + duration),
            _ => None,
        };
        let Some(until) = own.or(decided) else {
            return Vec::new();
        };
        if !ip_bucketed {
            return Vec::new();
        }
        let mut cooled = Vec::new();
        for (id, disable_cooling) in siblings {
            if *id == failing {
                continue;
            }
            if let Applied::Cooldown { until, level } =
                self.conns.get_mut(id).share_cooldown(now, until, decision.reason, *disable_cooling)
            {
                let connection = self.conns.slot(id).1;
                self.push(Event::ConnectionCooldown { connection, until, level, reason: decision.reason });
                cooled.push((*id).to_owned());
            }
        }
        cooled
    }

    /// The soonest any of `candidates` becomes eligible again by a timer (breaker, cooldown,
    /// lockout), if one is excluded by a timer at all: the `Retry-After` of a refusal.
    pub fn soonest_eligible(&self, now: Instant, candidates: &[Candidate<'_>]) -> Option<Duration> {
        crate::exclusion::soonest_by_timer(candidates.iter().filter_map(|c| self.exclusion(now, c)))
    }

    /// M8 at the end of a combo's set (nothing left to try): the soonest a candidate's
    /// connection cooldown or model lockout ends, and why it began, decide whether the request
    /// waits and dispatches the set again. Both the request's last failure (`last`) and that
    /// exclusion's own reason must be waitable, so a quota, auth or not-found cooldown is
    /// never waited for (of exclusions ending at the same instant, a waitable one decides). An
    /// open breaker or a provider cooldown is not waited for either: they shed load from a
    /// failing provider, and requests piling up to retry the moment it half opens would defeat
    /// them. The wait gets up to 10% (at most 1 s) of seeded jitter, so that
    /// requests waiting on one key do not all return at the same instant.
    pub fn set_wait(
        &mut self,
        now: Instant,
        candidates: &[Candidate<'_>],
        last: Option<Reason>,
        waits: u32,
        waited: Duration,
    ) -> Option<Duration> {
        let mut soonest: Option<(Duration, Reason)> = None;
        for c in candidates {
            let Some((why, left)) = self.exclusion(now, c) else { continue };
            if left.is_zero() {
                continue;
            }
            let reason = match why {
                ExclusionReason::Unavailable => {
                    self.conns.of(c).and_then(|s| s.last_error_type()).unwrap_or(Reason::Unknown)
                }
                ExclusionReason::ModelLockout => self
                    .lockouts
                    .remaining(now, c.provider, c.connection, c.model, c.family)
                    .map_or(Reason::Unknown, |(_, r)| r),
                _ => continue,
            };
            // Of exclusions ending at one instant, a waitable one decides: the target it frees
            // then is worth the wait, whatever else ends with it.
            if soonest.is_none_or(|(d, r)| left < d || (left == d && waitable(reason) && !waitable(r))) {
                soonest = Some((left, reason));
            }
        }
        let (wait, reason) = soonest?;
        let spread = (wait / 10).min(Duration::from_secs(1));
        let jitter = Duration::from_millis(self.rng.random_range(0..=spread.as_millis() as u64));
        let wait = wait + jitter;
        if let Some(l) = last {
            self.cooldown_wait(l, wait, waits, waited)?;
        }
        self.cooldown_wait(reason, wait, waits, waited)
    }
}

/// Whether M8 may wait out a cooldown or lockout that began for `reason`: a transient one, never
/// quota, auth or not-found.
fn waitable(reason: Reason) -> bool {
    matches!(reason, Reason::RateLimitExceeded | Reason::ServerError | Reason::ModelCapacity | Reason::Transport)
}

/// A target's identity for decks and rendezvous hashing: its provider and model.
fn target_id(c: &Candidate<'_>) -> u64 {
    stable_hash(c.provider.as_bytes()) ^ stable_hash(c.model.as_bytes()).rotate_left(17)
}
