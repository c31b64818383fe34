//! What more consumers can do about a group's lag, read from the partitions' verdicts
//! ([`super::status`], the one place health is classified) and their owners: no second
//! classifier, only how the verdicts spread over the members.
//!
//! A group's cause, the first that holds:
//! 1. `idle`: no partition has lag.
//! 2. `blocked`: members are present, no partition with lag is consumed (each stands still:
//!    STALL, or STOP), at least one is STALL, and every member owns one of them. Every
//!    consumer stopped at once: a dependency they all share is down (Redis, the chain node),
//!    and more consumers would join, rebalance and stop too. With one member Kafka's evidence
//!    cannot tell this from a hung consumer; either way a new pod does not help (a hung one
//!    is for its liveness probe).
//! 3. `stalled`: some partitions stand still, but not every member: those consumers are stuck
//!    on their partitions (a record, a hang); their lag is left out of scaling and the rest
//!    is scaled as usual.
//! 4. `scalable`: the lag is on partitions being consumed; more consumers drain it faster.
//!
//! Also, whatever the cause: the largest partition's share of the lag, which bounds what any
//! count can do (one partition is consumed by one member at a time).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::status::Status;

/// What more consumers can do about the lag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Cause {
    Idle,
    Scalable,
    Stalled,
    Blocked,
}

impl Cause {
    pub const ALL: [Cause; 4] = [Self::Idle, Self::Scalable, Self::Stalled, Self::Blocked];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Scalable => "scalable",
            Self::Stalled => "stalled",
            Self::Blocked => "blocked",
        }
    }
}

/// A group's cause, why, and the lag's shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Attribution {
    pub cause: Cause,
    pub reason: String,
    /// Lag on partitions being consumed.
    pub scalable_lag: i64,
    /// Lag on partitions that stand still (STALL, STOP).
    pub stuck_lag: i64,
    /// The partition with the most lag, and its share of the group's lag.
    pub hot_partition: Option<String>,
    pub hot_share: Option<f64>,
}

impl Default for Attribution {
    fn default() -> Self {
        Self {
            cause: Cause::Idle,
            reason: String::new(),
            scalable_lag: 0,
            stuck_lag: 0,
            hot_partition: None,
            hot_share: None,
        }
    }
}

impl Attribution {
    /// The lag by cause: what is being consumed is `scalable`, what stands still is the
    /// group's cause when that is `blocked`, else `stalled`.
    pub fn lag_by_cause(&self) -> [(Cause, i64); 3] {
        let blocked = self.cause == Cause::Blocked;
        [
            (Cause::Scalable, self.scalable_lag),
            (Cause::Stalled, if blocked { 0 } else { self.stuck_lag }),
            (Cause::Blocked, if blocked { self.stuck_lag } else { 0 }),
        ]
    }
}

/// One partition as the attribution reads it.
#[derive(Debug, Clone, Copy)]
pub struct Part<'a> {
    pub name: &'a str,
    pub lag: Option<i64>,
    pub status: Status,
    /// The owning member's id.
    pub owner: Option<&'a str>,
}

/// The group's cause from its partitions' verdicts, owners and lag, and its member count.
pub fn attribute<'a>(parts: impl IntoIterator<Item = Part<'a>>, members: Option<usize>) -> Attribution {
    let parts: Vec<Part<'a>> = parts.into_iter().filter(|p| p.lag.unwrap_or(0) > 0).collect();
    let stands_still = |p: &Part<'_>| matches!(p.status, Status::Stall | Status::Stop);
    let (stuck, moving): (Vec<&Part<'a>>, Vec<&Part<'a>>) = parts.iter().partition(|p| stands_still(p));
    let sum = |ps: &[&Part<'_>]| ps.iter().map(|p| p.lag.unwrap_or(0)).sum::<i64>();
    let (stuck_lag, scalable_lag) = (sum(&stuck), sum(&moving));
    let total = stuck_lag + scalable_lag;
    let hot = parts.iter().max_by_key(|p| (p.lag.unwrap_or(0), std::cmp::Reverse(p.name)));
    let mut a = Attribution {
        cause: Cause::Scalable,
        reason: String::new(),
        scalable_lag,
        stuck_lag,
        hot_partition: hot.map(|p| p.name.to_string()),
        hot_share: hot.filter(|_| total > 0).map(|p| p.lag.unwrap_or(0) as f64 / total as f64),
    };
    let members = members.unwrap_or(0);
    let stuck_owners: BTreeSet<&str> = stuck.iter().filter_map(|p| p.owner).collect();
    let stalled = stuck.iter().filter(|p| p.status == Status::Stall).count();
    (a.cause, a.reason) = if parts.is_empty() {
        (Cause::Idle, "no partition has lag".into())
    } else if members > 0 && moving.is_empty() && stalled > 0 && stuck_owners.len() >= members {
        let one = if members == 1 { " (one member: it may also be hung)" } else { "" };
        (
            Cause::Blocked,
            format!(
                "every member ({members}) stands still with lag on {} partitions and none is consumed: a dependency they share is down{one}; more consumers would stop too",
                stuck.len()
            ),
        )
    } else if !stuck.is_empty() {
        (
            Cause::Stalled,
            format!(
                "{} partitions stand still ({} of {members} members), {stuck_lag} records: left out of scaling",
                stuck.len(),
                stuck_owners.len()
            ),
        )
    } else {
        (Cause::Scalable, format!("{scalable_lag} records on {} partitions being consumed", moving.len()))
    };
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part<'a>(name: &'a str, lag: i64, status: Status, owner: &'a str) -> Part<'a> {
        Part { name, lag: Some(lag), status, owner: Some(owner) }
    }

    #[test]
    fn a_dependency_outage_stops_every_member_at_once() {
        let parts = [
            part("t-0", 900, Status::Stall, "a"),
            part("t-1", 800, Status::Stall, "a"),
            part("t-2", 700, Status::Stall, "b"),
            part("t-3", 0, Status::Ok, "b"),
        ];
        let a = attribute(parts, Some(2));
        assert_eq!(a.cause, Cause::Blocked, "{a:?}");
        assert_eq!((a.stuck_lag, a.scalable_lag), (2_400, 0));
        assert!(a.reason.contains("every member (2) stands still with lag on 3 partitions"), "{}", a.reason);
    }

    #[test]
    fn one_stuck_consumer_among_moving_ones_is_stalled_not_blocked() {
        let parts = [part("t-0", 900, Status::Stall, "a"), part("t-1", 80, Status::Ok, "b")];
        assert_eq!(attribute(parts, Some(2)).cause, Cause::Stalled);
        // Stuck on one partition while the other members are caught up: not every member.
        let poison = [part("t-0", 900, Status::Stall, "a"), part("t-1", 0, Status::Ok, "b")];
        let a = attribute(poison, Some(2));
        assert_eq!(a.cause, Cause::Stalled, "{a:?}");
        assert_eq!(a.reason, "1 partitions stand still (1 of 2 members), 900 records: left out of scaling");
    }

    #[test]
    fn a_group_with_no_member_is_scaled_up_from_zero_not_blocked() {
        let parts = [Part { name: "t-0", lag: Some(500), status: Status::Stop, owner: None }];
        assert_eq!(attribute(parts, Some(0)).cause, Cause::Stalled, "its lag waits for a consumer");
        assert_eq!(attribute(parts, None).cause, Cause::Stalled);
    }

    #[test]
    fn consumed_lag_is_scalable_and_no_lag_is_idle_with_the_hot_partition_named() {
        let parts = [
            part("t-0", 9_000, Status::Warn, "a"),
            part("t-1", 600, Status::Ok, "b"),
            part("t-2", 400, Status::Ok, "b"),
        ];
        let a = attribute(parts, Some(2));
        assert_eq!((a.cause, a.scalable_lag), (Cause::Scalable, 10_000));
        assert_eq!((a.hot_partition.as_deref(), a.hot_share), (Some("t-0"), Some(0.9)));
        let idle = attribute([part("t-0", 0, Status::Ok, "a")], Some(1));
        assert_eq!((idle.cause, idle.hot_share), (Cause::Idle, None));
    }

    #[test]
    fn one_member_standing_still_is_blocked_and_says_it_may_be_hung() {
        let a = attribute([part("t-0", 50, Status::Stall, "a")], Some(1));
        assert_eq!(a.cause, Cause::Blocked);
        assert!(a.reason.contains("one member: it may also be hung"), "{}", a.reason);
    }
}
