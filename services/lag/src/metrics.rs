//! sluice-lag's Prometheus metrics. What kafka_exporter exports has its
//! names and labels (`kafka_consumergroup_lag{consumergroup,topic,partition}`
//! and the rest), so dashboards and alerts built on it (Grafana 7589,
//! Strimzi's) work unchanged; everything else is `sluice_lag_…`.
//!
//! Readings are exact as of their poll, and say so: every series read from
//! Kafka (kafka_exporter's, Burrow's and sluice-lag's per group and partition)
//! carries the poll's time as its sample timestamp, so side by side with an
//! exporter that reads at the scrape the two agree at equal times, and
//! `rate()` divides by the time between reads, not between scrapes. Series
//! about sluice-lag itself (poll durations, errors, the last polls) carry none.
//!
//! Values are never made up: an uncommitted partition has no lag series (it
//! has `sluice_lag_uncommitted`), an unknown time lag or a partition that
//! never drains has no series, and a series whose partition or group is gone
//! is removed at the next poll. Statuses, states and causes are one series at 1 per
//! partition or group, labelled with the current one, and carry no timestamp: Prometheus
//! marks the one before stale at the first scrape without it (a stamped one would stay in
//! queries for the 5-minute lookback, beside the new one).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use prometheus::{Histogram, HistogramVec, IntCounterVec, IntGauge, Registry};
use sluice_service::metrics::Registrar;

use crate::picture::Picture;
use crate::poller::{PollErrors, Stage};

use exposition::{Family, Published};
use own::{GT, GTP, Own, TP};

mod burrow;
pub mod exposition;
mod own;

/// kafka_exporter's families, with its names and labels (`kafka_…`).
#[derive(Debug)]
struct Exporter {
    brokers: Family,
    broker_info: Family,
    topic_partitions: Family,
    topic_offset: Family,
    topic_oldest: Family,
    leader: Family,
    replicas: Family,
    in_sync: Family,
    preferred: Family,
    under_replicated: Family,
    lag: Family,
    lag_sum: Family,
    current_offset: Family,
    current_offset_sum: Family,
    members: Family,
}

impl Exporter {
    fn new() -> Self {
        let r = "kafka";
        Self {
            brokers: Family::new(r, "brokers", "Brokers in the cluster's metadata.", &[]),
            broker_info: Family::new(
                r,
                "broker_info",
                "A broker: its id and advertised address (1).",
                &["id", "address"],
            ),
            topic_partitions: Family::new(r, "topic_partitions", "Partitions of the topic.", &["topic"]),
            topic_offset: Family::new(r, "topic_partition_current_offset", "The partition's log end offset.", &TP),
            topic_oldest: Family::new(r, "topic_partition_oldest_offset", "The partition's log start offset.", &TP),
            leader: Family::new(r, "topic_partition_leader", "The id of the broker leading the partition.", &TP),
            replicas: Family::new(r, "topic_partition_replicas", "Replicas assigned to the partition.", &TP),
            in_sync: Family::new(r, "topic_partition_in_sync_replica", "Replicas of the partition in sync.", &TP),
            preferred: Family::new(
                r,
                "topic_partition_leader_is_preferred",
                "1 if the partition is led by its preferred replica (the first assigned).",
                &TP,
            ),
            under_replicated: Family::new(
                r,
                "topic_partition_under_replicated_partition",
                "1 if fewer of the partition's replicas are in sync than assigned.",
                &TP,
            ),
            lag: Family::new(
                r,
                "consumergroup_lag",
                "Records the group has not consumed yet (kafka_exporter's name).",
                &GTP,
            ),
            lag_sum: Family::new(
                r,
                "consumergroup_lag_sum",
                "Lag of the group on the topic, over its partitions.",
                &GT,
            ),
            current_offset: Family::new(r, "consumergroup_current_offset", "The group's committed offset.", &GTP),
            current_offset_sum: Family::new(
                r,
                "consumergroup_current_offset_sum",
                "The group's committed offsets on the topic, summed.",
                &GT,
            ),
            members: Family::new(r, "consumergroup_members", "Members of the group.", &["consumergroup"]),
        }
    }

    fn families(&self) -> [&Family; 15] {
        [
            &self.brokers,
            &self.broker_info,
            &self.topic_partitions,
            &self.topic_offset,
            &self.topic_oldest,
            &self.leader,
            &self.replicas,
            &self.in_sync,
            &self.preferred,
            &self.under_replicated,
            &self.lag,
            &self.lag_sum,
            &self.current_offset,
            &self.current_offset_sum,
            &self.members,
        ]
    }

    /// The brokers and the topics the topic series cover.
    fn publish_cluster(&self, picture: &Picture) {
        if let Some(brokers) = &picture.brokers {
            self.brokers.set(&[], brokers.len() as f64);
            for b in brokers {
                self.broker_info.set(&[&b.id.to_string(), &b.address], 1.0);
            }
        }
        let flag = |yes: bool| if yes { 1.0 } else { 0.0 };
        for t in &picture.topics {
            let topic = t.topic.as_str();
            self.topic_partitions.set(&[topic], t.partitions.len() as f64);
            for p in &t.partitions {
                let (placement, partition) = (&p.placement, p.placement.partition.to_string());
                let labels = [topic, partition.as_str()];
                if let Some(leader) = placement.leader {
                    self.leader.set(&labels, f64::from(leader));
                }
                self.replicas.set(&labels, placement.replicas.len() as f64);
                self.in_sync.set(&labels, placement.in_sync.len() as f64);
                self.preferred.set(&labels, flag(placement.leader_is_preferred()));
                self.under_replicated.set(&labels, flag(placement.under_replicated()));
                if let Some(log) = p.log {
                    self.topic_offset.set(&labels, log.end as f64);
                    self.topic_oldest.set(&labels, log.start as f64);
                }
            }
        }
    }
}

/// Every metric sluice-lag exports.
#[derive(Debug)]
pub struct Metrics {
    /// sluice-lag's own series; `/metrics` is this registry's text followed by the
    /// readings' ([`Metrics::append_readings`]).
    pub registry: Registry,
    /// The readings of the last poll, as text.
    readings: Arc<Published>,
    exporter: Exporter,
    own: Own,
    /// Burrow's series, with `BURROW_CLUSTER`.
    burrow: Option<burrow::Burrow>,
    /// Every rebalance's pause, per group (a group no longer watched is removed).
    rebalance_pauses: HistogramVec,
    paused_groups: Mutex<HashSet<String>>,
    poll_duration: Histogram,
    poll_errors: IntCounterVec,
    requests: IntCounterVec,
    last_poll: IntGauge,
    last_complete_poll: IntGauge,
    groups: IntGauge,
}

impl Metrics {
    pub fn new() -> Self {
        Self::with_burrow(None)
    }

    /// With Burrow's series too, under `cluster` (`BURROW_CLUSTER`).
    pub fn with_burrow(cluster: Option<&str>) -> Self {
        let registry = Registry::new();
        let own = Registrar::new(&registry, "sluice_lag");
        let poll_errors = own.counters("poll_errors_total", "Failed reads in polls, by stage.", &["stage"]);
        for stage in Stage::ALL {
            poll_errors.with_label_values(&[stage.as_str()]);
        }
        let pauses = [1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0];
        let poll_buckets = prometheus::exponential_buckets(0.005, 2.0, 14).expect("buckets");
        Self {
            readings: Arc::default(),
            exporter: Exporter::new(),
            own: Own::new(),
            burrow: cluster.map(burrow::Burrow::new),
            rebalance_pauses: own.histograms(
                "rebalance_pause_seconds",
                "How long consumption stopped in each rebalance seen (to a poll interval).",
                &["consumergroup"],
                &pauses,
            ),
            paused_groups: Mutex::default(),
            poll_duration: own.histogram(
                "poll_duration_seconds",
                "How long a poll of the cluster took.",
                &poll_buckets,
            ),
            poll_errors,
            requests: own.counters(
                "requests_total",
                "Kafka requests sent, by API (ApiVersions and SASL included).",
                &["api"],
            ),
            last_poll: own.gauge(
                "last_poll_timestamp_seconds",
                "When the last poll read, Unix seconds, whether or not it read everything.",
            ),
            last_complete_poll: own.gauge(
                "last_complete_poll_timestamp_seconds",
                "When the last poll that read everything it asked for read, Unix seconds: alert on its age.",
            ),
            groups: own.gauge("groups", "Groups watched."),
            registry,
        }
    }

    fn families(&self) -> impl Iterator<Item = &Family> {
        let burrow = self.burrow.iter().flat_map(burrow::Burrow::families);
        self.exporter.families().into_iter().chain(self.own.families()).chain(burrow)
    }

    /// Publishes a poll: its picture, how long it took, what failed. The readings' text
    /// is written whole and then swapped in, so a scrape sees one poll or the next.
    pub fn publish(&self, picture: &Picture, took_seconds: f64, errors: &PollErrors) {
        for family in self.families() {
            family.begin(picture.at_ms);
        }
        for group in &picture.groups {
            self.publish_group(group);
        }
        self.exporter.publish_cluster(picture);
        if let Some(b) = &self.burrow {
            b.publish(picture);
        }
        self.readings.swap(self.families().map(Family::finish).filter(|text| !text.is_empty()).collect());
        self.publish_pauses(picture);
        for (stage, list) in errors {
            self.poll_errors.with_label_values(&[stage.as_str()]).inc_by(list.len() as u64);
        }
        self.poll_duration.observe(took_seconds);
        self.last_poll.set(picture.at_ms / 1000);
        if errors.is_empty() {
            self.last_complete_poll.set(picture.at_ms / 1000);
        }
        self.groups.set(picture.groups.len() as i64);
    }

    /// Appends the last poll's readings to `body` (`/metrics` after the registry's text).
    pub fn append_readings(&self) -> impl Fn(&mut Vec<u8>) + Send + Sync + 'static {
        let readings = Arc::clone(&self.readings);
        move |body| readings.write(body)
    }

    /// The whole exposition, as `/metrics` serves it.
    pub fn text(&self) -> String {
        let mut body = Vec::new();
        prometheus::Encoder::encode(&prometheus::TextEncoder::new(), &self.registry.gather(), &mut body).expect("text");
        self.readings.write(&mut body);
        String::from_utf8(body).expect("utf-8")
    }

    /// Observes the rebalance pauses that ended in this poll; drops the
    /// histograms of groups no longer watched.
    fn publish_pauses(&self, picture: &Picture) {
        let mut seen = self.paused_groups.lock().unwrap_or_else(|e| e.into_inner());
        let now: HashSet<String> = picture.groups.iter().map(|g| g.group.clone()).collect();
        for gone in seen.difference(&now) {
            let _ = self.rebalance_pauses.remove_label_values(&[gone]);
        }
        seen.retain(|g| now.contains(g));
        for g in picture.groups.iter().filter(|g| !g.pauses_ended_ms.is_empty()) {
            let histogram = self.rebalance_pauses.with_label_values(&[&g.group]);
            for pause in &g.pauses_ended_ms {
                histogram.observe(*pause as f64 / 1000.0);
            }
            seen.insert(g.group.clone());
        }
    }

    /// Sets the request counters to the wire client's totals (by API name).
    pub fn count_requests(&self, totals: &std::collections::BTreeMap<String, u64>) {
        for (api, total) in totals {
            let counter = self.requests.with_label_values(&[api.as_str()]);
            counter.inc_by(total.saturating_sub(counter.get()));
        }
    }

    fn publish_group(&self, g: &crate::picture::GroupPicture) {
        let group = g.group.as_str();
        self.own.group_status.set(&[group, g.status.status.as_str()], 1.0);
        if g.error.is_none() {
            self.own.causes.cause.set(&[group, g.cause.cause.as_str()], 1.0);
            for (cause, lag) in g.cause.lag_by_cause() {
                self.own.causes.lag.set(&[group, cause.as_str()], lag as f64);
            }
            self.own.causes.hot_share.set(&[group], g.cause.hot_share.unwrap_or(0.0));
        }

        if let Some(state) = &g.state {
            self.own.group_state.set(&[group, state], 1.0);
        }
        if let Some(m) = g.members {
            self.exporter.members.set(&[group], m as f64);
        }
        if let Some(t) = g.time_lag_ms {
            self.own.group_time_lag.set(&[group], t as f64 / 1000.0);
        }
        self.own.rebalances.set(&[group], g.rebalances as f64);
        if let Some(p) = g.last_rebalance_pause_ms {
            self.own.rebalance_pause.set(&[group], p as f64 / 1000.0);
        }
        let drains: Vec<Option<f64>> = g
            .partitions
            .iter()
            .filter(|p| p.lag.and_then(|l| l.records()).unwrap_or(0) > 0)
            .map(|p| p.drain_seconds)
            .collect();
        if drains.iter().all(Option::is_some) {
            self.own.group_drain.set(&[group], drains.iter().flatten().fold(0.0, |a: f64, b| a.max(*b)));
        }
        let mut sums: std::collections::BTreeMap<&str, (f64, f64, bool)> = std::collections::BTreeMap::new();
        for p in &g.partitions {
            let partition = p.partition.to_string();
            let (topic, labels) = (p.topic.as_str(), [group, p.topic.as_str(), partition.as_str()]);
            self.own.partition_status.set(&[group, topic, &partition, p.status.status.as_str()], 1.0);
            match p.lag {
                Some(crate::model::lag::Lag::Behind { records, lost, committed }) => {
                    self.exporter.lag.set(&labels, records as f64);
                    self.exporter.current_offset.set(&labels, committed as f64);
                    self.own.lost.set(&labels, lost as f64);
                    let sum = sums.entry(topic).or_insert((0.0, 0.0, true));
                    (sum.0, sum.1) = (sum.0 + records as f64, sum.1 + committed as f64);
                }
                Some(crate::model::lag::Lag::Uncommitted) => self.own.uncommitted.set(&labels, 1.0),
                None => {}
            }
            let optional = [
                (&self.own.time_lag, p.time_lag_ms.map(|t| t as f64 / 1000.0)),
                (&self.own.consume_rate, p.consume_rate),
                (&self.own.velocity, p.velocity),
                (&self.own.drain, p.drain_seconds),
                (&self.own.headroom, p.retention_headroom_ms.map(|h| h as f64 / 1000.0)),
            ];
            for (family, value) in optional {
                if let Some(v) = value {
                    family.set(&labels, v);
                }
            }
            if let Some(rate) = p.produce_rate {
                self.own.produce_rate.set(&[topic, &partition], rate);
            }
        }
        for (topic, (lag, offset, _)) in sums {
            self.exporter.lag_sum.set(&[group, topic], lag);
            self.exporter.current_offset_sum.set(&[group, topic], offset);
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_counters_follow_the_wire_client_s_totals() {
        let m = Metrics::new();
        let totals = |pairs: &[(&str, u64)]| pairs.iter().map(|(a, n)| (a.to_string(), *n)).collect();
        m.count_requests(&totals(&[("Fetch", 2), ("OffsetFetch", 1)]));
        m.count_requests(&totals(&[("Fetch", 5), ("OffsetFetch", 1)]));
        let text = m.text();
        let count = |api: &str| sluice_service::process::metric(&text, "sluice_lag_requests_total", api);
        assert_eq!((count("\"Fetch\""), count("\"OffsetFetch\"")), (5.0, 1.0));
    }

    #[test]
    fn each_rebalance_pause_is_observed_and_a_group_no_longer_watched_is_dropped() {
        use crate::model::status::{Status, Verdict};
        let group = |name: &str, pauses: Vec<i64>| crate::picture::GroupPicture {
            group: name.into(),
            state: None,
            protocol: None,
            members: None,
            status: Verdict { status: Status::Ok, reason: String::new() },
            cause: Default::default(),
            lag: None,
            time_lag_ms: None,
            rebalances: pauses.len() as u64,
            last_rebalance_pause_ms: pauses.last().copied(),
            stable_since_ms: None,
            recent_rebalances: Vec::new(),
            pauses_ended_ms: pauses,
            error: None,
            partitions: Vec::new(),
        };
        let m = Metrics::new();
        let text = |m: &Metrics| m.text();
        let a = "consumergroup=\"a\"";
        let picture = Picture {
            at_ms: 1_000,
            groups: vec![group("a", vec![3_000, 12_000]), group("b", vec![])],
            ..Picture::default()
        };
        m.publish(&picture, 0.01, &PollErrors::default());
        let t = text(&m);
        let value = |t: &str, suffix: &str, labels: &str| {
            sluice_service::process::metric(t, &format!("sluice_lag_rebalance_pause_seconds{suffix}"), labels)
        };
        assert_eq!((value(&t, "_count", a), value(&t, "_sum", a)), (2.0, 15.0), "{t}");
        assert_eq!(value(&t, "_bucket", "le=\"5\""), 1.0, "3 s is under 5 s, 12 s is not");
        assert!(!t.contains("sluice_lag_rebalance_pause_seconds_count{consumergroup=\"b\""), "no pause, no histogram");
        let a_only = Picture { at_ms: 2_000, groups: vec![group("a", vec![1_000])], ..Picture::default() };
        m.publish(&a_only, 0.01, &PollErrors::default());
        assert_eq!(value(&text(&m), "_count", a), 3.0);
        let b_only = Picture { at_ms: 3_000, groups: vec![group("b", vec![])], ..Picture::default() };
        m.publish(&b_only, 0.01, &PollErrors::default());
        let t = text(&m);
        assert!(
            !t.contains(&format!("sluice_lag_rebalance_pause_seconds_count{{{a}")),
            "a group no longer watched: {t}"
        );
    }

    #[test]
    fn the_cluster_s_series_follow_its_metadata_and_go_when_it_cannot_be_read() {
        use crate::model::lag::Log;
        use crate::picture::{TopicPartition, TopicPicture};
        use crate::wire::{Broker, Placement};
        let partition = |partition: i32, leader: Option<i32>, in_sync: &[i32]| TopicPartition {
            placement: Placement { partition, leader, replicas: vec![1, 2], in_sync: in_sync.to_vec() },
            log: leader.map(|_| Log { start: 5, end: 40, stable: 40 }),
        };
        let picture = Picture {
            at_ms: 1_000,
            brokers: Some(vec![Broker { id: 1, address: "a:9092".into() }, Broker { id: 2, address: "b:9092".into() }]),
            topics: vec![TopicPicture {
                topic: "t".into(),
                partitions: vec![partition(0, Some(1), &[1, 2]), partition(1, Some(2), &[2]), partition(2, None, &[])],
            }],
            ..Picture::default()
        };
        let m = Metrics::new();
        m.publish(&picture, 0.01, &PollErrors::default());
        let t = m.text();
        let value = |name: &str, labels: &str| sluice_service::process::metric(&t, name, labels);
        let p = |n: i32| format!("partition=\"{n}\",topic=\"t\"");
        assert_eq!(value("kafka_brokers", ""), 2.0, "{t}");
        assert!(t.contains("\nkafka_brokers 2 1000\n"), "a reading carries its poll's time (ms): {t}");
        assert!(t.contains("\nsluice_lag_last_poll_timestamp_seconds 1\n"), "sluice-lag's own series none: {t}");
        assert_eq!(value("kafka_broker_info", "address=\"b:9092\",id=\"2\""), 1.0);
        assert_eq!(value("kafka_topic_partitions", "topic=\"t\""), 3.0);
        assert_eq!(value("kafka_topic_partition_leader", &p(1)), 2.0);
        assert!(!t.contains(&format!("kafka_topic_partition_leader{{{}}}", p(2))), "no leader, no series");
        assert_eq!(value("kafka_topic_partition_replicas", &p(1)), 2.0);
        assert_eq!(value("kafka_topic_partition_in_sync_replica", &p(1)), 1.0);
        assert_eq!(value("kafka_topic_partition_leader_is_preferred", &p(0)), 1.0);
        assert_eq!(value("kafka_topic_partition_leader_is_preferred", &p(1)), 0.0);
        assert_eq!(value("kafka_topic_partition_under_replicated_partition", &p(0)), 0.0);
        assert_eq!(value("kafka_topic_partition_under_replicated_partition", &p(1)), 1.0);
        assert_eq!(value("kafka_topic_partition_current_offset", &p(0)), 40.0);
        assert_eq!(value("kafka_topic_partition_oldest_offset", &p(0)), 5.0);

        m.publish(&Picture { at_ms: 2_000, ..Picture::default() }, 0.01, &PollErrors::default());
        let t = m.text();
        for family in ["kafka_brokers ", "kafka_broker_info{", "kafka_topic_partitions{", "kafka_topic_partition_"] {
            assert!(!t.contains(family), "metadata unread: no {family} series, none made up:\n{t}");
        }
    }

    #[test]
    fn only_a_complete_poll_moves_the_last_complete_poll() {
        let m = Metrics::new();
        let at = |m: &Metrics, name: &str| {
            let t = m.text();
            sluice_service::process::metric(&t, name, "")
        };
        m.publish(&Picture { at_ms: 10_000, ..Picture::default() }, 0.01, &PollErrors::default());
        let mut failed = PollErrors::default();
        failed.insert(Stage::Metadata, vec!["broker down".into()]);
        m.publish(&Picture { at_ms: 15_000, ..Picture::default() }, 0.01, &failed);
        assert_eq!(at(&m, "sluice_lag_last_poll_timestamp_seconds"), 15.0);
        assert_eq!(at(&m, "sluice_lag_last_complete_poll_timestamp_seconds"), 10.0, "the failed poll is not complete");
    }

    fn reading_group(name: &str, topic: &str, partitions: i32) -> crate::picture::GroupPicture {
        use crate::model::status::{Status, Verdict};
        let ok = || Verdict { status: Status::Ok, reason: String::new() };
        let partition = |p: i32| crate::picture::PartitionPicture {
            topic: topic.into(),
            partition: p,
            owner: None,
            log: None,
            lag: Some(crate::model::lag::Lag::Behind { records: 10, lost: 0, committed: 100 }),
            time_lag_ms: Some(1_500),
            oldest_timestamp_ms: Some(1),
            timestamp_type: None,
            produce_rate: Some(f64::from(p)),
            consume_rate: Some(1.0),
            velocity: Some(0.0),
            drain_seconds: Some(1.0),
            retention_headroom_ms: Some(60_000),
            status: ok(),
            window_start: None,
            window_end: None,
        };
        crate::picture::GroupPicture {
            group: name.into(),
            state: Some("Stable".into()),
            protocol: None,
            members: Some(1),
            status: ok(),
            cause: Default::default(),
            lag: Some(10 * i64::from(partitions)),
            time_lag_ms: Some(1_500),
            rebalances: 0,
            last_rebalance_pause_ms: None,
            stable_since_ms: None,
            recent_rebalances: Vec::new(),
            pauses_ended_ms: Vec::new(),
            error: None,
            partitions: (0..partitions).map(partition).collect(),
        }
    }

    #[test]
    fn the_cause_and_the_lag_by_cause_are_exported_and_follow_the_group() {
        use crate::model::cause::{Attribution, Cause};
        let m = Metrics::new();
        let mut g = reading_group("g", "t", 2);
        g.cause = Attribution {
            cause: Cause::Blocked,
            reason: "every member (1) stands still".into(),
            scalable_lag: 0,
            stuck_lag: 20,
            hot_partition: Some("t-0".into()),
            hot_share: Some(0.5),
        };
        m.publish(
            &Picture { at_ms: 7_000, groups: vec![g.clone()], ..Picture::default() },
            0.01,
            &PollErrors::default(),
        );
        let t = m.text();
        for line in [
            "sluice_lag_group_cause{cause=\"blocked\",consumergroup=\"g\"} 1\n",
            "sluice_lag_group_lag_by_cause_records{cause=\"blocked\",consumergroup=\"g\"} 20 7000",
            "sluice_lag_group_lag_by_cause_records{cause=\"stalled\",consumergroup=\"g\"} 0 7000",
            "sluice_lag_group_hot_partition_share{consumergroup=\"g\"} 0.5 7000",
        ] {
            assert!(t.contains(line), "{line} missing:\n{t}");
        }
        g.cause.cause = Cause::Scalable;
        (g.cause.scalable_lag, g.cause.stuck_lag) = (20, 0);
        m.publish(&Picture { at_ms: 12_000, groups: vec![g], ..Picture::default() }, 0.01, &PollErrors::default());
        let t = m.text();
        assert!(!t.contains("cause=\"blocked\",consumergroup=\"g\"} 1"), "one cause at a time:\n{t}");
        assert!(t.contains("sluice_lag_group_lag_by_cause_records{cause=\"scalable\",consumergroup=\"g\"} 20 12000"));
    }

    #[test]
    fn every_series_is_exported_once_under_one_head_even_when_groups_share_a_topic() {
        let m = Metrics::with_burrow(Some("local"));
        let groups = vec![reading_group("a", "t", 3), reading_group("b", "t", 3), reading_group("c", "u", 2)];
        m.publish(&Picture { at_ms: 7_000, groups, ..Picture::default() }, 0.01, &PollErrors::default());
        let t = m.text();
        let mut series = HashSet::new();
        let mut heads = HashSet::new();
        for line in t.lines() {
            if let Some(head) = line.strip_prefix("# TYPE ") {
                assert!(heads.insert(head.to_string()), "family {head} twice:\n{t}");
            } else if !line.starts_with('#') {
                let (key, _) = line.rsplit_once(' ').expect("value");
                assert!(series.insert(key.split(' ').next().expect("series").to_string()), "{line} twice:\n{t}");
            }
        }
        let rates: Vec<&str> = t.lines().filter(|l| l.starts_with("sluice_lag_produce_rate{")).collect();
        assert_eq!(rates.len(), 5, "one produce rate per partition, not per group: {rates:?}");
        assert!(rates.contains(&"sluice_lag_produce_rate{partition=\"2\",topic=\"t\"} 2 7000"), "{rates:?}");
        let lags = t.lines().filter(|l| l.starts_with("kafka_consumergroup_lag{")).count();
        assert_eq!(lags, 8, "one lag per group-partition");
    }
}
