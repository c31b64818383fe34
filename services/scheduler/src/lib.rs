//! The scheduler: every periodic job of a Sluice deployment, each scheduled
//! tick run once across replicas, correctness writes fenced.
//!
//! - [`schedule`]: cron expressions with seconds, in UTC; tick identity.
//! - [`store`]: claims, leases, fencing tokens and run history in Redis
//!   (one Lua script per transition).
//! - [`engine`]: per-job tickers, claim outcomes, runs with lease renewal,
//!   timeouts, takeover of dead runs, drain on shutdown.
//! - [`jobs`]: the [`jobs::Job`] trait and the built-in jobs (token
//!   refresh, pool reconciliation, heartbeat).
//! - [`admin`]: the admin gRPC API, and [`cli`] its command line
//!   (`sluice-scheduler admin …`); [`metrics`]: Prometheus metrics.

#![forbid(unsafe_code)]

pub mod admin;
pub mod cli;
pub mod config;
pub mod engine;
pub mod jobs;
pub mod metrics;
pub mod schedule;
pub mod store;
