//! sluice-lag against the real broker: its offset lag equals Kafka's own
//! `ConsumerGroupCommand`; its time lag is exactly the age of the record at
//! the committed offset; and every status is reached by the scenario that
//! makes it true, and left when the cause goes.

mod common;

use std::time::{Duration, Instant};

use common::{Lag, POLL_MS, cli_describe, commit, kafka_describe, produce, rows, topic};
use sluice_lag::model::status::Status;
use sluice_lag::picture::TimestampType;

fn now_ms() -> i64 {
    sluice_core::clock::now_ms()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offset_lag_equals_kafka_s_own_group_command_at_rest_and_under_load() {
    let topic = topic("lag-cgc", 3).await;
    let group = sluice_testkit::unique("lag-cgc-group");
    for p in 0..3 {
        produce(&topic, p, 100, |_| now_ms()).await;
    }
    commit(&group, &topic, &[(0, 100), (1, 40), (2, 0)]);
    let lag = Lag::start(&group, &[&group], &[]).await;
    let picture = lag.until(&group, Duration::from_secs(10), "read", |g| g.partitions.len() == 3).await;
    let kafka = kafka_describe(&group, &topic);
    assert_eq!(rows(&picture, &topic), kafka, "at rest: exactly Kafka's own numbers");
    assert_eq!(picture.lag, Some(160));
    assert_eq!(cli_describe(lag.port, &group, &topic), Ok(kafka), "`sluice-lag describe` prints them too");
    let unwatched = cli_describe(lag.port, "not-watched", &topic).expect_err("an unwatched group is an error");
    assert!(unwatched.contains("is not watched"), "{unwatched}");

    // Under load: 400 records/s produced, the committed offsets following.
    let writer = tokio::spawn(load(topic.clone(), group.clone(), Duration::from_secs(8)));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let asked = Instant::now();
    let theirs: i64 = kafka_describe(&group, &topic).iter().filter_map(|r| r.3).sum();
    let took = asked.elapsed();
    let ours = lag.group(&group).and_then(|g| g.lag).expect("lag");
    // Both read the moving log at some moment of the tool's run or one poll
    // before it: they differ by at most what moves in that time.
    let bound = ((took.as_millis() as u64 + POLL_MS) * 400 / 1000 + 50) as i64;
    assert!((ours - theirs).abs() <= bound, "ours {ours}, Kafka's {theirs}, allowed {bound} ({took:?})");
    writer.await.expect("load");
}

/// Produces 400 records/s over 3 partitions for `span`, committing 90% of
/// the way to the end every 100 ms.
async fn load(topic: String, group: String, span: Duration) {
    let producer: rdkafka::producer::FutureProducer = sluice_testkit::kafka().producer().create().expect("producer");
    let started = Instant::now();
    let mut sent = [100i64; 3];
    while started.elapsed() < span {
        for (p, end) in sent.iter_mut().enumerate() {
            for _ in 0..13 {
                let record = rdkafka::producer::FutureRecord::to(&topic).partition(p as i32).key("k").payload("v");
                producer.send(record, Duration::from_secs(10)).await.expect("sent");
                *end += 1;
            }
        }
        commit(&group, &topic, &[(0, sent[0] * 9 / 10), (1, sent[1] * 9 / 10), (2, sent[2] * 9 / 10)]);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_lag_is_exactly_the_age_of_the_record_at_the_committed_offset() {
    let topic = topic("lag-time", 1).await;
    let group = sluice_testkit::unique("lag-time-group");
    let t0 = now_ms() - 100_000;
    produce(&topic, 0, 50, |i| t0 + i * 1000).await;
    commit(&group, &topic, &[(0, 20)]);
    let lag = Lag::start(&group, &[&group], &[]).await;
    let picture = lag.until(&group, Duration::from_secs(10), "timed", |g| g.time_lag_ms.is_some()).await;
    let p = &picture.partitions[0];
    assert_eq!((p.oldest_timestamp_ms, p.timestamp_type), (Some(t0 + 20_000), Some(TimestampType::Create)));
    assert_eq!(p.time_lag_ms, Some(picture_at(&lag, &group) - (t0 + 20_000)), "now minus the record's own timestamp");
    assert!((79_000..95_000).contains(&p.time_lag_ms.unwrap_or(0)), "{p:?}");
    // Caught up: 0, not unknown.
    commit(&group, &topic, &[(0, 50)]);
    let caught_up = lag.until(&group, Duration::from_secs(10), "caught up", |g| g.lag == Some(0)).await;
    assert_eq!(caught_up.time_lag_ms, Some(0));
    let metrics = lag.metrics();
    assert!(
        metrics.contains(&format!(
            "sluice_lag_time_lag_seconds{{consumergroup=\"{group}\",partition=\"0\",topic=\"{topic}\"}} 0"
        )),
        "{metrics}"
    );
}

/// The time of the picture now served (the time lag is computed at it).
fn picture_at(lag: &Lag, group: &str) -> i64 {
    let body = sluice_service::process::http_get(lag.port, "/groups").map(|(_, b)| b).unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    let at = v["at_ms"].as_i64().expect("at_ms");
    assert!(lag.group(group).is_some());
    at
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_status_is_reached_by_its_cause_and_left_when_it_goes() {
    let env = [("STALL_AFTER_MS", "3000"), ("STATUS_WINDOW_MS", "6000")];
    let names = ["stop", "stall", "rewind", "warn"].map(|s| (s, sluice_testkit::unique(&format!("lag-{s}"))));
    let topics: Vec<String> =
        futures_util::future::join_all(names.iter().map(|(s, _)| topic(format!("lag-{s}"), 1))).await;
    for t in &topics {
        produce(t, 0, 100, |_| now_ms()).await;
    }
    let [(_, stop), (_, stall), (_, rewind), (_, warn)] = &names;
    let groups: Vec<&str> = names.iter().map(|(_, g)| g.as_str()).collect();
    // STOP: committed, no member, not moving, lag.
    commit(stop, &topics[0], &[(0, 10)]);
    // STALL: a member owns the partition but does not move its offset.
    let member = common::Member::join(stall, &topics[1]);
    member.commit(10);
    // REWIND: forward, then back.
    commit(rewind, &topics[2], &[(0, 90)]);
    let lag = Lag::start(stop, &groups, &env).await;
    let status = |want: Status| move |g: &sluice_lag::picture::GroupPicture| g.status.status == want;
    let limit = Duration::from_secs(20);
    lag.until(rewind, limit, "read", |g| g.lag == Some(10)).await;
    commit(rewind, &topics[2], &[(0, 20)]);
    let r = lag.until(rewind, limit, "rewind", status(Status::Rewind)).await;
    assert!(r.status.reason.contains("went back"), "{r:?}");
    let s = lag.until(stop, limit, "stop", status(Status::Stop)).await;
    assert!(s.status.reason.starts_with(&format!("{}-0: no member owns it", topics[0])), "named: {s:?}");
    let st = lag.until(stall, limit, "stall", status(Status::Stall)).await;
    assert!(st.status.reason.contains("owned"), "{st:?}");
    // WARN: lag growing through the window while the group consumes.
    let warn_load = tokio::spawn(grow(topics[3].clone(), warn.clone(), Duration::from_secs(9)));
    lag.until(warn, limit, "warn", status(Status::Warn)).await;
    warn_load.await.expect("growth");
    // The causes go: every group catches up and moves on.
    commit(stop, &topics[0], &[(0, 100)]);
    member.commit(100);
    commit(rewind, &topics[2], &[(0, 100)]);
    for group in &groups {
        lag.until(group, limit, "ok again", status(Status::Ok)).await;
    }
    let metrics = lag.metrics();
    assert!(
        metrics.contains(&format!("sluice_lag_group_status{{consumergroup=\"{stop}\",status=\"ok\"}} 1")),
        "{metrics}"
    );
    assert!(
        !metrics.contains(&format!("sluice_lag_group_status{{consumergroup=\"{stop}\",status=\"stop\"}}")),
        "the old status series is gone"
    );
    drop(member);
}

/// 100 records/s produced, half of them consumed: a lag that grows.
async fn grow(topic: String, group: String, span: Duration) {
    let producer: rdkafka::producer::FutureProducer = sluice_testkit::kafka().producer().create().expect("producer");
    let started = Instant::now();
    let mut end = 100i64;
    while started.elapsed() < span {
        for _ in 0..10 {
            let record = rdkafka::producer::FutureRecord::to(&topic).partition(0).key("k").payload("v");
            producer.send(record, Duration::from_secs(10)).await.expect("sent");
            end += 1;
        }
        commit(&group, &topic, &[(0, 100 + (end - 100) / 2)]);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    commit(&group, &topic, &[(0, end)]);
}
