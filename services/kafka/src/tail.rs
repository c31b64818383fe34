//! The newest record of each partition of a topic, read once: a producer
//! that takes over from another compares what it sends with what is there.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};

use crate::KafkaConfig;

/// A partition's newest record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tail {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub payload: Option<Vec<u8>>,
}

/// What a topic holds at its end: how many partitions it has, and the
/// newest committed record of each one that holds any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tails {
    pub partitions: usize,
    /// By partition; a partition with no committed record has none.
    pub newest: Vec<Tail>,
}

/// Why the tails could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TailError {
    #[error("reading the tails of {topic}: {source}")]
    Kafka { topic: String, source: KafkaError },
    #[error("reading the tails of {topic}: not done within {timeout:?}")]
    Timeout { topic: String, timeout: Duration },
}

/// Records first read back from each partition's end; a window that holds
/// no committed record (only markers, or an aborted transaction's records,
/// which a `read_committed` reader skips) is widened eightfold until one is
/// found or the partition's start is reached.
const LOOK_BACK: i64 = 16;

/// The newest committed record of every non-empty partition of `topic`
/// (blocking; `timeout` bounds the whole read). No group: it assigns, reads
/// `read_committed` to each partition's end and commits nothing. A partition
/// that holds no committed record at all has no tail.
pub fn newest_records(config: &KafkaConfig, topic: &str, timeout: Duration) -> Result<Tails, TailError> {
    let kafka = |source| TailError::Kafka { topic: topic.to_string(), source };
    let consumer: BaseConsumer = config
        .client()
        .set("group.id", "sluice-tail-reader")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", "read_committed")
        .create()
        .map_err(kafka)?;
    let deadline = Instant::now() + timeout;
    let left = || deadline.saturating_duration_since(Instant::now());
    let metadata = consumer.fetch_metadata(Some(topic), left()).map_err(kafka)?;
    let partitions: Vec<i32> = metadata.topics().iter().flat_map(|t| t.partitions().iter().map(|p| p.id())).collect();
    let count = partitions.len();
    // Per partition still without a tail: (its start, its end).
    let mut bounds: HashMap<i32, (i64, i64)> = HashMap::new();
    for partition in partitions {
        let (low, high) = consumer.fetch_watermarks(topic, partition, left()).map_err(kafka)?;
        if high > low {
            bounds.insert(partition, (low, high));
        }
    }
    let mut done = Vec::new();
    let mut look_back = LOOK_BACK;
    while !bounds.is_empty() {
        let found = read_windows(&consumer, topic, &bounds, look_back, (deadline, timeout))?;
        for tail in found {
            bounds.remove(&tail.partition);
            done.push(tail);
        }
        // What is left read from its start holds nothing committed.
        bounds.retain(|_, (low, high)| *high - look_back > *low);
        look_back = look_back.saturating_mul(8);
    }
    done.sort_by_key(|t| t.partition);
    Ok(Tails { partitions: count, newest: done })
}

/// Reads the last `look_back` offsets of each partition in `bounds` to its
/// end; the newest record each holds, if any.
fn read_windows(
    consumer: &BaseConsumer,
    topic: &str,
    bounds: &HashMap<i32, (i64, i64)>,
    look_back: i64,
    (deadline, timeout): (Instant, Duration),
) -> Result<Vec<Tail>, TailError> {
    let kafka = |source| TailError::Kafka { topic: topic.to_string(), source };
    let mut assignment = TopicPartitionList::new();
    for (&partition, &(low, high)) in bounds {
        let from = high.saturating_sub(look_back).max(low);
        assignment.add_partition_offset(topic, partition, Offset::Offset(from)).map_err(kafka)?;
    }
    consumer.assign(&assignment).map_err(kafka)?;
    let mut reading: HashMap<i32, Option<Tail>> = bounds.keys().map(|p| (*p, None)).collect();
    let mut found = Vec::new();
    while !reading.is_empty() {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(TailError::Timeout { topic: topic.to_string(), timeout });
        }
        match consumer.poll(remaining.min(Duration::from_millis(100))) {
            Some(Ok(m)) => {
                if let Some(newest) = reading.get_mut(&m.partition()) {
                    *newest = Some(Tail {
                        partition: m.partition(),
                        offset: m.offset(),
                        key: m.key().map(<[u8]>::to_vec),
                        payload: m.payload().map(<[u8]>::to_vec),
                    });
                }
            }
            Some(Err(KafkaError::PartitionEOF(partition))) => {
                if let Some(newest) = reading.remove(&partition) {
                    found.extend(newest);
                }
            }
            Some(Err(e)) => return Err(kafka(e)),
            None => {}
        }
    }
    Ok(found)
}
