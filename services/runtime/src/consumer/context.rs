//! The consumer's context: librdkafka's callbacks on the consumer thread
//! (statistics, rebalances), the partition workers it owns, and what a
//! revoke does: drain the revoked partitions' workers and commit their last
//! positions synchronously, inside the group's protocol (or, with
//! exactly-once outputs, end the transaction that holds their work).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use crate::handler::Handler;
use crate::health::Health;
use crate::intake::Intake;
use crate::metrics::{CommitResult, RebalanceKind, RuntimeMetrics};
use crate::txn::{EpochRef, Transactions};
use crate::worker::{Shared, Worker, WorkerHandle, WorkerMsg};

/// The consumer's callbacks and the partition workers it owns.
pub(crate) struct Ctx<H> {
    pub(super) topic: Arc<str>,
    pub(super) workers: Mutex<HashMap<i32, WorkerHandle>>,
    pub(super) next_epoch: Mutex<u64>,
    /// What was handed to each owned partition's worker, its pause, and the
    /// positions last committed.
    pub(super) intake: Mutex<Intake>,
    pub(super) runtime: tokio::runtime::Handle,
    pub(super) shared: Arc<Shared<H>>,
    pub(super) drain_deadline: Duration,
    pub(super) metrics: RuntimeMetrics,
    pub(super) health: Arc<Health>,
}

impl<H: Handler> ClientContext for Ctx<H> {
    /// librdkafka's statistics (every `statistics.interval.ms`, delivered on
    /// poll): the high watermark per assigned partition, without a blocking
    /// metadata request on the consumer thread.
    fn stats(&self, statistics: rdkafka::Statistics) {
        let Some(topic) = statistics.topics.get(&*self.topic) else { return };
        // The lock is held through the updates: a revoke removes the actor, then
        // the partition's series, so no update can bring a revoked one back.
        let workers = self.lock_workers();
        for &p in workers.keys() {
            let Some(stats) = topic.partitions.get(&p) else { continue };
            if stats.hi_offset < 0 {
                continue;
            }
            let labels = [&*self.topic, &p.to_string()];
            self.metrics.high_watermark.with_label_values(&labels).set(stats.hi_offset);
            // With exactly-once outputs the offsets are committed by the transactions, which
            // set the series themselves: librdkafka's figure stays at the assignment's, so it
            // only starts a series no transaction has set yet.
            if stats.committed_offset >= 0 {
                let gauge = self.metrics.committed_offset.with_label_values(&labels);
                if self.shared.txn.is_none() || gauge.get() == 0 {
                    gauge.set(stats.committed_offset);
                }
            }
        }
    }
}

impl<H: Handler> ConsumerContext for Ctx<H> {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => {
                let partitions: Vec<i32> = tpl.elements_for_topic(&self.topic).iter().map(|e| e.partition()).collect();
                self.metrics.rebalances.with_label_values(&[RebalanceKind::Assign.as_str()]).inc();
                tracing::info!(?partitions, "Partitions assigned");
                let mut workers = self.lock_workers();
                for p in partitions {
                    let epoch = {
                        let mut next = self.next_epoch.lock().unwrap_or_else(|e| e.into_inner());
                        *next += 1;
                        *next
                    };
                    let handle = Worker::spawn(&self.runtime, p, epoch, self.shared.clone());
                    // A new epoch counts its intake afresh (post_rebalance resumes it).
                    self.lock_intake().assigned(p);
                    if let Some(old) = workers.insert(p, handle) {
                        // Assigned again without a revoke in between: the old
                        // epoch's work must stop and never commit.
                        self.lose(&old);
                    }
                }
                self.set_assigned(workers.len());
            }
            Rebalance::Revoke(tpl) => {
                let partitions: Vec<i32> = tpl.elements_for_topic(&self.topic).iter().map(|e| e.partition()).collect();
                if consumer.assignment_lost() {
                    self.metrics.rebalances.with_label_values(&[RebalanceKind::Lost.as_str()]).inc();
                    tracing::warn!(?partitions, "Partitions lost; dropping their work uncommitted");
                    self.lock_intake().forget(&partitions);
                    let mut workers = self.lock_workers();
                    for p in &partitions {
                        if let Some(handle) = workers.remove(p) {
                            self.lose(&handle);
                        }
                    }
                    self.set_assigned(workers.len());
                } else {
                    self.metrics.rebalances.with_label_values(&[RebalanceKind::Revoke.as_str()]).inc();
                    tracing::info!(?partitions, "Partitions revoked; draining");
                    let drained = self.drain(&partitions, self.drain_deadline);
                    self.commit_drained(consumer, drained);
                    self.lock_intake().forget(&partitions);
                }
                self.forget_offset_metrics(&partitions);
            }
            Rebalance::Error(e) => {
                self.metrics.rebalances.with_label_values(&[RebalanceKind::Error.as_str()]).inc();
                tracing::error!(error = %e, "Rebalance error");
            }
        }
    }

    /// librdkafka keeps an application pause across unassign and reassign,
    /// and a new worker starts unpaused: so every newly assigned partition is
    /// resumed, or a partition paused by an earlier owner-epoch would never
    /// be fetched again.
    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Some(txn) = &self.shared.txn {
            txn.set_group(consumer.group_metadata());
        }
        if let Rebalance::Assign(tpl) = rebalance
            && tpl.count() > 0
            && let Err(e) = consumer.resume(tpl)
        {
            tracing::warn!(error = %e, "Resuming newly assigned partitions failed");
        }
    }
}

impl<H: Handler> Ctx<H> {
    pub(super) fn lock_workers(&self) -> MutexGuard<'_, HashMap<i32, WorkerHandle>> {
        self.workers.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn lock_intake(&self) -> MutexGuard<'_, Intake> {
        self.intake.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stops a worker whose partition another member may own now: its work
    /// is dropped, and (exactly-once mode) the open transaction, which may
    /// hold some of it, aborts.
    pub(super) fn lose(&self, handle: &WorkerHandle) {
        handle.owner.alive.store(false, Ordering::Release);
        let _ = handle.tx.send(WorkerMsg::Lost);
        if let Some(txn) = &self.shared.txn {
            txn.poison();
        }
    }

    /// Drops the offset series of partitions this consumer no longer owns:
    /// frozen at their value when revoked, they would read as a partition
    /// whose commits stopped in every `max by (partition)`.
    pub(super) fn forget_offset_metrics(&self, partitions: &[i32]) {
        for p in partitions {
            let labels = [&*self.topic, &p.to_string()];
            let _ = self.metrics.committed_offset.remove_label_values(&labels);
            let _ = self.metrics.high_watermark.remove_label_values(&labels);
        }
    }

    pub(super) fn set_assigned(&self, n: usize) {
        self.metrics.assigned.set(n as i64);
        self.health.assigned.store(n, Ordering::Relaxed);
    }

    /// Drains the workers of `partitions`: in-flight work may finish until
    /// the deadline. Returns their final positions and epochs. Runs on the
    /// consumer thread (inside the revoke callback, or at shutdown), so it
    /// may block.
    pub(super) fn drain(&self, partitions: &[i32], deadline: Duration) -> Drained {
        let deadline = Instant::now() + deadline;
        let (reply, replies) = std::sync::mpsc::sync_channel(partitions.len().max(1));
        let mut waiting = 0;
        let mut owners = Vec::new();
        {
            let mut workers = self.lock_workers();
            for p in partitions {
                let Some(handle) = workers.remove(p) else { continue };
                if handle.tx.send(WorkerMsg::Drain { deadline, reply: reply.clone() }).is_ok() {
                    waiting += 1;
                }
                owners.push(handle.owner);
            }
            self.set_assigned(workers.len());
        }
        let mut tpl = TopicPartitionList::new();
        while waiting > 0 {
            let left = deadline.saturating_duration_since(Instant::now()) + Duration::from_millis(500);
            match replies.recv_timeout(left) {
                Ok((p, Some(offset))) => {
                    let _ = tpl.add_partition_offset(&self.topic, p, Offset::Offset(offset));
                    waiting -= 1;
                }
                Ok((_, None)) => waiting -= 1,
                Err(_) => break,
            }
        }
        Drained { positions: tpl, owners }
    }

    /// Synchronously commits drained positions (past trailing markers); in
    /// exactly-once mode, ends the transaction that holds their work.
    pub(super) fn commit_drained(&self, consumer: &BaseConsumer<Self>, drained: Drained) {
        if let Some(txn) = &self.shared.txn {
            return self.end_drained_transaction(consumer, txn, drained);
        }
        let tpl = &drained.positions;
        if tpl.count() == 0 {
            return;
        }
        let positions = consumer.position().ok();
        let intake = self.lock_intake();
        let mut past = TopicPartitionList::new();
        for e in tpl.elements() {
            if let Offset::Offset(o) = e.offset() {
                let position = position_of(positions.as_ref(), &self.topic, e.partition());
                let o = intake.past_markers(e.partition(), o, position);
                let _ = past.add_partition_offset(&self.topic, e.partition(), Offset::Offset(o));
            }
        }
        drop(intake);
        self.commit_sync(consumer, &past);
    }

    /// Exactly-once mode: the drained partitions' work is in the open
    /// transaction (their workers released it before replying), which ends
    /// now; after that their epochs are over, whatever the outcome (on an
    /// abort their work is left to the next owner).
    fn end_drained_transaction(&self, consumer: &BaseConsumer<Self>, txn: &Transactions, drained: Drained) {
        if drained.owners.is_empty() {
            return;
        }
        let partitions: Vec<i32> = drained.owners.iter().map(|o| o.partition).collect();
        txn.set_group(consumer.group_metadata());
        // Over before the final commit: nothing of theirs is sent from now on,
        // and only this commit (which names them) may carry their work.
        for owner in &drained.owners {
            owner.alive.store(false, Ordering::Release);
        }
        let started = Instant::now();
        let result = txn.commit_final(partitions, self.drain_deadline);
        match result {
            Ok(()) => {
                self.metrics.commit_seconds.observe(started.elapsed().as_secs_f64());
                self.metrics.commits.with_label_values(&[CommitResult::Ok.as_str()]).inc();
            }
            Err(e) => {
                self.metrics.commits.with_label_values(&[CommitResult::TransactionFailed.as_str()]).inc();
                tracing::error!(error = %e, "The revoked partitions' transaction did not end");
            }
        }
    }

    /// The commit of `tpl` carries what every commit carries
    /// ([`crate::recorded::stamp`]: the handler's state generation, or the
    /// one found at start while it has none yet, and the dead keys).
    pub(super) fn stamp(&self, tpl: &TopicPartitionList) {
        (self.shared.stamp)(tpl);
    }

    /// Commits `tpl` synchronously and records the outcome.
    pub(super) fn commit_sync(&self, consumer: &BaseConsumer<Self>, tpl: &TopicPartitionList) {
        self.stamp(tpl);
        let started = Instant::now();
        let result = consumer.commit(tpl, CommitMode::Sync);
        if started.elapsed() > Duration::from_secs(2) {
            tracing::warn!(
                elapsed_ms = started.elapsed().as_millis() as u64,
                ok = result.is_ok(),
                "Slow offset commit"
            );
        }
        match result {
            Ok(()) => {
                self.metrics.commit_seconds.observe(started.elapsed().as_secs_f64());
                self.metrics.commits.with_label_values(&[CommitResult::Ok.as_str()]).inc();
                for e in tpl.elements() {
                    if let Offset::Offset(o) = e.offset() {
                        self.metrics
                            .committed_offset
                            .with_label_values(&[&*self.topic, &e.partition().to_string()])
                            .set(o);
                    }
                }
            }
            Err(e) => {
                let code = e.rdkafka_error_code().map_or_else(|| "unknown".to_string(), |c| format!("{c:?}"));
                self.metrics.commits.with_label_values(&[&code]).inc();
                tracing::warn!(error = %e, "Offset commit failed; uncommitted records will be processed again (effects are idempotent)");
            }
        }
    }
}

/// What a drain leaves: the partitions' final positions and their epochs.
pub(super) struct Drained {
    positions: TopicPartitionList,
    owners: Vec<EpochRef>,
}

/// The consumer's position of `partition`, from `consumer.position()`.
pub(super) fn position_of(positions: Option<&TopicPartitionList>, topic: &str, partition: i32) -> Option<i64> {
    match positions?.find_partition(topic, partition)?.offset() {
        Offset::Offset(p) => Some(p),
        _ => None,
    }
}
