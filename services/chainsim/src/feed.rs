//! The chain's stream produced straight into Kafka, for tests, benchmarks
//! and the demo: the same records the ingest gateway writes, routed by the
//! same rule (one record per pool touched, keyed by that pool).
//!
//! A generator thread produces blocks into a small bounded channel; the
//! async side pipelines them into Kafka. Generation is CPU work and stays
//! off the async workers; the channel bounds memory when Kafka is slower.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use prost::Message;
use serde::Serialize;
use sluice_core::clock::now_ms;
use sluice_core::route::record_keys;
use sluice_kafka::producer::Acked;
use sluice_kafka::{KafkaConfig, PipelinedProducer, ProduceError};
use tokio::sync::mpsc;

use crate::generator::{Block, Chain, TxKind};

/// How much of the chain to feed, and how.
#[derive(Debug, Clone)]
pub struct FeedOptions {
    /// Destination topic.
    pub topic: String,
    /// Stop after this many slots…
    pub max_slots: Option<u64>,
    /// …or once at least this many transactions were produced (whole slots).
    pub max_transactions: Option<u64>,
    /// …or after this long.
    pub max_duration: Option<Duration>,
    /// Produce each slot at its block time (live pace) instead of at once.
    pub paced: bool,
    /// Records in flight before the oldest delivery is awaited.
    pub max_in_flight: usize,
}

impl FeedOptions {
    /// Feeds `topic` as fast as possible until a limit is set and reached.
    pub fn new(topic: impl Into<String>) -> Self {
        Self {
            topic: topic.into(),
            max_slots: None,
            max_transactions: None,
            max_duration: None,
            paced: false,
            max_in_flight: 10_000,
        }
    }
}

/// What a feed produced; every record in it was acknowledged by Kafka.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FeedReport {
    pub first_slot: u64,
    pub last_slot: Option<u64>,
    pub transactions: u64,
    pub records: u64,
    pub swaps: u64,
    pub multi_hop: u64,
    pub malformed: u64,
    pub unknown_venue: u64,
    /// Records acknowledged per partition.
    pub records_per_partition: BTreeMap<i32, u64>,
    pub elapsed_ms: u64,
}

impl FeedReport {
    /// Transactions per second over the feed.
    pub fn transactions_per_sec(&self) -> f64 {
        self.transactions as f64 / (self.elapsed_ms.max(1) as f64 / 1000.0)
    }
}

/// Produces `chain`'s slots from its next slot on into Kafka until a limit
/// of `options` is reached, and waits for every acknowledgement.
pub async fn feed(chain: Chain, kafka: &KafkaConfig, options: &FeedOptions) -> Result<FeedReport, ProduceError> {
    let started = Instant::now();
    let deadline = options.max_duration.map(|d| started + d);
    let (tx, mut rx) = mpsc::channel::<Block>(4);
    let (max_slots, max_tx, paced) = (options.max_slots, options.max_transactions, options.paced);
    let generator = std::thread::spawn(move || generate(chain, tx, max_slots, max_tx, paced));

    let mut producer = PipelinedProducer::<()>::new(kafka, options.max_in_flight)?;
    let mut report = FeedReport::default();
    let mut first = true;
    while let Some(block) = rx.recv().await {
        if first {
            report.first_slot = block.slot;
            first = false;
        }
        for generated in &block.transactions {
            let payload = generated.tx.encode_to_vec();
            for key in record_keys(&generated.tx) {
                let acked = producer.send(&options.topic, key.as_bytes(), &payload, ()).await?;
                tally(acked, &mut report);
                report.records += 1;
            }
            report.transactions += 1;
            match generated.kind {
                TxKind::Swap { hops } => {
                    report.swaps += 1;
                    report.multi_hop += u64::from(hops > 1);
                }
                TxKind::Malformed(_) => report.malformed += 1,
                TxKind::UnknownVenue => report.unknown_venue += 1,
            }
        }
        tally(producer.poll_acked()?, &mut report);
        report.last_slot = Some(block.slot);
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
    }
    drop(rx); // stops the generator thread if it is still producing
    tally(producer.flush().await?, &mut report);
    let _ = generator.join();
    report.elapsed_ms = started.elapsed().as_millis() as u64;
    Ok(report)
}

fn tally(acked: Vec<Acked<()>>, report: &mut FeedReport) {
    for a in acked {
        *report.records_per_partition.entry(a.partition).or_default() += 1;
    }
}

fn generate(mut chain: Chain, tx: mpsc::Sender<Block>, max_slots: Option<u64>, max_tx: Option<u64>, paced: bool) {
    let (mut slots, mut transactions) = (0u64, 0u64);
    while max_slots.is_none_or(|m| slots < m) && max_tx.is_none_or(|m| transactions < m) {
        if paced {
            let wait = chain.config().block_time_ms(chain.next_slot()) - now_ms();
            if wait > 0 {
                std::thread::sleep(Duration::from_millis(wait as u64));
            }
        }
        let block = chain.next_block();
        slots += 1;
        transactions += block.transactions.len() as u64;
        if tx.blocking_send(block).is_err() {
            return;
        }
    }
}
