//! sluice-lag's verdicts against the real broker, from what Kafka already
//! knows rather than from sluice-lag's own uptime: a group stopped minutes
//! before sluice-lag starts reads STOP at its first poll, and a stuck one
//! STALL within a few polls; a consumer SIGKILLed in a live group is seen
//! within a few polls, long before its session expires; and neither a slow
//! but moving group nor one draining an old backlog is ever called stopped.

mod common;

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::{Duration, Instant};

use common::{Lag, POLL_MS, commit, topic};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use sluice_lag::model::status::Status;
use sluice_lag::picture::GroupPicture;

fn now_ms() -> i64 {
    sluice_core::clock::now_ms()
}

/// `count` records to partition 0, each stamped `stamp_ms`, sent together.
async fn produce_at(topic: &str, count: usize, stamp_ms: i64) {
    let producer: FutureProducer = sluice_testkit::kafka().producer().create().expect("producer");
    let sends = (0..count).map(|_| {
        let record = FutureRecord::to(topic).partition(0).key("k").payload("v").timestamp(stamp_ms);
        producer.send(record, Duration::from_secs(30))
    });
    for sent in futures_util::future::join_all(sends).await {
        sent.expect("sent");
    }
}

/// Produces `per_second` records a second, stamped now, until `stop`.
fn keep_producing(topic: String, per_second: u64, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<i64> {
    tokio::spawn(async move {
        let producer: FutureProducer = sluice_testkit::kafka().producer().create().expect("producer");
        let mut sent = 0;
        while !stop.load(SeqCst) {
            for _ in 0..per_second / 10 {
                let record = FutureRecord::to(&topic).partition(0).key("k").payload("v");
                producer.send(record, Duration::from_secs(10)).await.expect("sent");
                sent += 1;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        sent
    })
}

/// A consumer that joined `group`, committed `offset` on `topic`'s partition 0, and left
/// (a LeaveGroup: the group is Empty, its protocol type kept).
fn joined_committed_and_left(group: &str, topic: &str, offset: i64) {
    let consumer: BaseConsumer = sluice_testkit::kafka()
        .client()
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    let deadline = Instant::now() + Duration::from_secs(30);
    while consumer.assignment().map(|a| a.count()).unwrap_or(0) == 0 {
        assert!(Instant::now() < deadline, "{group}: no assignment");
        let _ = consumer.poll(Duration::from_millis(100));
    }
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, rdkafka::Offset::Offset(offset)).expect("offset");
    consumer.commit(&tpl, CommitMode::Sync).expect("commit");
    consumer.unsubscribe();
    drop(consumer);
}

/// The first picture of `group` that shows its partition.
async fn first_picture(lag: &Lag, group: &str) -> GroupPicture {
    lag.until(group, Duration::from_secs(20), "read", |g| !g.partitions.is_empty()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_stopped_group_reads_stop_from_the_first_poll_after_a_start() {
    let topic = topic("verdict-stopped", 1).await;
    let (stopped, stuck) = (sluice_testkit::unique("verdict-stopped"), sluice_testkit::unique("verdict-stuck"));
    // Nine minutes ago the group's consumer read 10 records and left; 90 have waited since.
    produce_at(&topic, 100, now_ms() - 540_000).await;
    joined_committed_and_left(&stopped, &topic, 10);
    // A member that owns the partition and never moves past offset 10.
    let member = common::Member::join(&stuck, &topic);
    member.commit(10);
    member.wait_committed(10, Duration::from_secs(30));
    for start in ["a start", "a restart"] {
        // The default thresholds: STOP and STALL after 60 s.
        let lag = Lag::start(&stopped, &[&stopped, &stuck], &[]).await;
        let first = first_picture(&lag, &stopped).await;
        assert_eq!(first.status.status, Status::Stop, "{start}: {first:#?}");
        let reason = &first.status.reason;
        assert!(reason.contains("no member owns it and its oldest unconsumed record has waited 5"), "{reason}");
        let seen = Instant::now();
        let st = lag.until(&stuck, Duration::from_secs(10), "stall", |g| g.status.status == Status::Stall).await;
        assert!(
            seen.elapsed() < Duration::from_millis(POLL_MS * 6),
            "{start}: STALL after {:?}, not within a few polls",
            seen.elapsed()
        );
        assert!(st.status.reason.contains("its oldest unconsumed record has waited 5"), "{st:#?}");
    }
    drop(member);
}

/// Kafka's own console consumer, from the broker's jars: a real consumer process to kill.
fn console_consumer(group: &str, topic: &str) -> Child {
    let libs = format!("{}/.cache/sluice/kafka-4.1.1/libs/*", std::env::var("HOME").unwrap_or_default());
    Command::new("java")
        .args(["-Xmx128m", "-cp", &libs, "org.apache.kafka.tools.consumer.ConsoleConsumer"])
        .args(["--bootstrap-server", &sluice_testkit::kafka().brokers, "--topic", topic, "--group", group])
        .args(["--from-beginning", "--consumer-property", "auto.commit.interval.ms=1000"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting Kafka's console consumer")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_killed_in_a_live_group_is_seen_within_a_few_polls() {
    let topic = topic("verdict-killed", 1).await;
    let group = sluice_testkit::unique("verdict-killed");
    let stop = Arc::new(AtomicBool::new(false));
    let producing = keep_producing(topic.clone(), 200, stop.clone());
    let mut consumer = console_consumer(&group, &topic);
    let lag = Lag::start(&group, &[&group], &[]).await;
    let committed = |g: &GroupPicture| match g.partitions.first().and_then(|p| p.lag) {
        Some(sluice_lag::model::lag::Lag::Behind { committed, .. }) => committed,
        _ => -1,
    };
    let live =
        lag.until(&group, Duration::from_secs(60), "consuming", |g| g.members == Some(1) && committed(g) > 0).await;
    // Live and consuming: OK at every poll for 5 s.
    let watched = Instant::now();
    let mut last = committed(&live);
    while watched.elapsed() < Duration::from_secs(5) {
        let g = lag.group(&group).expect("picture");
        assert_eq!(g.status.status, Status::Ok, "a live group: {g:#?}");
        last = last.max(committed(&g));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(last > committed(&live), "the consumer commits");
    consumer.kill().expect("SIGKILL");
    let _ = consumer.wait();
    let killed = Instant::now();
    let dead = lag.until(&group, Duration::from_secs(30), "stall", |g| g.status.status == Status::Stall).await;
    let seen = killed.elapsed();
    stop.store(true, SeqCst);
    producing.await.expect("producer");
    assert_eq!(dead.members, Some(1), "its session has not expired (45 s): the dead member still owns the partition");
    assert!(dead.status.reason.contains("where it moved at least every"), "{dead:#?}");
    // Three commit intervals (about 1 s each, seen at 0.5 s polls) plus the poll that sees the last.
    assert!(seen < Duration::from_secs(8), "seen {seen:?} after the kill");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_false_alarm_on_a_slow_group_nor_on_one_draining_an_old_backlog() {
    let (slow_topic, burst_topic) = (topic("verdict-slow", 1).await, topic("verdict-burst", 1).await);
    let (slow, burst) = (sluice_testkit::unique("verdict-slow"), sluice_testkit::unique("verdict-burst"));
    // The burst: 4,000 records two minutes old, drained at 100 records per 0.5 s by a member.
    produce_at(&burst_topic, 4_000, now_ms() - 120_000).await;
    let draining = common::Member::join(&burst, &burst_topic);
    draining.commit(1);
    draining.wait_committed(1, Duration::from_secs(30));
    // The slow group: 200 records/s produced, half of them committed every 0.5 s, by offset
    // commits alone (no member).
    produce_at(&slow_topic, 10, now_ms()).await;
    commit(&slow, &slow_topic, &[(0, 1)]);
    let stop = Arc::new(AtomicBool::new(false));
    let producing = keep_producing(slow_topic.clone(), 200, stop.clone());
    let lag = Lag::start(&slow, &[&slow, &burst], &[]).await;
    first_picture(&lag, &burst).await;
    let started = Instant::now();
    let mut round = 0i64;
    while started.elapsed() < Duration::from_secs(12) {
        round += 1;
        draining.commit(1 + round * 100);
        let end = lag.group(&slow).and_then(|g| g.partitions.first().and_then(|p| p.log)).map_or(0, |l| l.end);
        commit(&slow, &slow_topic, &[(0, (end / 2).max(1))]);
        for group in [&slow, &burst] {
            let g = lag.group(group).expect("picture");
            let status = g.status.status;
            assert!(
                !matches!(status, Status::Stall | Status::Stop),
                "a false alarm at {:?}: {g:#?}",
                started.elapsed()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    stop.store(true, SeqCst);
    producing.await.expect("producer");
    let b = lag.group(&burst).expect("picture");
    let oldest = b.time_lag_ms.expect("time lag");
    assert!(oldest >= 60_000, "the backlog is older than stall_after throughout: {oldest} ms");
    assert!(b.lag.unwrap_or(0) > 0 && b.lag.unwrap_or(0) < 4_000, "draining: {b:#?}");
    drop(draining);
}
