//! The best consume→produce loop we can write on the same client, to keep
//! "processor ÷ ceiling" a measure of the distance to the limit now that the
//! processor beats the one-thread fair ceiling.
//!
//! `threads` loops, each with a consumer of its own assigned an equal share
//! of the input partitions by hand (partition mod threads: no rebalance while
//! it runs), all producing through one shared producer, so the outputs fill
//! one set of per-partition batches as one producer's would. The producer's
//! acknowledgements are routed to the loop that owns the input partition
//! ([`Acks`] lanes), and each loop commits its own partitions' positions for
//! the group, only below acknowledged outputs. The loop's body is the fair
//! ceiling's: a batch polled, applied in Redis in full mode (a connection per
//! loop), one Swap-sized output per record, the same client settings.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::{Offset, TopicPartitionList};
use sluice_runtime::RuntimeConfig;

use super::{Acks, BATCH, Ceiling, Input, Positions, RedisApply, fill, produce_batch};

/// What the parallel loops drain and where they write.
pub struct Spec<'a> {
    pub config: &'a RuntimeConfig,
    pub output: &'a str,
    pub swaps: &'a [Vec<u8>],
    /// Full mode: Redis's URL and the key prefix.
    pub redis: Option<(String, String)>,
    pub threads: usize,
    pub partitions: i32,
    pub expected: u64,
    pub timeout: Duration,
}

/// One loop's share of the work.
struct Lane {
    records: u64,
    batches: u64,
    round_trips: u64,
    first: Option<Instant>,
    last: Option<Instant>,
}

/// Drains `expected` records with `threads` loops on one shared producer.
pub fn run_parallel(spec: &Spec<'_>) -> Result<Ceiling> {
    anyhow::ensure!(!spec.swaps.is_empty(), "no swap payloads to produce");
    let threads = spec.threads.max(1);
    let producer: Arc<BaseProducer<Acks>> =
        Arc::new(sluice_runtime::output::producer_config(&spec.config.kafka).create_with_context(Acks::new(threads))?);
    let done = AtomicU64::new(0);
    let (producer, done) = (&*producer, &done);
    let lanes: Vec<Result<Lane>> = std::thread::scope(|scope| {
        let handles: Vec<_> =
            (0..threads).map(|lane| scope.spawn(move || run_lane(spec, lane, threads, producer, done))).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(anyhow::anyhow!("a ceiling loop panicked"))))
            .collect()
    });
    let lanes: Vec<Lane> = lanes.into_iter().collect::<Result<_>>()?;
    let first = lanes.iter().filter_map(|l| l.first).min().context("no record consumed")?;
    let last = lanes.iter().filter_map(|l| l.last).max().unwrap_or(first);
    let records: u64 = lanes.iter().map(|l| l.records).sum();
    let seconds = last.duration_since(first).as_secs_f64();
    let round_trips: u64 = lanes.iter().map(|l| l.round_trips).sum();
    Ok(Ceiling {
        variant: if spec.redis.is_some() { "consume-redis-produce, parallel" } else { "consume-produce, parallel" },
        records,
        seconds,
        records_per_sec: records as f64 / seconds.max(1e-9),
        acked_seconds: first.elapsed().as_secs_f64(),
        batches: lanes.iter().map(|l| l.batches).sum(),
        redis_round_trips: round_trips,
        redis_commands: if spec.redis.is_some() { records } else { 0 },
    })
}

/// One loop: its partitions' records until all loops together reach
/// `expected`, then its outputs acknowledged and its positions committed.
fn run_lane(
    spec: &Spec<'_>,
    lane: usize,
    threads: usize,
    producer: &BaseProducer<Acks>,
    done: &AtomicU64,
) -> Result<Lane> {
    let config = spec.config;
    let consumer: BaseConsumer = config.consumer_client().create()?;
    let mut tpl = TopicPartitionList::new();
    for p in (0..spec.partitions).filter(|p| *p as usize % threads == lane) {
        tpl.add_partition_offset(&config.input_topic, p, Offset::Stored)?;
    }
    consumer.assign(&tpl)?;
    let mut redis = spec.redis.clone().map(|(url, prefix)| RedisApply::connect(&url, prefix)).transpose()?;
    let deadline = Instant::now() + spec.timeout;
    let mut positions = Positions::default();
    let mut out = Lane { records: 0, batches: 0, round_trips: 0, first: None, last: None };
    let mut batch: Vec<Input> = Vec::with_capacity(BATCH);
    let mut last_commit = Instant::now();
    while done.load(Ordering::Relaxed) < spec.expected {
        anyhow::ensure!(
            Instant::now() < deadline,
            "parallel ceiling: loop {lane} still running after {:?}",
            spec.timeout
        );
        fill(&consumer, &mut batch)?;
        if !batch.is_empty() {
            out.first.get_or_insert_with(Instant::now);
            out.batches += 1;
            if let Some(r) = redis.as_mut() {
                r.apply(&batch)?;
                out.round_trips += 1;
            }
            produce_batch(producer, spec.output, spec.swaps, &batch, out.records, &mut positions)?;
            out.records += batch.len() as u64;
            done.fetch_add(batch.len() as u64, Ordering::Relaxed);
            out.last = Some(Instant::now());
        }
        producer.poll(Duration::ZERO);
        positions.settle_lane(producer.context(), lane)?;
        if last_commit.elapsed() >= config.commit_interval {
            last_commit = Instant::now();
            positions.commit(&consumer, &config.input_topic, CommitMode::Async)?;
        }
    }
    while positions.incomplete() > 0 {
        anyhow::ensure!(Instant::now() < deadline, "parallel ceiling: loop {lane}'s outputs not acknowledged in time");
        producer.poll(Duration::from_millis(1));
        positions.settle_lane(producer.context(), lane)?;
    }
    positions.commit(&consumer, &config.input_topic, CommitMode::Sync)?;
    Ok(out)
}
