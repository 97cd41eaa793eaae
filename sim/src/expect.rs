//! What a run is judged by besides the live checkers: the scenario's expected states, checked at
//! their moments, and at the end every request's answer, the expected responses, counts, calls,
//! log lines and targets, and that nothing is left in flight.

use crate::check::Outcome;
use crate::shared::{Shared, lock, ms};
use ferroute_core::connection::MAX_ERROR_CHARS;
use scenarios::scenario::Scenario;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub(crate) fn check_state(shared: &Arc<Mutex<Shared>>, e: &scenarios::scenario::StateExpect, t: u64) {
    let mut s = lock(shared);
    let Some(h) = &s.gateway else {
        s.rec.violate(t, format!("state check at {} ms: the gateway is not running", e.at_ms));
        return;
    };
    let now = h.base + Duration::from_millis(t.saturating_sub(ms(h.e0)));
    let gw = h.gw();
    let mut problems = Vec::new();
    // M6: the model's quota family, as the gateway names it to the core.
    let family = e.provider.as_deref().zip(e.model.as_deref()).and_then(|(p, m)| {
        gw.config.providers.iter().find(|x| x.id == p).and_then(|x| x.quota_family(m)).map(str::to_owned)
    });
    gw.with_engine(|eng| {
        if let (Some(p), Some(want)) = (&e.provider, &e.breaker) {
            let got = eng.breaker_state(now, p);
            if got.as_str() != want {
                problems.push(format!("breaker of {p} is {} (expected {want})", got.as_str()));
            }
        }
        if let (Some(p), Some(want)) = (&e.provider, e.probes_in_flight) {
            let got = eng.breakers().get(p).map_or(0, |b| b.probes_in_flight());
            if got != want {
                problems.push(format!("breaker of {p} holds {got} probe slots (expected {want})"));
            }
        }
        if let (Some(p), Some(want)) = (&e.provider, e.failures) {
            let got = eng.breakers().get(p).map_or(0, |b| b.failure_count());
            if got != want {
                problems.push(format!("breaker of {p} counts {got} failures (expected {want})"));
            }
        }
        if let Some(c) = &e.connection {
            let st = eng.connection(c);
            if let Some(want) = &e.status
                && st.status(now).as_str() != want
            {
                problems.push(format!("connection {c} is {} (expected {want})", st.status(now).as_str()));
            }
            if let Some(want) = e.backoff_level
                && st.backoff_level() != want
            {
                problems.push(format!("connection {c} has backoff level {} (expected {want})", st.backoff_level()));
            }
            if let Some([lo, hi]) = e.cooldown_ms {
                let left = st.rate_limited_until(now).map_or(0, |u| ms(u.saturating_duration_since(now)));
                if left < lo || left > hi {
                    problems.push(format!("connection {c} has {left} ms of cooldown left (expected {lo}..={hi})"));
                }
            }
            if let Some(want) = e.cooling
                && st.rate_limited_until(now).is_some() != want
            {
                let until = st.rate_limited_until(now).map(|u| ms(u.saturating_duration_since(h.base)));
                problems.push(format!("connection {c} cooling until {until:?} (expected cooling={want})"));
            }
            if let Some(want) = e.error_code
                && st.error_code() != Some(want)
            {
                problems.push(format!("connection {c} last failed with {:?} (expected {want})", st.error_code()));
            }
            if let Some([lo, hi]) = e.reset_try_in_ms {
                let left = eng.lanes().reset_next(c, now).map(|u| ms(u.saturating_duration_since(now)));
                if left.is_none_or(|l| l < lo || l > hi) {
                    problems.push(format!("connection {c} tries a reset again in {left:?} ms (expected {lo}..={hi})"));
                }
            }
            if let Some(want) = &e.lane {
                let got = eng.lane_view(c, now).as_str();
                if got != want {
                    problems.push(format!("connection {c} has usage-limit lane {got} (expected {want})"));
                }
            }
            if let (Some(p), Some(m), Some(want)) = (&e.provider, &e.model, e.locked) {
                let got = eng.lockouts().remaining(now, p, c, m, family.as_deref()).is_some();
                if got != want {
                    problems.push(format!("model {p}/{m} on {c} locked={got} (expected {want})"));
                }
                // What an operator sees (health's and the admin API's listing) is what routing reads.
                // A quota family's lock is listed under the model that failed and covers the others.
                let listed = eng.lockouts().list(now).iter().any(|l| {
                    l.provider == *p
                        && l.connection == *c
                        && (l.model == *m || (l.family.is_some() && l.family == family))
                });
                if listed != want {
                    problems
                        .push(format!("model {p}/{m} on {c} listed={listed} in the lockout listing (expected {want})"));
                }
            }
        }
    });
    for p in problems {
        s.rec.violate(t, format!("at {} ms: {p}", e.at_ms));
    }
}

/// Every request got exactly one response, but one that a partition or a gateway restart cut
/// off, which the client sees as an expected abort (recorded here as lost).
fn every_request_answered_once(s: &mut Shared, t: u64) {
    let issued: Vec<((String, u64), Option<u64>)> = s.rec.issued.iter().map(|(k, v)| (k.clone(), *v)).collect();
    // Responses per request, counted once (a scan per request is quadratic in long runs).
    let mut answered: std::collections::BTreeMap<(&str, u64), usize> = std::collections::BTreeMap::new();
    for o in &s.rec.outcomes {
        *answered.entry((o.client.as_str(), o.seq)).or_default() += 1;
    }
    let answered: std::collections::BTreeMap<(String, u64), usize> =
        answered.into_iter().map(|((c, q), n)| ((c.to_owned(), q), n)).collect();
    for ((c, q), sent) in issued {
        let n = answered.get(&(c.clone(), q)).copied().unwrap_or(0);
        if let (0, Some(sent)) = (n, sent)
            && let Some(why) = s.cut_off(&c, sent, t)
        {
            let lost = Outcome::lost(c, q, sent, t, format!("{why}, never answered"));
            s.rec.note(t, format!("response {}", lost.describe(false)));
            s.rec.outcomes.push(lost);
            continue;
        }
        if n != 1 {
            s.rec.violate(t, format!("request {c}#{q} got {n} responses (expected exactly one)"));
        }
    }
}

/// The checks at a run's end: every request answered once, nothing left held, and the
/// scenario's own expectations.
pub(crate) fn end_checks(scenario: &Scenario, shared: &Arc<Mutex<Shared>>, t: u64) {
    let mut s = lock(shared);
    if !s.rec.violations.is_empty() {
        return;
    }
    every_request_answered_once(&mut s, t);
    for l in leaks(&s, t) {
        s.rec.violate(t, l);
    }
    let (started, finalised) = s.rec.streams;
    if started != finalised {
        s.rec.violate(t, format!("{started} streams started but {finalised} finalised"));
    }
    let exp = &scenario.expect;
    check_responses(&mut s, t, &exp.responses);
    check_counts(&mut s, t, &exp.counts);
    check_calls(&mut s, t, &exp.calls);
    check_targets(&mut s, t, &exp.targets);
    if let Some(e) = &exp.sessions {
        check_sessions(&mut s, t, e);
    }
    check_log(&mut s, t, &exp.log);
}

/// What the gateway still holds at the end that it should have let go: every permit returned,
/// every attempt recorded (nothing counts as in flight, no probe slot is held), and no error
/// message kept past its bound.
fn leaks(s: &Shared, t: u64) -> Vec<String> {
    let mut leaks: Vec<String> = Vec::new();
    if let Some(h) = &s.gateway {
        let gw = &h.gw();
        let now = h.base + Duration::from_millis(t.saturating_sub(ms(h.e0)));
        let busy: Vec<String> = gw
            .queue_depths()
            .into_iter()
            .filter(|(_, q, r)| *q > 0 || *r > 0)
            .map(|(k, q, r)| format!("{k} ({q} queued, {r} running)"))
            .collect();
        if !busy.is_empty() {
            leaks.push(format!("permits not returned at the end: {}", busy.join(", ")));
        }
        let (held, long): (Vec<String>, Vec<String>) = gw.with_engine(|e| {
            let conns = gw.config.connections.iter().filter_map(|c| {
                let n = e.in_flight(&c.id);
                (n > 0).then(|| format!("{} has {n} attempts in flight", c.id))
            });
            let probes = gw.config.providers.iter().filter_map(|p| {
                let n = e.breakers().get(&p.id).map_or(0, |b| b.probes_in_flight());
                (n > 0).then(|| format!("{} holds {n} probe slots", p.id))
            });
            // What is kept (and persisted) of an upstream's error is bounded, however long its
            // body was.
            let long = e.connections().filter_map(|(id, c)| {
                let (n, max) = (c.snapshot(now).last_error.map_or(0, |m| m.chars().count()), MAX_ERROR_CHARS);
                (n > max).then(|| format!("connection {id} keeps a {n}-character error message (at most {max})"))
            });
            (conns.chain(probes).collect(), long.collect())
        });
        leaks.extend(long);
        if !held.is_empty() {
            leaks.push(format!("attempts never recorded: {}", held.join(", ")));
        }
    }
    leaks
}

/// Each listed response is what it must be.
fn check_responses(s: &mut Shared, t: u64, exp: &[scenarios::scenario::ResponseExpect]) {
    for r in exp {
        let Some(o) = s.rec.outcomes.iter().find(|o| o.client == r.client && o.seq == r.seq) else {
            s.rec.violate(t, format!("response {}#{}: no such request", r.client, r.seq));
            continue;
        };
        let mut bad = mismatches(r, o);
        if let Some(other) = &r.same_body_as {
            let same = other.rsplit_once('#').and_then(|(c, n)| {
                let n: u64 = n.parse().ok()?;
                s.rec.outcomes.iter().find(|x| x.client == c && x.seq == n)
            });
            match same {
                None => bad.push(format!("no request {other} to compare the body with")),
                Some(x) if x.body != o.body => {
                    bad.push(format!("body differs from {other}'s: {} vs {}", o.body, x.body));
                }
                Some(_) => {}
            }
        }
        for b in bad {
            s.rec.violate(t, format!("response {}#{}: {b}", r.client, r.seq));
        }
    }
}

/// How response `o` differs from what `r` expects.
fn mismatches(r: &scenarios::scenario::ResponseExpect, o: &Outcome) -> Vec<String> {
    let mut bad = Vec::new();
    if r.status.is_some() && r.status != o.status {
        bad.push(format!("status {:?} (expected {:?})", o.status, r.status));
    }
    if r.code.is_some() && r.code != o.code {
        bad.push(format!("code {:?} (expected {:?})", o.code, r.code));
    }
    if r.retry_after_s.is_some() && r.retry_after_s != o.retry_after_s {
        bad.push(format!("retry-after {:?} (expected {:?})", o.retry_after_s, r.retry_after_s));
    }
    if r.connection.is_some() && r.connection != o.connection {
        bad.push(format!("connection {:?} (expected {:?})", o.connection, r.connection));
    }
    if r.done.is_some_and(|d| d != o.done) {
        bad.push(format!("done {} (expected {:?})", o.done, r.done));
    }
    for text in r.body_contains.iter().filter(|t| !o.body.contains(t.as_str())) {
        bad.push(format!("body lacks {text:?}"));
    }
    for text in r.body_lacks.iter().filter(|t| o.body.contains(t.as_str())) {
        bad.push(format!("body contains {text:?}"));
    }
    let took = o.done_ms.saturating_sub(o.issued_ms);
    if r.min_ms.is_some_and(|m| took < m) {
        bad.push(format!("took {took} ms (expected at least {:?})", r.min_ms));
    }
    if r.aborted.is_some_and(|a| a != o.aborted) {
        bad.push(format!("aborted {} (expected {:?})", o.aborted, r.aborted));
    }
    for (name, want) in &r.headers {
        let got = o.headers.get(name);
        // An empty value expects the header absent.
        if (want.is_empty() && got.is_some()) || (!want.is_empty() && got != Some(want)) {
            bad.push(format!("header {name} {got:?} (expected {want:?})"));
        }
    }
    bad
}

/// Responses counted by client, status, code and connection.
fn check_counts(s: &mut Shared, t: u64, exp: &[scenarios::scenario::CountExpect]) {
    for c in exp {
        let n = s
            .rec
            .outcomes
            .iter()
            .filter(|o| c.client.as_ref().is_none_or(|x| *x == o.client))
            .filter(|o| c.status.is_none() || c.status == o.status)
            .filter(|o| c.code.is_none() || c.code == o.code)
            .filter(|o| c.connection.is_none() || c.connection == o.connection)
            .count() as u64;
        if c.min.is_some_and(|m| n < m) || c.max.is_some_and(|m| n > m) {
            s.rec.violate(
                t,
                format!(
                    "{n} responses with status={:?} code={:?} connection={:?} (expected {:?}..={:?})",
                    c.status, c.code, c.connection, c.min, c.max
                ),
            );
        }
    }
}

/// Calls each upstream got, and how many it answered at once.
fn check_calls(s: &mut Shared, t: u64, exp: &[scenarios::scenario::CallExpect]) {
    for c in exp {
        let n = match s.upstreams.get(&c.host) {
            Some(u) if c.model == "*" => u.total_calls(),
            Some(u) => u.calls(&c.model),
            None => 0,
        };
        if c.min.is_some_and(|m| n < m) || c.max.is_some_and(|m| n > m) {
            s.rec.violate(
                t,
                format!("upstream {} model {} got {n} calls (expected {:?}..={:?})", c.host, c.model, c.min, c.max),
            );
        }
        let peak = s.upstreams.get(&c.host).map_or(0, |u| u.peak_in_flight(&c.model));
        if let Some(m) = c.max_in_flight
            && peak > m
        {
            s.rec.violate(
                t,
                format!("upstream {} model {} answered {peak} calls at once (expected at most {m})", c.host, c.model),
            );
        }
    }
}

/// Lines of the event log containing a text, counted.
fn check_log(s: &mut Shared, t: u64, exp: &[scenarios::scenario::LogExpect]) {
    for l in exp {
        let n = s.rec.log.iter().filter(|(_, line)| line.contains(&l.contains)).count() as u64;
        if l.min.is_some_and(|m| n < m) || l.max.is_some_and(|m| n > m) {
            s.rec.violate(t, format!("{n} log lines contain {:?} (expected {:?}..={:?})", l.contains, l.min, l.max));
        }
    }
}

/// Each session's successful answers came from one connection (M5: an eligible pin wins).
fn check_sessions(s: &mut Shared, t: u64, e: &scenarios::scenario::SessionsExpect) {
    let mut by_session: BTreeMap<&str, BTreeMap<&str, Vec<String>>> = BTreeMap::new();
    for o in &s.rec.outcomes {
        if let (Some(session), Some(connection), Some(200)) = (&o.session, &o.connection, o.status) {
            let answers = by_session.entry(session).or_default().entry(connection).or_default();
            answers.push(format!("{}#{}", o.client, o.seq));
        }
    }
    let mut bad = Vec::new();
    let mut connections = BTreeSet::new();
    let mut sessions = 0u64;
    for (session, served) in &by_session {
        connections.extend(served.keys().copied());
        if served.values().map(Vec::len).sum::<usize>() >= 2 {
            sessions += 1;
        }
        if served.len() > 1 {
            let how: Vec<String> = served.iter().map(|(c, rs)| format!("{c} ({})", rs.join(", "))).collect();
            bad.push(format!("session {session} was served by {}", how.join(" and ")));
        }
    }
    let (seen, spread) = (sessions, connections.len() as u64);
    for b in bad {
        s.rec.violate(t, b);
    }
    if seen < e.min_sessions {
        s.rec.violate(t, format!("{seen} sessions answered twice or more (expected at least {})", e.min_sessions));
    }
    if spread < e.min_connections {
        s.rec.violate(
            t,
            format!("sessions were served by {spread} connections (expected at least {})", e.min_connections),
        );
    }
}

fn check_targets(s: &mut Shared, t: u64, exp: &[scenarios::scenario::TargetExpect]) {
    for e in exp {
        let (n, what) = match &e.target {
            Some(target) => (s.rec.targets.get(target).copied().unwrap_or(0), format!("dispatches to {target}")),
            None => (s.rec.targets.len() as u64, format!("distinct targets ({:?})", s.rec.targets)),
        };
        if e.min.is_some_and(|m| n < m) || e.max.is_some_and(|m| n > m) {
            s.rec.violate(t, format!("{n} {what} (expected {:?}..={:?})", e.min, e.max));
        }
    }
}
