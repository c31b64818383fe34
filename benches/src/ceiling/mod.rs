//! The fair ceiling: what a hand-written loop on the same client does with
//! the processor's work minus the processor, so "processor ÷ ceiling"
//! compares like with like (the bare consume-only loop in `live` stays as
//! the client's own ceiling).
//!
//! One thread, one `BaseConsumer` with exactly the processor's consumer
//! settings (`RuntimeConfig::consumer_client`) and one `BaseProducer` with exactly
//! its producer settings (`output::producer_config`: idempotent, `acks=all`,
//! the same linger and compression, the same `KAFKA_PROPERTIES`). It polls
//! a batch (one blocking poll, then whatever is already fetched, up to
//! [`BATCH`]), produces one Swap-sized record per input keyed by the input's
//! key, and commits, every commit interval, only positions below which every
//! output is acknowledged (an `OffsetTracker` per partition, as the
//! processor). The full variant first applies every record of the batch in
//! Redis with the processor's own apply script, one `EVALSHA` per record,
//! all in one pipeline per batch, and produces after the reply (Redis before
//! Kafka, as the processor).
//!
//! The transactional variant measures what exactly-once outputs cost at the
//! client, before any runtime is built around them (issue 16, item 4): the
//! producer is transactional and, every interval, flushes, puts the
//! positions its acknowledged outputs allow into the transaction
//! (`send_offsets_to_transaction`, with the consumer's group metadata) and
//! commits it; the consumer commits nothing itself.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use serde::Serialize;
use sluice_core::offsets::OffsetTracker;
use sluice_dex::outputs::InMemory;
use sluice_dex::{DexConfig, DexHandler};
use sluice_runtime::{Handler, Record, RuntimeConfig};
use sluice_service::env::EnvReader;

use crate::traffic::Traffic;

mod parallel;
mod redis;

pub use parallel::{Spec as ParallelSpec, run_parallel};
pub use redis::RedisApply;

/// Most records one batch takes from the consumer.
const BATCH: usize = 1024;

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Ceiling {
    pub variant: &'static str,
    pub records: u64,
    /// First record consumed to the last one's output enqueued.
    pub seconds: f64,
    pub records_per_sec: f64,
    /// First record consumed to the last output acknowledged and committed.
    pub acked_seconds: f64,
    pub batches: u64,
    pub redis_round_trips: u64,
    pub redis_commands: u64,
}

struct Input {
    partition: i32,
    offset: i64,
    key: Vec<u8>,
}

/// Acknowledged outputs, as (input partition << 48 | input offset), in one
/// lane per loop (the loop that owns the input partition: partition mod lanes).
struct Acks {
    acked: Vec<Mutex<Vec<usize>>>,
    failed: Mutex<Vec<String>>,
}

impl Acks {
    fn new(lanes: usize) -> Self {
        Self { acked: (0..lanes.max(1)).map(|_| Mutex::default()).collect(), failed: Mutex::default() }
    }

    fn lane(&self, partition: i32) -> usize {
        partition as usize % self.acked.len()
    }
}

impl Default for Acks {
    fn default() -> Self {
        Self::new(1)
    }
}

impl ClientContext for Acks {}

impl ProducerContext for Acks {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, opaque: usize) {
        match result {
            Ok(_) => {
                let lane = self.lane((opaque >> 48) as i32);
                self.acked[lane].lock().unwrap_or_else(|e| e.into_inner()).push(opaque);
            }
            Err((e, _)) => self.failed.lock().unwrap_or_else(|e| e.into_inner()).push(e.to_string()),
        }
    }
}

fn opaque(partition: i32, offset: i64) -> usize {
    ((partition as usize) << 48) | offset as usize
}

/// The loop's offset bookkeeping: trackers per input partition and the
/// positions they allow.
#[derive(Default)]
struct Positions {
    trackers: HashMap<i32, OffsetTracker>,
    commit: HashMap<i32, i64>,
}

impl Positions {
    fn received(&mut self, partition: i32, offset: i64) -> Result<()> {
        self.trackers.entry(partition).or_default().received(offset).map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// Completes every acknowledged output of the first lane; fails on a failed delivery.
    fn settle(&mut self, acks: &Acks) -> Result<()> {
        self.settle_lane(acks, 0)
    }

    /// Completes every acknowledged output of `lane`; fails on a failed delivery.
    fn settle_lane(&mut self, acks: &Acks, lane: usize) -> Result<()> {
        if let Some(e) = acks.failed.lock().unwrap_or_else(|e| e.into_inner()).first() {
            bail!("a delivery failed in the ceiling loop: {e}");
        }
        let acked = std::mem::take(&mut *acks.acked[lane].lock().unwrap_or_else(|e| e.into_inner()));
        for o in acked {
            let (partition, offset) = ((o >> 48) as i32, (o & ((1 << 48) - 1)) as i64);
            let tracker = self.trackers.get_mut(&partition).context("an ack for an untracked partition")?;
            tracker.complete(offset).map_err(|e| anyhow::anyhow!("{e}"))?;
            if let Some(position) = tracker.take_commit() {
                self.commit.insert(partition, position);
            }
        }
        Ok(())
    }

    fn commit(&self, consumer: &BaseConsumer, topic: &str, mode: CommitMode) -> Result<()> {
        let mut tpl = TopicPartitionList::new();
        for (&p, &o) in &self.commit {
            tpl.add_partition_offset(topic, p, Offset::Offset(o))?;
        }
        if tpl.count() > 0 {
            consumer.commit(&tpl, mode)?;
        }
        Ok(())
    }

    fn incomplete(&self) -> usize {
        self.trackers.values().map(OffsetTracker::incomplete).sum()
    }
}

/// The transactional variant's end of a transaction: everything enqueued
/// acknowledged, the positions that allows sent with it, committed, and the
/// next begun.
fn commit_transaction(
    producer: &BaseProducer<Acks>,
    consumer: &BaseConsumer,
    positions: &mut Positions,
    topic: &str,
) -> Result<()> {
    const CALL: Duration = Duration::from_secs(30);
    // Not `producer.flush`: rdkafka's waits in polls of 100 ms, and every
    // flush here took 100 ms where the deliveries took 7-18.
    let deadline = Instant::now() + CALL;
    while producer.in_flight_count() > 0 {
        anyhow::ensure!(Instant::now() < deadline, "deliveries not acknowledged within {CALL:?}");
        producer.poll(Duration::from_millis(1));
    }
    positions.settle(producer.context())?;
    let mut tpl = TopicPartitionList::new();
    for (&p, &o) in &positions.commit {
        tpl.add_partition_offset(topic, p, Offset::Offset(o))?;
    }
    let group = consumer.group_metadata().context("the consumer's group metadata")?;
    producer.send_offsets_to_transaction(&tpl, &group, CALL)?;
    producer.commit_transaction(CALL)?;
    producer.begin_transaction()?;
    Ok(())
}

/// Drains `expected` records of the processor's input topic (its group in
/// `config`), producing one of `swaps` (cycled) per record to `output`;
/// with `transactions`, in transactions committed at that interval.
pub fn run(
    config: &RuntimeConfig,
    output: &str,
    swaps: &[Vec<u8>],
    mut redis: Option<RedisApply>,
    transactions: Option<Duration>,
    expected: u64,
    timeout: Duration,
) -> Result<Ceiling> {
    anyhow::ensure!(!swaps.is_empty(), "no swap payloads to produce");
    let (consumer, producer) = clients(config, transactions.is_some())?;
    let deadline = Instant::now() + timeout;
    let mut positions = Positions::default();
    let (mut records, mut batches, mut round_trips) = (0u64, 0u64, 0u64);
    let mut batch: Vec<Input> = Vec::with_capacity(BATCH);
    let mut first: Option<Instant> = None;
    let mut last = Instant::now();
    let mut last_commit = Instant::now();
    while records < expected {
        if Instant::now() > deadline {
            bail!("ceiling: {records} of {expected} records after {timeout:?}");
        }
        fill(&consumer, &mut batch)?;
        if batch.is_empty() {
            producer.poll(Duration::ZERO);
            positions.settle(producer.context())?;
            continue;
        }
        first.get_or_insert_with(Instant::now);
        batches += 1;
        if let Some(r) = redis.as_mut() {
            r.apply(&batch)?;
            round_trips += 1;
        }
        produce_batch(&producer, output, swaps, &batch, records, &mut positions)?;
        records += batch.len() as u64;
        last = Instant::now();
        producer.poll(Duration::ZERO);
        positions.settle(producer.context())?;
        match transactions {
            Some(every) if last_commit.elapsed() >= every => {
                last_commit = Instant::now();
                commit_transaction(&producer, &consumer, &mut positions, &config.input_topic)?;
            }
            None if last_commit.elapsed() >= config.commit_interval => {
                last_commit = Instant::now();
                positions.commit(&consumer, &config.input_topic, CommitMode::Async)?;
            }
            _ => {}
        }
    }
    finish(&producer, &consumer, &mut positions, &config.input_topic, transactions.is_some())?;
    let start = first.unwrap_or(last);
    let seconds = last.duration_since(start).as_secs_f64();
    Ok(Ceiling {
        variant: match (redis.is_some(), transactions.is_some()) {
            (true, false) => "consume-redis-produce",
            (false, false) => "consume-produce",
            (true, true) => "consume-redis-produce, transactional",
            (false, true) => "consume-produce, transactional",
        },
        records,
        seconds,
        records_per_sec: records as f64 / seconds.max(1e-9),
        acked_seconds: start.elapsed().as_secs_f64(),
        batches,
        redis_round_trips: round_trips,
        redis_commands: if redis.is_some() { records } else { 0 },
    })
}

/// The consumer of the processor's input (its group) and the producer of the outputs;
/// `transactional`: the producer's transactions initialised and the first begun.
fn clients(config: &RuntimeConfig, transactional: bool) -> Result<(BaseConsumer, BaseProducer<Acks>)> {
    let consumer: BaseConsumer = config.consumer_client().create()?;
    consumer.subscribe(&[&config.input_topic])?;
    let mut producer_config = sluice_runtime::output::producer_config(&config.kafka);
    if transactional {
        producer_config
            .set("transactional.id", format!("{}.ceiling", config.group_id))
            .set("transaction.timeout.ms", "60000");
    }
    let producer: BaseProducer<Acks> = producer_config.create_with_context(Acks::default())?;
    if transactional {
        producer.init_transactions(Duration::from_secs(30))?;
        producer.begin_transaction()?;
    }
    Ok((consumer, producer))
}

/// Refills `batch` with up to `BATCH` records: waits up to 100 ms for the first, then takes
/// only what is already fetched.
fn fill(consumer: &BaseConsumer, batch: &mut Vec<Input>) -> Result<()> {
    batch.clear();
    let mut wait = Duration::from_millis(100);
    while batch.len() < BATCH {
        let Some(message) = consumer.poll(wait) else { break };
        let message = message?;
        wait = Duration::ZERO;
        let key = message.key().unwrap_or_default().to_vec();
        batch.push(Input { partition: message.partition(), offset: message.offset(), key });
    }
    Ok(())
}

/// After the last record: the last transaction committed (or the outputs flushed and the
/// offsets committed synchronously); fails if any output went unacknowledged.
fn finish(
    producer: &BaseProducer<Acks>,
    consumer: &BaseConsumer,
    positions: &mut Positions,
    topic: &str,
    transactional: bool,
) -> Result<()> {
    if transactional {
        commit_transaction(producer, consumer, positions, topic)?;
    }
    producer.flush(Duration::from_secs(30))?;
    positions.settle(producer.context())?;
    if positions.incomplete() > 0 {
        bail!("{} records without an acknowledged output after the flush", positions.incomplete());
    }
    if !transactional {
        positions.commit(consumer, topic, CommitMode::Sync)?;
    }
    Ok(())
}

/// Tracks and produces one output per record of `batch` (the outputs cycle
/// through `swaps` from the `first`-th), as every ceiling loop does.
fn produce_batch(
    producer: &BaseProducer<Acks>,
    output: &str,
    swaps: &[Vec<u8>],
    batch: &[Input],
    first: u64,
    positions: &mut Positions,
) -> Result<()> {
    for (k, input) in batch.iter().enumerate() {
        positions.received(input.partition, input.offset)?;
        let payload = &swaps[(first as usize + k) % swaps.len()];
        send(producer, output, &input.key, payload, opaque(input.partition, input.offset))?;
    }
    Ok(())
}

/// Enqueues one output, serving acknowledgements while librdkafka's queue is full.
fn send(producer: &BaseProducer<Acks>, topic: &str, key: &[u8], payload: &[u8], opaque: usize) -> Result<()> {
    loop {
        match producer.send(BaseRecord::with_opaque_to(topic, opaque).key(key).payload(payload)) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                producer.poll(Duration::from_millis(5));
            }
            Err((e, _)) => return Err(e.into()),
        }
    }
}

/// The Swap records the processor publishes for the first `records` records
/// of `traffic` (the DEX handler on in-memory outputs), for the ceiling to
/// produce: the same sizes and content, so the same compression.
pub async fn swap_payloads(traffic: &Traffic, records: usize) -> Result<Vec<Vec<u8>>> {
    let config = DexConfig::read(&mut EnvReader::from_vars("X_", Vec::new()));
    let handler = DexHandler::with_outputs(config, InMemory::new(traffic.tokens()), &prometheus::Registry::new());
    let topic: Arc<str> = Arc::from("swaps");
    let mut payloads = Vec::new();
    for j in 0..records.min(traffic.records.len()) {
        let (key, payload) = traffic.record(j);
        let record = Record {
            topic: topic.clone(),
            partition: 0,
            offset: j as i64,
            key: Some(key.as_bytes().to_vec()),
            payload: Some(payload.to_vec()),
            timestamp_ms: None,
            redriven: false,
        };
        if let Ok(handled) = handler.handle(&record).await {
            payloads.extend(handled.publish.into_iter().map(|p| p.payload));
        }
    }
    Ok(payloads)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn ack(acks: &Acks, partition: i32, offset: i64) {
        acks.acked[0].lock().unwrap().push(opaque(partition, offset));
    }

    #[test]
    fn commits_only_below_unacknowledged_outputs() {
        let (mut positions, acks) = (Positions::default(), Acks::default());
        for offset in 0..3 {
            positions.received(7, offset).unwrap();
        }
        positions.received(2, 1 << 40).unwrap();
        ack(&acks, 7, 1);
        ack(&acks, 2, 1 << 40);
        positions.settle(&acks).unwrap();
        assert_eq!(positions.commit.get(&7).copied().unwrap_or(0), 0, "offset 0 is not acknowledged yet");
        assert_eq!(positions.commit.get(&2), Some(&((1 << 40) + 1)));
        ack(&acks, 7, 0);
        positions.settle(&acks).unwrap();
        assert_eq!(positions.commit.get(&7), Some(&2));
        assert_eq!(positions.incomplete(), 1);
        acks.failed.lock().unwrap().push("broker down".into());
        assert!(positions.settle(&acks).is_err(), "a failed delivery stops the loop");
    }
}
