//! The transactional producer against the real broker: what it reports
//! acknowledged is what a `read_committed` reader sees, and a second
//! producer with the same `transactional.id` fences the first at the
//! broker (its open transaction aborted, its next commit refused), the way
//! a new active ingest fences a paused ex-active one.

use std::time::Duration;

use sluice_kafka::{KafkaConfig, PipelinedProducer, ProduceError, TopicSpec, ensure_topics};
use sluice_testkit::{consume, unique};

const TIMEOUT: Duration = Duration::from_secs(10);

async fn send(producer: &mut PipelinedProducer<u32>, topic: &str, from: u32, n: u32) {
    for i in from..from + n {
        let acked = producer.send(topic, format!("k{i}").as_bytes(), &i.to_be_bytes(), i).await.expect("send");
        assert!(acked.is_empty(), "nothing is acknowledged before its transaction commits");
    }
}

fn values(records: &[sluice_testkit::Record]) -> Vec<u32> {
    let mut v: Vec<u32> =
        records.iter().map(|r| u32::from_be_bytes(r.payload.as_slice().try_into().expect("4 bytes"))).collect();
    v.sort_unstable();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_producer_with_the_same_id_fences_the_first_and_readers_see_only_commits() {
    let kafka = sluice_testkit::kafka();
    let topic = unique("txn");
    ensure_topics(&kafka, &[TopicSpec::new(&topic, 3)], Duration::from_secs(60)).await.expect("topic");
    let id = unique("txn-id");

    let mut old = PipelinedProducer::transactional(&kafka, 64, &id, TIMEOUT).await.expect("first producer");
    send(&mut old, &topic, 0, 10).await;
    let committed = old.commit().await.expect("commit");
    assert_eq!(committed.iter().map(|a| a.tag).collect::<Vec<_>>(), (0..10).collect::<Vec<_>>(), "in send order");
    // Five more in an open transaction; then the first producer "pauses"
    // and a new one with the same id starts.
    send(&mut old, &topic, 10, 5).await;
    let mut new = PipelinedProducer::transactional(&kafka, 64, &id, TIMEOUT).await.expect("second producer");
    let refused = old.commit().await.expect_err("the old producer is fenced");
    assert!(matches!(refused, ProduceError::Fenced(_)), "a fence, told apart: {refused}");
    send(&mut new, &topic, 100, 3).await;
    assert_eq!(new.commit().await.expect("commit").len(), 3);

    let read_committed = consume(&kafka, &topic, 14, Duration::from_secs(5)).await;
    let mut want: Vec<u32> = (0..10).collect();
    want.extend(100..103);
    assert_eq!(values(&read_committed), want, "read_committed: the fenced producer's open transaction is invisible");
    // The aborted records are in the log: a read_uncommitted reader sees them.
    let uncommitted =
        KafkaConfig { properties: vec![("isolation.level".into(), "read_uncommitted".into())], ..kafka.clone() };
    assert_eq!(consume(&uncommitted, &topic, 18, Duration::from_secs(30)).await.len(), 18);
}

/// librdkafka's consumer position steps over transaction markers (what a
/// consumer that commits its position relies on for a lag of 0): after the
/// last record of a committed transaction, the position is the log end, one
/// past the record's offset + 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consumer_position_steps_over_the_commit_marker() {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
    let kafka = sluice_testkit::kafka();
    let topic = unique("txn-position");
    ensure_topics(&kafka, &[TopicSpec::new(&topic, 1)], Duration::from_secs(60)).await.expect("topic");
    let mut producer =
        PipelinedProducer::transactional(&kafka, 64, &unique("txn-id"), TIMEOUT).await.expect("producer");
    send(&mut producer, &topic, 0, 3).await;
    producer.commit().await.expect("commit");
    let consumer: BaseConsumer = kafka.client().set("group.id", unique("pos")).create().expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&topic, 0, Offset::Beginning).expect("tpl");
    consumer.assign(&tpl).expect("assign");
    let mut last = -1;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::time::Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => last = rdkafka::Message::offset(&m),
            Some(Err(e)) => panic!("{e}"),
            None if last == 2 => break,
            None => {}
        }
    }
    let (_, high) = consumer.fetch_watermarks(&topic, 0, Duration::from_secs(5)).expect("watermarks");
    let position = consumer.position().expect("position");
    let at = position.elements()[0].offset();
    eprintln!("last record {last}, position {at:?}, log end {high}");
    assert_eq!((last, high), (2, 4), "three records and their commit marker");
    assert_eq!(at, Offset::Offset(high), "the position is past the marker");
}

/// The tail reader (what a new active ingest compares what it sends with)
/// finds a partition's newest committed record behind an aborted
/// transaction far longer than its first look back: the 200 aborted records
/// (and the markers) a `read_committed` reader skips are not "no tail".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_newest_committed_record_is_found_behind_a_long_aborted_transaction() {
    let kafka = sluice_testkit::kafka();
    let topic = unique("txn-tail");
    ensure_topics(&kafka, &[TopicSpec::new(&topic, 1)], Duration::from_secs(60)).await.expect("topic");
    let id = unique("txn-tail-id");
    let mut old = PipelinedProducer::transactional(&kafka, 512, &id, TIMEOUT).await.expect("first producer");
    send(&mut old, &topic, 0, 5).await;
    old.commit().await.expect("commit");
    send(&mut old, &topic, 5, 200).await;
    // Fenced: its open transaction of 200 records is aborted.
    let _new = PipelinedProducer::<u32>::transactional(&kafka, 64, &id, TIMEOUT).await.expect("second producer");
    let tails = tokio::task::spawn_blocking(move || sluice_kafka::tail::newest_records(&kafka, &topic, TIMEOUT))
        .await
        .expect("join")
        .expect("tails");
    assert_eq!((tails.partitions, tails.newest.len()), (1, 1), "the partition has a tail: {tails:?}");
    let newest = u32::from_be_bytes(tails.newest[0].payload.as_deref().expect("payload").try_into().expect("4 bytes"));
    assert_eq!(newest, 4, "the newest committed record, not an aborted one");
}
