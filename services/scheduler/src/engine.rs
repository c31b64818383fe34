//! The engine: one ticker per job, claims, runs and their leases.
//!
//! Each replica ticks every job on its own: it sleeps until the next
//! nominal tick (tokio's monotonic timer, re-checked against the wall clock
//! at least every [`WALL_CHECK`]), then tries to claim the latest due tick.
//! Whoever wins the claim runs it; the others count contention and watch
//! the tick until its start window closes, taking it over only if the
//! winner's lease lapses (it died or was paused). A run renews its lease
//! every third of the lease time and is cancelled when renewal fails.
//!
//! Nothing is decided in process memory that another replica must agree
//! with: claims, overlap, pauses and the run history all live in Redis
//! ([`crate::store`]).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, watch};

use crate::config::{JobSettings, SchedulerConfig};
use crate::jobs::{Job, Report, RunContext};
use crate::metrics::Metrics;
pub use crate::store::now_ms;
use crate::store::{ClaimOutcome, ClaimRequest, Claimed, Finish, Intent, Queue, RunRecord, Store, Tick};

/// A sleeping ticker looks at the wall clock at least this often, so a
/// clock step or a suspended host is noticed.
const WALL_CHECK: Duration = Duration::from_secs(5);
/// How long recording a run's end may retry before giving up.
const FINISH_BUDGET: Duration = Duration::from_secs(5);
/// Missed ticks are counted one by one up to this many, then estimated.
const GAP_COUNT_CAP: u64 = 10_000;

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

/// Why a run was stopped before it ended by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Timeout,
    LeaseLost,
    Shutdown,
}

/// The scheduler of one replica.
#[derive(Debug, Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: SchedulerConfig,
    store: Store,
    metrics: Metrics,
    jobs: Vec<Arc<JobEntry>>,
    /// Set on shutdown: claim nothing more.
    stopping: watch::Sender<bool>,
    /// Set when the shutdown deadline passes: cancel running jobs.
    cancel_all: watch::Sender<bool>,
    running: AtomicUsize,
    run_ended: Notify,
}

/// Counts a run as in progress until dropped.
struct RunGuard(Arc<Inner>);

impl Drop for RunGuard {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
        self.0.run_ended.notify_waiters();
    }
}

impl Engine {
    pub fn new(config: SchedulerConfig, store: Store, metrics: Metrics, jobs: Vec<JobEntry>) -> Self {
        Self {
            inner: Arc::new(Inner {
                config,
                store,
                metrics,
                jobs: jobs.into_iter().map(Arc::new).collect(),
                stopping: watch::channel(false).0,
                cancel_all: watch::channel(false).0,
                running: AtomicUsize::new(0),
                run_ended: Notify::new(),
            }),
        }
    }

    pub fn store(&self) -> &Store {
        &self.inner.store
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
                    next = ?entry.settings.schedule.upcoming(now_ms(), 3),
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
    pub async fn trigger_now(&self, job: &str) -> Result<Triggered, String> {
        let entry = Arc::clone(self.job(job).ok_or_else(|| format!("no job {job:?}"))?);
        if self.is_stopping() {
            return Err("the scheduler is shutting down".into());
        }
        let tick = Tick { ms: now_ms(), manual: true };
        let intent = if entry.settings.paused { Intent::Skip("paused") } else { Intent::Run };
        // Counted as work in progress, so a shutdown waits for what it starts.
        let _busy = self.inner.track();
        let claimed = self.inner.claim(&entry, tick, intent, -1).await.map_err(|e| format!("claiming: {e}"))?;
        let (started, reason) = match &claimed.outcome {
            ClaimOutcome::Run { .. } => (true, String::new()),
            ClaimOutcome::Queued => (true, "queued behind the running tick (overlap policy buffer-one)".into()),
            ClaimOutcome::Skipped { reason } if reason == "overlap" => {
                (false, "the job is running and its overlap policy does not allow another run".into())
            }
            ClaimOutcome::Skipped { reason } => (false, format!("not run: {reason}")),
            ClaimOutcome::Lost { reason } => (false, format!("not claimed: {reason}")),
        };
        Arc::clone(&self.inner).after_claim(&entry, tick, claimed);
        Ok(Triggered { tick_ms: tick.ms, started, reason })
    }

    /// SIGTERM: claim nothing more, let runs finish within the shutdown
    /// deadline, then cancel what still runs (its tick stays open for a peer
    /// to take over within its window) and release the leases.
    pub async fn shutdown(&self) {
        let inner = &self.inner;
        inner.stopping.send_replace(true);
        let soft = inner.config.shutdown_deadline.saturating_sub(inner.config.cancel_grace);
        if !inner.wait_for_runs(soft).await {
            tracing::warn!(running = inner.running.load(Ordering::SeqCst), "Shutdown deadline: cancelling runs");
            inner.cancel_all.send_replace(true);
            // The grace, plus the time recording a run's end may take.
            inner.wait_for_runs(inner.config.cancel_grace + FINISH_BUDGET).await;
        }
    }
}

impl Inner {
    fn track(self: &Arc<Self>) -> RunGuard {
        self.running.fetch_add(1, Ordering::SeqCst);
        RunGuard(Arc::clone(self))
    }

    /// Waits until no run is in progress; false if `limit` passed first.
    async fn wait_for_runs(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let ended = self.run_ended.notified();
            if self.running.load(Ordering::SeqCst) == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, ended).await.is_err() {
                return self.running.load(Ordering::SeqCst) == 0;
            }
        }
    }

    fn jitter(&self, entry: &JobEntry, tick_ms: i64) -> i64 {
        let jitter = entry.settings.jitter.as_millis() as u64;
        if jitter == 0 {
            return 0;
        }
        let mut h = DefaultHasher::new();
        (&self.config.instance_id, entry.job.name(), tick_ms).hash(&mut h);
        (h.finish() % jitter) as i64
    }

    async fn tick_loop(self: Arc<Self>, entry: Arc<JobEntry>) {
        let schedule = &entry.settings.schedule;
        let job = entry.job.name();
        let mut stopping = self.stopping.subscribe();
        self.metrics.init_job(job);
        match self.store.job_state(job).await {
            Ok(state) => {
                self.metrics.paused.with_label_values(&[job]).set(i64::from(state.paused));
                if state.last_success_ms > 0 {
                    self.metrics.last_success.with_label_values(&[job]).set(state.last_success_ms as f64 / 1000.0);
                }
            }
            Err(e) => {
                tracing::warn!(job, error = %e, "Could not read the job's state; its metrics fill in at its next claim")
            }
        }
        // A tick that came due while no replica ran may still be in its
        // window; a job that never ran before starts with its next tick.
        let mut cursor = now_ms();
        let has_run = self.store.last_tick(job).await.is_ok_and(|last| last >= 0);
        if let Some(latest) = schedule.latest_at_or_before(cursor)
            && has_run
            && cursor - latest <= entry.settings.start_window().as_millis() as i64
        {
            self.attempt(&entry, latest).await;
        }
        loop {
            let Some(next) = schedule.next_after(cursor) else {
                tracing::info!(job, "Schedule has no further ticks");
                return;
            };
            self.metrics.next_tick.with_label_values(&[job]).set(next as f64 / 1000.0);
            let wake = next + self.jitter(&entry, next);
            loop {
                let left = wake - now_ms();
                if left <= 0 {
                    break;
                }
                let nap = Duration::from_millis(left as u64).min(WALL_CHECK);
                tokio::select! {
                    () = tokio::time::sleep(nap) => {}
                    _ = stopping.wait_for(|s| *s) => return,
                }
            }
            if *stopping.borrow() {
                return;
            }
            // The latest due tick: later than `next` if this replica slept
            // through several (the ones between are recorded as missed by
            // whoever claims next).
            let due = schedule.latest_at_or_before(now_ms()).unwrap_or(next).max(next);
            cursor = due;
            self.attempt(&entry, due).await;
        }
    }

    /// Claims `tick`; for a scheduled tick, with the record of the ticks
    /// nobody claimed since `observed_last`.
    async fn claim(
        &self,
        entry: &JobEntry,
        tick: Tick,
        intent: Intent,
        observed_last: i64,
    ) -> redis::RedisResult<Claimed> {
        let settings = &entry.settings;
        let skip_detail = match intent {
            Intent::Skip("late") => format!(
                "claimed {} ms after its time, past the start window ({} ms, misfire policy {:?})",
                now_ms() - tick.ms,
                settings.start_window().as_millis(),
                settings.misfire
            ),
            Intent::Skip("paused") => "the job is paused by configuration".into(),
            Intent::Skip(other) => other.to_string(),
            Intent::Run => String::new(),
        };
        let gap = if tick.manual { None } else { self.gap(entry, observed_last, tick.ms) };
        self.store
            .claim(&ClaimRequest {
                job: entry.job.name(),
                tick,
                owner: &self.config.instance_id,
                observed_last,
                gap,
                claim_ttl: settings.claim_keep(),
                lease_ttl: self.config.lease_ttl,
                intent,
                buffer_one: settings.overlap == crate::config::Overlap::BufferOne,
                skip_detail,
            })
            .await
    }

    /// The `missed` record of the scheduled ticks strictly between
    /// `previous` and `tick`, if there are any.
    fn gap(&self, entry: &JobEntry, previous: i64, tick: i64) -> Option<RunRecord> {
        if previous < 0 {
            return None;
        }
        let schedule = &entry.settings.schedule;
        let (count, last) = schedule.between(previous, tick, GAP_COUNT_CAP);
        let first = schedule.next_after(previous)?;
        let now = now_ms();
        (count > 0).then(|| RunRecord {
            job: entry.job.name().into(),
            tick_ms: first,
            last_tick_ms: last.unwrap_or(first),
            ticks: count,
            owner: self.config.instance_id.clone(),
            started_ms: now,
            ended_ms: now,
            outcome: "missed".into(),
            reason: "no replica claimed these ticks in time (all down, or all late)".into(),
            ..RunRecord::default()
        })
    }

    /// Tries to claim scheduled tick `tick_ms` and acts on the outcome.
    async fn attempt(self: &Arc<Self>, entry: &Arc<JobEntry>, tick_ms: i64) {
        let job = entry.job.name();
        let late = now_ms() - tick_ms - self.jitter(entry, tick_ms);
        let intent = if entry.settings.paused {
            Intent::Skip("paused")
        } else if late <= entry.settings.start_window().as_millis() as i64 {
            Intent::Run
        } else {
            Intent::Skip("late")
        };
        let tick = Tick { ms: tick_ms, manual: false };
        let _busy = self.track();
        let mut observed = match self.store.last_tick(job).await {
            Ok(last) => last,
            Err(e) => {
                self.metrics.errors.with_label_values(&[job, "claim"]).inc();
                tracing::warn!(job, tick_ms, error = %e, "Claim failed (Redis); the next claim records the tick as missed");
                return;
            }
        };
        // A peer may move the job on between the read and the claim; the
        // claim then says so and is tried again with what it saw.
        for _ in 0..3 {
            match self.claim(entry, tick, intent, observed).await {
                Ok(Claimed { outcome: ClaimOutcome::Lost { reason }, previous_tick, .. }) if reason == "retry" => {
                    observed = previous_tick;
                }
                Ok(claimed) => {
                    if !matches!(claimed.outcome, ClaimOutcome::Lost { .. })
                        && let Some(gap) = self.gap(entry, claimed.previous_tick, tick_ms)
                    {
                        self.metrics.ticks_missed.with_label_values(&[job, "unclaimed"]).inc_by(gap.ticks);
                        tracing::warn!(
                            job,
                            count = gap.ticks,
                            first = gap.tick_ms,
                            last = gap.last_tick_ms,
                            "Ticks nobody claimed in time"
                        );
                    }
                    Arc::clone(self).after_claim(entry, tick, claimed);
                    return;
                }
                Err(e) => {
                    self.metrics.errors.with_label_values(&[job, "claim"]).inc();
                    tracing::warn!(job, tick_ms, error = %e, "Claim failed (Redis); the next claim records the tick as missed");
                    return;
                }
            }
        }
        self.metrics.errors.with_label_values(&[job, "claim"]).inc();
        tracing::warn!(job, tick_ms, "Peers kept moving the job on during the claim; left to them");
    }

    fn after_claim(self: Arc<Self>, entry: &Arc<JobEntry>, tick: Tick, claimed: Claimed) {
        let job = entry.job.name();
        if claimed.last_success_ms > 0 {
            self.metrics.last_success.with_label_values(&[job]).set(claimed.last_success_ms as f64 / 1000.0);
        }
        let entry = Arc::clone(entry);
        match claimed.outcome {
            ClaimOutcome::Run { token, takeover } => {
                self.metrics.paused.with_label_values(&[job]).set(0);
                let guard = self.track();
                tokio::spawn(self.execute(guard, entry, tick, token, takeover));
            }
            ClaimOutcome::Queued => {
                let guard = self.track();
                tokio::spawn(self.wait_queued(guard, entry, tick));
            }
            ClaimOutcome::Skipped { reason } => match reason.as_str() {
                "late" => self.metrics.ticks_missed.with_label_values(&[job, "late"]).inc(),
                "paused" => {
                    self.metrics.paused.with_label_values(&[job]).set(1);
                    self.metrics.ticks_skipped.with_label_values(&[job, "paused"]).inc();
                }
                other => self.metrics.ticks_skipped.with_label_values(&[job, other]).inc(),
            },
            ClaimOutcome::Lost { reason } => {
                self.metrics.claims_contended.with_label_values(&[job]).inc();
                if reason == "held" && !tick.manual {
                    tokio::spawn(self.watch_for_takeover(entry, tick));
                }
            }
        }
    }

    async fn record(&self, record: &RunRecord) {
        if let Err(e) = self.store.record(record).await {
            self.metrics.errors.with_label_values(&[record.job.as_str(), "history"]).inc();
            tracing::warn!(job = record.job, tick_ms = record.tick_ms, error = %e, "Run history write failed");
        }
    }

    /// After losing tick `tick` to a peer: until its start window closes,
    /// look again every half lease, and take it over if the peer's run died.
    async fn watch_for_takeover(self: Arc<Self>, entry: Arc<JobEntry>, tick: Tick) {
        let closes = tick.ms + entry.settings.start_window().as_millis() as i64;
        let every = (self.config.lease_ttl / 2).max(Duration::from_millis(100));
        let mut stopping = self.stopping.subscribe();
        loop {
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                _ = stopping.wait_for(|s| *s) => return,
            }
            if now_ms() > closes {
                return;
            }
            let _busy = self.track();
            match self.claim(&entry, tick, Intent::Run, tick.ms).await {
                Ok(Claimed { outcome: ClaimOutcome::Lost { reason }, .. }) if reason == "held" => {}
                Ok(claimed) => {
                    if !matches!(claimed.outcome, ClaimOutcome::Lost { .. }) {
                        tracing::warn!(job = entry.job.name(), tick_ms = tick.ms, "Taking over a tick whose run died");
                        Arc::clone(&self).after_claim(&entry, tick, claimed);
                    }
                    return;
                }
                Err(_) => self.metrics.errors.with_label_values(&[entry.job.name(), "claim"]).inc(),
            }
        }
    }

    /// A tick queued behind the running one (buffer-one): waits for the
    /// lease, keeping its place alive, then runs.
    async fn wait_queued(self: Arc<Self>, guard: RunGuard, entry: Arc<JobEntry>, tick: Tick) {
        let job = entry.job.name();
        let owner = self.config.instance_id.clone();
        let queued_since = now_ms();
        let poll = (self.config.lease_ttl / 3).min(Duration::from_millis(200));
        let outcome = loop {
            if *self.stopping.borrow() {
                let _ = self.store.leave_queue(job, &owner, &tick).await;
                break Err("the scheduler shut down while the tick waited".to_string());
            }
            match self.store.start_queued(job, tick, &owner, entry.settings.claim_keep(), self.config.lease_ttl).await {
                Ok(Queue::Started(token)) => break Ok(token),
                Ok(Queue::Waiting) => {}
                Ok(Queue::Paused) => {
                    self.metrics.ticks_skipped.with_label_values(&[job, "paused"]).inc();
                    return;
                }
                Ok(Queue::Lost) => break Err("lost its place in the queue (its lease lapsed)".to_string()),
                Err(_) => self.metrics.errors.with_label_values(&[job, "queue"]).inc(),
            }
            tokio::time::sleep(poll).await;
        };
        match outcome {
            Ok(token) => Arc::clone(&self).execute(guard, entry, tick, token, false).await,
            Err(reason) => {
                // Replaces the queued record the claim wrote (same id).
                let record = RunRecord {
                    job: job.into(),
                    tick_ms: tick.ms,
                    owner,
                    started_ms: queued_since,
                    ended_ms: now_ms(),
                    outcome: "cancelled".into(),
                    reason,
                    manual: tick.manual,
                    ..RunRecord::default()
                };
                self.record(&record).await;
            }
        }
    }

    /// Runs a claimed tick to its end.
    async fn execute(self: Arc<Self>, _guard: RunGuard, entry: Arc<JobEntry>, tick: Tick, token: u64, takeover: bool) {
        let job = entry.job.name();
        let settings = &entry.settings;
        let m = &self.metrics;
        let owner = self.config.instance_id.clone();
        let value = format!("{owner}:{token}");
        let started = now_ms();
        if takeover {
            m.takeovers.with_label_values(&[job]).inc();
        }
        if !tick.manual {
            m.start_delay.with_label_values(&[job]).observe((started - tick.ms).max(0) as f64 / 1000.0);
        }
        // The claim recorded the run as running; this replaces that record.
        let mut record = RunRecord {
            job: job.into(),
            tick_ms: tick.ms,
            owner: owner.clone(),
            token,
            started_ms: started,
            reason: if takeover { "took over a tick whose run died".into() } else { String::new() },
            manual: tick.manual,
            ..RunRecord::default()
        };
        m.running.with_label_values(&[job]).inc();
        tracing::info!(job, tick_ms = tick.ms, token, takeover, manual = tick.manual, "Run started");

        let (cancel_tx, cancel_rx) = watch::channel(false);
        let ctx = RunContext::new(
            job,
            tick,
            token,
            owner.clone(),
            self.store.keys(job).fence(),
            self.store.keys(job).running(),
            self.store.prefix().to_string(),
            self.store.connection(),
            cancel_rx,
        );
        let (lost_tx, mut lost_rx) = watch::channel(false);
        let renewer = tokio::spawn(Arc::clone(&self).renew_loop(Arc::clone(&entry), tick, value.clone(), lost_tx));
        let mut cancel_all = self.cancel_all.subscribe();
        let run = entry.job.run(&ctx);
        tokio::pin!(run);
        let stop = async {
            tokio::select! {
                () = tokio::time::sleep(settings.timeout) => Stop::Timeout,
                _ = lost_rx.wait_for(|l| *l) => Stop::LeaseLost,
                _ = cancel_all.wait_for(|c| *c) => Stop::Shutdown,
            }
        };
        let (result, stopped) = tokio::select! {
            result = &mut run => (Some(result), None),
            why = stop => {
                // Cooperative first: start nothing new; then drop it.
                cancel_tx.send_replace(true);
                (tokio::time::timeout(self.config.cancel_grace, &mut run).await.ok(), Some(why))
            }
        };
        let refused = ctx.refused_count();
        let report = match &result {
            Some(Ok(report)) => report.clone(),
            _ => Report::default(),
        };
        // What the run returned decides, if it returned (also within the
        // grace after a stop); the stop's reason, if it had to be dropped.
        let (mut outcome, mut reason) = match (&result, stopped) {
            (Some(Ok(_)), _) => ("succeeded", String::new()),
            (Some(Err(e)), _) => ("failed", e.clone()),
            (None, Some(Stop::LeaseLost)) => ("lost_claim", "the lease was lost while the run went on".to_string()),
            (None, Some(Stop::Timeout)) => {
                ("timed_out", format!("ran past its timeout of {} ms", settings.timeout.as_millis()))
            }
            (None, _) => ("cancelled", "the shutdown deadline passed".to_string()),
        };
        if refused > 0 {
            (outcome, reason) = ("lost_claim", format!("{refused} writes refused: the run no longer held its lease"));
        }
        let ended = now_ms();
        let mut done = report.item_done.clone();
        done.sort_unstable();
        let at = |q: f64| {
            done.get(((done.len() as f64 * q).ceil() as usize).saturating_sub(1)).map_or(0, |d| d.as_millis() as u64)
        };
        record.ended_ms = ended;
        record.outcome = outcome.into();
        record.reason = if reason.is_empty() { record.reason } else { reason };
        record.items = report.items;
        record.drift_found = report.drift_found;
        record.drift_repaired = report.drift_repaired;
        record.stale_writes = refused;
        (record.item_done_p50_ms, record.item_done_p95_ms, record.item_done_max_ms) = (at(0.5), at(0.95), at(1.0));
        // The lease is renewed until the end is recorded: a lapse in between
        // would let a peer take over a tick that ran.
        let finished = self.finish(&entry, &record, &value).await;
        renewer.abort();
        match finished {
            Some(Finish::Stale) if outcome == "succeeded" => outcome = "lost_claim",
            None => {
                // Redis did not take the end: keep at least the record.
                if outcome == "succeeded" {
                    outcome = "lost_claim";
                }
                record.outcome = outcome.into();
                record.reason = format!("the end could not be recorded in Redis; {}", record.reason);
                self.record(&record).await;
            }
            _ => {}
        }
        if outcome == "lost_claim" {
            m.claims_lost.with_label_values(&[job]).inc();
        }
        m.running.with_label_values(&[job]).dec();
        m.runs.with_label_values(&[job, outcome]).inc();
        m.run_duration.with_label_values(&[job]).observe((ended - started).max(0) as f64 / 1000.0);
        m.stale_writes.with_label_values(&[job]).inc_by(refused);
        m.items.with_label_values(&[job]).inc_by(report.items);
        m.drift_found.with_label_values(&[job]).inc_by(report.drift_found);
        m.drift_repaired.with_label_values(&[job]).inc_by(report.drift_repaired);
        if outcome == "succeeded" {
            m.last_success.with_label_values(&[job]).set(ended as f64 / 1000.0);
        }
        tracing::info!(
            job,
            tick_ms = tick.ms,
            token,
            outcome,
            duration_ms = ended - started,
            items = report.items,
            "Run ended"
        );
    }

    /// Marks the run's end in Redis with its record, retrying briefly: a
    /// run whose end is not recorded looks dead, and a peer could take its
    /// tick over.
    async fn finish(&self, entry: &JobEntry, record: &RunRecord, value: &str) -> Option<Finish> {
        let job = entry.job.name();
        let mut delay = Duration::from_millis(100);
        let deadline = tokio::time::Instant::now() + FINISH_BUDGET;
        while tokio::time::Instant::now() < deadline {
            match self.store.finish(record, value, record.outcome != "cancelled", entry.settings.claim_keep()).await {
                Ok(finished) => return Some(finished),
                Err(e) => {
                    self.metrics.errors.with_label_values(&[job, "finish"]).inc();
                    tracing::warn!(job, error = %e, "Recording the run's end failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                }
            }
        }
        None
    }

    /// Renews the run's lease every third of its time; signals `lost` when
    /// renewal is refused or has failed for two thirds of the lease time.
    async fn renew_loop(self: Arc<Self>, entry: Arc<JobEntry>, tick: Tick, value: String, lost: watch::Sender<bool>) {
        let job = entry.job.name();
        let lease = self.config.lease_ttl;
        let mut last_ok = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(lease / 3).await;
            match self.store.renew(job, tick, &value, entry.settings.claim_keep(), lease).await {
                Ok(true) => last_ok = tokio::time::Instant::now(),
                Ok(false) => {
                    tracing::warn!(job, tick_ms = tick.ms, "Lease lost: cancelling the run");
                    lost.send_replace(true);
                    return;
                }
                Err(e) => {
                    self.metrics.errors.with_label_values(&[job, "renew"]).inc();
                    // Stop before the lease can lapse: after it, writes are refused.
                    if last_ok.elapsed() >= lease * 2 / 3 {
                        tracing::warn!(job, error = %e, "Lease not renewed for two thirds of its time: cancelling the run");
                        lost.send_replace(true);
                        return;
                    }
                }
            }
        }
    }
}
