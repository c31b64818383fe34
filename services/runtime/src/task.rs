//! One record's life: wait for a permit, run the handler, retry transient
//! failures with backoff (blocking only this record's key, since its lane
//! waits), dead-letter invalid records, and report completion to the
//! partition actor. Nothing is ever dropped: past the retry cap the record
//! keeps retrying while its partition pauses and the service reports
//! not-ready.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use futures_util::FutureExt;
use rdkafka::message::{Header, OwnedHeaders};
use tokio::sync::{Semaphore, mpsc};

use crate::handler::{HandleError, Handled, Handler, Record};
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

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// Runs `record` to completion and reports it to its partition actor.
pub(crate) async fn run<H: Handler>(
    shared: Arc<TaskShared<H>>,
    record: Record,
    actor: mpsc::UnboundedSender<ActorMsg>,
    revoked: Arc<AtomicBool>,
) {
    let Ok(_permit) = shared.permits.clone().acquire_owned().await else { return };
    let started = Instant::now();
    let (mut attempt, mut stalled) = (0u32, false);
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
                .map(|()| Handled { outcome: "dead_lettered", event_time_ms: None }),
            Err(e) => Err(e),
        };
        match result {
            Ok(handled) => break Some(handled),
            Err(e) => {
                attempt += 1;
                let dependency = match &e {
                    HandleError::Transient { dependency, .. } => *dependency,
                    HandleError::Invalid { .. } => "handler",
                };
                shared.metrics.retries.with_label_values(&[dependency]).inc();
                if attempt == shared.retry.attempts_before_stall && !stalled {
                    stalled = true;
                    shared.health.stalled.fetch_add(1, Ordering::Relaxed);
                    shared.metrics.stalled.inc();
                    let _ = actor.send(ActorMsg::Stalled);
                    tracing::error!(
                        partition = record.partition,
                        offset = record.offset,
                        attempts = attempt,
                        error = %e,
                        "Record keeps failing; pausing its partition and reporting not ready (it keeps retrying)"
                    );
                } else {
                    tracing::debug!(partition = record.partition, offset = record.offset, attempt, error = %e, "Retrying record");
                }
                tokio::time::sleep(shared.retry.delay(attempt, jitter())).await;
            }
        }
    };
    if stalled {
        shared.health.stalled.fetch_sub(1, Ordering::Relaxed);
        shared.metrics.stalled.dec();
        let _ = actor.send(ActorMsg::Unstalled);
    }
    let Some(handled) = handled else { return };
    let size = record.size();
    shared.metrics.messages.with_label_values(&[handled.outcome]).inc();
    shared.metrics.handle_seconds.observe(started.elapsed().as_secs_f64());
    if let Some(event_ms) = handled.event_time_ms {
        shared.metrics.end_to_end_seconds.observe(now_ms().saturating_sub(event_ms).max(0) as f64 / 1000.0);
    }
    if actor.send(ActorMsg::Done { offset: record.offset, key: record.key, size }).is_err() {
        shared.metrics.dropped_completions.inc();
    }
}
