//! The proxied soak's world: the real `ferroute` binary in its own process (so its resident
//! memory is its own), a combo over two providers of different formats with eight keys each,
//! and the benchmark's scripted upstream, which answers at once. The soak drives chat
//! completions to the combo. The binary is started as the chaos suite starts it
//! ([`chaos::binary::Gateway`]); [`RssSampler`] samples its resident set from `/proc`, and
//! [`cpu_ticks`] reads its CPU time.

pub use chaos::binary::{Gateway, rss_kib_of as rss_kib};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// The combo the proxied soak asks for: round robin over an OpenAI-format target (passed
/// through) and an Anthropic-format one (translated), each provider with eight keys.
pub const COMBO: &str = "soak";

/// The config of the proxied soak's gateway: the benchmark providers and the combo.
pub fn config_text(upstream: SocketAddr) -> String {
    let mut text = String::new();
    for (id, format) in [("bench", "openai"), ("bench-ant", "anthropic")] {
        text += &format!(
            "[[providers]]\nid = \"{id}\"\nformat = \"{format}\"\nbase_url = \"http://{upstream}/v1\"\n\
             models = [\"m\"]\nconnection_strategy = \"round-robin\"\n"
        );
        for k in 1..=crate::BENCH_KEYS {
            text += &format!("[[connections]]\nid = \"{id}-{k}\"\nprovider = \"{id}\"\napi_key = \"sk-bench-{k}\"\n");
        }
    }
    text += &format!(
        "[[combos]]\nname = \"{COMBO}\"\nstrategy = \"round-robin\"\ntargets = [\"bench/m\", \"bench-ant/m\"]\n"
    );
    text
}

/// Starts the real binary `bin` with `config` (TOML; its state goes to `dir/data`, its config
/// to `dir/ferroute.toml`) on a port it picks and announces ([`chaos::binary::Gateway`]).
pub async fn start_binary(bin: &Path, dir: &Path, config: &str) -> anyhow::Result<Gateway> {
    anyhow::ensure!(bin.is_file(), "no binary at {} (cargo build --release -p proxy --bin ferroute)", bin.display());
    let path = dir.join("ferroute.toml");
    let data = dir.join("data");
    std::fs::write(&path, format!("[server]\ndata_dir = {:?}\n{config}", data.display().to_string()))?;
    Gateway::start_with(bin, &path).await.map_err(|e| anyhow::anyhow!("{}: {e}", bin.display()))
}

/// A process's CPU time so far (user + system) in clock ticks (`/proc/<pid>/stat`, 100 a
/// second on Linux).
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; the fields after its `)` are fixed.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15; `rest` starts at field 3.
    let user: u64 = fields.get(11)?.parse().ok()?;
    let system: u64 = fields.get(12)?.parse().ok()?;
    Some(user + system)
}

/// Samples a process's resident set every `every` until dropped.
pub struct RssSampler {
    samples: Arc<Mutex<Vec<(f64, u64)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl RssSampler {
    /// Starts sampling `pid`.
    pub fn start(pid: u32, every: Duration) -> RssSampler {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let into = samples.clone();
        let task = tokio::spawn(async move {
            let began = Instant::now();
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                if let Some(kib) = rss_kib(pid)
                    && let Ok(mut s) = into.lock()
                {
                    s.push((began.elapsed().as_secs_f64(), kib));
                }
            }
        });
        RssSampler { samples, task }
    }

    /// The samples so far: seconds since the start, KiB.
    pub fn samples(&self) -> Vec<(f64, u64)> {
        self.samples.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

impl Drop for RssSampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Resident set at the start of the load (the first sample at or after `warm` seconds, once
/// every user runs), the middle and the end, and whether the end and middle stay within
/// `tolerance` (0.10 = 10 %) of the start.
pub fn rss_flatness(samples: &[(f64, u64)], warm: f64, tolerance: f64) -> Option<([u64; 3], bool)> {
    let start_at = samples.iter().position(|s| s.0 >= warm)?;
    let loaded = &samples[start_at..];
    let start = loaded.first()?.1;
    let middle = loaded.get(loaded.len() / 2)?.1;
    let end = loaded.last()?.1;
    let limit = start as f64 * (1.0 + tolerance);
    Some(([start, middle, end], middle as f64 <= limit && end as f64 <= limit))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_is_one_the_gateway_accepts_with_the_combo() {
        let text = config_text("127.0.0.1:9".parse().unwrap());
        let config = proxy::config::Config::from_toml_str(&text, &|_| None, &[]).unwrap();
        assert_eq!(config.providers.len(), 2);
        assert!(text.contains("targets = [\"bench/m\", \"bench-ant/m\"]"));
    }

    #[test]
    fn flatness_reads_start_middle_and_end_after_the_warm_up() {
        let flat = [(1.0, 10), (10.0, 100), (20.0, 105), (30.0, 108)];
        assert_eq!(rss_flatness(&flat, 5.0, 0.10), Some(([100, 105, 108], true)));
        let growing = [(10.0, 100), (20.0, 105), (30.0, 111)];
        assert_eq!(rss_flatness(&growing, 5.0, 0.10), Some(([100, 105, 111], false)));
        assert_eq!(rss_flatness(&flat, 40.0, 0.10), None);
    }

    #[test]
    fn this_process_has_a_resident_set_and_a_cpu_time_that_grows() {
        let me = std::process::id();
        assert!(rss_kib(me).is_some_and(|k| k > 0));
        let before = cpu_ticks(me).unwrap();
        // Spins (a few seconds at most) until the kernel has charged this process a tick.
        let mut x = 1u64;
        for _ in 0..10_000 {
            for _ in 0..1_000_000 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
            if cpu_ticks(me).unwrap() > before {
                return;
            }
        }
        panic!("no CPU time charged after 10^10 steps ({x})");
    }
}
