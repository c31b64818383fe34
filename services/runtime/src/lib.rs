//! The consumer runtime: everything about consuming Kafka correctly and
//! nothing about any particular workload.
//!
//! A workload implements [`Handler`]; the runtime feeds it records and owns
//! the rest: offsets (stored only past contiguously completed records whose
//! outputs are acknowledged), per-key lanes (same key in order, different
//! keys concurrently), a permit per record, per-partition budgets with
//! pause/resume, retries with backoff, dead letters, the Kafka and Redis
//! sinks, metrics, rebalances and the shutdown drain.
//!
//! # Layout
//! - [`config`]: `RuntimeConfig`, from `SLUICE_PROCESSOR_…` variables.
//! - [`handler`]: the `Handler` trait and how a handler reports failure.
//! - [`consumer`]: the consumer thread: polling, rebalance callbacks,
//!   offset stores and commits, pause/resume; the only owner of librdkafka.
//! - [`partition`]: one actor per assigned partition: lanes, offset
//!   tracker, budgets. Its state has one owner and an assignment epoch.
//! - [`task`]: one record's life: permit, handler, retries, dead letter.
//! - [`sink`]: the shared Kafka producer and the batching Redis writer.
//! - [`metrics`]: every metric the runtime exports.
//! - [`run`]: wiring and the shutdown sequence.

#![forbid(unsafe_code)]

pub mod config;
pub mod consumer;
pub mod handler;
pub mod metrics;
pub mod partition;
pub mod retry;
pub mod run;
pub mod sink;
pub mod task;

pub use config::RuntimeConfig;
pub use handler::{HandleError, Handled, Handler, Publish, Record};
pub use run::{Runtime, RuntimeHandle};
