//! The runtime's outputs: a shared Kafka producer and a batching Redis
//! writer. Handlers and the dead-letter path use both; neither ever drops a
//! write: a failure comes back as an error for the caller to retry.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::OwnedHeaders;
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer};
use rdkafka::util::Timeout;
use rdkafka::{ClientConfig, ClientContext};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, RedisResult, Value};
use sluice_kafka::KafkaConfig;
use tokio::sync::{Mutex, Notify, mpsc, oneshot};

use crate::metrics::RuntimeMetrics;

/// A write that did not land.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SinkError {
    #[error("kafka: {0}")]
    Kafka(String),
    #[error("redis: {0}")]
    Redis(String),
}

/// The shared producer: idempotent, `acks=all`. Each send enqueues at once
/// (`send_result`) and the caller awaits its own acknowledgement, so many
/// concurrent records pipeline into librdkafka's batches. When librdkafka's
/// queue is full, a sender waits for the next acknowledgement to make room.
#[derive(Clone)]
pub struct KafkaSink {
    inner: Arc<KafkaInner>,
}

struct KafkaInner {
    producer: FutureProducer<ProducerStats>,
    room: Notify,
    /// `sink_duration_seconds{sink="kafka"}`, resolved once.
    seconds: prometheus::Histogram,
}

impl std::fmt::Debug for KafkaSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSink").finish_non_exhaustive()
    }
}

impl KafkaSink {
    pub fn new(config: &KafkaConfig, metrics: RuntimeMetrics) -> Result<Self, KafkaError> {
        let client = producer_config(config);
        let seconds = metrics.sink_seconds.with_label_values(&["kafka"]);
        let context = ProducerStats { metrics, requests: AtomicI64::new(0), records: AtomicI64::new(0) };
        let producer = client.create_with_context(context)?;
        Ok(Self { inner: Arc::new(KafkaInner { producer, room: Notify::new(), seconds }) })
    }

    /// Sends one record and waits for Kafka's acknowledgement.
    pub async fn send(
        &self,
        topic: &str,
        key: &[u8],
        payload: &[u8],
        headers: Option<OwnedHeaders>,
    ) -> Result<(i32, i64), SinkError> {
        self.enqueue(topic, key, payload, headers).await?.acknowledged().await
    }

    /// Enqueues one record (waiting only while librdkafka's queue is full)
    /// and returns its pending acknowledgement. Records enqueued one after
    /// the other to the same partition keep their order.
    pub async fn enqueue(
        &self,
        topic: &str,
        key: &[u8],
        payload: &[u8],
        headers: Option<OwnedHeaders>,
    ) -> Result<Delivery, SinkError> {
        let started = Instant::now();
        let future = loop {
            let mut record = FutureRecord::to(topic).key(key).payload(payload);
            if let Some(h) = &headers {
                record = record.headers(h.clone());
            }
            match self.inner.producer.send_result(record) {
                Ok(future) => break future,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    // Wait for an acknowledgement to free room (or a short
                    // while, in case the freeing happened just before).
                    let _ = tokio::time::timeout(Duration::from_millis(20), self.inner.room.notified()).await;
                }
                Err((e, _)) => return Err(SinkError::Kafka(e.to_string())),
            }
        };
        Ok(Delivery { future, started, sink: self.inner.clone() })
    }

    /// Waits (bounded) until everything enqueued is acknowledged.
    pub fn flush(&self, timeout: Duration) -> Result<(), SinkError> {
        self.inner.producer.flush(Timeout::After(timeout)).map_err(|e| SinkError::Kafka(e.to_string()))
    }
}

/// The shared producer's librdkafka configuration (public so a benchmark's
/// bare consume-and-produce loop runs with exactly the same settings).
pub fn producer_config(config: &KafkaConfig) -> ClientConfig {
    let mut client = config.producer();
    // A delivery that cannot complete within 30 s comes back as an error
    // and is retried by the record's task; the record is never skipped.
    client.set("message.timeout.ms", "30000");
    // Statistics feed the batching figures (records per produce request).
    client.set("statistics.interval.ms", "5000");
    for (k, v) in &config.properties {
        client.set(k, v);
    }
    client
}

/// A record enqueued on the shared producer, not yet acknowledged.
#[must_use = "a delivery is only known to have landed once acknowledged"]
pub struct Delivery {
    future: DeliveryFuture,
    started: Instant,
    sink: Arc<KafkaInner>,
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery").field("started", &self.started).finish_non_exhaustive()
    }
}

impl Delivery {
    /// Waits for Kafka's acknowledgement: where the record landed.
    pub async fn acknowledged(self) -> Result<(i32, i64), SinkError> {
        let result = self.future.await;
        self.sink.room.notify_waiters();
        self.sink.seconds.observe(self.started.elapsed().as_secs_f64());
        match result {
            Ok(Ok(delivery)) => Ok((delivery.partition, delivery.offset)),
            Ok(Err((e, _))) => Err(SinkError::Kafka(e.to_string())),
            Err(_) => Err(SinkError::Kafka("producer shut down before the delivery report".into())),
        }
    }
}

/// The producer's context: turns librdkafka's cumulative statistics into
/// counters of produce requests and of the records they carried.
struct ProducerStats {
    metrics: RuntimeMetrics,
    requests: AtomicI64,
    records: AtomicI64,
}

impl ClientContext for ProducerStats {
    fn stats(&self, statistics: rdkafka::Statistics) {
        let requests: i64 = statistics.brokers.values().filter_map(|b| b.req.get("Produce")).sum();
        let advance = |seen: &AtomicI64, now: i64| (now - seen.swap(now, Ordering::Relaxed)).max(0) as u64;
        self.metrics.produce_requests.inc_by(advance(&self.requests, requests));
        self.metrics.produced_records.inc_by(advance(&self.records, statistics.txmsgs));
    }
}

struct Op {
    cmd: Cmd,
    reply: oneshot::Sender<RedisResult<Value>>,
}

/// Redis through a fixed, small number of connections whatever the
/// concurrency: callers enqueue commands; each writer takes what is queued
/// (up to a batch), sends it as one pipeline, and hands each caller its own
/// reply. Queue many, flush, resolve afterwards.
#[derive(Clone)]
pub struct RedisSink {
    tx: mpsc::Sender<Op>,
    healthy: Arc<AtomicBool>,
}

impl std::fmt::Debug for RedisSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSink").field("healthy", &self.healthy.load(Ordering::Relaxed)).finish()
    }
}

impl RedisSink {
    /// Starts `connections` writers for `url`. `scripts` (Lua sources) are
    /// loaded on every (re)connection so `EVALSHA` always finds them.
    pub fn start(
        url: &str,
        connections: usize,
        max_batch: usize,
        scripts: Vec<String>,
        metrics: RuntimeMetrics,
    ) -> Result<Self, SinkError> {
        let client = redis::Client::open(url).map_err(|e| SinkError::Redis(e.to_string()))?;
        let (tx, rx) = mpsc::channel(max_batch * connections * 4);
        let rx = Arc::new(Mutex::new(rx));
        let healthy = Arc::new(AtomicBool::new(false));
        let scripts = Arc::new(scripts);
        for _ in 0..connections.max(1) {
            let writer = Writer {
                client: client.clone(),
                rx: rx.clone(),
                healthy: healthy.clone(),
                scripts: scripts.clone(),
                max_batch: max_batch.max(1),
                round_trips: metrics.sink_round_trips.with_label_values(&["redis"]),
                batch_size: metrics.sink_batch_size.with_label_values(&["redis"]),
                seconds: metrics.sink_seconds.with_label_values(&["redis"]),
            };
            tokio::spawn(writer.run());
        }
        Ok(Self { tx, healthy })
    }

    /// Runs one command through the next pipeline and returns its reply.
    pub async fn exec(&self, cmd: Cmd) -> Result<Value, SinkError> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(Op { cmd, reply }).await.map_err(|_| SinkError::Redis("writer stopped".into()))?;
        match rx.await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(SinkError::Redis(e.to_string())),
            Err(_) => Err(SinkError::Redis("writer dropped the command".into())),
        }
    }

    /// Whether the last round trip succeeded.
    pub fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }
}

struct Writer {
    client: redis::Client,
    rx: Arc<Mutex<mpsc::Receiver<Op>>>,
    healthy: Arc<AtomicBool>,
    scripts: Arc<Vec<String>>,
    max_batch: usize,
    /// The `sink="redis"` series, resolved once.
    round_trips: prometheus::IntCounter,
    batch_size: prometheus::Histogram,
    seconds: prometheus::Histogram,
}

impl Writer {
    async fn connect(&self) -> ConnectionManager {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_secs(5)))
            .set_number_of_retries(1);
        let mut delay = Duration::from_millis(100);
        loop {
            match ConnectionManager::new_with_config(self.client.clone(), config.clone()).await {
                Ok(mut conn) => {
                    if self.load_scripts(&mut conn).await.is_ok() {
                        self.healthy.store(true, Ordering::Relaxed);
                        return conn;
                    }
                }
                Err(e) => tracing::warn!(error = %e, "Redis connect failed; retrying"),
            }
            self.healthy.store(false, Ordering::Relaxed);
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(2));
        }
    }

    async fn load_scripts(&self, conn: &mut ConnectionManager) -> RedisResult<()> {
        for source in self.scripts.iter() {
            let _: String = redis::cmd("SCRIPT").arg("LOAD").arg(source).query_async(conn).await?;
        }
        Ok(())
    }

    async fn run(self) {
        let mut conn = self.connect().await;
        loop {
            let batch = {
                let mut rx = self.rx.lock().await;
                let Some(first) = rx.recv().await else { return };
                let mut batch = vec![first];
                while batch.len() < self.max_batch {
                    match rx.try_recv() {
                        Ok(op) => batch.push(op),
                        Err(_) => break,
                    }
                }
                batch
            };
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            for op in &batch {
                pipe.add_command(op.cmd.clone());
            }
            let started = Instant::now();
            let result: RedisResult<Vec<RedisResult<Value>>> = pipe.query_async(&mut conn).await;
            self.round_trips.inc();
            self.batch_size.observe(batch.len() as f64);
            self.seconds.observe(started.elapsed().as_secs_f64());
            match result {
                Ok(replies) => {
                    self.healthy.store(true, Ordering::Relaxed);
                    let mut noscript = false;
                    for (op, reply) in batch.into_iter().zip(replies) {
                        noscript |= matches!(&reply, Err(e) if e.code() == Some("NOSCRIPT"));
                        let _ = op.reply.send(reply);
                    }
                    if noscript {
                        // Redis restarted (or was flushed): reload, the callers retry.
                        let _ = self.load_scripts(&mut conn).await;
                    }
                }
                Err(e) => {
                    self.healthy.store(false, Ordering::Relaxed);
                    tracing::warn!(error = %e, commands = batch.len(), "Redis round trip failed; callers retry");
                    for op in batch {
                        let _ = op.reply.send(Err(redis::RedisError::from((
                            redis::ErrorKind::Io,
                            "pipeline failed",
                            e.to_string(),
                        ))));
                    }
                    if !e.is_connection_dropped() && !e.is_io_error() && !e.is_timeout() {
                        continue;
                    }
                    conn = self.connect().await;
                }
            }
        }
    }
}
