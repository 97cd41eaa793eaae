//! Text signals in upstream error bodies.
//!
//! Every marker the ordered classification looks for is found in one Aho-Corasick pass over
//! the lower-cased body; the predicates below then read positions, not text. One pass keeps a
//! classification well under a microsecond even for bodies of a few kilobytes.

use super::scanner::Scanner;
use crate::types::Reason;
use aho_corasick::dfa::DFA;
use std::sync::LazyLock;

macro_rules! markers {
    ($($name:ident = $text:literal,)*) => {
        /// Every marker, by name.
        #[allow(non_camel_case_types, missing_docs)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[repr(usize)]
        pub enum M { $($name,)* }
        const TEXTS: &[&str] = &[$($text,)*];
    };
}

markers! {
    // Deactivated accounts.
    AccountDeactivatedCode = "account_deactivated",
    AccountDeactivated = "account has been deactivated",
    AccountDisabled = "account has been disabled",
    AccountSuspended = "your account has been suspended",
    ThisAccountDeactivated = "this account is deactivated",
    ServiceDisabled = "this service has been disabled in this account",
    OrganizationDisabled = "organization has been disabled",
    OAuthNotAllowedForOrganization = "oauth authentication is currently not allowed for this organization",
    // Regions a provider refuses to serve (the egress's country).
    UnsupportedCountryCode = "unsupported_country_region_territory",
    UnsupportedCountry = "country, region, or territory not supported",
    UserLocationNotSupported = "user location is not supported",
    NotAvailableInYourCountry = "not available in your country",
    // An aggregator relaying one of its upstreams' refusals (OpenRouter).
    ProviderReturnedError = "provider returned error",
    // A credential that lacks what every request needs.
    ScopeRequirement = "does not meet scope requirement",
    // A credential that cannot serve this client kind or this request's shape.
    OnlyForClaudeCode = "only authorized for use with claude code",
    ThirdPartyAppsExtraUsage = "third-party apps now draw from your extra usage",
    OAuthNotSupported = "oauth authentication is currently not supported",
    WorkspaceIdRequired = "anthropic-workspace-id is required",
    // The request itself is too big for this target.
    ExtraUsageLongContext = "extra usage is required for long context",
    CreditsLongContext = "credits are required for long context",
    FewerMaxTokens = "or fewer max_tokens",
    RequestTooLargeFor = "request too large for",
    ExceedsContextSize = "exceeds the available context size",
    // A subscription plan that does not include the backend.
    UsageNotIncluded = "usage_not_included",
    // A model this account's plan cannot use.
    NotSupportedWithChatgptAccount = "not supported when using codex with a chatgpt account",
    // A monthly spend cap: until the month ends.
    MonthlySpendLimit = "monthly spend limit",
    // Retired models and moved endpoints.
    NoLongerAvailable = "no longer available",
    NoLongerSupported = "no longer supported",
    EndOfLife = "reached its end of life",
    Model = "model",
    Deprecated = "deprecated",
    Retired = "retired",
    Discontinued = "discontinued",
    Decommissioned = "decommissioned",
    EndpointMoved = "endpoint has moved",
    EndpointNoLonger = "endpoint no longer works",
    UpdateBaseUrl = "update your base url",
    // Billing and credits.
    Suspended = "suspended",
    SpendingLimit = "spending limit",
    Billing = "billing",
    Invoice = "invoice",
    Payment = "payment",
    InsufficientQuotaCode = "insufficient_quota",
    BillingHardLimit = "billing_hard_limit_reached",
    ExceededCurrentQuota = "exceeded your current quota",
    ExceededUsageQuota = "exceeded your current usage quota",
    CreditBalanceTooLowCode = "credit_balance_too_low",
    CreditBalanceTooLow = "your credit balance is too low",
    CreditsExhausted = "credits exhausted",
    OutOfCredits = "out of credits",
    PaymentRequired = "payment required",
    FreeTierModelExhausted = "free tier of the model has been exhausted",
    TierExhausted = "tier has been exhausted",
    InsufficientBalance = "insufficient balance",
    InsufficientBalanceCode = "insufficient_balance",
    InsufficientAccountBalance = "insufficient account balance",
    InsufficientCredit = "insufficient credit",
    ExhaustedAllCredits = "exhausted all your credits",
    UsedAllAvailableCredits = "used all available credits",
    ExceededCurrentQuotaShort = "exceeded current quota",
    PrepaymentDepleted = "prepayment credits are depleted",
    BalanceInsufficientZh = "余额不足",
    // Quota windows.
    TodaysQuota = "today's quota",
    DailyQuota = "daily quota",
    TryAgainTomorrow = "try again tomorrow",
    TpdRateLimit = "tpd rate limit",
    UsageLimitReached = "usage limit reached",
    UsageLimitHasBeen = "usage limit has been",
    ClaudeProUsageLimit = "claude pro usage limit",
    YouveReachedUsageLimit = "you've reached your usage limit",
    YouHaveReachedUsageLimit = "you have reached your usage limit",
    WouldExceedAccountRateLimit = "this request would exceed your account's rate limit",
    WeeklyUsageLimit = "weekly usage limit",
    WeeklyLimitReached = "weekly limit reached",
    ReachedYourWeekly = "reached your weekly",
    SessionUsageLimit = "session usage limit",
    SessionLimitReached = "session limit reached",
    ReachedYourSession = "reached your session",
    UsageLimit = "usage limit",
    // Quota patterns.
    Daily = "daily",
    Limit = "limit",
    Monthly = "monthly",
    Quota = "quota",
    Exceed = "exceed",
    Insufficient = "insufficient",
    HardLimit = "hard limit",
    HardLimitCode = "hard_limit",
    Plan = "plan",
    IndividualQuotaReached = "individual quota reached",
    DailyFreeAllocation = "daily free allocation",
    HaveExhaustedTheirQuota = "have exhausted their quota",
    FreeTier = "free tier",
    QuotaExhausted = "quota exhausted",
    ExhaustedYourCapacity = "exhausted your capacity",
    // The reference's text rule table.
    RateLimit = "rate limit",
    TooManyRequests = "too many requests",
    HourQuota = "hour quota",
    QuotaHasBeenExceeded = "quota has been exceeded",
    QuotaExceeded = "quota exceeded",
    QuotaWillReset = "quota will reset",
    OutOfExtraUsage = "out of extra usage",
    ExtraUsageRequired = "extra usage required",
    Capacity = "capacity",
    Overloaded = "overloaded",
    HighDemand = "high demand",
    NoCredentials = "no credentials",
    RequestNotAllowed = "request not allowed",
    ImproperlyFormedRequest = "improperly formed request",
    NotAuthorizedForRoute = "not authorized for this route",
    HasNotBeenUsedInProject = "has not been used in project",
    DoesNotHaveAccessToModel = "does not have access to model",
    ModelNotFoundCode = "model_not_found",
    // Usage limits that state their end (read by `stated`).
    UsageLimitReachedCode = "usage_limit_reached",
    RegainAccessOn = "regain access on",
    // 400: bad credentials.
    InvalidApiKey = "invalid api key",
    IncorrectApiKey = "incorrect api key",
    // xAI sends its message URL-encoded.
    IncorrectApiKeyEncoded = "incorrect%20api%20key",
    ExpiredApiKey = "expired api key",
    MissingApiKey = "missing api key",
    RevokedApiKey = "revoked api key",
    AuthenticationFailed = "authentication failed",
    AuthenticationError = "authentication error",
    AuthenticationRequired = "authentication required",
    Unauthorized = "unauthorized",
    NotAuthenticated = "not authenticated",
    // 400: model access and context overflow.
    DoesNotExist = "does not exist",
    NotFound = "not found",
    NotAvailable = "not available",
    NoAccess = "no access",
    NotSupported = "not supported",
    Unsupported = "unsupported",
    NotHaveAccess = "not have access",
    InputTooLong = "input is too long",
    TooManyTokens = "too many tokens",
    PromptTooLong = "prompt is too long",
    ContextWindow = "context window",
    MaximumContext = "maximum context",
    TokenLimit = "token limit",
    RequestTooLarge = "request too large",
    TokensPerMinute = "tokens per minute",
    Context = "context",
    TooLong = "too long",
    Exceeded = "exceeded",
    Overflow = "overflow",
    Max = "max",
    Token = "token",
    // 400: throttling.
    HighFrequency = "high frequency",
    HighFrequencyDash = "high-frequency",
    HighFrequencyJoined = "highfrequency",
    NonCompliant = "non-compliant",
    RateLimitDash = "rate-limit",
    RateLimitJoined = "ratelimit",
    Frequent = "频繁",
    Frequency = "频率",
}

const N: usize = TEXTS.len();

/// Every marker's text (tests of the automaton).
#[cfg(test)]
pub(super) fn markers() -> &'static [&'static str] {
    TEXTS
}

/// The marker automaton, built once.
static SCANNER: LazyLock<Option<Scanner>> =
    LazyLock::new(|| DFA::new(TEXTS).ok().and_then(|dfa| Scanner::new(TEXTS, &dfa)));

/// Where each marker first starts and last starts in a body (`u32::MAX` = absent).
#[derive(Clone)]
pub struct Signals {
    first_end: [u32; N],
    last_start: [u32; N],
}

const ABSENT: u32 = u32::MAX;

impl Signals {
    /// One pass over the body: lower-cased, or ASCII in any case (the scan reads ASCII
    /// capitals as small letters, as lower-casing would).
    #[cfg(test)]
    pub fn scan(text: &str) -> Signals {
        let mut s = Signals::none();
        s.scan_into(text);
        s
    }

    /// No marker found yet.
    pub fn none() -> Signals {
        Signals { first_end: [ABSENT; N], last_start: [ABSENT; N] }
    }

    /// [`Signals::scan`] into signals that hold none yet (no 1 KiB copy on the way back).
    pub fn scan_into(&mut self, text: &str) {
        let Some(scanner) = SCANNER.as_ref() else { return };
        scanner.scan(text.as_bytes(), |i, start, end| {
            if self.first_end[i] == ABSENT {
                self.first_end[i] = end as u32;
            }
            self.last_start[i] = start as u32;
        });
    }

    /// Whether `m` occurs.
    pub fn has(&self, m: M) -> bool {
        self.first_end[m as usize] != ABSENT
    }

    /// Whether any of `ms` occurs.
    pub fn any(&self, ms: &[M]) -> bool {
        ms.iter().any(|m| self.has(*m))
    }

    /// Whether `a` occurs and `b` occurs after it.
    pub fn then(&self, a: M, b: M) -> bool {
        self.has(a) && self.has(b) && self.last_start[b as usize] >= self.first_end[a as usize]
    }
}

/// The account was deactivated, disabled or suspended: terminal.
pub fn is_account_deactivated(s: &Signals) -> bool {
    s.any(&[
        M::AccountDeactivatedCode,
        M::AccountDeactivated,
        M::AccountDisabled,
        M::AccountSuspended,
        M::ThisAccountDeactivated,
        M::ServiceDisabled,
        M::OrganizationDisabled,
        M::OAuthNotAllowedForOrganization,
    ])
}

/// The model was retired.
pub fn is_retired_model(s: &Signals) -> bool {
    s.any(&[M::NoLongerAvailable, M::NoLongerSupported, M::EndOfLife])
        || (s.has(M::Model) && s.any(&[M::Deprecated, M::Retired, M::Discontinued, M::Decommissioned]))
}

/// The endpoint moved.
pub fn is_endpoint_moved(s: &Signals) -> bool {
    s.any(&[M::EndpointMoved, M::EndpointNoLonger, M::UpdateBaseUrl])
}

/// Billing suspended the account.
pub fn is_billing_suspended(s: &Signals) -> bool {
    s.has(M::Suspended) && s.any(&[M::SpendingLimit, M::Billing, M::Invoice, M::Payment])
}

/// Credits are exhausted.
pub fn is_credits_exhausted(s: &Signals) -> bool {
    s.any(&[
        M::InsufficientQuotaCode,
        M::BillingHardLimit,
        M::ExceededCurrentQuota,
        M::ExceededUsageQuota,
        M::CreditBalanceTooLowCode,
        M::CreditBalanceTooLow,
        M::CreditsExhausted,
        M::OutOfCredits,
        M::PaymentRequired,
        M::FreeTierModelExhausted,
        M::TierExhausted,
        M::InsufficientBalance,
        M::InsufficientBalanceCode,
        M::InsufficientAccountBalance,
        M::InsufficientCredit,
        M::ExhaustedAllCredits,
        M::UsedAllAvailableCredits,
        M::ExceededCurrentQuotaShort,
        M::PrepaymentDepleted,
        M::BalanceInsufficientZh,
        M::UsageNotIncluded,
    ])
}

/// A daily quota ran out.
pub fn is_daily_quota_exhausted(s: &Signals) -> bool {
    s.any(&[M::TodaysQuota, M::DailyQuota, M::TryAgainTomorrow, M::TpdRateLimit])
}

/// A subscription usage limit was reached (`subscription`: the answer is a Claude
/// subscription's, whose account rate limit is its usage window).
pub fn is_subscription_limit(s: &Signals, subscription: bool) -> bool {
    s.any(&[
        M::UsageLimitReached,
        M::UsageLimitHasBeen,
        M::ClaudeProUsageLimit,
        M::YouveReachedUsageLimit,
        M::YouHaveReachedUsageLimit,
    ]) || (subscription && s.has(M::WouldExceedAccountRateLimit))
}

/// A weekly cap.
pub fn is_weekly_cap(s: &Signals) -> bool {
    s.any(&[M::WeeklyUsageLimit, M::WeeklyLimitReached, M::ReachedYourWeekly])
}

/// A session cap.
pub fn is_session_cap(s: &Signals) -> bool {
    s.any(&[M::SessionUsageLimit, M::SessionLimitReached]) || s.then(M::ReachedYourSession, M::UsageLimit)
}

/// QUOTA_PATTERNS: text that marks a 429 as quota exhaustion rather than throttling.
pub fn looks_like_quota_exhausted(s: &Signals) -> bool {
    (s.has(M::Daily) && s.has(M::Limit))
        || s.then(M::Monthly, M::Quota)
        || s.then(M::Quota, M::Exceed)
        || s.then(M::Insufficient, M::Quota)
        || s.any(&[M::HardLimit, M::HardLimitCode])
        || s.then(M::Plan, M::Limit)
        || s.any(&[
            M::IndividualQuotaReached,
            M::DailyFreeAllocation,
            M::HaveExhaustedTheirQuota,
            M::FreeTier,
            M::QuotaExhausted,
            M::ExhaustedYourCapacity,
            M::UsedAllAvailableCredits,
            M::PrepaymentDepleted,
            M::BalanceInsufficientZh,
        ])
}

/// The text half of the reference's rule table: the reason of the first matching row.
pub fn text_reason(s: &Signals) -> Option<Reason> {
    const ROWS: &[(M, Reason)] = &[
        (M::RateLimit, Reason::RateLimitExceeded),
        (M::TooManyRequests, Reason::RateLimitExceeded),
        (M::HourQuota, Reason::QuotaExhausted),
        (M::QuotaHasBeenExceeded, Reason::QuotaExhausted),
        (M::QuotaExceeded, Reason::QuotaExhausted),
        (M::QuotaWillReset, Reason::QuotaExhausted),
        (M::ExhaustedYourCapacity, Reason::QuotaExhausted),
        (M::QuotaExhausted, Reason::QuotaExhausted),
        (M::FreeTierModelExhausted, Reason::QuotaExhausted),
        (M::OutOfExtraUsage, Reason::QuotaExhausted),
        (M::ExtraUsageRequired, Reason::QuotaExhausted),
        (M::Capacity, Reason::ModelCapacity),
        (M::Overloaded, Reason::ModelCapacity),
        (M::HighDemand, Reason::ModelCapacity),
    ];
    ROWS.iter().find(|(m, _)| s.has(*m)).map(|(_, r)| *r)
}

/// A 400 that means the model is inaccessible, the request does not fit it, or it is
/// malformed for it: fall back to another target without cooling anything. Suppressed when
/// the text looks like a bad credential.
pub fn is_model_access_or_capacity(s: &Signals, structured: &str) -> bool {
    let bad_credential = s.any(&[
        M::InvalidApiKey,
        M::IncorrectApiKey,
        M::ExpiredApiKey,
        M::MissingApiKey,
        M::RevokedApiKey,
        M::AuthenticationFailed,
        M::AuthenticationError,
        M::AuthenticationRequired,
        M::Unauthorized,
        M::NotAuthenticated,
    ]);
    if bad_credential {
        return false;
    }
    if ["model_not_found", "deployment_not_found", "not_found_error"].iter().any(|c| structured.contains(c)) {
        return true;
    }
    let model_access = s.has(M::Model)
        && s.any(&[
            M::DoesNotExist,
            M::NotFound,
            M::NotAvailable,
            M::NoAccess,
            M::NotSupported,
            M::Unsupported,
            M::NotHaveAccess,
        ]);
    let context_overflow = s.any(&[
        M::InputTooLong,
        M::TooManyTokens,
        M::PromptTooLong,
        M::ContextWindow,
        M::MaximumContext,
        M::TokenLimit,
        M::RequestTooLarge,
        M::TokensPerMinute,
    ]) || (s.has(M::Context) && s.any(&[M::TooLong, M::Exceeded, M::Overflow, M::Limit]))
        || s.then(M::Max, M::Token);
    model_access || context_overflow
}

/// A 400 that says the model is missing or not allowed for this key (not that the request does
/// not fit it).
pub fn is_model_access(s: &Signals, structured: &str) -> bool {
    if ["model_not_found", "deployment_not_found"].iter().any(|c| structured.contains(c)) {
        return true;
    }
    s.has(M::Model) && s.any(&[M::DoesNotExist, M::NotFound, M::NoAccess, M::NotHaveAccess])
}

/// A 400 that is really throttling.
pub fn is_rate_limit_400(s: &Signals) -> bool {
    s.any(&[
        M::HighFrequency,
        M::HighFrequencyDash,
        M::HighFrequencyJoined,
        M::NonCompliant,
        M::TooManyRequests,
        M::RateLimit,
        M::RateLimitDash,
        M::RateLimitJoined,
        M::Frequent,
        M::Frequency,
    ])
}

#[cfg(test)]
#[path = "text_tests.rs"]
mod tests;
