//! What a swarm seed leans toward, and the steering that picks it (guided exploration, after
//! Antithesis, on our own simulator): each focus is a mix that makes some transitions of the
//! coverage table likely; `sim swarm` gives the next seed the focus aimed at the most
//! transitions no seed has reached yet, tried least often.

use super::draft::{CHECK_AT_MS, Draft, SAFETY_MS, active, steady};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use scenarios::scenario::{Fault, FaultAction, Method, StateExpect, UpstreamSpec};
use scenarios::{Behaviour, Mode, Script, Window};
use std::collections::BTreeMap;

/// A mix a seed leans toward.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Focus {
    /// The base mix only: server errors, rate limits, resets, stalls, slow answers.
    Plain,
    /// Quota errors, with and without hints, and 403s that are really quota errors (M11).
    Quota,
    /// 403s on API keys: auth cooldowns.
    Auth,
    /// Banned, credits exhausted and expired keys; the operator renews every key when the
    /// safety phase ends.
    Terminal,
    /// Model lockout on (short cooldowns), 502 and 404 slices, an operator clearing lockouts.
    Lockout,
    /// A Claude account with the usage-limit lane that the upstream offers now and then.
    Lane,
    /// A provider with three keys failing long enough to degrade, open and recover.
    Breaker,
    /// Two replicas refreshing OAuth accounts while each in turn loses the store around the
    /// refresh.
    SharedRefresh,
    /// The token server refuses the refresh token: every account ends.
    Refused,
}

impl Focus {
    /// Every focus, in steering order for ties.
    pub const ALL: [Focus; 9] = [
        Focus::Plain,
        Focus::Quota,
        Focus::Auth,
        Focus::Terminal,
        Focus::Lockout,
        Focus::Lane,
        Focus::Breaker,
        Focus::SharedRefresh,
        Focus::Refused,
    ];

    /// The focus's name in scenario names (`swarm-SEED-NAME`).
    pub fn name(self) -> &'static str {
        match self {
            Focus::Plain => "plain",
            Focus::Quota => "quota",
            Focus::Auth => "auth",
            Focus::Terminal => "terminal",
            Focus::Lockout => "lockout",
            Focus::Lane => "lane",
            Focus::Breaker => "breaker",
            Focus::SharedRefresh => "shared-refresh",
            Focus::Refused => "refused",
        }
    }

    /// The focus named `name`.
    pub fn parse(name: &str) -> Option<Focus> {
        Focus::ALL.into_iter().find(|f| f.name() == name)
    }

    /// The seed's own focus: the base mix half the time, else one of the others.
    pub fn drawn(seed: u64) -> Focus {
        let mut r = ChaCha8Rng::seed_from_u64(seed ^ 0xd4a3_f0c5);
        if r.random_bool(0.5) { Focus::Plain } else { Focus::ALL[r.random_range(1..Focus::ALL.len())] }
    }

    /// The transitions (coverage labels) the focus makes likely.
    pub fn aims(self) -> &'static [&'static str] {
        match self {
            Focus::Plain => &[],
            Focus::Quota => &["connection cooldown (QuotaExhausted)"],
            Focus::Auth => &["connection cooldown (AuthError)"],
            Focus::Terminal => &[
                "connection terminal (banned)",
                "connection terminal (credits_exhausted)",
                "connection terminal (expired)",
            ],
            Focus::Lockout => &["model lockout", "model lockout ended by successes", "model lockouts cleared"],
            Focus::Lane => &["lane Accepted"],
            Focus::Breaker => &[
                "breaker Closed -> Degraded (degradation threshold)",
                "breaker Degraded -> Open (failure threshold)",
                "breaker Degraded -> Closed (recovered)",
            ],
            Focus::SharedRefresh => &["oauth deferred", "oauth published", "oauth taken"],
            Focus::Refused => &["oauth refused"],
        }
    }

    /// Whether the seed runs a second replica (`drawn`: the seed's own draw). Terminal keys
    /// are renewed by a reload of one gateway, so that focus runs one.
    pub(super) fn replicas(self, drawn: bool) -> bool {
        match self {
            Focus::SharedRefresh => true,
            Focus::Terminal => false,
            _ => drawn,
        }
    }

    /// Whether the seed adds the OAuth provider.
    pub(super) fn oauth(self, drawn: bool) -> bool {
        matches!(self, Focus::SharedRefresh | Focus::Refused) || drawn
    }

    /// Provider `p`'s class.
    pub(super) fn class(self, p: usize, drawn: &'static str) -> &'static str {
        match self {
            Focus::Auth | Focus::Quota => "api_key",
            Focus::Breaker if p == 0 => "api_key",
            _ => drawn,
        }
    }

    /// How many keys provider `p` has.
    pub(super) fn connections(self, p: usize, drawn: usize) -> usize {
        if self == Focus::Breaker && p == 0 { 3 } else { drawn }
    }
}

/// The focus's own fault for a 5 s slice of provider `p` (half the slices), if it has any.
pub(super) fn slice(focus: Focus, rf: &mut ChaCha8Rng) -> Option<Behaviour> {
    if !rf.random_bool(0.5) {
        return None;
    }
    let quota = r#"{"error":{"message":"Quota exceeded for requests per minute; the quota will reset soon"}}"#;
    Some(match focus {
        Focus::Quota => match rf.random_range(0..3) {
            0 => {
                let s = rf.random_range(1..8).to_string();
                Behaviour::status_with(429, &[("retry-after", s.as_str())], quota)
            }
            1 => Behaviour::status(429, quota),
            _ => Behaviour::status(403, r#"{"error":{"message":"用户额度不足","type":"insufficient_user_quota"}}"#),
        },
        Focus::Auth => Behaviour::status(403, r#"{"error":{"message":"Permission denied for this key"}}"#),
        Focus::Lockout => match rf.random_range(0..2) {
            0 => Behaviour::status(502, r#"{"error":{"message":"bad gateway"}}"#),
            _ => Behaviour::status(404, r#"{"error":{"message":"The model m does not exist"}}"#),
        },
        _ => return None,
    })
}

/// Windows the focus adds to provider `p`'s script (replacing the slices they overlap).
pub(super) fn windows(focus: Focus, rf: &mut ChaCha8Rng, p: usize, windows: &mut Vec<Window>) {
    let (from_ms, to_ms, behaviour) = match focus {
        Focus::Terminal => {
            let from = rf.random_range(0..12u64) * 5_000;
            let behaviour = match rf.random_range(0..3) {
                0 => Behaviour::status(401, r#"{"error":{"message":"This account has been deactivated"}}"#),
                1 => Behaviour::status(402, r#"{"error":{"message":"Your credit balance is too low"}}"#),
                _ => Behaviour::status(401, r#"{"error":{"message":"invalid token"}}"#),
            };
            (from, from + 5_000, behaviour)
        }
        // Long enough for three keys to pass the degradation and the failure threshold.
        Focus::Breaker if p == 0 => {
            let from = rf.random_range(0..6u64) * 5_000;
            (
                from,
                from + rf.random_range(6..12u64) * 5_000,
                Behaviour::status(503, r#"{"error":{"message":"overloaded"}}"#),
            )
        }
        _ => return,
    };
    windows.retain(|w| w.to_ms <= from_ms || w.from_ms >= to_ms);
    windows.push(Window { from_ms, to_ms, behaviour });
    windows.sort_by_key(|w| w.from_ms);
}

/// What the focus adds to the gateway's config, workload and faults once the rest is drawn.
pub(super) fn apply(focus: Focus, d: &mut Draft, rf: &mut ChaCha8Rng) {
    match focus {
        Focus::Terminal => renew_keys(d),
        Focus::Lockout => {
            let base = rf.random_range(2_000..10_000u64);
            d.gateway.push_str(&format!(
                "[resilience.model_lockout]\nenabled = true\nbase_cooldown_ms = {base}\nmax_cooldown_ms = {}\n[server]\nadmin_key = \"{ADMIN_KEY}\"\n",
                base * 4
            ));
            let mut w = steady(
                "operator",
                "-".into(),
                rf.random_range(5_000..SAFETY_MS / 2),
                rf.random_range(1..4),
                false,
                false,
            );
            w.every_ms = 20_000;
            w.method = Method::Delete;
            w.path = Some("/api/resilience/model-cooldowns".into());
            w.body = Some(r#"{"all": true}"#.into());
            w.headers.insert("x-ferroute-admin-key".into(), ADMIN_KEY.into());
            d.workload.push(w);
        }
        Focus::Lane => lane(d, rf),
        _ => {}
    }
}

/// Terminal states, and cooldowns and lockouts longer than the liveness bound, last until the
/// credentials change: the operator renews every key as the safety phase ends (a reload of the
/// one gateway; a reload resets what a key with new credentials had earned).
pub(super) fn renew_keys(d: &mut Draft) {
    let renewed = d.gateway.replace("api_key = \"sk-", "api_key = \"sk-renewed-");
    d.faults.push(Fault {
        at_ms: SAFETY_MS,
        action: FaultAction::Reload,
        a: "gateway".into(),
        b: String::new(),
        gateway: Some(renewed),
    });
}

const ADMIN_KEY: &str = "sim-admin-key-0123456789";

/// A Claude provider `pl` whose one account has the usage-limit lane: the upstream offers the
/// lane in some 5 s slices (its reset 10–60 s away), serves the lane at full speed, and heals.
fn lane(d: &mut Draft, rf: &mut ChaCha8Rng) {
    d.gateway.push_str(
        "[[providers]]\nid = \"pl\"\nformat = \"anthropic\"\nbase_url = \"http://up-l:9000/v1\"\nmodels = [\"m\"]\n[[connections]]\nid = \"pl-c0\"\nprovider = \"pl\"\napi_key = \"sk-ant-oat-pl\"\nusage_limit = { low_priority_lane = true }\n",
    );
    let mut windows = Vec::new();
    for k in 0..SAFETY_MS / 5_000 {
        if rf.random_bool(0.2) {
            let reset = format!("{{epoch+{}}}", rf.random_range(10..60));
            let offer: BTreeMap<String, String> = [
                ("anthropic-ratelimit-unified-status", "rejected"),
                ("anthropic-ratelimit-unified-slow-offer", "treatment"),
                ("anthropic-ratelimit-unified-reset", reset.as_str()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
            let behaviour = Behaviour::Respond {
                status: 429,
                headers: offer,
                body: r#"{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed your account's rate limit."}}"#.into(),
                pad_to: None,
                latency_ms: 0,
            };
            windows.push(Window { from_ms: k * 5_000, to_ms: (k + 1) * 5_000, behaviour });
        }
    }
    let healthy = Box::new(Behaviour::Echo { latency_ms: 0, chunk_ms: 10 });
    let slow = Behaviour::WithHeaders {
        headers: [("anthropic-ratelimit-unified-slow-status".to_owned(), "active".to_owned())].into_iter().collect(),
        then: healthy.clone(),
    };
    d.upstreams.push(UpstreamSpec {
        host: "up-l".into(),
        routes: [
            ("m".to_owned(), Script(Mode::Schedule { period_ms: 1_000_000_000, windows, otherwise: healthy })),
            ("m@slow".to_owned(), Script::always(slow)),
        ]
        .into_iter()
        .collect(),
        codex_backend: false,
    });
    let count = CHECK_AT_MS.div_ceil(2_000) + 5;
    d.workload.push(steady("lane", "pl/m".into(), 500, count, rf.random_bool(0.3), true));
    d.must_heal("lane", count - 1, None);
    d.states.push(active("pl-c0"));
    d.states.push(StateExpect {
        at_ms: CHECK_AT_MS,
        provider: Some("pl".into()),
        breaker: Some("CLOSED".into()),
        ..Default::default()
    });
}

/// The focus for the next seed: the one aimed at the most transitions `reached` lacks,
/// divided by one more than the times it was `tried`; when every aim is reached (or none of
/// the foci aims at what is missing), the seed's own.
pub fn steer(reached: &BTreeMap<String, u64>, tried: &BTreeMap<Focus, u32>, seed: u64) -> Focus {
    let mut best: Option<(f64, Focus)> = None;
    for f in Focus::ALL {
        let missing = f.aims().iter().filter(|a| !reached.contains_key(**a)).count();
        if missing == 0 {
            continue;
        }
        let score = missing as f64 / f64::from(1 + tried.get(&f).copied().unwrap_or(0));
        if best.is_none_or(|(s, _)| score > s) {
            best = Some((score, f));
        }
    }
    best.map_or_else(|| Focus::drawn(seed), |(_, f)| f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_focus_aims_only_at_expected_transitions_and_parses_back_from_its_name() {
        for f in Focus::ALL {
            assert_eq!(Focus::parse(f.name()), Some(f));
            for a in f.aims() {
                assert!(crate::coverage::EXPECTED.contains(a), "{f:?} aims at {a:?}, which the table does not expect");
            }
        }
    }

    #[test]
    fn steering_prefers_the_focus_with_most_unreached_aims_and_tires_of_one_that_misses() {
        let mut reached = BTreeMap::new();
        let mut tried = BTreeMap::new();
        assert_eq!(steer(&reached, &tried, 1), Focus::Terminal);
        tried.insert(Focus::Terminal, 2);
        // 3 missing / 3 tries = 1 is now behind 3 missing / 1 of the lockout focus.
        assert_eq!(steer(&reached, &tried, 1), Focus::Lockout);
        reached.insert("model lockout".to_owned(), 1);
        // Lockout now misses 2: the breaker focus, missing 3, goes first.
        assert_eq!(steer(&reached, &tried, 1), Focus::Breaker);
        for f in Focus::ALL {
            for a in f.aims() {
                reached.insert((*a).to_owned(), 1);
            }
        }
        assert_eq!(steer(&reached, &tried, 7), Focus::drawn(7));
    }
}
