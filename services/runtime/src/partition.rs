//! One actor per assigned partition: the single owner of that partition's
//! processing state for one assignment epoch.
//!
//! It keeps the offset tracker, the per-key lanes (one running record per
//! key, the rest queued in offset order; records without a key run
//! unordered) and the partition's budget. A full budget pauses this
//! partition alone; it resumes with hysteresis. When the partition is
//! revoked or lost the actor ends, and completions that arrive afterwards
//! go nowhere: they are never committed.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use sluice_core::offsets::OffsetTracker;
use tokio::sync::mpsc;

use crate::consumer::Command;
use crate::handler::{Handler, Record};
use crate::task::{self, TaskShared};

/// Messages to a partition actor.
#[derive(Debug)]
pub(crate) enum ActorMsg {
    /// A record fetched for this partition.
    Record(Record),
    /// A record's outputs are enqueued: the next record of `key` may start.
    Released { key: Vec<u8> },
    /// A record finished (handled, or dead-lettered, and acknowledged);
    /// `key` is its lane if not released before.
    Done { offset: i64, key: Option<Vec<u8>>, size: usize },
    /// A record passed the retry cap; it keeps retrying.
    Stalled,
    /// A stalled record finally succeeded.
    Unstalled,
    /// Revoked: finish what can finish by `deadline`, then reply with the
    /// position to commit.
    Drain { deadline: Instant, reply: DrainReply },
    /// Lost (another member may own it): stop at once, commit nothing.
    Lost,
}

/// Where a draining actor sends its partition's last safe position.
type DrainReply = std::sync::mpsc::SyncSender<(i32, Option<i64>)>;

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

/// Handle to a running actor, kept by the consumer thread.
#[derive(Debug)]
pub(crate) struct ActorHandle {
    pub epoch: u64,
    pub tx: mpsc::UnboundedSender<ActorMsg>,
}

pub(crate) struct PartitionActor<H> {
    partition: i32,
    epoch: u64,
    tracker: OffsetTracker,
    /// Keys with a running record, and the records queued behind it.
    lanes: HashMap<Vec<u8>, VecDeque<Record>>,
    /// Running record tasks by offset, aborted when the epoch ends so no
    /// record of this epoch runs beside the next owner's.
    running: HashMap<i64, tokio::task::AbortHandle>,
    bytes: usize,
    paused: bool,
    stalled: usize,
    budget: Budget,
    rx: mpsc::UnboundedReceiver<ActorMsg>,
    tx: mpsc::UnboundedSender<ActorMsg>,
    commands: std::sync::mpsc::Sender<Command>,
    shared: Arc<TaskShared<H>>,
    revoked: Arc<AtomicBool>,
}

impl<H: Handler> PartitionActor<H> {
    /// Starts the actor for `partition` in assignment `epoch`.
    pub(crate) fn spawn(
        runtime: &tokio::runtime::Handle,
        partition: i32,
        epoch: u64,
        budget: Budget,
        commands: std::sync::mpsc::Sender<Command>,
        shared: Arc<TaskShared<H>>,
    ) -> ActorHandle {
        let (tx, rx) = mpsc::unbounded_channel();
        let actor = Self {
            partition,
            epoch,
            tracker: OffsetTracker::new(),
            lanes: HashMap::new(),
            running: HashMap::new(),
            bytes: 0,
            paused: false,
            stalled: 0,
            budget,
            rx,
            tx: tx.clone(),
            commands,
            shared,
            revoked: Arc::new(AtomicBool::new(false)),
        };
        runtime.spawn(actor.run());
        ActorHandle { epoch, tx }
    }

    async fn run(mut self) {
        let label = self.partition.to_string();
        let in_flight = self.shared.metrics.in_flight.with_label_values(&[&label]);
        self.shared.metrics.paused.with_label_values(&[&label]).set(0);
        let mut draining: Option<(Instant, DrainReply)> = None;
        loop {
            let msg = match &draining {
                Some((deadline, _)) => {
                    if self.tracker.incomplete() == 0 {
                        break;
                    }
                    match tokio::time::timeout_at((*deadline).into(), self.rx.recv()).await {
                        Ok(msg) => msg,
                        Err(_) => break, // deadline: commit what completed
                    }
                }
                None => self.rx.recv().await,
            };
            match msg {
                None => break,
                Some(ActorMsg::Record(record)) => self.on_record(record),
                Some(ActorMsg::Released { key }) => self.advance_lane(key),
                Some(ActorMsg::Done { offset, key, size }) => self.on_done(offset, key, size),
                Some(ActorMsg::Stalled) => {
                    self.stalled += 1;
                    self.set_paused(true);
                }
                Some(ActorMsg::Unstalled) => {
                    self.stalled = self.stalled.saturating_sub(1);
                    self.maybe_resume();
                }
                Some(ActorMsg::Drain { deadline, reply }) => draining = Some((deadline, reply)),
                Some(ActorMsg::Lost) => {
                    self.end_epoch();
                    self.clear_metrics(&label);
                    return;
                }
            }
            in_flight.set(self.tracker.incomplete() as i64);
        }
        // Revoked (or the runtime is stopping): stop every task of this epoch
        // and hand the last safe position to the consumer thread.
        self.end_epoch();
        if let Some((_, reply)) = draining {
            let _ = reply.send((self.partition, self.tracker.commit_position()));
        }
        self.clear_metrics(&label);
    }

    /// Stops every task of this epoch: none may run beside the next owner.
    fn end_epoch(&mut self) {
        self.revoked.store(true, Ordering::Release);
        for (_, task) in self.running.drain() {
            task.abort();
        }
    }

    fn clear_metrics(&self, label: &str) {
        let m = &self.shared.metrics;
        let _ = m.in_flight.remove_label_values(&[label]);
        let _ = m.paused.remove_label_values(&[label]);
    }

    fn on_record(&mut self, record: Record) {
        if let Err(e) = self.tracker.received(record.offset) {
            // librdkafka delivers a partition's offsets increasing within an
            // assignment; anything else (e.g. a position reset after log
            // truncation) is not tracked and not processed. Loud, because the
            // commit position may then pass it.
            tracing::error!(partition = self.partition, error = %e, "Offset out of order; record ignored");
            return;
        }
        self.bytes += record.size();
        match &record.key {
            Some(key) => match self.lanes.get_mut(key) {
                Some(queue) => queue.push_back(record),
                None => {
                    self.lanes.insert(key.clone(), VecDeque::new());
                    self.start(record);
                }
            },
            None => self.start(record),
        }
        if self.over_budget() {
            self.set_paused(true);
        }
    }

    fn on_done(&mut self, offset: i64, key: Option<Vec<u8>>, size: usize) {
        if let Err(e) = self.tracker.complete(offset) {
            tracing::error!(partition = self.partition, error = %e, "Completion for an offset not in flight");
            return;
        }
        self.bytes = self.bytes.saturating_sub(size);
        self.running.remove(&offset);
        if let Some(key) = key {
            self.advance_lane(key);
        }
        if let Some(offset) = self.tracker.take_commit() {
            let _ = self.commands.send(Command::Store { partition: self.partition, epoch: self.epoch, offset });
        }
        self.maybe_resume();
    }

    /// The running record of `key` is through: start the key's next one.
    fn advance_lane(&mut self, key: Vec<u8>) {
        match self.lanes.get_mut(&key).and_then(VecDeque::pop_front) {
            Some(record) => self.start(record),
            None => {
                self.lanes.remove(&key);
            }
        }
    }

    fn start(&mut self, record: Record) {
        let offset = record.offset;
        let task = tokio::spawn(task::run(self.shared.clone(), record, self.tx.clone(), self.revoked.clone()));
        self.running.insert(offset, task.abort_handle());
    }

    /// Records in flight, bytes in flight, or (behind one slow record)
    /// completed records waiting for the watermark: each is bounded.
    fn over_budget(&self) -> bool {
        let b = self.budget;
        self.tracker.incomplete() >= b.max_records
            || self.bytes >= b.max_bytes
            || self.tracker.window_len() >= b.max_records * WINDOW_FACTOR
    }

    fn maybe_resume(&mut self) {
        let b = self.budget;
        let low_records = (b.max_records as f64 * b.resume_fraction) as usize;
        let low_bytes = (b.max_bytes as f64 * b.resume_fraction) as usize;
        if self.paused
            && self.stalled == 0
            && self.tracker.incomplete() <= low_records
            && self.bytes <= low_bytes
            && self.tracker.window_len() <= low_records * WINDOW_FACTOR
        {
            self.set_paused(false);
        }
    }

    fn set_paused(&mut self, paused: bool) {
        if self.paused == paused {
            return;
        }
        self.paused = paused;
        let (partition, epoch) = (self.partition, self.epoch);
        let command = if paused { Command::Pause { partition, epoch } } else { Command::Resume { partition, epoch } };
        let _ = self.commands.send(command);
        self.shared.metrics.paused.with_label_values(&[&partition.to_string()]).set(i64::from(paused));
    }
}
