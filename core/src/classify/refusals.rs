//! What an error's text says about who can serve the request: the region, the credential, the
//! client kind, the request's size, the plan. Read from the one marker scan of [`super::text`].

use super::text::{M, Signals};

/// The provider refuses to serve the egress's country or region: every request of this
/// connection from here fails the same way.
pub fn is_region_refused(s: &Signals) -> bool {
    s.any(&[
        M::UnsupportedCountryCode,
        M::UnsupportedCountry,
        M::UserLocationNotSupported,
        M::NotAvailableInYourCountry,
    ])
}

/// An aggregator passes on one of its upstreams' refusals: about the model's route, not the key.
pub fn is_relayed_refusal(s: &Signals) -> bool {
    s.has(M::ProviderReturnedError)
}

/// The credential lacks a scope every request needs.
pub fn is_missing_scope(s: &Signals) -> bool {
    s.has(M::ScopeRequirement)
}

/// The credential is valid but cannot serve this client kind (a subscription reserved for its
/// own client) or this request's shape: another connection may.
pub fn is_unsuited_credential(s: &Signals) -> bool {
    s.any(&[M::OnlyForClaudeCode, M::ThirdPartyAppsExtraUsage, M::OAuthNotSupported, M::WorkspaceIdRequired])
}

/// The request is too big for this target (context, output budget, a per-minute token budget
/// smaller than the request): no wait helps it, another target may take it.
pub fn is_request_too_big(s: &Signals) -> bool {
    s.any(&[
        M::ExtraUsageLongContext,
        M::CreditsLongContext,
        M::FewerMaxTokens,
        M::RequestTooLargeFor,
        M::ExceedsContextSize,
    ])
}

/// The account's plan cannot use this model.
pub fn is_model_not_in_plan(s: &Signals) -> bool {
    s.has(M::NotSupportedWithChatgptAccount)
}

/// A monthly spend cap.
pub fn is_monthly_spend_limit(s: &Signals) -> bool {
    s.has(M::MonthlySpendLimit)
}

/// A bad credential named in the text (also where the status does not say so).
pub fn is_bad_credential(s: &Signals) -> bool {
    s.any(&[
        M::InvalidApiKey,
        M::IncorrectApiKey,
        M::IncorrectApiKeyEncoded,
        M::ExpiredApiKey,
        M::MissingApiKey,
        M::RevokedApiKey,
    ])
}
