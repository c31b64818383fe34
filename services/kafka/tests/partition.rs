//! The partition the ingest names for a record is the one librdkafka's own
//! default partitioner chooses, on the real broker: records keyed like the
//! ingest's (pool addresses, signatures) are sent with no partition named,
//! and each must land where `partition::by_key` says.

use std::time::Duration;

use sluice_kafka::{PipelinedProducer, TopicSpec, ensure_topics, partition};
use sluice_testkit::{consume, unique};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_key_names_the_partition_librdkafkas_default_partitioner_chooses() {
    let kafka = sluice_testkit::kafka();
    for partitions in [1usize, 7, 12] {
        let topic = unique("partitioner");
        ensure_topics(&kafka, &[TopicSpec::new(&topic, partitions as i32)], Duration::from_secs(60))
            .await
            .expect("topic");
        let mut producer = PipelinedProducer::new(&kafka, 256).expect("producer");
        let keys: Vec<String> = (0..300).map(|i| format!("{}Pool{i:05}", ["Ray", "Orca", "So1"][i % 3])).collect();
        for (i, key) in keys.iter().enumerate() {
            producer.send(&topic, key.as_bytes(), &(i as u32).to_be_bytes(), i).await.expect("send");
        }
        producer.flush().await.expect("flush");
        let records = consume(&kafka, &topic, keys.len(), Duration::from_secs(30)).await;
        assert_eq!(records.len(), keys.len());
        let mut used = std::collections::HashSet::new();
        for r in &records {
            let named = partition::by_key(&r.key, partitions);
            assert_eq!(named, Some(r.partition), "{partitions} partitions, key {:?}", String::from_utf8_lossy(&r.key));
            used.insert(r.partition);
        }
        assert_eq!(used.len(), partitions, "the keys reach every partition: the check compares real choices");
    }
}
