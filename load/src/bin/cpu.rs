//! The gateway's own CPU time per proxied request, the figure the cost targets are set in.
//!
//! The gateway (the bare pass-through, the minimal gateway or ferroute) runs alone on a thread
//! of its own with its own runtime, pinned to one core; the client and the scripted upstream
//! share the main thread, pinned to the other. The gateway thread's CPU clock
//! (`CLOCK_THREAD_CPUTIME_ID`: user and system time, so the kernel's socket work for the
//! gateway's two connections is counted, as a CPU target must) is read before and after COUNT
//! sequential requests: the difference divided by COUNT is one request's, with nothing
//! subtracted. The thread's user time is given apart too (`getrusage(RUSAGE_THREAD)`, which
//! splits the same time by the kernel's sampling): the gateway's own code, without the kernel's
//! socket work, is the part where gateways differ. `scripts/gateway-cpu` alternates the hops over several rounds and prints the
//! medians and the ratios to the minimal gateway's.

use clap::Parser;
use load::{bench_model, bench_upstream, body, sequential, start_gateway, start_minimal, start_passthrough};
use nix::sched::{CpuSet, sched_setaffinity};
use nix::sys::resource::{UsageWho, getrusage};
use nix::time::{ClockId, clock_gettime};
use nix::unistd::Pid;
use scenarios::serve_upstream;
use std::net::SocketAddr;
use std::sync::Arc;

/// The gateway measured.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Target {
    /// The bare hyper pass-through.
    Passthrough,
    /// The minimal gateway (reads the body for `model`, picks one of 8 keys round robin, sets
    /// its key and counts the request): the yardstick.
    Minimal,
    /// Ferroute, chat requests to an OpenAI-format provider with 8 keys round robin.
    Same,
}

/// Print the gateway thread's CPU time per request.
#[derive(Parser, Debug)]
#[command(name = "cpu")]
struct Cli {
    /// The gateway.
    #[arg(long, value_enum)]
    target: Target,
    /// Stream the answers (SSE).
    #[arg(long)]
    stream: bool,
    /// Requests measured (after a warm-up of COUNT/10, at least 200).
    #[arg(long, default_value_t = 10_000)]
    count: usize,
    /// Pin the gateway and the client to two cores (off: let the kernel place them).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pin: bool,
}

/// Pins the calling thread to `core` (best effort: a machine with one core keeps its placement).
fn pin_to(core: usize) {
    let mut set = CpuSet::new();
    if set.set(core).is_ok() && sched_setaffinity(Pid::from_raw(0), &set).is_err() {
        eprintln!("could not pin a thread to core {core}; measuring unpinned");
    }
}

/// The calling thread's CPU time and its user time, in nanoseconds.
fn thread_cpu_ns() -> anyhow::Result<(i128, i128)> {
    let t = clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID)?;
    let user = getrusage(UsageWho::RUSAGE_THREAD)?.user_time();
    Ok((
        i128::from(t.tv_sec()) * 1_000_000_000 + i128::from(t.tv_nsec()),
        i128::from(user.tv_sec()) * 1_000_000_000 + i128::from(user.tv_usec()) * 1_000,
    ))
}

/// Starts the target on a thread of its own; returns its address and its runtime's handle.
async fn start_alone(
    target: Target,
    up: SocketAddr,
    pin: bool,
    data: std::path::PathBuf,
) -> anyhow::Result<(SocketAddr, tokio::runtime::Handle)> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new().name("gateway".into()).spawn(move || {
        if pin {
            pin_to(1);
        }
        let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(rt) => rt,
            Err(e) => {
                let _ = tx.send(Err(anyhow::Error::from(e)));
                return;
            }
        };
        let handle = rt.handle().clone();
        rt.block_on(async move {
            let addr = match target {
                Target::Passthrough => start_passthrough(up).await,
                Target::Minimal => start_minimal(up).await,
                Target::Same => start_gateway(Some(up), &data).await,
            };
            let _ = tx.send(addr.map(|a| (a, handle)));
            // The gateway's tasks run on this thread until the process exits.
            std::future::pending::<()>().await
        });
    })?;
    rx.await?
}

/// The gateway thread's CPU and user time, read on that thread.
async fn gateway_cpu_ns(gw: &tokio::runtime::Handle) -> anyhow::Result<(i128, i128)> {
    gw.spawn(async { thread_cpu_ns() }).await?
}

// The client and the upstream on one thread (the gateway has its own).
#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    anyhow::ensure!(cli.count > 0, "--count must be at least 1");
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let pin = cli.pin && cores >= 2;
    if pin {
        pin_to(0);
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let up = listener.local_addr()?;
    tokio::spawn(serve_upstream(listener, Arc::new(bench_upstream())));
    let data = std::env::temp_dir().join(format!("ferroute-cpu-{}", std::process::id()));
    let (addr, gw) = start_alone(cli.target, up, pin, data.clone()).await?;
    let prefix = if matches!(cli.target, Target::Same) { "bench/" } else { "" };
    let url = format!("http://{addr}/v1/chat/completions");
    let b = body(&bench_model(prefix, cli.stream), cli.stream);
    sequential(&url, b.clone(), (cli.count / 10).max(200)).await;
    let (gw0, main0) = (gateway_cpu_ns(&gw).await?, thread_cpu_ns()?);
    let ok = sequential(&url, b, cli.count).await;
    let (gw1, main1) = (gateway_cpu_ns(&gw).await?, thread_cpu_ns()?);
    let _ = std::fs::remove_dir_all(&data);
    anyhow::ensure!(ok == cli.count, "{} of {} requests failed", cli.count - ok, cli.count);
    let per = |a: i128, b: i128| (b - a) as f64 / cli.count as f64 / 1000.0;
    // One line, microseconds a request: the gateway's CPU, the client's and upstream's, the
    // gateway's user time.
    println!("{:.3} {:.3} {:.3}", per(gw0.0, gw1.0), per(main0.0, main1.0), per(gw0.1, gw1.1));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spins until the calling thread's clock has counted `ms` milliseconds of its work (mostly
    /// user time: many steps between two readings); fails if that takes ten seconds.
    fn spin(ms: i128) -> anyhow::Result<()> {
        let (start, wall) = (thread_cpu_ns()?.0, tokio::time::Instant::now());
        let mut x = 0u64;
        while thread_cpu_ns()?.0 - start < ms * 1_000_000 {
            for _ in 0..50_000 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            anyhow::ensure!(wall.elapsed() < std::time::Duration::from_secs(10), "the thread clock does not count");
        }
        Ok(())
    }

    #[test]
    fn the_thread_clocks_count_this_threads_work_only() -> anyhow::Result<()> {
        let (cpu0, user0) = thread_cpu_ns()?;
        // Another thread's work is not this thread's (this one waits, idle, for it).
        std::thread::Builder::new().spawn(|| spin(60))?.join().map_err(|_| anyhow::anyhow!("the spin panicked"))??;
        let (cpu1, _) = thread_cpu_ns()?;
        assert!(cpu1 - cpu0 < 20_000_000, "another thread's work was counted: {} ns", cpu1 - cpu0);
        spin(60)?;
        let (_, user2) = thread_cpu_ns()?;
        assert!(user2 > user0, "60 ms of spinning left the thread's user time where it was");
        Ok(())
    }

    #[tokio::test]
    async fn a_gateway_on_its_own_thread_answers_and_its_clock_moves() -> anyhow::Result<()> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let up = listener.local_addr()?;
        tokio::spawn(serve_upstream(listener, Arc::new(bench_upstream())));
        let data = tempfile::tempdir()?;
        for target in [Target::Passthrough, Target::Minimal, Target::Same] {
            let (addr, gw) = start_alone(target, up, false, data.path().join(format!("{target:?}"))).await?;
            let prefix = if matches!(target, Target::Same) { "bench/" } else { "" };
            let url = format!("http://{addr}/v1/chat/completions");
            let before = gateway_cpu_ns(&gw).await?.0;
            assert_eq!(sequential(&url, body(&bench_model(prefix, false), false), 20).await, 20, "{target:?}");
            let after = gateway_cpu_ns(&gw).await?.0;
            assert!(after > before, "{target:?}: the gateway thread's clock did not move");
        }
        Ok(())
    }
}
