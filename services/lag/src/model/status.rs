//! A Burrow-style health status per partition and per group, evaluated over
//! windows of time (not of commits, so a slow committer is judged like a
//! fast one) with thresholds per group, and always with its reason.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::history::History;
use super::lag::Lag;

/// A partition's or a group's health, from best to worst.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Caught up, or consuming at least as fast as the log grows.
    Ok,
    /// Falling behind: lag grew through the whole window, or is over a
    /// threshold set for the group.
    Warn,
    /// The committed offset went back (an offset reset, a replay).
    Rewind,
    /// A consumer owns the partition, but its committed offset has not moved
    /// for `stall_after` while there is lag (stuck on a record, or downstream).
    Stall,
    /// Nobody consumes: no member owns the partition, and its committed offset
    /// has not moved for `stall_after` while there is lag.
    Stop,
    /// It cannot be read (the broker did not answer, or refused).
    Err,
}

impl Status {
    pub const ALL: [Status; 6] = [Self::Ok, Self::Warn, Self::Rewind, Self::Stall, Self::Stop, Self::Err];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Warn => "warn",
            Self::Rewind => "rewind",
            Self::Stall => "stall",
            Self::Stop => "stop",
            Self::Err => "err",
        }
    }
}

/// A status and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    pub status: Status,
    pub reason: String,
}

impl Verdict {
    fn new(status: Status, reason: impl Into<String>) -> Self {
        Self { status, reason: reason.into() }
    }
}

/// When a group's partitions change status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Thresholds {
    /// The window growth is judged over.
    pub window: Duration,
    /// How long a committed offset may stand still with lag before the
    /// partition is STALL (owned) or STOP (not owned); also how long a
    /// rewind is remembered.
    pub stall_after: Duration,
    /// WARN once the time lag reaches this.
    pub warn_time_lag: Option<Duration>,
    /// WARN once the lag reaches this many records.
    pub warn_lag: Option<i64>,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            window: Duration::from_secs(300),
            stall_after: Duration::from_secs(60),
            warn_time_lag: None,
            warn_lag: None,
        }
    }
}

/// One partition's status, from its history, its lag now, its time lag and
/// whether a live member owns it.
pub fn partition(history: &History, lag: &Lag, time_lag_ms: Option<i64>, owned: bool, t: &Thresholds) -> Verdict {
    let Some(records) = lag.records() else { return Verdict::new(Status::Ok, "no committed offset yet") };
    let stall_ms = t.stall_after.as_millis() as i64;
    if history.rewound(stall_ms) {
        return Verdict::new(Status::Rewind, "the committed offset went back");
    }
    if records == 0 {
        return Verdict::new(Status::Ok, "caught up");
    }
    let now = history.latest().map_or(0, |s| s.at_ms);
    if let Some(since) = history.still_since_ms()
        && now - since >= stall_ms
    {
        let still = (now - since) / 1000;
        return if owned {
            Verdict::new(
                Status::Stall,
                format!("owned, but the committed offset has not moved for {still} s with {records} records of lag"),
            )
        } else {
            Verdict::new(
                Status::Stop,
                format!(
                    "no member owns it and the committed offset has not moved for {still} s with {records} records of lag"
                ),
            )
        };
    }
    if let (Some(limit), Some(age)) = (t.warn_time_lag, time_lag_ms)
        && age >= limit.as_millis() as i64
    {
        return Verdict::new(Status::Warn, format!("time lag {} s is at or above {} s", age / 1000, limit.as_secs()));
    }
    if let Some(limit) = t.warn_lag
        && records >= limit
    {
        return Verdict::new(Status::Warn, format!("lag {records} is at or above {limit}"));
    }
    if history.lag_growing(t.window.as_millis() as i64) {
        return Verdict::new(Status::Warn, format!("lag grew through the last {} s", t.window.as_secs()));
    }
    Verdict::new(Status::Ok, "consuming")
}

/// A group's status: the worst of its partitions', naming the partition.
pub fn group<'a>(partitions: impl IntoIterator<Item = (String, &'a Verdict)>) -> Verdict {
    partitions
        .into_iter()
        .max_by_key(|(_, v)| v.status)
        .map(|(name, v)| {
            if v.status == Status::Ok {
                Verdict::new(Status::Ok, "")
            } else {
                Verdict::new(v.status, format!("{name}: {}", v.reason))
            }
        })
        .unwrap_or_else(|| Verdict::new(Status::Ok, "no partitions"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::history::Sample;

    /// One sample every 5 s: (log end, committed).
    fn history(points: &[(i64, i64)]) -> History {
        let mut h = History::new(600_000);
        for (i, (end, committed)) in points.iter().enumerate() {
            h.push(Sample {
                at_ms: i as i64 * 5_000,
                end: *end,
                committed: Some(*committed),
                lag: Some(end - committed),
            });
        }
        h
    }

    fn status(h: &History, owned: bool, t: &Thresholds) -> Status {
        let last = h.latest().expect("samples");
        let lag = Lag::Behind { records: last.lag.unwrap_or(0), lost: 0, committed: last.committed.unwrap_or(0) };
        partition(h, &lag, Some(0), owned, t).status
    }

    #[test]
    fn every_status_from_the_scenario_that_makes_it_true() {
        let t = Thresholds {
            window: Duration::from_secs(60),
            stall_after: Duration::from_secs(30),
            ..Thresholds::default()
        };
        let consuming: Vec<(i64, i64)> = (0..20).map(|i| (1_000 + i * 100, 990 + i * 100)).collect();
        assert_eq!(status(&history(&consuming), true, &t), Status::Ok);
        let growing: Vec<(i64, i64)> = (0..20).map(|i| (1_000 + i * 100, 1_000 + i * 50)).collect();
        assert_eq!(status(&history(&growing), true, &t), Status::Warn);
        let stuck: Vec<(i64, i64)> = (0..20).map(|i| (1_000 + i * 100, 1_000)).collect();
        assert_eq!(status(&history(&stuck), true, &t), Status::Stall, "owned but not moving");
        assert_eq!(status(&history(&stuck), false, &t), Status::Stop, "nobody owns it");
        let reset: Vec<(i64, i64)> = (0..20).map(|i| (1_000, if i == 19 { 0 } else { 1_000 })).collect();
        assert_eq!(status(&history(&reset), true, &t), Status::Rewind);
        let idle: Vec<(i64, i64)> = (0..20).map(|_| (1_000, 1_000)).collect();
        assert_eq!(status(&history(&idle), false, &t), Status::Ok, "no lag: no stop, however still");
        let recovered: Vec<(i64, i64)> = (0..20).map(|i| (1_000, if i < 5 { 500 } else { 1_000 })).collect();
        assert_eq!(status(&history(&recovered), true, &t), Status::Ok, "OK returns when the cause goes");
    }

    #[test]
    fn thresholds_per_group() {
        let h = history(&(0..4).map(|i| (1_000 + i * 100, 900 + i * 100)).collect::<Vec<_>>());
        let lag = Lag::Behind { records: 100, lost: 0, committed: 1_200 };
        let strict = Thresholds { warn_lag: Some(100), ..Thresholds::default() };
        assert_eq!(partition(&h, &lag, Some(0), true, &strict).status, Status::Warn);
        let timely = Thresholds { warn_time_lag: Some(Duration::from_secs(30)), ..Thresholds::default() };
        let verdict = partition(&h, &lag, Some(31_000), true, &timely);
        assert_eq!((verdict.status, verdict.reason.as_str()), (Status::Warn, "time lag 31 s is at or above 30 s"));
        assert_eq!(partition(&h, &lag, Some(0), true, &Thresholds::default()).status, Status::Ok);
    }

    #[test]
    fn a_group_is_its_worst_partition_named() {
        let ok = Verdict::new(Status::Ok, "consuming");
        let stall = Verdict::new(Status::Stall, "stuck");
        let group = group([("t-0".to_string(), &ok), ("t-1".to_string(), &stall)]);
        assert_eq!((group.status, group.reason.as_str()), (Status::Stall, "t-1: stuck"));
        assert_eq!(super::group([("t-0".to_string(), &ok)]).status, Status::Ok);
        assert!(Status::Err > Status::Stop && Status::Stop > Status::Stall && Status::Warn > Status::Ok);
    }
}
