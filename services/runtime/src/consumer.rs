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

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use crate::config::RuntimeConfig;
use crate::handler::{Handler, Record};
use crate::health::Health;
use crate::intake::{Intake, POLL_BATCH, Pacer};
use crate::metrics::{CommitResult, RuntimeMetrics};
use crate::txn::Transactions;
use crate::worker::{Shared, WorkerMsg};

mod context;

use context::{Ctx, position_of};

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
) -> KafkaResult<ConsumerThread> {
    let ctx = Ctx {
        topic: Arc::from(config.input_topic.as_str()),
        workers: Mutex::new(HashMap::new()),
        next_epoch: Mutex::new(0),
        intake: Mutex::new(Intake::default()),
        runtime: tokio::runtime::Handle::current(),
        shared,
        drain_deadline: config.drain_deadline,
        metrics,
        health,
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
    let mut pacer = Pacer::new(Instant::now(), commit_interval);
    let mut batches: Vec<(i32, Vec<Record>)> = Vec::new();
    while !stop.load(Ordering::Acquire) {
        let ahead = apply_pauses(&consumer);
        if let Some(txn) = &ctx.shared.txn
            && pacer.group_due(Instant::now())
        {
            txn.set_group(consumer.group_metadata());
        }
        if let Some(all) = pacer.commit_due(Instant::now()) {
            match &ctx.shared.txn {
                Some(txn) if txn.failed().is_some() => break,
                Some(txn) => transaction_tick(&consumer, txn),
                None => commit_pending(&consumer, all),
            }
        }
        if !pacer.poll_due(Instant::now(), ahead) {
            std::thread::sleep(Duration::from_millis(2));
            continue;
        }
        poll_round(&consumer, &mut batches);
        if !batches.is_empty() {
            hand_out(&ctx, &mut batches);
            // Before the next round: a partition that just reached its
            // budget must not get another round's worth.
            let _ = apply_pauses(&consumer);
        }
    }
    shutdown(&consumer, drain);
}

/// One blocking poll, then whatever is already fetched, up to
/// [`POLL_BATCH`] records, gathered per partition.
fn poll_round<H: Handler>(consumer: &BaseConsumer<Ctx<H>>, batches: &mut Vec<(i32, Vec<Record>)>) {
    let ctx = consumer.context();
    let mut wait = Duration::from_millis(50);
    let mut taken = 0;
    while taken < POLL_BATCH {
        match consumer.poll(wait) {
            Some(Ok(m)) => {
                let record = Record::from_message(ctx.topic.clone(), &m);
                match batches.iter_mut().find(|(p, _)| *p == record.partition) {
                    Some((_, batch)) => batch.push(record),
                    None => {
                        ctx.lock_intake().polled(record.partition);
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
}

/// One message per partition: its records of this poll round.
fn hand_out<H: Handler>(ctx: &Ctx<H>, batches: &mut Vec<(i32, Vec<Record>)>) {
    let workers = ctx.lock_workers();
    let mut intake = ctx.lock_intake();
    for (partition, records) in batches.drain(..) {
        let (first, n) = (records.first().map_or(-1, |r| r.offset), records.len() as u64);
        let end = records.last().map_or(0, |r| r.offset + 1);
        let sent = workers.get(&partition).map(|h| h.tx.send(WorkerMsg::Records(records)));
        if matches!(sent, Some(Ok(()))) {
            intake.handed(partition, Some((n, end)));
        } else {
            intake.handed(partition, None);
            // Not committed, so they will be consumed again by the partition's owner.
            tracing::warn!(partition, offset = first, "Records for a partition without a worker");
        }
    }
}

/// Pauses and resumes partitions as [`Intake::pause`] decides, for the
/// current epochs' slots only. Returns the records handed out and not
/// finished yet, over every partition.
fn apply_pauses<H: Handler>(consumer: &BaseConsumer<Ctx<H>>) -> u64 {
    let ctx = consumer.context();
    let workers = ctx.lock_workers();
    let mut intake = ctx.lock_intake();
    let mut ahead = 0;
    for (&partition, handle) in workers.iter() {
        let (in_flight, change) =
            intake.pause(partition, handle.slot.finished(), handle.slot.wants_pause(), &ctx.shared.budget);
        ahead += in_flight;
        let Some(wants) = change else { continue };
        let mut tpl = TopicPartitionList::new();
        let _ = tpl.add_partition(&ctx.topic, partition);
        let result = if wants { consumer.pause(&tpl) } else { consumer.resume(&tpl) };
        match result {
            Ok(()) => intake.set_paused(partition, wants),
            Err(e) => tracing::warn!(partition, pause = wants, error = %e, "Pause or resume failed"),
        }
        let paused = intake.is_paused(partition);
        ctx.metrics.paused.with_label_values(&[&partition.to_string()]).set(i64::from(paused));
    }
    ahead
}

/// Commits, asynchronously, the positions [`Intake::commit_now`] picks (past
/// transaction markers). Asynchronous so the poll loop never waits on the
/// coordinator; the committed offsets show in the statistics
/// (`committed_offset` gauge). Revoke and shutdown commit synchronously instead.
fn commit_pending<H: Handler>(consumer: &BaseConsumer<Ctx<H>>, all: bool) {
    let ctx = consumer.context();
    let positions = consumer.position().ok();
    let moved: Vec<(i32, i64)> = {
        let workers = ctx.lock_workers();
        let mut intake = ctx.lock_intake();
        let current: Vec<(i32, i64)> = workers
            .iter()
            .filter_map(|(p, h)| {
                let position = position_of(positions.as_ref(), &ctx.topic, *p);
                match h.slot.position() {
                    Some(o) => Some((*p, intake.past_markers(*p, o, position))),
                    None => Some((*p, intake.untouched_position(*p, position)?)),
                }
            })
            .collect();
        intake.commit_now(current, all)
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
            ctx.lock_intake().unsent(moved.into_iter().map(|(p, _)| p));
        }
    }
}

/// Exactly-once mode's periodic step (the transactions commit the
/// offsets): positions moved past transaction markers where a worker is
/// through everything handed out (see [`Intake::past_markers`]); the
/// transaction applies a move only if the partition released nothing since.
/// A partition handed nothing this epoch commits the consumer's position
/// (see [`Intake::untouched_position`]), as the periodic commit does.
fn transaction_tick<H: Handler>(consumer: &BaseConsumer<Ctx<H>>, txn: &Transactions) {
    let ctx = consumer.context();
    let positions = consumer.position().ok();
    let workers = ctx.lock_workers();
    let intake = ctx.lock_intake();
    for (p, handle) in workers.iter() {
        let position = position_of(positions.as_ref(), &ctx.topic, *p);
        if let Some((from, to)) = intake.marker_skip(*p, position) {
            txn.skip_markers(*p, handle.owner.epoch, from, to);
        } else if let Some(to) = intake.untouched_position(*p, position) {
            txn.skip_untouched(&handle.owner, to);
        }
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
    if let Some(Err(e)) = ctx.shared.kafka.as_ref().map(|k| k.flush(Duration::from_secs(5))) {
        tracing::warn!(error = %e, "Producer flush incomplete");
    }
    tracing::info!("Consumer stopped");
}
