//! Dispatching a planned request: the core picks a candidate by the route's strategies, the
//! attempt runs (`upstream`), and on failure the request falls back along the order within
//! its retry budget. At the end of a combo's set it may wait for a short cooldown and go again
//! (M8), then try the emergency target once (M16), then answer with what happened.

use crate::edge::errors::{Body, ErrorShape, ProxyError, Source};
use crate::recording::record::{Record, RequestRecord, class_of};
use crate::recording::telemetry::Ids;
use crate::recording::trace::Trace;
use crate::request::attempt::Attempt;
use crate::request::exchange::{self, Inbound};
use crate::request::plan::{Preps, slot};
use crate::request::refuse::{Report, finish, no_target, recovery};
use crate::request::resolve::Plan;
use crate::request::unsuited;
use crate::request::upstream::{Failure, Step, attempt_once, failure_error};
use crate::state::clock::rfc3339;
use crate::state::gateway::Gateway;
use crate::state::history::paths::{Path, Step as PathStep};
use ferroute_core::breaker::Ticket;
use ferroute_core::engine::{Exclusion, Route, Selection};
use ferroute_core::session::key::sha256_hex;
use ferroute_core::strategy::Ask;
use ferroute_core::tried::Tried;
use http::Response;
use hyper_util::client::legacy::connect::Connect;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// Runs the request along its plan and answers; a combo's request leaves its path (each
/// attempt's target, connection and result) for the dashboard.
pub async fn dispatch<C: Connect + Clone + Send + Sync + 'static>(
    gw: Arc<Gateway<C>>,
    plan: Plan,
    inbound: &Inbound,
    preps: &mut Preps,
    ask: Ask,
) -> Response<Body> {
    let request = gw.next_request();
    let ids =
        gw.telemetry.get().map(|t| t.request_ids(inbound.headers.traceparent.as_ref().and_then(|v| v.to_str().ok())));
    let combo = plan.combo;
    // The route's key, and when the request came, outlive the plan only where something
    // keeps them.
    let kept = combo || gw.recorder.is_some() || ids.is_some();
    let key = kept.then(|| plan.key.clone());
    let arrived = if kept { gw.clock.wall_now_ms() } else { 0 };
    let mut steps = Vec::new();
    let resp = run(Arc::clone(&gw), plan, inbound, preps, ask, (request, ids), combo.then_some(&mut steps)).await;
    let status = resp.status().as_u16();
    let Some(key) = key else { return resp };
    let now = gw.clock.wall_now_ms();
    if combo {
        gw.history.paths().add(&key, Path { at: rfc3339(now), status, steps });
    }
    let telemetry = gw.telemetry.get().zip(ids);
    if gw.recorder.is_none() && telemetry.is_none() {
        return resp;
    }
    let record = RequestRecord {
        request,
        at_ms: arrived,
        answered_ms: now,
        api: exchange::api_name(inbound.api).to_owned(),
        model: key,
        stream: inbound.stream,
        session: inbound.session.as_deref().map(|s| sha256_hex(s.as_bytes())),
        status,
        class: class_of(status),
    };
    if let Some((t, ids)) = telemetry {
        t.request(&record, ids);
    }
    if let Some(recorder) = &gw.recorder {
        recorder.record(Record::Request(record));
    }
    resp
}

/// What a combo has spent on getting past a set with nothing eligible.
#[derive(Debug, Default)]
struct Recovery {
    /// Cooldowns waited out (M8), and how long in all.
    waits: u32,
    waited: Duration,
    /// Whether the emergency target was tried (M16; once).
    emergency_used: bool,
}

/// How a combo goes on when nothing is eligible.
enum Recovered {
    /// It waited out a short cooldown (M8): the same plan again.
    Waited,
    /// The emergency target's plan (M16).
    Emergency(Plan),
    /// It does not: the request ends.
    No,
}

/// When nothing of `plan` is eligible at `now`: a combo waits out a short transient cooldown
/// that ends the set (M8), else tries the emergency target once (M16).
async fn recover<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Gateway<C>,
    plan: &Plan,
    r: &mut Recovery,
    last_reason: Option<ferroute_core::types::Reason>,
    now: std::time::Instant,
    (inbound, preps): (&Inbound, &mut Preps),
    steps: &mut Option<&mut Vec<PathStep>>,
) -> Recovered {
    if !plan.combo || r.emergency_used {
        return Recovered::No;
    }
    let wait = {
        let cands = gw.candidates(plan);
        gw.with_engine(|e| e.set_wait(now, &cands, last_reason, r.waits, r.waited))
    };
    if let Some(wait) = wait {
        tracing::info!(combo = %plan.key, wait_ms = wait.as_millis() as u64, waits = r.waits, "waiting for a cooldown before retrying the combo");
        gw.observe(now, crate::state::gateway::Observed::ComboWait { combo: &plan.key, wait });
        step(steps, "", "", format!("waited {} ms", wait.as_millis()));
        tokio::time::sleep_until(tokio::time::Instant::from_std(now + wait)).await;
        r.waits += 1;
        r.waited += wait;
        return Recovered::Waited;
    }
    let Some(e) = gw.emergency_plan(&plan.key) else { return Recovered::No };
    r.emergency_used = true;
    if !prepare_for(gw, &e, inbound, preps) {
        return Recovered::No;
    }
    tracing::warn!(combo = %plan.key, target = ?e.pool, "every combo target failed or is excluded; using the emergency target");
    step(steps, "", "", "emergency target");
    Recovered::Emergency(e)
}

/// Notes the core's pick of `target`: observers see what `select` itself returned, before any
/// later guard re-checks it (the simulation holds each layer to its own invariant), and the
/// report keeps its `provider/model` (once; the request's path reads it from there).
fn picked<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Gateway<C>,
    target: &crate::request::resolve::Target,
    now: std::time::Instant,
    request: u64,
    report: &mut Report,
) {
    let (provider, connection) = gw.parts(target);
    gw.observe(
        now,
        crate::state::gateway::Observed::Pick {
            provider: &provider.id,
            connection: &connection.id,
            model: &target.model,
            request,
        },
    );
    report.order.push(Arc::clone(&target.name));
}

/// What the core picks for `plan` at `now`, given what this request already `tried`.
fn pick<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Gateway<C>,
    plan: &Plan,
    inbound: &Inbound,
    ask: Ask,
    tried: &Tried,
    now: std::time::Instant,
) -> Selection {
    let route = Route {
        strategy: plan.strategy,
        key: &plan.key,
        ask,
        session: inbound.session.as_deref(),
        session_ttl: inbound.session_ttl,
    };
    if gw.in_turn(plan, route.session.is_some()) {
        // One provider's keys in turn: only those checked are built.
        let n = plan.targets.len();
        return gw.with_engine(|e| e.select_keys_in_turn(now, n, |i| gw.candidate(&plan.targets[i]), &route, tried));
    }
    let cands = gw.candidates(plan);
    gw.with_engine(|e| e.select(now, &cands, &route, tried))
}

/// The attempt of `plan`'s target `index`, admitted with `ticket`, in the request's `round`,
/// with what the flight recorder and the tracer keep of it when either is on.
fn new_attempt<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Arc<Gateway<C>>,
    plan: &Plan,
    (index, ticket): (usize, Ticket),
    tried: &Tried,
    (request, ids, round): (u64, Option<Ids>, u32),
    inbound: &Inbound,
) -> Attempt<C> {
    let target = &plan.targets[index];
    // A provider-level failure is not counted when the next target is on the same provider.
    let same_provider_next = plan.combo
        && plan.targets.iter().enumerate().any(|(i, t)| {
            t.target_index > target.target_index
                && t.provider == target.provider
                && !tried.was_tried(i)
                && !tried.is_exhausted(&gw.config.connections[t.connection].id)
        });
    let trace = if gw.recorder.is_some() || ids.is_some() {
        let mut t = Trace::new(
            exchange::api_name(inbound.api),
            plan.combo.then(|| Arc::from(plan.key.as_str())),
            inbound.stream,
            ids.zip(gw.telemetry.get()).map(|(ids, t)| ids.child(t.span_id())),
        );
        t.excluded = exclusions(gw, plan, index);
        t
    } else {
        Trace::unwanted()
    };
    Attempt {
        gw: Arc::clone(gw),
        target: target.clone(),
        ticket: Some(ticket),
        same_provider_next,
        request,
        round,
        trace,
    }
}

/// The target (`provider/model`) of the attempt in progress: the last in the report's order.
fn last_tried(report: &Report) -> &str {
    report.order.last().map_or("", |t| t)
}

/// Notes a step of a combo's path (`steps` is `None` for any other request, which then copies
/// nothing).
fn step(steps: &mut Option<&mut Vec<PathStep>>, target: &str, connection: &str, result: impl Into<String>) {
    if let Some(s) = steps {
        s.push(PathStep { target: target.to_owned(), connection: connection.to_owned(), result: result.into() });
    }
}

async fn run<C: Connect + Clone + Send + Sync + 'static>(
    gw: Arc<Gateway<C>>,
    plan: Plan,
    inbound: &Inbound,
    preps: &mut Preps,
    ask: Ask,
    (request, ids): (u64, Option<Ids>),
    mut steps: Option<&mut Vec<PathStep>>,
) -> Response<Body> {
    let shape = exchange::error_shape(inbound.api);
    let combo = plan.combo;
    let mut report = Report { pool: plan.pool.len(), ..Report::default() };
    let mut plan = plan;
    let mut tried = Tried::new();
    let kind = unsuited::client_kind(inbound);
    unsuited::skip_refusing(&gw, &plan, &kind, &mut tried, gw.clock.now());
    let mut last: Option<Failure> = None;
    let mut recovery = Recovery::default();
    let mut round = 0u32;
    // An attempt that became ineligible while queued is not an upstream attempt, so the
    // budget alone does not bound the loop.
    let max_attempts = gw.config.resilience.routing.max_attempts.max(1) as usize;
    let turns = 2 * (max_attempts + plan.targets.len()) + 8;
    for _ in 0..turns {
        let now = gw.clock.now();
        let selection = pick(&gw, &plan, inbound, ask, &tried, now);
        gw.settle();
        let (index, ticket) = match selection {
            Selection::Pick { index, ticket } => (index, ticket),
            Selection::NoneEligible(ex) => {
                let reason = last.as_ref().map(|f| f.decision.reason);
                match recover(&gw, &plan, &mut recovery, reason, now, (inbound, preps), &mut steps).await {
                    Recovered::Waited => {}
                    Recovered::Emergency(e) => plan = e,
                    Recovered::No => {
                        return end(&gw, &plan, combo, last, Some(&ex), &mut report, tried.attempts(), shape);
                    }
                }
                tried.new_round();
                round += 1;
                continue;
            }
            Selection::BudgetSpent { attempts } => {
                tracing::warn!(model = %plan.key, attempts, "request reached its attempt budget");
                return end(&gw, &plan, combo, last, None, &mut report, attempts, shape);
            }
        };
        let (provider, connection) = gw.parts(&plan.targets[index]);
        picked(&gw, &plan.targets[index], now, request, &mut report);
        let attempt = new_attempt(&gw, &plan, (index, ticket), &tried, (request, ids, round), inbound);
        let Some(prep) = preps[slot(provider.format)].as_mut() else {
            // plan and prepare_for keep only targets with a prepared request.
            return finish(
                &gw,
                ProxyError::new(Source::Internal, 500, "internal", "no request prepared for this provider format"),
                None,
                shape,
            );
        };
        match attempt_once(attempt, inbound, prep, &plan.key).await {
            Step::Done(mut resp) => {
                step(&mut steps, last_tried(&report), &connection.id, "served");
                if combo {
                    report.excluded = excluded(&gw, &plan);
                    report.answered(&mut resp, tried.attempts() + 1, None);
                }
                return resp;
            }
            Step::Fallback(f) => {
                tracing::info!(provider = %provider.id, connection = %connection.id, status = f.decision.status, reason = f.decision.reason.as_str(), "attempt failed");
                step(
                    &mut steps,
                    last_tried(&report),
                    &connection.id,
                    format!("{} {}", f.decision.status, f.decision.reason.as_str()),
                );
                if f.decision.unsuited {
                    unsuited::note(&gw, &connection.id, &kind, gw.clock.now());
                }
                tried.failed(index, &connection.id, Some(&f.decision));
                last = Some(f);
            }
            Step::Fail(e, conn) => {
                step(&mut steps, last_tried(&report), &conn, format!("{} {}", e.status, e.code));
                let mut resp = finish(&gw, e, Some(&conn), shape);
                if combo {
                    report.answered(&mut resp, tried.attempts() + 1, Some("request_failed"));
                }
                return resp;
            }
            Step::Excluded => step(&mut steps, last_tried(&report), &connection.id, "excluded while queued"),
        }
    }
    end(&gw, &plan, combo, last, None, &mut report, tried.attempts(), shape)
}

/// What excludes each candidate of `plan` but `picked` now (`k2 unavailable`), for the record.
fn exclusions<C: Connect + Clone + Send + Sync + 'static>(gw: &Gateway<C>, plan: &Plan, picked: usize) -> Vec<String> {
    let now = gw.clock.now();
    let cands = gw.candidates(plan);
    gw.with_engine(|e| {
        cands
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != picked)
            .filter_map(|(_, c)| e.exclusion(now, c).map(|(r, _)| format!("{} {}", c.connection, r.as_str())))
            .collect()
    })
}

/// Makes sure `preps` holds the request in the format of every target of `plan`; false when
/// one cannot be expressed (the plan is then not used).
fn prepare_for<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Gateway<C>,
    plan: &Plan,
    inbound: &Inbound,
    preps: &mut Preps,
) -> bool {
    for t in plan.targets.iter() {
        let format = gw.parts(t).0.format;
        if preps[slot(format)].is_none() {
            match exchange::prepare(inbound, format) {
                Ok(p) => preps[slot(format)] = Some(p),
                Err(_) => return false,
            }
        }
    }
    !plan.targets.is_empty()
}

/// Targets all of whose connections resilience state excludes now, with the first reason.
fn excluded<C: Connect + Clone + Send + Sync + 'static>(gw: &Gateway<C>, plan: &Plan) -> Vec<(String, &'static str)> {
    let now = gw.clock.now();
    let cands = gw.candidates(plan);
    let reasons: Vec<Option<&'static str>> =
        gw.with_engine(|e| cands.iter().map(|c| e.exclusion(now, c).map(|(r, _)| r.as_str())).collect());
    let mut out: Vec<(String, &'static str)> = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, t) in plan.targets.iter().enumerate() {
        if !seen.insert(t.target_index) {
            continue;
        }
        let members: Vec<usize> =
            plan.targets.iter().enumerate().filter(|(_, x)| x.target_index == t.target_index).map(|(j, _)| j).collect();
        if members.iter().all(|&j| reasons[j].is_some())
            && let Some(r) = reasons[i]
        {
            out.push((format!("{}/{}", gw.parts(t).0.id, t.model), r));
        }
    }
    out
}

/// The final answer of a request that got no upstream success: its last upstream failure if
/// it had one, else the refusal the core chose; a 429 always carries `Retry-After` (the
/// upstream's hint, else the time until a connection is eligible again, at least 1 s).
#[allow(clippy::too_many_arguments)]
fn end<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Gateway<C>,
    plan: &Plan,
    combo: bool,
    last: Option<Failure>,
    ex: Option<&[Exclusion]>,
    report: &mut Report,
    attempts: u32,
    shape: ErrorShape,
) -> Response<Body> {
    report.attempted = attempts;
    report.excluded = excluded(gw, plan);
    let budget_spent = ex.is_none() && attempts > 0 && i64::from(attempts) >= gw.config.resilience.routing.max_attempts;
    let (mut e, connection) = match (last, ex) {
        (Some(f), _) => {
            let conn = f.connection.clone();
            (failure_error(f), Some(conn))
        }
        (None, Some(ex)) => (no_target(gw, plan, ex, report), None),
        (None, None) => (ProxyError::new(Source::Internal, 503, "no_executable_targets", "no target could run"), None),
    };
    if e.status == 429 && e.retry_after.is_none() {
        let now = gw.clock.now();
        let cands = gw.candidates(plan);
        let soonest = gw.with_engine(|en| en.soonest_eligible(now, &cands));
        e.retry_after = Some(soonest.unwrap_or(Duration::from_secs(1)));
    }
    let terminal = if budget_spent { "retry_budget_exhausted".to_owned() } else { e.code.clone() };
    if combo && !e.extra.contains_key("diagnostics") {
        let rec = recovery(&terminal, e.retry_after);
        e = e.with("diagnostics", report.diagnostics(&terminal, &rec)).with("recovery_hint", rec);
    }
    let mut resp = finish(gw, e, connection.as_deref(), shape);
    if combo {
        report.apply(&mut resp, Some(&terminal));
    }
    resp
}
