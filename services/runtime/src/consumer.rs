//! The consumer thread: the only code that touches the librdkafka consumer.
//!
//! It runs on a dedicated OS thread (never a tokio worker) so that polling
//! never waits on application work and rebalance callbacks may block on a
//! drain. Each poll round takes what librdkafka has fetched (up to
//! [`POLL_BATCH`] records) and hands every partition its share in one
//! message to the partition's worker. Workers answer through their slots
//! (the position to commit, whether to pause), which this thread reads each
//! round; a slot belongs to one assignment epoch and is dropped when the
//! partition is revoked or lost, so an ended epoch's position is never
//! committed. Commits are made by this thread: asynchronously every commit
//! interval, and synchronously on revoke and at shutdown (librdkafka's
//! auto-commit and offset store are off).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::Message;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use crate::config::RuntimeConfig;
use crate::handler::{Handler, Record};
use crate::health::Health;
use crate::metrics::{CommitResult, RebalanceKind, RuntimeMetrics};
use crate::recorded;
use crate::txn::{EpochRef, Transactions};
use crate::worker::{Shared, Worker, WorkerHandle, WorkerMsg};

/// Most records one poll round takes before handing them out.
const POLL_BATCH: usize = 2048;

/// Records handed out and not finished, over all partitions, past which
/// this thread takes no more until the workers catch up (they stay in
/// librdkafka's prefetch meanwhile, which a pause would throw away). Small,
/// so a revoke or a shutdown drains in a moment; a partition's own budget
/// (a pause) is for when its worker stops making progress.
const MAX_AHEAD: u64 = 4 * POLL_BATCH as u64;

/// Even while the workers are behind, a poll round at least this often:
/// rebalance callbacks and errors are served from polls.
const MAX_POLL_GAP: Duration = Duration::from_millis(100);

/// Exactly-once mode: how often the group's metadata (its generation) is
/// handed to the transactions, besides after every rebalance.
const GROUP_REFRESH: Duration = Duration::from_millis(50);

/// What this thread knows of one partition's intake.
#[derive(Debug, Default, Clone, Copy)]
struct Flow {
    handed: u64,
    /// One past the last offset handed to the worker.
    handed_end: i64,
    paused: bool,
    /// Records of this partition are polled and not handed out yet (this
    /// poll round's batch): the consumer's position is past records no
    /// worker has, so it must not be committed (see [`past_markers`]).
    pending: bool,
}

/// The consumer's callbacks and the partition workers it owns.
pub(crate) struct Ctx<H> {
    topic: Arc<str>,
    workers: Mutex<HashMap<i32, WorkerHandle>>,
    next_epoch: Mutex<u64>,
    /// The last position sent in a periodic commit, per owned partition; the
    /// periodic commit sends those that moved (and all of them now and
    /// then, so a commit lost in transit is repeated).
    sent: Mutex<HashMap<i32, i64>>,
    /// Per owned partition: records handed to its worker, and whether this
    /// thread has paused it.
    flow: Mutex<HashMap<i32, Flow>>,
    runtime: tokio::runtime::Handle,
    shared: Arc<Shared<H>>,
    drain_deadline: Duration,
    metrics: RuntimeMetrics,
    health: Arc<Health>,
    /// The generation the group's commits recorded at start: what commits
    /// carry until the handler reports its own.
    recorded: Option<String>,
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
                    self.flow.lock().unwrap_or_else(|e| e.into_inner()).insert(p, Flow::default());
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
                    self.forget_sent(&partitions);
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
                    self.forget_sent(&partitions);
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
    fn lock_workers(&self) -> std::sync::MutexGuard<'_, HashMap<i32, WorkerHandle>> {
        self.workers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stops a worker whose partition another member may own now: its work
    /// is dropped, and (exactly-once mode) the open transaction, which may
    /// hold some of it, aborts.
    fn lose(&self, handle: &WorkerHandle) {
        handle.owner.alive.store(false, Ordering::Release);
        let _ = handle.tx.send(WorkerMsg::Lost);
        if let Some(txn) = &self.shared.txn {
            txn.poison();
        }
    }

    /// Partitions this member no longer owns start afresh if they come back.
    fn forget_sent(&self, partitions: &[i32]) {
        let mut sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        let mut flow = self.flow.lock().unwrap_or_else(|e| e.into_inner());
        for p in partitions {
            sent.remove(p);
            flow.remove(p);
        }
    }

    /// Drops the offset series of partitions this consumer no longer owns:
    /// frozen at their value when revoked, they would read as a partition
    /// whose commits stopped in every `max by (partition)`.
    fn forget_offset_metrics(&self, partitions: &[i32]) {
        for p in partitions {
            let labels = [&*self.topic, &p.to_string()];
            let _ = self.metrics.committed_offset.remove_label_values(&labels);
            let _ = self.metrics.high_watermark.remove_label_values(&labels);
        }
    }

    fn set_assigned(&self, n: usize) {
        self.metrics.assigned.set(n as i64);
        self.health.assigned.store(n, Ordering::Relaxed);
    }

    /// Drains the workers of `partitions`: in-flight work may finish until
    /// the deadline. Returns their final positions and epochs. Runs on the
    /// consumer thread (inside the revoke callback, or at shutdown), so it
    /// may block.
    fn drain(&self, partitions: &[i32], deadline: Duration) -> Drained {
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
    fn commit_drained(&self, consumer: &BaseConsumer<Self>, drained: Drained) {
        if let Some(txn) = &self.shared.txn {
            return self.end_drained_transaction(consumer, txn, drained);
        }
        let tpl = &drained.positions;
        if tpl.count() == 0 {
            return;
        }
        let positions = consumer.position().ok();
        let flow = self.flow.lock().unwrap_or_else(|e| e.into_inner());
        let mut past = TopicPartitionList::new();
        for e in tpl.elements() {
            if let Offset::Offset(o) = e.offset() {
                let o = past_markers(&self.topic, positions.as_ref(), flow.get(&e.partition()), e.partition(), o);
                let _ = past.add_partition_offset(&self.topic, e.partition(), Offset::Offset(o));
            }
        }
        drop(flow);
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

    /// Records the handler's state generation with the commit of `tpl`
    /// (the one found at start while the handler has none yet), so the
    /// commits never lose it.
    fn stamp(&self, tpl: &TopicPartitionList) {
        if let Some(generation) = self.shared.handler.state_generation().or_else(|| self.recorded.clone()) {
            recorded::stamp(tpl, &generation);
        }
    }

    /// Commits `tpl` synchronously and records the outcome.
    fn commit_sync(&self, consumer: &BaseConsumer<Self>, tpl: &TopicPartitionList) {
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
struct Drained {
    positions: TopicPartitionList,
    owners: Vec<EpochRef>,
}

/// The running consumer thread.
pub(crate) struct ConsumerThread {
    pub stop: Arc<AtomicBool>,
    pub join: std::thread::JoinHandle<()>,
}

/// Creates the consumer and starts its thread.
pub(crate) fn start<H: Handler>(
    config: &RuntimeConfig,
    shared: Arc<Shared<H>>,
    metrics: RuntimeMetrics,
    health: Arc<Health>,
    recorded: Option<String>,
) -> KafkaResult<ConsumerThread> {
    let ctx = Ctx {
        topic: Arc::from(config.input_topic.as_str()),
        workers: Mutex::new(HashMap::new()),
        next_epoch: Mutex::new(0),
        sent: Mutex::new(HashMap::new()),
        flow: Mutex::new(HashMap::new()),
        runtime: tokio::runtime::Handle::current(),
        shared,
        drain_deadline: config.drain_deadline,
        metrics,
        health,
        recorded,
    };
    let consumer: BaseConsumer<Ctx<H>> = config.consumer_client().create_with_context(ctx)?;
    consumer.subscribe(&[&config.input_topic])?;
    let stop = Arc::new(AtomicBool::new(false));
    let (drain, commit_interval) = (config.drain_deadline, config.commit_interval);
    let thread_stop = stop.clone();
    let join = std::thread::Builder::new()
        .name("kafka-consumer".into())
        .spawn(move || poll_loop(consumer, thread_stop, drain, commit_interval))
        .map_err(|e| KafkaError::ClientCreation(e.to_string()))?;
    Ok(ConsumerThread { stop, join })
}

fn poll_loop<H: Handler>(
    consumer: BaseConsumer<Ctx<H>>,
    stop: Arc<AtomicBool>,
    drain: Duration,
    commit_interval: Duration,
) {
    let ctx = consumer.context().clone();
    let mut last_commit = Instant::now();
    let mut commits = 0u64;
    let mut batches: Vec<(i32, Vec<Record>)> = Vec::new();
    let mut last_poll = Instant::now();
    let mut last_group = Instant::now();
    while !stop.load(Ordering::Acquire) {
        let ahead = apply_pauses(&consumer);
        if let Some(txn) = &ctx.shared.txn
            && last_group.elapsed() >= GROUP_REFRESH
        {
            // A transaction's offsets are refused with a stale generation.
            last_group = Instant::now();
            txn.set_group(consumer.group_metadata());
        }
        if last_commit.elapsed() >= commit_interval {
            last_commit = Instant::now();
            commits += 1;
            match &ctx.shared.txn {
                Some(txn) if txn.failed().is_some() => break,
                Some(txn) => transaction_tick(&consumer, txn),
                None => commit_pending(&consumer, commits.is_multiple_of(10)),
            }
        }
        if ahead >= MAX_AHEAD && last_poll.elapsed() < MAX_POLL_GAP {
            std::thread::sleep(Duration::from_millis(2));
            continue;
        }
        last_poll = Instant::now();
        // One blocking poll, then whatever is already fetched.
        let mut wait = Duration::from_millis(50);
        let mut taken = 0;
        while taken < POLL_BATCH {
            match consumer.poll(wait) {
                Some(Ok(m)) => {
                    let record = Record {
                        topic: ctx.topic.clone(),
                        partition: m.partition(),
                        offset: m.offset(),
                        key: m.key().map(<[u8]>::to_vec),
                        payload: m.payload().map(<[u8]>::to_vec),
                        timestamp_ms: m.timestamp().to_millis(),
                    };
                    match batches.iter_mut().find(|(p, _)| *p == record.partition) {
                        Some((_, batch)) => batch.push(record),
                        None => {
                            // A revoke served by the next poll must see it.
                            ctx.flow
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .entry(record.partition)
                                .or_default()
                                .pending = true;
                            batches.push((record.partition, vec![record]));
                        }
                    }
                    taken += 1;
                }
                Some(Err(e)) => tracing::warn!(error = %e, "Consumer error"),
                None => break,
            }
            wait = Duration::ZERO;
        }
        if !batches.is_empty() {
            hand_out(&ctx, &mut batches);
            // Before the next round: a partition that just reached its
            // budget must not get another round's worth.
            let _ = apply_pauses(&consumer);
        }
    }
    shutdown(&consumer, drain);
}

/// One message per partition: its records of this poll round.
fn hand_out<H: Handler>(ctx: &Ctx<H>, batches: &mut Vec<(i32, Vec<Record>)>) {
    let workers = ctx.lock_workers();
    let mut flow = ctx.flow.lock().unwrap_or_else(|e| e.into_inner());
    for (partition, records) in batches.drain(..) {
        let (first, n) = (records.first().map_or(-1, |r| r.offset), records.len() as u64);
        let end = records.last().map_or(0, |r| r.offset + 1);
        let sent = workers.get(&partition).map(|h| h.tx.send(WorkerMsg::Records(records)));
        let f = flow.entry(partition).or_default();
        f.pending = false;
        if matches!(sent, Some(Ok(()))) {
            f.handed += n;
            f.handed_end = end;
        } else {
            // Not committed, so they will be consumed again by the partition's owner.
            tracing::warn!(partition, offset = first, "Records for a partition without a worker");
        }
    }
}

/// Pauses and resumes partitions: one whose worker holds its budget of
/// records (handed out and not finished) pauses until it is down to the
/// resume fraction, and one whose worker asks (bytes, a stalled record)
/// pauses until it stops asking. Current epochs' slots only. Returns the
/// records handed out and not finished yet, over every partition.
fn apply_pauses<H: Handler>(consumer: &BaseConsumer<Ctx<H>>) -> u64 {
    let ctx = consumer.context();
    let budget = ctx.shared.budget;
    let low = (budget.max_records as f64 * budget.resume_fraction) as u64;
    let workers = ctx.lock_workers();
    let mut flow = ctx.flow.lock().unwrap_or_else(|e| e.into_inner());
    let mut ahead = 0;
    for (&partition, handle) in workers.iter() {
        let f = flow.entry(partition).or_default();
        let in_flight = f.handed.saturating_sub(handle.slot.finished());
        ahead += in_flight;
        let over = if f.paused { in_flight > low } else { in_flight >= budget.max_records as u64 };
        let wants = over || handle.slot.wants_pause();
        if f.paused == wants {
            continue;
        }
        let mut tpl = TopicPartitionList::new();
        let _ = tpl.add_partition(&ctx.topic, partition);
        let result = if wants { consumer.pause(&tpl) } else { consumer.resume(&tpl) };
        match result {
            Ok(()) => f.paused = wants,
            Err(e) => tracing::warn!(partition, pause = wants, error = %e, "Pause or resume failed"),
        }
        ctx.metrics.paused.with_label_values(&[&partition.to_string()]).set(i64::from(f.paused));
    }
    ahead
}

/// Commits, asynchronously, every position that moved since the last
/// periodic commit, and every position when `all` is set. Asynchronous so
/// the poll loop never waits on the coordinator; the committed offsets show
/// in the statistics (`committed_offset` gauge). Revoke and shutdown commit
/// synchronously instead.
fn commit_pending<H: Handler>(consumer: &BaseConsumer<Ctx<H>>, all: bool) {
    let ctx = consumer.context();
    let positions = consumer.position().ok();
    let moved: Vec<(i32, i64)> = {
        let workers = ctx.lock_workers();
        let mut sent = ctx.sent.lock().unwrap_or_else(|e| e.into_inner());
        let flow = ctx.flow.lock().unwrap_or_else(|e| e.into_inner());
        let moved: Vec<(i32, i64)> = workers
            .iter()
            .filter_map(|(p, h)| Some((*p, h.slot.position()?)))
            .map(|(p, o)| (p, past_markers(&ctx.topic, positions.as_ref(), flow.get(&p), p, o)))
            .filter(|(p, o)| all || sent.get(p) != Some(o))
            .collect();
        sent.extend(moved.iter().copied());
        moved
    };
    if moved.is_empty() {
        return;
    }
    let mut tpl = TopicPartitionList::new();
    for (p, o) in &moved {
        let _ = tpl.add_partition_offset(&ctx.topic, *p, Offset::Offset(*o));
    }
    ctx.stamp(&tpl);
    match consumer.commit(&tpl, CommitMode::Async) {
        Ok(()) => ctx.metrics.commits.with_label_values(&[CommitResult::Sent.as_str()]).inc(),
        Err(e) => {
            let code = e.rdkafka_error_code().map_or_else(|| "unknown".to_string(), |c| format!("{c:?}"));
            ctx.metrics.commits.with_label_values(&[&code]).inc();
            tracing::warn!(error = %e, "Offset commit could not be sent; the next one retries");
            let mut sent = ctx.sent.lock().unwrap_or_else(|e| e.into_inner());
            for (p, _) in moved {
                sent.remove(&p);
            }
        }
    }
}

/// Exactly-once mode's periodic step (the transactions commit the
/// offsets): positions moved
/// past transaction markers where a worker is through everything handed
/// out (see [`past_markers`]); the transaction applies a move only if the
/// partition released nothing since.
fn transaction_tick<H: Handler>(consumer: &BaseConsumer<Ctx<H>>, txn: &Transactions) {
    let ctx = consumer.context();
    let positions = consumer.position().ok();
    let workers = ctx.lock_workers();
    let flow = ctx.flow.lock().unwrap_or_else(|e| e.into_inner());
    for (p, handle) in workers.iter() {
        let Some(f) = flow.get(p) else { continue };
        let to = past_markers(&ctx.topic, positions.as_ref(), Some(f), *p, f.handed_end);
        txn.skip_markers(*p, handle.owner.epoch, f.handed_end, to);
    }
}

/// `offset` (a worker's position), or the consumer's position when the
/// worker is through everything handed out and the consumer is further: the
/// offsets between hold no record the application was given, only
/// transaction markers (and aborted records) the consumer stepped over.
/// Committing past them is what lets the group's lag reach 0 on a topic
/// written with transactions (librdkafka's position steps over a commit
/// marker; `sluice-kafka`'s transactions test checks it), instead of 1 per
/// partition for ever.
fn past_markers(
    topic: &str,
    positions: Option<&TopicPartitionList>,
    flow: Option<&Flow>,
    partition: i32,
    offset: i64,
) -> i64 {
    // Records polled and not handed out lie between: not markers.
    if flow.is_none_or(|f| f.handed_end != offset || f.pending) {
        return offset;
    }
    let position = positions.and_then(|t| t.find_partition(topic, partition)).map(|e| e.offset());
    match position {
        Some(Offset::Offset(p)) => p.max(offset),
        _ => offset,
    }
}

/// Stop intake, then leave the group: the revoke that leaving brings
/// drains every partition and commits inside the group's own protocol (the
/// rebalance callback), where the generation is the current one: a commit
/// made beside a rebalance in progress would be refused (IllegalGeneration)
/// and the drained work done again by the next owner. Only if the group
/// does not answer in time are the rest drained and committed here.
fn shutdown<H: Handler>(consumer: &BaseConsumer<Ctx<H>>, drain: Duration) {
    let ctx = consumer.context();
    if let Ok(assignment) = consumer.assignment()
        && assignment.count() > 0
    {
        let _ = consumer.pause(&assignment);
    }
    let partitions = ctx.lock_workers().len();
    tracing::info!(partitions, "Leaving the group: draining and committing on the revoke");
    consumer.unsubscribe();
    let deadline = Instant::now() + drain + Duration::from_secs(2);
    while !ctx.lock_workers().is_empty() && Instant::now() < deadline {
        // Serves the revoke; a record of a paused partition would not come,
        // and one that did is not handed out (its next owner gets it).
        let _ = consumer.poll(Duration::from_millis(100));
    }
    let left: Vec<i32> = ctx.lock_workers().keys().copied().collect();
    if !left.is_empty() {
        tracing::warn!(partitions = ?left, "No revoke from the group in time; draining and committing directly");
        let drained = ctx.drain(&left, drain);
        ctx.commit_drained(consumer, drained);
    }
    if let Err(e) = ctx.shared.kafka.flush(Duration::from_secs(5)) {
        tracing::warn!(error = %e, "Producer flush incomplete");
    }
    tracing::info!("Consumer stopped");
}
