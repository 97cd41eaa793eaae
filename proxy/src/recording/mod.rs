//! The flight recorder (`[recording]`): a record of every upstream attempt and every client
//! request ([`record`]), written compressed to rolling, size-bounded files ([`writer`]), and
//! cut into one file by `ferroute recording export` ([`export`]) for `sim replay`; the same
//! records exported as OpenTelemetry spans ([`telemetry`]).

pub mod export;
pub mod record;
pub mod telemetry;
pub mod trace;
pub mod writer;
