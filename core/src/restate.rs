//! M11: upstream status restatement.
//!
//! Some gateways report a temporary quota exhaustion with a status clients treat as
//! permanent (403, sometimes 400). Restatement rewrites the status before any classification,
//! and tells the client when to retry. The internal cooldown is decided separately (M3/M6).

use std::time::Duration;

/// One restatement rule. Markers are lower-case and matched as substrings of the lower-cased
/// message and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestatementRule {
    /// Stable id, reported with the decision.
    pub id: &'static str,
    /// Statuses the rule applies to.
    pub from_statuses: &'static [u16],
    /// The status the response is restated to.
    pub to_status: u16,
    /// Any of these in the message or body makes the rule match.
    pub text_markers: &'static [&'static str],
    /// Any of these vetoes the match.
    pub exclude_markers: &'static [&'static str],
    /// Retry-After told to the client when the upstream gave none.
    pub default_retry_after: Duration,
}

/// The result of restatement: the status to classify and report, and the client's retry hint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Restated {
    /// Status after restatement.
    pub status: u16,
    /// Status the upstream sent.
    pub from_status: u16,
    /// Retry hint for the client (the upstream's, else the rule's default when one matched).
    pub retry_after: Option<Duration>,
    /// The rule that matched, if any.
    pub rule_id: Option<&'static str>,
}

/// The misreporting gateway: `额度不足` ("insufficient quota") arrives as 403 or 400.
/// `无权访问` ("no access") vetoes: a missing model permission stays 403.
pub const AGENTROUTER_RULES: &[RestatementRule] = &[RestatementRule {
    id: "agentrouter-quota-misstatus",
    from_statuses: &[403, 400],
    to_status: 429,
    text_markers: &["额度不足"],
    exclude_markers: &["无权访问"],
    default_retry_after: Duration::from_secs(60),
}];

/// OpenAI's APIs: an overloaded model has been answered as a 429 ("That model is currently
/// overloaded with other requests.", type `server_error`: openai-429-model-overloaded in the
/// corpus, https://github.com/AineeJames/ChatGPTerminator/issues/3). It is the provider's
/// failure, the 503 the same words come with elsewhere; quota text vetoes.
pub const OPENAI_RULES: &[RestatementRule] = &[RestatementRule {
    id: "openai-overloaded-as-429",
    from_statuses: &[429],
    to_status: 503,
    text_markers: &["currently overloaded"],
    exclude_markers: &["quota", "billing"],
    default_retry_after: Duration::from_secs(5),
}];

/// The built-in rules of a provider profile (matched case-insensitively).
pub fn rules_for(profile: &str) -> &'static [RestatementRule] {
    if profile.eq_ignore_ascii_case("agentrouter") {
        AGENTROUTER_RULES
    } else if profile.eq_ignore_ascii_case("openai") || profile.eq_ignore_ascii_case("responses") {
        OPENAI_RULES
    } else {
        &[]
    }
}

/// Applies the first matching rule of `profile` to an upstream failure. `haystack` is the
/// error message and body as one lower-cased string.
pub fn restate(profile: &str, status: u16, haystack: &str, upstream_retry_after: Option<Duration>) -> Restated {
    let passthrough = Restated { status, from_status: status, retry_after: upstream_retry_after, rule_id: None };
    if haystack.is_empty() {
        return passthrough;
    }
    for rule in rules_for(profile) {
        let matches = rule.from_statuses.contains(&status)
            && rule.text_markers.iter().any(|m| haystack.contains(m))
            && !rule.exclude_markers.iter().any(|m| haystack.contains(m));
        if matches {
            return Restated {
                status: rule.to_status,
                from_status: status,
                retry_after: Some(upstream_retry_after.filter(|d| !d.is_zero()).unwrap_or(rule.default_retry_after)),
                rule_id: Some(rule.id),
            };
        }
    }
    passthrough
}

#[cfg(test)]
mod tests {
    //! BEHAVIOUR.md §12.8 R1–R9.
    use super::*;

    fn hay(s: &str) -> String {
        s.to_lowercase()
    }

    #[test]
    fn r1_quota_403_becomes_429_with_60s() {
        let r = restate(
            "agentrouter",
            403,
            &hay(r#"{"error":{"message":"用户额度不足","type":"insufficient_user_quota"}}"#),
            None,
        );
        assert_eq!(
            r,
            Restated {
                status: 429,
                from_status: 403,
                retry_after: Some(Duration::from_secs(60)),
                rule_id: Some("agentrouter-quota-misstatus")
            }
        );
    }

    #[test]
    fn r2_model_access_denied_stays_403() {
        let r = restate("agentrouter", 403, &hay("无权访问模型 claude-sonnet-4"), None);
        assert_eq!((r.status, r.rule_id), (403, None));
    }

    #[test]
    fn r3_marker_in_body_only() {
        let r = restate("agentrouter", 403, &hay(r#"Forbidden {"error":{"message":"用户额度不足，请充值"}}"#), None);
        assert_eq!(r.status, 429);
    }

    #[test]
    fn r4_upstream_retry_after_is_kept() {
        let r = restate("agentrouter", 403, &hay("用户额度不足"), Some(Duration::from_millis(5000)));
        assert_eq!((r.status, r.retry_after), (429, Some(Duration::from_millis(5000))));
    }

    #[test]
    fn r5_400_is_restated_too() {
        assert_eq!(restate("agentrouter", 400, &hay("额度不足"), None).status, 429);
    }

    #[test]
    fn r6_other_403_untouched() {
        let r = restate("agentrouter", 403, &hay("Invalid API key"), None);
        assert_eq!((r.status, r.rule_id), (403, None));
    }

    #[test]
    fn r7_rules_are_per_provider() {
        assert_eq!(restate("openai", 403, &hay("用户额度不足"), None).status, 403);
    }

    #[test]
    fn r8_already_429_passes_through() {
        let r = restate("agentrouter", 429, &hay("用户额度不足"), Some(Duration::from_millis(1000)));
        assert_eq!((r.status, r.rule_id, r.retry_after), (429, None, Some(Duration::from_millis(1000))));
    }

    #[test]
    fn r9_registry_has_agentrouter_rule() {
        assert!(!rules_for("AgentRouter").is_empty());
    }

    #[test]
    fn an_overloaded_model_sent_as_429_is_the_503_it_is() {
        // openai-429-model-overloaded (https://github.com/AineeJames/ChatGPTerminator/issues/3).
        let body = r#"{"error":{"message":"That model is currently overloaded with other requests. You can retry your request, or contact us through our help center at help.openai.com if the error persists. (Please include the request ID 691f1c704cab28dd0835be85e87578e3 in your message.)","type":"server_error","param":null,"code":null}}"#;
        let r = restate("openai", 429, &hay(body), None);
        assert_eq!((r.status, r.rule_id), (503, Some("openai-overloaded-as-429")));
        assert_eq!(restate("responses", 429, &hay(body), None).status, 503);
        let quota = "You exceeded your current quota; the model is currently overloaded";
        assert_eq!(restate("openai", 429, &hay(quota), None).status, 429, "quota text vetoes");
        assert_eq!(restate("anthropic", 429, &hay(body), None).status, 429, "rules are per profile");
    }
}
