//! sluice-lag: consumer-group lag read from Kafka itself, independent of the
//! consumers it watches, so it never goes silent when they stop.
//!
//! - [`wire`]: a small Kafka client of our own (batched offsets and groups).

#![forbid(unsafe_code)]

pub mod wire;
