//! chainsim's Kafka entry point against the real broker: every transaction
//! is published once per pool it touches, keyed by that pool; each pool's
//! records sit in one partition in chain order; nothing is lost.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use prost::Message;
use sluice_chainsim::feed::{FeedOptions, feed};
use sluice_chainsim::{Chain, ChainConfig};
use sluice_core::route::record_keys;
use sluice_kafka::ensure_topics;
use sluice_kafka::topics::TopicSpec;
use sluice_proto::chain::v1::ChainTransaction;
use sluice_testkit::{consume, kafka, unique};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feed_publishes_one_record_per_pool_keyed_and_ordered() {
    let kafka = kafka();
    let topic = unique("test.feed.chain.transactions");
    ensure_topics(&kafka, &[TopicSpec::new(&topic, 12)], Duration::from_secs(60)).await.expect("topic created");
    let config = ChainConfig { seed: 5, tx_per_sec: 5_000, ..ChainConfig::default() };
    let options = FeedOptions { max_transactions: Some(20_000), ..FeedOptions::new(&topic) };
    let report = feed(Chain::new(config.clone()).expect("valid"), &kafka, &options).await.expect("feed");
    assert!(report.transactions >= 20_000);
    assert!(report.records > report.transactions, "multi-hop transactions add records");
    assert_eq!(report.records_per_partition.values().sum::<u64>(), report.records, "every record acknowledged");

    // The same chain, regenerated, says exactly which records must exist.
    let mut chain = Chain::new(config).expect("valid");
    let mut expected: HashMap<(String, String), u32> = HashMap::new();
    let mut produced = 0u64;
    while produced < report.transactions {
        for g in chain.next_block().transactions {
            produced += 1;
            for key in record_keys(&g.tx) {
                *expected.entry((key.to_string(), g.tx.signature.clone())).or_default() += 1;
            }
        }
    }

    let records = consume(&kafka, &topic, report.records as usize, Duration::from_secs(120)).await;
    assert_eq!(records.len() as u64, report.records, "every record is readable");
    let mut seen: HashMap<(String, String), u32> = HashMap::new();
    let mut partition_of: HashMap<Vec<u8>, HashSet<i32>> = HashMap::new();
    let mut last_position: HashMap<Vec<u8>, (i32, i64, u64, u32)> = HashMap::new();
    let mut by_offset = records.clone();
    by_offset.sort_by_key(|r| (r.partition, r.offset));
    for r in &by_offset {
        let tx = ChainTransaction::decode(r.payload.as_slice()).expect("payload is a ChainTransaction");
        let key = String::from_utf8(r.key.clone()).expect("utf-8 key");
        assert!(record_keys(&tx).contains(&key.as_str()), "key {key} is a pool the transaction touches");
        *seen.entry((key, tx.signature.clone())).or_default() += 1;
        partition_of.entry(r.key.clone()).or_default().insert(r.partition);
        let position = (r.partition, r.offset, tx.slot, tx.index);
        if let Some(prev) = last_position.insert(r.key.clone(), position) {
            assert!((prev.2, prev.3) < (tx.slot, tx.index), "a pool's records are in chain order");
        }
    }
    assert_eq!(seen, expected, "exactly one record per (pool, transaction), none missing");
    assert!(partition_of.values().all(|p| p.len() == 1), "each pool lives in one partition");
    assert!(partition_of.len() > 64, "pools plus unknown-venue keys: {}", partition_of.len());
}
