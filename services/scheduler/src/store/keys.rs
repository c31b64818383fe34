//! Key names of one job, under the deployment's prefix (`<prefix>sched:<job>:`):
//! - `state` (hash): `last_tick` (the newest scheduled tick claimed: ticks
//!   are claimed in order, so an older one can never be claimed again,
//!   however long ago its claim expired), `last_done_tick` (the newest tick
//!   resolved), `last_success_ms`, `paused`, `paused_reason`, and `open`
//!   (the run that took the lease and has not recorded its end: who to
//!   record as abandoned if its lease lapses);
//! - `tick:T` / `manual:T`: the claim of a tick (`owner:token`, `owner:q…`
//!   while queued, `owner:s` when skipped), kept past the run so a replica
//!   whose ticker or clock is out of phase finds the tick taken;
//! - `running`: the lease (`owner:token`), at most one run of a job at a time;
//! - `queued`: the one tick waiting (overlap policy buffer-one);
//! - `fence`: the fencing counter; every run start draws the next token;
//! - `ledger:T` (hash): the tick's effect ledger: `run` (the lease value of
//!   the run whose writes are the tick's effect), `writes`, and `w:<id>`, the
//!   reply of each write applied (kept as long as the tick's records);
//! - `runs` (sorted set by tick) and `run:<id>` (JSON records): the history,
//!   trimmed to the newest N per job.

use crate::model::Tick;

/// Key names of one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobKeys {
    base: String,
}

impl JobKeys {
    pub fn new(prefix: &str, job: &str) -> Self {
        Self { base: format!("{prefix}sched:{job}:") }
    }

    /// `<prefix>sched:<job>:`, the start of every key here.
    pub fn base(&self) -> &str {
        &self.base
    }

    pub fn state(&self) -> String {
        format!("{}state", self.base)
    }

    pub fn fence(&self) -> String {
        format!("{}fence", self.base)
    }

    pub fn running(&self) -> String {
        format!("{}running", self.base)
    }

    pub fn queued(&self) -> String {
        format!("{}queued", self.base)
    }

    pub fn runs(&self) -> String {
        format!("{}runs", self.base)
    }

    /// A record's key.
    pub fn run(&self, id: &str) -> String {
        format!("{}run:{id}", self.base)
    }

    /// A tick's claim; manual runs have their own namespace so that
    /// triggering never takes a scheduled tick's place.
    pub fn tick(&self, tick: Tick) -> String {
        if tick.manual { format!("{}manual:{}", self.base, tick.ms) } else { format!("{}tick:{}", self.base, tick.ms) }
    }

    /// A tick's effect ledger.
    pub fn ledger(&self, tick: Tick) -> String {
        format!("{}ledger:{}", self.base, tick.name())
    }
}

/// The claim and queue value of a tick waiting behind a running one: names
/// the tick, so a lapsed wait can never be mistaken for a newer one.
pub fn queued_value(owner: &str, tick: Tick) -> String {
    format!("{owner}:q{}", tick.name())
}

/// The claim value of a tick resolved as not run.
pub fn skipped_value(owner: &str) -> String {
    format!("{owner}:s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_names_are_the_ones_deployments_have() {
        let k = JobKeys::new("sluice:", "heartbeat");
        assert_eq!(k.state(), "sluice:sched:heartbeat:state");
        assert_eq!(k.tick(Tick::scheduled(15_000)), "sluice:sched:heartbeat:tick:15000");
        assert_eq!(k.tick(Tick::manual(15_000)), "sluice:sched:heartbeat:manual:15000");
        assert_eq!(k.ledger(Tick::manual(15_000)), "sluice:sched:heartbeat:ledger:m15000");
        assert_eq!(k.run("15000-3"), "sluice:sched:heartbeat:run:15000-3");
        assert_eq!(queued_value("a", Tick::manual(7)), "a:qm7");
        assert_eq!(queued_value("a", Tick::scheduled(7)), "a:q7");
    }
}
