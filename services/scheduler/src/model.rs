//! A tick's life as data, and the engine's decisions as pure functions: no
//! IO, no clock (times come in as arguments), so every rule has a unit test.
//!
//! The names serialise to the strings the run history, the metric labels and
//! the admin API have always used (`succeeded`, `lost_claim`, `overlap`, …).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::schedule::Schedule;

/// A tick: a scheduled one (its nominal UTC instant, Unix ms) or a manual
/// trigger (the moment it was triggered).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tick {
    pub ms: i64,
    pub manual: bool,
}

impl Tick {
    pub fn scheduled(ms: i64) -> Self {
        Self { ms, manual: false }
    }

    pub fn manual(ms: i64) -> Self {
        Self { ms, manual: true }
    }

    /// The tick's name in keys and record ids: `1700000000000`, or
    /// `m1700000000000` for a manual one.
    pub fn name(&self) -> String {
        if self.manual { format!("m{}", self.ms) } else { self.ms.to_string() }
    }
}

/// How a tick or a run stands in the history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Claimed and running (the record is replaced when it ends).
    #[default]
    Running,
    /// Waiting behind the running tick (overlap policy buffer-one).
    Queued,
    Succeeded,
    /// The job failed (its own error: bad data, a refused request, a bug).
    Failed,
    /// A dependency the job needs (Redis, the chain) was unavailable.
    Unavailable,
    TimedOut,
    /// The run lost its lease, or a newer run fenced its writes.
    LostClaim,
    /// Stopped by shutdown; the tick stays open for a peer to take over.
    Cancelled,
    Skipped,
    Missed,
    /// Its replica stopped (killed, paused past its lease) without recording
    /// an end; `applied` says whether its writes are the tick's effect.
    Abandoned,
}

impl Outcome {
    /// How a run can end (the `outcome` label of `sluice_scheduler_runs_total`).
    pub const RUN_ENDS: [Outcome; 6] = [
        Outcome::Succeeded,
        Outcome::Failed,
        Outcome::Unavailable,
        Outcome::TimedOut,
        Outcome::LostClaim,
        Outcome::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Queued => "queued",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Unavailable => "unavailable",
            Self::TimedOut => "timed_out",
            Self::LostClaim => "lost_claim",
            Self::Cancelled => "cancelled",
            Self::Skipped => "skipped",
            Self::Missed => "missed",
            Self::Abandoned => "abandoned",
        }
    }
}

/// Why a claimed tick is resolved without running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// Claimed past its start window (recorded as `missed`).
    Late,
    Paused,
    /// The previous run was still going (overlap policy).
    Overlap,
}

impl SkipReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Late => "late",
            Self::Paused => "paused",
            Self::Overlap => "overlap",
        }
    }

    /// The record this skip leaves: `missed` for a late tick, else `skipped`.
    pub fn outcome(self) -> Outcome {
        if self == Self::Late { Outcome::Missed } else { Outcome::Skipped }
    }
}

/// Why a claim attempt got nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LostReason {
    /// Another replica runs it, or waits to.
    Held,
    /// The tick was resolved already.
    Done,
    /// A newer tick was claimed.
    Superseded,
    /// The job moved on since the caller looked: try again from `previous`.
    Retry,
    /// Its run died after applying the tick's effect: this attempt recorded
    /// that and resolved the tick, which is not run again.
    Applied,
}

impl LostReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Held => "held",
            Self::Done => "done",
            Self::Superseded => "superseded",
            Self::Retry => "retry",
            Self::Applied => "applied",
        }
    }
}

/// Why ticks ended up not run (the `reason` of `…_ticks_missed_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MissReason {
    /// No replica claimed them in time.
    Unclaimed,
    /// Claimed past the start window.
    Late,
    /// Its run died before applying anything, and nobody took it over in time.
    Abandoned,
}

impl MissReason {
    pub const ALL: [MissReason; 3] = [Self::Unclaimed, Self::Late, Self::Abandoned];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unclaimed => "unclaimed",
            Self::Late => "late",
            Self::Abandoned => "abandoned",
        }
    }
}

/// How a claimer means to treat a tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Intent {
    Run,
    /// Resolve it as not run (`late` or `paused`).
    Skip(SkipReason),
}

/// Run the tick, unless the job is paused or the tick is past its window.
pub fn intent(paused: bool, late_ms: i64, start_window: Duration) -> Intent {
    if paused {
        Intent::Skip(SkipReason::Paused)
    } else if late_ms <= start_window.as_millis() as i64 {
        Intent::Run
    } else {
        Intent::Skip(SkipReason::Late)
    }
}

/// Scheduled ticks nobody claimed: from `first` to `last`, `count` of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gap {
    pub first: i64,
    pub last: i64,
    pub count: u64,
}

/// The ticks strictly between the newest claimed one (`previous`; none yet:
/// no gap, the job starts with its next tick) and `tick`, counted up to `cap`.
pub fn gap(schedule: &Schedule, previous: Option<i64>, tick: i64, cap: u64) -> Option<Gap> {
    let previous = previous?;
    let (count, last) = schedule.between(previous, tick, cap);
    let first = schedule.next_after(previous)?;
    (count > 0).then(|| Gap { first, last: last.unwrap_or(first), count })
}

/// Why a run was stopped before it ended by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Timeout,
    LeaseLost,
    Shutdown,
}

/// What kind of error a job returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A dependency failed in a way that may pass (Redis, the chain).
    Dependency,
    /// The job itself failed.
    Job,
    /// A write was refused by the fence: the run no longer holds its lease.
    Fenced,
}

/// How a run's future ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Returned {
    Ok,
    Err(ErrorKind, String),
    /// It did not return within the grace after a stop and was dropped.
    Dropped,
}

/// The outcome and reason of a run, from what it returned (which decides if
/// it returned at all, even within the grace after a stop), the stop that
/// interrupted it, and the writes the fence refused (any refusal means the
/// run lost its claim, whatever it returned).
pub fn classify(returned: &Returned, stop: Option<Stop>, refused: u64, timeout: Duration) -> (Outcome, String) {
    if refused > 0 {
        return (Outcome::LostClaim, format!("{refused} writes refused: the run no longer held its lease"));
    }
    match (returned, stop) {
        (Returned::Ok, _) => (Outcome::Succeeded, String::new()),
        (Returned::Err(ErrorKind::Dependency, e), _) => (Outcome::Unavailable, e.clone()),
        (Returned::Err(ErrorKind::Job, e), _) => (Outcome::Failed, e.clone()),
        (Returned::Err(ErrorKind::Fenced, e), _) => (Outcome::LostClaim, e.clone()),
        (Returned::Dropped, Some(Stop::LeaseLost)) => {
            (Outcome::LostClaim, "the lease was lost while the run went on".into())
        }
        (Returned::Dropped, Some(Stop::Timeout)) => {
            (Outcome::TimedOut, format!("ran past its timeout of {} ms", timeout.as_millis()))
        }
        (Returned::Dropped, _) => (Outcome::Cancelled, "the shutdown deadline passed".into()),
    }
}

/// A tick is resolved by its run's end (no peer may run it again) unless
/// the run was cancelled before applying anything: then it stays open for
/// a peer to take over within its window.
pub fn resolves_tick(outcome: Outcome, applied: u64) -> bool {
    outcome != Outcome::Cancelled || applied > 0
}

/// Item completion times: median, 95th percentile and last, in ms.
pub fn quantiles(done: &[Duration]) -> (u64, u64, u64) {
    let mut sorted = done.to_vec();
    sorted.sort_unstable();
    let at = |q: f64| {
        let rank = ((sorted.len() as f64 * q).ceil() as usize).saturating_sub(1);
        sorted.get(rank).map_or(0, |d| d.as_millis() as u64)
    };
    (at(0.5), at(0.95), at(1.0))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn names_are_the_history_s_strings() {
        let json = serde_json::to_string(&[Outcome::LostClaim, Outcome::TimedOut, Outcome::Abandoned]).expect("json");
        assert_eq!(json, r#"["lost_claim","timed_out","abandoned"]"#);
        for outcome in Outcome::RUN_ENDS {
            assert_eq!(serde_json::to_string(&outcome).expect("json"), format!("\"{}\"", outcome.as_str()));
        }
        assert_eq!(serde_json::to_string(&Intent::Skip(SkipReason::Late)).expect("json"), r#"{"skip":"late"}"#);
        assert_eq!(Tick::manual(5).name(), "m5");
        assert_eq!(Tick::scheduled(5).name(), "5");
    }

    #[test]
    fn intent_runs_within_the_window_only() {
        let w = Duration::from_millis(1000);
        assert_eq!(intent(false, 1000, w), Intent::Run);
        assert_eq!(intent(false, 1001, w), Intent::Skip(SkipReason::Late));
        assert_eq!(intent(true, 0, w), Intent::Skip(SkipReason::Paused), "paused wins");
        assert_eq!(SkipReason::Late.outcome(), Outcome::Missed);
        assert_eq!(SkipReason::Overlap.outcome(), Outcome::Skipped);
    }

    #[test]
    fn gaps_are_the_ticks_strictly_between() {
        let s = Schedule::parse("*/10 * * * * *").expect("valid");
        assert_eq!(gap(&s, None, 60_000, 100), None, "a job that never ran has no gap");
        assert_eq!(gap(&s, Some(0), 10_000, 100), None, "consecutive ticks");
        assert_eq!(gap(&s, Some(0), 40_000, 100), Some(Gap { first: 10_000, last: 30_000, count: 3 }));
    }

    #[test]
    fn classification_of_every_ending() {
        let t = Duration::from_millis(500);
        let err = |k| Returned::Err(k, "boom".into());
        assert_eq!(classify(&Returned::Ok, None, 0, t).0, Outcome::Succeeded);
        assert_eq!(classify(&Returned::Ok, Some(Stop::Timeout), 0, t).0, Outcome::Succeeded, "returned in the grace");
        assert_eq!(classify(&err(ErrorKind::Dependency), None, 0, t), (Outcome::Unavailable, "boom".into()));
        assert_eq!(classify(&err(ErrorKind::Job), None, 0, t), (Outcome::Failed, "boom".into()));
        assert_eq!(classify(&err(ErrorKind::Fenced), None, 0, t).0, Outcome::LostClaim);
        assert_eq!(classify(&Returned::Dropped, Some(Stop::LeaseLost), 0, t).0, Outcome::LostClaim);
        let (outcome, reason) = classify(&Returned::Dropped, Some(Stop::Timeout), 0, t);
        assert_eq!((outcome, reason.as_str()), (Outcome::TimedOut, "ran past its timeout of 500 ms"));
        assert_eq!(classify(&Returned::Dropped, Some(Stop::Shutdown), 0, t).0, Outcome::Cancelled);
        assert_eq!(classify(&Returned::Ok, None, 2, t).0, Outcome::LostClaim, "refusals win");
        assert!(resolves_tick(Outcome::Failed, 0));
        assert!(!resolves_tick(Outcome::Cancelled, 0), "open for a takeover");
        assert!(resolves_tick(Outcome::Cancelled, 1), "its effect is applied: never run again");
    }

    #[test]
    fn quantiles_of_item_completions() {
        let ms = |v: &[u64]| v.iter().map(|m| Duration::from_millis(*m)).collect::<Vec<_>>();
        assert_eq!(quantiles(&[]), (0, 0, 0));
        assert_eq!(quantiles(&ms(&[30, 10, 20])), (20, 30, 30));
        assert_eq!(quantiles(&ms(&(1..=100).collect::<Vec<_>>())), (50, 95, 100));
    }

    proptest! {
        /// The gap plus the two ends account for every tick in between.
        #[test]
        fn gap_counts_every_tick_between(step in 1u32..30, from in 0i64..10_000, span in 0i64..200) {
            let s = Schedule::parse(&format!("*/{step} * * * * *")).expect("valid");
            let previous = s.next_after(from * 1000).expect("fires");
            let tick = s.upcoming(previous, (span as usize) + 1).last().copied().expect("fires");
            let count = gap(&s, Some(previous), tick, 10_000).map_or(0, |g| g.count);
            prop_assert_eq!(count, span as u64);
        }

        /// A run that returned is classified by what it returned, whatever stopped it.
        #[test]
        fn a_returned_run_is_judged_by_its_return(stop in 0u8..4, ok in any::<bool>()) {
            let stop = [None, Some(Stop::Timeout), Some(Stop::LeaseLost), Some(Stop::Shutdown)][stop as usize];
            let returned = if ok { Returned::Ok } else { Returned::Err(ErrorKind::Job, "x".into()) };
            let expected = if ok { Outcome::Succeeded } else { Outcome::Failed };
            prop_assert_eq!(classify(&returned, stop, 0, Duration::from_secs(1)).0, expected);
        }
    }
}
