//! The dashboard in a real browser: Debian's headless Chromium driven over WebDriver
//! (chromedriver) against the real binary. Logs in with the admin key; a breaker opening shows
//! as OPEN within 2 s without a reload; a model lockout re-enabled with its button leaves the
//! card and the API; a combo request shows its path, its answer in the rates, its pin (hashed)
//! and the timeline; an invalid setting (the lockout card's, a breaker threshold) shows its error
//! beside the field and changes nothing; a valid one applies; the emergency switch reaches
//! health; both survive a restart; a wrong key is refused; 500 connections and 2 000 lockouts
//! are drawn within a second. Screenshots of each view land in `target/dashboard/`.

mod common;

use base64::Engine as _;
use chaos::client::{Reply, health, send};
use common::{chat_at, json, spawn, upstream};
use scenarios::{Behaviour, Script, ScriptedUpstream};
use serde_json::{Value, json};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::time::Instant;

const KEY: &str = "admin-key-0001";
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A chromedriver process and one browser session, both ended when dropped.
struct Browser {
    driver: Child,
    url: String,
    session: String,
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Killing chromedriver ends the browser it started.
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

async fn wd(method: &str, url: &str, body: &Value) -> Value {
    let text = if method == "GET" || method == "DELETE" { String::new() } else { body.to_string() };
    let r: Reply = send(method, url, &[("content-type", "application/json")], &text, Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("webdriver {method} {url}: {e}"));
    let v = json(&r);
    assert!(r.status == 200, "webdriver {method} {url} answered {}: {v}", r.status);
    v["value"].clone()
}

/// Whether Chromium and chromedriver are here; outside CI, `tests/browser/setup.sh` installs
/// them (in CI their absence fails the test: `.ci/run` installs them).
fn installed() -> bool {
    let has = |c: &str| Command::new(c).arg("--version").output().is_ok_and(|o| o.status.success());
    if has("chromium") && has("chromedriver") {
        return true;
    }
    let in_ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
    assert!(!in_ci, "chromium or chromedriver is missing: .ci/run installs them with tests/browser/setup.sh");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/browser/setup.sh");
    let ran = Command::new("bash").arg(script).status().is_ok_and(|s| s.success());
    ran && has("chromium") && has("chromedriver")
}

impl Browser {
    async fn start(profile: &std::path::Path) -> Browser {
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port").port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver (Debian's chromium-driver; .ci/run installs it)");
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while send("GET", &format!("{url}/status"), &[], "", Duration::from_secs(2)).await.is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let args = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1280,1800",
            &format!("--user-data-dir={}", profile.display()),
        ];
        let caps = json!({"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": args}}}});
        let mut b = Browser { driver, url, session: String::new() };
        let v = wd("POST", &format!("{}/session", b.url), &caps).await;
        b.session = v["sessionId"].as_str().expect("session id").to_owned();
        b
    }

    fn at(&self, path: &str) -> String {
        format!("{}/session/{}{path}", self.url, self.session)
    }

    async fn go(&self, url: &str) {
        wd("POST", &self.at("/url"), &json!({"url": url})).await;
    }

    async fn find(&self, css: &str) -> String {
        let v = wd("POST", &self.at("/element"), &json!({"using": "css selector", "value": css})).await;
        v[ELEMENT].as_str().expect("element").to_owned()
    }

    async fn click(&self, css: &str) {
        let e = self.find(css).await;
        wd("POST", &self.at(&format!("/element/{e}/click")), &json!({})).await;
    }

    async fn type_in(&self, css: &str, text: &str) {
        let e = self.find(css).await;
        wd("POST", &self.at(&format!("/element/{e}/clear")), &json!({})).await;
        wd("POST", &self.at(&format!("/element/{e}/value")), &json!({"text": text})).await;
    }

    async fn eval(&self, script: &str) -> Value {
        wd("POST", &self.at("/execute/sync"), &json!({"script": script, "args": []})).await
    }

    /// Waits until `script` returns true; returns how long it took.
    async fn until(&self, what: &str, script: &str, within: Duration) -> Duration {
        let start = Instant::now();
        loop {
            if self.eval(script).await == Value::Bool(true) {
                return start.elapsed();
            }
            if start.elapsed() >= within {
                let page = self.eval("return document.body.innerText").await;
                panic!("{what}: not within {within:?}; the page:\n{}", page.as_str().unwrap_or_default());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn screenshot(&self, name: &str) {
        let v = wd("GET", &self.at("/screenshot"), &Value::Null).await;
        let png = base64::engine::general_purpose::STANDARD.decode(v.as_str().expect("base64")).expect("png");
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/dashboard");
        std::fs::create_dir_all(&dir).expect("screenshot dir");
        std::fs::write(dir.join(format!("{name}.png")), png).expect("screenshot");
    }
}

/// A script: whether `provider`'s breaker shows `state`.
fn shows(provider: &str, state: &str) -> String {
    format!(
        "const r = document.querySelector('#providers tr[data-provider=\"{provider}\"]'); return r !== null && r.children[2].textContent === '{state}';"
    )
}

fn cell(provider: &str, column: usize) -> String {
    format!(
        "const r = document.querySelector('#providers tr[data-provider=\"{provider}\"]'); return r ? r.children[{column}].textContent : null;"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_logs_in_updates_live_and_steers_the_gateway_in_chromium() {
    if !installed() {
        eprintln!("skipped: no chromium and chromedriver, and tests/browser/setup.sh could not install them");
        return;
    }
    let (addr, _) = upstream(
        ScriptedUpstream::new()
            .route("down", Script::always(Behaviour::status(503, r#"{"error":{"message":"overloaded"}}"#)))
            .route(
                "busy",
                Script::always(Behaviour::status(502, r#"{"error":{"message":"<script>alert(1)</script>"}}"#)),
            )
            .route("fine", Script::always(Behaviour::echo())),
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("ferroute.toml");
    let text = format!(
        "[server]\ndata_dir = \"data\"\nadmin_key = \"{KEY}\"\n[resilience.model_lockout]\nenabled = true\nbase_cooldown_ms = 600000\nmax_cooldown_ms = 1800000\n[[providers]]\nid = \"flaky\"\nclass = \"local\"\nbase_url = \"http://{addr}/v1\"\nmodels = [\"down\"]\n[[connections]]\nid = \"f1\"\nprovider = \"flaky\"\napi_key = \"sk-f1\"\n[[connections]]\nid = \"f2\"\nprovider = \"flaky\"\napi_key = \"sk-f2\"\n[[providers]]\nid = \"keys\"\nbase_url = \"http://{addr}/v1\"\nmodels = [\"busy\", \"fine\"]\n[[connections]]\nid = \"k1\"\nprovider = \"keys\"\napi_key = \"sk-1\"\n[[combos]]\nname = \"team\"\ntargets = [\"flaky/down\", \"keys/fine\"]\n[resilience.session_affinity]\nttl_ms = 600000\n[emergency_fallback]\ntarget = \"keys/fine\"\n"
    );
    std::fs::write(&cfg, text).expect("config");
    let cfg_arg = cfg.display().to_string();
    let p = spawn(&["--config", &cfg_arg], dir.path()).await;
    let profile = tempfile::tempdir().expect("profile");
    let b = Browser::start(profile.path()).await;
    log_in(&b, &p.base).await;
    an_open_breaker_shows_live(&b, &p.base).await;
    a_lockout_is_re_enabled_from_its_row(&b, &p.base).await;
    the_other_views_show_what_happened(&b, &p.base).await;
    a_phone_sized_window_scrolls_nothing_sideways(&b).await;
    settings_are_checked_then_applied(&b, &p.base).await;
    other_settings_are_checked_then_applied(&b, &p.base).await;
    the_emergency_switch_reaches_health(&b, &p.base).await;
    drop(p);
    let p = spawn(&["--config", &cfg_arg], dir.path()).await;
    settings_and_the_switch_survive_a_restart(&b, &p.base).await;
    drop(p);
    five_hundred_connections_and_two_thousand_lockouts_render_within_a_second(&b).await;
    // End the browser (dropping the driver would leave it to the driver's own exit).
    wd("DELETE", &b.at(""), &Value::Null).await;
}

/// Opens the page of a gateway on a new origin, logged in (the key put in its session storage).
async fn open_logged_in(b: &Browser, base: &str) {
    b.go(&format!("{base}/dashboard")).await;
    b.eval(&format!("sessionStorage.setItem('ferroute-admin-key', '{KEY}')")).await;
    b.go(&format!("{base}/dashboard")).await;
}

/// The same gateway restarted (same config, same data directory): the page shows both runtime
/// overrides and the emergency switch still on.
async fn settings_and_the_switch_survive_a_restart(b: &Browser, base: &str) {
    open_logged_in(b, base).await;
    b.until(
        "the overrides after the restart",
        "const t = document.getElementById('settings-status').textContent; return t.includes('model_lockout.max_cooldown_ms') && t.includes('breaker.api_key.failure_threshold');",
        Duration::from_secs(5),
    )
    .await;
    b.until(
        "the switch after the restart",
        "return document.getElementById('emergency').checked === true",
        Duration::from_secs(5),
    )
    .await;
    let s = admin_get(base, "/api/resilience/settings").await;
    assert_eq!(s["effective"]["breaker"]["api_key"]["failure_threshold"], json!(20), "{s}");
    assert_eq!(s["effective"]["model_lockout"]["max_cooldown_ms"], json!(2_400_000), "{s}");
}

/// A second gateway with 500 connections, 2 000 of whose (connection, model) pairs are locked
/// (each request tries 100 connections, each answers 404, each 404 locks the model there):
/// the page, opened afresh, has drawn every row within a second of navigating to it.
async fn five_hundred_connections_and_two_thousand_lockouts_render_within_a_second(b: &Browser) {
    let mut upstream_script = ScriptedUpstream::new();
    for m in 0..4 {
        upstream_script = upstream_script.route(
            &format!("m{m}"),
            Script::always(Behaviour::status(404, r#"{"error":{"message":"no such model"}}"#)),
        );
    }
    let (addr, _) = upstream(upstream_script).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut text = format!(
        "[server]\nadmin_key = \"{KEY}\"\n[resilience.routing]\nmax_attempts = 100\n[resilience.model_lockout]\nenabled = true\nbase_cooldown_ms = 600000\n[[providers]]\nid = \"big\"\nbase_url = \"http://{addr}/v1\"\nmodels = [\"m0\", \"m1\", \"m2\", \"m3\"]\n"
    );
    for c in 0..500 {
        text.push_str(&format!("[[connections]]\nid = \"c{c:03}\"\nprovider = \"big\"\napi_key = \"sk-{c}\"\n"));
    }
    let cfg = dir.path().join("ferroute.toml");
    std::fs::write(&cfg, text).expect("config");
    let cfg_arg = cfg.display().to_string();
    let p = spawn(&["--config", &cfg_arg], dir.path()).await;
    for m in 0..4 {
        for _ in 0..5 {
            assert_eq!(chat_at(&p.base, &format!("big/m{m}")).await.status, 404);
        }
    }
    let locks = admin_get(&p.base, "/api/resilience/model-cooldowns").await;
    assert_eq!(locks["items"].as_array().map(Vec::len), Some(2_000), "2 000 lockouts");
    // A new origin (another port): the page opened afresh, logged in by itself.
    open_logged_in(b, &p.base).await;
    b.until(
        "every row",
        "return document.querySelectorAll('#lockouts tbody tr').length === 2000 && document.querySelectorAll('#connections-table tbody tr').length === 500 && document.body.dataset.drawnMs !== undefined",
        Duration::from_secs(10),
    )
    .await;
    let drawn = b.eval("return Number(document.body.dataset.drawnMs)").await.as_f64().unwrap_or(f64::MAX);
    eprintln!("500 connections and 2 000 lockouts drawn {drawn:.0} ms after navigating to the page");
    assert!(drawn < 1_000.0, "drawn {drawn} ms after navigating");
    b.screenshot("large").await;
}

/// A wrong key is refused on the login form; the right one shows the providers, live.
async fn log_in(b: &Browser, base: &str) {
    b.go(&format!("{base}/dashboard")).await;
    b.type_in("#key", "wrong-key-0000").await;
    b.click("#login-button").await;
    b.until(
        "the refusal",
        "return document.getElementById('login-error').textContent.includes('invalid admin key')",
        Duration::from_secs(5),
    )
    .await;
    b.screenshot("login-refused").await;
    b.type_in("#key", KEY).await;
    b.click("#login-button").await;
    b.until("the providers", &shows("flaky", "CLOSED"), Duration::from_secs(5)).await;
    b.until("the live badge", "return document.getElementById('live').textContent === 'live'", Duration::from_secs(5))
        .await;
    b.screenshot("overview").await;
}

/// The breaker opens (two keys fail once each): OPEN on the page within 2 s, no reload.
async fn an_open_breaker_shows_live(b: &Browser, base: &str) {
    assert_eq!(chat_at(base, "flaky/down").await.status, 503);
    let took = b.until("OPEN", &shows("flaky", "OPEN"), Duration::from_secs(2)).await;
    eprintln!("the page showed the open breaker {took:?} after the request");
    assert!(b.eval(&cell("flaky", 4)).await.as_str().is_some_and(|s| s.ends_with(" s")), "a countdown to the probe");
}

/// A lockout shows in the card; its button re-enables it, on the page and in the API.
async fn a_lockout_is_re_enabled_from_its_row(b: &Browser, base: &str) {
    assert_eq!(chat_at(base, "keys/busy").await.status, 502);
    b.until(
        "the lockout row",
        "return document.querySelector('#lockouts tr[data-lockout=\"keys/k1/busy\"]') !== null",
        Duration::from_secs(2),
    )
    .await;
    b.screenshot("model-cooldowns").await;
    b.click("#lockouts tr[data-lockout=\"keys/k1/busy\"] button").await;
    b.until(
        "the row gone",
        "return document.querySelector('#lockouts tr[data-lockout=\"keys/k1/busy\"]') === null",
        Duration::from_secs(2),
    )
    .await;
    let listed = admin_get(base, "/api/resilience/model-cooldowns").await;
    let items = listed["items"].as_array().expect("items");
    assert!(!items.is_empty() && items.iter().all(|l| l["model"] != "busy"), "only busy re-enabled: {listed}");
    // The upstream's error text, `<script>` and all, shows as text beside k1; the page still
    // has only its own two scripts.
    b.until(
        "the upstream's words as text",
        "const r = document.querySelector('#connections-table tr[data-connection=\"k1\"]'); return r !== null && r.children[6].textContent.includes('502 <script>alert(1)</script>');",
        Duration::from_secs(2),
    )
    .await;
    assert_eq!(b.eval("return document.querySelectorAll('script').length").await, json!(2));
    assert_eq!(
        b.eval("return document.querySelectorAll('#connections-table script, #connections-table b').length").await,
        json!(0)
    );
}

/// A combo request with a session: its path in the combos view, its answer in the rates, its
/// pin (hashed) in the sessions view, the open breaker on the timeline.
async fn the_other_views_show_what_happened(b: &Browser, base: &str) {
    let body = json!({"model": "team", "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let r = send(
        "POST",
        &format!("{base}/v1/chat/completions"),
        &[("content-type", "application/json"), ("x-session-id", "dashboard-session-1")],
        &body,
        Duration::from_secs(30),
    )
    .await
    .expect("combo request");
    assert_eq!(r.status, 200, "{}", r.body);
    b.until(
        "the combo's path",
        "const li = document.querySelector('.combo[data-combo=\"team\"] .paths li'); return li !== null && li.textContent.includes('keys/fine @ k1: served');",
        Duration::from_secs(2),
    )
    .await;
    assert_eq!(
        b.eval(
            "return document.querySelector('.combo[data-combo=\"team\"] tr[data-target=\"flaky/down\"]').textContent"
        )
        .await,
        json!("flaky/downf1 — circuit_open, f2 — circuit_open"),
        "the open breaker excludes both of flaky's keys"
    );
    b.eval("document.getElementById('combos').scrollIntoView()").await;
    b.screenshot("combos").await;
    b.until(
        "the rates",
        "const r = document.querySelector('#rates tr[data-provider=\"keys\"]'); return r !== null && Number(r.children[1].textContent) >= 1;",
        Duration::from_secs(2),
    )
    .await;
    let pins = b.eval("return [...document.querySelectorAll('#pins tbody tr')].map((r) => r.children[0].textContent + ' ' + r.children[2].textContent)").await;
    let pins = pins.as_array().expect("pins").clone();
    assert!(pins.iter().any(|p| p.as_str().is_some_and(|p| p.len() == 15 && p.ends_with(" k1"))), "{pins:?}");
    assert!(!b.eval("return document.body.innerText").await.as_str().unwrap_or("").contains("dashboard-session-1"));
    b.eval("document.getElementById('sessions').scrollIntoView()").await;
    b.screenshot("sessions").await;
    b.until(
        "the timeline",
        "const i = document.getElementById('timeline-img'); return i.complete && i.naturalWidth > 0 && i.src.startsWith('blob:');",
        Duration::from_secs(2),
    )
    .await;
    let svg = send(
        "GET",
        &format!("{base}/api/monitoring/timeline"),
        &[("x-ferroute-admin-key", KEY)],
        "",
        Duration::from_secs(5),
    )
    .await
    .expect("timeline");
    assert!(svg.body.contains(">breaker:flaky<") && svg.body.contains(">lock:keys/k1/busy<"), "{}", svg.body);
    b.eval("document.getElementById('timeline').scrollIntoView()").await;
    b.screenshot("timeline").await;
}

/// At 390 px wide (a phone) the page is no wider than the window: tables scroll inside their
/// section, the navigation wraps.
async fn a_phone_sized_window_scrolls_nothing_sideways(b: &Browser) {
    let rect = |w: u32, h: u32| json!({"width": w, "height": h});
    wd("POST", &b.at("/window/rect"), &rect(390, 844)).await;
    let js = "return [document.documentElement.scrollWidth, window.innerWidth, document.querySelector('nav').getBoundingClientRect().right]";
    let v = b.eval(js).await;
    let (page, window, nav) =
        (v[0].as_f64().unwrap_or(0.0), v[1].as_f64().unwrap_or(0.0), v[2].as_f64().unwrap_or(0.0));
    assert!(
        window > 0.0 && page <= window && nav <= window,
        "at 390 px: page {page}, window {window}, nav ends at {nav}"
    );
    wd("POST", &b.at("/window/rect"), &rect(1280, 1800)).await;
}

/// The settings besides the lockout card: an out-of-range breaker threshold shows its error
/// beside its field and changes nothing; a valid one applies.
async fn other_settings_are_checked_then_applied(b: &Browser, base: &str) {
    let field = "#other-form input[data-path=\"breaker.api_key.failure_threshold\"]";
    b.type_in(field, "0").await;
    b.click("#other-save").await;
    b.until(
        "the field's error",
        "return document.querySelector('#other-form .error[data-for=\"breaker.api_key.failure_threshold\"]').textContent.includes('out of range')",
        Duration::from_secs(5),
    )
    .await;
    b.eval("document.getElementById('other-form').scrollIntoView()").await;
    b.screenshot("settings-other-invalid").await;
    let s = admin_get(base, "/api/resilience/settings").await;
    assert_eq!(s["effective"]["breaker"]["api_key"]["failure_threshold"], json!(12), "{s}");
    b.type_in(field, "20").await;
    b.click("#other-save").await;
    b.until(
        "the override shown",
        "return document.getElementById('settings-status').textContent.includes('breaker.api_key.failure_threshold')",
        Duration::from_secs(5),
    )
    .await;
    let s = admin_get(base, "/api/resilience/settings").await;
    assert_eq!(s["overrides"]["breaker"], json!({"api_key": {"failure_threshold": 20}}), "{s}");
}

/// An invalid setting: its error beside the field, nothing changed; a valid one applies.
async fn settings_are_checked_then_applied(b: &Browser, base: &str) {
    b.type_in("#lockout-max_cooldown_ms", "1000").await;
    b.click("#lockout-save").await;
    b.until(
        "the field's error",
        "return document.querySelector('.error[data-for=\"max_cooldown_ms\"]').textContent.length > 0",
        Duration::from_secs(5),
    )
    .await;
    b.screenshot("settings-invalid").await;
    let s = admin_get(base, "/api/resilience/settings").await;
    assert_eq!(s["overrides"], json!({}), "{s}");
    b.type_in("#lockout-max_cooldown_ms", "2400000").await;
    b.click("#lockout-save").await;
    b.until(
        "the override shown",
        "return document.getElementById('settings-status').textContent.startsWith('Overridden at runtime')",
        Duration::from_secs(5),
    )
    .await;
    let s = admin_get(base, "/api/resilience/settings").await;
    assert_eq!(s["effective"]["model_lockout"]["max_cooldown_ms"], json!(2_400_000), "{s}");
    let h = health(base).await.expect("health");
    assert_eq!(h["resilience_overrides"]["model_lockout"]["max_cooldown_ms"], json!(2_400_000), "health shows it: {h}");
}

/// The emergency switch, clicked on the page, reaches health.
async fn the_emergency_switch_reaches_health(b: &Browser, base: &str) {
    b.click("#emergency").await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let h = health(base).await.expect("health");
        if h["emergency_fallback"]["enabled"] == json!(true) {
            break;
        }
        assert!(Instant::now() < deadline, "the switch did not reach health: {h}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    b.screenshot("flags").await;
}

/// `GET path` with the admin key, as JSON.
async fn admin_get(base: &str, path: &str) -> Value {
    json(
        &send("GET", &format!("{base}{path}"), &[("x-ferroute-admin-key", KEY)], "", Duration::from_secs(5))
            .await
            .expect(path),
    )
}
