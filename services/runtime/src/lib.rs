//! The consumer runtime: everything about consuming Kafka correctly and
//! nothing about any particular workload.
//!
//! A workload implements [`Handler`]; the runtime feeds it records and owns
//! the rest: offsets (committed only past contiguously completed records
//! whose outputs are acknowledged), per-key lanes (same key in order,
//! different keys concurrently), a permit per unit of work, per-partition
//! budgets with pause/resume, retries with backoff, dead letters, the Kafka
//! output and a Redis writer, metrics, rebalances and the shutdown drain.
//!
//! # Layout
//! - [`config`]: `RuntimeConfig`, from `SLUICE_PROCESSOR_…` variables.
//! - [`handler`]: the `Handler` trait (per record, or in batches) and how a
//!   handler reports failure.
//! - [`consumer`]: the consumer thread: polling (a batch per partition per
//!   poll round), rebalance callbacks (`consumer::context`), commits,
//!   pause/resume; the only owner of librdkafka's consumer.
//! - [`intake`]: the consumer thread's decisions as pure state (what was
//!   handed out, pauses, which positions to commit, markers, pacing).
//! - [`partition`]: one partition's decisions as a pure state machine (what
//!   starts, completes and is released, the position, budgets, retries,
//!   stalls, the drain), unit- and property-tested.
//! - [`worker`]: one worker per assigned partition and epoch: the IO around
//!   its `Partition` (units of work as futures in one task, timers, the
//!   producer, the slot, metrics).
//! - [`lanes`]: which of a partition's records may start (per-key order).
//! - [`outcome`]: a unit's results as done records, dead letters and retries.
//! - [`output`]: the shared Kafka producer, acknowledged per group.
//! - [`slot`]: what a worker tells the consumer thread (position, pause).
//! - [`txn`]: exactly-once outputs: the Kafka transactions and their driver.
//! - [`sink`]: the batching Redis writer a workload may use.
//! - [`health`], [`metrics`]: readiness and every metric the runtime exports.
//! - [`run`]: wiring and the shutdown sequence.

#![forbid(unsafe_code)]

pub mod config;
pub mod consumer;
pub mod handler;
pub mod health;
mod intake;
mod lanes;
pub mod metrics;
mod outcome;
pub mod output;
mod partition;
mod recorded;
pub mod retry;
pub mod run;
pub mod sink;
mod slot;
mod store_guard;
mod txn;
mod worker;

pub use config::{RuntimeConfig, WorkloadDefaults};
pub use handler::{Batching, HandleError, Handled, Handler, NotReady, Publish, Record};
pub use metrics::{DeadLetterKind, Dependency, Identity, MessageOutcome, RuntimeMetrics};
pub use retry::Exhausted;
pub use run::{Runtime, RuntimeHandle};
