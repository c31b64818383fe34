//! A small Kafka client of our own for what a lag poller asks, batched the
//! way the protocol allows: one `Metadata` for every topic ([`Topology`]: the
//! brokers, each partition's leader and replicas); `ListOffsets` once per
//! partition leader for every partition it leads; `FindCoordinator` for
//! every group at once; `OffsetFetch` and `DescribeGroups` once per
//! coordinator for all its groups; `Fetch` of one record per partition, once
//! per leader. librdkafka (the services' client) has no batched group-offset
//! call, and a client per group costs threads and connections per group.
//! Messages are encoded by the `kafka-protocol` crate; connections, TLS
//! (OpenSSL, as librdkafka uses) and SASL are here.

mod cluster;
mod conn;
mod ops;
mod scram;
pub mod security;
mod topology;

pub use cluster::Cluster;
pub use ops::{GroupDescription, GroupListing, Member, Offsets, PerPartition, RecordTime, TopicConfig};
pub use topology::{Broker, Placement, Topology};

/// A topic and partition.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tp {
    pub topic: std::sync::Arc<str>,
    pub partition: i32,
}

impl Tp {
    pub fn new(topic: &str, partition: i32) -> Self {
        Self { topic: topic.into(), partition }
    }
}

impl std::fmt::Display for Tp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// A failed call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Connecting, reading or writing failed, or no answer came in time.
    #[error("{0}")]
    Io(String),
    #[error("TLS: {0}")]
    Tls(String),
    #[error("SASL: {0}")]
    Auth(String),
    /// A malformed or unexpected message.
    #[error("protocol: {0}")]
    Protocol(String),
    /// The broker does not speak a version of an API this client needs.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The broker answered with an error code.
    #[error("{api}: {}", kafka_error(*code))]
    Kafka { api: &'static str, code: i16 },
}

/// A Kafka error code with its name, for the ones a lag poller meets.
pub fn kafka_error(code: i16) -> String {
    let name = match code {
        3 => "UNKNOWN_TOPIC_OR_PARTITION",
        5 => "LEADER_NOT_AVAILABLE",
        6 => "NOT_LEADER_OR_FOLLOWER",
        7 => "REQUEST_TIMED_OUT",
        14 => "COORDINATOR_LOAD_IN_PROGRESS",
        15 => "COORDINATOR_NOT_AVAILABLE",
        16 => "NOT_COORDINATOR",
        29 => "TOPIC_AUTHORIZATION_FAILED",
        30 => "GROUP_AUTHORIZATION_FAILED",
        31 => "CLUSTER_AUTHORIZATION_FAILED",
        35 => "UNSUPPORTED_VERSION",
        69 => "GROUP_ID_NOT_FOUND",
        1 => "OFFSET_OUT_OF_RANGE",
        _ => "",
    };
    if name.is_empty() { format!("error {code}") } else { format!("{name} ({code})") }
}
