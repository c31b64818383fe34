//! The runtime's Kafka output: one idempotent (`acks=all`) producer shared
//! by every partition worker.
//!
//! Outputs are enqueued as a [`Group`]: everything one unit of work (a
//! record, or a batch) produced. librdkafka's delivery callback (on the
//! producer's polling thread) counts the group down and tells its owner
//! once, when the last acknowledgement is in, by sending the group's id on
//! the owner's channel: one wake per group, whatever its size. A failed
//! delivery is kept (copied out of the failed message) for the owner to
//! send again; nothing is dropped.

use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::util::Timeout;
use rdkafka::{ClientConfig, ClientContext};
use sluice_kafka::KafkaConfig;
use tokio::sync::mpsc;

use crate::metrics::{RuntimeMetrics, Sink};
use crate::sink::SinkError;

/// One record to produce.
#[derive(Debug, Clone)]
pub struct Output {
    pub topic: Arc<str>,
    pub key: Vec<u8>,
    pub payload: Vec<u8>,
    pub headers: Option<OwnedHeaders>,
    /// Its input record's event time (Unix ms: the workload's, the block time for the DEX, or
    /// the input's Kafka timestamp for a dead letter): the freshness its visibility is measured
    /// from (`visible_age_seconds`).
    pub event_time_ms: Option<i64>,
}

/// Where a group's owner hears that a group is through: its id.
pub(crate) type GroupDone = mpsc::UnboundedSender<u64>;

/// Outputs enqueued together, acknowledged together.
#[derive(Debug)]
pub(crate) struct Group {
    id: u64,
    remaining: AtomicUsize,
    failed: Mutex<Vec<(Output, KafkaError)>>,
    done: GroupDone,
    started: Instant,
    /// Each output's topic and event time: their ages are observed when the group lands.
    events: Vec<(Arc<str>, i64)>,
}

impl Group {
    pub(crate) fn new(id: u64, outputs: &[Output], done: GroupDone) -> Arc<Self> {
        Arc::new(Self {
            id,
            remaining: AtomicUsize::new(outputs.len()),
            failed: Mutex::new(Vec::new()),
            done,
            started: Instant::now(),
            events: outputs.iter().filter_map(|o| Some((o.topic.clone(), o.event_time_ms?))).collect(),
        })
    }

    /// The oldest event time among the group's outputs: what a failed output is sent again
    /// with (which of them failed is not known to the delivery report), so its age is never
    /// understated.
    fn oldest_event(&self) -> Option<i64> {
        self.events.iter().map(|(_, t)| *t).min()
    }

    /// The outputs whose delivery failed, with why (to be sent again).
    pub(crate) fn take_failed(&self) -> Vec<(Output, KafkaError)> {
        std::mem::take(&mut *self.failed.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// One output is through; the last one tells the owner (and says so).
    fn settle_one(&self) -> bool {
        let last = self.remaining.fetch_sub(1, Ordering::AcqRel) == 1;
        if last {
            let _ = self.done.send(self.id);
        }
        last
    }
}

/// The shared producer.
#[derive(Clone)]
pub struct KafkaSink {
    producer: Arc<ThreadedProducer<Deliveries>>,
}

impl std::fmt::Debug for KafkaSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSink").finish_non_exhaustive()
    }
}

/// The shared producer's librdkafka configuration (public so a benchmark's
/// bare consume-and-produce loop runs with exactly the same settings).
pub fn producer_config(config: &KafkaConfig) -> ClientConfig {
    let mut client = config.producer();
    // A delivery that cannot complete within 30 s comes back as an error
    // and is sent again by its owner; the record is never skipped.
    client.set("message.timeout.ms", "30000");
    // Statistics feed the batching figures (records per produce request).
    client.set("statistics.interval.ms", "5000");
    for (k, v) in &config.properties {
        client.set(k, v);
    }
    client
}

impl KafkaSink {
    pub fn new(config: &KafkaConfig, metrics: RuntimeMetrics) -> Result<Self, KafkaError> {
        let seconds = metrics.sink_seconds.with_label_values(&[Sink::Kafka.as_str()]);
        let context = Deliveries { metrics, seconds, requests: AtomicI64::new(0), records: AtomicI64::new(0) };
        let producer = producer_config(config).create_with_context(context)?;
        Ok(Self { producer: Arc::new(producer) })
    }

    /// Enqueues `outputs` in order as `group` (records to one partition keep
    /// their order). One that librdkafka refuses (its queue full, say) is
    /// counted as a failed delivery of the group at once, so the group's
    /// owner sends it again like any other failure.
    pub(crate) fn enqueue(&self, outputs: &[Output], group: &Arc<Group>) {
        for out in outputs {
            if let Err(e) = self.try_enqueue(out, group) {
                group.failed.lock().unwrap_or_else(|e| e.into_inner()).push((out.clone(), e));
                let _ = group.settle_one();
            }
        }
    }

    fn try_enqueue(&self, out: &Output, group: &Arc<Group>) -> Result<(), KafkaError> {
        let mut record = BaseRecord::with_opaque_to(&out.topic, group.clone()).key(&out.key).payload(&out.payload);
        if let Some(h) = &out.headers {
            record = record.headers(h.clone());
        }
        self.producer.send(record).map_err(|(e, _)| e)
    }

    /// Sends one record and waits for its acknowledgement (outside the hot
    /// path: tests and tools).
    pub async fn send(
        &self,
        topic: &str,
        key: &[u8],
        payload: &[u8],
        headers: Option<OwnedHeaders>,
    ) -> Result<(), SinkError> {
        let (done, mut acked) = mpsc::unbounded_channel();
        let out = Output {
            topic: Arc::from(topic),
            key: key.to_vec(),
            payload: payload.to_vec(),
            headers,
            event_time_ms: None,
        };
        let group = Group::new(0, std::slice::from_ref(&out), done);
        loop {
            match self.try_enqueue(&out, &group) {
                Ok(()) => break,
                // Room comes back as acknowledgements arrive.
                Err(KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull)) => {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err(e) => return Err(SinkError::Kafka(e)),
            }
        }
        acked.recv().await.ok_or(SinkError::ProducerStopped)?;
        match group.take_failed().into_iter().next() {
            Some((_, e)) => Err(SinkError::Kafka(e)),
            None => Ok(()),
        }
    }

    /// Waits (bounded) until everything enqueued is acknowledged.
    pub fn flush(&self, timeout: Duration) -> Result<(), SinkError> {
        self.producer.flush(Timeout::After(timeout)).map_err(SinkError::Kafka)
    }
}

/// The producer's context: counts groups down on delivery, and turns
/// librdkafka's cumulative statistics into counters of produce requests
/// and of the records they carried.
struct Deliveries {
    metrics: RuntimeMetrics,
    /// `sink_duration_seconds{sink="kafka"}`: enqueue to a group's last acknowledgement.
    seconds: prometheus::Histogram,
    requests: AtomicI64,
    records: AtomicI64,
}

impl ClientContext for Deliveries {
    fn stats(&self, statistics: rdkafka::Statistics) {
        let requests: i64 = statistics.brokers.values().filter_map(|b| b.req.get("Produce")).sum();
        let advance = |seen: &AtomicI64, now: i64| (now - seen.swap(now, Ordering::Relaxed)).max(0) as u64;
        self.metrics.produce_requests.inc_by(advance(&self.requests, requests));
        self.metrics.produced_records.inc_by(advance(&self.records, statistics.txmsgs));
    }
}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = Arc<Group>;

    fn delivery(&self, result: &DeliveryResult<'_>, group: Arc<Group>) {
        if let Err((e, message)) = result {
            let headers = message.headers().map(|h| h.detach());
            let out = Output {
                topic: Arc::from(message.topic()),
                key: message.key().unwrap_or_default().to_vec(),
                payload: message.payload().unwrap_or_default().to_vec(),
                headers,
                event_time_ms: group.oldest_event(),
            };
            group.failed.lock().unwrap_or_else(|e| e.into_inner()).push((out, e.clone()));
        }
        if group.settle_one() {
            self.seconds.observe(group.started.elapsed().as_secs_f64());
            // Landed whole: readers see every output now. A group with a failed delivery is
            // left out; its failed outputs are observed when they land again.
            if group.failed.lock().unwrap_or_else(|e| e.into_inner()).is_empty() {
                self.metrics.observe_visible(group.events.iter().map(|(topic, t)| (topic, *t)));
            }
        }
    }
}
