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

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard};
use std::time::Duration;

use rdkafka::consumer::ConsumerGroupMetadata;
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::topic_partition_list::TopicPartitionList;
use rdkafka::{ClientConfig, ClientContext};
use tokio::sync::watch;

use crate::config::ExactlyOnce;
use crate::metrics::RuntimeMetrics;
use crate::output::Output;

mod driver;
mod state;

use state::State;

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
    stamp: Stamp,
}

/// Sets a transaction's offset commits' metadata ([`crate::recorded::stamp`]).
/// One for the whole runtime: the consumer's own commits use it too.
pub(crate) type Stamp = Arc<dyn Fn(&TopicPartitionList) + Send + Sync>;

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
        if let Some(e) = &refused {
            // The transaction aborts and everything it held goes again.
            tracing::warn!(partition = owner.partition, error = %e, "Output refused inside a transaction; it will abort");
        }
        self.txn.lock().released(owner, outputs, position, refused.is_some());
    }
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
        stamp: Stamp,
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
            state: Mutex::new(State::opened()),
            reopened,
            requests: Mutex::new(Requests::default()),
            wake: Condvar::new(),
            group: Mutex::new(None),
            topic,
            settings,
            metrics,
            stamp,
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

    /// Commits `to` for a partition `owner`'s epoch has handed nothing of
    /// (the consumer stepped over transaction markers only), once per move.
    pub(crate) fn skip_untouched(&self, owner: &EpochRef, to: i64) {
        self.lock().skip_untouched(owner, to);
    }

    /// Moves a partition's position from `from` to `to` when nothing was
    /// released since: the offsets between hold only transaction markers.
    pub(crate) fn skip_markers(&self, partition: i32, epoch: u64, from: i64, to: i64) {
        self.lock().skip_markers(partition, epoch, from, to);
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
