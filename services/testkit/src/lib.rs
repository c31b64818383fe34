//! Helpers for integration tests that run against the real local stack.
//!
//! The stack (a real Kafka broker and a real Redis) is started by
//! `deploy/local/test.sh`, which exports where it is. A test that needs it
//! and finds it missing fails with a message saying how to start it: it
//! never passes by skipping.

#![forbid(unsafe_code)]

pub mod process;

pub use process::{free_port, http_get, metric};

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use rdkafka::Message;
use rdkafka::consumer::{Consumer, StreamConsumer};
use sluice_kafka::KafkaConfig;

const HOW: &str = "start the stack with `deploy/local/test.sh` (runs the whole suite), or \
     `eval \"$(deploy/local/stack.sh env)\"` after `deploy/local/stack.sh up`";

fn required_env(name: &str) -> String {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => v,
        _ => panic!("{name} is not set: this test needs the real local stack; {HOW}"),
    }
}

/// Kafka of the running test stack (`SLUICE_KAFKA_BROKERS`).
pub fn kafka() -> KafkaConfig {
    KafkaConfig::new(required_env("SLUICE_KAFKA_BROKERS"))
}

/// The test stack's SASL_SSL listener: brokers, the CA file clients trust, and its SCRAM
/// user and password (`SLUICE_KAFKA_SECURE_*`, exported by `stack.sh env`).
pub struct SecureKafka {
    pub brokers: String,
    pub ca: String,
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for SecureKafka {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecureKafka").field("brokers", &self.brokers).field("ca", &self.ca).finish_non_exhaustive()
    }
}

pub fn secure_kafka() -> SecureKafka {
    SecureKafka {
        brokers: required_env("SLUICE_KAFKA_SECURE_BROKERS"),
        ca: required_env("SLUICE_KAFKA_SECURE_CA"),
        username: required_env("SLUICE_KAFKA_SECURE_USERNAME"),
        password: required_env("SLUICE_KAFKA_SECURE_PASSWORD"),
    }
}

/// Redis URL of the running test stack (`SLUICE_REDIS_URL`).
pub fn redis_url() -> String {
    required_env("SLUICE_REDIS_URL")
}

/// The test stack's Redis TLS port: its URL (`rediss://`), the PEM files of the stack's CA
/// and of a client certificate it signed (the port requires one), and the ACL user
/// (`SLUICE_REDIS_TLS_*`, `SLUICE_REDIS_ACL_*`, exported by `stack.sh env`).
pub struct SecureRedis {
    pub url: String,
    pub ca: String,
    pub cert: String,
    pub key: String,
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for SecureRedis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecureRedis").field("url", &self.url).field("ca", &self.ca).finish_non_exhaustive()
    }
}

impl SecureRedis {
    /// The variables a service reads for it, after the service's prefix: `REDIS_URL`,
    /// `REDIS_USERNAME`, `REDIS_PASSWORD` and the three `REDIS_TLS_*_FILE`s.
    pub fn settings(&self) -> Vec<(&'static str, String)> {
        vec![
            ("REDIS_URL", self.url.clone()),
            ("REDIS_USERNAME", self.username.clone()),
            ("REDIS_PASSWORD", self.password.clone()),
            ("REDIS_TLS_CA_FILE", self.ca.clone()),
            ("REDIS_TLS_CERT_FILE", self.cert.clone()),
            ("REDIS_TLS_KEY_FILE", self.key.clone()),
        ]
    }
}

pub fn secure_redis() -> SecureRedis {
    let dir = required_env("SLUICE_REDIS_TLS_DIR");
    SecureRedis {
        url: required_env("SLUICE_REDIS_TLS_URL"),
        ca: format!("{dir}/ca.crt"),
        cert: format!("{dir}/client.crt"),
        key: format!("{dir}/client.key"),
        username: required_env("SLUICE_REDIS_ACL_USERNAME"),
        password: required_env("SLUICE_REDIS_ACL_PASSWORD"),
    }
}

/// A name no other test (or test run) uses: topics, groups, Redis keys.
pub fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    format!("{prefix}-{}-{nanos:09}-{}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// The repository root (for scripts under `deploy/`).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A consumed record, owned.
#[derive(Debug, Clone)]
pub struct Record {
    pub key: Vec<u8>,
    pub payload: Vec<u8>,
    pub partition: i32,
    pub offset: i64,
    pub headers: HashMap<String, Vec<u8>>,
}

/// Reads `topic` from the beginning with a fresh group until `expected`
/// records arrived or `timeout` passed; returns what it read.
pub async fn consume(kafka: &KafkaConfig, topic: &str, expected: usize, timeout: Duration) -> Vec<Record> {
    let consumer: StreamConsumer = kafka
        .client()
        .set("group.id", unique("testkit"))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .expect("creating a test consumer");
    consumer.subscribe(&[topic]).expect("subscribing");
    let deadline = Instant::now() + timeout;
    let mut out = Vec::with_capacity(expected);
    while out.len() < expected {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match tokio::time::timeout(left, consumer.recv()).await {
            Ok(Ok(m)) => out.push(owned(&m)),
            Ok(Err(e)) => panic!("consuming {topic}: {e}"),
            Err(_) => break,
        }
    }
    out
}

/// Reads all of `topic` (`partitions` of them) as a `read_committed`
/// reader sees it, to the end of every partition: what committed
/// transactions (and non-transactional producers) wrote, nothing of an
/// aborted one. Panics if the end is not reached within `timeout` (an open
/// transaction holds it back).
pub async fn consume_committed(kafka: &KafkaConfig, topic: &str, partitions: i32, timeout: Duration) -> Vec<Record> {
    use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
    let consumer: StreamConsumer = kafka
        .client()
        .set("group.id", unique("testkit"))
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .set("enable.auto.commit", "false")
        .create()
        .expect("creating a test consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning).expect("a partition");
    }
    consumer.assign(&tpl).expect("assigning");
    let deadline = Instant::now() + timeout;
    let mut ended = std::collections::HashSet::new();
    let mut out = Vec::new();
    while ended.len() < partitions as usize {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, consumer.recv()).await {
            Ok(Ok(m)) => out.push(owned(&m)),
            Ok(Err(rdkafka::error::KafkaError::PartitionEOF(p))) => {
                ended.insert(p);
            }
            Ok(Err(e)) => panic!("consuming {topic}: {e}"),
            Err(_) => panic!("{topic}: {} of {partitions} partitions read to the end in {timeout:?}", ended.len()),
        }
    }
    out
}

fn owned(m: &rdkafka::message::BorrowedMessage<'_>) -> Record {
    use rdkafka::message::Headers;
    Record {
        key: m.key().unwrap_or_default().to_vec(),
        payload: m.payload().unwrap_or_default().to_vec(),
        partition: m.partition(),
        offset: m.offset(),
        headers: m
            .headers()
            .map(|h| h.iter().map(|h| (h.key.to_string(), h.value.unwrap_or_default().to_vec())).collect())
            .unwrap_or_default(),
    }
}
