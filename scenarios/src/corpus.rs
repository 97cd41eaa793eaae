//! The answer corpus (`scenarios/corpus/*.toml`): real answers providers sent, each with its
//! cited source and the decision it calls for. The core's classifier, the real gateway and the
//! simulation's swarm all read it from here, and [`Outcome::of`] reads a core decision the one
//! way all three compare it with what an entry expects.

use ferroute_core::classify::{ConnectionEffect, CooldownProfile, Decision, ErrorInput, default_profile};
use ferroute_core::hint::parse_rfc3339_ms;
use ferroute_core::settings::ResilienceSettings;
use ferroute_core::types::{Format, ProviderClass, Scope, TerminalState};
use serde::Deserialize;
use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where the corpus lives.
pub fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus")
}

/// The wall clock an entry is read at when it names none: 2026-01-01T00:00:00Z.
pub const DEFAULT_NOW_MS: u64 = 1_767_225_600_000;

/// Which account an answer came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// An API key.
    Api,
    /// A Claude subscription signed in with OAuth.
    ClaudeOauth,
    /// ChatGPT's Codex backend, signed in with OAuth.
    Codex,
}

impl Backend {
    /// The provider class such an account is configured as.
    pub fn class(self) -> ProviderClass {
        match self {
            Backend::Api => ProviderClass::ApiKey,
            Backend::ClaudeOauth | Backend::Codex => ProviderClass::OAuth,
        }
    }

    /// Its name in the corpus.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Api => "api",
            Backend::ClaudeOauth => "claude-oauth",
            Backend::Codex => "codex",
        }
    }
}

/// The decision an entry calls for, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// To the client as it is; nothing penalised, no fallback.
    Pass,
    /// Another connection or target is tried; nothing penalised.
    Fallback,
    /// The connection cools.
    Cool,
    /// The connection is ended (a terminal state).
    End,
    /// Only the model is locked on the connection.
    LockModel,
    /// A provider-level failure: the breaker counts it.
    Provider,
}

impl Kind {
    /// Its name in the corpus.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Pass => "pass",
            Kind::Fallback => "fallback",
            Kind::Cool => "cool",
            Kind::End => "end",
            Kind::LockModel => "lock_model",
            Kind::Provider => "provider",
        }
    }
}

/// One real answer and the decision it calls for.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Answer {
    /// Unique, kebab-case.
    pub id: String,
    /// Where the answer was seen (one URL).
    pub source: String,
    /// The provider's wire format.
    pub format: Format,
    /// The account kind.
    pub backend: Backend,
    /// The status sent.
    pub status: u16,
    /// The headers sent (names lower-case).
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    /// The body sent.
    #[serde(default)]
    pub body: String,
    /// Parts the source did not show verbatim.
    #[serde(default)]
    pub reconstructed: Vec<String>,
    /// The wall clock the answer is read at (RFC 3339).
    #[serde(default)]
    pub now: Option<String>,
    /// The decision.
    pub decision: Kind,
    /// The wait the answer states (`cool`, `lock_model`).
    #[serde(default)]
    pub wait_s: Option<u64>,
    /// The terminal state (`end`).
    #[serde(default)]
    pub terminal: Option<TerminalState>,
    /// A Claude usage-limit 429 the low-priority lane may accept.
    #[serde(default)]
    pub lane: bool,
    /// Why another decision could be argued.
    #[serde(default)]
    pub debatable: Option<String>,
    /// Why this decision, in one line.
    pub why: String,
    /// The file it came from (set on load).
    #[serde(skip)]
    pub file: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    answer: Vec<Answer>,
}

/// What is wrong with the corpus.
#[derive(Debug, thiserror::Error)]
pub enum CorpusError {
    /// A file could not be read.
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    /// A file does not parse.
    #[error("{0}: {1}")]
    Parse(String, toml::de::Error),
    /// An entry breaks a rule of the format.
    #[error("{file}: answer `{id}`: {problem}")]
    Entry {
        /// The file.
        file: String,
        /// The entry.
        id: String,
        /// What is wrong.
        problem: String,
    },
}

/// Every entry of every `*.toml` in `dir`, in file then entry order, checked.
pub fn load_from(dir: &Path) -> Result<Vec<Answer>, CorpusError> {
    let name = dir.display().to_string();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| CorpusError::Io(name.clone(), e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    let mut ids = BTreeSet::new();
    for path in files {
        let file = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let text = std::fs::read_to_string(&path).map_err(|e| CorpusError::Io(file.clone(), e))?;
        let parsed: File = toml::from_str(&text).map_err(|e| CorpusError::Parse(file.clone(), e))?;
        for mut a in parsed.answer {
            a.file = file.clone();
            let problem =
                a.problem().or_else(|| (!ids.insert(a.id.clone())).then(|| "the id is used twice".to_owned()));
            if let Some(problem) = problem {
                return Err(CorpusError::Entry { file, id: a.id, problem });
            }
            out.push(a);
        }
    }
    Ok(out)
}

/// The corpus in the repository.
pub fn load() -> Result<Vec<Answer>, CorpusError> {
    load_from(&corpus_dir())
}

impl Answer {
    fn problem(&self) -> Option<String> {
        if !self.source.starts_with("https://") || self.source.contains(char::is_whitespace) {
            return Some(format!("source must be one https URL, not {:?}", self.source));
        }
        if self.id.is_empty() || !self.id.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') {
            return Some("the id must be kebab-case".into());
        }
        if !(100..=599).contains(&self.status) {
            return Some(format!("status {} is no HTTP status", self.status));
        }
        if self.why.trim().is_empty() {
            return Some("`why` is empty".into());
        }
        if self.wait_s.is_some() && !matches!(self.decision, Kind::Cool | Kind::LockModel) {
            return Some("wait_s goes with cool or lock_model only".into());
        }
        if self.terminal.is_some() != (self.decision == Kind::End) {
            return Some("terminal goes with end, and end needs it".into());
        }
        if let Some(p) = self.reconstructed.iter().find(|p| !["status", "headers", "body"].contains(&p.as_str())) {
            return Some(format!("reconstructed names {p:?}: status, headers or body"));
        }
        if let Some(now) = &self.now
            && parse_rfc3339_ms(now).is_none()
        {
            return Some(format!("now {now:?} is no RFC 3339 instant"));
        }
        None
    }

    /// The provider class it is configured as.
    pub fn class(&self) -> ProviderClass {
        self.backend.class()
    }

    /// The rule profile the gateway reads it by (the provider declares none).
    pub fn profile(&self) -> &'static str {
        default_profile(self.format, self.class())
    }

    /// The wall clock it is read at, as Unix ms.
    pub fn wall_ms(&self) -> u64 {
        self.now.as_deref().and_then(parse_rfc3339_ms).unwrap_or(DEFAULT_NOW_MS)
    }

    /// Its headers as the core reads them.
    pub fn header_pairs(&self) -> Vec<(&str, &str)> {
        self.headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect()
    }

    /// The outcome it calls for.
    pub fn expected(&self) -> Outcome {
        let wait = self.wait_s.map(Duration::from_secs);
        match self.decision {
            Kind::Pass => Outcome::Pass,
            Kind::Fallback => Outcome::Fallback,
            Kind::Cool => Outcome::Cool(wait),
            Kind::End => Outcome::End(self.terminal.unwrap_or(TerminalState::Banned)),
            Kind::LockModel => Outcome::LockModel(wait),
            Kind::Provider => Outcome::Provider,
        }
    }

    /// The default cooldown ladder of its class.
    pub fn cooldown_profile(&self) -> CooldownProfile {
        ResilienceSettings::default().cooldown_profile(self.class())
    }

    /// Classifies it with the core, as a provider of its format and class with default settings
    /// and a connection at backoff level 0 would.
    pub fn classify(&self) -> Decision {
        self.classify_as(self.class(), self.wall_ms())
    }

    /// Classifies it as a provider of its format but of `class` would, read at `wall_ms`.
    pub fn classify_as(&self, class: ProviderClass, wall_ms: u64) -> Decision {
        let headers = self.header_pairs();
        let wall = wall_ms;
        let input = ErrorInput {
            provider: default_profile(self.format, class),
            provider_id: "corpus",
            format: self.format,
            class,
            status: self.status,
            headers: &headers,
            body: &self.body,
            backoff_level: 0,
            wall_now_ms: Some(wall),
            until_daily_reset: None,
        };
        ferroute_core::classify::classify(&input, &ResilienceSettings::default().cooldown_profile(class), &[])
    }

    /// Whether `observed` is the outcome it calls for. A stated wait must be kept to the second
    /// (or to `max_stated_reset_ms` where the wait is longer); with none stated, any wait is
    /// right.
    pub fn check(&self, observed: &Outcome) -> Result<(), String> {
        let expected = self.expected();
        let cap = self.cooldown_profile().stated_cap;
        let wait_ok = |want: Option<Duration>, got: Option<Duration>| match (want, got) {
            (None, _) => true,
            (Some(w), Some(g)) => {
                let w = w.min(cap);
                g.as_secs_f64().round() as u64 == w.as_secs() || g.abs_diff(w) <= Duration::from_secs(1)
            }
            (Some(_), None) => false,
        };
        let ok = match (&expected, observed) {
            (Outcome::Cool(w), Outcome::Cool(g)) | (Outcome::LockModel(w), Outcome::LockModel(g)) => wait_ok(*w, *g),
            (e, o) => e == o,
        };
        if ok { Ok(()) } else { Err(format!("expected {expected}, decided {observed}")) }
    }
}

/// A decision as the corpus names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// To the client; nothing penalised, no fallback.
    Pass,
    /// Another connection or target; nothing penalised.
    Fallback,
    /// The connection cools (for this long, when known).
    Cool(Option<Duration>),
    /// The connection is ended.
    End(TerminalState),
    /// The model is locked on the connection (for this long, when declared).
    LockModel(Option<Duration>),
    /// The provider's breaker counts it.
    Provider,
}

impl Outcome {
    /// The outcome a core decision takes.
    pub fn of(d: &Decision) -> Outcome {
        if d.trips_breaker {
            return Outcome::Provider;
        }
        match d.connection {
            ConnectionEffect::Terminal(t) => Outcome::End(t),
            ConnectionEffect::Cooldown { duration, .. } => Outcome::Cool(Some(duration)),
            ConnectionEffect::RequestRejected => Outcome::Cool(None),
            ConnectionEffect::None if d.lock.scope == Some(Scope::Model) => Outcome::LockModel(d.lock.cooldown),
            ConnectionEffect::None if d.should_fallback => Outcome::Fallback,
            ConnectionEffect::None => Outcome::Pass,
        }
    }

    /// Its kind.
    pub fn kind(&self) -> Kind {
        match self {
            Outcome::Pass => Kind::Pass,
            Outcome::Fallback => Kind::Fallback,
            Outcome::Cool(_) => Kind::Cool,
            Outcome::End(_) => Kind::End,
            Outcome::LockModel(_) => Kind::LockModel,
            Outcome::Provider => Kind::Provider,
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Cool(Some(w)) | Outcome::LockModel(Some(w)) => {
                write!(f, "{} {} s", self.kind().name(), w.as_secs())
            }
            Outcome::End(t) => write!(f, "end ({})", t.as_str()),
            other => f.write_str(other.kind().name()),
        }
    }
}

/// The page "How answers are read" (`docs/answers.md`), made from the corpus: how many answers
/// each decision has, one row per answer (its class, its source, the decision and why), and
/// the decisions that could be argued, each decided.
pub fn markdown(answers: &[Answer]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    out.push_str("# How answers are read\n\n");
    out.push_str(
        "Every row is a real answer a provider sent, kept in `scenarios/corpus/` with the page it \
         was seen on, and the decision Ferroute takes on it. `cargo test --workspace` runs each one \
         through the core's classifier, through the gateway (a scripted upstream replays it byte for \
         byte) and through the simulation's swarm; this page is made from the same files \
         (`FERROUTE_WRITE_DOCS=1 cargo test -p scenarios --test corpus` writes it), so the two \
         cannot drift.\n\n",
    );
    out.push_str(
        "Answers are read by what they say and by the provider's format and class, never by the \
         id an operator gave the provider: an Anthropic-format OAuth provider reads a Claude \
         subscription's answers, a Responses-format OAuth provider the Codex backend's, whatever \
         they are called. Operator rules (`[[resilience.error_rules]]`) come first; an answer \
         nothing here names keeps the safe default of its status.\n\n",
    );
    out.push_str("| decision | what Ferroute does | answers |\n|---|---|---|\n");
    let what = [
        (Kind::Pass, "the answer goes to the client; nothing is penalised, nothing else is tried"),
        (Kind::Fallback, "another connection or target is tried; nothing is penalised"),
        (
            Kind::Cool,
            "the connection cools (for the wait the answer states, else its ladder) and the request falls back",
        ),
        (Kind::End, "the connection is ended (`expired`, `banned`, `credits_exhausted`) and the request falls back"),
        (Kind::LockModel, "only this model is locked on this connection; its other models keep serving"),
        (Kind::Provider, "the provider's breaker counts it; no connection is penalised"),
    ];
    for (kind, text) in what {
        let n = answers.iter().filter(|a| a.decision == kind).count();
        let _ = writeln!(out, "| `{}` | {text} | {n} |", kind.name());
    }
    let _ = writeln!(out, "| all | | {} |\n", answers.len());
    out.push_str(
        "The client is told what the gateway recorded: when the answer cooled, ended or locked the \
         connection and no other can serve, its `Retry-After` is never shorter than the wait the \
         gateway keeps (an ended connection without a retry of its own says an hour). A usage \
         limit that states its end (a Claude subscription's `anthropic-ratelimit-unified-reset`, \
         the Codex backend's `resets_in_seconds`, a spend limit's \"regain access on\" day) is \
         kept for every class, capped by `max_stated_reset_ms` (8 days). A stream that fails \
         after its 200 but before any content (`response.failed`, `event: error`) is read as the \
         failure it is and fallen back from; no byte of it reaches the client.\n\n",
    );
    let mut files: Vec<&str> = answers.iter().map(|a| a.file.as_str()).collect();
    files.dedup();
    for file in files {
        file_table(&mut out, file, answers.iter().filter(|a| a.file == file));
    }
    out.push_str("## Decisions that could be argued\n\n");
    out.push_str("Each of these could be read another way; the corpus says which way Ferroute reads it, and why.\n\n");
    for a in answers.iter().filter(|a| a.debatable.is_some()) {
        let _ = writeln!(out, "- `{}` (`{}`): {}", a.id, a.decision.name(), cell(a.debatable.as_deref().unwrap_or("")));
    }
    out
}

/// Text as one Markdown table cell.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// One corpus file's answers as a table: id, format and account, status, decision, why, source.
fn file_table<'a>(out: &mut String, file: &str, answers: impl Iterator<Item = &'a Answer>) {
    use std::fmt::Write as _;
    let _ = writeln!(out, "## `{file}`\n");
    out.push_str("| answer | format, account | status | decision | why | source |\n|---|---|---|---|---|---|\n");
    for a in answers {
        let decision = match (a.decision, a.terminal, a.wait_s) {
            (Kind::End, Some(t), _) => format!("`end` ({})", t.as_str()),
            (k, _, Some(w)) => format!("`{}` {w} s", k.name()),
            (k, _, None) => format!("`{}`", k.name()),
        };
        let reconstructed = if a.reconstructed.is_empty() {
            String::new()
        } else {
            format!(" (rebuilt: {})", a.reconstructed.join(", "))
        };
        let _ = writeln!(
            out,
            "| `{}` | {}, {} | {} | {decision} | {} | [source]({}){reconstructed} |",
            a.id,
            a.format.name(),
            a.backend.name(),
            a.status,
            cell(&a.why),
            a.source
        );
    }
    out.push('\n');
}
