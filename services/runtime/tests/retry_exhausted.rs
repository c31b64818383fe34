//! What follows a record whose retries ran out, under both policies a
//! workload can choose, on the real broker (the test stack):
//! - **dead-letter-key**: the record and its key's later records of the
//!   partition go to the dead-letter topic in order, unhandled, while the
//!   partition's other keys and its committed offset move on; the partition's
//!   next owner (a restart) goes on dead-lettering the key from the commit's
//!   metadata, even with the dependency back; `sluice-ops dlq redrive` sends
//!   them back and they are handled once, in order, before the key's newer
//!   records.
//! - **pause-partition** (the DEX default): the partition stalls (its
//!   committed offset stays below the record, the service reports not
//!   ready) while the other partitions keep flowing, and it resumes once the
//!   record gets through.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashSet;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use sluice_kafka::topics::TopicSpec;
use sluice_kafka::whole::read_whole;
use sluice_kafka::{KafkaConfig, ensure_topics};
use sluice_runtime::{Exhausted, HandleError, Handled, Handler, Identity, Publish, Record, Runtime};
use sluice_service::process::http_get;

const IDENTITY: Identity =
    Identity { service: "retry_exhausted", metric_prefix: "sluice_retry_exhausted", workload: "retry_exhausted" };

/// Fails transiently for the keys that are down; publishes every other
/// record to the output topic as it came, and remembers what it handled.
struct Flaky {
    policy: Exhausted,
    down: Mutex<HashSet<Vec<u8>>>,
    output: Arc<str>,
    handled: Mutex<Vec<(Vec<u8>, String)>>,
}

#[derive(Clone)]
struct Shared(Arc<Flaky>);

impl Handler for Shared {
    async fn handle(&self, record: &Record) -> Result<Handled, HandleError> {
        let key = record.key.clone().unwrap_or_default();
        if self.0.down.lock().unwrap().contains(&key) {
            return Err(HandleError::transient("downstream", "down for this key"));
        }
        let payload = record.payload.clone().unwrap_or_default();
        self.0.handled.lock().unwrap().push((key.clone(), String::from_utf8_lossy(&payload).into_owned()));
        let publish = vec![Publish { topic: self.0.output.clone(), key, payload }];
        Ok(Handled { outcome: "ok", event_time_ms: None, publish })
    }

    fn retry_exhausted(&self) -> Exhausted {
        self.0.policy
    }
}

/// One test's topics and group.
struct Case {
    kafka: KafkaConfig,
    input: String,
    output: String,
    dlq: String,
    group: String,
    partitions: i32,
    producer: ThreadedProducer<DefaultProducerContext>,
}

impl Case {
    async fn new(name: &str, partitions: i32) -> Self {
        let kafka = sluice_testkit::kafka();
        let name = sluice_testkit::unique(name);
        let (input, output, dlq) = (format!("{name}.in"), format!("{name}.out"), format!("{name}.dlq"));
        let specs = [TopicSpec::new(&input, partitions), TopicSpec::new(&output, 1), TopicSpec::new(&dlq, 1)];
        ensure_topics(&kafka, &specs, Duration::from_secs(60)).await.unwrap();
        let producer = kafka.producer().create().unwrap();
        Self { kafka, input, output, dlq, group: format!("{name}.group"), partitions, producer }
    }

    fn produce(&self, partition: i32, records: &[(&str, String)]) {
        for (key, payload) in records {
            let record = BaseRecord::to(&self.input).key(*key).payload(payload).partition(partition);
            self.producer.send(record).map_err(|(e, _)| e).unwrap();
        }
        self.producer.flush(Duration::from_secs(30)).unwrap();
    }

    fn handler(&self, policy: Exhausted, down: &[&str]) -> Arc<Flaky> {
        Arc::new(Flaky {
            policy,
            down: Mutex::new(down.iter().map(|k| k.as_bytes().to_vec()).collect()),
            output: Arc::from(self.output.as_str()),
            handled: Mutex::new(Vec::new()),
        })
    }

    /// The runtime running `handler` until the sender is used; its admin port.
    async fn run(&self, handler: &Arc<Flaky>) -> Running {
        let retry = [("RETRY_INITIAL_MS", "20"), ("RETRY_MAX_MS", "100"), ("RETRY_ATTEMPTS_BEFORE_STALL", "3")];
        let config = common::runtime_config(&self.kafka, &self.group, &self.input, &self.dlq, &retry);
        let runtime = Runtime::new(config, IDENTITY).unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (started, admin) = tokio::sync::oneshot::channel();
        let shutdown = async { stopped.await.unwrap_or(()) };
        let task = tokio::spawn(runtime.run(Shared(handler.clone()), shutdown, |h| {
            let _ = started.send(h.admin_addr.port());
        }));
        Running { stop, task, port: admin.await.unwrap() }
    }

    /// Each partition's committed offset (-1: none) and its commit's metadata.
    fn committed(&self) -> Vec<(i64, String)> {
        let consumer: BaseConsumer = self.kafka.client().set("group.id", &self.group).create().unwrap();
        let mut tpl = TopicPartitionList::new();
        for p in 0..self.partitions {
            tpl.add_partition(&self.input, p);
        }
        let committed = consumer.committed_offsets(tpl, Duration::from_secs(5)).unwrap();
        let offset = |o| if let Offset::Offset(o) = o { o } else { -1 };
        committed.elements().iter().map(|e| (offset(e.offset()), e.metadata().to_string())).collect()
    }

    /// Waits until every partition's committed offset is at least `ends`.
    async fn committed_to(&self, ends: &[i64], limit: Duration) -> Vec<(i64, String)> {
        let deadline = Instant::now() + limit;
        loop {
            let now = tokio::task::block_in_place(|| self.committed());
            if now.iter().zip(ends).all(|((c, _), end)| c >= end) {
                return now;
            }
            assert!(Instant::now() < deadline, "committed {now:?}, not {ends:?}, within {limit:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// `topic`'s records as (key, payload, the dead letter's message), in order.
    fn read(&self, topic: &str) -> Vec<(String, String, Option<String>)> {
        let records = tokio::task::block_in_place(|| read_whole(&self.kafka, topic, Duration::from_secs(30))).unwrap();
        records
            .iter()
            .map(|r| {
                let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
                (text(&r.key), text(&r.payload), r.header_text("sluice.error.message"))
            })
            .collect()
    }
}

struct Running {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), sluice_runtime::run::RuntimeError>>,
    port: u16,
}

impl Running {
    async fn stop(self) {
        self.stop.send(()).unwrap();
        self.task.await.unwrap().unwrap();
    }

    fn get(&self, path: &str) -> (u16, String) {
        tokio::task::block_in_place(|| http_get(self.port, path)).expect("the admin server answers")
    }
}

fn records(key: &'static str, range: std::ops::Range<usize>) -> Vec<(&'static str, String)> {
    range.map(|i| (key, format!("{key}-{i}"))).collect()
}

fn payloads(records: &[(String, String, Option<String>)], key: &str) -> Vec<String> {
    records.iter().filter(|r| r.0 == key).map(|r| r.1.clone()).collect()
}

fn names(key: &str, range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("{key}-{i}")).collect()
}

/// `sluice-ops` next to this test's binary (the test command builds every binary first).
fn sluice_ops() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe.parent().and_then(|deps| deps.parent()).unwrap().join("sluice-ops");
    assert!(path.exists(), "{} is missing: build it first (cargo build -p sluice-ops)", path.display());
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letter_key_moves_the_partition_on_and_a_redrive_restores_the_key_in_order() {
    let case = Case::new("retry-dead-key", 2).await;
    let interleaved: Vec<_> =
        records("a", 0..10).into_iter().zip(records("b", 0..10)).flat_map(|(a, b)| [a, b]).collect();
    case.produce(0, &interleaved);
    case.produce(1, &records("c", 0..10));

    // "a" is down for good: its retries run out, and the partition moves on.
    let first = case.handler(Exhausted::DeadLetterKey, &["a"]);
    let running = case.run(&first).await;
    let committed = case.committed_to(&[20, 10], Duration::from_secs(60)).await;
    assert_eq!(running.get("/ready").0, 200, "no stall: the service stays ready");
    let letters = case.read(&case.dlq);
    assert_eq!(payloads(&letters, "a"), names("a", 0..10), "every record of a, in order: {letters:?}");
    assert_eq!(letters.len(), 10, "nothing else dead-lettered: {letters:?}");
    let message = |i: usize| letters[i].2.clone().unwrap_or_default();
    assert!(message(0).contains("retries exhausted after 3 attempts"), "{}", message(0));
    assert!(message(1).contains("dead-lettered since offset 0"), "{}", message(1));
    let out = case.read(&case.output);
    assert_eq!((payloads(&out, "b"), payloads(&out, "c")), (names("b", 0..10), names("c", 0..10)));
    assert!(committed[0].1.contains("dead=61@0-"), "the commit records the dead key: {committed:?}");
    assert!(!committed[1].1.contains("dead="), "partition 1 has none: {committed:?}");
    running.stop().await;

    // A new owner with "a" healthy again still dead-letters it: a's records
    // must not take effect before the ones waiting in the dead-letter topic.
    case.produce(0, &[("a", "a-10".into()), ("b", "b-10".into()), ("a", "a-11".into())]);
    let second = case.handler(Exhausted::DeadLetterKey, &[]);
    let running = case.run(&second).await;
    case.committed_to(&[23, 10], Duration::from_secs(60)).await;
    assert_eq!(payloads(&case.read(&case.dlq), "a"), names("a", 0..12));
    assert!(second.handled.lock().unwrap().iter().all(|(k, _)| k != b"a"), "the new owner handled none of a");

    // The redrive sends a's letters back, behind its records; they lift the
    // key and are handled once, in order, and so is a's next record.
    let redrive = Command::new(sluice_ops())
        .args(["dlq", "redrive", "--key", "a", "--execute"])
        .args(["--brokers", &case.kafka.brokers, "--input-topic", &case.input, "--dlq-topic", &case.dlq])
        .args(["--group", &case.group])
        .output()
        .unwrap();
    assert!(redrive.status.success(), "{}", String::from_utf8_lossy(&redrive.stderr));
    case.produce(0, &[("a", "a-12".into())]);
    // 23 records, the 12 redriven, the redrive's transaction marker, a-12.
    case.committed_to(&[23 + 12 + 1 + 1, 10], Duration::from_secs(60)).await;
    let handled: Vec<String> =
        second.handled.lock().unwrap().iter().filter(|(k, _)| k == b"a").map(|(_, p)| p.clone()).collect();
    assert_eq!(handled, names("a", 0..13), "once each, in order");
    assert_eq!(payloads(&case.read(&case.output), "a"), names("a", 0..13));
    assert_eq!(case.read(&case.dlq).len(), 12, "nothing dead-lettered again");
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_partition_pauses_alone_and_its_neighbours_keep_flowing() {
    let case = Case::new("retry-pause", 3).await;
    let mut stuck = records("k", 0..5);
    stuck.push(("poison", "poison-0".into()));
    stuck.extend(records("k", 5..20));
    case.produce(0, &stuck);
    case.produce(1, &records("m", 0..20));
    case.produce(2, &records("n", 0..20));

    let handler = case.handler(Exhausted::PausePartition, &["poison"]);
    let running = case.run(&handler).await;
    case.committed_to(&[5, 20, 20], Duration::from_secs(60)).await;
    let group = format!("consumergroup=\"{}\"", case.group);
    let stalled = |l: &str| l.starts_with("sluice_retry_exhausted_stalled_records{") && l.contains(&group);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !running.get("/metrics").1.lines().any(|l| stalled(l) && l.ends_with(" 1")) {
        assert!(Instant::now() < deadline, "no stalled record reported: {}", running.get("/metrics").1);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (code, why) = running.get("/ready");
    assert_eq!(code, 503, "not ready while a record is past the retry cap: {why}");

    // The neighbours go on: more records for partitions 1 and 2 are committed
    // while partition 0 stays below the poison record.
    case.produce(1, &records("m", 20..40));
    case.produce(2, &records("n", 20..40));
    let committed = case.committed_to(&[5, 40, 40], Duration::from_secs(60)).await;
    assert_eq!(committed[0].0, 5, "partition 0 never passes the record that keeps failing: {committed:?}");
    assert!(case.read(&case.dlq).is_empty(), "the pause policy dead-letters nothing");

    // The dependency back: the record gets through and the partition resumes.
    handler.down.lock().unwrap().clear();
    case.committed_to(&[21, 40, 40], Duration::from_secs(60)).await;
    assert_eq!(running.get("/ready").0, 200);
    let out = case.read(&case.output);
    assert_eq!(payloads(&out, "poison"), ["poison-0"]);
    assert_eq!(payloads(&out, "k"), names("k", 0..20), "k's records, each once");
    running.stop().await;
}
