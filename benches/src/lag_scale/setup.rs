//! The fleet a lag poller watches: topics of many partitions, a few records
//! per partition with known timestamps, and groups that committed a distinct
//! offset on every partition of their topic (so no two group-partitions share
//! a record whose timestamp could be cached once). Removed at the end.

use std::time::Duration;

use anyhow::{Context, Result};
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};
use serde::Serialize;

use crate::live::Stack;

/// The shape of the fleet.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Shape {
    pub topics: usize,
    pub partitions: usize,
    pub groups_per_topic: usize,
    pub records_per_partition: i64,
}

impl Shape {
    pub fn groups(&self) -> usize {
        self.topics * self.groups_per_topic
    }

    pub fn group_partitions(&self) -> usize {
        self.groups() * self.partitions
    }
}

/// One group and what it committed (the same offset on every partition of its topic).
#[derive(Debug, Clone)]
pub struct Group {
    pub name: String,
    pub topic: String,
    pub offset: i64,
}

/// The fleet on the broker.
#[derive(Debug)]
pub struct Fleet {
    pub shape: Shape,
    /// The run's name stem: every topic and group starts with it.
    pub prefix: String,
    pub topics: Vec<String>,
    pub groups: Vec<Group>,
    /// The record at offset `o` has timestamp `t0_ms + o·1000`.
    pub t0_ms: i64,
}

impl Fleet {
    /// The names, offsets and timestamps of a fleet under `prefix` (nothing created yet).
    pub fn plan(shape: Shape, prefix: &str) -> Self {
        let topics: Vec<String> = (0..shape.topics).map(|t| format!("{prefix}-t{t:03}")).collect();
        // Group j of a topic commits j+1: every group lags, each at its own record.
        let groups = topics
            .iter()
            .flat_map(|topic| {
                (0..shape.groups_per_topic).map(move |j| Group {
                    name: format!("{topic}-g{j:02}"),
                    topic: topic.clone(),
                    offset: j as i64 + 1,
                })
            })
            .collect();
        let t0_ms = sluice_core::clock::now_ms() - 3_600_000;
        Self { shape, prefix: prefix.to_string(), topics, groups, t0_ms }
    }

    pub fn timestamp(&self, offset: i64) -> i64 {
        self.t0_ms + offset * 1000
    }

    /// The lag every group-partition has, summed.
    pub fn total_lag(&self) -> i64 {
        let per_partition: i64 = self.groups.iter().map(|g| self.shape.records_per_partition - g.offset).sum();
        per_partition * self.shape.partitions as i64
    }

    /// Creates the topics, produces the records, commits the groups' offsets.
    pub async fn create(&self, stack: &Stack) -> Result<()> {
        let p = self.shape.partitions as i32;
        let specs: Vec<(&str, i32)> = self.topics.iter().map(|t| (t.as_str(), p)).collect();
        stack.create_topics(&specs).await?;
        let producer: FutureProducer = stack.kafka.producer().create().context("producer")?;
        let payload = [b'x'; 100];
        for topic in &self.topics {
            let producer = &producer;
            let sends = (0..p).flat_map(|partition| {
                (0..self.shape.records_per_partition).map(move |o| async move {
                    let record = FutureRecord::<(), _>::to(topic)
                        .partition(partition)
                        .payload(&payload[..])
                        .timestamp(self.timestamp(o));
                    (o, producer.send(record, Duration::from_secs(60)).await)
                })
            });
            for (o, sent) in futures_util::future::join_all(sends).await {
                let delivery = sent.map_err(|(e, _)| e).context("producing")?;
                // The timestamps are known by offset: record i must land at offset i.
                anyhow::ensure!(
                    delivery.offset == o,
                    "{topic}-{}: record {o} landed at offset {}",
                    delivery.partition,
                    delivery.offset
                );
            }
        }
        self.commit(stack)
    }

    /// Every group commits its offset on all its topic's partitions, without joining.
    fn commit(&self, stack: &Stack) -> Result<()> {
        let chunks: Vec<&[Group]> = self.groups.chunks(self.groups.len().div_ceil(4).max(1)).collect();
        std::thread::scope(|scope| {
            let workers: Vec<_> = chunks
                .into_iter()
                .map(|chunk| {
                    scope.spawn(move || -> Result<()> {
                        for g in chunk {
                            let consumer: BaseConsumer =
                                stack.kafka.client().set("group.id", &g.name).create().context("consumer")?;
                            let mut tpl = TopicPartitionList::new();
                            for p in 0..self.shape.partitions as i32 {
                                tpl.add_partition_offset(&g.topic, p, Offset::Offset(g.offset))?;
                            }
                            consumer
                                .commit(&tpl, CommitMode::Sync)
                                .with_context(|| format!("committing {}", g.name))?;
                        }
                        Ok(())
                    })
                })
                .collect();
            workers.into_iter().try_for_each(|w| w.join().map_err(|_| anyhow::anyhow!("a commit thread panicked"))?)
        })
    }

    /// Deletes the groups, then the topics (best effort: what fails is returned, not raised).
    pub async fn delete(&self, stack: &Stack) -> Vec<String> {
        let admin: AdminClient<DefaultClientContext> = match stack.kafka.client().create() {
            Ok(a) => a,
            Err(e) => return vec![format!("admin client: {e}")],
        };
        let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(60)));
        let mut failed = Vec::new();
        let groups: Vec<&str> = self.groups.iter().map(|g| g.name.as_str()).collect();
        match admin.delete_groups(&groups, &options).await {
            Ok(results) => failed.extend(results.into_iter().filter_map(|r| r.err().map(|(g, e)| format!("{g}: {e}")))),
            Err(e) => failed.push(format!("deleting groups: {e}")),
        }
        let topics: Vec<&str> = self.topics.iter().map(String::as_str).collect();
        match admin.delete_topics(&topics, &options).await {
            Ok(results) => failed.extend(results.into_iter().filter_map(|r| r.err().map(|(t, e)| format!("{t}: {e}")))),
            Err(e) => failed.push(format!("deleting topics: {e}")),
        }
        failed
    }
}
