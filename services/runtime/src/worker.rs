//! One worker per assigned partition and assignment epoch: the IO around
//! that partition's decisions ([`Partition`]).
//!
//! It receives the partition's records in batches from the consumer thread
//! and starts units as its [`Partition`] allows. Units run as futures inside
//! this one task (no task per record, no channel message per record); their
//! outputs are enqueued as one group per unit and acknowledged with one wake
//! per group; backoffs and resends are timers in the same task. What the
//! partition decides (what may start, what completes, the position, a pause,
//! a stall) is carried out here: the position and the pause go into the
//! partition's [`Slot`] for the consumer thread, stalls into health and
//! metrics, exactly-once releases into the open transaction.

use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};

use crate::handler::{Batching, HandleError, Handled, Handler, Record};
use crate::health::Health;
use crate::metrics::RuntimeMetrics;
use crate::outcome::DeadLetters;
use crate::output::{Group, KafkaSink, Output};
use crate::partition::{Budget, Partition, Rules};
use crate::recorded::{Committed, DeadBook};
use crate::retry::RetryPolicy;
use crate::slot::Slot;
use crate::txn::{EpochRef, Transactions};

mod act;

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

/// What every worker shares.
pub(crate) struct Shared<H> {
    pub handler: Arc<H>,
    pub permits: Arc<Semaphore>,
    /// The at-least-once outputs' producer: none with exactly-once outputs (`txn`).
    pub kafka: Option<KafkaSink>,
    /// Exactly-once mode: outputs go into Kafka transactions instead.
    pub txn: Option<Arc<Transactions>>,
    pub dead_letters: DeadLetters,
    pub retry: RetryPolicy,
    /// Every partition's dead keys, for the commits.
    pub dead_book: Arc<DeadBook>,
    /// Sets every offset commit's metadata (the state generation, the dead
    /// keys), the consumer's and the transactions' alike.
    pub stamp: crate::txn::Stamp,
    /// Under the dead-letter-key policy: where a new owner reads the dead
    /// keys the partition's last commit recorded.
    pub committed: Option<Arc<Committed>>,
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

pub(crate) struct Worker<H> {
    partition: i32,
    shared: Arc<Shared<H>>,
    slot: Arc<Slot>,
    inbox: mpsc::UnboundedReceiver<WorkerMsg>,
    state: Partition,
    running: FuturesUnordered<UnitFuture>,
    backoffs: FuturesUnordered<RetryFuture>,
    resends: FuturesUnordered<ResendFuture>,
    groups_tx: mpsc::UnboundedSender<u64>,
    groups_rx: mpsc::UnboundedReceiver<u64>,
    /// The groups of outputs not yet acknowledged, by id.
    groups: std::collections::HashMap<u64, Arc<Group>>,
    spare: Option<OwnedSemaphorePermit>,
    published: Option<i64>,
    pause_published: bool,
    outcomes: Vec<(&'static str, prometheus::IntCounter)>,
    owner: EpochRef,
    /// Exactly-once mode: a release waits for the next transaction to open
    /// (while the partition is releasable after a unit, none is open).
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
        let owner = EpochRef { partition, epoch, alive: Arc::new(std::sync::atomic::AtomicBool::new(true)) };
        let reopened = shared.txn.as_ref().map(|t| t.subscribe());
        let state = Partition::new(Rules {
            batching: shared.handler.batching(),
            exactly_once: shared.txn.is_some(),
            budget: shared.budget,
            attempts_before_stall: shared.retry.attempts_before_stall,
            exhausted: shared.handler.retry_exhausted(),
            dead_letters: shared.dead_letters.clone(),
        });
        let worker = Self {
            partition,
            shared,
            slot: slot.clone(),
            inbox,
            state,
            running: FuturesUnordered::new(),
            backoffs: FuturesUnordered::new(),
            resends: FuturesUnordered::new(),
            groups_tx,
            groups_rx,
            groups: std::collections::HashMap::new(),
            spare: None,
            published: None,
            pause_published: false,
            outcomes: Vec::new(),
            owner: owner.clone(),
            reopened,
        };
        runtime.spawn(worker.start());
        WorkerHandle { tx, slot, owner }
    }

    /// Restores the partition's dead keys, if its workload dead-letters
    /// keys, then runs.
    async fn start(mut self) {
        if let Some(committed) = self.shared.committed.clone()
            && self.restore_dead_keys(committed).await.is_break()
        {
            return;
        }
        self.run().await;
    }

    async fn run(mut self) {
        let label = self.partition.to_string();
        let in_flight = self.shared.metrics.in_flight.with_label_values(&[&label]);
        self.shared.metrics.paused.with_label_values(&[&label]).set(0);
        let mut draining: Option<(Instant, DrainReply)> = None;
        let mut closed = false;
        loop {
            if draining.is_none() || self.state.batching() == Batching::PerRecord {
                self.dispatch();
            } else {
                // A batch handler's drain retries nothing (see `Partition::drop_backoffs`).
                self.backoffs.clear();
                self.state.drop_backoffs();
            }
            self.sync();
            in_flight.set(self.state.incomplete() as i64);
            if draining.is_some() && self.state.drained() {
                break;
            }
            let deadline = draining.as_ref().map(|(d, _)| *d);
            let wants_permit = self.spare.is_none() && self.state.can_start() && draining.is_none();
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
                    let action = self.state.resend_due(outputs, records, attempts);
                    self.apply(vec![action]);
                    continue;
                }
                Some(records) = self.backoffs.next(), if !self.backoffs.is_empty() => {
                    self.state.retry_due(records);
                    continue;
                }
                Some(Ok(())) = changed(&mut self.reopened), if self.reopened.is_some() && self.state.releasable() => {
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
                        unfinished = self.state.incomplete(),
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
        }
        // Revoked (or the runtime is stopping): what finished is committed;
        // in-flight work of this epoch is dropped (its records are
        // processed again by the next owner).
        if let Some((_, reply)) = draining {
            let _ = reply.send((self.partition, self.state.position()));
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
                Some(WorkerMsg::Records(records)) => {
                    let actions = self.state.receive(records);
                    self.apply(actions);
                }
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
        self.state.abandon_running();
        let grace = tokio::time::Instant::now() + ACK_GRACE;
        while self.state.awaiting_acks() {
            match tokio::time::timeout_at(grace, self.groups_rx.recv()).await {
                Ok(Some(id)) => self.on_acknowledged(id),
                _ => break,
            }
        }
        self.sync();
    }

    fn log_state(&self, what: &str) {
        let [queued, running, awaiting_acks, retrying] = self.state.counts();
        tracing::debug!(
            partition = self.partition,
            unfinished = self.state.incomplete(),
            queued,
            running,
            awaiting_acks,
            retrying,
            "{what}"
        );
    }

    fn end(&mut self, label: &str) {
        let m = &self.shared.metrics;
        let _ = m.in_flight.remove_label_values(&[label]);
        let _ = m.paused.remove_label_values(&[label]);
        // Stalls of this epoch stop counting in health and metrics.
        let stalled = self.state.stalled();
        self.shared.health.stalled.fetch_sub(stalled, Ordering::Relaxed);
        m.stalled.sub(stalled as i64);
    }
}

impl<H: Handler> Worker<H> {
    /// Before any record: the dead keys the partition's last commit
    /// recorded, so its records are decided as the last owner decided them.
    /// Retried until read (records wait meanwhile); breaks when the
    /// partition is lost or let go of first.
    async fn restore_dead_keys(&mut self, committed: Arc<Committed>) -> ControlFlow<()> {
        let partition = self.partition;
        loop {
            let reader = committed.clone();
            let read = tokio::task::spawn_blocking(move || reader.dead_keys(partition, RESTORE_TIMEOUT)).await;
            match read {
                Ok(Ok(dead)) => {
                    if !dead.is_empty() {
                        tracing::info!(partition, dead = %dead.encode(), "Dead keys restored from the last commit");
                    }
                    self.state.restore(dead);
                    self.record_dead_keys();
                    return ControlFlow::Continue(());
                }
                Ok(Err(e)) => tracing::warn!(partition, error = %e, "Reading the last commit's dead keys; retrying"),
                Err(e) => tracing::warn!(partition, error = %e, "Reading the last commit's dead keys failed"),
            }
            if !self.owner.alive.load(Ordering::Acquire) || self.inbox.is_closed() {
                return ControlFlow::Break(());
            }
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
    }
}

/// How long one read of a partition's last commit may take.
const RESTORE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

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

#[cfg(test)]
mod tests;
