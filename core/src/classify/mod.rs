//! M11 + M12: one function from an upstream failure to a decision.
//!
//! Order: restatement first (so a misreported 403 is classified as the 429 it is), then the
//! ordered classification of BEHAVIOUR.md §3.5, then Ferroute's layer separation: 408, 5xx and
//! transport failures are provider-level (they count toward the breaker and never cool a
//! connection); account-level failures cool or terminate the connection and never count toward
//! the breaker.

mod decision;
pub mod google;
pub mod in_stream;
mod refusals;
mod scanner;
pub mod stated;
#[cfg(test)]
mod tests;
mod text;
mod text_rules;
mod tools;
mod transport;

pub use decision::{ConnectionEffect, CooldownProfile, Decision, ErrorInput, LockSuggestion};
pub use tools::tool_limit;
pub use transport::{classify_egress, classify_transport};

use text::M;

use crate::hint::{self, HintSource};
use crate::restate::{self, restate};
use crate::rules::{self, RuleMatch};
use crate::settings::OperatorErrorRule;
use crate::types::{Format, ProviderClass, Reason, Scope, TerminalState};
use std::cell::OnceCell;
use std::time::Duration;

/// The rule profile a provider reads its answers by when it declares none: the one its format
/// and class imply, never its id. `gemini` for a Gemini-format provider (its errors are
/// Google's), `claude` for an Anthropic-format OAuth provider (a Claude subscription), `codex`
/// for a Responses-format OAuth provider (ChatGPT's Codex backend), else the format's name.
pub fn default_profile(format: Format, class: ProviderClass) -> &'static str {
    match (format, class) {
        (Format::Gemini, _) => "gemini",
        (Format::Anthropic, ProviderClass::OAuth) => "claude",
        (Format::Responses, ProviderClass::OAuth) => "codex",
        (f, _) => f.name(),
    }
}

/// Statuses that are the provider's fault rather than the account's.
pub fn is_provider_level_status(status: u16) -> bool {
    status == 408 || (500..=599).contains(&status)
}

/// `text` lower-cased: ASCII bodies (nearly all) byte by byte, others by Unicode's rules.
fn lower_case(text: &str) -> String {
    if text.is_ascii() { text.to_ascii_lowercase() } else { text.to_lowercase() }
}

/// The body lower-cased, made on first use: only restatement and provider or operator rules
/// read it (the marker scan reads an ASCII body as sent), so most failures never copy it.
struct Lower<'a> {
    body: &'a str,
    copy: OnceCell<String>,
}

impl<'a> Lower<'a> {
    fn new(body: &'a str) -> Self {
        Lower { body, copy: OnceCell::new() }
    }

    fn get(&self) -> &str {
        self.copy.get_or_init(|| lower_case(self.body))
    }

    /// What the marker scan reads: an ASCII body as sent, any other lower-cased.
    fn for_scan(&self) -> &str {
        if self.body.is_ascii() { self.body } else { self.get() }
    }
}

/// Classifies an upstream error response.
pub fn classify(input: &ErrorInput<'_>, profile: &CooldownProfile, operator: &[OperatorErrorRule]) -> Decision {
    let lower = Lower::new(input.body);
    let upstream_hint = hint::detect(input.headers, input.body, input.wall_now_ms);
    // Without restatement rules for this provider nothing is restated, whatever the text.
    let haystack = if restate::rules_for(input.provider).is_empty() { "" } else { lower.get() };
    // A stream that failed after its 200 is read as the status its failure goes with.
    let sent =
        if (200..300).contains(&input.status) { in_stream::status_of(input.body).unwrap_or(502) } else { input.status };
    let restated = restate(input.provider, sent, haystack, upstream_hint.map(|h| h.wait));
    let status = restated.status;
    let mut sig = text::Signals::none();
    sig.scan_into(lower.for_scan());
    let mut cx = Cx {
        sig: &sig,
        structured: None,
        input,
        profile,
        operator,
        lower: &lower,
        status,
        hint: upstream_hint,
        quota_like: None,
    };
    let mut d = cx.ordered();
    d.upstream_status = input.status;
    d.restated_by = restated.rule_id;
    if restated.rule_id.is_some() {
        d.client_retry_after = restated.retry_after;
    } else if d.client_retry_after.is_none() && d.status == 429 {
        // Every 429 tells the client when to come back: the upstream's own hint, also when the
        // connection itself is now terminal (its wait is then not the connection's).
        d.client_retry_after = upstream_hint.map(|h| h.wait);
    }
    let reported = d.status;
    apply_layers(&mut d, reported);
    d
}

/// Ferroute's layer separation (SPEC "Exact semantics"): provider-level statuses count toward
/// the breaker and never cool a connection, unless the text named an account-level cause.
fn apply_layers(d: &mut Decision, status: u16) {
    let provider_level_reason =
        matches!(d.reason, Reason::ServerError | Reason::Unknown | Reason::ModelCapacity | Reason::Transport);
    let skip_breaker = d.reason == Reason::ServiceNotRunning;
    if is_provider_level_status(status) && provider_level_reason && !skip_breaker {
        d.trips_breaker = true;
        d.connection = ConnectionEffect::None;
    } else {
        d.trips_breaker = false;
    }
}

struct Cx<'a> {
    /// Every text marker, found in one pass.
    sig: &'a text::Signals,
    /// The structured error's code and type, parsed once on first use.
    structured: Option<String>,
    input: &'a ErrorInput<'a>,
    profile: &'a CooldownProfile,
    operator: &'a [OperatorErrorRule],
    lower: &'a Lower<'a>,
    status: u16,
    hint: Option<hint::RetryHint>,
    /// Whether the text looks like quota exhaustion, read once on first use.
    quota_like: Option<bool>,
}

impl Cx<'_> {
    fn looks_like_quota_exhausted(&mut self) -> bool {
        *self.quota_like.get_or_insert_with(|| text::looks_like_quota_exhausted(self.sig))
    }

    fn base(&self, reason: Reason, should_fallback: bool, connection: ConnectionEffect) -> Decision {
        Decision {
            reason,
            status: self.status,
            upstream_status: self.input.status,
            restated_by: None,
            client_retry_after: None,
            should_fallback,
            trips_breaker: false,
            connection,
            rule_scope: None,
            rule_id: None,
            lock: LockSuggestion { scope: None, cooldown: None, upstream_reset: false },
            unsuited: false,
        }
    }

    fn cooldown(&self, duration: Duration, new_level: u32, hint: Option<HintSource>) -> ConnectionEffect {
        if duration.is_zero() {
            ConnectionEffect::None
        } else {
            ConnectionEffect::Cooldown { duration, new_level, hint }
        }
    }

    /// `buildRetryableFallback`: the upstream's hint when this class honours hints, else the ladder.
    fn retryable(&self, reason: Reason) -> Decision {
        if let (true, Some(h)) = (self.profile.use_hints, self.hint) {
            let mut d = self.base(reason, true, self.cooldown(h.wait, 0, Some(h.source)));
            d.client_retry_after = Some(h.wait);
            if matches!(h.source, HintSource::RetryAfter | HintSource::ResetHeader | HintSource::BodyStructured) {
                d.lock.cooldown = Some(h.wait);
                d.lock.upstream_reset = true;
            }
            return d;
        }
        let level = self.input.backoff_level;
        self.base(reason, true, self.cooldown(self.profile.scaled(level), self.profile.next_level(level), None))
    }

    /// A usage limit that states its end (a subscription window, a spend limit's day, a monthly
    /// cap): the account's own word on when it serves again, honoured for every class.
    fn stated_limit(&self) -> Option<Decision> {
        if !(400..500).contains(&self.status) {
            return None;
        }
        let says = stated::BodySays {
            usage_limit_reached: self.sig.has(M::UsageLimitReachedCode),
            regain_access: self.sig.has(M::RegainAccessOn),
            monthly_spend: refusals::is_monthly_spend_limit(self.sig),
        };
        stated::find(self.input.headers, self.input.body, says, self.input.wall_now_ms).map(|s| self.stated(s))
    }

    /// A usage limit with a stated end: the connection cools until then (capped by
    /// `max_stated_reset_ms`; an hour when the end is stated but unknown), and the client is told
    /// the same wait.
    fn stated(&self, s: stated::StatedReset) -> Decision {
        let wait = if s.wait.is_zero() { Duration::from_secs(3600) } else { s.wait }.min(self.profile.stated_cap);
        let effect = if s.model_only { ConnectionEffect::None } else { self.cooldown(wait, 0, Some(s.source)) };
        let mut d = self.base(Reason::QuotaExhausted, true, effect);
        if s.model_only {
            d.lock.scope = Some(Scope::Model);
        }
        if !wait.is_zero() {
            d.client_retry_after = Some(wait);
            d.lock.cooldown = Some(wait);
            d.lock.upstream_reset = true;
        }
        d
    }

    /// A request-level problem another target may not have (too large, too long for this
    /// model): fall back, penalise nothing.
    fn request_level(&self) -> Decision {
        self.base(Reason::ModelCapacity, true, ConnectionEffect::None)
    }

    /// The key may not use this model: lock the model on this connection, not the key.
    fn model_denied(&self, reason: Reason) -> Decision {
        let mut d = self.base(reason, true, ConnectionEffect::None);
        d.lock.scope = Some(Scope::Model);
        d
    }

    fn fixed(&self, reason: Reason, duration: Duration) -> Decision {
        self.base(reason, true, self.cooldown(duration, 0, None))
    }

    fn terminal(&self, reason: Reason, t: TerminalState) -> Decision {
        self.base(reason, true, ConnectionEffect::Terminal(t))
    }

    fn no_fallback(&self, reason: Reason) -> Decision {
        self.base(reason, false, ConnectionEffect::None)
    }

    fn rule_decision(&self, m: RuleMatch) -> Decision {
        let level = self.input.backoff_level;
        let (duration, new_level) = match m.cooldown {
            Some(c) => (c, 0),
            None => (self.profile.scaled(level), self.profile.next_level(level)),
        };
        let mut d = self.base(m.reason, true, ConnectionEffect::None);
        d.rule_id = Some(m.id);
        if m.honours_scope {
            d.rule_scope = Some(m.scope);
            d.lock.scope = Some(m.scope);
        }
        d.lock.cooldown = m.cooldown;
        // A model-scoped rule locks the model, not the whole connection.
        let conn_effect = !(m.honours_scope && m.scope == Scope::Model);
        if conn_effect {
            d.connection = self.cooldown(duration, new_level, None);
        }
        d
    }

    /// Time until the provider's daily quotas reset: the shell's calendar, else midnight UTC (a
    /// day if the wall clock is unknown too); never more than a day.
    fn until_daily_reset(&self) -> Duration {
        self.input
            .until_daily_reset
            .or_else(|| self.input.wall_now_ms.map(crate::hint::until_midnight_utc))
            .unwrap_or(Duration::from_secs(86_400))
            .min(Duration::from_secs(86_400))
    }

    /// A Google rule's decision: model-scoped locks for quotas and denied models (a Gemini key's
    /// quotas are per model), provider-level for an overloaded service, terminal for a bad key.
    fn google(&self, r: &google::GoogleRule) -> Decision {
        let model_lock = |mut d: Decision, cooldown: Option<Duration>| {
            d.connection = ConnectionEffect::None;
            d.rule_scope = Some(Scope::Model);
            d.lock = LockSuggestion { scope: Some(Scope::Model), cooldown, upstream_reset: cooldown.is_some() };
            d
        };
        let mut d = match r.effect {
            google::Effect::DailyQuota => {
                let wait = self.until_daily_reset();
                let mut d = model_lock(self.base(r.reason, true, ConnectionEffect::None), Some(wait));
                d.client_retry_after = Some(wait);
                d
            }
            google::Effect::RateLimit => {
                let hint = self.hint.map(|h| h.wait);
                let mut d = model_lock(self.base(r.reason, true, ConnectionEffect::None), hint);
                d.client_retry_after = hint;
                d
            }
            google::Effect::ProviderLevel => self.retryable(r.reason),
            google::Effect::InvalidKey => self.terminal(r.reason, TerminalState::Expired),
            google::Effect::ModelDenied => model_lock(self.base(r.reason, true, ConnectionEffect::None), None),
            google::Effect::Ended(t) => self.terminal(r.reason, t),
        };
        d.rule_id = Some(r.id.to_owned());
        d
    }

    /// BEHAVIOUR.md §3.5, steps 1–8, with the parts Ferroute has no use for left out.
    fn ordered(&mut self) -> Decision {
        let status = self.status;
        let class = self.input.class;
        // 1. A supervisor says the service is not running: a short cooldown, not the breaker.
        if status == 503
            && hint::header(self.input.headers, "x-ferroute-fallback-hint")
                .is_some_and(|v| v.eq_ignore_ascii_case("connection_cooldown"))
        {
            return self.fixed(Reason::ServiceNotRunning, Duration::from_secs(5));
        }
        // Operator rules come before everything the upstream's text could say.
        if !self.operator.is_empty()
            && let Some(m) = rules::find_operator_rule(self.input.provider_id, status, self.lower.get(), self.operator)
                .or_else(|| rules::find_operator_rule(self.input.provider, status, self.lower.get(), self.operator))
        {
            return self.rule_decision(m);
        }
        if let Some(d) = self.stated_limit() {
            return d;
        }
        // Google's structured errors, for the providers that send them.
        if google::applies(self.input.provider)
            && let Some(r) = google::find(status, self.input.body, self.lower.get())
        {
            return self.google(r);
        }
        if !self.input.body.is_empty()
            && let Some(d) = self.text_rules()
        {
            return d;
        }
        // 4. The configured rule table: text rules, then status rules. An API-key 429 that
        // does not look like quota exhaustion is a plain rate limit whatever its text says.
        let preserve_quota_429 = class == ProviderClass::OAuth || self.looks_like_quota_exhausted();
        if (status != 429 || preserve_quota_429)
            && let Some(d) = self.text_table()
        {
            return d;
        }
        if let Some(d) = self.status_table() {
            return d;
        }
        // 7. 400: fall back only for model-access, capacity and rate-limit errors.
        if status == 400 || status == 422 {
            let structured = self.structured_code().to_owned();
            if !refusals::is_bad_credential(self.sig) && text::is_model_access(self.sig, &structured) {
                return self.model_denied(Reason::NotFound);
            }
            if text::is_model_access_or_capacity(self.sig, &structured) {
                return self.base(Reason::ModelCapacity, true, ConnectionEffect::None);
            }
            if text::is_rate_limit_400(self.sig) {
                return self.retryable(Reason::RateLimitExceeded);
            }
            return self.no_fallback(Reason::Unknown);
        }
        // 6. 432: a plan limit.
        if status == 432 {
            let wait = self.hint.map_or(Duration::from_secs(3600), |h| h.wait);
            return self.fixed(Reason::QuotaExhausted, wait);
        }
        // 8. Anything else: fall back with the base cooldown.
        self.fixed(Reason::Unknown, self.profile.base)
    }

    /// The structured error's `code` and `type`, lower-cased (empty when the body is not a
    /// JSON error). Parsed once.
    fn structured_code(&mut self) -> &str {
        if self.structured.is_none() {
            let parsed = if self.input.body.trim_start().starts_with('{') {
                serde_json::from_str::<serde_json::Value>(self.input.body.trim_start()).ok().map(|v| {
                    let e = v.get("error").unwrap_or(&v);
                    let code = e.get("code").and_then(|c| c.as_str()).unwrap_or("");
                    let ty = e.get("type").and_then(|c| c.as_str()).unwrap_or("");
                    format!("{code} {ty}").trim().to_lowercase()
                })
            } else {
                None
            };
            self.structured = Some(parsed.unwrap_or_default());
        }
        self.structured.as_deref().unwrap_or("")
    }

    /// The provider's first matching rule (parsing the structured error only when the
    /// provider has rules at all).
    fn provider_rule(&mut self) -> Option<RuleMatch> {
        if !rules::has_rules(self.input.provider, self.operator) {
            return None;
        }
        let structured = self.structured_code().to_owned();
        rules::find_rule(
            self.input.provider,
            self.status,
            self.input.headers,
            self.lower.get(),
            &structured,
            self.operator,
        )
    }

    /// Step 4a: the text half of the rule table (first match wins).
    fn text_table(&mut self) -> Option<Decision> {
        if self.input.body.is_empty() {
            return None;
        }
        // Provider rules may name the reason for backoff rows.
        let provider_rule = self.provider_rule();
        if self.sig.has(M::NoCredentials) {
            return Some(self.fixed(Reason::AuthError, Duration::from_secs(120)));
        }
        if self.sig.has(M::RequestNotAllowed) {
            return Some(self.fixed(Reason::RateLimitExceeded, Duration::from_secs(5)));
        }
        if self.sig.has(M::ImproperlyFormedRequest) {
            return Some(self.base(Reason::ModelCapacity, true, ConnectionEffect::None));
        }
        let reason = text::text_reason(self.sig)?;
        Some(self.with_rule(provider_rule, reason))
    }

    fn with_rule(&self, provider_rule: Option<RuleMatch>, reason: Reason) -> Decision {
        match provider_rule {
            Some(m) => {
                let mut d = self.retryable(m.reason);
                d.rule_id = Some(m.id.clone());
                if let Some(c) = m.cooldown.filter(|c| !c.is_zero()) {
                    d.connection = self.cooldown(c, 0, None);
                    d.lock.cooldown = Some(c);
                }
                if m.honours_scope {
                    d.rule_scope = Some(m.scope);
                    d.lock.scope = Some(m.scope);
                }
                d
            }
            None => self.retryable(reason),
        }
    }

    /// Step 4b and 5: the status half of the rule table.
    fn status_table(&mut self) -> Option<Decision> {
        let status = self.status;
        let provider_rule = self.provider_rule();
        Some(match status {
            401 => self.terminal(Reason::AuthError, TerminalState::Expired),
            402 => match provider_rule {
                Some(m) if m.honours_scope || m.cooldown.is_some() => self.rule_decision(m),
                _ => self.terminal(Reason::QuotaExhausted, TerminalState::CreditsExhausted),
            },
            403 => match provider_rule {
                Some(m) => self.rule_decision(m),
                None => self.base(Reason::Unknown, true, ConnectionEffect::None),
            },
            // A missing model is the model's problem, not the key's: the model is locked.
            404 => self.model_denied(Reason::NotFound),
            429 => self.with_rule(provider_rule, Reason::RateLimitExceeded),
            406 | 408 | 500..=599 => self.retryable(Reason::ServerError),
            413 => self.request_level(),
            _ => return None,
        })
    }
}
