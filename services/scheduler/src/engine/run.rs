//! One claimed tick's run, in three steps: run the job under its stops
//! (timeout, lost lease, shutdown), classify how it ended (pure:
//! [`model::classify`]), and record the end (the store says what was
//! applied) and emit it. A queued tick waits here for the lease first.

use std::sync::Arc;
use std::time::Duration;

use sluice_coord::keeper::{self, Kept};
use tokio::sync::watch;

use super::{Busy, Inner, JobEntry};
use crate::jobs::{Report, RunContext};
use crate::metrics::Op;
use crate::model::{self, Outcome, Returned, SkipReason, Stop, Tick};
use crate::store::{FinishRequest, Finished, Queue, QueueRequest, RunLease, RunRecord};

/// How long recording a run's end may retry before giving up.
pub(super) const FINISH_BUDGET: Duration = Duration::from_secs(5);

/// How a run's future ended, before classification.
struct Ended {
    returned: Returned,
    stop: Option<Stop>,
    report: Report,
    refused: u64,
}

impl Inner {
    /// Runs a claimed tick to its end.
    pub(super) async fn execute(
        self: Arc<Self>,
        _busy: Busy,
        entry: Arc<JobEntry>,
        tick: Tick,
        token: u64,
        takeover: bool,
    ) {
        let job = entry.job.name();
        let lease = RunLease { job: job.into(), tick, owner: self.config.instance_id.clone(), token };
        let started = self.now_ms();
        if takeover {
            self.metrics.takeovers.with_label_values(&[job]).inc();
        }
        if !tick.manual {
            self.metrics.start_delay.with_label_values(&[job]).observe((started - tick.ms).max(0) as f64 / 1000.0);
        }
        self.metrics.running.with_label_values(&[job]).inc();
        tracing::info!(job, tick_ms = tick.ms, token, takeover, manual = tick.manual, "Run started");
        // The lease is kept until the end is recorded: a lapse in between
        // would let a peer take over a tick that ran.
        let mut kept = self.keep_lease(&entry, &lease);
        let ended = self.run_job(&entry, &lease, &mut kept).await;
        let (outcome, reason) = model::classify(&ended.returned, ended.stop, ended.refused, entry.settings.timeout);
        let (p50, p95, max) = model::quantiles(&ended.report.item_done);
        let record = RunRecord {
            token,
            ended_ms: self.now_ms(),
            reason: if reason.is_empty() && takeover { crate::store::history::texts::TAKEOVER.into() } else { reason },
            items: ended.report.items,
            drift_found: ended.report.drift_found,
            drift_repaired: ended.report.drift_repaired,
            stale_writes: ended.refused,
            item_done_p50_ms: p50,
            item_done_p95_ms: p95,
            item_done_max_ms: max,
            ..RunRecord::new(job, tick, &lease.owner, outcome, started)
        };
        let finished = self.finish(&entry, &lease, &record).await;
        drop(kept);
        self.emit(&record, &ended.report, finished);
    }

    fn keep_lease(&self, entry: &JobEntry, lease: &RunLease) -> Kept {
        let (store, metrics) = (Arc::clone(&self.store), self.metrics.clone());
        let (renewed, job) = (lease.clone(), lease.job.clone());
        let (claim_keep, lease_ttl) = (entry.settings.claim_keep(), self.config.lease_ttl);
        keeper::keep(
            lease_ttl,
            move || {
                let (store, lease) = (Arc::clone(&store), renewed.clone());
                async move { store.renew(&lease, claim_keep, lease_ttl).await }
            },
            move |error| {
                metrics.error(&job, Op::Renew);
                tracing::warn!(job, error, "Lease renewal failed");
            },
        )
    }

    /// Runs the job until it returns or a stop interrupts it: then the run
    /// is asked to stop (cancellation), and dropped after the grace.
    async fn run_job(&self, entry: &JobEntry, lease: &RunLease, kept: &mut Kept) -> Ended {
        let (cancel_tx, cancel_rx) = watch::channel(false);
        let ledger_ttl = self.config.history_ttl.max(entry.settings.claim_keep() * 2);
        let ctx = RunContext::new(lease.clone(), entry.job.name(), Arc::clone(&self.store), cancel_rx, ledger_ttl);
        let mut cancel_all = self.cancel_all.subscribe();
        let run = entry.job.run(&ctx);
        tokio::pin!(run);
        let stop = async {
            tokio::select! {
                () = tokio::time::sleep(entry.settings.timeout) => Stop::Timeout,
                lost = kept.lost() => {
                    tracing::warn!(job = lease.job, tick_ms = lease.tick.ms, %lost, "Lease lost: cancelling the run");
                    Stop::LeaseLost
                }
                _ = cancel_all.wait_for(|c| *c) => Stop::Shutdown,
            }
        };
        let (result, stop) = tokio::select! {
            result = &mut run => (Some(result), None),
            why = stop => {
                // Cooperative first: start nothing new; then drop it.
                cancel_tx.send_replace(true);
                (tokio::time::timeout(self.config.cancel_grace, &mut run).await.ok(), Some(why))
            }
        };
        let (returned, report) = match result {
            Some(Ok(report)) => (Returned::Ok, report),
            Some(Err(e)) => (Returned::Err(e.kind(), e.to_string()), Report::default()),
            None => (Returned::Dropped, Report::default()),
        };
        Ended { returned, stop, report, refused: ctx.refused_count() }
    }

    /// Records the run's end, retrying briefly: a run whose end is not
    /// recorded looks dead, and a peer could take its tick over (it would
    /// find the ledger of whatever the run applied, so nothing applies twice).
    async fn finish(&self, entry: &JobEntry, lease: &RunLease, record: &RunRecord) -> Option<Finished> {
        let request =
            FinishRequest { lease: lease.clone(), record: record.clone(), claim_keep: entry.settings.claim_keep() };
        let mut pause = Duration::from_millis(100);
        let deadline = tokio::time::Instant::now() + FINISH_BUDGET;
        while tokio::time::Instant::now() < deadline {
            match self.store.finish(&request).await {
                Ok(finished) => return Some(finished),
                Err(e) => {
                    self.metrics.error(&lease.job, Op::Finish);
                    tracing::warn!(job = lease.job, error = %e, "Recording the run's end failed; retrying");
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
            }
        }
        tracing::error!(
            job = lease.job,
            tick_ms = lease.tick.ms,
            token = lease.token,
            "The run's end could not be recorded; the next claim records it as abandoned, with what the ledger says it applied"
        );
        None
    }

    /// The run's metrics and its log line, from what the store recorded.
    fn emit(&self, record: &RunRecord, report: &Report, finished: Option<Finished>) {
        let job = record.job.as_str();
        let m = &self.metrics;
        let (outcome, applied) = finished.map_or((record.outcome, 0), |f| (f.outcome, f.applied));
        if outcome == Outcome::LostClaim {
            m.claims_lost.with_label_values(&[job]).inc();
        }
        m.running.with_label_values(&[job]).dec();
        if finished.is_some() {
            m.runs.with_label_values(&[job, outcome.as_str()]).inc();
        }
        m.run_duration.with_label_values(&[job]).observe((record.ended_ms - record.started_ms).max(0) as f64 / 1000.0);
        m.stale_writes.with_label_values(&[job]).inc_by(record.stale_writes);
        m.items.with_label_values(&[job]).inc_by(report.items);
        m.drift_found.with_label_values(&[job]).inc_by(report.drift_found);
        m.drift_repaired.with_label_values(&[job]).inc_by(report.drift_repaired);
        if outcome == Outcome::Succeeded && finished.is_some() {
            m.set_last_success(job, record.ended_ms);
        }
        tracing::info!(
            job,
            tick_ms = record.tick_ms,
            token = record.token,
            outcome = outcome.as_str(),
            applied,
            duration_ms = record.ended_ms - record.started_ms,
            items = report.items,
            reason = record.reason,
            "Run ended"
        );
    }

    /// A tick queued behind the running one (buffer-one): waits for the
    /// lease, keeping its place alive, then runs.
    pub(super) async fn wait_queued(self: Arc<Self>, busy: Busy, entry: Arc<JobEntry>, tick: Tick) {
        let job = entry.job.name();
        let owner = self.config.instance_id.clone();
        let queued_since = self.now_ms();
        let poll = (self.config.lease_ttl / 3).min(Duration::from_millis(200));
        let reason = loop {
            if *self.stopping.borrow() {
                if let Err(e) = self.store.leave_queue(job, &owner, tick).await {
                    self.metrics.error(job, Op::Queue);
                    tracing::warn!(job, tick_ms = tick.ms, error = %e, "Leaving the queue failed; the place lapses with its lease");
                }
                break "the scheduler shut down while the tick waited";
            }
            let request = QueueRequest {
                job: job.into(),
                tick,
                owner: owner.clone(),
                claim_ttl: entry.settings.claim_keep(),
                lease_ttl: self.config.lease_ttl,
                now_ms: self.now_ms(),
            };
            match self.store.start_queued(&request).await {
                Ok(Queue::Started { token, resolved }) => {
                    if let Some(dead) = &resolved {
                        self.found_dead(job, tick, dead);
                    }
                    return Arc::clone(&self).execute(busy, entry, tick, token, false).await;
                }
                Ok(Queue::Waiting) => {}
                Ok(Queue::Paused) => return self.metrics.skipped(job, SkipReason::Paused),
                Ok(Queue::Lost) => break "lost its place in the queue (its lease lapsed)",
                Err(e) => {
                    self.metrics.error(job, Op::Queue);
                    tracing::warn!(job, tick_ms = tick.ms, error = %e, "Queued tick: checking for the lease failed");
                }
            }
            tokio::time::sleep(poll).await;
        };
        // Replaces the queued record the claim wrote (same id).
        let record = RunRecord {
            ended_ms: self.now_ms(),
            reason: reason.into(),
            ..RunRecord::new(job, tick, &owner, Outcome::Cancelled, queued_since)
        };
        if let Err(e) = self.store.record(&record).await {
            self.metrics.error(job, Op::History);
            tracing::warn!(job, tick_ms = tick.ms, error = %e, "Run history write failed");
        }
    }
}
