//! [`Store`] in process memory: the rules of `scripts/*.lua`, step for
//! step, over typed state behind one lock (one lock hold = one script run,
//! as atomic as Redis makes a script). Keys expire by the injected
//! [`Clock`], so the engine's tests run it under tokio's paused time.
//!
//! Job writes cannot run Lua here: a test registers, per job script name, a
//! Rust model of what the script does ([`MemoryStore::model`]); the ledger
//! and fence around it are the store's own, as in Redis.

mod steps;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use self::steps::{JobData, Step, live, timed};
use super::history::as_read;
use super::keys::queued_value;
use super::{
    Applied, ClaimRequest, Claimed, FinishRequest, Finished, JobState, Queue, QueueRequest, RunLease, RunRecord, Store,
    StoreError, StoreResult, Write,
};
use crate::clock::Clock;
use crate::model::{Outcome, Tick};

/// What a job's write script does, in Rust: the reply it returns.
pub type WriteModel = Arc<dyn Fn(&RunLease, &Write) -> i64 + Send + Sync>;

/// The scheduler's state in memory (tests).
pub struct MemoryStore {
    prefix: String,
    clock: Arc<dyn Clock>,
    history_keep: usize,
    jobs: Mutex<HashMap<String, JobData>>,
    models: Mutex<HashMap<&'static str, WriteModel>>,
    /// Writes the fence refused, whether or not their caller still waited.
    refused: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

impl MemoryStore {
    pub fn new(prefix: &str, clock: Arc<dyn Clock>, history_keep: usize) -> Self {
        Self {
            prefix: prefix.into(),
            clock,
            history_keep,
            jobs: Mutex::default(),
            models: Mutex::default(),
            refused: Default::default(),
        }
    }

    /// Writes the fence refused so far (a zombie's late write included).
    pub fn refused_writes(&self) -> u64 {
        self.refused.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Registers what the job script `name` does.
    pub fn model(&self, name: &'static str, model: WriteModel) {
        self.models.lock().unwrap_or_else(|e| e.into_inner()).insert(name, model);
    }

    fn jobs(&self) -> MutexGuard<'_, HashMap<String, JobData>> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` as one atomic step on `job`'s state.
    fn step<R>(&self, job: &str, f: impl FnOnce(&mut Step<'_>) -> R) -> R {
        let mut jobs = self.jobs();
        let data = jobs.entry(job.to_string()).or_default();
        f(&mut Step { job: data, now: self.clock.now_ms(), keep: self.history_keep })
    }
}

#[async_trait::async_trait]
impl Store for MemoryStore {
    fn prefix(&self) -> &str {
        &self.prefix
    }

    fn connection(&self) -> Option<redis::aio::ConnectionManager> {
        None
    }

    async fn last_tick(&self, job: &str) -> StoreResult<Option<i64>> {
        Ok(self.step(job, |s| s.job.last_tick))
    }

    async fn claim(&self, req: &ClaimRequest) -> StoreResult<Claimed> {
        Ok(self.step(&req.job, |s| steps::claim(s, req)))
    }

    async fn start_queued(&self, req: &QueueRequest) -> StoreResult<Queue> {
        let rec = RunRecord::new(&req.job, req.tick, &req.owner, Outcome::Running, req.now_ms);
        Ok(self.step(&req.job, |s| steps::start_queued(s, rec, req.claim_ttl, req.lease_ttl)))
    }

    async fn leave_queue(&self, job: &str, owner: &str, tick: Tick) -> StoreResult<()> {
        self.step(job, |s| {
            if live(&s.job.queued, s.now) == Some(queued_value(owner, tick).as_str()) {
                s.job.queued = None;
            }
        });
        Ok(())
    }

    async fn renew(&self, lease: &RunLease, claim_ttl: Duration, lease_ttl: Duration) -> StoreResult<bool> {
        let value = lease.value();
        Ok(self.step(&lease.job, |s| {
            if live(&s.job.running, s.now) != Some(value.as_str()) {
                return false;
            }
            s.job.running = Some(timed(value.clone(), s.now, lease_ttl));
            if s.claim(lease.tick) == Some(value.as_str()) {
                s.job.claims.insert(lease.tick, timed(value.clone(), s.now, claim_ttl));
            }
            true
        }))
    }

    async fn apply(&self, lease: &RunLease, write: &Write) -> StoreResult<Applied> {
        let name = write.script.name();
        let model = self.models.lock().unwrap_or_else(|e| e.into_inner()).get(name).cloned();
        let model = model.ok_or_else(|| StoreError::Reply(format!("no model of the job script {name:?}")))?;
        let applied = self.step(&lease.job, |s| steps::apply(s, lease, write, &model));
        if matches!(applied, Applied::Superseded | Applied::LeaseLost | Applied::OtherRun) {
            self.refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(applied)
    }

    async fn finish(&self, end: &FinishRequest) -> StoreResult<Finished> {
        Ok(self.step(&end.lease.job, |s| steps::finish(s, end)))
    }

    async fn record(&self, run: &RunRecord) -> StoreResult<()> {
        self.step(&run.job, |s| s.record(run.clone()));
        Ok(())
    }

    async fn runs(&self, job: &str, limit: usize) -> StoreResult<Vec<RunRecord>> {
        Ok(self.step(job, |s| {
            let (running, queued) = (live(&s.job.running, s.now), live(&s.job.queued, s.now));
            s.job.records.values().rev().take(limit.max(1)).map(|r| as_read(r.clone(), running, queued)).collect()
        }))
    }

    async fn job_state(&self, job: &str) -> StoreResult<JobState> {
        Ok(self.step(job, |s| JobState {
            paused: s.job.paused,
            paused_reason: s.job.paused_reason.clone(),
            last_success_ms: s.job.last_success_ms,
        }))
    }

    async fn set_paused(&self, job: &str, paused: bool, reason: &str) -> StoreResult<()> {
        self.step(job, |s| {
            s.job.paused = paused;
            s.job.paused_reason = if paused { reason.into() } else { String::new() };
        });
        Ok(())
    }
}
