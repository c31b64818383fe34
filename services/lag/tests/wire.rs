//! The wire client against the real broker: records produced with known
//! timestamps, a group's offsets committed where the test says; the client
//! must read back exactly the offsets, the commits, the group and the
//! timestamps of the records at the committed offsets.

use std::collections::HashMap;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};
use sluice_kafka::topics::{TopicSpec, ensure_topics};
use sluice_lag::wire::security::Security;
use sluice_lag::wire::{Cluster, Tp};

const PARTITIONS: i32 = 3;
const PER_PARTITION: i64 = 40;
/// Record `i` of partition `p` has timestamp BASE + p·10⁶ + i·1000, BASE an hour before the
/// test started: inside the stack's 24 h retention (a fixed date years back let the broker's
/// retention check delete partition 0's records when it ran mid-test: earliest read 40).
static BASE: std::sync::LazyLock<i64> = std::sync::LazyLock::new(|| {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_millis();
    i64::try_from(now).expect("ms") / 1000 * 1000 - 3_600_000
});

fn stamp(partition: i32, index: i64) -> i64 {
    *BASE + i64::from(partition) * 1_000_000 + index * 1000
}

async fn produce(topic: &str) {
    let kafka = sluice_testkit::kafka();
    let producer: FutureProducer = kafka.producer().create().expect("producer");
    for p in 0..PARTITIONS {
        for i in 0..PER_PARTITION {
            let record = FutureRecord::to(topic).partition(p).key("k").payload("v").timestamp(stamp(p, i));
            producer.send(record, Duration::from_secs(10)).await.expect("sent");
        }
    }
}

/// Commits `offsets` (partition → offset) for `group` without joining it.
fn commit(group: &str, topic: &str, offsets: &[(i32, i64)]) {
    let consumer: BaseConsumer = sluice_testkit::kafka().client().set("group.id", group).create().expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for (p, o) in offsets {
        tpl.add_partition_offset(topic, *p, Offset::Offset(*o)).expect("offset");
    }
    consumer.commit(&tpl, rdkafka::consumer::CommitMode::Sync).expect("commit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_commits_groups_and_record_times_read_back_exactly() {
    let topic = sluice_testkit::unique("lag-wire");
    let group = sluice_testkit::unique("lag-wire-group");
    let kafka = sluice_testkit::kafka();
    ensure_topics(&kafka, &[TopicSpec::new(&topic, PARTITIONS)], Duration::from_secs(30)).await.expect("topic");
    produce(&topic).await;
    // Partition 0 caught up, 1 at 10, 2 never committed.
    commit(&group, &topic, &[(0, PER_PARTITION), (1, 10)]);

    let cluster = Cluster::new(&kafka.brokers, Security::default(), Duration::from_secs(10));
    let topology = cluster.topology().await.expect("metadata");
    let (leaders, missing) = topology.leaders([topic.as_str(), "no-such-topic-here"]);
    assert_eq!(leaders.len(), PARTITIONS as usize);
    assert!(missing.contains_key("no-such-topic-here"), "{missing:?}");

    let offsets = cluster.offsets(&leaders).await;
    // One connection (ApiVersions), one Metadata, one ListOffsets per kind of offset.
    let sent: Vec<(&str, u64)> = [("ApiVersions", 1), ("Metadata", 1), ("ListOffsets", 3)].into();
    assert_eq!(cluster.requests(), sent.iter().map(|(a, n)| (a.to_string(), *n)).collect(), "requests counted");
    for p in 0..PARTITIONS {
        let o = offsets[&Tp::new(&topic, p)].clone().expect("offsets");
        assert_eq!((o.earliest, o.latest, o.stable), (0, PER_PARTITION, PER_PARTITION), "partition {p}");
    }

    let coordinators = cluster.coordinators(std::slice::from_ref(&group)).await;
    assert!(coordinators[&group].is_ok(), "{coordinators:?}");
    let committed = cluster.committed(&coordinators).await;
    let committed = committed[&group].clone().expect("committed");
    let expected: HashMap<Tp, i64> = [(Tp::new(&topic, 0), PER_PARTITION), (Tp::new(&topic, 1), 10)].into();
    assert_eq!(committed, expected, "no entry for the partition never committed");

    let described = cluster.describe(&coordinators).await;
    let described = described[&group].clone().expect("described");
    assert_eq!((described.state.as_str(), described.members.len()), ("Empty", 0), "{described:?}");
    let listed = cluster.list_groups().await.expect("groups");
    assert!(listed.iter().any(|g| g.group == group), "{listed:?}");

    // Two offsets of partition 1 in one fetch.
    let wanted: HashMap<Tp, Vec<i64>> =
        [(Tp::new(&topic, 1), vec![10, 25]), (Tp::new(&topic, 2), vec![0]), (Tp::new(&topic, 0), vec![PER_PARTITION])]
            .into();
    let times = cluster.record_times(&leaders, &wanted).await;
    let at = |p: i32| -> Vec<(i64, i64, i64, bool)> {
        let found = times[&Tp::new(&topic, p)].clone().expect("fetched");
        found.iter().map(|(at, r)| (*at, r.offset, r.timestamp_ms, r.log_append)).collect()
    };
    assert_eq!(at(1), [(10, 10, stamp(1, 10), false), (25, 25, stamp(1, 25), false)]);
    assert_eq!(at(2), [(0, 0, stamp(2, 0), false)]);
    assert_eq!(at(0), [], "nothing at the log end yet");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_secure_listener_with_either_scram_mechanism() {
    let secure = sluice_testkit::secure_kafka();
    for mechanism in ["SCRAM-SHA-512", "SCRAM-SHA-256"] {
        let props: Vec<(String, String)> = [
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", mechanism),
            ("ssl.ca.location", secure.ca.as_str()),
            ("sasl.username", secure.username.as_str()),
            ("sasl.password", secure.password.as_str()),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let security = Security::from_properties(&props).expect("valid");
        let cluster = Cluster::new(&secure.brokers, security.clone(), Duration::from_secs(10));
        let groups = cluster.list_groups().await;
        assert!(groups.is_ok(), "{mechanism}: {groups:?}");
        // A wrong password is refused with a SASL error, not a hang.
        let mut wrong = security;
        if let Some(s) = wrong.sasl.as_mut() {
            s.password = "wrong".into();
        }
        let refused = Cluster::new(&secure.brokers, wrong, Duration::from_secs(10)).list_groups().await;
        assert!(matches!(refused, Err(sluice_lag::wire::WireError::Auth(_))), "{mechanism}: {refused:?}");
    }
}
