//! What every Sluice deployable shares, so each `main.rs` stays a page:
//!
//! - [`env`]: typed config from `SLUICE_…` variables; every bad or unknown
//!   variable is reported by name, all at once.
//! - [`settings`]: each service's settings as a table (name, type, default, why), from
//!   which the reader takes its defaults and the docs and `--help` are rendered.
//! - [`telemetry`]: tracing setup (JSON in containers, plain on a terminal).
//! - [`admin`]: the admin HTTP server: `/live`, `/ready`, `/metrics`.
//! - [`metrics`]: one way to define and register a service's series.
//! - [`signal`]: SIGTERM / Ctrl-C as a future.
//!
//! And for the programs that run deployables as child processes (the demo,
//! the integration tests): [`process`].

#![forbid(unsafe_code)]

pub mod admin;
pub mod connections;
pub mod env;
pub mod metrics;
pub mod process;
pub mod settings;
pub mod signal;
pub mod telemetry;
pub mod utc;
