//! A workload with the defaults a scenario file has for what it leaves out.

use crate::scenario::{Method, Workload};
use std::collections::BTreeMap;

impl Workload {
    /// One request for `model` from `client` at 0 ms to the first gateway; every other field
    /// as a scenario file that leaves it out has it.
    pub fn of(client: &str, model: &str) -> Workload {
        Workload {
            gateway: None,
            client: client.to_owned(),
            start_ms: 0,
            every_ms: 0,
            count: 1,
            model: model.to_owned(),
            stream: false,
            anthropic: false,
            gemini: false,
            headers: BTreeMap::new(),
            prompt: None,
            pad_bytes: 0,
            tools: 0,
            path: None,
            method: Method::Post,
            body: None,
            abort: None,
            abort_after_ms: 0,
        }
    }
}
