//! The ingest gateway: the chain's `Subscribe` stream into Kafka
//! `chain.transactions`, one record per pool a transaction touches, keyed
//! by that pool (`sluice_core::route`, the rule the processors rely on).
//!
//! - [`tracker`]: what was sent and acknowledged; the cursor; where a
//!   dropped stream resumes (pure logic).
//! - [`store`]: the lease and the fenced cursor in Redis.
//! - [`resent`]: which acknowledged records the topic held already when an
//!   active period began (what it sends again, counted).
//! - [`gateway`]: standby → active (lease held, renewed) → stream → Kafka
//!   through the pipelined, idempotent producer; reconnects with backoff.
//! - [`config`], [`metrics`].

#![forbid(unsafe_code)]

pub mod config;
pub mod gateway;
pub mod metrics;
pub mod resent;
pub mod store;
pub mod tracker;
