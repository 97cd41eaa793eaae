//! `[telemetry]`: OpenTelemetry export of each client request and its upstream attempts as
//! spans, over OTLP/HTTP (protobuf). Off unless an endpoint is set, here or in the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` variables (with
//! `OTEL_EXPORTER_OTLP_HEADERS` read as well).

use super::error::err;
use ferroute_core::settings::FieldError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `[telemetry]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// The collector's OTLP/HTTP base URL (`http://127.0.0.1:4318`; spans go to `/v1/traces`).
    pub otlp_endpoint: Option<String>,
    /// Headers sent with every export (an API key, say; values may be `env:NAME`).
    pub headers: BTreeMap<String, String>,
    /// The share of requests traced (0 to 1; a client's `traceparent` decides for its own).
    pub sampling_ratio: f64,
    /// `service.name`.
    pub service_name: String,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            otlp_endpoint: None,
            headers: BTreeMap::new(),
            sampling_ratio: 1.0,
            service_name: "ferroute".into(),
        }
    }
}

impl TelemetryConfig {
    pub(super) fn validate_into(&self, errors: &mut Vec<FieldError>) {
        if !(0.0..=1.0).contains(&self.sampling_ratio) {
            errors.push(err(
                "telemetry.sampling_ratio",
                format!("is out of range: {} (allowed 0..=1)", self.sampling_ratio),
            ));
        }
        if let Some(e) = &self.otlp_endpoint
            && e.parse::<http::Uri>().map_or(true, |u| u.scheme().is_none() || u.host().is_none())
        {
            errors.push(err("telemetry.otlp_endpoint", format!("is not an http(s) URL: {e}")));
        }
        if self.service_name.trim().is_empty() {
            errors.push(err("telemetry.service_name", "must not be empty"));
        }
    }
}
