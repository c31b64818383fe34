//! A Redis that comes back empty, against the real stack: the processors
//! must tell it from the store their state lives in (the generation marker,
//! and the generation their commits record in Kafka), write nothing into
//! it, say so (readiness, metric), and resume by themselves once the right
//! store is back, with every effect exactly once.

#![allow(clippy::unwrap_used)]

mod jepsen;

use std::time::{Duration, Instant};

use jepsen::{OwnRedis, Processor, Scenario, finish};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::topic_partition_list::TopicPartitionList;

const TRANSACTIONS: u64 = 40_000;

fn replaced(p: &Processor) -> Option<f64> {
    let text = jepsen::admin_body(p.admin_port, "/metrics");
    text.contains("sluice_processor_state_store_replaced")
        .then(|| sluice_testkit::metric(&text, "sluice_processor_state_store_replaced", ""))
}

async fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < timeout, "{what}: not within {timeout:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The generations the group's commits record (their metadata).
fn recorded(s: &Scenario) -> Vec<String> {
    let consumer: BaseConsumer = s.kafka.client().set("group.id", &s.group).create().unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..12 {
        tpl.add_partition(&s.input, p);
    }
    let committed = consumer.committed_offsets(tpl, Duration::from_secs(5)).expect("committed offsets");
    committed.elements().iter().map(|e| e.metadata().to_string()).filter(|m| !m.is_empty()).collect()
}

async fn dbsize(url: &str) -> i64 {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.expect("redis");
    redis::cmd("DBSIZE").query_async(&mut conn).await.expect("DBSIZE")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_comes_back_empty_stops_the_writes_until_its_data_is_back() {
    let tmp = std::env::temp_dir().join(sluice_testkit::unique("wiped-redis"));
    let mut redis = OwnRedis::start(tmp.clone());
    let s = Scenario::new("wiped", &redis.url(), 4_000).await;
    let feeding = s.feed_in_background(TRANSACTIONS);
    let a = s.spawn("a");
    s.wait_committed(TRANSACTIONS, 0.2, Duration::from_secs(300)).await;

    // Every commit records the generation of the store the effects went to.
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let generation: String =
        redis::cmd("GET").arg(format!("{}generation", s.prefix)).query_async(&mut conn).await.expect("a marker");
    let stamps = recorded(&s);
    assert!(!stamps.is_empty(), "the commits carry metadata");
    assert!(stamps.iter().all(|m| *m == format!("generation={generation}")), "{stamps:?} vs {generation}");

    // Redis comes back on an empty volume (its data set aside, not lost).
    redis.stop();
    let (volume, aside) = (tmp.join("dump.rdb"), tmp.join("aside.rdb"));
    std::fs::rename(&volume, &aside).expect("the stopped Redis saved its data");
    redis.restart();
    wait_for("a reports the store replaced", Duration::from_secs(30), || replaced(&a) == Some(1.0)).await;
    assert_eq!(a.admin_status("/ready"), 503, "not ready while the store is another");
    // A processor started now does not take the empty store for a new one:
    // the commits in Kafka record a generation it lacks.
    let b = s.spawn("b");
    wait_for("b reports the store replaced", Duration::from_secs(60), || replaced(&b) == Some(1.0)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(dbsize(&redis.url()).await, 0, "nothing was written into the empty store, not even a marker");

    // The right volume is back: work resumes by itself, and nothing was
    // lost or applied twice.
    redis.stop();
    std::fs::rename(&aside, &volume).expect("putting the data back");
    redis.restart();
    for p in [&a, &b] {
        wait_for("writes resume", Duration::from_secs(30), || replaced(p) == Some(0.0)).await;
    }
    let fed = feeding.await.expect("feed task");
    finish(&s, &fed, vec![a, b]).await;
    let _ = std::fs::remove_dir_all(&tmp);
}
