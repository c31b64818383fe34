//! The verdict engine: the one place a partition's and a group's health is
//! classified (the metrics, Burrow's codes, the JSON and the scaler all read
//! these verdicts), Burrow-style over windows of time rather than of commits,
//! with thresholds per group, and always with its reason.
//!
//! Evidence comes from two places. What Kafka says at every poll: the lag,
//! the age of the oldest unconsumed record (its timestamp, read from the log),
//! whether a member owns the partition and whether the group is rebalancing.
//! And what sluice-lag has seen across its polls: the committed offset
//! standing still, going back, and how often it moves. Kafka's evidence
//! serves from the first poll after a start, so a restart of sluice-lag does
//! not turn a long-stopped group OK; the history sharpens it. Time lag alone
//! is never taken as "not consuming" from a partition a member owns: a group
//! draining a burst sees it rise at wall-clock speed while it consumes.
//!
//! A partition's verdict, the first rule that holds:
//! 1. REWIND: its committed offset went back within `stall_after`.
//! 2. OK: no committed offset yet, or no lag.
//! 3. STOP (no member owns it) or STALL (one does), when nothing consumes it:
//!    - its committed offset has not moved for `stall_after`; or
//!    - it has stood still with records waiting for three of its own commit
//!      intervals as sluice-lag has seen them, and at least `min_still` (a
//!      consumer that died or hangs, seen within a few polls; a group that
//!      commits every 5 s is not flagged, one that commits every 10 s after
//!      30 s, one that commits every 30 s only after `stall_after`); or
//!    - never seen to move, it has stood still for `min_still` while its
//!      oldest unconsumed record has waited `stall_after`; or
//!    - (STOP only) no member owns it, the group is not rebalancing, and its
//!      oldest unconsumed record has waited `stall_after`: Kafka's own
//!      evidence, from the first poll.
//! 4. WARN: the time lag or the lag is at its threshold, or the lag grew
//!    through the whole window.
//! 5. OK: consuming.
//!
//! A group's verdict is ERR when its committed offsets cannot be read, and
//! otherwise its worst partition's, named, in the order ERR > STOP > STALL >
//! REWIND > WARN > OK.

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
    /// A consumer owns the partition, but nothing consumes it: its committed
    /// offset stands still while records wait (stuck on a record, downstream,
    /// or a member that died and whose session has not expired yet).
    Stall,
    /// Nobody consumes: no member owns the partition, and records wait.
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
    pub fn new(status: Status, reason: impl Into<String>) -> Self {
        Self { status, reason: reason.into() }
    }
}

/// When a group's partitions change status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Thresholds {
    /// The window growth is judged over.
    pub window: Duration,
    /// How long a committed offset may stand still with lag before the
    /// partition is STALL (owned) or STOP (not owned), and how long its oldest
    /// unconsumed record may wait in a partition nobody owns; also how long a
    /// rewind is remembered.
    pub stall_after: Duration,
    /// The shortest standing still that counts for a partition seen to commit
    /// more often (three polls: below that a poll's timing decides).
    pub min_still: Duration,
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
            min_still: Duration::from_secs(15),
            warn_time_lag: None,
            warn_lag: None,
        }
    }
}

/// Whether a member owns a partition, as far as the group's description says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    Owned,
    /// Members join the group (it has a protocol type), it is not
    /// rebalancing, and none has the partition.
    Unowned,
    /// No member has it, but that says nothing by itself: the description
    /// could not be read, the group is rebalancing (assignments in flux), or
    /// its consumers assign partitions themselves and only commit (Flink).
    /// Judged as not owned, but not Kafka's evidence of a STOP.
    Unknown,
}

/// What is known of one partition now.
#[derive(Debug, Clone, Copy)]
pub struct Evidence<'a> {
    /// sluice-lag's samples of it, the newest taken at this poll.
    pub history: &'a History,
    pub lag: &'a Lag,
    /// The age of its oldest unconsumed record, ms.
    pub time_lag_ms: Option<i64>,
    pub ownership: Ownership,
}

fn ms(d: Duration) -> i64 {
    d.as_millis() as i64
}

/// One partition's verdict (the rules in the module's documentation).
pub fn partition(e: &Evidence<'_>, t: &Thresholds) -> Verdict {
    let Some(records) = e.lag.records() else { return Verdict::new(Status::Ok, "no committed offset yet") };
    if e.history.rewound(ms(t.stall_after)) {
        return Verdict::new(Status::Rewind, "the committed offset went back");
    }
    if records == 0 {
        return Verdict::new(Status::Ok, "caught up");
    }
    if let Some(why) = not_consuming(e, t) {
        return if e.ownership == Ownership::Owned {
            Verdict::new(Status::Stall, format!("owned, but {why}, with {records} records of lag"))
        } else {
            Verdict::new(Status::Stop, format!("no member owns it and {why}, with {records} records of lag"))
        };
    }
    if let (Some(limit), Some(age)) = (t.warn_time_lag, e.time_lag_ms)
        && age >= ms(limit)
    {
        return Verdict::new(Status::Warn, format!("time lag {} s is at or above {} s", age / 1000, limit.as_secs()));
    }
    if let Some(limit) = t.warn_lag
        && records >= limit
    {
        return Verdict::new(Status::Warn, format!("lag {records} is at or above {limit}"));
    }
    if e.history.lag_growing(ms(t.window)) {
        return Verdict::new(Status::Warn, format!("lag grew through the last {} s", t.window.as_secs()));
    }
    Verdict::new(Status::Ok, "consuming")
}

/// The evidence that nothing consumes a partition with lag, if there is any (rule 3).
fn not_consuming(e: &Evidence<'_>, t: &Thresholds) -> Option<String> {
    let h = e.history;
    let now = h.latest()?.at_ms;
    let stall = ms(t.stall_after);
    let waited = e.time_lag_ms.filter(|age| *age >= stall).map(|age| age / 1000);
    if let Some(since) = h.still_since_ms()
        && now - since >= stall
    {
        return Some(format!(
            "the committed offset has not moved {}",
            still_for(now - since, h.oldest_ms() == Some(since))
        ));
    }
    if let Some(since) = h.waiting_since_ms() {
        let (still, first) = (now - since, h.oldest_ms() == Some(since));
        let quick = match (h.commit_interval_ms(), waited) {
            (Some(interval), _) if still >= ms(t.min_still).max(3 * interval) => Some(format!(
                "the committed offset has not moved for {} s with records waiting, where it moved at least every {} s before",
                still / 1000,
                (interval + 999) / 1000
            )),
            (None, Some(waited)) if still >= ms(t.min_still) => Some(format!(
                "the committed offset has not moved {} and its oldest unconsumed record has waited {waited} s",
                still_for(still, first)
            )),
            _ => None,
        };
        if quick.is_some() {
            return quick;
        }
    }
    match (e.ownership, waited) {
        (Ownership::Unowned, Some(waited)) => Some(format!("its oldest unconsumed record has waited {waited} s")),
        _ => None,
    }
}

/// "for N s", or "in the N s sluice-lag has seen" when it stood still through every sample kept.
fn still_for(still_ms: i64, since_the_first_sample: bool) -> String {
    if since_the_first_sample {
        format!("in the {} s sluice-lag has seen", still_ms / 1000)
    } else {
        format!("for {} s", still_ms / 1000)
    }
}

/// A group's verdict: ERR when its committed offsets are `unreadable` (why), else the
/// worst of its partitions', naming the partition.
pub fn group<'a>(partitions: impl IntoIterator<Item = (String, &'a Verdict)>, unreadable: Option<String>) -> Verdict {
    if let Some(why) = unreadable {
        return Verdict::new(Status::Err, format!("committed offsets unreadable: {why}"));
    }
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
        timed(&points.iter().enumerate().map(|(i, (e, c))| (i as i64 * 5_000, *e, *c)).collect::<Vec<_>>())
    }

    /// Samples at their times: (at, log end, committed).
    fn timed(points: &[(i64, i64, i64)]) -> History {
        let mut h = History::new(600_000);
        for (at_ms, end, committed) in points {
            h.push(Sample { at_ms: *at_ms, end: *end, committed: Some(*committed), lag: Some(end - committed) });
        }
        h
    }

    fn verdict(h: &History, ownership: Ownership, time_lag_ms: i64, t: &Thresholds) -> Verdict {
        let last = h.latest().expect("samples");
        let lag = Lag::Behind { records: last.lag.unwrap_or(0), lost: 0, committed: last.committed.unwrap_or(0) };
        partition(&Evidence { history: h, lag: &lag, time_lag_ms: Some(time_lag_ms), ownership }, t)
    }

    fn status(h: &History, owned: bool, t: &Thresholds) -> Status {
        verdict(h, if owned { Ownership::Owned } else { Ownership::Unowned }, 0, t).status
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
    fn the_first_poll_after_a_start_reads_kafka_s_evidence() {
        let t = Thresholds::default();
        let first = history(&[(1_500, 1_000)]);
        // A group stopped nine minutes ago: nobody owns the partition, its oldest record waited 540 s.
        let stopped = verdict(&first, Ownership::Unowned, 540_000, &t);
        assert_eq!(stopped.status, Status::Stop);
        assert_eq!(
            stopped.reason,
            "no member owns it and its oldest unconsumed record has waited 540 s, with 500 records of lag"
        );
        assert_eq!(verdict(&first, Ownership::Unowned, 59_000, &t).status, Status::Ok, "waited less than stall_after");
        assert_eq!(verdict(&first, Ownership::Unknown, 540_000, &t).status, Status::Ok, "a rebalance is no evidence");
        assert_eq!(verdict(&first, Ownership::Owned, 540_000, &t).status, Status::Ok, "time lag alone is no evidence");
        // Owned, never seen to move for three polls, its oldest record waited past stall_after: stuck.
        let three_polls = history(&[(1_500, 1_000), (1_600, 1_000), (1_700, 1_000), (1_800, 1_000)]);
        let stuck = verdict(&three_polls, Ownership::Owned, 540_000, &t);
        assert_eq!(stuck.status, Status::Stall);
        assert!(stuck.reason.contains("has not moved in the 15 s sluice-lag has seen"), "{stuck:?}");
        assert_eq!(verdict(&three_polls, Ownership::Owned, 30_000, &t).status, Status::Ok, "a young backlog");
    }

    /// Polls every 5 s for a minute at which the committed offset follows the log `behind`
    /// records back, then `still` more polls at which it stands while the log grows.
    fn dies_after(behind: i64, still: i64) -> History {
        let mut points: Vec<(i64, i64)> = (0..12).map(|i| (10_000 + i * 1_000, 10_000 + i * 1_000 - behind)).collect();
        let (end, committed) = *points.last().expect("points");
        points.extend((1..=still).map(|k| (end + k * 1_000, committed)));
        history(&points)
    }

    #[test]
    fn a_consumer_that_dies_is_seen_within_three_polls() {
        let t = Thresholds::default();
        assert_eq!(verdict(&dies_after(300, 2), Ownership::Owned, 3_000, &t).status, Status::Ok, "two polls: not yet");
        let dead = verdict(&dies_after(300, 3), Ownership::Owned, 3_000, &t);
        assert_eq!(dead.status, Status::Stall, "its session has not expired: a member still owns it");
        assert_eq!(
            dead.reason,
            "owned, but the committed offset has not moved for 15 s with records waiting, where it moved at least every 5 s before, with 3300 records of lag"
        );
        assert_eq!(verdict(&dies_after(300, 3), Ownership::Unowned, 3_000, &t).status, Status::Stop);
        let caught_up = |polls| verdict(&dies_after(0, polls), Ownership::Owned, 0, &t).status;
        assert_eq!((caught_up(3), caught_up(4)), (Status::Ok, Status::Stall), "counted from the first record waiting");
    }

    #[test]
    fn no_false_alarm_on_a_slow_group_nor_on_one_draining_a_burst() {
        let t = Thresholds::default();
        // Commits every 10 s (every other poll) and falls behind: its time lag is past stall_after.
        let slow: Vec<(i64, i64)> = (0..40).map(|i| (1_000 + i * 100, 1_000 + (i / 2) * 2 * 60)).collect();
        let v = verdict(&history(&slow), Ownership::Owned, 90_000, &t);
        assert_ne!(v.status, Status::Stall, "{v:?}");
        // Draining a burst: 5 minutes behind, consuming at every poll.
        let draining: Vec<(i64, i64)> = (0..40).map(|i| (100_000, 40_000 + i * 1_000)).collect();
        assert_eq!(verdict(&history(&draining), Ownership::Owned, 300_000, &t).status, Status::Ok);
        // Commits every 30 s, as Kafka Streams does by default: still for 25 s between its commits.
        let streams: Vec<(i64, i64, i64)> =
            (0..40).map(|i| (i * 5_000, 1_000 + i * 100, 1_000 + (i / 6) * 600)).collect();
        assert_eq!(verdict(&timed(&streams), Ownership::Owned, 40_000, &t).status, Status::Ok);
        // Standing still for 65 s, it is stuck: `stall_after` caps three of its intervals (90 s).
        let mut stuck = streams.clone();
        let (at, end, committed) = *stuck.last().expect("points");
        stuck.extend((1..=13).map(|k| (at + k * 5_000, end + k * 100, committed)));
        let v = verdict(&timed(&stuck), Ownership::Owned, 40_000, &t);
        assert_eq!(v.status, Status::Stall, "{v:?}");
        // The slow group standing still for three of its own intervals (30 s) is stuck.
        let mut slow = history(&slow);
        let last = *slow.latest().expect("samples");
        let mut still = |polls: i64| {
            for k in 1..=polls {
                let end = last.end + k * 100;
                let committed = last.committed.expect("committed");
                slow.push(Sample {
                    at_ms: last.at_ms + k * 5_000,
                    end,
                    committed: Some(committed),
                    lag: Some(end - committed),
                });
            }
            verdict(&slow, Ownership::Owned, 90_000, &t)
        };
        assert_ne!(still(4).status, Status::Stall, "still for 25 s");
        let v = still(5);
        assert_eq!(v.status, Status::Stall, "{v:?}");
        assert!(
            v.reason.contains("has not moved for 30 s with records waiting, where it moved at least every 10 s before"),
            "{v:?}"
        );
    }

    #[test]
    fn thresholds_per_group() {
        let h = history(&(0..4).map(|i| (1_000 + i * 100, 900 + i * 100)).collect::<Vec<_>>());
        let strict = Thresholds { warn_lag: Some(100), ..Thresholds::default() };
        assert_eq!(verdict(&h, Ownership::Owned, 0, &strict).status, Status::Warn);
        let timely = Thresholds { warn_time_lag: Some(Duration::from_secs(30)), ..Thresholds::default() };
        let v = verdict(&h, Ownership::Owned, 31_000, &timely);
        assert_eq!((v.status, v.reason.as_str()), (Status::Warn, "time lag 31 s is at or above 30 s"));
        assert_eq!(verdict(&h, Ownership::Owned, 0, &Thresholds::default()).status, Status::Ok);
    }

    #[test]
    fn a_group_is_its_worst_partition_named() {
        let ok = Verdict::new(Status::Ok, "consuming");
        let stall = Verdict::new(Status::Stall, "stuck");
        let g = group([("t-0".to_string(), &ok), ("t-1".to_string(), &stall)], None);
        assert_eq!((g.status, g.reason.as_str()), (Status::Stall, "t-1: stuck"));
        assert_eq!(group([("t-0".to_string(), &ok)], None).status, Status::Ok);
        let unread = group([("t-1".to_string(), &stall)], Some("timed out".into()));
        assert_eq!((unread.status, unread.reason.as_str()), (Status::Err, "committed offsets unreadable: timed out"));
        assert!(Status::Err > Status::Stop && Status::Stop > Status::Stall && Status::Warn > Status::Ok);
    }
}
