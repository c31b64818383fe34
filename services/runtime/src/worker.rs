//! One worker per assigned partition and assignment epoch: the single owner
//! of that partition's processing state.
//!
//! It receives the partition's records in batches from the consumer thread
//! and starts work as units: one record per unit for per-record handlers
//! (concurrently across keys), or everything the partition has ready for
//! batch handlers. Units run as futures inside this one task (no task per
//! record, no channel message per record); their outputs are enqueued as
//! one group per unit and acknowledged with one wake per group. A key's
//! next records start as soon as its unit's outputs are enqueued; a record's
//! offset completes when its outputs are acknowledged, and the position the
//! consumer thread may commit (below every unfinished record) is published
//! in the partition's [`Slot`]. A transient failure retries the key from
//! the failed record after a backoff while every other key goes on; past
//! the retry cap the partition pauses and the service reports not ready.
//! A full budget asks for a pause, with hysteresis.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use sluice_core::clock::now_ms;
use sluice_core::offsets::OffsetTracker;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};

use crate::handler::{Batching, HandleError, Handled, Handler, Record, in_key_order};
use crate::health::Health;
use crate::lanes::{Lanes, Ordered};
use crate::metrics::RuntimeMetrics;
use crate::outcome::{self, DeadLetters, Retry};
use crate::output::{Group, KafkaSink, Output};
use crate::retry::{RetryPolicy, jitter};
use crate::slot::Slot;
use crate::txn::{EpochRef, Transactions};

/// Messages to a partition worker.
#[derive(Debug)]
pub(crate) enum WorkerMsg {
    /// Records fetched for this partition, in offset order.
    Records(Vec<Record>),
    /// Revoked: finish what can finish by `deadline`, then reply with the
    /// position to commit.
    Drain { deadline: Instant, reply: DrainReply },
    /// Lost (another member may own it): stop at once, commit nothing.
    Lost,
}

/// Where a draining worker sends its partition's last safe position.
pub(crate) type DrainReply = std::sync::mpsc::SyncSender<(i32, Option<i64>)>;

/// After the drain deadline, how long enqueued outputs may still be
/// acknowledged (within the 0.5 s the consumer thread waits past it).
const ACK_GRACE: std::time::Duration = std::time::Duration::from_millis(400);

/// Completed-but-uncommitted records a partition may hold behind its
/// lowest unfinished one, as a multiple of the in-flight budget.
const WINDOW_FACTOR: usize = 10;

/// Budget and hysteresis of one partition.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Budget {
    pub max_records: usize,
    pub max_bytes: usize,
    pub resume_fraction: f64,
}

/// What every worker shares.
pub(crate) struct Shared<H> {
    pub handler: Arc<H>,
    pub permits: Arc<Semaphore>,
    pub kafka: KafkaSink,
    /// Exactly-once mode: outputs go into Kafka transactions instead.
    pub txn: Option<Arc<Transactions>>,
    pub dead_letters: DeadLetters,
    pub retry: RetryPolicy,
    pub budget: Budget,
    pub metrics: RuntimeMetrics,
    pub health: Arc<Health>,
}

/// Handle to a running worker, kept by the consumer thread.
#[derive(Debug)]
pub(crate) struct WorkerHandle {
    pub tx: mpsc::UnboundedSender<WorkerMsg>,
    pub slot: Arc<Slot>,
    pub owner: EpochRef,
}

/// A unit's records and one result per record.
struct Unit {
    records: Vec<Record>,
    results: Vec<Result<Handled, HandleError>>,
    started: Instant,
}

type UnitFuture = Pin<Box<dyn Future<Output = Unit> + Send>>;
type RetryFuture = Pin<Box<dyn Future<Output = Vec<Record>> + Send>>;
type ResendFuture = Pin<Box<dyn Future<Output = (Vec<Output>, Vec<(i64, usize)>, u32)> + Send>>;

/// A group of outputs not yet acknowledged, and the records it completes.
struct Awaiting {
    group: Arc<Group>,
    records: Vec<(i64, usize)>,
    attempts: u32,
}

pub(crate) struct Worker<H> {
    partition: i32,
    shared: Arc<Shared<H>>,
    slot: Arc<Slot>,
    inbox: mpsc::UnboundedReceiver<WorkerMsg>,
    tracker: OffsetTracker,
    batching: Batching,
    /// Per-record handlers: which keys may start.
    lanes: Lanes,
    /// Batch handlers: records in offset order.
    ordered: Ordered,
    bytes: usize,
    running: FuturesUnordered<UnitFuture>,
    backoffs: FuturesUnordered<RetryFuture>,
    resends: FuturesUnordered<ResendFuture>,
    groups_tx: mpsc::UnboundedSender<u64>,
    groups_rx: mpsc::UnboundedReceiver<u64>,
    awaiting: HashMap<u64, Awaiting>,
    next_group: u64,
    /// Failed attempts by the offset of the first record of a failing run.
    attempts: HashMap<i64, u32>,
    /// Offsets past the retry cap (each counted in health and metrics).
    stalled: Vec<i64>,
    paused: bool,
    spare: Option<OwnedSemaphorePermit>,
    published: Option<i64>,
    outcomes: Vec<(&'static str, prometheus::IntCounter)>,
    /// Exactly-once mode: done records (size, outputs) waiting until every
    /// record below them is done, then released into the open transaction.
    staged: BTreeMap<i64, (usize, Vec<Output>)>,
    owner: EpochRef,
    /// Exactly-once mode: a release waits for the next transaction to open
    /// (while [`Worker::releasable`] holds after a unit, none is open).
    reopened: Option<watch::Receiver<u64>>,
}

impl<H: Handler> Worker<H> {
    /// Starts the worker for `partition` in assignment `epoch` (for the logs).
    pub(crate) fn spawn(
        runtime: &tokio::runtime::Handle,
        partition: i32,
        epoch: u64,
        shared: Arc<Shared<H>>,
    ) -> WorkerHandle {
        tracing::debug!(partition, epoch, "Partition worker starting");
        let (tx, inbox) = mpsc::unbounded_channel();
        let (groups_tx, groups_rx) = mpsc::unbounded_channel();
        let slot = Arc::new(Slot::new());
        let batching = shared.handler.batching();
        let owner = EpochRef { partition, epoch, alive: Arc::new(std::sync::atomic::AtomicBool::new(true)) };
        let reopened = shared.txn.as_ref().map(|t| t.subscribe());
        let worker = Self {
            partition,
            shared,
            slot: slot.clone(),
            inbox,
            tracker: OffsetTracker::new(),
            batching,
            lanes: Lanes::default(),
            ordered: Ordered::default(),
            bytes: 0,
            running: FuturesUnordered::new(),
            backoffs: FuturesUnordered::new(),
            resends: FuturesUnordered::new(),
            groups_tx,
            groups_rx,
            awaiting: HashMap::new(),
            next_group: 0,
            attempts: HashMap::new(),
            stalled: Vec::new(),
            paused: false,
            spare: None,
            published: None,
            outcomes: Vec::new(),
            staged: BTreeMap::new(),
            owner: owner.clone(),
            reopened,
        };
        runtime.spawn(worker.run());
        WorkerHandle { tx, slot, owner }
    }

    async fn run(mut self) {
        let label = self.partition.to_string();
        let in_flight = self.shared.metrics.in_flight.with_label_values(&[&label]);
        self.shared.metrics.paused.with_label_values(&[&label]).set(0);
        let mut draining: Option<(Instant, DrainReply)> = None;
        let mut closed = false;
        loop {
            if draining.is_none() || self.batching == Batching::PerRecord {
                self.dispatch();
            } else {
                // A batch handler's drain retries nothing: a retry that got
                // through while another key's still waited would leave done
                // records above the watermark, published again by the next
                // owner, which instead runs the failed records itself.
                self.backoffs.clear();
            }
            self.publish_position();
            in_flight.set(self.tracker.incomplete() as i64);
            if draining.is_some() && self.drained() {
                break;
            }
            let deadline = draining.as_ref().map(|(d, _)| *d);
            let wants_permit = self.spare.is_none() && self.can_start() && draining.is_none();
            let msg = tokio::select! {
                msg = self.inbox.recv(), if !closed => msg,
                Some(unit) = self.running.next(), if !self.running.is_empty() => {
                    self.on_unit(unit);
                    // Every other unit already through, before dispatching again.
                    while let Some(Some(unit)) = self.running.next().now_or_never() {
                        self.on_unit(unit);
                    }
                    continue;
                }
                Some(id) = self.groups_rx.recv() => {
                    self.on_acknowledged(id);
                    while let Ok(id) = self.groups_rx.try_recv() {
                        self.on_acknowledged(id);
                    }
                    continue;
                }
                Some((outputs, records, attempts)) = self.resends.next(), if !self.resends.is_empty() => {
                    self.send_group(outputs, records, attempts);
                    continue;
                }
                Some(records) = self.backoffs.next(), if !self.backoffs.is_empty() => {
                    self.retry_now(records);
                    continue;
                }
                Some(Ok(())) = changed(&mut self.reopened), if self.reopened.is_some() && self.releasable() => {
                    self.release();
                    continue;
                }
                Ok(permit) = self.shared.permits.clone().acquire_owned(), if wants_permit => {
                    self.spare = Some(permit);
                    continue;
                }
                () = sleep_until(deadline), if deadline.is_some() => {
                    tracing::warn!(
                        partition = self.partition,
                        unfinished = self.tracker.incomplete(),
                        "Drain deadline reached; committing what finished"
                    );
                    self.last_acknowledgements().await;
                    break;
                }
            };
            if self.take_messages(msg, &mut draining, &mut closed).is_break() {
                self.end(&label);
                return;
            }
            self.check_budget();
        }
        // Revoked (or the runtime is stopping): what finished is committed;
        // in-flight work of this epoch is dropped (its records are
        // processed again by the next owner).
        if let Some((_, reply)) = draining {
            let _ = reply.send((self.partition, self.tracker.commit_position()));
        }
        self.end(&label);
    }

    /// Handles `first` and every message already queued behind it (fewer,
    /// larger units). Breaks when the worker must end at once: lost, or let
    /// go of without a drain.
    fn take_messages(
        &mut self,
        first: Option<WorkerMsg>,
        draining: &mut Option<(Instant, DrainReply)>,
        closed: &mut bool,
    ) -> ControlFlow<()> {
        let mut next = first;
        loop {
            match next {
                Some(WorkerMsg::Records(records)) => self.receive(records),
                Some(WorkerMsg::Drain { deadline, reply }) => {
                    self.log_state("Draining");
                    *draining = Some((deadline, reply));
                }
                Some(WorkerMsg::Lost) => return ControlFlow::Break(()),
                // The consumer thread let go of this worker: after a drain
                // request (it sends it, then drops its handle) the drain goes
                // on; otherwise the runtime is stopping.
                None if draining.is_some() => {
                    *closed = true;
                    return ControlFlow::Continue(());
                }
                None => return ControlFlow::Break(()),
            }
            next = match self.inbox.try_recv() {
                Ok(msg) => Some(msg),
                Err(mpsc::error::TryRecvError::Empty) => return ControlFlow::Continue(()),
                Err(mpsc::error::TryRecvError::Disconnected) => None,
            };
        }
    }

    /// At the drain deadline: nothing more starts or retries (the next owner
    /// processes those records again), but outputs already enqueued get a
    /// moment to be acknowledged, so the records they finish are committed
    /// rather than published a second time by the next owner.
    async fn last_acknowledgements(&mut self) {
        self.running.clear();
        self.backoffs.clear();
        let grace = tokio::time::Instant::now() + ACK_GRACE;
        while !self.awaiting.is_empty() {
            match tokio::time::timeout_at(grace, self.groups_rx.recv()).await {
                Ok(Some(id)) => self.on_acknowledged(id),
                _ => break,
            }
        }
    }

    fn log_state(&self, what: &str) {
        tracing::debug!(
            partition = self.partition,
            unfinished = self.tracker.incomplete(),
            queued = self.lanes.queued() + self.ordered.queued(),
            running = self.running.len(),
            awaiting_acks = self.awaiting.len(),
            retrying = self.backoffs.len() + self.resends.len(),
            "{what}"
        );
    }

    fn end(&mut self, label: &str) {
        let m = &self.shared.metrics;
        let _ = m.in_flight.remove_label_values(&[label]);
        let _ = m.paused.remove_label_values(&[label]);
        self.shared.health.stalled.fetch_sub(self.stalled.len(), Ordering::Relaxed);
        m.stalled.sub(self.stalled.len() as i64);
        self.stalled.clear();
    }

    fn receive(&mut self, records: Vec<Record>) {
        for record in records {
            if let Err(e) = self.tracker.received(record.offset) {
                // librdkafka delivers a partition's offsets increasing within
                // an assignment; anything else (e.g. a position reset after
                // log truncation) is not tracked and not processed. Loud,
                // because the commit position may then pass it.
                tracing::error!(partition = self.partition, error = %e, "Offset out of order; record ignored");
                self.slot.add_finished(1);
                continue;
            }
            self.bytes += record.size();
            match self.batching {
                Batching::PerRecord => self.lanes.push(record),
                Batching::Batch { .. } => self.ordered.push(record),
            }
        }
    }

    /// Whether a unit could start now (given a permit).
    fn can_start(&self) -> bool {
        match self.batching {
            Batching::PerRecord => self.lanes.has_ready(),
            Batching::Batch { .. } => self.running.is_empty() && self.ordered.has_ready(),
        }
    }

    /// Whether a drain is through. Per-record handlers finish everything
    /// received (by the deadline): with keys interleaved in a partition,
    /// stopping short would leave later records of some keys done above
    /// the watermark, to be processed again by the next owner. Batch
    /// handlers take records in offset order, so what is done lies below
    /// what is not started: the running unit and its acknowledgements are
    /// enough (its retries are left to the next owner).
    fn drained(&self) -> bool {
        match self.batching {
            Batching::PerRecord => self.tracker.incomplete() == 0,
            Batching::Batch { .. } => {
                self.running.is_empty()
                    && !self.releasable()
                    && self.awaiting.is_empty()
                    && self.resends.is_empty()
                    && self.backoffs.is_empty()
            }
        }
    }

    /// Starts units while records are ready and permits are left: one
    /// record each for per-record handlers, one batch at a time for batch
    /// handlers.
    fn dispatch(&mut self) {
        let batching = self.batching;
        while self.can_start() {
            let Some(permit) = self.spare.take().or_else(|| self.shared.permits.clone().try_acquire_owned().ok())
            else {
                return;
            };
            let records = match batching {
                Batching::PerRecord => self.lanes.take(1, 1),
                Batching::Batch { max_records } => self.ordered.take(max_records.max(1)),
            };
            if records.is_empty() {
                self.spare = Some(permit);
                return;
            }
            let handler = self.shared.handler.clone();
            self.running.push(Box::pin(run_unit(handler, records, batching, permit)));
        }
    }

    /// A unit is through its handler: its done records' outputs are
    /// enqueued as one group, its keys released, its failures scheduled.
    fn on_unit(&mut self, unit: Unit) {
        let shared = self.shared.clone();
        let m = &shared.metrics;
        m.handle_seconds.observe(unit.started.elapsed().as_secs_f64());
        let mut keys: Vec<Vec<u8>> = unit.records.iter().filter_map(|r| r.key.clone()).collect();
        keys.sort_unstable();
        keys.dedup();
        let settled = outcome::settle(unit.records, unit.results, &self.shared.dead_letters);
        let now = now_ms();
        let mut outputs: Vec<Output> = Vec::new();
        let mut completes: Vec<(i64, usize)> = Vec::new();
        let mut immediate: Vec<(i64, usize)> = Vec::new();
        for done in settled.done {
            self.count(done.outcome);
            if let Some(kind) = done.dead_letter {
                m.dead_letters.with_label_values(&[kind]).inc();
            }
            if let Some(t) = done.event_time_ms {
                m.end_to_end_seconds.observe(now.saturating_sub(t).max(0) as f64 / 1000.0);
            }
            self.unstall(done.offset);
            if self.shared.txn.is_some() {
                self.staged.insert(done.offset, (done.size, done.outputs));
            } else if done.outputs.is_empty() {
                immediate.push((done.offset, done.size));
            } else {
                completes.push((done.offset, done.size));
                outputs.extend(done.outputs);
            }
        }
        let retrying: Vec<&[u8]> = settled.retry.iter().filter_map(|r| r.records[0].key.as_deref()).collect();
        if self.batching == Batching::PerRecord {
            for key in keys.iter().filter(|k| !retrying.contains(&k.as_slice())) {
                self.lanes.release(key);
            }
        } else {
            for key in &retrying {
                self.ordered.hold(key);
            }
        }
        for retry in settled.retry {
            self.schedule_retry(retry);
        }
        for (offset, size) in immediate {
            self.complete(offset, size);
        }
        if !outputs.is_empty() {
            self.send_group(outputs, completes, 0);
        }
        self.release();
    }

    /// Exactly-once mode: whether the lowest unfinished record is done and
    /// waits to be released (staged records above a record whose retry a
    /// drain dropped never are: the next owner processes them).
    fn releasable(&self) -> bool {
        self.tracker.commit_position().is_some_and(|h| self.staged.contains_key(&h))
    }

    /// Exactly-once mode: the done records from the lowest unfinished one
    /// up, in offset order, go into the open transaction with the position
    /// they reach, in one step (a transaction never holds outputs above the
    /// offsets committed with it). While no transaction is open they wait.
    fn release(&mut self) {
        let Some(txn) = self.shared.txn.clone() else { return };
        if !self.releasable() {
            return;
        }
        let Some(mut open) = txn.open() else { return };
        let mut outputs = Vec::new();
        while let Some(h) = self.tracker.commit_position()
            && let Some((size, out)) = self.staged.remove(&h)
        {
            outputs.extend(out);
            self.complete(h, size);
        }
        open.send(&self.owner, outputs, self.tracker.commit_position());
    }

    /// Enqueues `outputs` as one group that completes `records` once acknowledged.
    fn send_group(&mut self, outputs: Vec<Output>, records: Vec<(i64, usize)>, attempts: u32) {
        self.next_group += 1;
        let id = self.next_group;
        let group = Group::new(id, outputs.len(), self.groups_tx.clone());
        // Registered first: the acknowledgement may come before `enqueue` returns.
        self.awaiting.insert(id, Awaiting { group: group.clone(), records, attempts });
        self.shared.kafka.enqueue(&outputs, &group);
    }

    /// A group is acknowledged: its records complete, or its failed
    /// deliveries go again after a backoff (at least once; a resend may
    /// land after the key's later outputs, which carry their own sequence).
    fn on_acknowledged(&mut self, id: u64) {
        let Some(awaiting) = self.awaiting.remove(&id) else { return };
        let failed = awaiting.group.take_failed();
        if failed.is_empty() {
            for (offset, size) in awaiting.records {
                self.complete(offset, size);
            }
            return;
        }
        let attempts = awaiting.attempts + 1;
        let first = awaiting.records.first().map_or(-1, |r| r.0);
        self.failed_attempt(first, attempts, "kafka", &failed[0].1);
        let outputs: Vec<Output> = failed.into_iter().map(|(out, _)| out).collect();
        let delay = self.shared.retry.delay(attempts, jitter());
        let records = awaiting.records;
        self.resends.push(Box::pin(async move {
            tokio::time::sleep(delay).await;
            (outputs, records, attempts)
        }));
    }

    /// Records of one key failed: after the backoff they go back to the
    /// front of their lane (the key stays busy meanwhile).
    fn schedule_retry(&mut self, retry: Retry) {
        let first = retry.records[0].offset;
        let attempts = {
            let a = self.attempts.entry(first).or_insert(0);
            *a += 1;
            *a
        };
        self.failed_attempt(first, attempts, retry.dependency, &retry.message);
        let delay = self.shared.retry.delay(attempts, jitter());
        let records = retry.records;
        self.backoffs.push(Box::pin(async move {
            tokio::time::sleep(delay).await;
            records
        }));
    }

    fn retry_now(&mut self, records: Vec<Record>) {
        if let Batching::Batch { .. } = self.batching {
            return self.ordered.retry(records);
        }
        let key = records.first().and_then(|r| r.key.clone());
        self.lanes.retry(records);
        if let Some(key) = key {
            self.lanes.release(&key);
        }
    }

    /// Counts a failed attempt; at the cap the partition pauses and the
    /// service reports not ready (the record keeps retrying).
    fn failed_attempt(&mut self, offset: i64, attempts: u32, dependency: &'static str, error: &str) {
        self.shared.metrics.retries.with_label_values(&[dependency]).inc();
        if attempts == self.shared.retry.attempts_before_stall {
            self.stalled.push(offset);
            self.shared.health.stalled.fetch_add(1, Ordering::Relaxed);
            self.shared.metrics.stalled.inc();
            tracing::error!(
                partition = self.partition,
                offset,
                attempts,
                error,
                "Record keeps failing; pausing its partition and reporting not ready (it keeps retrying)"
            );
            self.check_budget();
        } else {
            tracing::debug!(partition = self.partition, offset, attempt = attempts, error, "Retrying");
        }
    }

    /// The record at `offset` got through: undo its stall, if any.
    fn unstall(&mut self, offset: i64) {
        self.attempts.remove(&offset);
        if let Some(i) = self.stalled.iter().position(|o| *o == offset) {
            self.stalled.swap_remove(i);
            self.shared.health.stalled.fetch_sub(1, Ordering::Relaxed);
            self.shared.metrics.stalled.dec();
            self.check_budget();
        }
    }

    fn complete(&mut self, offset: i64, size: usize) {
        if let Err(e) = self.tracker.complete(offset) {
            tracing::error!(partition = self.partition, error = %e, "Completion for an offset not in flight");
            return;
        }
        self.slot.add_finished(1);
        self.bytes = self.bytes.saturating_sub(size);
    }

    fn publish_position(&mut self) {
        let position = self.tracker.commit_position();
        if position != self.published
            && let Some(p) = position
        {
            self.slot.set_position(p);
            self.published = position;
            self.check_budget();
        }
    }

    fn count(&mut self, outcome: &'static str) {
        match self.outcomes.iter().find(|(o, _)| *o == outcome) {
            Some((_, counter)) => counter.inc(),
            None => {
                let counter = self.shared.metrics.messages.with_label_values(&[outcome]);
                counter.inc();
                self.outcomes.push((outcome, counter));
            }
        }
    }

    /// Bytes in flight, or (behind one slow record) completed records
    /// waiting for the watermark: each is bounded; a stalled record pauses
    /// too. Resumes below the fraction, with no stall. (Records in flight
    /// are bounded by the consumer thread, which counts what it hands out.)
    fn check_budget(&mut self) {
        let b = self.shared.budget;
        let over = self.bytes >= b.max_bytes || self.tracker.window_len() >= b.max_records * WINDOW_FACTOR;
        let low_records = (b.max_records as f64 * b.resume_fraction) as usize;
        let low_bytes = (b.max_bytes as f64 * b.resume_fraction) as usize;
        let low = self.bytes <= low_bytes && self.tracker.window_len() <= low_records * WINDOW_FACTOR;
        let paused = if !self.stalled.is_empty() || over {
            true
        } else if low {
            false
        } else {
            self.paused
        };
        if paused != self.paused {
            self.paused = paused;
            self.slot.set_pause(paused);
        }
    }
}

/// Runs one unit through the handler. A panic is a bug reachable from the
/// records: a batch that panics is handled again record by record, and a
/// record that panics is dead-lettered with the reason rather than left to
/// wedge its key.
async fn run_unit<H: Handler>(
    handler: Arc<H>,
    records: Vec<Record>,
    batching: Batching,
    permit: OwnedSemaphorePermit,
) -> Unit {
    let started = Instant::now();
    let results = match batching {
        Batching::Batch { .. } if records.len() > 1 => {
            match std::panic::AssertUnwindSafe(handler.handle_batch(&records)).catch_unwind().await {
                Ok(results) => results,
                Err(_) => one_by_one(&*handler, &records).await,
            }
        }
        _ => one_by_one(&*handler, &records).await,
    };
    drop(permit);
    Unit { records, results, started }
}

async fn one_by_one<H: Handler>(handler: &H, records: &[Record]) -> Vec<Result<Handled, HandleError>> {
    in_key_order(records, |record| async move {
        let result = std::panic::AssertUnwindSafe(handler.handle(record)).catch_unwind().await;
        result.unwrap_or_else(|panic| {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "handler panicked".to_string());
            Err(HandleError::Invalid { kind: "handler_panic", message })
        })
    })
    .await
}

/// The next transaction opening (never, outside exactly-once mode).
async fn changed(reopened: &mut Option<watch::Receiver<u64>>) -> Option<Result<(), watch::error::RecvError>> {
    match reopened {
        Some(rx) => Some(rx.changed().await),
        None => std::future::pending().await,
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d.into()).await,
        None => std::future::pending().await,
    }
}
