//! The project's topics, created idempotently by the project itself.

use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

use crate::KafkaConfig;

/// Raw chain transactions, one record per pool touched, keyed by pool.
pub const CHAIN_TRANSACTIONS: &str = "chain.transactions";
/// Records the processor could not recognise, with the reason in headers.
pub const CHAIN_TRANSACTIONS_DLQ: &str = "chain.transactions.dlq";
/// The header a record sent back from the dead-letter topic carries
/// (`sluice-ops dlq redrive`): where it was dead-lettered, `<topic>/<partition>/<offset>`.
/// A processor whose workload dead-letters keys lifts a key when one comes.
pub const REDRIVE_ORIGIN_HEADER: &str = "sluice.redrive.origin";

/// Whether a record came back from the dead-letter topic (it carries [`REDRIVE_ORIGIN_HEADER`]).
pub fn redriven(message: &impl rdkafka::Message) -> bool {
    use rdkafka::message::Headers;
    message.headers().is_some_and(|h| h.iter().any(|h| h.key == REDRIVE_ORIGIN_HEADER))
}
/// Recognised swaps, keyed by pool.
pub const DEX_SWAPS: &str = "dex.swaps";
/// Default partition count of the keyed topics.
pub const DEFAULT_PARTITIONS: i32 = 12;

/// A topic to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSpec {
    pub name: String,
    pub partitions: i32,
    pub replication: i32,
    /// Topic configs set at creation (`cleanup.policy`, `retention.ms`, …).
    pub configs: Vec<(String, String)>,
}

impl TopicSpec {
    pub fn new(name: impl Into<String>, partitions: i32) -> Self {
        Self { name: name.into(), partitions, replication: 1, configs: Vec::new() }
    }

    /// With topic config `key` set to `value` at creation.
    pub fn with_config(mut self, key: &str, value: &str) -> Self {
        self.configs.push((key.to_string(), value.to_string()));
        self
    }

    /// The project's topics with a `prefix` (empty in production; tests use
    /// a unique one) and `partitions` for the keyed topics.
    pub fn project(prefix: &str, partitions: i32) -> Vec<Self> {
        vec![
            Self::new(format!("{prefix}{CHAIN_TRANSACTIONS}"), partitions),
            Self::new(format!("{prefix}{DEX_SWAPS}"), partitions),
            Self::new(format!("{prefix}{CHAIN_TRANSACTIONS_DLQ}"), 3),
        ]
    }
}

/// Why topics could not be ensured.
#[derive(Debug, thiserror::Error)]
pub enum TopicError {
    #[error("cannot create the admin client: {0}")]
    Client(#[source] KafkaError),
    #[error("creating topics failed: {0}")]
    Request(#[source] KafkaError),
    #[error("creating topic {topic} failed: {code}")]
    Topic { topic: String, code: RDKafkaErrorCode },
    #[error("topic {topic} has {actual} partitions, {wanted} were asked for")]
    PartitionMismatch { topic: String, actual: i32, wanted: i32 },
    #[error("topics {0:?} did not appear in metadata within the timeout")]
    NotVisible(Vec<String>),
}

/// Creates every topic in `specs` that does not exist yet, then waits until
/// all are visible in metadata with the partition count asked for.
pub async fn ensure_topics(config: &KafkaConfig, specs: &[TopicSpec], timeout: Duration) -> Result<(), TopicError> {
    let admin: AdminClient<DefaultClientContext> = config.client().create().map_err(TopicError::Client)?;
    let new: Vec<NewTopic<'_>> = specs
        .iter()
        .map(|s| {
            let topic = NewTopic::new(&s.name, s.partitions, TopicReplication::Fixed(s.replication));
            s.configs.iter().fold(topic, |t, (k, v)| t.set(k, v))
        })
        .collect();
    // Both timeouts: the broker's for the operation, the client's for the request (its
    // default is a minute, e.g. while a broker refuses the client's credentials).
    let options = AdminOptions::new().operation_timeout(Some(timeout)).request_timeout(Some(timeout));
    for result in admin.create_topics(&new, &options).await.map_err(TopicError::Request)? {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((topic, code)) => return Err(TopicError::Topic { topic, code }),
        }
    }
    wait_visible(config, specs, timeout).await
}

async fn wait_visible(config: &KafkaConfig, specs: &[TopicSpec], timeout: Duration) -> Result<(), TopicError> {
    let consumer: BaseConsumer = config.client().create().map_err(TopicError::Client)?;
    let specs = specs.to_vec();
    // Metadata requests block; keep them off the async workers.
    tokio::task::spawn_blocking(move || poll_visible(&consumer, &specs, timeout))
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
}

fn poll_visible(consumer: &BaseConsumer, specs: &[TopicSpec], timeout: Duration) -> Result<(), TopicError> {
    let deadline = Instant::now() + timeout;
    loop {
        let mut missing = Vec::new();
        for spec in specs {
            let metadata = consumer.fetch_metadata(Some(&spec.name), Duration::from_secs(5));
            let partitions = metadata
                .ok()
                .and_then(|m| m.topics().first().filter(|t| t.error().is_none()).map(|t| t.partitions().len() as i32));
            match partitions {
                Some(n) if n == spec.partitions => {}
                Some(n) if n > 0 => {
                    return Err(TopicError::PartitionMismatch {
                        topic: spec.name.clone(),
                        actual: n,
                        wanted: spec.partitions,
                    });
                }
                _ => missing.push(spec.name.clone()),
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(TopicError::NotVisible(missing));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
