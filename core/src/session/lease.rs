//! Exclusive session leases (M14): the rules, as pure functions over a lease record; the shell
//! keeps the records in SQLite, whose constraints make one active lease per owner and one per
//! connection hold across concurrent acquires and restarts.
//!
//! A managed client names itself with an owner id (`vlo_` + 43 base64url characters; only its
//! SHA-256 is kept), acquires a lease on one connection its key may use, and sends the owner
//! and the lease's generation with every inference request. A generation is a fence: it grows
//! with every lease the owner acquires, and a request carrying an older one is refused before
//! it is dispatched. Times are wall-clock Unix milliseconds passed in by the caller: leases
//! outlive the process.

use std::time::Duration;

/// The permission a client key needs to hold leases.
pub const PERMISSION: &str = "lease:exclusive";
/// Lease TTL when the request names none: two minutes.
pub const DEFAULT_TTL: Duration = Duration::from_secs(120);
/// Shortest lease.
pub const MIN_TTL: Duration = Duration::from_secs(1);
/// Longest lease: 30 minutes (a client renews; a vanished one frees its connection soon).
pub const MAX_TTL: Duration = Duration::from_secs(30 * 60);
/// Largest generation (JavaScript's safe integer, as the reference gateway's clients expect).
pub const MAX_GENERATION: u64 = (1 << 53) - 1;

/// The state of a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LeaseState {
    /// Held.
    Active,
    /// Given back by its owner.
    Released,
    /// Not renewed in time.
    Expired,
    /// Ended by the gateway (its connection left the key's allowed connections).
    Invalidated,
}

impl LeaseState {
    /// The name in API bodies and the store.
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseState::Active => "ACTIVE",
            LeaseState::Released => "RELEASED",
            LeaseState::Expired => "EXPIRED",
            LeaseState::Invalidated => "INVALIDATED",
        }
    }

    /// Parses a stored name.
    pub fn parse(s: &str) -> Option<LeaseState> {
        [LeaseState::Active, LeaseState::Released, LeaseState::Expired, LeaseState::Invalidated]
            .into_iter()
            .find(|x| x.as_str() == s)
    }
}

/// One lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// SHA-256 (hex) of the owner id.
    pub owner_hash: String,
    /// The client key's id.
    pub key_id: String,
    /// The leased connection.
    pub connection: String,
    /// The model it was acquired for.
    pub model: String,
    /// Its generation.
    pub generation: u64,
    /// Its stored state.
    pub state: LeaseState,
    /// When it was acquired (Unix ms).
    pub acquired_at_ms: u64,
    /// When it was last renewed.
    pub renewed_at_ms: u64,
    /// When it lapses unless renewed.
    pub expires_at_ms: u64,
}

impl Lease {
    /// The state at `now_ms`: an active lease past its expiry is expired (reclaimed lazily).
    pub fn state_at(&self, now_ms: u64) -> LeaseState {
        if self.state == LeaseState::Active && now_ms >= self.expires_at_ms { LeaseState::Expired } else { self.state }
    }
}

/// Why a lease operation or a fenced request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseError {
    /// No client key (the lease API needs one).
    AuthenticationRequired,
    /// The client key is not a configured one.
    ApiKeyInvalid,
    /// The request is not `application/json`.
    ContentTypeRequired,
    /// Unknown or missing `action`.
    ActionInvalid,
    /// Owner or generation header missing.
    ContextRequired,
    /// Owner or generation malformed.
    ContextInvalid,
    /// `model` missing or out of bounds (1–512 characters).
    ModelInvalid,
    /// The key lacks `lease:exclusive`.
    ScopeRequired,
    /// The key has no `allowed_connections`.
    KeyConfigurationInvalid,
    /// The generation is not the owner's active lease.
    FenceStale,
    /// No connection the key may use serves the model.
    NoEligibleConnection,
    /// No lease with that generation for this owner and key.
    LeaseRequired,
    /// The lease's connection cannot serve the request (or belongs to another key).
    ConnectionMismatch,
    /// Every eligible connection is cooling down or terminal.
    EligibilityUnavailable,
    /// Every eligible connection that could serve is held by another owner's lease.
    CapacityUnavailable,
    /// The lease store cannot be reached.
    ServiceUnavailable,
}

impl LeaseError {
    /// The error code.
    pub fn code(self) -> &'static str {
        match self {
            LeaseError::AuthenticationRequired => "LEASE_AUTHENTICATION_REQUIRED",
            LeaseError::ApiKeyInvalid => "LEASE_API_KEY_INVALID",
            LeaseError::ContentTypeRequired => "LEASE_CONTENT_TYPE_REQUIRED",
            LeaseError::ActionInvalid => "LEASE_ACTION_INVALID",
            LeaseError::ContextRequired => "LEASE_CONTEXT_REQUIRED",
            LeaseError::ContextInvalid => "LEASE_CONTEXT_INVALID",
            LeaseError::ModelInvalid => "LEASE_MODEL_INVALID",
            LeaseError::ScopeRequired => "LEASE_SCOPE_REQUIRED",
            LeaseError::KeyConfigurationInvalid => "LEASE_KEY_CONFIGURATION_INVALID",
            LeaseError::FenceStale => "LEASE_FENCE_STALE",
            LeaseError::NoEligibleConnection => "LEASE_NO_ELIGIBLE_CONNECTION",
            LeaseError::LeaseRequired => "LEASE_REQUIRED",
            LeaseError::ConnectionMismatch => "LEASE_CONNECTION_MISMATCH",
            LeaseError::EligibilityUnavailable => "LEASE_ELIGIBILITY_UNAVAILABLE",
            LeaseError::CapacityUnavailable => "LEASE_CAPACITY_UNAVAILABLE",
            LeaseError::ServiceUnavailable => "LEASE_SERVICE_UNAVAILABLE",
        }
    }

    /// The HTTP status.
    pub fn status(self) -> u16 {
        match self {
            LeaseError::AuthenticationRequired | LeaseError::ApiKeyInvalid => 401,
            LeaseError::ContentTypeRequired => 415,
            LeaseError::ActionInvalid
            | LeaseError::ContextRequired
            | LeaseError::ContextInvalid
            | LeaseError::ModelInvalid => 400,
            LeaseError::ScopeRequired | LeaseError::KeyConfigurationInvalid => 403,
            LeaseError::FenceStale
            | LeaseError::NoEligibleConnection
            | LeaseError::LeaseRequired
            | LeaseError::ConnectionMismatch => 409,
            LeaseError::EligibilityUnavailable | LeaseError::CapacityUnavailable => 429,
            LeaseError::ServiceUnavailable => 503,
        }
    }

    /// A sentence for the client (never naming owners, keys or connections).
    pub fn message(self) -> &'static str {
        match self {
            LeaseError::AuthenticationRequired => {
                "exclusive leases need a client key: send Authorization: Bearer <key>"
            }
            LeaseError::ApiKeyInvalid => "invalid client key",
            LeaseError::ContentTypeRequired => "send the lease request as Content-Type: application/json",
            LeaseError::ActionInvalid => "`action` must be one of acquire, status, renew, release",
            LeaseError::ContextRequired => "send both X-Ferroute-Lease-Owner and X-Ferroute-Lease-Generation",
            LeaseError::ContextInvalid => {
                "X-Ferroute-Lease-Owner must be vlo_ and 43 base64url characters, and the generation a positive integer"
            }
            LeaseError::ModelInvalid => "`model` must be a string of 1 to 512 characters",
            LeaseError::ScopeRequired => "this key lacks the lease:exclusive permission",
            LeaseError::KeyConfigurationInvalid => "exclusive lease keys require explicit allowed connections",
            LeaseError::FenceStale => "this lease generation is not the owner's active lease",
            LeaseError::NoEligibleConnection => "no connection this key may use serves that model",
            LeaseError::LeaseRequired => "no lease with that generation for this owner and key",
            LeaseError::ConnectionMismatch => "the leased connection cannot serve this request",
            LeaseError::EligibilityUnavailable => "every connection this key may lease is cooling down or unusable",
            LeaseError::CapacityUnavailable => "Exclusive managed session capacity is temporarily unavailable",
            LeaseError::ServiceUnavailable => "the lease store is unavailable",
        }
    }
}

/// Whether `owner` is `vlo_` followed by exactly 43 base64url characters.
pub fn valid_owner(owner: &str) -> bool {
    owner.len() == 47
        && owner.starts_with("vlo_")
        && owner[4..].bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The stored form of an owner id: its SHA-256, hex.
pub fn owner_hash(owner: &str) -> String {
    super::key::sha256_hex(owner.as_bytes())
}

/// A generation as written in a header or body: a positive integer without a sign or
/// leading zeros, at most [`MAX_GENERATION`].
pub fn parse_generation(s: &str) -> Option<u64> {
    let s = s.trim();
    if s.is_empty() || s.starts_with('0') || !s.bytes().all(|b| b.is_ascii_digit()) || s.len() > 16 {
        return None;
    }
    s.parse::<u64>().ok().filter(|g| (1..=MAX_GENERATION).contains(g))
}

/// The TTL a request asks for, clamped to 1 s – 30 min (two minutes when it asks for none).
pub fn clamp_ttl(requested_ms: Option<u64>) -> Duration {
    requested_ms.map_or(DEFAULT_TTL, |ms| Duration::from_millis(ms).clamp(MIN_TTL, MAX_TTL))
}

/// `Retry-After` of a capacity refusal: the seconds until the soonest relevant lease lapses,
/// rounded up and clamped to 1–3600 (1 when none is known).
pub fn capacity_retry_after(soonest_expiry_ms: Option<u64>, now_ms: u64) -> u64 {
    soonest_expiry_ms.map_or(1, |at| at.saturating_sub(now_ms).div_ceil(1000).clamp(1, 3600))
}

/// The fence of an inference request: `lease` is the owner's lease with the generation the
/// request carried (if one exists). Passes with the connection the request must use.
pub fn fence<'a>(lease: Option<&'a Lease>, key_id: &str, now_ms: u64) -> Result<&'a str, LeaseError> {
    let lease = lease.ok_or(LeaseError::LeaseRequired)?;
    if lease.key_id != key_id {
        return Err(LeaseError::ConnectionMismatch);
    }
    match lease.state_at(now_ms) {
        LeaseState::Active => Ok(&lease.connection),
        _ => Err(LeaseError::FenceStale),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWNER: &str = "vlo_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA0";

    fn lease(state: LeaseState, expires: u64) -> Lease {
        Lease {
            owner_hash: owner_hash(OWNER),
            key_id: "team".into(),
            connection: "c1".into(),
            model: "m".into(),
            generation: 3,
            state,
            acquired_at_ms: 0,
            renewed_at_ms: 0,
            expires_at_ms: expires,
        }
    }

    #[test]
    fn owner_ids_generations_and_ttls() {
        assert!(valid_owner(OWNER));
        assert!(!valid_owner("vlo_short"));
        assert!(!valid_owner(&OWNER.replace('0', "=")));
        assert!(!valid_owner(&OWNER.replace("vlo_", "vlx_")));
        assert_eq!(owner_hash(OWNER).len(), 64);
        assert_ne!(owner_hash(OWNER), OWNER);
        assert_eq!(parse_generation("7"), Some(7));
        for bad in ["0", "07", "-1", "+1", "1.0", "", "x", "9007199254740992"] {
            assert_eq!(parse_generation(bad), None, "{bad}");
        }
        assert_eq!(parse_generation("9007199254740991"), Some(MAX_GENERATION));
        assert_eq!(clamp_ttl(None), Duration::from_secs(120));
        assert_eq!(clamp_ttl(Some(5)), MIN_TTL);
        assert_eq!(clamp_ttl(Some(99_999_999)), MAX_TTL);
        assert_eq!(capacity_retry_after(Some(10_001), 0), 11);
        assert_eq!(capacity_retry_after(Some(5), 10), 1);
        assert_eq!(capacity_retry_after(Some(10_000_000), 0), 3600);
        assert_eq!(capacity_retry_after(None, 0), 1);
    }

    #[test]
    fn the_fence_passes_only_an_active_lease_of_the_same_key() {
        let active = lease(LeaseState::Active, 1_000);
        assert_eq!(fence(Some(&active), "team", 999), Ok("c1"));
        assert_eq!(fence(Some(&active), "team", 1_000), Err(LeaseError::FenceStale), "expired at its deadline");
        assert_eq!(fence(Some(&active), "other", 10), Err(LeaseError::ConnectionMismatch));
        assert_eq!(fence(Some(&lease(LeaseState::Released, 1_000)), "team", 10), Err(LeaseError::FenceStale));
        assert_eq!(fence(None, "team", 10), Err(LeaseError::LeaseRequired));
    }

    use proptest::prelude::*;

    fn any_state() -> impl Strategy<Value = LeaseState> {
        prop_oneof![
            Just(LeaseState::Active),
            Just(LeaseState::Released),
            Just(LeaseState::Expired),
            Just(LeaseState::Invalidated)
        ]
    }

    proptest! {
        /// Once the fence refuses a lease it refuses it at every later instant (a lapsed
        /// generation never comes back), and it only ever passes the lease's own connection
        /// to the lease's own key.
        #[test]
        fn the_fence_is_monotonic_in_time(
            state in any_state(),
            expires in 0u64..10_000,
            t1 in 0u64..20_000,
            dt in 0u64..20_000,
            same_key in any::<bool>(),
        ) {
            let l = Lease { state, expires_at_ms: expires, ..lease(LeaseState::Active, 0) };
            let key = if same_key { "team" } else { "other" };
            let (a, b) = (fence(Some(&l), key, t1), fence(Some(&l), key, t1 + dt));
            if b.is_ok() {
                prop_assert!(a.is_ok());
            }
            if let Ok(c) = a {
                prop_assert_eq!(c, "c1");
                prop_assert!(same_key && state == LeaseState::Active && t1 < expires);
            }
        }

        /// Every generation a client can be given reads back as itself; nothing outside
        /// 1..=MAX_GENERATION is accepted.
        #[test]
        fn generations_round_trip(g in 0u64..=(MAX_GENERATION + 10)) {
            let parsed = parse_generation(&g.to_string());
            prop_assert_eq!(parsed, (1..=MAX_GENERATION).contains(&g).then_some(g));
        }

        /// A TTL is always within bounds, and a retry hint always 1–3600 s.
        #[test]
        fn ttls_and_retry_hints_stay_in_bounds(ttl in proptest::option::of(any::<u64>()), at in proptest::option::of(any::<u64>()), now in any::<u64>()) {
            let t = clamp_ttl(ttl);
            prop_assert!(t >= MIN_TTL && t <= MAX_TTL);
            prop_assert!((1..=3600).contains(&capacity_retry_after(at, now)));
        }
    }

    #[test]
    fn every_error_has_its_status() {
        assert_eq!(LeaseError::CapacityUnavailable.status(), 429);
        assert_eq!(LeaseError::FenceStale.status(), 409);
        assert_eq!(LeaseError::KeyConfigurationInvalid.status(), 403);
        assert_eq!(LeaseError::ContentTypeRequired.status(), 415);
        assert_eq!(LeaseState::parse("EXPIRED"), Some(LeaseState::Expired));
    }
}
