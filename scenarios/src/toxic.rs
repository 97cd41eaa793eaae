//! Transport-level faults ("toxics"), as data. The chaos suite executes them on real sockets
//! in a middlebox between the gateway and an upstream; HTTP-level faults stay in [`crate::Script`].

use serde::{Deserialize, Serialize};

/// One transport fault.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Toxic {
    /// Delay every chunk, both directions.
    Latency {
        /// Added delay.
        ms: u64,
    },
    /// Limit throughput, both directions.
    Bandwidth {
        /// Bytes per second.
        bytes_per_second: u64,
    },
    /// Delay closing the connection after the peer closed.
    SlowClose {
        /// Added delay.
        ms: u64,
    },
    /// Accept connections and never forward anything.
    Timeout,
    /// Accept and reset the connection at once.
    ResetPeer,
    /// Split writes into small chunks with a delay between them.
    Slicer {
        /// Largest chunk.
        max_chunk: usize,
        /// Delay between chunks.
        delay_ms: u64,
    },
    /// Close the connection after this many bytes from the upstream.
    LimitData {
        /// Bytes.
        bytes: u64,
    },
    /// Refuse connections (nothing listens).
    Down,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toxics_are_data() {
        let t: Vec<Toxic> = serde_json::from_str(
            r#"[{"kind":"latency","ms":50},{"kind":"down"},{"kind":"slicer","max_chunk":3,"delay_ms":1}]"#,
        )
        .expect("parses");
        assert_eq!(t[1], Toxic::Down);
        assert!(serde_json::from_str::<Toxic>(r#"{"kind":"latency"}"#).is_err(), "fields are required");
    }
}
