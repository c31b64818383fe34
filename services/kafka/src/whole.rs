//! A topic read whole, as a `read_committed` reader sees it: every partition from its start
//! to its end as of the read (the soak's check of the outputs, the operator's view of the
//! dead letters). Assigned, not subscribed: no consumer group joins and nothing is committed.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};

use crate::KafkaConfig;

/// One record, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub partition: i32,
    pub offset: i64,
    /// The record's timestamp (create or log-append time), if it has one.
    pub timestamp_ms: Option<i64>,
    pub key: Vec<u8>,
    pub payload: Vec<u8>,
    /// In the record's order; a header without a value has an empty one.
    pub headers: Vec<(String, Vec<u8>)>,
}

impl Record {
    /// The value of header `name` (the first, if repeated).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_slice())
    }

    /// Header `name` as text (lossy), if present.
    pub fn header_text(&self, name: &str) -> Option<String> {
        self.header(name).map(|v| String::from_utf8_lossy(v).into_owned())
    }
}

/// Why a topic could not be read whole.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("reading {topic}: {source}")]
    Kafka { topic: String, source: KafkaError },
    #[error("reading {topic}: the topic does not exist")]
    NoTopic { topic: String },
    #[error("reading {topic}: {ended} of {partitions} partitions read to the end within {limit:?}")]
    Timeout { topic: String, ended: usize, partitions: usize, limit: Duration },
}

/// Every committed record of `topic`, partition by partition in offset order, read by an
/// assigned `read_committed` consumer until each partition reports its end, within `limit`.
/// Blocking: call it off the async workers.
pub fn read_whole(kafka: &KafkaConfig, topic: &str, limit: Duration) -> Result<Vec<Record>, ReadError> {
    let fail = |source| ReadError::Kafka { topic: topic.to_string(), source };
    let consumer: BaseConsumer = kafka.reader(&format!("{topic}.reader")).create().map_err(fail)?;
    let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).map_err(fail)?;
    let partitions = metadata
        .topics()
        .first()
        .filter(|t| t.error().is_none() && !t.partitions().is_empty())
        .map(|t| t.partitions().len())
        .ok_or_else(|| ReadError::NoTopic { topic: topic.to_string() })?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions as i32 {
        tpl.add_partition_offset(topic, p, Offset::Beginning).map_err(fail)?;
    }
    consumer.assign(&tpl).map_err(fail)?;
    let deadline = Instant::now() + limit;
    let (mut ended, mut out) = (HashSet::new(), Vec::new());
    while ended.len() < partitions {
        if Instant::now() > deadline {
            return Err(ReadError::Timeout { topic: topic.to_string(), ended: ended.len(), partitions, limit });
        }
        match consumer.poll(Duration::from_millis(500)) {
            Some(Ok(m)) => out.push(owned(&m)),
            Some(Err(KafkaError::PartitionEOF(p))) => {
                ended.insert(p);
            }
            Some(Err(e)) => return Err(fail(e)),
            None => {}
        }
    }
    out.sort_by_key(|r| (r.partition, r.offset));
    Ok(out)
}

fn owned(m: &rdkafka::message::BorrowedMessage<'_>) -> Record {
    Record {
        partition: m.partition(),
        offset: m.offset(),
        timestamp_ms: m.timestamp().to_millis(),
        key: m.key().unwrap_or_default().to_vec(),
        payload: m.payload().unwrap_or_default().to_vec(),
        headers: m
            .headers()
            .map(|h| h.iter().map(|h| (h.key.to_string(), h.value.unwrap_or_default().to_vec())).collect())
            .unwrap_or_default(),
    }
}
