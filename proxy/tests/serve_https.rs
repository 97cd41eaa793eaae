//! Ferroute serving HTTPS itself (`[server] tls = { cert, key }`), as the real binary: a
//! certificate of a private CA serves the API to a client that trusts that CA, and to the
//! official OpenAI SDK given the CA in `SSL_CERT_FILE`; a plain-HTTP client and a client that
//! does not trust the CA get nothing; SIGHUP serves a renewed certificate from the same files
//! without a restart, and a broken one is refused while the old one keeps serving.

mod common;

use chaos::tls::{Ca, client_trusting, https_request};
use common::spawn;
use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

const CHAT: &str = r#"{"model":"demo/echo","messages":[{"role":"user","content":"over https"}]}"#;

fn addr_of(base: &str) -> SocketAddr {
    base.trim_start_matches("https://").parse().expect("address")
}

fn hangup(pid: u32) {
    assert!(Command::new("kill").args(["-HUP", &pid.to_string()]).status().expect("kill").success());
}

/// Asks `/metrics` over HTTPS until its text contains `line` (a reload is done when it is
/// counted), for at most 10 s.
async fn until_metrics_show(client: &tokio_rustls::TlsConnector, addr: SocketAddr, line: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let m = https_request(client, addr, "localhost", ("GET", "/metrics", "")).await.expect("metrics");
        if m.body.contains(line) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "/metrics never showed {line:?}:\n{}", m.body);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_with_a_private_ca_serves_clients_that_trust_it_and_a_renewed_certificate_after_sighup() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = Ca::new("Ferroute serving test CA");
    let ca_path = dir.path().join("ca.pem");
    std::fs::write(&ca_path, ca.pem()).expect("ca.pem");
    let (cert, key, first) = ca.leaf_files(&["localhost", "127.0.0.1"], 2100, dir.path());
    let config = dir.path().join("ferroute.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\ndata_dir = \"{}\"\ntls = {{ cert = \"{cert}\", key = \"{key}\" }}\n",
            dir.path().join("data").display()
        ),
    )
    .expect("config");
    let p = spawn(&["--config", &config.display().to_string()], dir.path()).await;
    assert!(p.base.starts_with("https://127.0.0.1:"), "the binary announces https: {}", p.base);
    let addr = addr_of(&p.base);
    let trusting = client_trusting(&ca.pem());

    let live = https_request(&trusting, addr, "localhost", ("GET", "/livez", "")).await.expect("livez over https");
    assert_eq!(live.status, 200, "{live:?}");
    assert_eq!(live.cert, first, "the configured certificate is served");
    let chat = https_request(&trusting, addr, "localhost", ("POST", "/v1/chat/completions", CHAT)).await.expect("chat");
    assert_eq!(chat.status, 200, "{chat:?}");
    assert!(chat.body.contains("over https"), "{}", chat.body);

    // A client of another CA fails its handshake; plain HTTP gets no HTTP answer.
    let stranger = client_trusting(&Ca::new("another CA").pem());
    let e = https_request(&stranger, addr, "localhost", ("GET", "/livez", "")).await.expect_err("untrusted");
    assert!(e.to_string().contains("UnknownIssuer"), "{e}");
    let plain = chaos::client::send("GET", &format!("http://{addr}/livez"), &[], "", Duration::from_secs(15)).await;
    assert!(plain.is_err(), "plain HTTP is not served on the HTTPS port: {plain:?}");

    // The official OpenAI SDK, trusting the CA through SSL_CERT_FILE.
    if let Some(python) = tokio::task::spawn_blocking(chaos::sdk::python).await.expect("venv check") {
        let script = "import sys, openai\n\
                      c = openai.OpenAI(base_url=sys.argv[1] + '/v1', api_key='unused', max_retries=0)\n\
                      r = c.chat.completions.create(model='demo/echo', messages=[{'role': 'user', 'content': 'sdk over https'}])\n\
                      print(r.choices[0].message.content)\n";
        let base = format!("https://localhost:{}", addr.port());
        let out = Command::new(&python)
            .args(["-c", script, &base])
            .env("SSL_CERT_FILE", &ca_path)
            .output()
            .expect("python runs");
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(
            out.status.success() && stdout.contains("sdk over https"),
            "the OpenAI SDK over HTTPS:\n{stdout}\n{stderr}"
        );
        let without =
            Command::new(&python).args(["-c", script, &base]).env_remove("SSL_CERT_FILE").output().expect("python");
        let stderr = String::from_utf8_lossy(&without.stderr);
        assert!(!without.status.success() && stderr.contains("CERTIFICATE_VERIFY_FAILED"), "without the CA: {stderr}");
    }

    // A renewed certificate at the same paths: SIGHUP, and new connections get it.
    let (_, _, second) = ca.leaf_files(&["localhost", "127.0.0.1"], 2101, dir.path());
    assert_ne!(first, second);
    hangup(p.child.id());
    until_metrics_show(&trusting, addr, "ferroute_config_reloads_total{result=\"ok\"} 1").await;
    let after = https_request(&trusting, addr, "localhost", ("GET", "/livez", "")).await.expect("after SIGHUP");
    assert_eq!((after.status, after.cert == second), (200, true), "the renewed certificate is served");

    // A broken certificate file is refused whole: the running certificate keeps serving.
    std::fs::write(dir.path().join("cert.pem"), "not a certificate").expect("break");
    hangup(p.child.id());
    until_metrics_show(&trusting, addr, "ferroute_config_reloads_total{result=\"refused\"} 1").await;
    let kept = https_request(&trusting, addr, "localhost", ("GET", "/livez", "")).await.expect("still serving");
    assert_eq!((kept.status, kept.cert == second), (200, true), "the running certificate is kept");
    let check = Command::new(env!("CARGO_BIN_EXE_ferroute"))
        .args(["check-config", &config.display().to_string()])
        .output()
        .expect("check-config");
    let stderr = String::from_utf8_lossy(&check.stderr);
    assert!(
        !check.status.success() && stderr.contains("server.tls") && stderr.contains("holds no certificate"),
        "{stderr}"
    );
}
