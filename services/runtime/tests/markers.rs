//! A partition whose only records past the group's commit are transaction
//! markers, on the real broker (the test stack): its next owner is handed no
//! record, and its committed offset must still move past the marker, or the
//! group's lag stays at 1 for that partition for ever. Seen in a CI run: the
//! ingest's last transaction committed, then a scale-up moved its partitions
//! to members that had handled none of it. Both commit paths: the periodic
//! commit (at-least-once) and the transactions (exactly-once).

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use sluice_kafka::topics::TopicSpec;
use sluice_kafka::{KafkaConfig, ensure_topics};
use sluice_runtime::{HandleError, Handled, Handler, Identity, Record, Runtime};

const IDENTITY: Identity = Identity { service: "markers", metric_prefix: "sluice_markers", workload: "markers" };

/// Handles every record by doing nothing; counts them.
#[derive(Clone, Default)]
struct Count(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl Handler for Count {
    async fn handle(&self, _record: &Record) -> Result<Handled, HandleError> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(Handled { outcome: "ok", event_time_ms: None, publish: Vec::new() })
    }
}

/// Three records in one committed transaction: offsets 0–2, the marker at 3.
fn produce_transaction(kafka: &KafkaConfig, topic: &str) {
    let producer: ThreadedProducer<DefaultProducerContext> = kafka
        .producer()
        .set("transactional.id", sluice_testkit::unique("markers-txn"))
        .set("message.timeout.ms", "30000")
        .create()
        .unwrap();
    let timeout = Duration::from_secs(30);
    producer.init_transactions(timeout).unwrap();
    producer.begin_transaction().unwrap();
    for i in 0..3 {
        let payload = format!("record-{i}");
        producer.send(BaseRecord::to(topic).key("k").payload(&payload).partition(0)).map_err(|(e, _)| e).unwrap();
    }
    producer.commit_transaction(timeout).unwrap();
}

fn committed(kafka: &KafkaConfig, topic: &str, group: &str) -> i64 {
    let consumer: BaseConsumer = kafka.client().set("group.id", group).create().unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(topic, 0);
    match consumer.committed_offsets(tpl, Duration::from_secs(5)).unwrap().elements()[0].offset() {
        Offset::Offset(o) => o,
        _ => -1,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_left_with_only_a_marker_commits_past_it_under_its_next_owner() {
    marker_left_behind("markers", &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_a_partition_left_with_only_a_marker_commits_past_it_under_its_next_owner() {
    marker_left_behind("markers-eos", &[("EXACTLY_ONCE", "true"), ("TRANSACTION_INTERVAL_MS", "100")]).await;
}

/// The group's offset committed at a marker (the log's last offset); a
/// runtime with `settings` joins and must move it to the log end.
async fn marker_left_behind(name: &str, settings: &[(&str, &str)]) {
    let kafka = sluice_testkit::kafka();
    let name = sluice_testkit::unique(name);
    let (input, dlq, group) = (format!("{name}.in"), format!("{name}.dlq"), format!("{name}.group"));
    let specs = [TopicSpec::new(&input, 1), TopicSpec::new(&dlq, 1)];
    ensure_topics(&kafka, &specs, Duration::from_secs(60)).await.unwrap();
    tokio::task::block_in_place(|| produce_transaction(&kafka, &input));
    // The previous owner handled the three records and committed 3: the marker's offset.
    tokio::task::block_in_place(|| {
        let consumer: BaseConsumer = kafka.client().set("group.id", &group).create().unwrap();
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&input, 0, Offset::Offset(3)).unwrap();
        consumer.commit(&tpl, CommitMode::Sync).unwrap();
    });
    assert_eq!(tokio::task::block_in_place(|| committed(&kafka, &input, &group)), 3);

    let config = common::runtime_config(&kafka, &group, &input, &dlq, settings);
    let handler = Count::default();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(Runtime::new(config, IDENTITY).unwrap().run(
        handler.clone(),
        async { stopped.await.unwrap_or(()) },
        |_| {},
    ));

    let deadline = Instant::now() + Duration::from_secs(30);
    let mut now = 3;
    while now < 4 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        now = tokio::task::block_in_place(|| committed(&kafka, &input, &group));
    }
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
    assert_eq!(handler.0.load(std::sync::atomic::Ordering::Relaxed), 0, "nothing past the commit but the marker");
    assert_eq!(now, 4, "the committed offset moves past the marker (the log end): the group's lag reaches 0");
}
