//! The recorder's writer: records go through a bounded queue to one thread that writes them as
//! gzip-compressed JSON lines into rolling files (`recording-<unix ms>.jsonl.gz` in the
//! recording directory). Each batch (what came within a second of its first record, at most
//! 512) is one gzip member, so a file is readable up to its last whole batch even if the process dies.
//! A file is closed at an eighth of `max_mb`; the oldest files go while the directory holds more
//! than `max_mb`. A full queue drops the record and counts it: recording never slows a request.

use crate::recording::record::Record;
use flate2::Compression;
use flate2::write::GzEncoder;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::time::Duration;

/// Records the queue holds before it drops.
pub const QUEUE: usize = 8192;
/// Records per batch at most.
const BATCH: usize = 512;
/// The smallest file size at which a file is closed.
const MIN_FILE_BYTES: u64 = 64 * 1024;

/// The recorder.
pub struct Recorder {
    tx: SyncSender<Record>,
    dropped: Arc<AtomicU64>,
    written: Arc<AtomicU64>,
    dir: PathBuf,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").field("dir", &self.dir).finish_non_exhaustive()
    }
}

impl Recorder {
    /// Starts writing into `dir` (created if missing), keeping at most `max_bytes` there.
    /// `wall_ms` names new files.
    pub fn start(dir: &Path, max_bytes: u64, wall_ms: fn() -> u64) -> std::io::Result<Recorder> {
        std::fs::create_dir_all(dir)?;
        let (tx, rx) = sync_channel(QUEUE);
        let written = Arc::new(AtomicU64::new(0));
        let files = Files { dir: dir.to_owned(), max_bytes, wall_ms, current: None, size: 0 };
        let w = Arc::clone(&written);
        std::thread::Builder::new().name("ferroute-recorder".into()).spawn(move || run(rx, files, &w))?;
        Ok(Recorder { tx, dropped: Arc::default(), written, dir: dir.to_owned() })
    }

    /// The recorder `config` asks for: `current` when it writes to the same directory, else a
    /// new one (none when recording is off).
    pub fn for_config(
        config: &crate::config::Config,
        current: Option<&Arc<Recorder>>,
    ) -> Result<Option<Arc<Recorder>>, crate::state::store::StoreError> {
        if !config.recording.enabled {
            return Ok(None);
        }
        let dir = config.recording.dir(&config.server.data_dir);
        if let Some(r) = current.filter(|r| r.dir() == dir) {
            return Ok(Some(Arc::clone(r)));
        }
        let max = config.recording.max_mb.saturating_mul(1024 * 1024);
        Recorder::start(&dir, max, crate::state::clock::system_wall_ms)
            .map(|r| Some(Arc::new(r)))
            .map_err(|source| crate::state::store::StoreError::Dir { path: dir.display().to_string(), source })
    }

    /// Queues `record`; drops it (and counts the drop) when the queue is full.
    pub fn record(&self, record: Record) {
        match self.tx.try_send(record) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Records dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Records written so far.
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

struct Files {
    dir: PathBuf,
    max_bytes: u64,
    wall_ms: fn() -> u64,
    current: Option<std::fs::File>,
    size: u64,
}

impl Files {
    fn write(&mut self, batch: &[u8]) -> std::io::Result<()> {
        if self.current.is_none() {
            let name = self.dir.join(format!("recording-{:013}.jsonl.gz", (self.wall_ms)()));
            self.current = Some(std::fs::OpenOptions::new().create(true).append(true).open(name)?);
            self.size = 0;
        }
        let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
        gz.write_all(batch)?;
        let member = gz.finish()?;
        if let Some(f) = self.current.as_mut() {
            f.write_all(&member)?;
            f.flush()?;
        }
        self.size += member.len() as u64;
        if self.size >= (self.max_bytes / 8).max(MIN_FILE_BYTES) {
            self.current = None;
            self.prune()?;
        }
        Ok(())
    }

    /// Deletes the oldest files while the directory holds more than `max_bytes`.
    fn prune(&self) -> std::io::Result<()> {
        let mut files = recordings(&self.dir)?;
        let mut total: u64 = files.iter().map(|(_, n)| n).sum();
        files.reverse();
        while total > self.max_bytes {
            let Some((oldest, n)) = files.pop() else { break };
            std::fs::remove_file(&oldest)?;
            total -= n;
        }
        Ok(())
    }
}

/// The recording files in `dir`, oldest first, with their sizes.
pub fn recordings(dir: &Path) -> std::io::Result<Vec<(PathBuf, u64)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("recording-") && name.ends_with(".jsonl.gz") {
            out.push((entry.path(), entry.metadata()?.len()));
        }
    }
    out.sort();
    Ok(out)
}

/// The records that came within a second of the first (at most [`BATCH`]), or `None` when the
/// queue is closed and empty. This thread is the process's own (the simulation never records),
/// so it reads the real clock.
#[allow(clippy::disallowed_methods)]
pub(crate) fn batch<T>(rx: &Receiver<T>, max: usize) -> Option<Vec<T>> {
    let first = loop {
        match rx.recv_timeout(Duration::from_secs(1)) {
            Ok(r) => break r,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return None,
        }
    };
    let until = std::time::Instant::now() + Duration::from_secs(1);
    let mut out = vec![first];
    while out.len() < max {
        let left = until.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(r) => out.push(r),
            Err(_) => break,
        }
    }
    Some(out)
}

fn run(rx: Receiver<Record>, mut files: Files, written: &AtomicU64) {
    let mut buf = Vec::new();
    while let Some(records) = batch(&rx, BATCH) {
        let mut n = 0u64;
        for r in &records {
            if serde_json::to_writer(&mut buf, r).is_ok() {
                buf.push(b'\n');
                n += 1;
            }
        }
        match files.write(&buf) {
            Ok(()) => {
                written.fetch_add(n, Ordering::Relaxed);
            }
            Err(e) => tracing::error!(error = %e, "could not write the recording"),
        }
        buf.clear();
    }
}

/// Reads every record of `path` (a recording file, or an export), skipping a torn last batch.
pub fn read(path: &Path) -> std::io::Result<Vec<Record>> {
    use std::io::BufRead;
    let file = std::fs::File::open(path)?;
    let gz = flate2::read::MultiGzDecoder::new(std::io::BufReader::new(file));
    let mut out = Vec::new();
    for line in std::io::BufReader::new(gz).lines() {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(&line) {
            Ok(r) => out.push(r),
            Err(e) => {
                return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{}: {e}", path.display())));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::record::{RequestRecord, class_of};

    fn request(n: u64) -> Record {
        Record::Request(RequestRecord {
            request: n,
            at_ms: n,
            answered_ms: n + 1,
            api: "chat".into(),
            // Incompressible enough that files fill.
            model: format!("{:x}", n.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
            stream: false,
            session: Some(format!("{:064x}", n.wrapping_mul(0x2545_F491_4F6C_DD1D))),
            status: 200,
            class: class_of(200),
        })
    }

    #[tokio::test]
    async fn files_roll_and_the_oldest_go_while_every_kept_record_reads_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = || {
            static T: AtomicU64 = AtomicU64::new(1_000);
            T.fetch_add(1, Ordering::Relaxed)
        };
        let max = 640 * 1024;
        let r = Recorder::start(dir.path(), max, clock).expect("recorder");
        let n = 40_000;
        for i in 0..n {
            r.record(request(i));
            if i % 4_000 == 0 {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while r.written() + r.dropped() < n && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(r.written() + r.dropped(), n);
        let files = recordings(dir.path()).expect("files");
        let total: u64 = files.iter().map(|(_, s)| s).sum();
        assert!(files.len() >= 2, "it rolled: {files:?}");
        // At most `max`, plus the file still being written.
        assert!(total <= max + (max / 8).max(MIN_FILE_BYTES) + 64 * 1024, "{total} bytes in {files:?}");
        let mut kept = Vec::new();
        for (f, _) in &files {
            kept.extend(read(f).expect("read"));
        }
        assert!(!kept.is_empty() && (kept.len() as u64) < n, "the oldest went: {} kept", kept.len());
        // What is kept is the newest, in order.
        if r.dropped() == 0 {
            assert_eq!(kept.last().map(Record::at_ms), Some(n - 1));
        }
        assert!(kept.windows(2).all(|w| w[0].at_ms() < w[1].at_ms()));
    }
}
