//! Kafka plumbing shared by every Sluice service.
//!
//! - [`client`]: client configuration from one typed struct, with
//!   pass-through properties for TLS/SASL and tuning.
//! - [`topics`]: the project's topics and their idempotent creation (topics
//!   are created by the project, never by broker auto-creation).
//! - [`producer`]: the pipelined producer: many sends in flight, delivery
//!   futures resolved afterwards, the oldest awaited when the queue is full.
//! - [`partition`]: the partition a keyed record goes to, as librdkafka's
//!   default partitioner places it, for a producer that must know it before
//!   sending.
//! - [`tail`]: the newest record of each partition, read once (what a
//!   producer taking over finds already written).
//! - [`whole`]: a topic read whole, as a `read_committed` reader sees it.

#![forbid(unsafe_code)]

pub mod client;
pub mod partition;
pub mod producer;
pub mod tail;
pub mod topics;
pub mod whole;

pub use client::KafkaConfig;
pub use producer::{PipelinedProducer, ProduceError};
pub use topics::{TopicSpec, ensure_topics};
