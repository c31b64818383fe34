//! Dead letters sent back into the input topic, each once.
//!
//! A redrive writes, in one Kafka transaction per batch, the selected letters to the input
//! topic (key and payload as they came, in each key's original order, with headers naming
//! their origin) and one entry per letter to the ledger topic `<dlq>.redriven` (compacted,
//! keyed by the letter's place in the dead-letter topic). Both or neither become visible,
//! so a letter in the ledger was sent exactly once, and a second redrive of the same
//! selection finds every letter there and sends nothing. The transactional id is the dead
//! letter topic's: a redrive started while another runs fences it at the broker (its open
//! batch is aborted), and it reads the ledger only after that, so two redrives never both
//! send a letter.
//!
//! A redriven record that fails again is dead-lettered again by the processors, as a new
//! letter whose origin is the redriven copy; the ledger knows that copy, so a redrive
//! reports such letters as failed again and leaves them unless asked (`again`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use rdkafka::error::KafkaError;
use rdkafka::message::ToBytes;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::future_producer::OwnedDeliveryResult;
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer};
use serde::{Deserialize, Serialize};
use sluice_kafka::KafkaConfig;
use sluice_kafka::topics::REDRIVE_ORIGIN_HEADER;
use sluice_kafka::whole::{ReadError, read_whole};

use crate::letters::{Coordinates, DeadLetter};
use crate::select::Selection;

/// The ledger of what was redriven from `dlq`.
pub fn ledger_topic(dlq: &str) -> String {
    format!("{dlq}.redriven")
}

/// How many replicas `topic`'s first partition has (the ledger is kept as safe as the
/// letters it accounts for). Blocking.
pub fn replication(kafka: &KafkaConfig, topic: &str) -> Result<i32, RedriveError> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let fail = |source| RedriveError::Kafka { what: "reading the dead-letter topic's metadata", source };
    let consumer: BaseConsumer = kafka.client().create().map_err(fail)?;
    let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).map_err(fail)?;
    let replicas = metadata.topics().first().and_then(|t| t.partitions().first()).map(|p| p.replicas().len());
    Ok(replicas.map_or(1, |n| n.max(1) as i32))
}

/// One letter redriven: where it was, where its copy went, when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub origin: Coordinates,
    pub sent: Coordinates,
    pub at_ms: i64,
}

/// What the ledger holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ledger {
    /// Letters already redriven (their place in the dead-letter topic).
    redriven: HashSet<Coordinates>,
    /// Each copy sent, to the letter it came from.
    copies: HashMap<Coordinates, Coordinates>,
}

impl Ledger {
    pub fn from_entries(entries: impl IntoIterator<Item = Entry>) -> Self {
        let mut ledger = Self::default();
        for e in entries {
            ledger.redriven.insert(e.origin.clone());
            ledger.copies.insert(e.sent, e.origin);
        }
        ledger
    }

    /// The ledger of `dlq` as committed; empty if it does not exist yet.
    pub fn read(kafka: &KafkaConfig, dlq: &str, limit: Duration) -> Result<Self, RedriveError> {
        let topic = ledger_topic(dlq);
        let records = match read_whole(kafka, &topic, limit) {
            Err(ReadError::NoTopic { .. }) => return Ok(Self::default()),
            other => other?,
        };
        let entries = records.iter().map(|r| {
            serde_json::from_slice::<Entry>(&r.payload).map_err(|e| RedriveError::Ledger {
                topic: topic.clone(),
                offset: r.offset,
                source: e,
            })
        });
        Ok(Self::from_entries(entries.collect::<Result<Vec<_>, _>>()?))
    }

    pub fn len(&self) -> usize {
        self.redriven.len()
    }

    pub fn is_empty(&self) -> bool {
        self.redriven.is_empty()
    }
}

/// Why a redrive stopped.
#[derive(Debug, thiserror::Error)]
pub enum RedriveError {
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("the ledger {topic} holds an entry that is not one (offset {offset}): {source}")]
    Ledger { topic: String, offset: i64, source: serde_json::Error },
    #[error("creating the ledger topic: {0}")]
    Topic(#[from] sluice_kafka::topics::TopicError),
    #[error("{what}: {source}")]
    Kafka { what: &'static str, source: KafkaError },
    #[error("{what}: {source} (this batch was not sent: nothing of it is visible; the {sent} letters before it were)")]
    Batch { what: &'static str, source: KafkaError, sent: usize },
}

/// Which of the selected letters a redrive sends, and which it leaves.
#[derive(Debug, Clone, Default)]
pub struct Plan<'a> {
    /// In send order: each key's letters in their original order.
    pub send: Vec<&'a DeadLetter>,
    /// Selected, and redriven before (in the ledger).
    pub already: usize,
    /// Selected letters that are a redriven copy failing again (sent only when asked).
    pub failed_again: usize,
}

/// The plan for `letters` under `selection`, given what `ledger` says was redriven.
pub fn plan<'a>(letters: &'a [DeadLetter], selection: &Selection, ledger: &Ledger, again: bool) -> Plan<'a> {
    let mut p = Plan::default();
    for l in letters.iter().filter(|l| selection.matches(l)) {
        if ledger.redriven.contains(&l.at) {
            p.already += 1;
        } else if l.origin.as_ref().is_some_and(|o| ledger.copies.contains_key(o)) && !again {
            p.failed_again += 1;
        } else {
            p.send.push(l);
        }
    }
    p.send.sort_by_key(|l| l.order());
    p
}

/// What a redrive sent.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Sent {
    pub records: usize,
    pub transactions: usize,
    pub seconds: f64,
    /// By reason.
    pub reasons: BTreeMap<String, usize>,
}

/// The transactional writer of one dead-letter topic's redrives.
pub struct Redriver {
    producer: FutureProducer,
    dlq: String,
    timeout: Duration,
}

impl std::fmt::Debug for Redriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redriver").field("dlq", &self.dlq).finish()
    }
}

impl Redriver {
    /// Creates the ledger topic if needed (compacted, replicated as the dead-letter topic
    /// is) and fences any other redrive of `dlq`. Read the ledger after this.
    pub async fn open(kafka: &KafkaConfig, dlq: &str, replication: i32) -> Result<Self, RedriveError> {
        let ledger = sluice_kafka::TopicSpec { replication, ..sluice_kafka::TopicSpec::new(ledger_topic(dlq), 1) }
            .with_config("cleanup.policy", "compact");
        sluice_kafka::ensure_topics(kafka, &[ledger], Duration::from_secs(30)).await?;
        let timeout = Duration::from_secs(60);
        let producer: FutureProducer = kafka
            .producer()
            .set("transactional.id", format!("sluice-ops.redrive.{dlq}"))
            .set("transaction.timeout.ms", timeout.as_millis().to_string())
            .set("message.timeout.ms", timeout.as_millis().to_string())
            .create()
            .map_err(|source| RedriveError::Kafka { what: "creating the producer", source })?;
        producer
            .init_transactions(timeout)
            .map_err(|source| RedriveError::Kafka { what: "fencing earlier redrives", source })?;
        Ok(Self { producer, dlq: dlq.to_string(), timeout })
    }

    /// Sends `letters` to `input` in batches of `batch`, one transaction each.
    pub async fn send(&self, input: &str, letters: &[&DeadLetter], batch: usize) -> Result<Sent, RedriveError> {
        let started = Instant::now();
        let mut sent = Sent::default();
        for chunk in letters.chunks(batch.max(1)) {
            let done = sent.records;
            let failed = |what, source| RedriveError::Batch { what, source, sent: done };
            self.producer.begin_transaction().map_err(|source| failed("beginning a transaction", source))?;
            if let Err((what, source)) = self.batch(input, chunk).await {
                let _ = self.producer.abort_transaction(self.timeout);
                return Err(failed(what, source));
            }
            self.producer.commit_transaction(self.timeout).map_err(|source| {
                let _ = self.producer.abort_transaction(self.timeout);
                failed("committing", source)
            })?;
            sent.transactions += 1;
            sent.records += chunk.len();
            for l in chunk {
                *sent.reasons.entry(l.kind.clone()).or_default() += 1;
            }
        }
        sent.seconds = started.elapsed().as_secs_f64();
        Ok(sent)
    }

    /// One batch inside the open transaction: the copies, then their ledger entries.
    async fn batch(&self, input: &str, chunk: &[&DeadLetter]) -> Result<(), (&'static str, KafkaError)> {
        let mut copies = Vec::with_capacity(chunk.len());
        for l in chunk {
            let origin = format!("{}/{}/{}", l.at.topic, l.at.partition, l.at.offset);
            let mut headers = OwnedHeaders::new()
                .insert(Header { key: REDRIVE_ORIGIN_HEADER, value: Some(origin.as_bytes()) })
                .insert(Header { key: "sluice.redrive.reason", value: Some(l.kind.as_bytes()) });
            if let Some(o) = &l.origin {
                let original = format!("{}/{}/{}", o.topic, o.partition, o.offset);
                headers = headers.insert(Header { key: "sluice.redrive.original", value: Some(original.as_bytes()) });
            }
            let mut record =
                FutureRecord::to(input).key(l.key.as_slice()).payload(l.payload.as_slice()).headers(headers);
            // Back to the partition it came from, behind the key's records there (a processor
            // that dead-lettered the key lifts it there); else where the key hashes to.
            if let Some(o) = l.origin.as_ref().filter(|o| o.topic == input) {
                record = record.partition(o.partition);
            }
            copies.push(self.enqueue(record)?);
        }
        let ledger = ledger_topic(&self.dlq);
        let mut entries = Vec::with_capacity(chunk.len());
        for (l, copy) in chunk.iter().zip(copies) {
            let (partition, offset) = delivered(copy.await)?;
            let sent = Coordinates { topic: input.to_string(), partition, offset };
            let entry = Entry { origin: l.at.clone(), sent, at_ms: now_ms() };
            let key = format!("{}/{}", l.at.partition, l.at.offset);
            let payload = serde_json::to_vec(&entry).unwrap_or_default();
            entries.push(self.enqueue(FutureRecord::to(&ledger).key(key.as_bytes()).payload(payload.as_slice()))?);
        }
        for entry in entries {
            delivered(entry.await)?;
        }
        Ok(())
    }

    fn enqueue<K: ToBytes + ?Sized, P: ToBytes + ?Sized>(
        &self,
        record: FutureRecord<'_, K, P>,
    ) -> Result<DeliveryFuture, (&'static str, KafkaError)> {
        self.producer.send_result(record).map_err(|(source, _)| ("sending", source))
    }
}

fn delivered<E>(result: Result<OwnedDeliveryResult, E>) -> Result<(i32, i64), (&'static str, KafkaError)> {
    match result {
        Ok(Ok(d)) => Ok((d.partition, d.offset)),
        Ok(Err((source, _))) => Err(("delivering", source)),
        Err(_) => Err(("delivering", KafkaError::Canceled)),
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(topic: &str, partition: i32, offset: i64) -> Coordinates {
        Coordinates { topic: topic.into(), partition, offset }
    }

    fn letter(offset: i64, origin: Coordinates) -> DeadLetter {
        DeadLetter {
            at: at("dlq", 0, offset),
            timestamp_ms: Some(offset),
            key: b"k".to_vec(),
            payload: Vec::new(),
            kind: "decode".into(),
            message: String::new(),
            origin: Some(origin),
            group: None,
        }
    }

    #[test]
    fn sends_each_letter_once_in_original_order_and_leaves_copies_failing_again() {
        // Dead-lettered out of their original order (two processors), one redriven before,
        // one a redriven copy that failed again.
        let letters = vec![
            letter(0, at("in", 2, 40)),
            letter(1, at("in", 2, 10)),
            letter(2, at("in", 1, 99)),
            letter(3, at("in", 5, 7)),
            letter(4, at("in", 3, 500)),
        ];
        let ledger = Ledger::from_entries([Entry { origin: at("dlq", 0, 3), sent: at("in", 3, 500), at_ms: 0 }]);
        let p = plan(&letters, &Selection::default(), &ledger, false);
        let sent: Vec<i64> = p.send.iter().map(|l| l.at.offset).collect();
        assert_eq!(sent, vec![2, 1, 0], "by original partition and offset");
        assert_eq!((p.already, p.failed_again), (1, 1));
        let again = plan(&letters, &Selection::default(), &ledger, true);
        assert_eq!((again.send.len(), again.already, again.failed_again), (4, 1, 0));
        let everything = Ledger::from_entries(letters.iter().enumerate().map(|(i, l)| Entry {
            origin: l.at.clone(),
            sent: at("in", 9, i as i64),
            at_ms: 0,
        }));
        let second = plan(&letters, &Selection::default(), &everything, true);
        assert!(second.send.is_empty(), "a second redrive sends nothing");
        assert_eq!(second.already, 5);
    }
}
