//! The processors' committed offsets: shown, and moved to a time or an offset per partition.
//!
//! A reset keeps what the processors rely on in each commit: its metadata, `generation=<id>`,
//! the Redis state generation the committed records' effects were written to
//! (`sluice-runtime`'s `recorded.rs`). Without it a processor starting on a store that lost
//! its state could not tell, and would write on a blank slate. A partition that carried none
//! takes the group's newest. A reset while the group has members is refused unless forced:
//! a running member commits its own position over the reset at its next commit.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use serde::Serialize;
use sluice_kafka::KafkaConfig;

/// One partition's position.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Position {
    pub partition: i32,
    /// None: the group never committed on it.
    pub committed: Option<i64>,
    /// The commit's metadata (`generation=<id>` for Sluice's processors).
    pub metadata: String,
    pub log_start: i64,
    pub log_end: i64,
    /// Records between the commit and the log's end; none without a commit.
    pub lag: Option<i64>,
}

/// The group on its input topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupOffsets {
    pub group: String,
    pub topic: String,
    /// The coordinator's word (`Empty`, `Stable`, `PreparingRebalance`, `Dead`, …).
    pub state: String,
    pub members: usize,
    pub partitions: Vec<Position>,
}

/// Where a reset moves the group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The first record at or after this time (epoch ms); the log's end where none is.
    Time(i64),
    /// These offsets, by partition (clamped to the log).
    Offsets(BTreeMap<i32, i64>),
    Earliest,
    Latest,
}

/// One partition moved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Move {
    pub partition: i32,
    pub from: Option<i64>,
    pub to: i64,
    pub metadata: String,
    /// Records the group will consume again (> 0) or skip (< 0).
    pub records: i64,
}

/// Why the offsets could not be read or moved.
#[derive(Debug, thiserror::Error)]
pub enum OffsetsError {
    #[error("{what}: {source}")]
    Kafka { what: &'static str, source: KafkaError },
    #[error("the topic {0} does not exist")]
    NoTopic(String),
    #[error(
        "the group {group} has {members} members ({state}): a running processor would commit its own position over the reset. Stop the processors (scale them to 0), or pass --force"
    )]
    HasMembers { group: String, state: String, members: usize },
    #[error("partition {0} is not one of the topic's")]
    NoPartition(i32),
}

fn kafka_error(what: &'static str) -> impl FnOnce(KafkaError) -> OffsetsError {
    move |source| OffsetsError::Kafka { what, source }
}

/// A consumer in `group` that never joins it (it reads and commits offsets only).
fn client(kafka: &KafkaConfig, group: &str) -> Result<BaseConsumer, OffsetsError> {
    kafka
        .client()
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .map_err(kafka_error("creating the client"))
}

/// The group's committed offsets on `topic`, beside the log's bounds. Blocking.
pub fn show(kafka: &KafkaConfig, group: &str, topic: &str, timeout: Duration) -> Result<GroupOffsets, OffsetsError> {
    let consumer = client(kafka, group)?;
    let metadata = consumer.fetch_metadata(Some(topic), timeout).map_err(kafka_error("reading the topic"))?;
    let ids: Vec<i32> = metadata
        .topics()
        .first()
        .filter(|t| t.error().is_none())
        .map(|t| t.partitions().iter().map(|p| p.id()).collect())
        .unwrap_or_default();
    if ids.is_empty() {
        return Err(OffsetsError::NoTopic(topic.to_string()));
    }
    let mut tpl = TopicPartitionList::new();
    for &p in &ids {
        tpl.add_partition(topic, p);
    }
    let committed = consumer.committed_offsets(tpl, timeout).map_err(kafka_error("reading the commits"))?;
    let mut partitions = Vec::with_capacity(ids.len());
    for e in committed.elements() {
        let (log_start, log_end) = consumer
            .fetch_watermarks(topic, e.partition(), timeout)
            .map_err(kafka_error("reading the log's bounds"))?;
        let committed = match e.offset() {
            Offset::Offset(o) => Some(o),
            _ => None,
        };
        let lag = committed.map(|c| (log_end - c.max(log_start)).max(0));
        partitions.push(Position {
            partition: e.partition(),
            committed,
            metadata: e.metadata().to_string(),
            log_start,
            log_end,
            lag,
        });
    }
    partitions.sort_by_key(|p| p.partition);
    let groups = consumer.fetch_group_list(Some(group), timeout).map_err(kafka_error("describing the group"))?;
    let described = groups.groups().iter().find(|g| g.name() == group);
    Ok(GroupOffsets {
        group: group.to_string(),
        topic: topic.to_string(),
        state: described.map_or_else(|| "unknown".to_string(), |g| g.state().to_string()),
        members: described.map_or(0, |g| g.members().len()),
        partitions,
    })
}

/// The moves that take `now` to `target`; `times` resolves a time per partition (the first
/// offset at or after it, None past the log's end).
pub fn plan(
    now: &GroupOffsets,
    target: &Target,
    times: impl Fn(i32) -> Option<i64>,
) -> Result<Vec<Move>, OffsetsError> {
    if let Target::Offsets(wanted) = target
        && let Some(p) = wanted.keys().find(|p| !now.partitions.iter().any(|x| x.partition == **p))
    {
        return Err(OffsetsError::NoPartition(*p));
    }
    let newest = newest_generation(now);
    let mut moves = Vec::new();
    for p in &now.partitions {
        let to = match target {
            Target::Earliest => p.log_start,
            Target::Latest => p.log_end,
            Target::Time(_) => times(p.partition).unwrap_or(p.log_end),
            Target::Offsets(wanted) => match wanted.get(&p.partition) {
                Some(o) => (*o).clamp(p.log_start, p.log_end),
                None => continue,
            },
        };
        let metadata = if p.metadata.is_empty() { newest.clone() } else { p.metadata.clone() };
        let records = p.committed.unwrap_or(p.log_start).max(p.log_start) - to;
        moves.push(Move { partition: p.partition, from: p.committed, to, metadata, records });
    }
    Ok(moves)
}

/// The state generation the group's commits record (the newest), if any.
pub fn recorded_generation(now: &GroupOffsets) -> Option<String> {
    newest_generation(now).strip_prefix("generation=").map(String::from)
}

/// The newest `generation=` part of the group's commits' metadata (ids begin with their
/// creation time in hex, as the runtime reads them), or none; never another partition's
/// dead keys (`;dead=`).
fn newest_generation(now: &GroupOffsets) -> String {
    let created = |m: &str| {
        let id = m.strip_prefix("generation=")?;
        u64::from_str_radix(id.split('-').next()?, 16).ok()
    };
    now.partitions
        .iter()
        .map(|p| p.metadata.split(';').next().unwrap_or_default())
        .filter(|m| created(m).is_some())
        .max_by_key(|m| (created(m), m.to_string()))
        .unwrap_or_default()
        .to_string()
}

/// The first offset at or after `at_ms` of each partition of `topic` (None: past the end).
pub fn offsets_at(
    kafka: &KafkaConfig,
    group: &str,
    topic: &str,
    partitions: &[i32],
    at_ms: i64,
    timeout: Duration,
) -> Result<BTreeMap<i32, Option<i64>>, OffsetsError> {
    let consumer = client(kafka, group)?;
    let mut tpl = TopicPartitionList::new();
    for &p in partitions {
        tpl.add_partition_offset(topic, p, Offset::Offset(at_ms)).map_err(kafka_error("asking for a time"))?;
    }
    let found = consumer.offsets_for_times(tpl, timeout).map_err(kafka_error("finding offsets by time"))?;
    Ok(found
        .elements()
        .iter()
        .map(|e| (e.partition(), if let Offset::Offset(o) = e.offset() { Some(o) } else { None }))
        .collect())
}

/// Commits `moves` for `group`, each with its metadata; refuses while the group has
/// members unless `force`. Blocking.
pub fn apply(
    kafka: &KafkaConfig,
    now: &GroupOffsets,
    moves: &[Move],
    force: bool,
    timeout: Duration,
) -> Result<(), OffsetsError> {
    let current = show(kafka, &now.group, &now.topic, timeout)?;
    if current.members > 0 && !force {
        return Err(OffsetsError::HasMembers { group: current.group, state: current.state, members: current.members });
    }
    let consumer = client(kafka, &now.group)?;
    let mut tpl = TopicPartitionList::new();
    for m in moves {
        tpl.add_partition_offset(&now.topic, m.partition, Offset::Offset(m.to))
            .map_err(kafka_error("setting an offset"))?;
    }
    for (mut e, m) in tpl.elements().into_iter().zip(moves) {
        e.set_metadata(&m.metadata);
    }
    consumer.commit(&tpl, CommitMode::Sync).map_err(kafka_error("committing the new offsets"))
}

/// What the processors will do at the new position, in a line per direction.
pub fn consequences(moves: &[Move]) -> Vec<String> {
    let again: i64 = moves.iter().map(|m| m.records.max(0)).sum();
    let skipped: i64 = moves.iter().map(|m| (-m.records).max(0)).sum();
    let mut out = Vec::new();
    if again > 0 {
        out.push(format!(
            "{again} records will be consumed again: a pool that already applied a swap skips it (stale_swaps_total) and \
             publishes it again to dex.swaps (at-least-once there; each Swap carries its sequence), so pool state is unchanged"
        ));
    }
    if skipped > 0 {
        out.push(format!(
            "{skipped} records will be skipped: their swaps are never applied, so those pools' state falls behind the chain \
             until the scheduler's pool-reconcile job corrects it; their outputs are never published"
        ));
    }
    if out.is_empty() {
        out.push("no partition moves".to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(parts: &[(i32, Option<i64>, &str)]) -> GroupOffsets {
        GroupOffsets {
            group: "g".into(),
            topic: "t".into(),
            state: "Empty".into(),
            members: 0,
            partitions: parts
                .iter()
                .map(|&(partition, committed, metadata)| Position {
                    partition,
                    committed,
                    metadata: metadata.into(),
                    log_start: 10,
                    log_end: 100,
                    lag: committed.map(|c| 100 - c),
                })
                .collect(),
        }
    }

    #[test]
    fn a_reset_keeps_each_partitions_generation_and_fills_a_missing_one_with_the_newest() {
        let now =
            group(&[(0, Some(90), "generation=18f-a"), (1, None, ""), (2, Some(50), "generation=190-b;dead=61@3-")]);
        let moves = plan(&now, &Target::Time(5), |p| if p == 0 { Some(40) } else { None }).expect("plan");
        let got: Vec<(i32, i64, &str, i64)> =
            moves.iter().map(|m| (m.partition, m.to, m.metadata.as_str(), m.records)).collect();
        assert_eq!(
            got,
            vec![
                (0, 40, "generation=18f-a", 50),
                (1, 100, "generation=190-b", -90),
                (2, 100, "generation=190-b;dead=61@3-", -50)
            ],
            "each keeps its own dead keys; the one filled in gets none of another's"
        );
        let text = consequences(&moves).join("\n");
        assert!(
            text.contains("50 records will be consumed again") && text.contains("140 records will be skipped"),
            "{text}"
        );
    }

    #[test]
    fn offsets_are_clamped_to_the_log_and_an_unknown_partition_is_refused() {
        let now = group(&[(0, Some(90), "generation=1-a"), (1, Some(90), "generation=1-a")]);
        let wanted = Target::Offsets([(0, 5), (1, 500)].into_iter().collect());
        let moves = plan(&now, &wanted, |_| None).expect("plan");
        assert_eq!(moves.iter().map(|m| m.to).collect::<Vec<_>>(), vec![10, 100]);
        let earliest = plan(&now, &Target::Earliest, |_| None).expect("plan");
        assert!(earliest.iter().all(|m| m.to == 10 && m.records == 80));
        let bad = plan(&now, &Target::Offsets([(7, 1)].into_iter().collect()), |_| None);
        assert!(matches!(bad, Err(OffsetsError::NoPartition(7))));
    }
}
