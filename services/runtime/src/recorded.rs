//! The state generation recorded with the group's committed offsets. Every
//! commit carries `generation=<id>` as its metadata: the store generation
//! (`sluice_coord::generation`) its records' effects were written to. Read
//! back at start, it tells a store that lost that state (restarted without
//! its data, another instance) from one that never had any: the sink then
//! refuses to write into it instead of rebuilding on a blank slate.
//!
//! Under the dead-letter-key policy a commit also carries its partition's
//! dead keys, `;dead=<...>` ([`DeadKeys::encode`]), which the partition's
//! next owner reads back ([`Committed`]) before it handles a record.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaResult;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use sluice_coord::generation::Expect;

use crate::config::RuntimeConfig;
use crate::partition::DeadKeys;

const METADATA_PREFIX: &str = "generation=";
const DEAD_PREFIX: &str = "dead=";

/// Sets every entry's commit metadata: `generation=<id>` when there is one,
/// and the partition's dead keys when it has any, joined by `;`.
pub(crate) fn stamp(tpl: &TopicPartitionList, generation: Option<&str>, book: &DeadBook) {
    let generation = generation.map(|g| format!("{METADATA_PREFIX}{g}"));
    for mut e in tpl.elements() {
        let dead = book.get(e.partition()).map(|d| format!("{DEAD_PREFIX}{d}"));
        let metadata = match (&generation, dead) {
            (Some(g), Some(d)) => format!("{g};{d}"),
            (Some(g), None) => g.clone(),
            (None, Some(d)) => d,
            (None, None) => continue,
        };
        e.set_metadata(&metadata);
    }
}

/// The part of commit metadata that starts with `prefix`, without it.
fn part<'a>(metadata: &'a str, prefix: &str) -> Option<&'a str> {
    metadata.split(';').find_map(|p| p.strip_prefix(prefix))
}

/// The dead keys each partition's worker recorded last, for the commits:
/// a worker records them before its position passes them, and a commit
/// reads them after the position, so a commit never names a position
/// without the dead keys below it. A worker of an older epoch of the
/// partition (revoked, still finishing) cannot overwrite a newer one's.
#[derive(Debug, Default)]
pub(crate) struct DeadBook {
    by_partition: Mutex<HashMap<i32, (u64, Arc<str>)>>,
}

impl DeadBook {
    pub(crate) fn record(&self, partition: i32, epoch: u64, encoded: String) {
        let mut book = self.by_partition.lock().unwrap_or_else(|e| e.into_inner());
        match book.get(&partition) {
            Some((newer, _)) if *newer > epoch => {}
            _ => {
                book.insert(partition, (epoch, Arc::from(encoded)));
            }
        }
    }

    fn get(&self, partition: i32) -> Option<Arc<str>> {
        let book = self.by_partition.lock().unwrap_or_else(|e| e.into_inner());
        book.get(&partition).map(|(_, d)| d.clone()).filter(|d| !d.is_empty())
    }
}

/// Reads a partition's committed offset and the dead keys its commit
/// recorded, for a new owner, as a consumer outside the group (one per
/// process, made only under the dead-letter-key policy).
pub(crate) struct Committed {
    consumer: BaseConsumer,
    topic: String,
}

impl Committed {
    pub(crate) fn new(config: &RuntimeConfig) -> KafkaResult<Self> {
        Ok(Self { consumer: config.consumer_client().create()?, topic: config.input_topic.clone() })
    }

    /// The dead keys a replay from the committed offset can still meet
    /// (none before the first commit). Metadata that does not read is
    /// logged and read as none: the keys it named are handled again.
    pub(crate) fn dead_keys(&self, partition: i32, timeout: Duration) -> KafkaResult<DeadKeys> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&self.topic, partition, Offset::Invalid)?;
        let committed = self.consumer.committed_offsets(tpl, timeout)?;
        let Some(e) = committed.elements().into_iter().next() else { return Ok(DeadKeys::default()) };
        let Some(text) = part(e.metadata(), DEAD_PREFIX) else { return Ok(DeadKeys::default()) };
        let mut dead = DeadKeys::decode(text).unwrap_or_else(|error| {
            tracing::error!(partition, %error, "Ignoring the dead keys of the committed offset");
            DeadKeys::default()
        });
        if let Offset::Offset(position) = e.offset() {
            dead.prune(position);
        }
        Ok(dead)
    }
}

/// The generations named by the group's committed offsets on the input
/// topic (none before the first commit, after an offset reset, or when the
/// topic does not exist yet). A consumer that never joins the group asks.
pub(crate) fn read(config: &RuntimeConfig, timeout: Duration) -> KafkaResult<BTreeSet<String>> {
    let consumer: BaseConsumer = config.consumer_client().create()?;
    let topic = config.input_topic.as_str();
    let metadata = consumer.fetch_metadata(Some(topic), timeout)?;
    let mut tpl = TopicPartitionList::new();
    for t in metadata.topics().iter().filter(|t| t.name() == topic && t.error().is_none()) {
        for p in t.partitions() {
            tpl.add_partition_offset(topic, p.id(), Offset::Invalid)?;
        }
    }
    if tpl.count() == 0 {
        return Ok(BTreeSet::new());
    }
    let committed = consumer.committed_offsets(tpl, timeout)?;
    Ok(committed.elements().iter().filter_map(|e| part(e.metadata(), METADATA_PREFIX)).map(String::from).collect())
}

/// What a store must carry, given the generations the commits record. Ids
/// begin with their creation time, so with several (partitions committed
/// against different stores, which only a reset or a mix-up makes) the
/// newest is the one expected, and the others are named in a warning.
pub(crate) fn expect(recorded: &BTreeSet<String>) -> Expect {
    let newest = recorded.iter().max_by_key(|id| {
        let millis = id.split('-').next().and_then(|t| u64::from_str_radix(t, 16).ok());
        (millis, (*id).clone())
    });
    match newest {
        None => Expect::Nothing,
        Some(id) => {
            if recorded.len() > 1 {
                tracing::warn!(
                    ?recorded,
                    expected = %id,
                    "The group's partitions were committed under different Redis generations; expecting the newest"
                );
            }
            Expect::Recorded(id.clone())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commits_carry_the_generation_and_their_partitions_dead_keys() {
        let book = DeadBook::default();
        book.record(1, 2, "6b@4-".into());
        book.record(1, 1, "stale@0-".into());
        book.record(2, 2, String::new());
        let mut tpl = TopicPartitionList::new();
        for p in 0..3 {
            tpl.add_partition_offset("in", p, Offset::Offset(9)).unwrap_or_default();
        }
        stamp(&tpl, Some("1a-b"), &book);
        let metadata: Vec<String> = tpl.elements().iter().map(|e| e.metadata().to_string()).collect();
        assert_eq!(metadata, ["generation=1a-b", "generation=1a-b;dead=6b@4-", "generation=1a-b"]);
        assert_eq!(part(&metadata[1], METADATA_PREFIX), Some("1a-b"));
        assert_eq!(part(&metadata[1], DEAD_PREFIX), Some("6b@4-"));
        stamp(&tpl, None, &book);
        assert_eq!(tpl.elements()[1].metadata(), "dead=6b@4-", "a stateless workload records its dead keys alone");
    }

    #[test]
    fn the_newest_generation_is_expected_and_none_means_nothing() {
        assert_eq!(expect(&BTreeSet::new()), Expect::Nothing);
        let ids: BTreeSet<String> = ["f0-aa", "1a0-01", "ff-zz"].into_iter().map(String::from).collect();
        assert_eq!(expect(&ids), Expect::Recorded("1a0-01".into()), "0x1a0 ms is the newest");
    }
}
