//! Keys tried in turn: when one target's keys are ordered by priority or round robin alone (no
//! session, no `max_concurrent`), the pick is the first key in that order that is eligible and
//! admitted, so the keys after it are never checked. A decision among a provider's keys then
//! costs the same with eight keys or a thousand, as long as the next key in turn can serve.
//!
//! Round robin here starts at the key after the one last picked (in the listed order), and
//! skips keys that cannot serve: with one key of four cooling, the other three share the
//! requests evenly.

use super::*;
use crate::tried::Tried;

/// Why a candidate is shut out, and for how long.
pub(super) type Shut = (ExclusionReason, Duration);

/// A provider's breaker refusal and provider-wide cooldown, looked up once for a run of its
/// candidates (the keys of one provider are listed together; nothing changes them while the
/// candidates are checked).
#[derive(Default)]
pub(super) struct Run<'c> {
    provider: Option<&'c str>,
    shut: Option<Shut>,
    cooling: Duration,
}

/// Whether `c` is tried in turn together with `first`: both may be, for one target and one
/// connection strategy.
fn alike(first: &Candidate<'_>, c: &Candidate<'_>) -> bool {
    c.traits.tried_in_turn()
        && c.traits.target == first.traits.target
        && c.traits.connection_strategy == first.traits.connection_strategy
}

/// Whether `candidates` are tried in turn: no session, one target, and every key may be.
pub(super) fn in_turn(candidates: &[Candidate<'_>], route: &Route<'_>) -> bool {
    candidates.first().is_some_and(|first| route.session.is_none() && candidates.iter().all(|c| alike(first, c)))
}

impl Engine {
    /// Why candidate `i` (`c`) cannot be tried now, if it cannot: tried or exhausted by this
    /// request, more tools than its model takes, its provider's breaker or cooldown, or its
    /// connection's cooldown, terminal state or model lockout.
    #[inline(always)]
    pub(super) fn shut_out<'c>(
        &self,
        now: Instant,
        (i, c): (usize, &Candidate<'c>),
        route: &Route<'_>,
        tried: &Tried,
        run: &mut Run<'c>,
    ) -> Option<Exclusion> {
        let shut = |reason, retry_after| Some(Exclusion { index: i, reason, retry_after });
        if tried.was_tried(i) || tried.is_exhausted(c.connection) {
            return shut(ExclusionReason::Skipped, Duration::ZERO);
        }
        if route.ask.tools > 0
            && let Some(limit) = self.tool_limit(c.provider, c.model)
            && route.ask.tools > limit
        {
            return shut(ExclusionReason::ToolLimit, Duration::ZERO);
        }
        if !run.provider.is_some_and(|p| std::ptr::eq(p, c.provider) || p == c.provider) {
            run.shut = self.breaker_exclusion(now, c.provider);
            run.cooling = self.provider_cooldown(now, c);
            run.provider = Some(c.provider);
        }
        let (reason, retry_after) = run.shut.or_else(|| self.connection_exclusion(now, c, run.cooling))?;
        shut(reason, retry_after)
    }

    /// [`Engine::select`] for `n` keys expected to be tried in turn, each built only when it is
    /// checked (`key(i)`, `i < n`): one target, one connection strategy (priority or round
    /// robin), no `max_concurrent` ([`Traits::tried_in_turn`]), and no session. A request over a
    /// provider's thousand keys then builds and checks one key, not a thousand, while the next
    /// key in turn can serve. The pick is the first key eligible and admitted by its breaker,
    /// from the first key, or for round robin from the key after the one last picked. Should a
    /// key checked on the way, or the route, not fit, every key is built and `select` decides,
    /// as it would have. The indices are those of the keys in the caller's list.
    #[inline(never)]
    pub fn select_keys_in_turn<'c>(
        &mut self,
        now: Instant,
        n: usize,
        key: impl Fn(usize) -> Candidate<'c>,
        route: &Route<'_>,
        tried: &Tried,
    ) -> Selection {
        if let Some(spent) = self.budget_spent(tried) {
            return spent;
        }
        if n == 0 {
            return Selection::NoneEligible(Vec::new());
        }
        let first = key(0);
        if route.session.is_some() || !first.traits.tried_in_turn() {
            return self.select(now, &(0..n).map(&key).collect::<Vec<_>>(), route, tried);
        }
        let strategy = first.traits.connection_strategy;
        let provider = first.provider;
        let start = match strategy {
            Strategy::RoundRobin => *self.connection_memory.cursor(provider) % n,
            _ => 0,
        };
        let mut excluded = Vec::new();
        let mut run = Run::default();
        for k in 0..n {
            let i = if start + k < n { start + k } else { start + k - n };
            let c = &key(i);
            if !alike(&first, c) {
                // Nothing has changed yet: checks read state, only an admission writes it.
                return self.select(now, &(0..n).map(&key).collect::<Vec<_>>(), route, tried);
            }
            if let Some(e) = self.shut_out(now, (i, c), route, tried, &mut run) {
                excluded.push(e);
                continue;
            }
            match self.admit(now, (i, c), route) {
                Ok(ticket) => {
                    if strategy == Strategy::RoundRobin {
                        *self.connection_memory.cursor(provider) = i + 1;
                    }
                    return Selection::Pick { index: i, ticket };
                }
                Err(e) => excluded.push(e),
            }
        }
        excluded.sort_by_key(|e| e.index);
        Selection::NoneEligible(excluded)
    }

    /// The refusal of a request that has used its attempt budget (`routing.max_attempts`).
    pub(super) fn budget_spent(&self, tried: &Tried) -> Option<Selection> {
        (i64::from(tried.attempts()) >= self.settings.routing.max_attempts)
            .then(|| Selection::BudgetSpent { attempts: tried.attempts() })
    }

    /// Admits eligible candidate `i` (`c`) through its provider's breaker and marks its
    /// connection selected and dispatched (and used by the session, if any). The breaker may
    /// still refuse: a probe slot taken by an earlier candidate of this request.
    pub(super) fn admit(
        &mut self,
        now: Instant,
        (i, c): (usize, &Candidate<'_>),
        route: &Route<'_>,
    ) -> Result<Ticket, Exclusion> {
        match self.breakers.get_or_insert(c.provider, self.derived.breaker(c.class), now).try_admit(now) {
            Admission::Admit(ticket) | Admission::Probe(ticket) => {
                let place = self.conns.place(c);
                self.conns.state_at(place).on_selected(now);
                self.conns.dispatched_at(place);
                if route.session.is_some() {
                    self.affinity.used(now, c.connection);
                }
                Ok(ticket)
            }
            Admission::Reject { retry_after } => {
                Err(Exclusion { index: i, reason: ExclusionReason::CircuitOpen, retry_after })
            }
        }
    }
}
