//! M12: provider error rules.
//!
//! After restatement, rules may name the failure's reason and lock scope. Built-in rules see the
//! full body text only for providers on the full-text allowlist (others see only the structured
//! error code and type), and their scope is acted on only for providers on the scope
//! allowlist. Operator rules from settings are checked first and bypass both allowlists.

use crate::hint::{header, parse_duration_words};
use crate::settings::OperatorErrorRule;
use crate::types::{Reason, Scope};
use std::time::Duration;

/// A matched rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleMatch {
    /// Rule id (`operator:<provider>:<index>` for operator rules).
    pub id: String,
    /// The reason the rule assigns.
    pub reason: Reason,
    /// The lock scope the rule declares.
    pub scope: Scope,
    /// A declared cooldown, if any.
    pub cooldown: Option<Duration>,
    /// Whether the scope may be acted on (scope allowlist or operator rule).
    pub honours_scope: bool,
}

enum Matcher {
    /// Any of these substrings of the (lower-cased) match body.
    Any(&'static [&'static str]),
    /// The first marker, plus a "resets in N unit" countdown that becomes the cooldown.
    ResetsIn(&'static str),
    /// Any of these headers equals "0".
    HeaderZero(&'static [&'static str]),
    /// A `k=v,k=v` header with some value 0.
    HeaderAnyKeyZero(&'static str),
    /// Always (the status alone decides).
    Status,
}

struct BuiltinRule {
    id: &'static str,
    providers: &'static [&'static str],
    statuses: &'static [u16],
    matcher: Matcher,
    reason: Reason,
    scope: Scope,
    cooldown_ms: Option<u64>,
}

const OPENCODE: &[&str] = &["opencode", "opencode-zen", "opencode-go", "opencode-cli"];

const BUILTIN: &[BuiltinRule] = &[
    BuiltinRule {
        id: "opencode-endpoint-unavailable",
        providers: OPENCODE,
        statuses: &[400, 429],
        matcher: Matcher::Any(&["endpoint is unavailable"]),
        reason: Reason::ModelCapacity,
        scope: Scope::Model,
        cooldown_ms: Some(300_000),
    },
    BuiltinRule {
        id: "opencode-monthly-quota-resets-in",
        providers: OPENCODE,
        statuses: &[429],
        matcher: Matcher::ResetsIn("monthly usage limit reached"),
        reason: Reason::QuotaExhausted,
        scope: Scope::Connection,
        cooldown_ms: None,
    },
    BuiltinRule {
        id: "opencode-quota-exhausted-headers",
        providers: OPENCODE,
        statuses: &[429],
        matcher: Matcher::HeaderZero(&["x-ratelimit-remaining-requests", "x-ratelimit-remaining-tokens"]),
        reason: Reason::QuotaExhausted,
        scope: Scope::Connection,
        cooldown_ms: None,
    },
    BuiltinRule {
        id: "opencode-quota-exhausted-body",
        providers: OPENCODE,
        statuses: &[429],
        matcher: Matcher::Any(&["organization_quota_exceeded", "account_quota_exceeded", "plan_limit_reached"]),
        reason: Reason::QuotaExhausted,
        scope: Scope::Connection,
        cooldown_ms: None,
    },
    BuiltinRule {
        id: "opencode-400-model-unavailable",
        providers: OPENCODE,
        statuses: &[400],
        matcher: Matcher::Any(&["upstream request failed: model is unavailable."]),
        reason: Reason::ModelCapacity,
        scope: Scope::Model,
        cooldown_ms: Some(3_600_000),
    },
    BuiltinRule {
        id: "minimax-per-model-quota",
        providers: &["minimax", "minimax-passthrough"],
        statuses: &[429],
        matcher: Matcher::HeaderAnyKeyZero("x-model-quota-remaining"),
        reason: Reason::QuotaExhausted,
        scope: Scope::Model,
        cooldown_ms: None,
    },
    BuiltinRule {
        id: "cloudflare-ai-daily-neuron-allocation",
        providers: &["cloudflare-ai"],
        statuses: &[429],
        matcher: Matcher::Any(&["daily free allocation"]),
        reason: Reason::QuotaExhausted,
        scope: Scope::Connection,
        cooldown_ms: None,
    },
    BuiltinRule {
        id: "openrouter-credit-exhausted-402",
        providers: &["openrouter"],
        statuses: &[402],
        matcher: Matcher::Status,
        reason: Reason::QuotaExhausted,
        scope: Scope::Connection,
        cooldown_ms: Some(120_000),
    },
    BuiltinRule {
        id: "agentrouter-user-quota-exhausted",
        providers: &["agentrouter"],
        statuses: &[400, 403, 429],
        matcher: Matcher::Any(&["额度不足"]),
        reason: Reason::QuotaExhausted,
        scope: Scope::Connection,
        cooldown_ms: None,
    },
    // Declared 6 h; the lockout caps it at `max_cooldown_ms`.
    BuiltinRule {
        id: "agentrouter-model-access-denied",
        providers: &["agentrouter"],
        statuses: &[403],
        matcher: Matcher::Any(&["无权访问模型"]),
        reason: Reason::AuthError,
        scope: Scope::Model,
        cooldown_ms: Some(21_600_000),
    },
];

/// Providers whose built-in rules may read the whole body text.
pub const FULL_TEXT_RULE_PROVIDERS: &[&str] = &["agentrouter"];
/// Providers whose rule scope is acted on.
pub const HONORS_RULE_LOCK_SCOPE_PROVIDERS: &[&str] =
    &["agentrouter", "opencode", "opencode-zen", "opencode-go", "opencode-cli"];

fn listed(list: &[&str], provider: &str) -> bool {
    list.iter().any(|p| p.eq_ignore_ascii_case(provider))
}

/// Whether a rule's scope is acted on for `provider`.
pub fn honours_rule_lock_scope(provider: &str, operator: &[OperatorErrorRule]) -> bool {
    listed(HONORS_RULE_LOCK_SCOPE_PROVIDERS, provider) || has_operator_rule(provider, operator)
}

fn has_operator_rule(provider: &str, operator: &[OperatorErrorRule]) -> bool {
    operator.iter().any(|r| r.provider.eq_ignore_ascii_case(provider))
}

/// What a rule may read: the lower-cased body for full-text providers (or those with operator
/// rules) when it is non-empty, otherwise only the structured error's code and type.
pub fn rule_match_body<'a>(
    provider: &str,
    operator: &[OperatorErrorRule],
    body_lower: &'a str,
    structured: &'a str,
) -> &'a str {
    if !body_lower.is_empty() && (listed(FULL_TEXT_RULE_PROVIDERS, provider) || has_operator_rule(provider, operator)) {
        body_lower
    } else {
        structured
    }
}

/// The first matching operator rule (operator rules see the whole body).
pub fn find_operator_rule(
    provider: &str,
    status: u16,
    body_lower: &str,
    operator: &[OperatorErrorRule],
) -> Option<RuleMatch> {
    for (i, r) in operator.iter().enumerate() {
        let matches = r.provider.eq_ignore_ascii_case(provider)
            && r.statuses.contains(&status)
            && (r.text_markers.is_empty() || r.text_markers.iter().any(|m| body_lower.contains(&m.to_lowercase())));
        if matches {
            return Some(RuleMatch {
                id: format!("operator:{}:{i}", r.provider),
                reason: r.reason,
                scope: r.scope,
                cooldown: r.cooldown_ms.map(Duration::from_millis),
                honours_scope: true,
            });
        }
    }
    None
}

/// Every provider some built-in rule names, once each: asked on every classified failure, so
/// one short list instead of every rule's (a test keeps it equal to the providers of `BUILTIN`).
const BUILTIN_PROVIDERS: &[&str] = &[
    "agentrouter",
    "cloudflare-ai",
    "minimax",
    "minimax-passthrough",
    "opencode",
    "opencode-cli",
    "opencode-go",
    "opencode-zen",
    "openrouter",
];

/// Whether any rule (operator or built-in) names `provider`.
pub fn has_rules(provider: &str, operator: &[OperatorErrorRule]) -> bool {
    has_operator_rule(provider, operator) || listed(BUILTIN_PROVIDERS, provider)
}

/// The first matching rule: operator rules first, then built-in ones.
pub fn find_rule(
    provider: &str,
    status: u16,
    headers: &[(&str, &str)],
    body_lower: &str,
    structured: &str,
    operator: &[OperatorErrorRule],
) -> Option<RuleMatch> {
    if !has_rules(provider, operator) {
        return None;
    }
    if let Some(m) = find_operator_rule(provider, status, body_lower, operator) {
        return Some(m);
    }
    let body = rule_match_body(provider, operator, body_lower, structured);
    let honours = honours_rule_lock_scope(provider, operator);
    BUILTIN.iter().filter(|r| listed(r.providers, provider) && r.statuses.contains(&status)).find_map(|r| {
        let cooldown = match &r.matcher {
            Matcher::Any(markers) => {
                markers.iter().any(|m| body.contains(m)).then_some(r.cooldown_ms.map(Duration::from_millis))?
            }
            Matcher::ResetsIn(marker) => {
                if !body.contains(marker) {
                    return None;
                }
                let pos = body.find("resets in").or_else(|| body.find("reset in"))?;
                let after = body[pos..].split_once(" in ").map(|x| x.1)?;
                Some(parse_duration_words(after)?)
            }
            Matcher::HeaderZero(names) => names.iter().any(|n| header(headers, n) == Some("0")).then_some(None)?,
            Matcher::HeaderAnyKeyZero(name) => header(headers, name)?
                .split(',')
                .any(|kv| kv.split_once('=').is_some_and(|(_, v)| v.trim() == "0"))
                .then_some(None)?,
            Matcher::Status => r.cooldown_ms.map(Duration::from_millis),
        };
        Some(RuleMatch { id: r.id.to_owned(), reason: r.reason, scope: r.scope, cooldown, honours_scope: honours })
    })
}

#[cfg(test)]
mod tests {
    //! BEHAVIOUR.md §12.9 A1–A4, A8, A9, A14.
    use super::*;

    fn m(provider: &str, status: u16, body: &str) -> Option<(Reason, Scope)> {
        find_rule(provider, status, &[], &body.to_lowercase(), "", &[]).map(|r| (r.reason, r.scope))
    }

    #[test]
    fn the_provider_list_names_every_built_in_rules_providers_once() {
        let mut from_rules: Vec<&str> = BUILTIN.iter().flat_map(|r| r.providers.iter().copied()).collect();
        from_rules.sort_unstable();
        from_rules.dedup();
        let mut listed: Vec<&str> = BUILTIN_PROVIDERS.to_vec();
        listed.sort_unstable();
        assert_eq!(listed, from_rules);
        assert!(has_rules("OpenRouter", &[]) && !has_rules("openai", &[]));
    }

    #[test]
    fn agentrouter_quota_and_model_access() {
        assert_eq!(
            m("agentrouter", 429, r#"{"error":{"message":"用户额度不足，请充值"}}"#),
            Some((Reason::QuotaExhausted, Scope::Connection))
        );
        assert_eq!(m("agentrouter", 403, "用户额度不足"), Some((Reason::QuotaExhausted, Scope::Connection)));
        assert_eq!(
            m("agentrouter", 403, r#"{"error":{"message":"无权访问模型 claude-sonnet-4"}}"#),
            Some((Reason::AuthError, Scope::Model))
        );
        assert_eq!(m("agentrouter", 403, "Invalid API key"), None);
    }

    #[test]
    fn full_text_only_for_allowlisted_providers() {
        assert_eq!(rule_match_body("agentrouter", &[], "用户额度不足", "rate_limited requests"), "用户额度不足");
        assert_eq!(rule_match_body("opencode", &[], "monthly usage limit reached", "code type"), "code type");
        assert_eq!(rule_match_body("openrouter", &[], "some error text", ""), "");
        assert_eq!(rule_match_body("agentrouter", &[], "", "structured"), "structured");
        // opencode sees only structured fields, so a marker inside the message does not match.
        assert_eq!(m("opencode", 429, r#"{"error":{"message":"organization_quota_exceeded"}}"#), None);
        let r = find_rule("opencode", 429, &[], "", "organization_quota_exceeded", &[]);
        assert_eq!(r.map(|r| r.reason), Some(Reason::QuotaExhausted));
    }

    #[test]
    fn scope_allowlist() {
        for p in ["agentrouter", "AgentRouter", "opencode", "opencode-zen", "opencode-go", "opencode-cli"] {
            assert!(honours_rule_lock_scope(p, &[]), "{p}");
        }
        assert!(!honours_rule_lock_scope("openrouter", &[]));
    }

    #[test]
    fn operator_rules_come_first_and_bypass_allowlists() {
        let op = vec![OperatorErrorRule {
            provider: "my-gateway".into(),
            statuses: vec![403],
            text_markers: vec!["Quota Exceeded".into()],
            reason: Reason::QuotaExhausted,
            scope: Scope::Connection,
            cooldown_ms: Some(7_000),
        }];
        let r = find_rule("my-gateway", 403, &[], "your quota exceeded today", "", &op).expect("match");
        assert_eq!(
            (r.reason, r.scope, r.cooldown, r.honours_scope),
            (Reason::QuotaExhausted, Scope::Connection, Some(Duration::from_secs(7)), true)
        );
        assert!(find_rule("my-gateway", 429, &[], "quota exceeded", "", &op).is_none());
    }

    #[test]
    fn header_and_countdown_rules() {
        let r = find_rule("opencode-go", 429, &[("x-ratelimit-remaining-requests", "0")], "", "", &[]);
        assert_eq!(r.map(|r| r.id), Some("opencode-quota-exhausted-headers".to_string()));
        let r = find_rule("minimax", 429, &[("x-model-quota-remaining", "a=3,b=0")], "", "", &[]);
        assert_eq!(r.map(|r| (r.reason, r.scope)), Some((Reason::QuotaExhausted, Scope::Model)));
        let ops = vec![OperatorErrorRule {
            provider: "opencode".into(),
            statuses: vec![418],
            text_markers: vec![],
            reason: Reason::Unknown,
            scope: Scope::Model,
            cooldown_ms: None,
        }];
        let r = find_rule("opencode", 429, &[], "monthly usage limit reached, resets in 3 hours", "", &ops);
        assert_eq!(r.map(|r| r.cooldown), Some(Some(Duration::from_secs(3 * 3600))));
    }
}
