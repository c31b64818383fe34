//! The run history's format: one JSON record per run (or per stretch of
//! ticks not run), under an id that orders and names it. The scripts write
//! the same JSON from the records built here, so the reasons a store writes
//! by itself are these constants.

use serde::{Deserialize, Serialize};

use crate::model::{Gap, Outcome, Tick};

/// The reasons a store writes by itself (a script receives them in its
/// request, so every text lives here).
pub mod texts {
    pub const PAUSED: &str = "the job is paused";
    pub const PAUSED_BY_CONFIG: &str = "the job is paused by configuration";
    pub const PAUSED_WHILE_QUEUED: &str = "the job was paused while the tick waited";
    pub const OVERLAP: &str = "the previous run was still going (overlap policy)";
    pub const QUEUED: &str = "waiting for the running tick (overlap policy buffer-one)";
    pub const UNCLAIMED: &str = "no replica claimed these ticks in time (all down, or all late)";
    pub const TAKEOVER: &str = "took over a tick whose run died";
    pub const ABANDONED_APPLIED: &str =
        "its replica stopped after applying the tick's effect, before recording the end; the tick is done";
    pub const ABANDONED_NONE: &str = "its replica stopped before applying any write, without recording an end";
    pub const ABANDONED_QUEUED: &str = "its replica stopped while the tick waited; taken over";
    pub const SUPERSEDED: &str = "the lease was gone when the run ended: a newer run had started";
}

/// One entry of the run history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct RunRecord {
    pub job: String,
    pub tick_ms: i64,
    pub owner: String,
    pub token: u64,
    pub started_ms: i64,
    pub ended_ms: i64,
    pub outcome: Outcome,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub items: u64,
    #[serde(default)]
    pub drift_found: u64,
    #[serde(default)]
    pub drift_repaired: u64,
    #[serde(default)]
    pub stale_writes: u64,
    /// Writes of the tick's effect this run applied, by the ledger: the run
    /// with writes is the one that applied the tick's effect.
    #[serde(default)]
    pub applied: u64,
    #[serde(default)]
    pub ticks: u64,
    #[serde(default)]
    pub last_tick_ms: i64,
    #[serde(default)]
    pub manual: bool,
    #[serde(default)]
    pub item_done_p50_ms: u64,
    #[serde(default)]
    pub item_done_p95_ms: u64,
    #[serde(default)]
    pub item_done_max_ms: u64,
}

impl RunRecord {
    /// A record of `tick` by `owner`, started `now_ms`, with `outcome`.
    pub fn new(job: &str, tick: Tick, owner: &str, outcome: Outcome, now_ms: i64) -> Self {
        Self {
            job: job.into(),
            tick_ms: tick.ms,
            owner: owner.into(),
            started_ms: now_ms,
            outcome,
            manual: tick.manual,
            ..Self::default()
        }
    }

    /// A tick resolved at once as not run (skipped, missed late): one tick.
    pub fn resolved_unrun(job: &str, tick: Tick, owner: &str, outcome: Outcome, reason: &str, now_ms: i64) -> Self {
        Self {
            ended_ms: now_ms,
            ticks: 1,
            last_tick_ms: tick.ms,
            reason: reason.into(),
            ..Self::new(job, tick, owner, outcome, now_ms)
        }
    }

    /// The `missed` record of a gap nobody claimed.
    pub fn missed(job: &str, gap: Gap, owner: &str, now_ms: i64) -> Self {
        Self {
            last_tick_ms: gap.last,
            ticks: gap.count,
            ..Self::resolved_unrun(job, Tick::scheduled(gap.first), owner, Outcome::Missed, texts::UNCLAIMED, now_ms)
        }
    }

    pub fn tick(&self) -> Tick {
        Tick { ms: self.tick_ms, manual: self.manual }
    }

    /// The record's id in the history: a tick can have several records (a
    /// run taken over carries a new token; missed and skipped ones have none).
    pub fn id(&self) -> String {
        let tick = self.tick().name();
        match (self.token, self.outcome) {
            (0, Outcome::Missed) => format!("{tick}-missed"),
            (0, Outcome::Skipped) => format!("{tick}-skipped"),
            // Waiting (queued), or given up while waiting.
            (0, _) => format!("{tick}-queued-{}", self.owner),
            (token, _) => format!("{tick}-{token}"),
        }
    }

    pub fn json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// A record as a reader sees it: a run still marked running (or queued)
/// whose lease (or place) is no longer its own reads as abandoned: its
/// replica died or lost the lease without recording an end. (The store
/// records it as abandoned for good once a claim finds the lease free.)
pub fn as_read(mut run: RunRecord, running: Option<&str>, queued: Option<&str>) -> RunRecord {
    let alive = match run.outcome {
        Outcome::Running => running == Some(format!("{}:{}", run.owner, run.token).as_str()),
        Outcome::Queued => queued == Some(super::keys::queued_value(&run.owner, run.tick()).as_str()),
        _ => true,
    };
    if !alive {
        run.reason = format!("{} on {} without an end; its lease lapsed", run.outcome.as_str(), run.owner);
        run.outcome = Outcome::Abandoned;
    }
    run
}

/// The job state a replica reports (admin API).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobState {
    pub paused: bool,
    pub paused_reason: String,
    pub last_success_ms: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_written_by_earlier_versions_still_read() {
        // A record as the history held it before `applied` existed.
        let old = r#"{"job":"heartbeat","tick_ms":15000,"owner":"a","token":3,"started_ms":15001,
            "ended_ms":15010,"outcome":"lost_claim","reason":"x","items":1,"manual":false}"#;
        let run: RunRecord = serde_json::from_str(old).expect("an old record");
        assert_eq!((run.outcome, run.applied, run.id()), (Outcome::LostClaim, 0, "15000-3".to_string()));
        let back: serde_json::Value = serde_json::from_str(&run.json()).expect("json");
        assert_eq!(back["outcome"], "lost_claim");
    }

    #[test]
    fn ids_name_the_tick_and_the_run() {
        let run = RunRecord { token: 7, ..RunRecord::new("j", Tick::manual(9), "a", Outcome::Running, 1) };
        assert_eq!(run.id(), "m9-7");
        let gap = Gap { first: 10, last: 30, count: 3 };
        let missed = RunRecord::missed("j", gap, "a", 40);
        assert_eq!((missed.id(), missed.ticks, missed.last_tick_ms), ("10-missed".to_string(), 3, 30));
        let queued = RunRecord::new("j", Tick::scheduled(9), "b", Outcome::Queued, 1);
        assert_eq!(queued.id(), "9-queued-b");
    }
}
