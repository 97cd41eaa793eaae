//! `ferroute recording export`: cuts a window of the recording directory into one file, the
//! input `sim replay` takes.

use crate::recording::record::Record;
use crate::recording::writer::{read, recordings};
use flate2::Compression;
use flate2::write::GzEncoder;
use std::io::Write;
use std::path::Path;

/// Parses an instant given on the command line: Unix milliseconds or RFC 3339.
pub fn instant(s: &str) -> Result<u64, String> {
    if let Ok(ms) = s.trim().parse::<u64>() {
        return Ok(ms);
    }
    ferroute_core::hint::parse_rfc3339_ms(s.trim())
        .ok_or_else(|| format!("`{s}` is neither Unix milliseconds nor an RFC 3339 instant (2026-12-03T18:00:00Z)"))
}

/// The records of `dir` from `since` (inclusive) to `until` (exclusive), Unix ms, ordered by
/// time; a request's attempts come along with it even if they began after `until`.
pub fn window(dir: &Path, since: u64, until: u64) -> std::io::Result<Vec<Record>> {
    let mut all = Vec::new();
    for (file, _) in recordings(dir)? {
        all.extend(read(&file)?);
    }
    let requests: std::collections::BTreeSet<u64> = all
        .iter()
        .filter_map(|r| match r {
            Record::Request(q) if q.at_ms >= since && q.at_ms < until => Some(q.request),
            _ => None,
        })
        .collect();
    let mut out: Vec<Record> = all
        .into_iter()
        .filter(|r| match r {
            Record::Request(q) => requests.contains(&q.request),
            Record::Attempt(a) => requests.contains(&a.request),
        })
        .collect();
    out.sort_by_key(Record::at_ms);
    Ok(out)
}

/// Writes `records` to `out` as one gzip-compressed JSON-lines file.
pub fn write(records: &[Record], out: &Path) -> std::io::Result<()> {
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    for r in records {
        serde_json::to_writer(&mut gz, r)?;
        gz.write_all(b"\n")?;
    }
    std::fs::write(out, gz.finish()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_in_either_spelling() {
        assert_eq!(instant("1780000000123"), Ok(1_780_000_000_123));
        assert_eq!(instant("2026-05-28T20:26:40.123Z"), Ok(1_780_000_000_123));
        assert!(instant("yesterday").unwrap_err().contains("RFC 3339"));
    }
}
