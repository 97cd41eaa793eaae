//! Sends a fixed number of requests one after another through an in-process ferroute and
//! exits, for counting instructions: run it under `valgrind --tool=callgrind` for two targets
//! (or two counts) and subtract, and the difference is a repeatable per-request cost, free of
//! the machine's timing noise. `--target passthrough` gives the bare pass-through's cost and
//! `--target minimal` the minimal gateway's, the yardstick for ferroute's: `scripts/instructions`
//! runs all of it and prints the ratios. Everything (upstream, gateway, client) shares the one
//! process; `scripts/instructions` also counts heap allocations per request the same way, with
//! valgrind's DHAT.

use clap::Parser;
use load::{
    bench_model, bench_upstream, body, sequential, start_gateway, start_gateway_with, start_minimal, start_passthrough,
    start_sink,
};
use scenarios::serve_upstream;
use std::sync::Arc;

/// Which hop the requests take.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Target {
    /// Straight to the scripted upstream.
    Direct,
    /// Through the bare hyper pass-through (the physical limit of any proxy).
    Passthrough,
    /// Through the minimal gateway (the pass-through that reads the body for `model`, picks one
    /// of 8 keys round robin and counts the request): the yardstick for ferroute's cost.
    Minimal,
    /// Chat requests through ferroute to an OpenAI-format provider.
    Same,
    /// Chat requests through ferroute to an Anthropic-format provider (translated).
    Translated,
    /// As `same`, with the flight recorder on (`[recording]`).
    Recorded,
    /// Chat requests to a Responses-format provider (translated); the echo route.
    ToResponses,
    /// Chat requests to a Gemini-format provider (translated); the echo route.
    ToGemini,
    /// Gemini API requests to a Gemini-format provider (passed through); the echo route.
    GeminiSame,
    /// Gemini API requests to an OpenAI-format provider (translated); the echo route.
    GeminiToChat,
    /// As `same`, with every request and attempt exported as spans to a local OTLP sink.
    Traced,
    /// As `same`, with the slow-stream watchdog on (it reads every event of a stream).
    Watched,
}

/// Send COUNT requests and exit.
#[derive(Parser, Debug)]
#[command(name = "requests")]
struct Cli {
    /// The hop.
    #[arg(long, value_enum)]
    target: Target,
    /// Stream the answers.
    #[arg(long)]
    stream: bool,
    /// Requests to send (after 20 warm-up requests).
    #[arg(long, default_value_t = 1000)]
    count: usize,
    /// Keys of each of ferroute's benchmark providers (round robin).
    #[arg(long, default_value_t = load::BENCH_KEYS)]
    keys: usize,
    /// Providers in ferroute's config besides the benchmark's (one key each, never used).
    #[arg(long, default_value_t = 0)]
    extra_providers: usize,
    /// Stream from the echo route (`m`, its words one event each) rather than the fixed
    /// ten-event stream, as the Responses and Gemini targets always do.
    #[arg(long)]
    echo: bool,
}

// One thread: no work stealing or idle spinning between workers, so the count repeats.
#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    anyhow::ensure!(cli.keys > 0, "--keys must be at least 1");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let up = listener.local_addr()?;
    tokio::spawn(serve_upstream(listener, Arc::new(bench_upstream())));
    let data = std::env::temp_dir().join(format!("ferroute-requests-{}", std::process::id()));
    let (addr, prefix) = match cli.target {
        Target::Direct => (up, ""),
        Target::Passthrough => (start_passthrough(up).await?, ""),
        Target::Minimal => (start_minimal(up).await?, ""),
        Target::Same => {
            let scale = load::Scale { keys: cli.keys, extra_providers: cli.extra_providers };
            (load::start_gateway_scaled(Some(up), &data, "", scale).await?, "bench/")
        }
        Target::Translated => (start_gateway(Some(up), &data).await?, "bench-ant/"),
        Target::Recorded => {
            let head = format!("[recording]\nenabled = true\npath = \"{}\"\n", data.join("recording").display());
            (start_gateway_with(Some(up), &data, &head).await?, "bench/")
        }
        Target::Traced => {
            let head = format!("[telemetry]\notlp_endpoint = \"http://{}\"\n", start_sink().await?);
            (start_gateway_with(Some(up), &data, &head).await?, "bench/")
        }
        Target::Watched => {
            let head = "[resilience.throughput_watchdog]\nenabled = true\n";
            (start_gateway_with(Some(up), &data, head).await?, "bench/")
        }
        Target::ToResponses => (start_gateway(Some(up), &data).await?, "bench-rsp/"),
        Target::ToGemini | Target::GeminiSame => (start_gateway(Some(up), &data).await?, "bench-gem/"),
        Target::GeminiToChat => (start_gateway(Some(up), &data).await?, "bench/"),
    };
    let echo = cli.echo
        || matches!(cli.target, Target::ToResponses | Target::ToGemini | Target::GeminiSame | Target::GeminiToChat);
    let model = if echo { format!("{prefix}m") } else { bench_model(prefix, cli.stream) };
    let (url, b) = match cli.target {
        Target::GeminiSame | Target::GeminiToChat => {
            let method = if cli.stream { "streamGenerateContent?alt=sse" } else { "generateContent" };
            let text = "measure the overhead of this gateway";
            let b = serde_json::json!({"contents": [{"role": "user", "parts": [{"text": text}]}]});
            (format!("http://{addr}/v1beta/models/{model}:{method}"), bytes::Bytes::from(b.to_string()))
        }
        _ => (format!("http://{addr}/v1/chat/completions"), body(&model, cli.stream)),
    };
    sequential(&url, b.clone(), 20).await;
    let ok = sequential(&url, b, cli.count).await;
    let _ = std::fs::remove_dir_all(&data);
    println!("{ok} of {} requests answered 200", cli.count);
    anyhow::ensure!(ok == cli.count, "{} requests failed", cli.count - ok);
    Ok(())
}
