//! sluice-lag as a drop-in for kafka_exporter, on the real broker: every family of
//! kafka_exporter v1.9.0 (`contract/kafka_exporter-v1.9.0.json`) with its label names, every
//! topic (not only the watched groups'), the values checked against the broker's metadata as
//! librdkafka reads it, and the bundled dashboard's queries answered; and, like
//! kafka_exporter, every group by default, a new one found by itself.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::{Lag, commit, produce, topic};
use rdkafka::consumer::{BaseConsumer, Consumer};
use regex::Regex;

/// One exposition's series: family name → the label sets of its series.
type Series = BTreeMap<String, Vec<BTreeMap<String, String>>>;

fn series(text: &str) -> Series {
    let line = Regex::new(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: (-?[0-9]+))?$").expect("regex");
    let pair = Regex::new(r#"([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)""#).expect("regex");
    let mut out = Series::new();
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        let Some(c) = line.captures(l) else { continue };
        let mut labels: BTreeMap<String, String> = c
            .get(2)
            .map_or("", |m| m.as_str())
            .split_inclusive("\",")
            .flat_map(|p| pair.captures(p))
            .map(|p| (p[1].to_string(), p[2].to_string()))
            .collect();
        labels.insert("__value__".into(), c[3].to_string());
        if let Some(at) = c.get(4) {
            labels.insert("__timestamp__".into(), at.as_str().to_string());
        }
        out.entry(c[1].to_string()).or_default().push(labels);
    }
    out
}

/// The value of `family`'s series whose labels include `want`.
fn value(s: &Series, family: &str, want: &[(&str, &str)]) -> Option<f64> {
    s.get(family)?
        .iter()
        .find(|l| want.iter().all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v)))
        .and_then(|l| l["__value__"].parse().ok())
}

struct Contract {
    families: BTreeMap<String, Vec<String>>,
    not_exported: BTreeSet<String>,
    dashboard: Vec<String>,
}

fn contract() -> Contract {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/contract/kafka_exporter-v1.9.0.json");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("contract")).expect("json");
    let families = serde_json::from_value(json["families"].clone()).expect("families");
    let not_exported = json["not_exported"].as_object().expect("not_exported").keys().cloned().collect();
    let dashboard = serde_json::from_value(json["dashboard"].clone()).expect("dashboard");
    Contract { families, not_exported, dashboard }
}

/// Waits until sluice-lag exports what `ready` looks for.
async fn scrape_until(lag: &Lag, what: &str, ready: impl Fn(&Series) -> bool) -> Series {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = series(&lag.metrics());
        if ready(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "not {what} within 30 s:\n{}", lag.process.log_tail(20));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_exporter_s_families_for_every_topic_match_the_broker_s_metadata() {
    let read = topic("exp-read", 3).await;
    let unread = topic("exp-unread", 2).await;
    let excluded = topic("exp-excluded", 2).await;
    let group = sluice_testkit::unique("exp-group");
    for p in 0..3 {
        produce(&read, p, 10 + i64::from(p), |_| sluice_core::clock::now_ms()).await;
    }
    produce(&unread, 1, 7, |_| sluice_core::clock::now_ms()).await;
    produce(&excluded, 0, 4, |_| sluice_core::clock::now_ms()).await;
    commit(&group, &read, &[(0, 10), (1, 5), (2, 0)]);
    commit(&group, &excluded, &[(0, 1)]);
    let exclude = regex::escape(&excluded);
    let lag = Lag::start(&group, &[&group], &[("TOPICS_EXCLUDE_REGEX", exclude.as_str())]).await;
    let s = scrape_until(&lag, "showing the unread topic", |s| {
        value(s, "kafka_topic_partitions", &[("topic", &unread)]).is_some()
            && value(s, "kafka_consumergroup_lag", &[("topic", &read), ("partition", "2")]).is_some()
    })
    .await;
    let scraped_ms = sluice_core::clock::now_ms();

    // Readings exact as of their time: every series read from Kafka in one scrape carries
    // one sample timestamp, the time of the poll that read it; sluice-lag's own carry none,
    // nor do the verdicts (so that Prometheus marks a cleared one stale at once).
    let verdicts = ["sluice_lag_partition_status", "sluice_lag_group_status", "sluice_lag_group_cause"];
    for v in verdicts {
        let series = s.get(v).unwrap_or_else(|| panic!("{v} exported"));
        assert!(series.iter().all(|l| !l.contains_key("__timestamp__")), "{v} carries no time: {series:?}");
    }
    let stamps: BTreeSet<&str> = s
        .iter()
        .filter(|(f, _)| f.starts_with("kafka_") || f.starts_with("sluice_lag_partition"))
        .filter(|(f, _)| !verdicts.contains(&f.as_str()))
        .flat_map(|(_, series)| series.iter())
        .map(|l| l.get("__timestamp__").map_or("none", String::as_str))
        .collect();
    assert_eq!(stamps.len(), 1, "one poll's time on every reading: {stamps:?}");
    let read_at: i64 = stamps.first().expect("a stamp").parse().expect("a timestamp");
    assert!((0..5_000).contains(&(scraped_ms - read_at)), "read at {read_at}, scraped at {scraped_ms}");
    let own = &s["sluice_lag_last_poll_timestamp_seconds"][0];
    assert!(!own.contains_key("__timestamp__"), "sluice-lag's own series: {own:?}");

    // Every family, with exactly kafka_exporter's label names.
    let c = contract();
    for (family, labels) in c.families.iter().filter(|(f, _)| !c.not_exported.contains(*f)) {
        let found = s.get(family).unwrap_or_else(|| panic!("{family}: not exported"));
        let want: BTreeSet<&str> = labels.iter().map(String::as_str).chain(["__value__", "__timestamp__"]).collect();
        for l in found {
            let got: BTreeSet<&str> = l.keys().map(String::as_str).collect();
            assert_eq!(got, want, "{family}: label names");
        }
    }

    // The values, against the broker's metadata and watermarks as librdkafka reads them.
    let consumer: BaseConsumer = sluice_testkit::kafka().client().create().expect("client");
    let metadata = consumer.fetch_metadata(None, Duration::from_secs(10)).expect("metadata");
    assert_eq!(value(&s, "kafka_brokers", &[]), Some(metadata.brokers().len() as f64));
    for b in metadata.brokers() {
        let (id, address) = (b.id().to_string(), format!("{}:{}", b.host(), b.port()));
        assert_eq!(value(&s, "kafka_broker_info", &[("id", &id), ("address", &address)]), Some(1.0), "broker {id}");
    }
    for t in metadata.topics().iter().filter(|t| [&read, &unread].contains(&&t.name().to_string())) {
        let name = t.name();
        assert_eq!(value(&s, "kafka_topic_partitions", &[("topic", name)]), Some(t.partitions().len() as f64));
        for p in t.partitions() {
            let partition = p.id().to_string();
            let at = [("topic", name), ("partition", partition.as_str())];
            let (low, high) = consumer.fetch_watermarks(name, p.id(), Duration::from_secs(10)).expect("watermarks");
            let flag = |yes: bool| Some(if yes { 1.0 } else { 0.0 });
            assert_eq!(value(&s, "kafka_topic_partition_current_offset", &at), Some(high as f64), "{name}-{partition}");
            assert_eq!(value(&s, "kafka_topic_partition_oldest_offset", &at), Some(low as f64));
            assert_eq!(value(&s, "kafka_topic_partition_leader", &at), Some(f64::from(p.leader())));
            assert_eq!(value(&s, "kafka_topic_partition_replicas", &at), Some(p.replicas().len() as f64));
            assert_eq!(value(&s, "kafka_topic_partition_in_sync_replica", &at), Some(p.isr().len() as f64));
            assert_eq!(
                value(&s, "kafka_topic_partition_leader_is_preferred", &at),
                flag(p.replicas()[0] == p.leader())
            );
            assert_eq!(
                value(&s, "kafka_topic_partition_under_replicated_partition", &at),
                flag(p.isr().len() < p.replicas().len())
            );
        }
    }
    assert_eq!(value(&s, "kafka_topic_partition_current_offset", &[("topic", &unread), ("partition", "1")]), Some(7.0));
    assert_eq!(value(&s, "kafka_consumergroup_lag", &[("topic", &read), ("partition", "1")]), Some(6.0));
    assert_eq!(value(&s, "kafka_consumergroup_lag_sum", &[("consumergroup", &group), ("topic", &read)]), Some(18.0));

    // The excluded topic: no topic series, but the group's lag on it is still read.
    for family in c.families.keys().filter(|f| f.starts_with("kafka_topic_")) {
        assert_eq!(value(&s, family, &[("topic", &excluded)]), None, "{family}: {excluded} is excluded");
    }
    assert_eq!(value(&s, "kafka_consumergroup_lag", &[("topic", &excluded), ("partition", "0")]), Some(3.0));

    // The dashboard: every metric it queries is exported with every label it selects or
    // groups by (`instance` and `job` are the scrape's), for the test's topics.
    let metric = Regex::new(r"\b(kafka_[a-z_]+)\b").expect("regex");
    let selected = Regex::new(r"([a-z_]+)\s*(?:=~|!=|=)").expect("regex");
    let grouped = Regex::new(r"by\s*\(([^)]*)\)").expect("regex");
    for expr in &c.dashboard {
        let names: Vec<&str> = metric.captures_iter(expr).map(|m| m.get(1).expect("name").as_str()).collect();
        assert!(!names.is_empty(), "{expr}: no metric");
        let mut labels: BTreeSet<String> = selected.captures_iter(expr).map(|m| m[1].to_string()).collect();
        for g in grouped.captures_iter(expr) {
            labels.extend(g[1].split(',').map(|l| l.trim().to_string()));
        }
        labels.retain(|l| !["instance", "job"].contains(&l.as_str()));
        for name in names {
            let family = &c.families[name];
            for l in &labels {
                assert!(family.contains(l), "{expr}: {name} has no label {l}");
            }
            let test_topic = if name.starts_with("kafka_consumergroup") { &read } else { &unread };
            assert!(value(&s, name, &[("topic", test_topic)]).is_some(), "{expr}: no {name} series for {test_topic}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_groups_named_every_group_is_watched_and_a_new_one_appears_by_itself() {
    let read = topic("all-groups", 2).await;
    produce(&read, 0, 8, |_| sluice_core::clock::now_ms()).await;
    produce(&read, 1, 5, |_| sluice_core::clock::now_ms()).await;
    let (before, after, excluded) = (
        sluice_testkit::unique("all-before"),
        sluice_testkit::unique("all-after"),
        sluice_testkit::unique("all-excluded"),
    );
    commit(&before, &read, &[(0, 3), (1, 5)]);
    commit(&excluded, &read, &[(0, 1)]);
    let exclude = regex::escape(&excluded);
    let lag = Lag::start(&before, &[], &[("GROUPS_EXCLUDE_REGEX", exclude.as_str())]).await;
    let lag_of = |s: &Series, group: &str, partition: &str| {
        value(s, "kafka_consumergroup_lag", &[("consumergroup", group), ("topic", &read), ("partition", partition)])
    };
    let s =
        scrape_until(&lag, "showing the group committed before the start", |s| lag_of(s, &before, "0").is_some()).await;
    assert_eq!((lag_of(&s, &before, "0"), lag_of(&s, &before, "1")), (Some(5.0), Some(0.0)));

    // A team's new group, committed after the start: found by the next polls' ListGroups.
    commit(&after, &read, &[(1, 2)]);
    let s = scrape_until(&lag, "showing the group created after the start", |s| lag_of(s, &after, "1").is_some()).await;
    assert_eq!(lag_of(&s, &after, "1"), Some(3.0));
    let picture = lag.group(&after).expect("the new group's picture at /groups");
    assert_eq!(picture.partitions.iter().filter(|p| p.topic == read).count(), 2, "{picture:#?}");

    // The excluded group existed before both and was listed by every poll: never watched.
    assert!(lag.group(&excluded).is_none(), "{excluded} is excluded");
    let text = lag.metrics();
    assert!(!text.contains(&excluded), "{excluded} in /metrics");
    assert!(text.contains(&before) && text.contains(&after));
}
