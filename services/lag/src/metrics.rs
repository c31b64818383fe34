//! sluice-lag's Prometheus metrics. What kafka_exporter exports has its
//! names and labels (`kafka_consumergroup_lag{consumergroup,topic,partition}`
//! and the rest), so dashboards and alerts built on it (Grafana 7589,
//! Strimzi's) work unchanged; everything else is `sluice_lag_…`.
//!
//! Values are never made up: an uncommitted partition has no lag series (it
//! has `sluice_lag_uncommitted`), an unknown time lag or a partition that
//! never drains has no series, and a series whose partition or group is gone
//! is removed at the next poll. Statuses and states are one series at 1 per
//! partition or group, labelled with the current one.

use std::collections::HashSet;
use std::sync::Mutex;

use prometheus::{GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, Opts, Registry};

use crate::picture::Picture;
use crate::poller::{PollErrors, Stage};

/// A gauge family whose series not set in a publish round are removed.
#[derive(Debug)]
struct Family {
    vec: GaugeVec,
    set: Mutex<HashSet<Vec<String>>>,
    previous: Mutex<HashSet<Vec<String>>>,
}

impl Family {
    fn new(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> Self {
        let vec = GaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
        registry.register(Box::new(vec.clone())).expect("registered once");
        Self { vec, set: Mutex::default(), previous: Mutex::default() }
    }

    fn set(&self, labels: &[&str], value: f64) {
        self.vec.with_label_values(labels).set(value);
        self.set.lock().unwrap_or_else(|e| e.into_inner()).insert(labels.iter().map(|l| l.to_string()).collect());
    }

    /// Removes the series of the last round not set in this one.
    fn finish(&self) {
        let now = std::mem::take(&mut *self.set.lock().unwrap_or_else(|e| e.into_inner()));
        let mut previous = self.previous.lock().unwrap_or_else(|e| e.into_inner());
        for gone in previous.difference(&now) {
            let labels: Vec<&str> = gone.iter().map(String::as_str).collect();
            let _ = self.vec.remove_label_values(&labels);
        }
        *previous = now;
    }
}

/// Every metric sluice-lag exports.
#[derive(Debug)]
pub struct Metrics {
    pub registry: Registry,
    lag: Family,
    lag_sum: Family,
    current_offset: Family,
    current_offset_sum: Family,
    members: Family,
    topic_offset: Family,
    topic_oldest: Family,
    time_lag: Family,
    group_time_lag: Family,
    produce_rate: Family,
    consume_rate: Family,
    velocity: Family,
    drain: Family,
    group_drain: Family,
    headroom: Family,
    lost: Family,
    uncommitted: Family,
    partition_status: Family,
    group_status: Family,
    group_state: Family,
    rebalances: Family,
    rebalance_pause: Family,
    /// Every rebalance's pause, per group (a group no longer watched is removed).
    rebalance_pauses: HistogramVec,
    paused_groups: Mutex<HashSet<String>>,
    poll_duration: Histogram,
    poll_errors: IntCounterVec,
    requests: IntCounterVec,
    last_poll: IntGauge,
    groups: IntGauge,
}

const GTP: [&str; 3] = ["consumergroup", "topic", "partition"];
const TP: [&str; 2] = ["topic", "partition"];

impl Metrics {
    pub fn new() -> Self {
        let r = Registry::new();
        let f = |name: &str, help: &str, labels: &[&str]| Family::new(&r, name, help, labels);
        let poll_duration = Histogram::with_opts(
            HistogramOpts::new("sluice_lag_poll_duration_seconds", "How long a poll of the cluster took.")
                .buckets(prometheus::exponential_buckets(0.005, 2.0, 14).expect("buckets")),
        )
        .expect("valid metric");
        let poll_errors = IntCounterVec::new(
            Opts::new("sluice_lag_poll_errors_total", "Failed reads in polls, by stage."),
            &["stage"],
        )
        .expect("valid metric");
        let requests = IntCounterVec::new(
            Opts::new("sluice_lag_requests_total", "Kafka requests sent, by API (ApiVersions and SASL included)."),
            &["api"],
        )
        .expect("valid metric");
        let last_poll =
            IntGauge::new("sluice_lag_last_poll_timestamp_seconds", "When the last poll ended, Unix seconds.")
                .expect("valid metric");
        let groups = IntGauge::new("sluice_lag_groups", "Groups watched.").expect("valid metric");
        let rebalance_pauses = HistogramVec::new(
            HistogramOpts::new(
                "sluice_lag_rebalance_pause_seconds",
                "How long consumption stopped in each rebalance seen (to a poll interval).",
            )
            .buckets(vec![1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0]),
            &["consumergroup"],
        )
        .expect("valid metric");
        for m in [
            Box::new(rebalance_pauses.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(poll_duration.clone()),
            Box::new(poll_errors.clone()),
            Box::new(requests.clone()),
            Box::new(last_poll.clone()),
            Box::new(groups.clone()),
        ] {
            r.register(m).expect("registered once");
        }
        for stage in Stage::ALL {
            poll_errors.with_label_values(&[stage.as_str()]);
        }
        Self {
            lag: f("kafka_consumergroup_lag", "Records the group has not consumed yet (kafka_exporter's name).", &GTP),
            lag_sum: f(
                "kafka_consumergroup_lag_sum",
                "Lag of the group on the topic, over its partitions.",
                &["consumergroup", "topic"],
            ),
            current_offset: f("kafka_consumergroup_current_offset", "The group's committed offset.", &GTP),
            current_offset_sum: f(
                "kafka_consumergroup_current_offset_sum",
                "The group's committed offsets on the topic, summed.",
                &["consumergroup", "topic"],
            ),
            members: f("kafka_consumergroup_members", "Members of the group.", &["consumergroup"]),
            topic_offset: f("kafka_topic_partition_current_offset", "The partition's log end offset.", &TP),
            topic_oldest: f("kafka_topic_partition_oldest_offset", "The partition's log start offset.", &TP),
            time_lag: f(
                "sluice_lag_time_lag_seconds",
                "Age of the oldest record the group has not consumed (0: caught up).",
                &GTP,
            ),
            group_time_lag: f(
                "sluice_lag_group_time_lag_seconds",
                "The group's largest partition time lag.",
                &["consumergroup"],
            ),
            produce_rate: f(
                "sluice_lag_produce_rate",
                "Records appended to the partition per second (over the rate window).",
                &TP,
            ),
            consume_rate: f(
                "sluice_lag_consume_rate",
                "Records the group consumed per second (over the rate window).",
                &GTP,
            ),
            velocity: f("sluice_lag_velocity", "Lag growth, records per second (produce minus consume).", &GTP),
            drain: f(
                "sluice_lag_drain_seconds",
                "Seconds to consume the lag at the current rates (absent: not draining; a lag consumed within one poll: lag / consume rate).",
                &GTP,
            ),
            group_drain: f(
                "sluice_lag_group_drain_seconds",
                "Seconds until the group's slowest partition drains (absent: one never does).",
                &["consumergroup"],
            ),
            headroom: f(
                "sluice_lag_retention_headroom_seconds",
                "Seconds until retention deletes the oldest unconsumed record.",
                &GTP,
            ),
            lost: f("sluice_lag_lost_records", "Records retention deleted before the group read them.", &GTP),
            uncommitted: f("sluice_lag_uncommitted", "1 for a partition the group reads but never committed.", &GTP),
            partition_status: f(
                "sluice_lag_partition_status",
                "1, labelled with the partition's status.",
                &["consumergroup", "topic", "partition", "status"],
            ),
            group_status: f(
                "sluice_lag_group_status",
                "1, labelled with the group's status (its worst partition's).",
                &["consumergroup", "status"],
            ),
            group_state: f(
                "sluice_lag_group_state",
                "1, labelled with the group's state as the coordinator reports it.",
                &["consumergroup", "state"],
            ),
            rebalances: f("sluice_lag_rebalances", "Rebalances seen since sluice-lag started.", &["consumergroup"]),
            rebalance_pause: f(
                "sluice_lag_last_rebalance_pause_seconds",
                "How long consumption stopped in the last rebalance (to a poll interval).",
                &["consumergroup"],
            ),
            rebalance_pauses,
            paused_groups: Mutex::default(),
            poll_duration,
            poll_errors,
            requests,
            last_poll,
            groups,
            registry: r,
        }
    }

    fn families(&self) -> [&Family; 22] {
        [
            &self.lag,
            &self.lag_sum,
            &self.current_offset,
            &self.current_offset_sum,
            &self.members,
            &self.topic_offset,
            &self.topic_oldest,
            &self.time_lag,
            &self.group_time_lag,
            &self.produce_rate,
            &self.consume_rate,
            &self.velocity,
            &self.drain,
            &self.group_drain,
            &self.headroom,
            &self.lost,
            &self.uncommitted,
            &self.partition_status,
            &self.group_status,
            &self.group_state,
            &self.rebalances,
            &self.rebalance_pause,
        ]
    }

    /// Publishes a poll: its picture, how long it took, what failed.
    pub fn publish(&self, picture: &Picture, took_seconds: f64, errors: &PollErrors) {
        for group in &picture.groups {
            self.publish_group(group);
        }
        for family in self.families() {
            family.finish();
        }
        self.publish_pauses(picture);
        for (stage, list) in errors {
            self.poll_errors.with_label_values(&[stage.as_str()]).inc_by(list.len() as u64);
        }
        self.poll_duration.observe(took_seconds);
        self.last_poll.set(picture.at_ms / 1000);
        self.groups.set(picture.groups.len() as i64);
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
        self.group_status.set(&[group, g.status.status.as_str()], 1.0);
        if let Some(state) = &g.state {
            self.group_state.set(&[group, state], 1.0);
        }
        if let Some(m) = g.members {
            self.members.set(&[group], m as f64);
        }
        if let Some(t) = g.time_lag_ms {
            self.group_time_lag.set(&[group], t as f64 / 1000.0);
        }
        self.rebalances.set(&[group], g.rebalances as f64);
        if let Some(p) = g.last_rebalance_pause_ms {
            self.rebalance_pause.set(&[group], p as f64 / 1000.0);
        }
        let drains: Vec<Option<f64>> = g
            .partitions
            .iter()
            .filter(|p| p.lag.and_then(|l| l.records()).unwrap_or(0) > 0)
            .map(|p| p.drain_seconds)
            .collect();
        if drains.iter().all(Option::is_some) {
            self.group_drain.set(&[group], drains.iter().flatten().fold(0.0, |a: f64, b| a.max(*b)));
        }
        let mut sums: std::collections::BTreeMap<&str, (f64, f64, bool)> = std::collections::BTreeMap::new();
        for p in &g.partitions {
            let partition = p.partition.to_string();
            let (topic, labels) = (p.topic.as_str(), [group, p.topic.as_str(), partition.as_str()]);
            self.partition_status.set(&[group, topic, &partition, p.status.status.as_str()], 1.0);
            if let Some(log) = p.log {
                self.topic_offset.set(&[topic, &partition], log.end as f64);
                self.topic_oldest.set(&[topic, &partition], log.start as f64);
            }
            match p.lag {
                Some(crate::model::lag::Lag::Behind { records, lost, committed }) => {
                    self.lag.set(&labels, records as f64);
                    self.current_offset.set(&labels, committed as f64);
                    self.lost.set(&labels, lost as f64);
                    let sum = sums.entry(topic).or_insert((0.0, 0.0, true));
                    (sum.0, sum.1) = (sum.0 + records as f64, sum.1 + committed as f64);
                }
                Some(crate::model::lag::Lag::Uncommitted) => self.uncommitted.set(&labels, 1.0),
                None => {}
            }
            let optional = [
                (&self.time_lag, p.time_lag_ms.map(|t| t as f64 / 1000.0)),
                (&self.consume_rate, p.consume_rate),
                (&self.velocity, p.velocity),
                (&self.drain, p.drain_seconds),
                (&self.headroom, p.retention_headroom_ms.map(|h| h as f64 / 1000.0)),
            ];
            for (family, value) in optional {
                if let Some(v) = value {
                    family.set(&labels, v);
                }
            }
            if let Some(rate) = p.produce_rate {
                self.produce_rate.set(&[topic, &partition], rate);
            }
        }
        for (topic, (lag, offset, _)) in sums {
            self.lag_sum.set(&[group, topic], lag);
            self.current_offset_sum.set(&[group, topic], offset);
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
        let text = prometheus::TextEncoder::new().encode_to_string(&m.registry.gather()).expect("text");
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
        let text = |m: &Metrics| prometheus::TextEncoder::new().encode_to_string(&m.registry.gather()).expect("text");
        let a = "consumergroup=\"a\"";
        let picture = Picture { at_ms: 1_000, groups: vec![group("a", vec![3_000, 12_000]), group("b", vec![])] };
        m.publish(&picture, 0.01, &PollErrors::default());
        let t = text(&m);
        let value = |t: &str, suffix: &str, labels: &str| {
            sluice_service::process::metric(t, &format!("sluice_lag_rebalance_pause_seconds{suffix}"), labels)
        };
        assert_eq!((value(&t, "_count", a), value(&t, "_sum", a)), (2.0, 15.0), "{t}");
        assert_eq!(value(&t, "_bucket", "le=\"5\""), 1.0, "3 s is under 5 s, 12 s is not");
        assert!(!t.contains("sluice_lag_rebalance_pause_seconds_count{consumergroup=\"b\""), "no pause, no histogram");
        m.publish(&Picture { at_ms: 2_000, groups: vec![group("a", vec![1_000])] }, 0.01, &PollErrors::default());
        assert_eq!(value(&text(&m), "_count", a), 3.0);
        m.publish(&Picture { at_ms: 3_000, groups: vec![group("b", vec![])] }, 0.01, &PollErrors::default());
        let t = text(&m);
        assert!(
            !t.contains(&format!("sluice_lag_rebalance_pause_seconds_count{{{a}")),
            "a group no longer watched: {t}"
        );
    }
}
