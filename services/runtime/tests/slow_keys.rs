//! No cohort barrier: with 1% of the keys 100× slower, the other keys'
//! records keep flowing at their own pace and the committed offsets keep
//! moving (the watermark waits behind a slow record; the work does not).
//! Real broker (the test stack), the runtime with a per-record handler. The
//! workload needs no Redis, so the test gives the runtime none: no
//! `REDIS_URL`, and no Redis series among its metrics, all of which carry
//! the workload's and the group's labels.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use sluice_kafka::topics::TopicSpec;
use sluice_kafka::{KafkaConfig, ensure_topics};
use sluice_runtime::{HandleError, Handled, Handler, Identity, Record, Runtime};

/// Its own names: the runtime takes its series' prefix from the workload.
const IDENTITY: Identity = Identity { service: "slow_keys", metric_prefix: "sluice_slow_keys", workload: "slow_keys" };

const PARTITIONS: i32 = 4;
const KEYS: usize = 200;
const RECORDS_PER_KEY: usize = 20;
const BASE: Duration = Duration::from_millis(2);
const SLOW_FACTOR: u32 = 100;

/// Sleeps `BASE` per record, 100× that for the slow keys; records when each
/// record finished and checks each key's records come in offset order.
struct Paced {
    slow: HashSet<Vec<u8>>,
    started: Instant,
    done: Mutex<Finished>,
}

/// Per key: (offset, when it finished) in the order the handler saw them.
type Finished = HashMap<Vec<u8>, Vec<(i64, Duration)>>;

impl Handler for Paced {
    async fn handle(&self, record: &Record) -> Result<Handled, HandleError> {
        let key = record.key.clone().unwrap_or_default();
        let wait = if self.slow.contains(&key) { BASE * SLOW_FACTOR } else { BASE };
        tokio::time::sleep(wait).await;
        self.done.lock().unwrap().entry(key).or_default().push((record.offset, self.started.elapsed()));
        Ok(Handled::ok(None))
    }
}

fn key(i: usize) -> Vec<u8> {
    format!("key-{i:03}").into_bytes()
}

fn committed(kafka: &KafkaConfig, group: &str, topic: &str) -> i64 {
    let consumer: BaseConsumer = kafka.client().set("group.id", group).create().unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition(topic, p);
    }
    let committed = consumer.committed_offsets(tpl, Duration::from_secs(5)).unwrap();
    committed.elements().iter().map(|e| if let Offset::Offset(o) = e.offset() { o } else { 0 }).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_percent_of_keys_100x_slower_hold_back_nothing_else() {
    let kafka = sluice_testkit::kafka();
    let name = sluice_testkit::unique("slow-keys");
    let (topic, group) = (format!("{name}.in"), format!("{name}.group"));
    let specs = [TopicSpec::new(&topic, PARTITIONS), TopicSpec::new(format!("{topic}.dlq"), 1)];
    ensure_topics(&kafka, &specs, Duration::from_secs(60)).await.unwrap();

    // Keys interleaved in every partition: each key's records spread over
    // the partition's whole range, so a slow key sits under everything.
    let producer: ThreadedProducer<DefaultProducerContext> = kafka.producer().create().unwrap();
    for round in 0..RECORDS_PER_KEY {
        for i in 0..KEYS {
            let k = key(i);
            let payload = format!("{round}");
            let record = BaseRecord::to(&topic).key(&k).payload(&payload).partition((i % PARTITIONS as usize) as i32);
            producer.send(record).map_err(|(e, _)| e).unwrap();
        }
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    let total = (KEYS * RECORDS_PER_KEY) as i64;

    let config = common::runtime_config(&kafka, &group, &topic, &format!("{topic}.dlq"), &[]);
    // 1% of the keys: keys 0 and 100 (both in partition 0).
    let slow: HashSet<Vec<u8>> = [key(0), key(100)].into_iter().collect();
    let handler = Arc::new(Paced { slow: slow.clone(), started: Instant::now(), done: Mutex::new(HashMap::new()) });
    let runtime = Runtime::new(config, IDENTITY).unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (started, admin) = tokio::sync::oneshot::channel();
    let running =
        tokio::spawn(runtime.run(SharedHandler(handler.clone()), async { stopped.await.unwrap_or(()) }, |h| {
            let _ = started.send(h.admin_addr);
        }));
    let admin = admin.await.unwrap();

    // While the slow keys are still far from done, the committed offsets
    // must have moved, and keep moving.
    let slow_total = Duration::from_millis(2 * 100) * RECORDS_PER_KEY as u32;
    let mut samples = Vec::new();
    for _ in 0..3 {
        tokio::time::sleep(slow_total / 5).await;
        let c = tokio::task::block_in_place(|| committed(&kafka, &group, &topic));
        let slow_done: usize = {
            let done = handler.done.lock().unwrap();
            slow.iter().map(|k| done.get(k).map_or(0, Vec::len)).sum()
        };
        samples.push((c, slow_done));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while tokio::task::block_in_place(|| committed(&kafka, &group, &topic)) < total {
        assert!(Instant::now() < deadline, "not everything committed within 60 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let metrics = tokio::task::block_in_place(|| sluice_service::process::http_get(admin.port(), "/metrics"));
    let (_, metrics) = metrics.expect("the admin server answers /metrics");
    let series: Vec<&str> = metrics.lines().filter(|l| !l.starts_with('#') && !l.is_empty()).collect();
    let labels = [r#"workload="slow_keys""#.to_string(), format!(r#"consumergroup="{group}""#)];
    assert!(series.iter().any(|l| l.starts_with("sluice_slow_keys_messages_total")), "{metrics}");
    for line in &series {
        assert!(labels.iter().all(|l| line.contains(l.as_str())), "a series without the workload's labels: {line}");
        assert!(!line.contains(r#""redis""#), "a Redis series from a workload without Redis: {line}");
    }
    stop.send(()).unwrap();
    running.await.unwrap().unwrap();

    let done = handler.done.lock().unwrap();
    let last = |fast: bool| {
        done.iter()
            .filter(|(k, _)| slow.contains(*k) != fast)
            .flat_map(|(_, v)| v.iter().map(|(_, t)| *t))
            .max()
            .unwrap()
    };
    let (fast_last, slow_last) = (last(true), last(false));
    eprintln!(
        "fast keys all done at {fast_last:?}, slow keys at {slow_last:?}; (committed, slow records done) while slow: {samples:?}"
    );
    for (k, v) in done.iter() {
        assert!(v.windows(2).all(|w| w[0].0 < w[1].0), "key {k:?} out of order");
        assert_eq!(v.len(), RECORDS_PER_KEY, "key {k:?} handled {} times", v.len());
    }
    // The fast keys (99%) finish in a fraction of the time the slow ones
    // need: nothing waited for the slow keys but their own records.
    assert!(fast_last * 4 < slow_last, "fast keys finished at {fast_last:?}, slow at {slow_last:?}");
    assert!(slow_last >= slow_total, "slow keys ran their records one after the other");
    // The watermark waits behind the slow records, but moves with them.
    let slow_records = 2 * RECORDS_PER_KEY;
    assert!(samples.iter().all(|(_, s)| *s < slow_records), "sampled while the slow keys were running: {samples:?}");
    assert!(samples[0].0 > 0, "something committed early: {samples:?}");
    assert!(samples.windows(2).all(|w| w[1].0 > w[0].0), "commits kept moving: {samples:?}");
}

/// The test keeps a handle on the handler to read what it saw.
struct SharedHandler(Arc<Paced>);

impl Handler for SharedHandler {
    async fn handle(&self, record: &Record) -> Result<Handled, HandleError> {
        self.0.handle(record).await
    }
}
