//! A scenario's OAuth token server (`[token_server]`): a host named `tokens` that rotates
//! refresh tokens and revokes a family on reuse, the gateway's accounts signed in to it before
//! the run, upstreams that answer only its valid access tokens, its faults on schedule, and the
//! checks every such run ends with: no refresh token was presented twice, no request carried an
//! expired access token while a newer one existed, and the refreshes the scenario expects.

use crate::net::SimListener;
use crate::shared::{Shared, WALL_START_MS, lock, ms, sim_now};
use scenarios::Scenario;
use scenarios::token_server::{TOKEN_HOST, TOKEN_PORT, TokenServer, TokenServerSpec, oauth_table, serve_token_server};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The token server of a run and what the scenario asks of it.
pub(crate) struct Tokens {
    pub(crate) server: Arc<TokenServer>,
    spec: TokenServerSpec,
    /// Each `{oauth:ID}` placeholder and the table it became: a reloaded config text gets the
    /// same sign-ins (a reload does not sign anyone in again).
    pub(crate) tables: Vec<(String, String)>,
}

impl Tokens {
    /// Whether upstream `host` answers only this server's valid access tokens.
    pub(crate) fn guards(&self, host: &str) -> bool {
        self.spec.guards.iter().any(|g| g == host)
    }
}

/// Signs in the scenario's accounts and writes their `oauth` tables into the gateway's config
/// text; the text unchanged when the scenario has no token server.
pub(crate) fn prepare(scenario: &Scenario) -> Result<(Option<Tokens>, String), String> {
    let Some(spec) = &scenario.token_server else { return Ok((None, scenario.gateway.clone())) };
    for f in &spec.faults {
        f.fault()?;
    }
    for g in &spec.guards {
        if !scenario.upstreams.iter().any(|u| &u.host == g) {
            return Err(format!("token_server.guards names {g:?}, which is not an upstream host"));
        }
    }
    // The simulation's clock: the same on every host, and 0 before the run starts.
    let server = Arc::new(
        TokenServer::new(Duration::from_millis(spec.lifetime_ms))
            .with_clock(|| turmoil::sim_elapsed().unwrap_or_default()),
    );
    let url = format!("http://{TOKEN_HOST}:{TOKEN_PORT}/v1/oauth/token");
    let mut text = scenario.gateway.clone();
    let mut tables = Vec::new();
    for id in &spec.accounts {
        let placeholder = format!("{{oauth:{id}}}");
        if !text.contains(&placeholder) {
            return Err(format!("token_server.accounts names {id:?}, but the gateway config has no {placeholder}"));
        }
        let grant = server.sign_in();
        let preset = spec.preset.as_deref().unwrap_or("claude");
        let table = oauth_table(&grant, WALL_START_MS + spec.lifetime_ms, &url, preset);
        text = text.replace(&placeholder, &table);
        tables.push((placeholder, table));
    }
    Ok((Some(Tokens { server, spec: spec.clone(), tables }), text))
}

/// Adds the token server host, which also plays its faults on schedule.
pub(crate) fn host(sim: &mut turmoil::Sim<'_>, tokens: &Tokens, shared: &Arc<Mutex<Shared>>) {
    let server = Arc::clone(&tokens.server);
    let faults = tokens.spec.faults.clone();
    let shared = Arc::clone(shared);
    sim.host(TOKEN_HOST, move || {
        let (server, faults, shared) = (Arc::clone(&server), faults.clone(), Arc::clone(&shared));
        async move {
            for f in faults {
                let (server, shared) = (Arc::clone(&server), Arc::clone(&shared));
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(f.at_ms).saturating_sub(sim_now())).await;
                    match f.fault() {
                        Ok(Some(fault)) => server.set_fault(fault),
                        Ok(None) => server.expire_access_tokens(),
                        Err(_) => return,
                    }
                    lock(&shared).rec.note(ms(sim_now()), format!("token server: {}", f.fault));
                });
            }
            let listener = SimListener::bind(TOKEN_PORT).await?;
            serve_token_server(listener, server).await;
            Ok(())
        }
    });
}

/// What every run with a token server must end with.
pub(crate) fn end_checks(tokens: &Tokens, shared: &Arc<Mutex<Shared>>, t: u64) {
    let stats = tokens.server.stats();
    let mut s = lock(shared);
    s.rec.note(t, format!("token server: {stats:?}"));
    if stats.reused > 0 {
        s.rec.violate(t, format!("a refresh token was presented again after it was used ({} times)", stats.reused));
    }
    if stats.stale_presented > 0 {
        s.rec.violate(
            t,
            format!("{} requests carried an expired access token while a newer one existed", stats.stale_presented),
        );
    }
    if let Some([lo, hi]) = tokens.spec.refreshed
        && !(lo..=hi).contains(&stats.refreshed)
    {
        s.rec.violate(t, format!("{} refreshes, expected {lo} to {hi}", stats.refreshed));
    }
    if let Some(n) = tokens.spec.refused
        && stats.refused != n
    {
        s.rec.violate(t, format!("{} refreshes refused, expected {n}", stats.refused));
    }
    if let Some(n) = tokens.spec.lost
        && stats.lost != n
    {
        s.rec.violate(t, format!("{} refresh answers lost after a rotation, expected {n}", stats.lost));
    }
}
