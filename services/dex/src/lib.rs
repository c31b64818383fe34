//! The DEX swap workload, one [`sluice_runtime::Handler`]: decode a chain
//! transaction record → recognise its swaps on the record's pool → normalise
//! amounts with token decimals (cached) → apply the pool state in Redis
//! (idempotently, by sequence) and publish each `Swap` to Kafka.
//!
//! # Layout
//! - [`config`]: the workload's settings (`SLUICE_PROCESSOR_…`).
//! - [`registry`]: the token registry in Redis, its cache and invalidation.
//! - [`state`]: pool state in Redis: the apply script and its read-back.
//! - `handler`: `DexHandler`, tying it together.
//! - `outputs`: where its effects go: Redis + Kafka, or memory (benchmarks).
//! - `metrics`: the workload's metrics.
//!
//! The last three need the `handler` feature (default); without it the
//! crate is the DEX's Redis layout alone, for the scheduler's jobs.

#![forbid(unsafe_code)]

pub mod config;
#[cfg(feature = "handler")]
pub mod handler;
#[cfg(feature = "handler")]
pub mod metrics;
#[cfg(feature = "handler")]
pub mod outputs;
pub mod registry;
pub mod state;
#[cfg(feature = "handler")]
pub mod swap_wire;

pub use config::DexConfig;
#[cfg(feature = "handler")]
pub use handler::DexHandler;
