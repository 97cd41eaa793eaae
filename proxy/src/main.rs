//! `ferroute`: the gateway binary.

use anyhow::Context;
use clap::{Parser, Subcommand};
use proxy::config::{Backend, Config, ConfigError, demo, field_error};
use proxy::edge::serve::serve_live;
use proxy::ops::reload::{Loader, Serving};
use proxy::recording::export;
use proxy::recording::record::Record;
use proxy::state::clock::system_wall_ms;
use proxy::{Persistence, build, https_connector};
use std::path::PathBuf;
use std::sync::Arc;

/// Ferroute: an LLM API gateway that keeps coding agents working while upstream providers
/// fail, throttle, misreport their status or stream too slowly.
///
/// With no arguments it listens on 127.0.0.1:8787, keeps state in ./ferroute-data/state.db and
/// serves a built-in demo provider (models demo/echo and demo/flaky), so a chat completion
/// works offline at once. Settings can also come from FERROUTE_… environment variables (for
/// example FERROUTE_RATE_LIMIT_MAX_WAIT_MS); a config file overrides them.
#[derive(Parser, Debug)]
#[command(name = "ferroute", version, about, long_about)]
struct Cli {
    /// A TOML config file (see examples/ferroute.toml).
    #[arg(long, short, value_name = "FILE", env = "FERROUTE_CONFIG", global = true)]
    config: Option<PathBuf>,
    /// Override server.listen (e.g. 127.0.0.1:9000).
    #[arg(long, value_name = "ADDR", env = "FERROUTE_LISTEN", global = true)]
    listen: Option<String>,
    /// Override server.data_dir.
    #[arg(long, value_name = "DIR", env = "FERROUTE_DATA_DIR", global = true)]
    data_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Validate a config file, print every problem, and exit (0 when valid).
    CheckConfig {
        /// The file.
        file: PathBuf,
    },
    /// List the FERROUTE_… environment variables and the settings they set.
    EnvVars,
    /// Ask the running gateway (at --listen, else the config's server.listen) whether it is
    /// live or ready; exit 0 only on a 200. For images without a shell or curl.
    Probe {
        /// `live` (/livez) or `ready` (/readyz).
        #[arg(value_parser = ["live", "ready"], default_value = "ready")]
        what: String,
    },
    /// OAuth accounts: import the tokens an official client stored, or list them (never a
    /// secret). Uses --config and --data-dir like the gateway.
    Accounts {
        #[command(subcommand)]
        action: AccountsCommand,
    },
    /// The flight recorder's files ([recording]): cut a window into one file for `sim replay`.
    /// Uses --config and --data-dir like the gateway to find them.
    Recording {
        #[command(subcommand)]
        action: RecordingCommand,
    },
}

#[derive(Subcommand, Debug)]
enum RecordingCommand {
    /// Writes the client requests that arrived from --since to --until, with their attempts,
    /// into one gzip-compressed JSON-lines file.
    Export {
        /// From (Unix ms or RFC 3339, e.g. 2026-12-03T18:00:00Z; inclusive).
        #[arg(long)]
        since: String,
        /// To (exclusive; the same forms).
        #[arg(long)]
        until: String,
        /// The file to write.
        #[arg(long, short, value_name = "FILE")]
        out: PathBuf,
        /// The recording directory, if not the config's.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

fn recording(cli: &Cli, action: &RecordingCommand) -> Result<String, String> {
    let RecordingCommand::Export { since, until, out, dir } = action;
    let (since, until) = (export::instant(since)?, export::instant(until)?);
    if until <= since {
        return Err("--until must be after --since".into());
    }
    let dir = match dir {
        Some(d) => d.clone(),
        None => {
            let config = load(cli.config.as_ref()).map_err(|e| format!("{e:#}"))?;
            let data_dir = cli.data_dir.clone().unwrap_or_else(|| PathBuf::from(&config.server.data_dir));
            config.recording.dir(&data_dir.to_string_lossy())
        }
    };
    let records = export::window(&dir, since, until).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    export::write(&records, out).map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    let requests = records.iter().filter(|r| matches!(r, Record::Request(_))).count();
    Ok(format!("{}: {requests} requests, {} attempts", out.display(), records.len() - requests))
}

#[derive(Subcommand, Debug)]
enum AccountsCommand {
    /// Write the tokens Claude Code or Codex stored after its sign-in to the store of an OAuth
    /// connection (the gateway takes them at its next start or config reload).
    Import {
        /// Which client stored them: claude-code (~/.claude/.credentials.json) or codex
        /// (~/.codex/auth.json).
        client: proxy::ops::accounts::Client,
        /// The file, if not the client's default.
        path: Option<PathBuf>,
        /// The OAuth connection (its `id` in the config) that gets them.
        #[arg(long)]
        connection: String,
    },
    /// Each OAuth connection's tokens: where they come from, expiry, last and next refresh,
    /// state.
    List,
}

fn accounts(cli: &Cli, action: &AccountsCommand) -> Result<String, String> {
    let config = load(cli.config.as_ref()).map_err(|e| format!("{e:#}"))?;
    let data_dir = cli.data_dir.clone().unwrap_or_else(|| PathBuf::from(&config.server.data_dir));
    let now = system_wall_ms();
    match action {
        AccountsCommand::Import { client, path, connection } => {
            let path = match path {
                Some(p) => p.clone(),
                None => std::env::var_os("HOME")
                    .map(|h| PathBuf::from(h).join(client.default_path()))
                    .ok_or("HOME is not set: give the file's path")?,
            };
            proxy::ops::accounts::import_file(&config, &data_dir, *client, &path, connection, now)
        }
        AccountsCommand::List => proxy::ops::accounts::list(&config, &data_dir, now),
    }
}

fn load(path: Option<&PathBuf>) -> anyhow::Result<Config> {
    let env = |name: &str| std::env::var(name).ok();
    let vars: Vec<(String, String)> = std::env::vars().collect();
    match path {
        Some(p) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("cannot read config file {}", p.display()))?;
            Config::from_toml_str(&text, &env, &vars).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))
        }
        None => Config::embedded(&env, &vars).map_err(|e| anyhow::anyhow!("{e}")),
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FERROUTE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_target(false)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match &cli.command {
        Some(Command::CheckConfig { file }) => {
            return match load(Some(file)) {
                Ok(c) => {
                    for w in &c.warnings {
                        println!("warning: {w}");
                    }
                    println!(
                        "{}: ok ({} providers, {} connections, {} combos)",
                        file.display(),
                        c.providers.len(),
                        c.connections.len(),
                        c.combos.len()
                    );
                    std::process::ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("{e:#}");
                    std::process::ExitCode::from(2)
                }
            };
        }
        Some(Command::Accounts { action }) => {
            return match accounts(&cli, action) {
                Ok(out) => {
                    println!("{}", out.trim_end());
                    std::process::ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("ferroute accounts: {e}");
                    std::process::ExitCode::from(2)
                }
            };
        }
        Some(Command::Recording { action }) => {
            return match recording(&cli, action) {
                Ok(out) => {
                    println!("{out}");
                    std::process::ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("ferroute recording: {e}");
                    std::process::ExitCode::from(2)
                }
            };
        }
        Some(Command::Probe { what }) => {
            let listen = match &cli.listen {
                Some(l) => Ok(l.clone()),
                None => load(cli.config.as_ref()).map(|c| c.server.listen).map_err(|e| format!("{e:#}")),
            };
            let path = if what == "live" { "/livez" } else { "/readyz" };
            return match listen
                .and_then(|l| proxy::ops::probe::target(&l))
                .and_then(|a| proxy::ops::probe::probe(a, path))
            {
                Ok(line) => {
                    println!("{line}");
                    std::process::ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("ferroute probe: {e}");
                    std::process::ExitCode::FAILURE
                }
            };
        }
        Some(Command::EnvVars) => {
            for (name, path) in ferroute_core::settings::env_names() {
                println!("{name}\tresilience.{path}");
            }
            return std::process::ExitCode::SUCCESS;
        }
        None => {}
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ferroute: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let config = load(cli.config.as_ref())?;
    for w in &config.warnings {
        tracing::warn!("{w}");
    }
    for c in &config.connections {
        if let Some(o) = &c.oauth {
            tracing::info!(connection = %c.id, preset = %o.preset, "subscription account: its provider's terms decide who may use it (docs/subscription-terms.md)");
        }
    }
    let demo_addr = if config.demo {
        let addr = proxy::ops::demo::start().await.context("cannot start the demo provider")?;
        tracing::info!(upstream = %addr, "no provider configured: serving the built-in demo providers (demo/echo, demo/tools, demo/flaky; demo-claude, demo-gemini and demo-responses serve echo and tools in the Anthropic, Gemini and Responses formats)");
        Some(addr)
    } else {
        None
    };
    // What the command line and the start-up add to a loaded config, at start and on reload.
    let (listen_override, data_dir_override, path) = (cli.listen, cli.data_dir, cli.config);
    let complete = move |mut config: Config| -> Result<Config, ConfigError> {
        if let Some(l) = &listen_override {
            config.server.listen.clone_from(l);
        }
        if let Some(d) = &data_dir_override {
            config.server.data_dir = d.display().to_string();
        }
        if config.demo {
            let Some(addr) = demo_addr else {
                return Err(ConfigError(vec![field_error(
                    "providers",
                    "no provider is configured: the built-in demo provider starts only with the gateway; restart it",
                )]));
            };
            for p in &mut config.providers {
                if p.base_url == demo::BASE_URL {
                    p.base_url = format!("http://{addr}/v1");
                }
            }
        }
        Ok(config)
    };
    let config = complete(config).map_err(|e| anyhow::anyhow!("{e}"))?;
    let config_tls = config.server.tls.is_some();
    let listen: std::net::SocketAddr = config
        .server
        .listen
        .parse()
        .with_context(|| format!("server.listen {:?} is not an address", config.server.listen))?;
    let listener = tokio::net::TcpListener::bind(listen).await.with_context(|| format!("cannot listen on {listen}"))?;
    let data_dir = PathBuf::from(&config.server.data_dir);
    let state = config.state.clone();
    let telemetry = proxy::recording::telemetry::Telemetry::for_config(
        &config.telemetry,
        &|name| std::env::var(name).ok(),
        system_wall_ms(),
    )
    .map_err(|e| anyhow::anyhow!("[telemetry]: {e}"))?;
    let connector = https_connector(&config.server)?;
    let gw = build(config, connector, Persistence::Dir(data_dir.clone()), system_wall_ms(), system_wall_ms())
        .with_context(|| format!("cannot open the state store in {}", data_dir.display()))?;
    if let Some(t) = telemetry {
        let _ = gw.telemetry.set(Arc::new(t));
    }
    let loader: Loader = Box::new(move || {
        let config = match &path {
            Some(p) => std::fs::read_to_string(p)
                .map_err(|e| ConfigError(vec![field_error("config", format!("cannot read {}: {e}", p.display()))]))
                .and_then(|text| Config::from_toml_str(&text, &|name| std::env::var(name).ok(), &env_vars()))?,
            None => Config::embedded(&|name| std::env::var(name).ok(), &env_vars())?,
        };
        complete(config)
    });
    let serving = Serving::new(gw, Some(loader));
    if config_tls && serving.tls().is_none() {
        anyhow::bail!(
            "server.tls is set but its certificate could not be loaded (see the log); not serving plain HTTP instead"
        );
    }
    if state.backend == Backend::Redis {
        proxy::replicas::follow::start(Arc::clone(&serving), &state)?;
    }
    let local = gw_addr(&listener, listen);
    tracing::info!(listen = %local, data_dir = %data_dir.display(), "ferroute listening");
    // One machine-readable line on stdout, so that scripts and tests can use port 0.
    let scheme = if serving.tls().is_some() { "https" } else { "http" };
    println!("ferroute listening on {scheme}://{local}");
    let hangups = reload_on_hangup(Arc::clone(&serving));
    serve_live(serving, listener, shutdown_signal()).await;
    hangups.abort();
    Ok(())
}

fn env_vars() -> Vec<(String, String)> {
    std::env::vars().collect()
}

/// SIGHUP reloads the config (the outcome is logged; see `proxy::ops::reload`).
fn reload_on_hangup<C>(serving: Arc<Serving<C>>) -> tokio::task::JoinHandle<()>
where
    C: hyper_util::client::legacy::connect::Connect + Clone + Send + Sync + 'static,
{
    tokio::spawn(async move {
        #[cfg(unix)]
        {
            let mut hup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot listen for SIGHUP: reload through the admin API only");
                    return;
                }
            };
            while hup.recv().await.is_some() {
                tracing::info!("SIGHUP: reloading the config");
                // Reading the file and building the gateway are blocking work.
                let s = Arc::clone(&serving);
                if tokio::task::spawn_blocking(move || s.reload()).await.is_err() {
                    tracing::error!("config reload panicked; the running config is kept");
                }
            }
        }
        #[cfg(not(unix))]
        drop(serving);
    })
}

fn gw_addr(listener: &tokio::net::TcpListener, configured: std::net::SocketAddr) -> std::net::SocketAddr {
    listener.local_addr().unwrap_or(configured)
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutdown signal received");
}
