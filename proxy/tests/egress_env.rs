//! The real binary honours the environment's proxy variables (`[server] proxy_from_env`, on by
//! default): with `HTTPS_PROXY` set, a request to an HTTPS upstream goes through that proxy's
//! `CONNECT` tunnel; with the upstream's host in `NO_PROXY`, it goes direct.

mod common;

use chaos::proxies::http_connect;
use chaos::tls::{Ca, tls_upstream};
use common::{chat_at, spawn_with_env};
use scenarios::{Behaviour, Script, ScriptedUpstream};
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_proxy_from_the_environment_carries_the_request_and_no_proxy_bypasses_it() {
    let ca = Ca::new("Ferroute env-proxy test CA");
    let script = Arc::new(ScriptedUpstream::new().route("m", Script::always(Behaviour::echo())));
    let up = tls_upstream(Some(ca.leaf(&["localhost"], 4000)), script).await;
    let proxy = http_connect(None).await;
    let dir = tempfile::tempdir().expect("dir");
    let ca_path = dir.path().join("ca.pem");
    std::fs::write(&ca_path, ca.pem()).expect("CA file");
    let cfg = format!(
        "[server]\ndata_dir = \"{}\"\nextra_ca = \"{}\"\n[[providers]]\nid = \"up\"\nbase_url = \"https://localhost:{}/v1\"\nmodels = [\"m\"]\n[[connections]]\nid = \"k1\"\nprovider = \"up\"\napi_key = \"sk-1\"\n",
        dir.path().join("data").display(),
        ca_path.display(),
        up.port()
    );
    let cfg_path = dir.path().join("ferroute.toml");
    std::fs::write(&cfg_path, cfg).expect("config");
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
