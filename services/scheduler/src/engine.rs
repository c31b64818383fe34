//! The engine: one ticker per job, claims, runs and their leases.
//!
//! Each replica ticks every job on its own ([`ticker`]): it sleeps until the
//! next nominal tick (tokio's monotonic timer, re-checked against the wall
//! clock at least every [`ticker::WALL_CHECK`]), then tries to claim the
//! latest due tick. Whoever wins the claim runs it ([`run`]); the others
//! count contention and watch the tick until its start window closes,
//! taking it over only if the winner's lease lapsed *and* its run applied
//! nothing (the store's ledger answers that). A run keeps its lease with
//! [`sluice_coord::keeper`] and is cancelled when the lease is lost.
//!
//! Nothing is decided in process memory that another replica must agree
//! with: claims, overlap, pauses, the effect ledger and the run history all
//! live in the [`Store`]. Time comes from a [`Clock`] and tokio's timers, so
//! the whole engine runs under tokio's paused time in tests.

mod run;
mod ticker;

#[cfg(test)]
mod harness;
#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, watch};

use crate::clock::Clock;
use crate::config::{JobSettings, SchedulerConfig};
use crate::jobs::Job;
use crate::metrics::Metrics;
use crate::model::{Intent, SkipReason, Tick};
use crate::store::{ClaimOutcome, Store, StoreError};

/// A job with its settings.
pub struct JobEntry {
    pub job: Arc<dyn Job>,
    pub settings: JobSettings,
}

impl JobEntry {
    /// Every job with its settings from `env` (`JOB_<NAME>_…`); a job whose
    /// settings are bad is left out and the problem recorded in `env`.
    pub fn read_all(env: &mut sluice_service::env::EnvReader, jobs: Vec<Arc<dyn Job>>) -> Vec<JobEntry> {
        jobs.into_iter()
            .filter_map(|job| {
                let settings = JobSettings::read(env, job.name(), &job.defaults())?;
                Some(JobEntry { job, settings })
            })
            .collect()
    }
}

impl std::fmt::Debug for JobEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobEntry").field("job", &self.job.name()).field("settings", &self.settings).finish()
    }
}

/// What a manual trigger did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Triggered {
    pub tick_ms: i64,
    pub started: bool,
    pub reason: String,
}

/// Why a manual trigger could not be tried.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TriggerError {
    #[error("no job {0:?}")]
    NoJob(String),
    #[error("the scheduler is shutting down")]
    ShuttingDown,
    #[error("claiming: {0}")]
    Store(#[from] StoreError),
}

/// The scheduler of one replica.
#[derive(Debug, Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: SchedulerConfig,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    metrics: Metrics,
    jobs: Vec<Arc<JobEntry>>,
    /// Set on shutdown: claim nothing more.
    stopping: watch::Sender<bool>,
    /// Set when the shutdown deadline passes: cancel running jobs.
    cancel_all: watch::Sender<bool>,
    /// Claims and runs in progress (a shutdown waits for them).
    busy: AtomicUsize,
    busy_ended: Notify,
}

/// Counts work as in progress until dropped.
struct Busy(Arc<Inner>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::SeqCst);
        self.0.busy_ended.notify_waiters();
    }
}

impl Engine {
    pub fn new(
        config: SchedulerConfig,
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        metrics: Metrics,
        jobs: Vec<JobEntry>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                config,
                store,
                clock,
                metrics,
                jobs: jobs.into_iter().map(Arc::new).collect(),
                stopping: watch::channel(false).0,
                cancel_all: watch::channel(false).0,
                busy: AtomicUsize::new(0),
                busy_ended: Notify::new(),
            }),
        }
    }

    pub fn store(&self) -> &dyn Store {
        self.inner.store.as_ref()
    }

    pub fn now_ms(&self) -> i64 {
        self.inner.clock.now_ms()
    }

    pub fn jobs(&self) -> &[Arc<JobEntry>] {
        &self.inner.jobs
    }

    pub fn job(&self, name: &str) -> Option<&Arc<JobEntry>> {
        self.inner.jobs.iter().find(|e| e.job.name() == name)
    }

    pub fn is_stopping(&self) -> bool {
        *self.inner.stopping.borrow()
    }

    /// Starts a ticker for every enabled job.
    pub fn start(&self) {
        for entry in &self.inner.jobs {
            if entry.settings.enabled {
                tracing::info!(
                    job = entry.job.name(),
                    schedule = entry.settings.schedule.expression(),
                    next = ?entry.settings.schedule.upcoming(self.now_ms(), 3),
                    "Job scheduled (UTC)"
                );
                if entry.settings.start_window() <= self.inner.config.lease_ttl {
                    tracing::warn!(
                        job = entry.job.name(),
                        "The start window is not above the lease time: a tick whose run dies is recorded, not taken over"
                    );
                }
                tokio::spawn(Arc::clone(&self.inner).tick_loop(Arc::clone(entry)));
            } else {
                tracing::info!(job = entry.job.name(), "Job disabled");
            }
        }
    }

    /// Runs `job` now through the same claim, lease and fencing as a tick.
    pub async fn trigger_now(&self, job: &str) -> Result<Triggered, TriggerError> {
        let entry = Arc::clone(self.job(job).ok_or_else(|| TriggerError::NoJob(job.into()))?);
        if self.is_stopping() {
            return Err(TriggerError::ShuttingDown);
        }
        let tick = Tick::manual(self.now_ms());
        let intent = if entry.settings.paused { Intent::Skip(SkipReason::Paused) } else { Intent::Run };
        // Counted as work in progress, so a shutdown waits for what it starts.
        let _busy = self.inner.busy();
        let claimed = self.inner.claim(&entry, tick, intent, None).await?;
        let (started, reason) = trigger_answer(&claimed.outcome);
        Arc::clone(&self.inner).after_claim(&entry, tick, claimed);
        Ok(Triggered { tick_ms: tick.ms, started, reason })
    }

    /// SIGTERM: claim nothing more, let runs finish within the shutdown
    /// deadline, then cancel what still runs (its tick stays open for a peer
    /// to take over within its window, unless it applied something) and
    /// release the leases.
    pub async fn shutdown(&self) {
        let inner = &self.inner;
        inner.stopping.send_replace(true);
        let soft = inner.config.shutdown_deadline.saturating_sub(inner.config.cancel_grace);
        if !inner.wait_idle(soft).await {
            tracing::warn!(busy = inner.busy.load(Ordering::SeqCst), "Shutdown deadline: cancelling runs");
            inner.cancel_all.send_replace(true);
            // The grace, plus the time recording a run's end may take.
            inner.wait_idle(inner.config.cancel_grace + run::FINISH_BUDGET).await;
        }
    }
}

impl Inner {
    fn busy(self: &Arc<Self>) -> Busy {
        self.busy.fetch_add(1, Ordering::SeqCst);
        Busy(Arc::clone(self))
    }

    fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Waits until nothing is in progress; false if `limit` passed first.
    async fn wait_idle(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let ended = self.busy_ended.notified();
            if self.busy.load(Ordering::SeqCst) == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, ended).await.is_err() {
                return self.busy.load(Ordering::SeqCst) == 0;
            }
        }
    }
}

/// What a manual trigger's claim means for whoever triggered it.
fn trigger_answer(outcome: &ClaimOutcome) -> (bool, String) {
    match outcome {
        ClaimOutcome::Run { .. } => (true, String::new()),
        ClaimOutcome::Queued => (true, "queued behind the running tick (overlap policy buffer-one)".into()),
        ClaimOutcome::Skipped(SkipReason::Overlap) => {
            (false, "the job is running and its overlap policy does not allow another run".into())
        }
        ClaimOutcome::Skipped(reason) => (false, format!("not run: {}", reason.as_str())),
        ClaimOutcome::Lost(reason) => (false, format!("not claimed: {}", reason.as_str())),
    }
}
