//! `sluice-ops`: what an operator does after something went wrong.
//!
//! - [`letters`]: dead letters as the runtime writes them.
//! - [`select`]: which letters an operator means, and what they add up to (`dlq inspect`).
//! - [`offsets`]: the processors' committed offsets, shown and reset (`offsets`).
//! - [`redrive`]: letters sent back to the input topic, each once (`dlq redrive`).
//! - [`rebuild`]: the DEX state made again from the chain and the input topic (`rebuild`).
//! - [`time`]: the times an operator types and reads.

#![forbid(unsafe_code)]

pub mod letters;
pub mod offsets;
pub mod rebuild;
pub mod redrive;
pub mod select;
pub mod time;
