//! Freshness end to end: the processor's `sluice_processor_visible_age_seconds` (a swap's age,
//! from its block, when a `read_committed` reader can first read it) against what such a
//! reader sees, on a chain fed live; and a delayed commit (a longer transaction interval)
//! moves it by about half the delay, as a reader sees it too.

mod jepsen;

use std::time::{Duration, Instant};

use jepsen::Scenario;
use prost::Message as _;
use rdkafka::Message as _;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use sluice_chainsim::feed::{FeedOptions, feed};
use sluice_chainsim::{Chain, ChainConfig};
use sluice_core::clock::now_ms;
use sluice_proto::dex::v1::Swap;
use sluice_testkit::unique;

const FEED: Duration = Duration::from_secs(8);
/// The scenario's swaps topic's partitions (`Scenario::new`).
const SWAPS_PARTITIONS: i32 = 12;

/// Mean ages (seconds) of one run: the processor's own figure and a reader's.
#[derive(Debug)]
struct Ages {
    processor: f64,
    reader: f64,
}

/// A `read_committed` reader of the swaps topic from its start for `limit`: each swap's age
/// when it arrived. Assigned, not subscribed (no group join to wait for), and answered as
/// soon as a record is readable (`fetch.wait.max.ms` 10).
fn read_ages(s: &Scenario, limit: Duration) -> Vec<f64> {
    let consumer: BaseConsumer = s
        .kafka
        .client()
        .set("group.id", unique("freshness-reader"))
        .set("isolation.level", "read_committed")
        .set("fetch.wait.max.ms", "10")
        .create()
        .expect("reader");
    let mut partitions = TopicPartitionList::new();
    for p in 0..SWAPS_PARTITIONS {
        partitions.add_partition_offset(&s.swaps, p, Offset::Beginning).expect("partition");
    }
    consumer.assign(&partitions).expect("assign");
    let (mut ages, deadline) = (Vec::new(), Instant::now() + limit);
    while Instant::now() < deadline {
        let Some(Ok(message)) = consumer.poll(Duration::from_millis(50)) else { continue };
        let now = now_ms();
        let swap = Swap::decode(message.payload().unwrap_or_default()).expect("a swap");
        ages.push((now - swap.block_time_ms) as f64 / 1000.0);
    }
    ages
}

async fn run(transaction_interval_ms: u64) -> Ages {
    let mut s = Scenario::new("freshness", &sluice_testkit::redis_url(), 1_000).await;
    s.env.push(("EXACTLY_ONCE".into(), "true".into()));
    s.env.push(("TRANSACTION_INTERVAL_MS".into(), transaction_interval_ms.to_string()));
    // The timeout must be at least ten intervals.
    s.env.push(("TRANSACTION_TIMEOUT_MS".into(), (transaction_interval_ms * 10).max(10_000).to_string()));
    let processor = s.spawn("a");
    processor.wait_assigned(Duration::from_secs(60)).await;
    let reader = {
        let s = s.clone();
        tokio::task::spawn_blocking(move || read_ages(&s, FEED + Duration::from_secs(6)))
    };
    // Live: each block is written at its own time, so its age starts at the block.
    let live = Chain::new(ChainConfig { genesis_ms: now_ms(), ..s.chain.clone() }).expect("chain");
    let options = FeedOptions { paced: true, max_duration: Some(FEED), ..FeedOptions::new(&s.input) };
    feed(live, &s.kafka, &options).await.expect("feed");
    let reader = reader.await.expect("reader");
    let metrics = jepsen::admin_body(processor.admin_port, "/metrics");
    processor.terminate();
    let topic = format!("topic=\"{}\"", s.swaps);
    let sum = sluice_testkit::metric(&metrics, "sluice_processor_visible_age_seconds_sum", &topic);
    let count = sluice_testkit::metric(&metrics, "sluice_processor_visible_age_seconds_count", &topic);
    assert!(count > 1_000.0 && reader.len() > 1_000, "swaps seen: {count} by the processor, {} read", reader.len());
    Ages { processor: sum / count, reader: reader.iter().sum::<f64>() / reader.len() as f64 }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_age_a_reader_sees_is_the_processor_s_and_a_delayed_commit_moves_it() {
    let prompt = run(100).await;
    let delayed = run(2_000).await;
    eprintln!("freshness: interval 100 ms {prompt:?}; interval 2000 ms {delayed:?}");
    for (what, ages) in [("100 ms", &prompt), ("2000 ms", &delayed)] {
        // The reader sees a swap at or after it became readable, and soon after.
        let late = ages.reader - ages.processor;
        assert!(
            (-0.05..0.3).contains(&late),
            "{what}: the reader saw swaps {late:.3} s after the processor's figure: {ages:?}"
        );
    }
    // A commit every 2 s instead of every 0.1 s holds a swap about 0.95 s longer on average.
    let moved = delayed.processor - prompt.processor;
    assert!(
        (0.5..2.0).contains(&moved),
        "the delayed commit moved freshness by {moved:.3} s: {prompt:?} → {delayed:?}"
    );
}
