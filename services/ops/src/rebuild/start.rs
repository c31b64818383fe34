//! Where a rebuild's replay starts: in each partition of the input topic, the
//! first record of a slot after the point the chain's state was taken at.
//!
//! The ingest writes each partition in chain order, so a partition's slots
//! rise with its offsets and a binary search over offsets finds the first
//! record past the slot in about log₂(records) rounds, each reading one record
//! of every partition at once, whatever the topic's retention or size. The replay is idempotent (a swap at or below a pool's
//! last applied sequence changes nothing), so starting early costs only
//! time; starting late would lose swaps, which the check against the chain
//! at a slot every partition has read past catches. Copies redriven from the
//! dead-letter topic carry old slots among new ones and are not looked at.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};
use serde::Serialize;
use sluice_core::txview::TxView;
use sluice_kafka::KafkaConfig;
use sluice_kafka::topics::redriven;

use super::RebuildError;

/// One partition's replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Start {
    pub partition: i32,
    /// The first offset whose record is of a later slot (the log end when none is yet).
    pub offset: i64,
    /// The log's bounds when the search ran.
    pub log_start: i64,
    pub log_end: i64,
}

impl Start {
    /// Records from the start to the log end as it was.
    pub fn records(&self) -> i64 {
        self.log_end - self.offset
    }
}

/// A consumer that reads the record at a chosen offset of every partition at once.
struct Prober {
    consumer: BaseConsumer,
    topic: String,
    timeout: Duration,
}

/// One partition's search: the first offset past the slot lies in `[low, high)`.
#[derive(Debug, Clone, Copy)]
struct Range {
    low: i64,
    high: i64,
}

impl Range {
    fn mid(&self) -> i64 {
        self.low + (self.high - self.low) / 2
    }
}

impl Prober {
    fn kafka(&self, source: KafkaError) -> RebuildError {
        RebuildError::Kafka { topic: self.topic.clone(), source }
    }

    /// For each partition of `probes`, what reading it from the probe's offset found: the
    /// first record that tells (in a scan, the first whose slot is above `slot`), none
    /// before the probe's end, or the readable end (a `read_committed` reader stops at the
    /// last stable offset: an open transaction's records lie past it).
    fn read(&self, probes: &BTreeMap<i32, Probe>, slot: u64) -> Result<BTreeMap<i32, Found>, RebuildError> {
        let mut tpl = TopicPartitionList::new();
        for (&p, probe) in probes {
            tpl.add_partition_offset(&self.topic, p, Offset::Offset(probe.offset)).map_err(|e| self.kafka(e))?;
        }
        self.consumer.assign(&tpl).map_err(|e| self.kafka(e))?;
        let deadline = Instant::now() + self.timeout;
        let (mut found, mut last) = (BTreeMap::new(), BTreeMap::new());
        while found.len() < probes.len() {
            if Instant::now() > deadline {
                return Err(RebuildError::Timeout { what: format!("reading {} at {probes:?}", self.topic) });
            }
            let Some(message) = self.consumer.poll(Duration::from_millis(100)) else { continue };
            let (p, answer) = match message {
                Err(KafkaError::PartitionEOF(p)) => {
                    let next = last.get(&p).map(|o| o + 1).or(probes.get(&p).map(|probe| probe.offset));
                    (p, Found::End { next: next.unwrap_or_default() })
                }
                Err(e) => return Err(self.kafka(e)),
                Ok(m) => {
                    let Some(probe) = probes.get(&m.partition()) else { continue };
                    if m.offset() < probe.offset || found.contains_key(&m.partition()) {
                        continue;
                    }
                    if m.offset() >= probe.end {
                        (m.partition(), Found::Beyond)
                    } else {
                        last.insert(m.partition(), m.offset());
                        match telling_slot(&m) {
                            Some(s) if !probe.scan || s > slot => {
                                (m.partition(), Found::Record { offset: m.offset(), slot: s })
                            }
                            _ => continue,
                        }
                    }
                }
            };
            if probes.contains_key(&p) {
                found.entry(p).or_insert(answer);
            }
        }
        Ok(found)
    }

    /// Each partition's first offset in its range whose record's slot is above `slot`:
    /// one binary search per partition, every partition's probe read in one round, and a
    /// scan once a range is down to [`SCAN`] records (one round instead of a dozen).
    fn first_after(&self, slot: u64, mut ranges: BTreeMap<i32, Range>) -> Result<BTreeMap<i32, i64>, RebuildError> {
        loop {
            let probes: BTreeMap<i32, Probe> = ranges
                .iter()
                .filter(|(_, r)| r.low < r.high)
                .map(|(&p, r)| {
                    let scan = r.high - r.low <= SCAN;
                    (p, Probe { offset: if scan { r.low } else { r.mid() }, end: r.high, scan })
                })
                .collect();
            if probes.is_empty() {
                return Ok(ranges.into_iter().map(|(p, r)| (p, r.low)).collect());
            }
            for (p, found) in self.read(&probes, slot)? {
                let (Some(range), Some(probe)) = (ranges.get_mut(&p), probes.get(&p)) else { continue };
                match found {
                    Found::Record { offset, .. } if probe.scan => (range.low, range.high) = (offset, offset),
                    // Everything readable was at or below the slot: start after it.
                    Found::End { next } if probe.scan => (range.low, range.high) = (next, next),
                    Found::Beyond if probe.scan => range.low = range.high,
                    Found::Record { slot: s, .. } if s > slot => range.high = probe.offset,
                    Found::Record { offset, .. } => range.low = offset + 1,
                    Found::Beyond | Found::End { .. } => range.high = probe.offset,
                }
            }
        }
    }
}

/// What reading a partition from a probe found.
#[derive(Debug, Clone, Copy)]
enum Found {
    Record {
        offset: i64,
        slot: u64,
    },
    /// No record that tells before the probe's end.
    Beyond,
    /// The readable end, `next` being the offset after the last record read.
    End {
        next: i64,
    },
}

/// The slot of a record that tells where the chain was: a chain transaction the ingest
/// wrote. A copy sent back from the dead-letter topic does not (it carries an old slot
/// among newer ones), nor does a record the processors dead-letter.
pub(super) fn telling_slot(m: &rdkafka::message::BorrowedMessage<'_>) -> Option<u64> {
    if redriven(m) {
        return None;
    }
    TxView::decode(m.payload().unwrap_or_default()).ok().map(|tx| tx.slot)
}

/// Where one round reads a partition.
#[derive(Debug, Clone, Copy)]
struct Probe {
    offset: i64,
    end: i64,
    /// Read on from `offset` to the first record past the slot, rather than one record.
    scan: bool,
}

/// Ranges this small are scanned rather than halved (a few fetches of one partition).
const SCAN: i64 = 4_096;

/// Each partition's first offset past `slot`, in `topic`.
pub fn after_slot(
    kafka: &KafkaConfig,
    topic: &str,
    slot: u64,
    timeout: Duration,
) -> Result<BTreeMap<i32, Start>, RebuildError> {
    let fail = |source| RebuildError::Kafka { topic: topic.to_string(), source };
    let consumer: BaseConsumer =
        kafka.reader(&format!("{topic}.rebuild-probe")).set("fetch.wait.max.ms", "50").create().map_err(fail)?;
    let metadata = consumer.fetch_metadata(Some(topic), timeout).map_err(fail)?;
    let partitions = metadata
        .topics()
        .first()
        .filter(|t| t.error().is_none() && !t.partitions().is_empty())
        .map(|t| t.partitions().len() as i32)
        .ok_or_else(|| RebuildError::NoTopic { topic: topic.to_string() })?;
    let mut bounds = BTreeMap::new();
    for partition in 0..partitions {
        bounds.insert(partition, consumer.fetch_watermarks(topic, partition, timeout).map_err(fail)?);
    }
    let ranges = bounds.iter().map(|(&p, &(low, high))| (p, Range { low, high })).collect();
    let prober = Prober { consumer, topic: topic.to_string(), timeout };
    let firsts = prober.first_after(slot, ranges)?;
    Ok(bounds
        .into_iter()
        .map(|(partition, (log_start, log_end))| {
            (partition, Start { partition, offset: firsts[&partition], log_start, log_end })
        })
        .collect())
}
