//! Step 3 of the ordered classification: what the error's text says, before the rule
//! table. Terminal accounts, regions refused, credentials that cannot serve this client,
//! requests too big for the target, quota windows and their resets.

use super::refusals;
use super::text::{self, M};
use super::{ConnectionEffect, Cx, Decision, LockSuggestion, rules};
use crate::types::{Format, ProviderClass, Reason, Scope, TerminalState};
use std::time::Duration;

impl Cx<'_> {
    /// Step 3: checks on the error text, in order: who may not be served at all, then the
    /// windows and credits the text names, then what a 403 says.
    pub(super) fn text_rules(&mut self) -> Option<Decision> {
        if let Some(d) = self.refused_by_text() {
            return Some(d);
        }
        if let Some(d) = self.windows_by_text() {
            return Some(d);
        }
        if self.status == 403 { self.forbidden() } else { None }
    }

    /// Refusals the text names: a deactivated account, an aggregator's relayed refusal, a
    /// refused region, a bad or unscoped credential, a credential that cannot serve this client,
    /// a request too big for the target, a model the plan lacks.
    fn refused_by_text(&mut self) -> Option<Decision> {
        let status = self.status;
        // a. Deactivated or banned accounts are terminal.
        if text::is_account_deactivated(self.sig) {
            return Some(self.terminal(Reason::AuthError, TerminalState::Banned));
        }
        // An aggregator relaying one upstream's refusal of this model (its shared pool is
        // throttled, its vendor refuses the region): the model's route, not the key.
        if matches!(status, 403 | 429) && refusals::is_relayed_refusal(self.sig) {
            let reason = if status == 429 { Reason::RateLimitExceeded } else { Reason::AuthError };
            let mut d = self.model_denied(reason);
            if let Some(h) = self.hint {
                d.lock.cooldown = Some(h.wait);
                d.client_retry_after = Some(h.wait);
            }
            return Some(d);
        }
        // A region the provider refuses to serve: every request from this egress fails alike
        // until an operator moves it.
        if refusals::is_region_refused(self.sig) {
            return Some(self.terminal(Reason::AuthError, TerminalState::Banned));
        }
        // A credential without the scope every request needs, or a key the text calls bad
        // whatever the status says (xAI answers a wrong key with 400): new credentials, please.
        if refusals::is_missing_scope(self.sig)
            || (matches!(status, 400 | 401 | 403) && refusals::is_bad_credential(self.sig))
        {
            return Some(self.terminal(Reason::AuthError, TerminalState::Expired));
        }
        // A credential that cannot serve this client kind or request shape (a subscription
        // reserved for its own client): another connection may; this one is not penalised.
        if refusals::is_unsuited_credential(self.sig) {
            let mut d = self.base(Reason::AuthError, true, ConnectionEffect::None);
            d.unsuited = true;
            return Some(d);
        }
        // The request is too big for this target: no wait helps, another target may take it.
        if refusals::is_request_too_big(self.sig) {
            return Some(self.request_level());
        }
        // A model this account's plan cannot use.
        if refusals::is_model_not_in_plan(self.sig) {
            return Some(self.model_denied(Reason::NotFound));
        }
        None
    }

    /// What the text says of models and windows: a retired model or moved endpoint, exhausted
    /// credits, a daily quota, a subscription's usage limit, weekly and session caps, a reset
    /// hint with quota text.
    fn windows_by_text(&mut self) -> Option<Decision> {
        let status = self.status;
        let class = self.input.class;
        let use_quota_signal = status != 429 || class == ProviderClass::OAuth || self.looks_like_quota_exhausted();
        // b, c. A retired model or a moved endpoint: a day.
        if (status == 404 || status == 410) && text::is_retired_model(self.sig) {
            let mut d = self.fixed(Reason::NotFound, Duration::from_secs(86_400));
            d.connection = ConnectionEffect::None;
            d.lock = LockSuggestion {
                scope: Some(Scope::Model),
                cooldown: Some(Duration::from_secs(86_400)),
                upstream_reset: false,
            };
            return Some(d);
        }
        if text::is_endpoint_moved(self.sig) {
            return Some(self.fixed(Reason::NotFound, Duration::from_secs(86_400)));
        }
        // d, f. Billing suspension and exhausted credits end in `credits_exhausted`.
        if text::is_billing_suspended(self.sig) || (use_quota_signal && text::is_credits_exhausted(self.sig)) {
            return Some(self.terminal(Reason::QuotaExhausted, TerminalState::CreditsExhausted));
        }
        // g. A daily quota: until the daily reset.
        if use_quota_signal && text::is_daily_quota_exhausted(self.sig) {
            let wait = self.until_daily_reset();
            let mut d = self.fixed(Reason::QuotaExhausted, wait);
            d.client_retry_after = Some(wait);
            return Some(d);
        }
        // h. A subscription usage limit: the upstream's hint, else an hour.
        let subscription = self.input.format == Format::Anthropic && class == ProviderClass::OAuth;
        if use_quota_signal && text::is_subscription_limit(self.sig, subscription) {
            let wait = self.hint.map_or(Duration::from_secs(3600), |h| h.wait);
            let mut d = self.fixed(Reason::QuotaExhausted, wait);
            d.client_retry_after = Some(wait);
            return Some(d);
        }
        // i, j. Weekly and session caps.
        if text::is_weekly_cap(self.sig) {
            return Some(self.fixed(Reason::QuotaExhausted, Duration::from_secs(86_400)));
        }
        if text::is_session_cap(self.sig) {
            return Some(self.fixed(Reason::QuotaExhausted, Duration::from_secs(5 * 3600)));
        }
        // k. A reset hint plus quota text: the hint decides.
        if use_quota_signal && self.hint.is_some() && text::text_reason(self.sig) == Some(Reason::QuotaExhausted) {
            return Some(self.retryable(Reason::QuotaExhausted));
        }
        None
    }

    /// What a 403 says: a route the key is not for, a model it may not use, a provider rule, an
    /// OAuth refusal (its streak decides), else an API key's auth error on the ladder.
    fn forbidden(&mut self) -> Option<Decision> {
        let class = self.input.class;
        // l. A route the key is not authorised for: not the account's fault; no fallback.
        if self.sig.has(M::NotAuthorizedForRoute) {
            return Some(self.no_fallback(Reason::Unknown));
        }
        // A key that may not use this model (OpenAI's 403 `model_not_found`, "Project … does
        // not have access to model …"): the model is locked, the key serves on.
        if self.sig.any(&[M::ModelNotFoundCode, M::DoesNotHaveAccessToModel]) {
            return Some(self.model_denied(Reason::NotFound));
        }
        // m. Provider rules for providers that honour rule scopes.
        if rules::honours_rule_lock_scope(self.input.provider, self.operator)
            && let Some(m) = self.provider_rule()
        {
            return Some(self.rule_decision(m));
        }
        // OAuth "Request not allowed": the refusal streak decides.
        if class == ProviderClass::OAuth && self.sig.has(M::RequestNotAllowed) {
            return Some(self.base(Reason::RequestRejected, true, ConnectionEffect::RequestRejected));
        }
        // o. A 403 on an API key without quota text: an auth error on the ladder.
        if class == ProviderClass::ApiKey
            && !self.sig.any(&[M::HasNotBeenUsedInProject, M::HourQuota, M::QuotaHasBeenExceeded])
        {
            return Some(self.retryable(Reason::AuthError));
        }
        None
    }
}
