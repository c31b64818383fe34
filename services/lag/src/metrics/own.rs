//! sluice-lag's own per-partition and per-group families (`sluice_lag_…`), and the label
//! sets the families share.

use super::exposition::Family;

pub(super) const GTP: [&str; 3] = ["consumergroup", "topic", "partition"];
pub(super) const GT: [&str; 2] = ["consumergroup", "topic"];
pub(super) const TP: [&str; 2] = ["topic", "partition"];

/// sluice-lag's own per-partition and per-group families (`sluice_lag_…`).
#[derive(Debug)]
pub(super) struct Own {
    pub(super) time_lag: Family,
    pub(super) group_time_lag: Family,
    pub(super) produce_rate: Family,
    pub(super) consume_rate: Family,
    pub(super) velocity: Family,
    pub(super) drain: Family,
    pub(super) group_drain: Family,
    pub(super) headroom: Family,
    pub(super) lost: Family,
    pub(super) uncommitted: Family,
    pub(super) partition_status: Family,
    pub(super) group_status: Family,
    pub(super) causes: Causes,
    pub(super) group_state: Family,
    pub(super) rebalances: Family,
    pub(super) rebalance_pause: Family,
}

impl Own {
    pub(super) fn new() -> Self {
        let r = "sluice_lag";
        Self {
            time_lag: Family::new(
                r,
                "time_lag_seconds",
                "Age of the oldest record the group has not consumed (0: caught up).",
                &GTP,
            ),
            group_time_lag: Family::new(
                r,
                "group_time_lag_seconds",
                "The group's largest partition time lag.",
                &["consumergroup"],
            ),
            produce_rate: Family::new(
                r,
                "produce_rate",
                "Records appended to the partition per second (over the rate window).",
                &TP,
            )
            .repeating(),
            consume_rate: Family::new(
                r,
                "consume_rate",
                "Records the group consumed per second (over the rate window).",
                &GTP,
            ),
            velocity: Family::new(r, "velocity", "Lag growth, records per second (produce minus consume).", &GTP),
            drain: Family::new(
                r,
                "drain_seconds",
                "Seconds to consume the lag at the current rates (absent: not draining; a lag consumed within one poll: lag / consume rate).",
                &GTP,
            ),
            group_drain: Family::new(
                r,
                "group_drain_seconds",
                "Seconds until the group's slowest partition drains (absent: one never does).",
                &["consumergroup"],
            ),
            headroom: Family::new(
                r,
                "retention_headroom_seconds",
                "Seconds until retention deletes the oldest unconsumed record.",
                &GTP,
            ),
            lost: Family::new(r, "lost_records", "Records retention deleted before the group read them.", &GTP),
            uncommitted: Family::new(r, "uncommitted", "1 for a partition the group reads but never committed.", &GTP),
            partition_status: Family::new(
                r,
                "partition_status",
                "1, labelled with the partition's status.",
                &["consumergroup", "topic", "partition", "status"],
            )
            .verdict(),
            group_status: Family::new(
                r,
                "group_status",
                "1, labelled with the group's status (its worst partition's).",
                &["consumergroup", "status"],
            )
            .verdict(),
            causes: Causes::new(r),
            group_state: Family::new(
                r,
                "group_state",
                "1, labelled with the group's state as the coordinator reports it.",
                &["consumergroup", "state"],
            )
            .verdict(),
            rebalances: Family::new(r, "rebalances", "Rebalances seen since sluice-lag started.", &["consumergroup"]),
            rebalance_pause: Family::new(
                r,
                "last_rebalance_pause_seconds",
                "How long consumption stopped in the last rebalance (to a poll interval).",
                &["consumergroup"],
            ),
        }
    }

    pub(super) fn families(&self) -> [&Family; 18] {
        [
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
            &self.causes.cause,
            &self.causes.lag,
            &self.causes.hot_share,
            &self.group_state,
            &self.rebalances,
            &self.rebalance_pause,
        ]
    }
}

/// What more consumers can do about each group's lag ([`crate::model::cause`]).
#[derive(Debug)]
pub(super) struct Causes {
    pub(super) cause: Family,
    pub(super) lag: Family,
    pub(super) hot_share: Family,
}

impl Causes {
    fn new(r: &str) -> Self {
        Self {
            cause: Family::new(
                r,
                "group_cause",
                "1, labelled with what more consumers can do about the group's lag: idle, scalable, stalled (some partitions stand still, left out of scaling) or blocked (every member stands still: the scaler holds).",
                &["consumergroup", "cause"],
            )
            .verdict(),
            lag: Family::new(
                r,
                "group_lag_by_cause_records",
                "The group's lag by cause: on partitions being consumed (scalable), standing still while others move (stalled), standing still with every member (blocked).",
                &["consumergroup", "cause"],
            ),
            hot_share: Family::new(
                r,
                "group_hot_partition_share",
                "The share of the group's lag on its partition with the most, 0 without lag (one member consumes a partition: no count drains it faster).",
                &["consumergroup"],
            ),
        }
    }
}
