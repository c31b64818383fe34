//! chainsim: a deterministic synthetic chain, the source of truth for
//! Sluice's tests, benchmarks and demo.
//!
//! A seed fixes everything: tokens, pools on three venue layouts, traders,
//! and every transaction of every slot, including the faults (malformed
//! transactions, unknown venues) and the bursts. Because the chain applies
//! its own swaps, it can answer the true state of any pool at any slot, so
//! whatever Sluice derives downstream can be checked against it.
//!
//! # Layout
//! - [`config`]: the knobs, and the rate of each slot.
//! - [`world`]: genesis (tokens, pools, traders).
//! - [`market`]: venue math (how a pool prices a swap).
//! - [`generator`]: the chain, block by block.
//! - [`history`]: pool states over time, for `GetPool(pool, at_slot)`.
//! - [`server`]: the `Chain` gRPC service, live-paced.
//! - [`feed`]: the same stream produced straight into Kafka.

#![forbid(unsafe_code)]

pub mod config;
pub mod feed;
pub mod generator;
pub mod history;
pub mod market;
pub mod server;
pub mod swap;
pub mod world;

pub use config::ChainConfig;
pub use generator::{Block, Chain, Fault, GeneratedTx, TxKind};
