//! The state generation recorded with the group's committed offsets. Every
//! commit carries `generation=<id>` as its metadata: the store generation
//! (`sluice_coord::generation`) its records' effects were written to. Read
//! back at start, it tells a store that lost that state (restarted without
//! its data, another instance) from one that never had any: the sink then
//! refuses to write into it instead of rebuilding on a blank slate.

use std::collections::BTreeSet;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaResult;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use sluice_coord::generation::Expect;

use crate::config::RuntimeConfig;

const METADATA_PREFIX: &str = "generation=";

/// Sets every entry's commit metadata to `generation`.
pub(crate) fn stamp(tpl: &TopicPartitionList, generation: &str) {
    let metadata = format!("{METADATA_PREFIX}{generation}");
    for mut e in tpl.elements() {
        e.set_metadata(&metadata);
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
    Ok(committed
        .elements()
        .iter()
        .filter_map(|e| e.metadata().strip_prefix(METADATA_PREFIX))
        .map(String::from)
        .collect())
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
    fn the_newest_generation_is_expected_and_none_means_nothing() {
        assert_eq!(expect(&BTreeSet::new()), Expect::Nothing);
        let ids: BTreeSet<String> = ["f0-aa", "1a0-01", "ff-zz"].into_iter().map(String::from).collect();
        assert_eq!(expect(&ids), Expect::Recorded("1a0-01".into()), "0x1a0 ms is the newest");
    }
}
