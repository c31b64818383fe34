//! The scheduler: every periodic job of a Sluice deployment, each scheduled
//! tick run once across replicas, correctness writes fenced.
//!
//! - [`schedule`]: cron expressions with seconds, in UTC; tick identity.
//! - [`model`]: a tick's life as types (outcomes, reasons) and the engine's
//!   decisions as pure functions; [`clock`]: wall time behind a trait.
//! - [`store`]: the state every replica shares (claims, leases, fencing
//!   tokens, the effect ledger, the run history), in Redis (one Lua script
//!   per transition) or in memory (tests).
//! - [`engine`]: per-job tickers, claim outcomes, runs with their leases,
//!   timeouts, takeover of dead runs, drain on shutdown.
//! - [`jobs`]: the job contract ([`jobs::Job`], fenced writes through
//!   [`jobs::RunContext::write`]) and the built-in jobs (token refresh, pool
//!   reconciliation, heartbeat).
//! - [`admin`]: the admin gRPC API, and [`cli`] its command line
//!   (`sluice-scheduler admin …`); [`metrics`]: Prometheus metrics.

#![forbid(unsafe_code)]

pub mod admin;
pub mod cli;
pub mod clock;
pub mod config;
pub mod engine;
pub mod jobs;
pub mod metrics;
pub mod model;
pub mod schedule;
pub mod store;
