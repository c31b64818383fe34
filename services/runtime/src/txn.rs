//! Exactly-once outputs (`SLUICE_PROCESSOR_EXACTLY_ONCE`): the workers'
//! outputs and the input offsets they complete are committed together in
//! Kafka transactions, so a `read_committed` reader of the outputs sees
//! each input record's outputs exactly once, whatever crashes.
//!
//! One transactional producer per process (KIP-447): the offsets go into
//! the transaction with the consumer group's metadata, so the group
//! coordinator refuses them from a member that lost its partitions (its
//! whole transaction is then aborted). A worker hands its done records to
//! the open transaction in offset order only ([`Open::send`]): the offsets
//! committed with a transaction are then exactly the records whose outputs
//! it (or an earlier one) holds, never fewer (a crash would publish them
//! again) and never more (a crash would lose them).
//!
//! The driver thread ends the open transaction every interval: it closes it
//! to workers (they keep handling, and hold their done records until the
//! next one opens), waits for the deliveries, sends the offsets and commits.
//! A transaction that must abort (a failed delivery, a refused offset
//! commit, a lost partition) is aborted and what it held is sent again in
//! the next one, except what belonged to partitions no longer owned. A
//! fatal error (another producer with this `transactional.id`) stops the
//! runtime: its open transaction is aborted by the broker after
//! `transaction.timeout.ms`, and nothing it held is visible.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use rdkafka::consumer::ConsumerGroupMetadata;
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::{ClientConfig, ClientContext};
use tokio::sync::watch;

use crate::config::ExactlyOnce;
use crate::metrics::{RuntimeMetrics, TxnOutcome};
use crate::output::Output;
use crate::recorded;

/// Why the transactions stopped for good.
#[derive(Debug, Clone, thiserror::Error)]
#[error("Kafka transactions stopped: {0}")]
pub struct TxnFailed(pub String);

/// Where a worker epoch's outputs stand: while `alive` is false (lost,
/// or revoked and committed) nothing of it is sent or sent again.
#[derive(Debug, Clone)]
pub(crate) struct EpochRef {
    pub partition: i32,
    pub epoch: u64,
    pub alive: Arc<AtomicBool>,
}

/// What the open transaction holds of one release, kept until it commits.
struct Retained {
    owner: EpochRef,
    outputs: Vec<Output>,
}

#[derive(Default)]
struct State {
    open: bool,
    /// Positions to commit with the open transaction, per partition.
    dirty: HashMap<i32, (u64, i64)>,
    /// The last position released per partition (any transaction), and the
    /// epoch that released it: after an abort only a live one's position
    /// goes into the next transaction.
    latest: HashMap<i32, (EpochRef, i64)>,
    retained: Vec<Retained>,
    /// The open transaction must abort: it may hold a lost partition's outputs.
    poisoned: bool,
    failed: Option<String>,
}

impl State {
    /// Whether `epoch` still owns `partition`: the last epoch to release a
    /// position there, and not lost.
    fn owns(&self, partition: i32, epoch: u64) -> bool {
        self.latest.get(&partition).is_some_and(|(o, _)| o.epoch == epoch && o.alive.load(Ordering::Acquire))
    }
}

/// A request to end the open transaction now, with partitions whose epoch
/// ends with it.
struct Final {
    partitions: Vec<i32>,
    reply: std::sync::mpsc::SyncSender<Result<(), TxnFailed>>,
    /// Set when the revoke stopped waiting: the partitions are then no
    /// longer this transaction's to commit.
    cancelled: Arc<AtomicBool>,
}

#[derive(Default)]
struct Requests {
    finals: Vec<Final>,
    stop: bool,
    /// The driver is gone: nothing more is answered.
    ended: bool,
}

/// The process's transactional output and its driver.
pub(crate) struct Transactions {
    /// Replaced when a fatal error (the coordinator fenced this producer:
    /// a transaction that outlived its timeout while the process was
    /// paused) leaves it unusable.
    producer: RwLock<Arc<ThreadedProducer<TxnContext>>>,
    client: ClientConfig,
    /// Held shared by every release in progress, so releases enqueue their
    /// outputs side by side; the driver takes it alone to close the open
    /// transaction, so no release straddles two transactions. Taken before
    /// `state`, never after.
    gate: RwLock<()>,
    state: Mutex<State>,
    reopened: watch::Sender<u64>,
    requests: Mutex<Requests>,
    wake: Condvar,
    group: Mutex<Option<Arc<ConsumerGroupMetadata>>>,
    topic: Arc<str>,
    settings: ExactlyOnce,
    metrics: RuntimeMetrics,
    generation: Box<dyn Fn() -> Option<String> + Send + Sync>,
}

/// The open transaction, for one release by a worker: it stays open
/// while this is held.
pub(crate) struct Open<'a> {
    txn: &'a Transactions,
    _gate: RwLockReadGuard<'a, ()>,
}

impl Open<'_> {
    /// Sends `outputs` (done records of `owner`, in offset order, every one
    /// below them done too) and records `position`, the offset below which
    /// all of the partition's records are now in a transaction.
    pub(crate) fn send(&mut self, owner: &EpochRef, outputs: Vec<Output>, position: Option<i64>) {
        if !owner.alive.load(Ordering::Acquire) {
            return;
        }
        // Enqueued outside the state's lock: other workers' releases go on
        // meanwhile, and the transaction cannot close under them (the gate).
        let refused = if outputs.is_empty() { None } else { self.txn.enqueue(&outputs).err() };
        let mut state = self.txn.lock();
        if let Some(e) = refused {
            // The transaction aborts and everything it held goes again.
            tracing::warn!(partition = owner.partition, error = %e, "Output refused inside a transaction; it will abort");
            state.poisoned = true;
        }
        if !outputs.is_empty() {
            state.retained.push(Retained { owner: owner.clone(), outputs });
        }
        if let Some(p) = position {
            state.dirty.insert(owner.partition, (owner.epoch, p));
            match state.latest.get_mut(&owner.partition) {
                Some((by, at)) if by.epoch == owner.epoch => *at = p,
                _ => {
                    state.latest.insert(owner.partition, (owner.clone(), p));
                }
            }
        }
    }
}

/// How a transaction ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Nothing was in it: it stays open.
    Empty,
    Committed,
    Aborted,
}

/// The result of one attempt to end a transaction.
enum Ended {
    Committed,
    /// It must be aborted; what it held goes again.
    Abort(String),
    Fatal(String),
}

impl Transactions {
    /// Creates the transactional producer, initialises it (fencing any
    /// earlier producer with the same id), begins the first transaction and
    /// starts the driver thread.
    pub(crate) fn start(
        client: ClientConfig,
        settings: ExactlyOnce,
        topic: Arc<str>,
        metrics: RuntimeMetrics,
        generation: Box<dyn Fn() -> Option<String> + Send + Sync>,
    ) -> Result<(Arc<Self>, std::thread::JoinHandle<()>), KafkaError> {
        let mut client = client;
        let timeout = settings.timeout.as_millis().to_string();
        client
            .set("transactional.id", &settings.transactional_id)
            .set("transaction.timeout.ms", &timeout)
            // librdkafka requires deliveries to end within the transaction's timeout.
            .set("message.timeout.ms", &timeout);
        let producer = initialised(&client, settings.timeout)?;
        tracing::info!(transactional_id = %settings.transactional_id, "Exactly-once outputs: transactions initialised");
        let (reopened, _) = watch::channel(0);
        let txn = Arc::new(Self {
            producer: RwLock::new(Arc::new(producer)),
            client,
            gate: RwLock::new(()),
            state: Mutex::new(State { open: true, ..State::default() }),
            reopened,
            requests: Mutex::new(Requests::default()),
            wake: Condvar::new(),
            group: Mutex::new(None),
            topic,
            settings,
            metrics,
            generation,
        });
        let driver = txn.clone();
        let join = std::thread::Builder::new()
            .name("kafka-txn".into())
            .spawn(move || driver.drive())
            .map_err(|e| KafkaError::ClientCreation(e.to_string()))?;
        Ok((txn, join))
    }

    fn producer(&self) -> Arc<ThreadedProducer<TxnContext>> {
        self.producer.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// A new producer in place of one a fatal error left unusable: its
    /// initialisation fences the old one for good, and its first transaction begins.
    fn renew(&self) -> Result<(), TxnFailed> {
        let fresh =
            initialised(&self.client, self.settings.timeout).map_err(|e| TxnFailed(format!("a new producer: {e}")))?;
        *self.producer.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(fresh);
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_requests(&self) -> MutexGuard<'_, Requests> {
        self.requests.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The open transaction, or `None` while one is being ended (the caller
    /// waits for [`Transactions::subscribe`] to change).
    pub(crate) fn open(&self) -> Option<Open<'_>> {
        let gate = self.gate.read().unwrap_or_else(|e| e.into_inner());
        self.lock().open.then_some(Open { txn: self, _gate: gate })
    }

    /// Changes each time a transaction opens.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.reopened.subscribe()
    }

    /// The group's metadata for the next offset commit (refreshed by the
    /// consumer thread; a stale one gets the transaction aborted).
    pub(crate) fn set_group(&self, metadata: Option<ConsumerGroupMetadata>) {
        *self.group.lock().unwrap_or_else(|e| e.into_inner()) = metadata.map(Arc::new);
    }

    /// The partitions' work may be in the open transaction and another
    /// member may own them now: it must abort.
    pub(crate) fn poison(&self) {
        self.lock().poisoned = true;
    }

    /// Moves a partition's position from `from` to `to` when nothing was
    /// released since: the offsets between hold only transaction markers.
    pub(crate) fn skip_markers(&self, partition: i32, epoch: u64, from: i64, to: i64) {
        let mut state = self.lock();
        if let Some((by, at)) = state.latest.get_mut(&partition)
            && to > from
            && by.epoch == epoch
            && *at == from
        {
            *at = to;
            state.dirty.insert(partition, (epoch, to));
        }
    }

    /// Ends the open transaction now, with `partitions` (revoked and
    /// drained) in it for the last time; waits for the outcome. On an abort
    /// their work is not sent again: the next owner processes it.
    /// Waits at most `extra` plus what ending a transaction may take (its
    /// calls, an abort, a new producer); past that the request is cancelled
    /// and the open transaction poisoned, so the partitions' work is never
    /// committed later, under another owner.
    pub(crate) fn commit_final(&self, partitions: Vec<i32>, extra: Duration) -> Result<(), TxnFailed> {
        let (reply, outcome) = std::sync::mpsc::sync_channel(1);
        let cancelled = Arc::new(AtomicBool::new(false));
        {
            let mut requests = self.lock_requests();
            if requests.ended {
                return Err(TxnFailed(self.failed().unwrap_or_else(|| "the transactions have stopped".into())));
            }
            requests.finals.push(Final { partitions, reply, cancelled: cancelled.clone() });
        }
        self.wake.notify_all();
        let wait = extra + self.settings.timeout * 3;
        outcome.recv_timeout(wait).unwrap_or_else(|_| {
            cancelled.store(true, Ordering::Release);
            self.poison();
            Err(TxnFailed(format!("no transaction outcome within {wait:?}")))
        })
    }

    /// Ends the driver after a last transaction.
    pub(crate) fn stop(&self) {
        self.lock_requests().stop = true;
        self.wake.notify_all();
    }

    /// Whether the runtime asked the driver to stop (waits for Kafka end).
    fn stopping(&self) -> bool {
        self.lock_requests().stop
    }

    /// Why the transactions stopped, if they did.
    pub(crate) fn failed(&self) -> Option<String> {
        self.lock().failed.clone()
    }

    fn enqueue(&self, outputs: &[Output]) -> Result<(), KafkaError> {
        let producer = self.producer();
        for out in outputs {
            let mut record = BaseRecord::to(&out.topic).key(&out.key).payload(&out.payload);
            if let Some(h) = &out.headers {
                record = record.headers(h.clone());
            }
            producer.send(record).map_err(|(e, _)| e)?;
        }
        Ok(())
    }

    /// The driver thread: ends a transaction every interval, or at once
    /// when asked; stops after a fatal error or when told to.
    fn drive(&self) {
        let mut aborts_in_a_row = 0u32;
        loop {
            // After aborts, the next attempt waits longer (a rebalance the
            // consumer has not caught up with refuses every offset commit
            // until it has), up to 16 intervals.
            let wait = self.settings.interval * 2u32.pow(aborts_in_a_row.min(4));
            let (finals, stop) = {
                let mut requests = self.lock_requests();
                if requests.finals.is_empty() && !requests.stop {
                    requests = self.wake.wait_timeout(requests, wait).unwrap_or_else(|e| e.into_inner()).0;
                }
                (std::mem::take(&mut requests.finals), requests.stop)
            };
            let ending: Vec<i32> = finals
                .iter()
                .filter(|f| !f.cancelled.load(Ordering::Acquire))
                .flat_map(|f| f.partitions.iter().copied())
                .collect();
            let outcome = self.end(&ending);
            aborts_in_a_row = match outcome {
                Ok(Outcome::Aborted) => aborts_in_a_row + 1,
                _ => 0,
            };
            let outcome = outcome.map(|_| ());
            for f in finals {
                let _ = f.reply.send(outcome.clone());
            }
            if outcome.is_err() || stop {
                // Wakes workers waiting for a transaction that will not open.
                self.reopened.send_modify(|n| *n += 1);
                let mut requests = self.lock_requests();
                requests.ended = true;
                let why = TxnFailed(self.failed().unwrap_or_else(|| "the transactions have stopped".into()));
                for f in requests.finals.drain(..) {
                    let _ = f.reply.send(Err(why.clone()));
                }
                return;
            }
        }
    }

    /// Ends the open transaction (commit, or abort and send again), then
    /// opens the next one.
    fn end(&self, ending: &[i32]) -> Result<Outcome, TxnFailed> {
        let (dirty, retained, poisoned) = {
            // Alone at the gate: every release in progress has finished.
            let _closing = self.gate.write().unwrap_or_else(|e| e.into_inner());
            let mut state = self.lock();
            if let Some(why) = &state.failed {
                return Err(TxnFailed(why.clone()));
            }
            if state.dirty.is_empty() && state.retained.is_empty() && !state.poisoned {
                return Ok(Outcome::Empty);
            }
            state.open = false;
            (
                std::mem::take(&mut state.dirty),
                std::mem::take(&mut state.retained),
                std::mem::replace(&mut state.poisoned, false),
            )
        };
        let started = Instant::now();
        let ended = if poisoned {
            Ended::Abort("a partition was lost while its work was in the transaction".into())
        } else if let Some(p) = uncovered(&dirty, &retained) {
            Ended::Abort(format!("partition {p}'s outputs are in the transaction without its position"))
        } else {
            self.commit(&dirty, &retained, ending)
        };
        let result = match ended {
            Ended::Committed => {
                self.metrics.transactions.with_label_values(&[TxnOutcome::Committed.as_str()]).inc();
                self.committed_offsets(&dirty, ending);
                self.begin().map(|()| Outcome::Committed)
            }
            Ended::Abort(why) => {
                let outputs = retained.iter().map(|r| r.outputs.len()).sum::<usize>();
                tracing::warn!(reason = %why, outputs, "Aborting the transaction; its work goes again in the next one");
                let reopened = match self.abort() {
                    Ok(()) => self.begin(),
                    // Fenced while aborting (the coordinator already aborted it).
                    Err(e) if !self.stopping() => {
                        tracing::warn!(error = %e, "The abort failed; replacing the transactional producer");
                        self.renew()
                    }
                    Err(e) => Err(e),
                };
                self.reopened_after_abort(reopened, dirty, retained, ending)
            }
            // What the transaction held is aborted with the old producer; the
            // work of epochs still owned goes again with a new one.
            Ended::Fatal(why) if !self.stopping() => {
                tracing::warn!(reason = %why, "The transactional producer cannot go on; replacing it");
                self.reopened_after_abort(self.renew(), dirty, retained, ending)
            }
            Ended::Fatal(why) => Err(TxnFailed(why)),
        };
        self.metrics.transaction_seconds.observe(started.elapsed().as_secs_f64());
        match result {
            Ok(outcome) => {
                self.lock().open = true;
                self.reopened.send_modify(|n| *n += 1);
                Ok(outcome)
            }
            Err(e) => {
                tracing::error!(error = %e, "Exactly-once outputs cannot go on; the processor stops (its open transaction is aborted by the broker)");
                self.lock().failed = Some(e.0.clone());
                Err(e)
            }
        }
    }

    /// An aborted transaction, once the next one is open (`reopened`): what
    /// it held of epochs still owned goes again.
    fn reopened_after_abort(
        &self,
        reopened: Result<(), TxnFailed>,
        dirty: HashMap<i32, (u64, i64)>,
        retained: Vec<Retained>,
        ending: &[i32],
    ) -> Result<Outcome, TxnFailed> {
        self.metrics.transactions.with_label_values(&[TxnOutcome::Aborted.as_str()]).inc();
        reopened.map(|()| {
            self.send_again(dirty, retained, ending);
            Outcome::Aborted
        })
    }

    /// `sluice_processor_committed_offset` follows what the transaction
    /// committed (the consumer commits nothing itself in this mode, so
    /// librdkafka's statistics never see it move): only partitions still
    /// owned and not ending with this commit (a revoke drops their series
    /// right after, or already did when its wait for this commit gave up), so
    /// a revoked one's series does not come back.
    fn committed_offsets(&self, dirty: &HashMap<i32, (u64, i64)>, ending: &[i32]) {
        let state = self.lock();
        for (p, (epoch, offset)) in dirty {
            if !ending.contains(p) && state.owns(*p, *epoch) {
                self.metrics.committed_offset.with_label_values(&[&*self.topic, &p.to_string()]).set(*offset);
            }
        }
    }

    /// Waits for the deliveries, sends the offsets, commits.
    fn commit(&self, dirty: &HashMap<i32, (u64, i64)>, retained: &[Retained], ending: &[i32]) -> Ended {
        let deadline = Instant::now() + self.settings.timeout;
        // Not rdkafka's flush, which waits in polls of 100 ms: the
        // producer's own thread serves the deliveries.
        let producer = self.producer();
        while producer.in_flight_count() > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(500));
        }
        // A partition lost while this transaction was closing (its epoch
        // ended after the poison was read) must not commit here: the group
        // coordinator's generation check is the last guard, not the only one.
        if let Some(p) = self.gone(dirty, retained, ending) {
            return Ended::Abort(format!("partition {p} was lost while its transaction was ending"));
        }
        if !dirty.is_empty() {
            let Some(group) = self.group.lock().unwrap_or_else(|e| e.into_inner()).clone() else {
                return Ended::Abort("no consumer group metadata yet".into());
            };
            let mut tpl = TopicPartitionList::new();
            for (p, (_, offset)) in dirty {
                let _ = tpl.add_partition_offset(&self.topic, *p, Offset::Offset(*offset));
            }
            if let Some(generation) = (self.generation)() {
                recorded::stamp(&tpl, &generation);
            }
            let timeout = self.settings.timeout;
            let sent = self.retrying(Step::Offsets, || producer.send_offsets_to_transaction(&tpl, &group, timeout));
            if let Err(ended) = sent {
                return ended;
            }
        }
        match self.retrying(Step::Commit, || producer.commit_transaction(self.settings.timeout)) {
            Ok(()) => Ended::Committed,
            Err(ended) => ended,
        }
    }

    /// A partition in the transaction whose epoch is over, unless it ends
    /// with this transaction (a revoke's final commit).
    fn gone(&self, dirty: &HashMap<i32, (u64, i64)>, retained: &[Retained], ending: &[i32]) -> Option<i32> {
        let state = self.lock();
        let live = |p: i32, epoch: u64| ending.contains(&p) || state.owns(p, epoch);
        retained
            .iter()
            .map(|r| (r.owner.partition, r.owner.epoch))
            .chain(dirty.iter().map(|(p, (epoch, _))| (*p, *epoch)))
            .find(|(p, epoch)| !live(*p, *epoch))
            .map(|(p, _)| p)
    }

    fn abort(&self) -> Result<(), TxnFailed> {
        let timeout = self.settings.timeout;
        let producer = self.producer();
        self.retrying(Step::Abort, || producer.abort_transaction(timeout)).map_err(|ended| match ended {
            Ended::Abort(why) | Ended::Fatal(why) => TxnFailed(format!("abort failed: {why}")),
            Ended::Committed => unreachable!("an abort never commits"),
        })
    }

    /// Runs a transaction call until it succeeds or its error settles the
    /// transaction: fatal (another producer took the id) stops; abortable
    /// aborts. Anything else (the broker unreachable, a timeout) is tried
    /// again with a growing pause, for as long as it lasts: an outage pauses
    /// the outputs (the workers' staged records fill their budgets), it does
    /// not stop the processor. Only a shutdown ends the waiting.
    fn retrying(&self, step: Step, mut call: impl FnMut() -> Result<(), KafkaError>) -> Result<(), Ended> {
        let mut pause = Duration::from_millis(100);
        loop {
            let Err(e) = call() else { return Ok(()) };
            let (fatal, abortable, retriable) = match &e {
                KafkaError::Transaction(t) => (t.is_fatal(), t.txn_requires_abort(), t.is_retriable()),
                _ => (false, false, false),
            };
            if fatal {
                return Err(Ended::Fatal(e.to_string()));
            }
            if step != Step::Abort && (abortable || (step == Step::Offsets && !retriable)) {
                return Err(Ended::Abort(e.to_string()));
            }
            if self.stopping() {
                return Err(Ended::Fatal(format!("{e} (stopping)")));
            }
            tracing::warn!(?step, error = %e, retry_in_ms = pause.as_millis() as u64, "Transaction call failed; trying again");
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_secs(2));
        }
    }

    fn begin(&self) -> Result<(), TxnFailed> {
        self.producer().begin_transaction().map_err(|e| TxnFailed(format!("begin: {e}")))
    }

    /// After an abort: the work of partitions still owned (and not ending)
    /// goes into the new transaction, in the order it was first sent.
    fn send_again(&self, dirty: HashMap<i32, (u64, i64)>, retained: Vec<Retained>, ending: &[i32]) {
        let keep = |owner: &EpochRef| owner.alive.load(Ordering::Acquire) && !ending.contains(&owner.partition);
        let mut state = self.lock();
        for r in retained.into_iter().filter(|r| keep(&r.owner)) {
            if let Err(e) = self.enqueue(&r.outputs) {
                tracing::warn!(error = %e, "Output refused again; the next transaction aborts too");
                state.poisoned = true;
            }
            state.retained.push(r);
        }
        // A lost partition's position must never be committed: the next owner
        // starts from the last one committed and its commits are its own.
        for (p, at) in dirty {
            if !ending.contains(&p) && state.owns(p, at.0) {
                state.dirty.entry(p).or_insert(at);
            }
        }
        for p in ending {
            state.latest.remove(p);
        }
    }
}

/// A partition whose outputs are retained but whose position is not in
/// `dirty` for the same epoch (its offsets would not be committed with them).
fn uncovered(dirty: &HashMap<i32, (u64, i64)>, retained: &[Retained]) -> Option<i32> {
    retained
        .iter()
        .map(|r| &r.owner)
        .find(|o| dirty.get(&o.partition).is_none_or(|d| d.0 != o.epoch))
        .map(|o| o.partition)
}

/// Which transaction call a retry loop runs: what an error that is neither
/// fatal nor retriable means differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Nothing is committed yet: the transaction aborts.
    Offsets,
    /// The commit may have reached the coordinator: asked again (a commit is
    /// idempotent), never aborted on a guess.
    Commit,
    Abort,
}

/// The transactional producer's context: failed deliveries are logged (the
/// transaction then fails to commit and aborts).
struct TxnContext;

impl ClientContext for TxnContext {}

impl ProducerContext for TxnContext {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, message)) = result {
            use rdkafka::message::Message;
            tracing::warn!(topic = message.topic(), error = %e, "Delivery failed inside a transaction; it will abort");
        }
    }
}

/// A transactional producer, initialised (fencing any earlier one with its
/// id), its first transaction begun.
fn initialised(client: &ClientConfig, timeout: Duration) -> Result<ThreadedProducer<TxnContext>, KafkaError> {
    let producer: ThreadedProducer<TxnContext> = client.create_with_context(TxnContext)?;
    producer.init_transactions(timeout)?;
    producer.begin_transaction()?;
    Ok(producer)
}
