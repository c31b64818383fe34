//! What sluice-lag's integration tests share: a sluice-lag process watching
//! the test's groups, its picture read from `/groups/{group}`, records
//! produced with known timestamps, offsets committed by the test, and Kafka's
//! own `ConsumerGroupCommand` from the broker's jars.

#![allow(dead_code)]

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering::SeqCst};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};
use sluice_lag::picture::GroupPicture;
use sluice_service::process::{Spawned, http_get, wait_ready};
use sluice_testkit::free_port;

pub const POLL_MS: u64 = 500;

/// A sluice-lag process.
pub struct Lag {
    pub port: u16,
    pub process: Spawned,
}

impl Lag {
    /// Watches `groups` (none: `GROUPS` left unset, so every group) with `env` on top
    /// (names without `SLUICE_LAG_`).
    pub async fn start(name: &str, groups: &[&str], env: &[(&str, &str)]) -> Self {
        let port = free_port();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice-lag"));
        cmd.env_remove("SLUICE_LAG_GROUPS").env_remove("SLUICE_LAG_GROUPS_REGEX");
        if !groups.is_empty() {
            cmd.env("SLUICE_LAG_GROUPS", groups.join(","));
        }
        cmd.env("SLUICE_LOG_FORMAT", "plain")
            .env("SLUICE_LAG_BROKERS", sluice_testkit::kafka().brokers)
            .env("SLUICE_LAG_ADMIN_LISTEN", format!("127.0.0.1:{port}"))
            .env("SLUICE_LAG_POLL_INTERVAL_MS", POLL_MS.to_string())
            .env("SLUICE_LAG_RATE_WINDOW_MS", "3000")
            .env("SLUICE_LAG_REQUEST_TIMEOUT_MS", "2000");
        for (k, v) in env {
            cmd.env(format!("SLUICE_LAG_{k}"), v);
        }
        let log = std::env::temp_dir().join(format!("{name}-lag.log"));
        let process = Spawned::spawn(&mut cmd, log).expect("starting sluice-lag");
        let lag = Self { port, process };
        assert!(wait_ready(port, Duration::from_secs(30)).await, "sluice-lag not ready:\n{}", lag.process.log_tail(30));
        lag
    }

    pub fn group(&self, group: &str) -> Option<GroupPicture> {
        let (code, body) = http_get(self.port, &format!("/groups/{group}"))?;
        (code == 200).then(|| serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}")))
    }

    /// Waits until `group`'s picture satisfies `pred`; the picture.
    pub async fn until(
        &self,
        group: &str,
        limit: Duration,
        what: &str,
        pred: impl Fn(&GroupPicture) -> bool,
    ) -> GroupPicture {
        let deadline = Instant::now() + limit;
        loop {
            let picture = self.group(group);
            if let Some(p) = picture.as_ref().filter(|p| pred(p)) {
                return p.clone();
            }
            assert!(
                Instant::now() < deadline,
                "{group}: not {what} within {limit:?}: {picture:#?}\n{}",
                self.process.log_tail(20)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub fn metrics(&self) -> String {
        http_get(self.port, "/metrics").map(|(_, b)| b).unwrap_or_default()
    }
}

/// A topic of the test's own.
pub async fn topic(name: impl AsRef<str>, partitions: i32) -> String {
    let topic = sluice_testkit::unique(name.as_ref());
    let spec = sluice_kafka::topics::TopicSpec::new(&topic, partitions);
    sluice_kafka::topics::ensure_topics(&sluice_testkit::kafka(), &[spec], Duration::from_secs(30))
        .await
        .expect("topic");
    topic
}

/// Produces `count` records to `partition`, record `i` with `stamp(i)`.
pub async fn produce(topic: &str, partition: i32, count: i64, stamp: impl Fn(i64) -> i64) {
    let producer: FutureProducer = sluice_testkit::kafka().producer().create().expect("producer");
    for i in 0..count {
        let record = FutureRecord::to(topic).partition(partition).key("k").payload("v").timestamp(stamp(i));
        producer.send(record, Duration::from_secs(10)).await.expect("sent");
    }
}

/// Commits `offsets` (partition, offset) for `group` without joining it.
pub fn commit(group: &str, topic: &str, offsets: &[(i32, i64)]) {
    let consumer: BaseConsumer = sluice_testkit::kafka().client().set("group.id", group).create().expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for (p, o) in offsets {
        tpl.add_partition_offset(topic, *p, Offset::Offset(*o)).expect("offset");
    }
    consumer.commit(&tpl, CommitMode::Sync).expect("commit");
}

/// One row of `kafka-consumer-groups --describe`: (partition, current, end, lag).
pub type Row = (i32, Option<i64>, i64, Option<i64>);

/// Kafka's own ConsumerGroupCommand, from the broker's jars.
pub fn kafka_describe(group: &str, topic: &str) -> Vec<Row> {
    let libs = format!("{}/.cache/sluice/kafka-4.1.1/libs/*", std::env::var("HOME").unwrap_or_default());
    let out = Command::new("java")
        .args(["-Xmx256m", "-cp", &libs, "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"])
        .args(["--bootstrap-server", &sluice_testkit::kafka().brokers, "--describe", "--group", group])
        .output()
        .expect("running ConsumerGroupCommand");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut rows: Vec<Row> = text
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            (f.len() >= 6 && f[1] == topic).then(|| {
                let num = |s: &str| s.parse::<i64>().ok();
                (f[2].parse().expect("partition"), num(f[3]), f[4].parse().expect("end"), num(f[5]))
            })
        })
        .collect();
    rows.sort();
    assert!(
        !rows.is_empty(),
        "ConsumerGroupCommand printed nothing for {group}:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    rows
}

/// The same rows from sluice-lag's picture.
pub fn rows(picture: &GroupPicture, topic: &str) -> Vec<Row> {
    let mut rows: Vec<Row> = picture
        .partitions
        .iter()
        .filter(|p| p.topic == topic)
        .map(|p| {
            let committed = match p.lag {
                Some(sluice_lag::model::lag::Lag::Behind { committed, .. }) => Some(committed),
                _ => None,
            };
            (p.partition, committed, p.log.map_or(-1, |l| l.end), p.lag.and_then(|l| l.records()))
        })
        .collect();
    rows.sort();
    rows
}

/// The same rows as `sluice-lag describe --group G` prints them (the real
/// binary asking the running one), or its exit status and stderr.
pub fn cli_describe(port: u16, group: &str, topic: &str) -> Result<Vec<Row>, String> {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice-lag"))
        .args(["describe", "--group", group, "--addr", &format!("127.0.0.1:{port}")])
        .output()
        .expect("running sluice-lag describe");
    if !out.status.success() {
        return Err(format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr)));
    }
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut rows: Vec<Row> = text
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            (f.len() >= 5 && f[0] == topic).then(|| {
                let num = |s: &str| s.parse::<i64>().ok();
                (f[1].parse().expect("partition"), num(f[2]), f[3].parse().expect("end"), num(f[4]))
            })
        })
        .collect();
    rows.sort();
    Ok(rows)
}

/// A member of `group` that owns `topic`'s partition 0, polls, and commits only when
/// told to (its own thread).
pub struct Member {
    stop: Arc<AtomicBool>,
    commit_to: Arc<AtomicI64>,
    committed: Arc<AtomicI64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Member {
    pub fn join(group: &str, topic: &str) -> Self {
        let consumer: BaseConsumer = sluice_testkit::kafka()
            .client()
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .create()
            .expect("consumer");
        consumer.subscribe(&[topic]).expect("subscribe");
        let stop = Arc::new(AtomicBool::new(false));
        let commit_to = Arc::new(AtomicI64::new(-1));
        let committed = Arc::new(AtomicI64::new(-1));
        let (s, c, done, topic) = (stop.clone(), commit_to.clone(), committed.clone(), topic.to_string());
        let thread = std::thread::spawn(move || {
            while !s.load(SeqCst) {
                let _ = consumer.poll(Duration::from_millis(100));
                let assigned = consumer.assignment().map(|a| a.count() > 0).unwrap_or(false);
                let to = c.swap(-1, SeqCst);
                if to < 0 {
                    continue;
                }
                let mut tpl = TopicPartitionList::new();
                tpl.add_partition_offset(&topic, 0, Offset::Offset(to)).expect("offset");
                // Only as the owner; a commit while the group rebalances fails (the classic
                // protocol's REBALANCE_IN_PROGRESS): try again after the next poll.
                if assigned && consumer.commit(&tpl, CommitMode::Sync).is_ok() {
                    done.store(to, SeqCst);
                } else {
                    let _ = c.compare_exchange(-1, to, SeqCst, SeqCst);
                }
            }
        });
        Self { stop, commit_to, committed, thread: Some(thread) }
    }

    pub fn commit(&self, offset: i64) {
        self.commit_to.store(offset, SeqCst);
    }

    /// Waits until the member owns the partition and has committed `offset`.
    pub fn wait_committed(&self, offset: i64, limit: Duration) {
        let deadline = Instant::now() + limit;
        while self.committed.load(SeqCst) != offset {
            assert!(Instant::now() < deadline, "the member did not commit {offset} within {limit:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.stop.store(true, SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
