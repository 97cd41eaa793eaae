//! Config tests: the SPEC example, secrets, and validation that names every field.

use super::*;

fn no_env(_: &str) -> Option<String> {
    None
}

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::from_toml_str(text, &no_env, &[])
}

fn fields(r: Result<Config, ConfigError>) -> Vec<String> {
    match r {
        Err(ConfigError(errs)) => errs.into_iter().map(|e| e.field).collect(),
        Ok(_) => panic!("expected errors"),
    }
}

#[test]
fn example_file_is_valid() {
    let text = include_str!("../../../examples/ferroute.toml");
    let env = |name: &str| match name {
        "FERROUTE_SECRET_KEY" => Some("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=".to_owned()),
        _ => Some(format!("value-of-{name}")),
    };
    let c = Config::from_toml_str(text, &env, &[]).expect("examples/ferroute.toml is valid");
    let max = c.connections.iter().find(|x| x.id == "anthropic-max").and_then(|x| x.oauth.as_ref()).expect("oauth");
    assert_eq!((max.preset.as_str(), max.refresh_token.as_str()), ("claude", "value-of-CLAUDE_REFRESH_TOKEN"));
    assert!(!c.demo);
    assert_eq!(c.server.admin_key.as_deref(), Some("value-of-FERROUTE_ADMIN_KEY"));
    assert!(c.providers.len() >= 2);
    assert!(c.resilience.model_lockout.enabled);
}

#[test]
fn embedded_default_serves_the_demo() {
    let c = Config::embedded(&no_env, &[]).expect("valid");
    assert!(c.demo);
    assert_eq!(c.server.listen, "127.0.0.1:8787");
    assert_eq!(c.server.data_dir, "./ferroute-data");
    assert_eq!(c.server.admin_key, None);
    assert!(c.combos.iter().any(|x| x.name == demo::FLAKY_COMBO));
    // One demo provider per wire format, so every client API reaches both offline.
    assert_eq!(c.provider(demo::PROVIDER).map(|p| p.format), Some(Format::Openai));
    assert_eq!(c.provider(demo::CLAUDE_PROVIDER).map(|p| p.format), Some(Format::Anthropic));
    assert_eq!(c.provider(demo::GEMINI_PROVIDER).map(|p| p.format), Some(Format::Gemini));
    assert_eq!(c.provider(demo::RESPONSES_PROVIDER).map(|p| p.format), Some(Format::Responses));
}

#[test]
fn env_secrets_resolve_and_missing_ones_are_named() {
    let env = |name: &str| (name == "OPENAI_API_KEY").then(|| "sk-test".to_owned());
    let text = r#"
[server]
admin_key = "env:FERROUTE_ADMIN_KEY"
[[providers]]
id = "openai"
base_url = "https://api.openai.com/v1"
[[connections]]
id = "openai-1"
provider = "openai"
api_key = "env:OPENAI_API_KEY"
"#;
    let err = Config::from_toml_str(text, &env, &[]).expect_err("admin key variable missing");
    assert_eq!(err.0.len(), 1);
    assert_eq!(err.0[0].field, "server.admin_key");
    assert!(err.0[0].message.contains("FERROUTE_ADMIN_KEY"));
    let c = Config::from_toml_str(
        &text.replace("admin_key = \"env:FERROUTE_ADMIN_KEY\"", "admin_key = \"literal-admin\""),
        &env,
        &[],
    )
    .expect("valid");
    assert_eq!(c.connections[0].api_key.as_deref(), Some("sk-test"));
    assert_eq!(c.server.admin_key.as_deref(), Some("literal-admin"));
}

#[test]
fn unknown_keys_are_named() {
    for (text, key) in [
        ("[server]\nlisten_addr = \"x\"\n", "listen_addr"),
        ("[[providers]]\nid = \"a\"\nbase_url = \"http://x\"\nkind = \"x\"\n", "kind"),
        ("[resilience.breaker.api_key]\nfailure_treshold = 3\n", "failure_treshold"),
        ("[bogus]\n", "bogus"),
    ] {
        let err = parse(text).expect_err("unknown key");
        assert!(err.to_string().contains(key), "{key} not named: {err}");
    }
}

#[test]
fn every_problem_is_reported_at_once() {
    let got = fields(parse(
        r#"
[server]
listen = "not-an-address"
max_body_bytes = 10
[[providers]]
id = "a/b"
base_url = "ftp://x"
[[providers]]
id = "dup"
base_url = "http://x"
[[providers]]
id = "dup"
base_url = "http://x"
[[connections]]
id = "c1"
provider = "nope"
[[connections]]
id = "c1"
provider = "dup"
max_concurrent = 0
[[combos]]
name = "x"
strategy = "best-effort"
targets = ["missing/model", "nomodel"]
[[combos]]
name = "x"
targets = ["dup/m"]
[resilience.model_lockout]
base_cooldown_ms = -1
"#,
    ));
    for f in [
        "server.listen",
        "server.max_body_bytes",
        "providers[0].id",
        "providers[0].base_url",
        "connections[0].provider",
        "connections[1].id",
        "connections[1].api_key",
        "connections[1].max_concurrent",
        "combos[0].strategy",
        "combos[0].targets[0]",
        "combos[0].targets[1]",
        "combos[1].name",
        "resilience.model_lockout.base_cooldown_ms",
    ] {
        assert!(got.iter().any(|g| g == f), "{f} missing from {got:?}");
    }
}

#[test]
fn environment_settings_are_defaults_the_file_overrides() {
    let vars = vec![
        ("FERROUTE_RATE_LIMIT_MAX_WAIT_MS".to_owned(), "45000".to_owned()),
        ("FERROUTE_BREAKER_LOCAL_FAILURE_THRESHOLD".to_owned(), "5".to_owned()),
    ];
    let c = Config::from_toml_str("[resilience.request_queue]\nmax_wait_ms = 1000\n", &no_env, &vars).expect("valid");
    assert_eq!(c.resilience.request_queue.max_wait_ms, 1000);
    assert_eq!(c.resilience.breaker.local.failure_threshold, 5);
    let bad = vec![("FERROUTE_RATE_LIMIT_MAX_WAIT_MS".to_owned(), "soon".to_owned())];
    let err = Config::from_toml_str("", &no_env, &bad).expect_err("bad env");
    assert_eq!(err.0[0].field, "FERROUTE_RATE_LIMIT_MAX_WAIT_MS");
}

const TWO_PROVIDERS: &str = r#"
[[providers]]
id = "p"
base_url = "http://p.invalid/v1"
class = "local"
connection_strategy = "round-robin"
[[providers]]
id = "q"
base_url = "http://q.invalid/v1"
class = "local"
[[connections]]
id = "p-1"
provider = "p"
[[connections]]
id = "p-2"
provider = "p"
weight = 3
egress_ip = "10.0.0.7"
"#;

#[test]
fn a_subscription_two_client_keys_may_use_is_a_warning_until_one_key_names_it() {
    let text = |allowed: &str| {
        format!(
            r#"
[[keys]]
id = "alice"
key = "k-alice-0001"
{allowed}
[[keys]]
id = "bob"
key = "k-bob-0001"
allowed_connections = ["key-1"]
[[providers]]
id = "sub"
format = "anthropic"
class = "oauth"
base_url = "http://127.0.0.1:9/v1"
[[connections]]
id = "max-1"
provider = "sub"
oauth = {{ preset = "claude", access_token = "a", refresh_token = "r", expires_at = 1790000000000 }}
[[connections]]
id = "key-1"
provider = "sub"
api_key = "sk-1"
"#
        )
    };
    let shared =
        |c: &Config| c.warnings.iter().filter(|w| w.contains("subscription connection")).cloned().collect::<Vec<_>>();
    // alice may use every connection, bob only the key: one key may use the subscription.
    assert_eq!(shared(&parse(&text("")).expect("loads")), Vec::<String>::new());
    // Both may: a warning naming the connection, both keys and the page.
    let c = parse(&text("").replace(r#"allowed_connections = ["key-1"]"#, "")).expect("loads");
    let w = shared(&c);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].contains("\"max-1\"") && w[0].contains("alice, bob") && w[0].contains("subscription-terms"), "{w:?}");
    assert!(!w[0].contains("  "), "one sentence, no run of spaces: {w:?}");
    // Named by one key only (alice's), the other key kept to its own: quiet again.
    assert_eq!(shared(&parse(&text(r#"allowed_connections = ["max-1"]"#)).expect("loads")), Vec::<String>::new());
}

#[test]
fn a_provider_without_connections_is_a_warning_not_an_error() {
    let c = parse(TWO_PROVIDERS).expect("loads");
    assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
    assert!(c.warnings[0].contains("\"q\"") && c.warnings[0].contains("no_executable_targets"), "{:?}", c.warnings);
}

#[test]
fn combo_targets_are_strings_or_tables_and_every_strategy_parses() {
    for s in ferroute_core::strategy::Strategy::ALL {
        let text = format!(
            "{TWO_PROVIDERS}\n[[combos]]\nname = \"c\"\nstrategy = \"{}\"\ntargets = [\"p/m1\", {{ target = \"q/m2\", weight = 3, cost = 0.5, context_window = 200000 }}, {{ target = \"p/m3\", connection = \"p-2\" }}]\n",
            s.as_str()
        );
        let c = parse(&text).unwrap_or_else(|e| panic!("{}: {e}", s.as_str()));
        let t = &c.combos[0].targets;
        assert_eq!((t[0].target.as_str(), t[0].weight), ("p/m1", 1));
        assert_eq!((t[1].weight, t[1].cost, t[1].context_window), (3, Some(0.5), Some(200_000)));
        assert_eq!(t[2].connection.as_deref(), Some("p-2"));
    }
    assert_eq!(c_strategy(TWO_PROVIDERS), ferroute_core::strategy::Strategy::RoundRobin);
}

fn c_strategy(text: &str) -> ferroute_core::strategy::Strategy {
    parse(text).expect("valid").providers[0].connection_strategy()
}

#[test]
fn bad_targets_nesting_and_cycles_are_named() {
    let got = fields(parse(&format!(
        r#"{TWO_PROVIDERS}
[[combos]]
name = "a"
targets = ["b", 7, {{ target = "p/m", weight = 5000, connection = "q-9", extra = 1 }}, {{ target = "p/m", connection = "nope" }}]
[[combos]]
name = "b"
targets = ["a"]
[[combos]]
name = "c"
strategy = "nonsense"
targets = []
[emergency_fallback]
target = "nowhere"
"#
    )));
    for f in [
        "combos[0].targets[1]",
        "combos[0].targets[2]",
        "combos[0].targets[3].connection",
        "combos[0].targets",
        "combos[1].targets",
        "combos[2].strategy",
        "combos[2].targets",
        "emergency_fallback.target",
    ] {
        assert!(got.iter().any(|g| g == f), "{f} missing from {got:?}");
    }
    let bad_conn_strategy =
        TWO_PROVIDERS.replace("connection_strategy = \"round-robin\"", "connection_strategy = \"auto\"");
    assert_eq!(fields(parse(&bad_conn_strategy)), vec!["providers[0].connection_strategy"]);
}

#[test]
fn nesting_deeper_than_three_is_refused() {
    let ok = format!(
        "{TWO_PROVIDERS}\n[[combos]]\nname = \"c1\"\ntargets = [\"p/m\"]\n[[combos]]\nname = \"c2\"\ntargets = [\"c1\"]\n[[combos]]\nname = \"c3\"\ntargets = [\"c2\"]\n"
    );
    parse(&ok).expect("three deep is allowed");
    let deep = format!("{ok}[[combos]]\nname = \"c4\"\ntargets = [\"c3\"]\n");
    assert_eq!(fields(parse(&deep)), vec!["combos[3].targets"]);
}

#[test]
fn multi_call_combos_need_a_judge_or_two_targets_and_context_relay_is_named() {
    let text = format!(
        r#"{TWO_PROVIDERS}
[[combos]]
name = "f"
strategy = "fusion"
targets = ["p/a", "p/b"]
[[combos]]
name = "one-step"
strategy = "pipeline"
targets = ["p/a"]
[[combos]]
name = "relay"
strategy = "context-relay"
targets = ["p/a"]
[[combos]]
name = "judged"
targets = ["p/a"]
judge = "p/j"
[[combos]]
name = "ok"
strategy = "fusion"
targets = ["p/a", "p/b"]
judge = "p/j"
"#
    );
    assert_eq!(
        fields(parse(&text)),
        vec!["combos[0].judge", "combos[1].targets", "combos[2].strategy", "combos[3].judge"]
    );
}

#[test]
fn the_state_backend_defaults_to_sqlite_and_redis_needs_a_url() {
    let c = parse("").expect("valid");
    assert_eq!((c.state.backend, c.state.prefix.as_str()), (Backend::Sqlite, "ferroute"));
    let env = |name: &str| (name == "REDIS_URL").then(|| "redis://127.0.0.1:6390/2".to_owned());
    let text = "[state]\nbackend = \"redis\"\nurl = \"env:REDIS_URL\"\nprefix = \"team-a\"\nreplica = \"eu-1\"\n";
    let c = Config::from_toml_str(text, &env, &[]).expect("valid");
    assert_eq!(c.state.url.as_deref(), Some("redis://127.0.0.1:6390/2"), "env: resolved");
    assert_eq!(fields(parse("[state]\nbackend = \"redis\"\n")), ["state.url"]);
    assert_eq!(fields(parse("[state]\nbackend = \"redis\"\nurl = \"http://x\"\n")), ["state.url"]);
    assert_eq!(fields(parse("[state]\nurl = \"redis://h\"\n")), ["state.url"], "a URL the sqlite backend ignores");
    assert_eq!(
        fields(parse("[state]\nbackend = \"redis\"\nurl = \"redis://h\"\nprefix = \"a b\"\n")),
        ["state.prefix"]
    );
    assert_eq!(
        fields(parse("[state]\nbackend = \"redis\"\nurl = \"redis://h\"\nreplica = \" \"\n")),
        ["state.replica"]
    );
    assert_eq!(fields(parse("[state]\nbackend = \"etcd\"\n")), ["config"], "an unknown backend");
    assert_eq!(
        fields(Config::from_toml_str("[state]\nbackend = \"redis\"\nurl = \"env:NOPE\"\n", &no_env, &[])),
        ["state.url"]
    );
}

#[test]
fn quota_families_name_their_models_and_a_model_belongs_to_one() {
    let text = r#"
[[providers]]
id = "codex"
base_url = "http://codex.invalid/v1"
models = ["gpt-5.6-luna", "gpt-5.6-sol", "gpt-5.6-terra", "spark-1"]
quota_families = { codex = ["gpt-5.6-luna", "GPT-5.6-Sol", "gpt-5.6-terra"], spark = ["spark-1"] }
"#;
    let c = parse(text).expect("valid");
    let p = &c.providers[0];
    assert_eq!(p.quota_family("gpt-5.6-sol"), Some("codex"), "names compare without ASCII case");
    assert_eq!(p.quota_family(" gpt-5.6-luna "), Some("codex"));
    assert_eq!(p.quota_family("spark-1"), Some("spark"));
    assert_eq!(p.quota_family("other"), None, "a model in no family is its own");

    let twice = text.replace("spark = [\"spark-1\"]", "spark = [\"spark-1\", \"gpt-5.6-LUNA\"], empty = []");
    let err = parse(&twice).expect_err("a model in two families, and an empty family");
    let named: Vec<String> = err.0.iter().map(|e| format!("{}: {}", e.field, e.message)).collect();
    assert!(
        named
            .iter()
            .any(|e| e.starts_with("providers[0].quota_families.spark") && e.contains("already in quota family")),
        "{named:?}"
    );
    assert!(
        named.iter().any(|e| e.starts_with("providers[0].quota_families.empty") && e.contains("at least one")),
        "{named:?}"
    );
}

#[test]
fn a_bare_model_is_served_by_the_first_provider_that_lists_it() {
    let c = parse(
        "[[providers]]\nid = \"a\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodels = [\"x\"]\n\
         [[providers]]\nid = \"b\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodels = [\"y\", \"x\"]\n",
    )
    .expect("valid");
    assert_eq!(c.provider_serving("x"), Some(0));
    assert_eq!(c.provider_serving("y"), Some(1));
    assert_eq!(c.provider_serving("z"), None);
    assert_eq!(c.provider_serving("a/x"), None, "a provider/model name is not a listed model");
}

#[test]
fn a_shutdown_delay_past_ten_minutes_and_a_missing_private_ca_are_named() {
    let f = fields(parse("[server]\nunready_delay_ms = 18446744073709551615\nextra_ca = \"/no/such/ca.pem\"\n"));
    assert_eq!(f, ["server.unready_delay_ms", "server.extra_ca"]);
    let env_proxy = parse(
        "[[providers]]\nid = \"a\"\nbase_url = \"http://127.0.0.1:9/v1\"\nproxy = \"env:NO_SUCH_PROXY\"\n\
         [[connections]]\nid = \"k\"\nprovider = \"a\"\napi_key = \"sk\"\n",
    );
    assert_eq!(fields(env_proxy), ["providers[0].proxy"], "an unset env: proxy is named once");
}
