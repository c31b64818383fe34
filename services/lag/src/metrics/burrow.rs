//! Burrow v1.9's own series (with `BURROW_CLUSTER`): `burrow_kafka_*`, its names, labels and
//! status codes ([`crate::burrow`]), so alerts written for Burrow keep working. As everywhere
//! here, a value that cannot be read has no series.

use super::Family;
use crate::burrow::{group_code, partition_code};
use crate::model::lag::Lag;
use crate::picture::{GroupPicture, Picture};

const CG: [&str; 2] = ["cluster", "consumer_group"];
const CGTP: [&str; 4] = ["cluster", "consumer_group", "topic", "partition"];

#[derive(Debug)]
pub(super) struct Burrow {
    cluster: String,
    status: Family,
    lag_total: Family,
    partition_status: Family,
    partition_lag: Family,
    current_offset: Family,
    topic_offset: Family,
}

impl Burrow {
    pub(super) fn new(cluster: &str) -> Self {
        let r = "burrow_kafka";
        Self {
            cluster: cluster.to_string(),
            status: Family::new(r, "consumer_status", "The group's status, Burrow's code: 1 OK, 2 WARN, 3 ERR.", &CG),
            lag_total: Family::new(r, "consumer_lag_total", "The group's lag over its partitions.", &CG),
            partition_status: Family::new(
                r,
                "topic_partition_status",
                "The partition's status, Burrow's code: 1 OK, 2 WARN, 4 STOP, 5 STALL, 6 REWIND.",
                &CGTP,
            ),
            partition_lag: Family::new(r, "consumer_partition_lag", "The group's lag on the partition.", &CGTP),
            current_offset: Family::new(r, "consumer_current_offset", "The group's committed offset.", &CGTP),
            topic_offset: Family::new(
                r,
                "topic_partition_offset",
                "The partition's log end offset.",
                &["cluster", "topic", "partition"],
            ),
        }
    }

    pub(super) fn families(&self) -> [&Family; 6] {
        [
            &self.status,
            &self.lag_total,
            &self.partition_status,
            &self.partition_lag,
            &self.current_offset,
            &self.topic_offset,
        ]
    }

    pub(super) fn publish(&self, picture: &Picture) {
        for g in &picture.groups {
            self.publish_group(g);
        }
        let cluster = self.cluster.as_str();
        for t in &picture.topics {
            for p in t.partitions.iter().filter_map(|p| Some((p.placement.partition, p.log?))) {
                self.topic_offset.set(&[cluster, &t.topic, &p.0.to_string()], p.1.end as f64);
            }
        }
    }

    fn publish_group(&self, g: &GroupPicture) {
        let (cluster, group) = (self.cluster.as_str(), g.group.as_str());
        let Some(code) = group_code(g) else { return };
        self.status.set(&[cluster, group], f64::from(code));
        let mut total = 0;
        for p in &g.partitions {
            let partition = p.partition.to_string();
            let labels = [cluster, group, p.topic.as_str(), partition.as_str()];
            if let Some(code) = partition_code(p.status.status) {
                self.partition_status.set(&labels, f64::from(code));
            }
            if let Some(Lag::Behind { records, committed, .. }) = p.lag {
                self.partition_lag.set(&labels, records.max(0) as f64);
                self.current_offset.set(&labels, committed as f64);
                total += records.max(0);
            }
        }
        self.lag_total.set(&[cluster, group], total as f64);
    }
}
