//! The rebuild's replay of the input topic into the staged state, through the
//! DEX handler itself: from each partition's start to its end, and again to
//! the new end when the live processors are ahead at the switch.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::Message;
use rdkafka::consumer::{BaseConsumer, Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::{Offset, TopicPartitionList};
use sluice_dex::DexHandler;
use sluice_kafka::KafkaConfig;
use sluice_runtime::{HandleError, Handler, Record};

use super::RebuildError;
use super::staged::Staged;
use super::start::Start;

/// Records handed to the handler at once (its own batch size).
const BATCH: usize = 512;
/// Quiet time after which a partition that reported its end is taken as still at it
/// (librdkafka reports an end once each time the consumer reaches it).
const QUIET: Duration = Duration::from_millis(200);
/// Quiet time after which a partition at its end is taken as there, however far its mark.
const QUIET_LONG: Duration = Duration::from_secs(1);
/// Attempts of a batch that failed for a dependency (Redis) before the rebuild gives up.
const ATTEMPTS: u32 = 20;

/// What a replay has read so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Replayed {
    /// Records handled.
    pub records: u64,
    /// Of them, records the handler refused as invalid (the processors dead-letter
    /// them; they change no state).
    pub invalid: u64,
}

/// An assigned, group-less `read_committed` consumer over the input topic.
pub struct Replay {
    consumer: StreamConsumer,
    /// Asks for the watermarks on a connection of its own: on the consumer's, a request
    /// waits behind the fetch the broker holds while the partitions are at their end.
    marks: BaseConsumer,
    topic: Arc<str>,
    /// Each partition's next offset to read (after the last record handed over).
    next: BTreeMap<i32, i64>,
    /// Partitions that reported their end and have had no record since.
    at_end: HashSet<i32>,
    /// Each partition's slot of the last chain transaction read (none read yet: absent).
    slots: BTreeMap<i32, u64>,
    pub replayed: Replayed,
}

impl std::fmt::Debug for Replay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replay").field("topic", &self.topic).field("replayed", &self.replayed).finish()
    }
}

impl Replay {
    /// Assigns every partition at its start.
    pub fn open(kafka: &KafkaConfig, topic: &str, starts: &[Start]) -> Result<Self, RebuildError> {
        let fail = |source| RebuildError::Kafka { topic: topic.to_string(), source };
        let consumer: StreamConsumer = kafka.reader(&format!("{topic}.rebuild")).create().map_err(fail)?;
        let mut tpl = TopicPartitionList::new();
        for start in starts {
            tpl.add_partition_offset(topic, start.partition, Offset::Offset(start.offset)).map_err(fail)?;
        }
        consumer.assign(&tpl).map_err(fail)?;
        let marks: BaseConsumer = kafka.reader(&format!("{topic}.rebuild-marks")).create().map_err(fail)?;
        Ok(Self {
            consumer,
            marks,
            topic: Arc::from(topic),
            next: starts.iter().map(|s| (s.partition, s.offset)).collect(),
            at_end: HashSet::new(),
            slots: BTreeMap::new(),
            replayed: Replayed::default(),
        })
    }

    /// Reads and applies until every partition has reached the end it had when this call
    /// began (its high watermark then), within `limit`. A partition is there when its next
    /// offset reaches that mark; when it reported its end during this call one short of it
    /// (a transaction's commit marker, never delivered), or did so before and nothing came
    /// from it for [`QUIET`]; or when it reported its end and nothing came for
    /// [`QUIET_LONG`] (records of aborted transactions between it and the mark).
    pub async fn catch_up(&mut self, handler: &DexHandler<Staged>, limit: Duration) -> Result<(), RebuildError> {
        let (began, deadline) = (Instant::now(), Instant::now() + limit);
        let marks = self.watermarks()?;
        let mut ended_now: HashSet<i32> = HashSet::new();
        let mut batch: Vec<Record> = Vec::with_capacity(BATCH);
        loop {
            let (quiet, long) = (began.elapsed() >= QUIET, began.elapsed() >= QUIET_LONG);
            let there = |p: &i32, next: &i64| {
                let mark = marks.get(p).copied().unwrap_or(0);
                let ended = ended_now.contains(p) || (quiet && self.at_end.contains(p));
                *next >= mark || (ended && *next + 1 >= mark) || (long && self.at_end.contains(p))
            };
            if batch.is_empty() && self.next.iter().all(|(p, n)| there(p, n)) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(RebuildError::Timeout {
                    what: format!(
                        "replaying {} to its end ({} of {} partitions there, {} records so far)",
                        self.topic,
                        self.next.iter().filter(|(p, n)| there(p, n)).count(),
                        self.next.len(),
                        self.replayed.records
                    ),
                });
            }
            let next = if batch.len() >= BATCH { None } else { self.next(&mut ended_now).await? };
            match next {
                Some(record) => batch.push(record),
                None if !batch.is_empty() => self.apply(handler, std::mem::take(&mut batch)).await?,
                None => {}
            }
        }
    }

    /// The lowest of the partitions' last slots read: the replay has read every record of
    /// the slots below it (each partition is in chain order). `None` before any.
    pub fn slots_read_below(&self) -> Option<u64> {
        self.slots.values().min().copied()
    }

    /// Each partition's high watermark, now.
    fn watermarks(&self) -> Result<BTreeMap<i32, i64>, RebuildError> {
        let timeout = Duration::from_secs(10);
        tokio::task::block_in_place(|| {
            self.next
                .keys()
                .map(|&p| {
                    let (_, high) = self
                        .marks
                        .fetch_watermarks(&self.topic, p, timeout)
                        .map_err(|e| RebuildError::Kafka { topic: self.topic.to_string(), source: e })?;
                    Ok((p, high))
                })
                .collect()
        })
    }

    /// The next record, or `None` when a partition reported its end or nothing came
    /// within a quarter of [`QUIET`].
    async fn next(&mut self, ended_now: &mut HashSet<i32>) -> Result<Option<Record>, RebuildError> {
        let message = match tokio::time::timeout(QUIET / 4, self.consumer.recv()).await {
            Err(_) => return Ok(None),
            Ok(Err(KafkaError::PartitionEOF(p))) => {
                ended_now.insert(p);
                self.at_end.insert(p);
                return Ok(None);
            }
            Ok(Err(e)) => return Err(RebuildError::Kafka { topic: self.topic.to_string(), source: e }),
            Ok(Ok(m)) => m,
        };
        // Its end moved on: it has to report it again.
        self.at_end.remove(&message.partition());
        ended_now.remove(&message.partition());
        self.next.insert(message.partition(), message.offset() + 1);
        if let Some(slot) = super::start::telling_slot(&message) {
            self.slots.insert(message.partition(), slot);
        }
        Ok(Some(Record::from_message(self.topic.clone(), &message)))
    }

    /// Hands `records` to the handler until none fails for a dependency (the apply is
    /// idempotent, so a batch is simply handled again).
    async fn apply(&mut self, handler: &DexHandler<Staged>, records: Vec<Record>) -> Result<(), RebuildError> {
        for attempt in 1..=ATTEMPTS {
            let results = handler.handle_batch(&records).await;
            let transient = results.iter().find_map(|r| match r {
                Err(e @ HandleError::Transient { .. }) => Some(e.to_string()),
                _ => None,
            });
            let Some(error) = transient else {
                self.replayed.records += records.len() as u64;
                self.replayed.invalid += results.iter().filter(|r| r.is_err()).count() as u64;
                return Ok(());
            };
            if attempt == ATTEMPTS {
                return Err(RebuildError::Handler(error));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        Ok(())
    }
}
