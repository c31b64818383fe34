//! The consumer thread: the only code that touches the librdkafka consumer.
//!
//! It runs on a dedicated OS thread (never a tokio worker) so that polling
//! never waits on application work and rebalance callbacks may block on a
//! drain. Partition actors talk to it through a command channel (store an
//! offset, pause, resume), each command tagged with the actor's assignment
//! epoch; a command from an epoch that is no longer current is dropped.
//! Offsets are stored as-is (`store_offsets`: the next offset to consume)
//! and committed by this thread: asynchronously every commit interval, and
//! synchronously on revoke and at shutdown (librdkafka's auto-commit is off).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::Message;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::{ClientConfig, ClientContext};

use crate::config::{GroupProtocol, RuntimeConfig};
use crate::handler::{Handler, Record};
use crate::metrics::RuntimeMetrics;
use crate::partition::{ActorHandle, ActorMsg, Budget, PartitionActor};
use crate::task::{Health, TaskShared};

/// Requests from partition actors to the consumer thread.
#[derive(Debug)]
pub(crate) enum Command {
    Store { partition: i32, epoch: u64, offset: i64 },
    Pause { partition: i32, epoch: u64 },
    Resume { partition: i32, epoch: u64 },
}

/// The consumer's callbacks and the partition actors it owns.
pub(crate) struct Ctx<H> {
    topic: Arc<str>,
    actors: Mutex<HashMap<i32, ActorHandle>>,
    next_epoch: Mutex<u64>,
    /// Latest safe position per owned partition, and the last one sent in a
    /// periodic commit; the periodic commit sends those that differ (and all
    /// of them now and then, so a commit lost in transit is repeated).
    pending: Mutex<HashMap<i32, i64>>,
    sent: Mutex<HashMap<i32, i64>>,
    runtime: tokio::runtime::Handle,
    commands: std::sync::mpsc::Sender<Command>,
    shared: Arc<TaskShared<H>>,
    budget: Budget,
    drain_deadline: Duration,
    metrics: RuntimeMetrics,
    health: Arc<Health>,
}

impl<H: Handler> ClientContext for Ctx<H> {
    /// librdkafka's statistics (every `statistics.interval.ms`, delivered on
    /// poll): the high watermark per assigned partition, without a blocking
    /// metadata request on the consumer thread.
    fn stats(&self, statistics: rdkafka::Statistics) {
        let Some(topic) = statistics.topics.get(&*self.topic) else { return };
        // The lock is held through the updates: a revoke removes the actor, then
        // the partition's series, so no update can bring a revoked one back.
        let actors = self.lock_actors();
        for &p in actors.keys() {
            let Some(stats) = topic.partitions.get(&p) else { continue };
            if stats.hi_offset < 0 {
                continue;
            }
            let labels = [&*self.topic, &p.to_string()];
            self.metrics.high_watermark.with_label_values(&labels).set(stats.hi_offset);
            if stats.committed_offset >= 0 {
                self.metrics.committed_offset.with_label_values(&labels).set(stats.committed_offset);
            }
        }
    }
}

impl<H: Handler> ConsumerContext for Ctx<H> {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => {
                let partitions: Vec<i32> = tpl.elements_for_topic(&self.topic).iter().map(|e| e.partition()).collect();
                self.metrics.rebalances.with_label_values(&["assign"]).inc();
                tracing::info!(?partitions, "Partitions assigned");
                let mut actors = self.lock_actors();
                for p in partitions {
                    let epoch = {
                        let mut next = self.next_epoch.lock().unwrap_or_else(|e| e.into_inner());
                        *next += 1;
                        *next
                    };
                    let handle = PartitionActor::spawn(
                        &self.runtime,
                        p,
                        epoch,
                        self.budget,
                        self.commands.clone(),
                        self.shared.clone(),
                    );
                    if let Some(old) = actors.insert(p, handle) {
                        // Assigned again without a revoke in between: the old
                        // epoch's work must stop and never commit.
                        let _ = old.tx.send(ActorMsg::Lost);
                    }
                }
                self.set_assigned(actors.len());
            }
            Rebalance::Revoke(tpl) => {
                let partitions: Vec<i32> = tpl.elements_for_topic(&self.topic).iter().map(|e| e.partition()).collect();
                if consumer.assignment_lost() {
                    self.metrics.rebalances.with_label_values(&["lost"]).inc();
                    tracing::warn!(?partitions, "Partitions lost; dropping their work uncommitted");
                    self.forget_pending(&partitions);
                    let mut actors = self.lock_actors();
                    for p in &partitions {
                        if let Some(handle) = actors.remove(p) {
                            let _ = handle.tx.send(ActorMsg::Lost);
                        }
                    }
                    self.set_assigned(actors.len());
                } else {
                    self.metrics.rebalances.with_label_values(&["revoke"]).inc();
                    tracing::info!(?partitions, "Partitions revoked; draining");
                    let drained = self.drain(&partitions, self.drain_deadline);
                    self.forget_pending(&partitions);
                    self.commit_drained(consumer, &drained);
                }
                self.forget_offset_metrics(&partitions);
            }
            Rebalance::Error(e) => {
                self.metrics.rebalances.with_label_values(&["error"]).inc();
                tracing::error!(error = %e, "Rebalance error");
            }
        }
    }

    /// librdkafka keeps an application pause across unassign and reassign,
    /// and a new actor starts unpaused: so every newly assigned partition is
    /// resumed, or a partition paused by an earlier owner-epoch would never
    /// be fetched again.
    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance
            && tpl.count() > 0
            && let Err(e) = consumer.resume(tpl)
        {
            tracing::warn!(error = %e, "Resuming newly assigned partitions failed");
        }
    }
}

impl<H: Handler> Ctx<H> {
    fn lock_actors(&self) -> std::sync::MutexGuard<'_, HashMap<i32, ActorHandle>> {
        self.actors.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Positions of partitions this member no longer owns must never be
    /// committed by the periodic commit.
    fn forget_pending(&self, partitions: &[i32]) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let mut sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        for p in partitions {
            pending.remove(p);
            sent.remove(p);
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

    /// Drains the actors of `partitions`: in-flight work may finish until
    /// the deadline. Returns their final positions. Runs on the consumer
    /// thread (inside the revoke callback, or at shutdown), so it may block.
    fn drain(&self, partitions: &[i32], deadline: Duration) -> TopicPartitionList {
        let deadline = Instant::now() + deadline;
        let (reply, replies) = std::sync::mpsc::sync_channel(partitions.len().max(1));
        let mut waiting = 0;
        {
            let mut actors = self.lock_actors();
            for p in partitions {
                if let Some(handle) = actors.remove(p)
                    && handle.tx.send(ActorMsg::Drain { deadline, reply: reply.clone() }).is_ok()
                {
                    waiting += 1;
                }
            }
            self.set_assigned(actors.len());
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
        tpl
    }

    /// Stores and synchronously commits drained positions.
    fn commit_drained(&self, consumer: &BaseConsumer<Self>, tpl: &TopicPartitionList) {
        if tpl.count() == 0 {
            return;
        }
        if let Err(e) = consumer.store_offsets(tpl) {
            tracing::debug!(error = %e, "Storing final offsets failed (partition already gone)");
        }
        self.commit_sync(consumer, tpl);
    }

    /// Commits `tpl` synchronously and records the outcome.
    fn commit_sync(&self, consumer: &BaseConsumer<Self>, tpl: &TopicPartitionList) {
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
                self.metrics.commits.with_label_values(&["ok"]).inc();
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

    fn epoch_of(&self, partition: i32) -> Option<u64> {
        self.lock_actors().get(&partition).map(|h| h.epoch)
    }
}

/// The consumer's librdkafka configuration (public so a benchmark's bare
/// consumer runs with exactly the same settings).
pub fn client_config(config: &RuntimeConfig) -> ClientConfig {
    let mut c = config.kafka.client();
    c.set("group.id", &config.group_id)
        // The consumer thread commits the tracked positions itself, every
        // commit interval and synchronously on revoke and shutdown: one
        // place decides what is committed, and every commit is observed.
        .set("enable.auto.commit", "false")
        // The runtime stores an offset only when every record below it is done.
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("enable.partition.eof", "false")
        .set("max.poll.interval.ms", config.max_poll_interval.as_millis().to_string())
        // Prefetch is bounded: the per-partition budget does the rest.
        .set("queued.max.messages.kbytes", "16384")
        .set("fetch.queue.backoff.ms", "100")
        // Feeds the high-watermark and lag gauges (see `ClientContext::stats`).
        .set("statistics.interval.ms", "5000");
    match config.group_protocol {
        GroupProtocol::Classic => {
            c.set("partition.assignment.strategy", "cooperative-sticky")
                .set("session.timeout.ms", config.session_timeout.as_millis().to_string());
        }
        GroupProtocol::Consumer => {
            c.set("group.protocol", "consumer");
        }
    }
    if let Some(id) = &config.instance_id {
        c.set("group.instance.id", id);
    }
    for (k, v) in &config.kafka.properties {
        c.set(k, v);
    }
    c
}

/// The running consumer thread.
pub(crate) struct ConsumerThread {
    pub stop: Arc<AtomicBool>,
    pub join: std::thread::JoinHandle<()>,
}

/// Creates the consumer and starts its thread.
pub(crate) fn start<H: Handler>(
    config: &RuntimeConfig,
    shared: Arc<TaskShared<H>>,
    metrics: RuntimeMetrics,
    health: Arc<Health>,
) -> KafkaResult<ConsumerThread> {
    let (commands, command_rx) = std::sync::mpsc::channel();
    let ctx = Ctx {
        topic: Arc::from(config.input_topic.as_str()),
        actors: Mutex::new(HashMap::new()),
        next_epoch: Mutex::new(0),
        pending: Mutex::new(HashMap::new()),
        sent: Mutex::new(HashMap::new()),
        runtime: tokio::runtime::Handle::current(),
        commands,
        shared,
        budget: Budget {
            max_records: config.max_in_flight_per_partition,
            max_bytes: config.max_bytes_per_partition,
            resume_fraction: config.resume_fraction,
        },
        drain_deadline: config.drain_deadline,
        metrics,
        health,
    };
    let consumer: BaseConsumer<Ctx<H>> = client_config(config).create_with_context(ctx)?;
    consumer.subscribe(&[&config.input_topic])?;
    let stop = Arc::new(AtomicBool::new(false));
    let (drain, commit_interval) = (config.drain_deadline, config.commit_interval);
    let thread_stop = stop.clone();
    let join = std::thread::Builder::new()
        .name("kafka-consumer".into())
        .spawn(move || poll_loop(consumer, command_rx, thread_stop, drain, commit_interval))
        .map_err(|e| KafkaError::ClientCreation(e.to_string()))?;
    Ok(ConsumerThread { stop, join })
}

fn poll_loop<H: Handler>(
    consumer: BaseConsumer<Ctx<H>>,
    commands: std::sync::mpsc::Receiver<Command>,
    stop: Arc<AtomicBool>,
    drain: Duration,
    commit_interval: Duration,
) {
    let ctx = consumer.context().clone();
    let mut last_commit = Instant::now();
    let mut commits = 0u64;
    while !stop.load(Ordering::Acquire) {
        apply_commands(&consumer, &commands);
        if last_commit.elapsed() >= commit_interval {
            last_commit = Instant::now();
            commits += 1;
            commit_pending(&consumer, commits.is_multiple_of(10));
        }
        match consumer.poll(Duration::from_millis(50)) {
            Some(Ok(m)) => {
                let record = Record {
                    topic: ctx.topic.clone(),
                    partition: m.partition(),
                    offset: m.offset(),
                    key: m.key().map(<[u8]>::to_vec),
                    payload: m.payload().map(<[u8]>::to_vec),
                    timestamp_ms: m.timestamp().to_millis(),
                };
                let sent = ctx.lock_actors().get(&record.partition).map(|h| h.tx.send(ActorMsg::Record(record)));
                if !matches!(sent, Some(Ok(()))) {
                    // Not stored, so it will be consumed again by the partition's owner.
                    tracing::warn!(
                        partition = m.partition(),
                        offset = m.offset(),
                        "Record for a partition without an actor"
                    );
                }
            }
            Some(Err(e)) => tracing::warn!(error = %e, "Consumer error"),
            None => {}
        }
    }
    shutdown(&consumer, &commands, drain);
}

fn apply_commands<H: Handler>(consumer: &BaseConsumer<Ctx<H>>, commands: &std::sync::mpsc::Receiver<Command>) {
    let ctx = consumer.context();
    let mut stores: HashMap<i32, i64> = HashMap::new();
    while let Ok(command) = commands.try_recv() {
        let (partition, epoch) = match &command {
            Command::Store { partition, epoch, .. }
            | Command::Pause { partition, epoch }
            | Command::Resume { partition, epoch } => (*partition, *epoch),
        };
        if ctx.epoch_of(partition) != Some(epoch) {
            // From a revoked assignment: never applied.
            ctx.metrics.dropped_completions.inc();
            continue;
        }
        let one = || {
            let mut tpl = TopicPartitionList::new();
            let _ = tpl.add_partition(&ctx.topic, partition);
            tpl
        };
        match command {
            Command::Store { offset, .. } => {
                // A later store for the same partition overwrites the earlier one.
                ctx.pending.lock().unwrap_or_else(|e| e.into_inner()).insert(partition, offset);
                stores.insert(partition, offset);
            }
            Command::Pause { .. } => {
                if let Err(e) = consumer.pause(&one()) {
                    tracing::warn!(partition, error = %e, "Pause failed");
                }
            }
            Command::Resume { .. } => {
                if let Err(e) = consumer.resume(&one()) {
                    tracing::warn!(partition, error = %e, "Resume failed");
                }
            }
        }
    }
    if stores.is_empty() {
        return;
    }
    // Stored in librdkafka too, so its view of the position stays current.
    let mut tpl = TopicPartitionList::new();
    for (p, o) in stores {
        let _ = tpl.add_partition_offset(&ctx.topic, p, Offset::Offset(o));
    }
    if let Err(e) = consumer.store_offsets(&tpl) {
        // librdkafka refuses stores for partitions no longer assigned.
        tracing::debug!(error = %e, "Offset store refused");
    }
}

/// Commits, asynchronously, every position that moved since the last
/// periodic commit, and every position when `all` is set. Asynchronous so
/// the poll loop never waits on the coordinator; the committed offsets show
/// in the statistics (`committed_offset` gauge). Revoke and shutdown commit
/// synchronously instead.
fn commit_pending<H: Handler>(consumer: &BaseConsumer<Ctx<H>>, all: bool) {
    let ctx = consumer.context();
    let moved: Vec<(i32, i64)> = {
        let pending = ctx.pending.lock().unwrap_or_else(|e| e.into_inner());
        let mut sent = ctx.sent.lock().unwrap_or_else(|e| e.into_inner());
        let moved: Vec<(i32, i64)> =
            pending.iter().filter(|(p, o)| all || sent.get(p) != Some(o)).map(|(p, o)| (*p, *o)).collect();
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
    match consumer.commit(&tpl, CommitMode::Async) {
        Ok(()) => ctx.metrics.commits.with_label_values(&["sent"]).inc(),
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

/// Stop intake, drain every partition, commit, leave the group.
fn shutdown<H: Handler>(
    consumer: &BaseConsumer<Ctx<H>>,
    commands: &std::sync::mpsc::Receiver<Command>,
    drain: Duration,
) {
    let ctx = consumer.context();
    if let Ok(assignment) = consumer.assignment()
        && assignment.count() > 0
    {
        let _ = consumer.pause(&assignment);
    }
    let partitions: Vec<i32> = ctx.lock_actors().keys().copied().collect();
    tracing::info!(partitions = partitions.len(), "Draining before shutdown");
    apply_commands(consumer, commands);
    let drained = ctx.drain(&partitions, drain);
    // Every completed record awaited its own acknowledgements; the flush
    // only bounds what a handler may have sent without awaiting.
    if let Err(e) = ctx.shared.kafka.flush(Duration::from_secs(5)) {
        tracing::warn!(error = %e, "Producer flush incomplete");
    }
    ctx.commit_drained(consumer, &drained);
    consumer.unsubscribe();
    tracing::info!("Consumer stopped");
}
