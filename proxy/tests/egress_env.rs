//! The real binary honours the environment's proxy variables (`[server] proxy_from_env`, on by
//! default): with `HTTPS_PROXY` set, a request to an HTTPS upstream goes through that proxy's
//! `CONNECT` tunnel; with the upstream's host in `NO_PROXY`, it goes direct. Once with an
//! in-test proxy, once with the official OpenAI SDK as the client and a real tinyproxy.

mod common;

use chaos::proxies::http_connect;
use chaos::tls::{Ca, tls_upstream};
use common::{chat_at, spawn_with_env};
use scenarios::{Behaviour, Script, ScriptedUpstream};
use std::sync::Arc;

/// A config in `dir` with one provider at `https://localhost:{port}`, trusting `ca`; its path.
fn config(dir: &std::path::Path, ca: &Ca, port: u16) -> std::path::PathBuf {
    let ca_path = dir.join("ca.pem");
    std::fs::write(&ca_path, ca.pem()).expect("CA file");
    let cfg = format!(
        "[server]\ndata_dir = \"{}\"\nextra_ca = \"{}\"\n[[providers]]\nid = \"up\"\nbase_url = \"https://localhost:{port}/v1\"\nmodels = [\"m\"]\n[[connections]]\nid = \"k1\"\nprovider = \"up\"\napi_key = \"sk-1\"\n",
        dir.join("data").display(),
        ca_path.display(),
    );
    let cfg_path = dir.join("ferroute.toml");
    std::fs::write(&cfg_path, cfg).expect("config");
    cfg_path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_proxy_from_the_environment_carries_the_request_and_no_proxy_bypasses_it() {
    let ca = Ca::new("Ferroute env-proxy test CA");
    let script = Arc::new(ScriptedUpstream::new().route("m", Script::always(Behaviour::echo())));
    let up = tls_upstream(Some(ca.leaf(&["localhost"], 4000)), script).await;
    let proxy = http_connect(None).await;
    let dir = tempfile::tempdir().expect("dir");
    let cfg_path = config(dir.path(), &ca, up.port());
    let args = ["--config", cfg_path.to_str().expect("path")];
    let https_proxy = format!("http://{}", proxy.addr);

    let p = spawn_with_env(&args, dir.path(), &[("HTTPS_PROXY", &https_proxy), ("NO_PROXY", "")]).await;
    let r = chat_at(&p.base, "up/m").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(proxy.carried(), vec![format!("localhost:{}", up.port())], "through the proxy");
    drop(p);

    let p = spawn_with_env(&args, dir.path(), &[("https_proxy", &https_proxy), ("no_proxy", "localhost")]).await;
    let r = chat_at(&p.base, "up/m").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(proxy.carried().len(), 1, "NO_PROXY bypassed the proxy");
}

/// The issue's own check, end to end with real programs: the official OpenAI SDK calls the real
/// binary, which reaches an HTTPS upstream (private CA) only through a real tinyproxy that
/// `HTTPS_PROXY` names, with credentials; tinyproxy's own log shows the `CONNECT`. With the
/// upstream's host in `NO_PROXY` the next gateway goes direct and tinyproxy sees nothing new.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_sdk_reaches_an_https_upstream_only_through_tinyproxy_and_no_proxy_bypasses_it() {
    if chaos::proxy_processes::available().is_none() {
        return;
    }
    let Some(python) = tokio::task::spawn_blocking(chaos::sdk::python).await.expect("venv check") else { return };
    let ca = Ca::new("Ferroute SDK-through-proxy test CA");
    let script = Arc::new(ScriptedUpstream::new().route("m", Script::always(Behaviour::echo())));
    let up = tls_upstream(Some(ca.leaf(&["localhost"], 4000)), script.clone()).await;
    let tiny = chaos::proxy_processes::tinyproxy("team", "s3cret").await;
    let dir = tempfile::tempdir().expect("dir");
    let cfg_path = config(dir.path(), &ca, up.port());
    let args = ["--config", cfg_path.to_str().expect("path")];
    let https_proxy = format!("http://team:s3cret@127.0.0.1:{}", tiny.port);
    let sdk = |base: String, words: &'static str| {
        let python = python.clone();
        tokio::task::spawn_blocking(move || {
            let code = "import sys, openai\n\
                        c = openai.OpenAI(base_url=sys.argv[1] + '/v1', api_key='unused', max_retries=0)\n\
                        r = c.chat.completions.create(model='up/m', messages=[{'role': 'user', 'content': sys.argv[2]}])\n\
                        print(r.choices[0].message.content)\n";
            // The SDK itself talks to the gateway directly: no proxy variables of its own.
            let out = std::process::Command::new(python)
                .args(["-c", code, &base, words])
                .env_remove("HTTPS_PROXY")
                .env_remove("HTTP_PROXY")
                .env_remove("ALL_PROXY")
                .output()
                .expect("python runs");
            (
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        })
    };
    let connect = format!("CONNECT localhost:{}", up.port());

    let p = spawn_with_env(&args, dir.path(), &[("HTTPS_PROXY", &https_proxy), ("NO_PROXY", "")]).await;
    let (ok, out, err) = sdk(p.base.clone(), "through the corporate proxy").await.expect("join");
    assert!(ok && out.contains("through the corporate proxy"), "the SDK through the gateway:\n{out}\n{err}");
    let log = tiny.log();
    assert_eq!(log.matches(&connect).count(), 1, "tinyproxy carried the upstream call: {log}");
    assert_eq!(script.calls("m"), 1);
    drop(p);

    let p = spawn_with_env(&args, dir.path(), &[("HTTPS_PROXY", &https_proxy), ("NO_PROXY", "localhost")]).await;
    let (ok, out, err) = sdk(p.base.clone(), "around the proxy").await.expect("join");
    assert!(ok && out.contains("around the proxy"), "the SDK through the gateway:\n{out}\n{err}");
    assert_eq!(script.calls("m"), 2, "the upstream was reached");
    assert_eq!(tiny.log().matches(&connect).count(), 1, "NO_PROXY bypassed tinyproxy: {}", tiny.log());
}
