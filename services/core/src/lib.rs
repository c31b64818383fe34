//! Sluice's domain logic, free of IO.
//!
//! Nothing here touches a socket or a runtime: no tokio, rdkafka or redis.
//! The one clock reading is [`clock::now_ms`], which the logic never calls.
//! The chain simulator writes transactions with these layouts, the ingest
//! gateway routes them with [`route`], and the processor recognises swaps
//! with [`recognize`]; tests and benchmarks call the same code.
//!
//! # Layout
//! - [`rng`]: the seedable generator every deterministic stream is drawn from.
//! - [`keys`]: base58 account keys and signatures.
//! - [`venue`]: the three venue layouts (instruction data, accounts, events).
//! - [`route`]: which pools a transaction touches, i.e. its Kafka keys.
//! - [`txview`]: a transaction decoded without copying its strings out.
//! - [`recognize`]: a transaction record → the swaps it made on its pool.
//! - [`seq`]: a swap's position on the chain (slot, transaction, instruction).
//! - [`pool`]: pool state and how a swap changes it.
//! - [`offsets`]: the per-partition contiguous-watermark offset tracker.
//! - [`cache`]: the concurrent batch-evicting cache (token decimals).
//! - [`prices`]: the lock-free board of reference prices.
//! - [`clock`]: wall-clock Unix milliseconds, for the crates around this one.

#![forbid(unsafe_code)]

pub mod cache;
pub mod clock;
pub mod keys;
pub mod offsets;
pub mod pool;
pub mod prices;
pub mod recognize;
pub mod rng;
pub mod route;
pub mod seq;
pub mod txview;
pub mod venue;

pub use sluice_proto::chain::v1 as chain;
pub use sluice_proto::dex::v1 as dex;
