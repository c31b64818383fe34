//! The contract between the runtime and a workload.

pub use sluice_service::admin::NotReady;
use std::sync::Arc;

use crate::metrics::{Dependency, MessageOutcome};
use crate::retry::Exhausted;

/// One consumed record, owned.
#[derive(Debug, Clone)]
pub struct Record {
    pub topic: Arc<str>,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub payload: Option<Vec<u8>>,
    /// The record's Kafka timestamp (producer or broker time), Unix ms.
    pub timestamp_ms: Option<i64>,
    /// Sent back from the dead-letter topic (`sluice-ops dlq redrive`: it
    /// carries a `sluice.redrive.origin` header).
    pub redriven: bool,
}

impl Record {
    /// The record `message` of `topic` holds, copied out of the client's buffer.
    #[inline]
    pub fn from_message(topic: Arc<str>, message: &impl rdkafka::Message) -> Self {
        Self {
            topic,
            partition: message.partition(),
            offset: message.offset(),
            key: message.key().map(<[u8]>::to_vec),
            payload: message.payload().map(<[u8]>::to_vec),
            timestamp_ms: message.timestamp().to_millis(),
            redriven: sluice_kafka::topics::redriven(message),
        }
    }

    /// Payload and key bytes, for the per-partition byte budget.
    pub fn size(&self) -> usize {
        self.payload.as_ref().map_or(0, Vec::len) + self.key.as_ref().map_or(0, Vec::len)
    }
}

/// A record a handler asks the runtime to publish to Kafka.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publish {
    pub topic: Arc<str>,
    pub key: Vec<u8>,
    pub payload: Vec<u8>,
}

/// What a handler did with a record that needs no retry.
#[derive(Debug, Clone, PartialEq)]
pub struct Handled {
    /// Outcome label for `messages_total{outcome}`; keep the set small and fixed.
    pub outcome: &'static str,
    /// When the record's event happened (Unix ms), for end-to-end latency.
    pub event_time_ms: Option<i64>,
    /// Records to publish, in order. The runtime enqueues them on the shared
    /// producer, then lets the next record of the same key start, and
    /// completes this record's offset once all of them are acknowledged (a
    /// failed delivery is sent again): a key's outputs keep their order
    /// without each record waiting a Kafka round trip before the next.
    pub publish: Vec<Publish>,
}

impl Handled {
    pub fn ok(event_time_ms: Option<i64>) -> Self {
        Self { outcome: MessageOutcome::Ok.as_str(), event_time_ms, publish: Vec::new() }
    }
}

/// Why a handler could not finish a record, classified by what to do next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandleError {
    /// The record itself is bad (undecodable, invalid): retrying cannot
    /// help. It goes to the dead-letter topic with `kind` and `message`.
    #[error("invalid record ({kind}): {message}")]
    Invalid { kind: &'static str, message: String },
    /// A dependency failed (Redis, Kafka): retry with backoff, blocking
    /// only this record's key. Effects must be idempotent.
    #[error("transient failure in {dependency}: {message}")]
    Transient { dependency: &'static str, message: String },
}

impl HandleError {
    pub fn invalid(kind: &'static str, message: impl Into<String>) -> Self {
        Self::Invalid { kind, message: message.into() }
    }

    pub fn transient(dependency: &'static str, message: impl ToString) -> Self {
        Self::Transient { dependency, message: message.to_string() }
    }
}

/// How the runtime hands a workload its records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Batching {
    /// [`Handler::handle`] per record, concurrently across keys (one record
    /// of a key at a time): a slow record holds back only its own key.
    PerRecord,
    /// [`Handler::handle_batch`] with what a partition has ready: up to
    /// `max_records` records, several of a key in offset order. A batch's
    /// keys wait for the whole batch, so use it where a batch costs about
    /// what one record does (one round trip to a store for all of them).
    Batch { max_records: usize },
}

/// A workload. The runtime calls [`Handler::handle`] once per record (again
/// after a transient failure), or [`Handler::handle_batch`] with several
/// records when [`Handler::batching`] asks for it; never for two records of
/// the same key at once (a batch holds a key's records in offset order).
/// It completes a record's offset only once its result was `Ok` and its
/// [`Handled::publish`] records were acknowledged, or the dead letter was.
/// So a handler must await every other output it causes before returning
/// (it happens before the publishes), and its effects must be idempotent.
pub trait Handler: Send + Sync + 'static {
    fn handle(&self, record: &Record) -> impl Future<Output = Result<Handled, HandleError>> + Send;

    /// One result per record of `records`, in order. Records of one key
    /// come in offset order; once one of them fails transiently, none of
    /// the key's later records in the batch may have taken effect (the
    /// runtime retries the key from the failed record on, whatever their
    /// results say). The default handles them one by one with `handle`.
    fn handle_batch<'a>(
        &'a self,
        records: &'a [Record],
    ) -> impl Future<Output = Vec<Result<Handled, HandleError>>> + Send + 'a {
        in_key_order(records, |record| self.handle(record))
    }

    /// How this handler takes its records; per record unless it says so.
    fn batching(&self) -> Batching {
        Batching::PerRecord
    }

    /// What happens to a record whose retries ran out
    /// ([`crate::retry::RetryPolicy::attempts_before_stall`]): its partition
    /// pauses unless the workload's keys are independent and it says so.
    fn retry_exhausted(&self) -> Exhausted {
        Exhausted::PausePartition
    }

    /// Readiness of the handler's own dependencies (e.g. Redis answers).
    fn ready(&self) -> Result<(), NotReady> {
        Ok(())
    }

    /// The generation of the store the handler's effects live in
    /// ([`crate::sink::RedisSink::generation`]), if it keeps state: the
    /// runtime records it with every offset commit, so a store that lost
    /// that state is told apart at the next start
    /// ([`crate::Runtime::recorded_generation`]).
    fn state_generation(&self) -> Option<String> {
        None
    }
}

/// Handles `records` one by one, in order, with `handle`. Once a record of a
/// key fails transiently, the key's later records are not handled (they
/// fail transiently too), so none of them takes effect before it.
pub(crate) async fn in_key_order<'a, F, Fut>(records: &'a [Record], mut handle: F) -> Vec<Result<Handled, HandleError>>
where
    F: FnMut(&'a Record) -> Fut,
    Fut: Future<Output = Result<Handled, HandleError>>,
{
    let mut results = Vec::with_capacity(records.len());
    let mut failed: Vec<&[u8]> = Vec::new();
    for record in records {
        let key = record.key.as_deref();
        if key.is_some_and(|k| failed.contains(&k)) {
            results.push(Err(HandleError::transient(
                Dependency::Handler.as_str(),
                "an earlier record of this key failed",
            )));
            continue;
        }
        let result = handle(record).await;
        if let (Err(HandleError::Transient { .. }), Some(k)) = (&result, key) {
            failed.push(k);
        }
        results.push(result);
    }
    results
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(offset: i64, key: &str) -> Record {
        Record {
            topic: Arc::from("t"),
            partition: 0,
            offset,
            key: Some(key.as_bytes().to_vec()),
            payload: None,
            timestamp_ms: None,
            redriven: false,
        }
    }

    #[tokio::test]
    async fn a_failed_key_is_not_handled_further_the_others_are() {
        let records = [record(0, "a"), record(1, "b"), record(2, "a"), record(3, "b")];
        let mut handled = Vec::new();
        let results = in_key_order(&records, |r| {
            handled.push(r.offset);
            let result =
                if r.offset == 0 { Err(HandleError::transient("redis", "down")) } else { Ok(Handled::ok(None)) };
            async move { result }
        })
        .await;
        assert_eq!(handled, [0, 1, 3], "record 2 (key a, after a's failure) must not be handled");
        let transient: Vec<bool> = results.iter().map(|r| matches!(r, Err(HandleError::Transient { .. }))).collect();
        assert_eq!(transient, [true, false, true, false]);
    }
}
