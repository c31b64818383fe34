//! One record's life: wait for a permit, run the handler, retry transient
//! failures with backoff (blocking only this record's key, since its lane
//! waits), dead-letter invalid records, and report completion to the
//! partition actor. Nothing is ever dropped: past the retry cap the record
//! keeps retrying while its partition pauses and the service reports
//! not-ready.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use futures_util::FutureExt;
use rdkafka::message::{Header, OwnedHeaders};
use sluice_core::clock::now_ms;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use crate::handler::{HandleError, Handled, Handler, Publish, Record};
use crate::metrics::RuntimeMetrics;
use crate::partition::ActorMsg;
use crate::retry::{RetryPolicy, jitter};
use crate::sink::KafkaSink;

/// Process-wide health the readiness check reads.
#[derive(Debug, Default)]
pub struct Health {
    pub assigned: AtomicUsize,
    pub stalled: AtomicUsize,
    pub shutting_down: AtomicBool,
}

/// What every record task shares.
pub(crate) struct TaskShared<H> {
    pub handler: Arc<H>,
    pub permits: Arc<Semaphore>,
    pub kafka: KafkaSink,
    pub dlq_topic: String,
    pub group_id: String,
    pub retry: RetryPolicy,
    pub metrics: RuntimeMetrics,
    pub health: Arc<Health>,
}

/// Headers naming where a dead letter came from and why.
fn dead_letter_headers(record: &Record, group: &str, kind: &str, message: &str) -> OwnedHeaders {
    let partition = record.partition.to_string();
    let offset = record.offset.to_string();
    let headers = OwnedHeaders::new()
        .insert(Header { key: "sluice.original.topic", value: Some(record.topic.as_bytes()) })
        .insert(Header { key: "sluice.original.partition", value: Some(partition.as_bytes()) })
        .insert(Header { key: "sluice.original.offset", value: Some(offset.as_bytes()) })
        .insert(Header { key: "sluice.error.kind", value: Some(kind.as_bytes()) })
        .insert(Header { key: "sluice.error.message", value: Some(message.as_bytes()) })
        .insert(Header { key: "sluice.consumer.group", value: Some(group.as_bytes()) });
    match &record.key {
        Some(key) => headers.insert(Header { key: "sluice.original.key", value: Some(key.as_slice()) }),
        None => headers,
    }
}

async fn dead_letter<H>(
    shared: &TaskShared<H>,
    record: &Record,
    kind: &'static str,
    message: &str,
) -> Result<(), HandleError> {
    let headers = dead_letter_headers(record, &shared.group_id, kind, message);
    let key = record.key.as_deref().unwrap_or_default();
    let payload = record.payload.as_deref().unwrap_or_default();
    shared
        .kafka
        .send(&shared.dlq_topic, key, payload, Some(headers))
        .await
        .map_err(|e| HandleError::transient("kafka", e))?;
    shared.metrics.dead_letters.with_label_values(&[kind]).inc();
    Ok(())
}

/// Failed attempts of one record, and whether it passed the retry cap.
struct Attempts<'a, H> {
    shared: &'a TaskShared<H>,
    actor: &'a mpsc::UnboundedSender<ActorMsg>,
    count: u32,
    stalled: bool,
}

impl<'a, H> Attempts<'a, H> {
    fn new(shared: &'a TaskShared<H>, actor: &'a mpsc::UnboundedSender<ActorMsg>) -> Self {
        Self { shared, actor, count: 0, stalled: false }
    }

    /// Counts a failure; past the cap the partition pauses and the service
    /// reports not ready (the record keeps retrying). Then backs off.
    async fn failed(&mut self, record: &Record, dependency: &'static str, error: &(dyn std::fmt::Display + Sync)) {
        self.count += 1;
        let shared = self.shared;
        shared.metrics.retries.with_label_values(&[dependency]).inc();
        if self.count == shared.retry.attempts_before_stall && !self.stalled {
            self.stalled = true;
            shared.health.stalled.fetch_add(1, Ordering::Relaxed);
            shared.metrics.stalled.inc();
            let _ = self.actor.send(ActorMsg::Stalled);
            tracing::error!(
                partition = record.partition,
                offset = record.offset,
                attempts = self.count,
                %error,
                "Record keeps failing; pausing its partition and reporting not ready (it keeps retrying)"
            );
        } else {
            tracing::debug!(partition = record.partition, offset = record.offset, attempt = self.count, %error, "Retrying record");
        }
        tokio::time::sleep(shared.retry.delay(self.count, jitter())).await;
    }

    /// The record got through (or was dropped): undo its stall, if any.
    fn finish(self) {
        if self.stalled {
            self.shared.health.stalled.fetch_sub(1, Ordering::Relaxed);
            self.shared.metrics.stalled.dec();
            let _ = self.actor.send(ActorMsg::Unstalled);
        }
    }
}

/// Runs `record` to completion and reports it to its partition actor.
pub(crate) async fn run<H: Handler>(
    shared: Arc<TaskShared<H>>,
    mut record: Record,
    actor: mpsc::UnboundedSender<ActorMsg>,
    revoked: Arc<AtomicBool>,
) {
    let Ok(permit) = shared.permits.clone().acquire_owned().await else { return };
    let started = Instant::now();
    let mut attempts = Attempts::new(&shared, &actor);
    let handled = loop {
        if revoked.load(Ordering::Acquire) {
            // The partition moved on; its new owner processes the record again.
            shared.metrics.dropped_completions.inc();
            break None;
        }
        // A panic in the handler is a bug reachable from this record: it is
        // dead-lettered with the reason rather than left to wedge its lane.
        let handled = std::panic::AssertUnwindSafe(shared.handler.handle(&record)).catch_unwind().await;
        let handled = handled.unwrap_or_else(|panic| {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "handler panicked".to_string());
            Err(HandleError::Invalid { kind: "handler_panic", message })
        });
        let result = match handled {
            Ok(handled) => Ok(handled),
            Err(HandleError::Invalid { kind, message }) => dead_letter(&shared, &record, kind, &message)
                .await
                .map(|()| Handled { outcome: "dead_lettered", event_time_ms: None, publish: Vec::new() }),
            Err(e) => Err(e),
        };
        match result {
            Ok(handled) => break Some(handled),
            Err(e) => {
                let dependency = match &e {
                    HandleError::Transient { dependency, .. } => *dependency,
                    HandleError::Invalid { .. } => "handler",
                };
                attempts.failed(&record, dependency, &e).await;
            }
        }
    };
    let Some(mut handled) = handled else { return attempts.finish() };
    let size = record.size();
    let mut lane_key = record.key.take();
    let outputs = std::mem::take(&mut handled.publish);
    if !outputs.is_empty() && !publish(&mut attempts, &record, &outputs, &mut lane_key, permit, &revoked).await {
        shared.metrics.dropped_completions.inc();
        return attempts.finish();
    }
    attempts.finish();
    shared.metrics.messages.with_label_values(&[handled.outcome]).inc();
    shared.metrics.handle_seconds.observe(started.elapsed().as_secs_f64());
    if let Some(event_ms) = handled.event_time_ms {
        shared.metrics.end_to_end_seconds.observe(now_ms().saturating_sub(event_ms).max(0) as f64 / 1000.0);
    }
    if actor.send(ActorMsg::Done { offset: record.offset, key: lane_key, size }).is_err() {
        shared.metrics.dropped_completions.inc();
    }
}

/// Publishes a record's outputs: all enqueued in order, then the key's lane
/// released (`lane_key` taken) so the key's next record starts while these
/// are in flight, and the permit returned (waiting for acknowledgements
/// costs no handler capacity; the partition's budget bounds the records
/// waiting), then every acknowledgement awaited. A failed delivery is
/// sent again until acknowledged (at least once; a resend may land after
/// the key's later outputs, which carry their own sequence). Returns
/// `false` if the partition was revoked meanwhile.
async fn publish<H>(
    attempts: &mut Attempts<'_, H>,
    record: &Record,
    outputs: &[Publish],
    lane_key: &mut Option<Vec<u8>>,
    permit: OwnedSemaphorePermit,
    revoked: &AtomicBool,
) -> bool {
    let (shared, actor) = (attempts.shared, attempts.actor);
    let mut pending = Vec::with_capacity(outputs.len());
    for out in outputs {
        loop {
            if revoked.load(Ordering::Acquire) {
                return false;
            }
            match shared.kafka.enqueue(&out.topic, &out.key, &out.payload, None).await {
                Ok(delivery) => break pending.push(delivery),
                Err(e) => attempts.failed(record, "kafka", &e).await,
            }
        }
    }
    if let Some(key) = lane_key.take() {
        let _ = actor.send(ActorMsg::Released { key });
    }
    drop(permit);
    for (out, delivery) in outputs.iter().zip(pending) {
        let mut result = delivery.acknowledged().await;
        while let Err(e) = result {
            attempts.failed(record, "kafka", &e).await;
            if revoked.load(Ordering::Acquire) {
                return false;
            }
            result = shared.kafka.send(&out.topic, &out.key, &out.payload, None).await;
        }
    }
    true
}
