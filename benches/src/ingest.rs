//! The ingest's throughput and cost with and without Kafka transactions
//! (issue 16, item 2). An in-process chainsim node serves a backlog (its
//! slots already due) and the real ingest gateway (`sluice_ingest::gateway`,
//! one instance, its production settings) streams it into a fresh topic
//! until its cursor reaches the backlog's last slot. Rounds alternate the
//! modes on the same broker, so "transactional ÷ idempotent" compares like
//! with like; the chain's generation (the node's and the stream's replay)
//! runs in this process and is in its CPU figure, the same in both modes.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;
use sluice_chainsim::server::{ChainNode, ServerOptions};
use sluice_chainsim::{Chain, ChainConfig};
use sluice_core::clock::now_ms;
use sluice_ingest::config::{IngestConfig, LostCursor, Start};
use sluice_ingest::gateway::{Gateway, chain_client};
use sluice_ingest::metrics::Metrics;
use sluice_ingest::store::Store;
use sluice_kafka::PipelinedProducer;
use tokio::sync::watch;

use crate::cost::{Cost, Sample};
use crate::live::Stack;

#[derive(Debug, Clone, Serialize)]
pub struct Options {
    pub transactions: u64,
    /// Rounds per mode, alternating.
    pub rounds: usize,
    /// The transactional mode's commit interval.
    pub interval_ms: u64,
    pub partitions: i32,
}

#[derive(Debug, Clone, Serialize)]
pub struct Round {
    pub mode: &'static str,
    pub records: u64,
    pub seconds: f64,
    pub records_per_sec: f64,
    pub cost: Cost,
}

#[derive(Debug, Clone, Serialize)]
pub struct Figures {
    pub rounds: Vec<Round>,
    /// Medians over each mode's rounds.
    pub idempotent_records_per_sec: f64,
    pub transactional_records_per_sec: f64,
    /// Transactional ÷ idempotent throughput (1 = free).
    pub throughput_ratio: f64,
    /// CPU-µs per record (this process + the broker), by mode.
    pub idempotent_cpu_us_per_record: f64,
    pub transactional_cpu_us_per_record: f64,
}

const SLOT_MS: u64 = 400;
const TX_PER_SEC: u32 = 20_000;

pub async fn run(options: &Options) -> Result<Figures> {
    let stack = Stack::from_env()?;
    let per_slot = u64::from(TX_PER_SEC) * SLOT_MS / 1000;
    let slots = options.transactions.div_ceil(per_slot).max(1);
    warm_up(&stack).await?;
    let mut rounds = Vec::new();
    for i in 0..options.rounds * 2 {
        let transactional = i % 2 == 1;
        rounds.push(round(&stack, options, slots, transactional).await?);
    }
    for left in stack.delete_run_topics().await {
        eprintln!("not deleted: {left}");
    }
    let of = |mode: &str, f: fn(&Round) -> f64| {
        let mut v: Vec<f64> = rounds.iter().filter(|r| r.mode == mode).map(f).collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    let rate = |r: &Round| r.records_per_sec;
    let cpu = |r: &Round| r.cost.cpu_us_per_record.process + r.cost.cpu_us_per_record.broker;
    let (idem, txn) = (of("idempotent", rate), of("transactional", rate));
    Ok(Figures {
        idempotent_records_per_sec: idem,
        transactional_records_per_sec: txn,
        throughput_ratio: txn / idem.max(1e-9),
        idempotent_cpu_us_per_record: of("idempotent", cpu),
        transactional_cpu_us_per_record: of("transactional", cpu),
        rounds,
    })
}

/// A first transaction, outside the measure: on a fresh broker it creates
/// the transaction state topic and loads its coordinator (seconds of broker
/// CPU that would otherwise land in the first transactional round).
async fn warm_up(stack: &Stack) -> Result<()> {
    let topic = stack.name("ingest-warmup");
    stack.create_topics(&[(&topic, 1)]).await?;
    let id = format!("{topic}.txn");
    let mut producer = PipelinedProducer::<()>::transactional(&stack.kafka, 16, &id, Duration::from_secs(60)).await?;
    producer.send(&topic, b"warm-up", b"", ()).await?;
    producer.commit().await?;
    Ok(())
}

/// One mode over a fresh chain node, topic and cursor.
async fn round(stack: &Stack, options: &Options, slots: u64, transactional: bool) -> Result<Round> {
    let mode = if transactional { "transactional" } else { "idempotent" };
    let topic = stack.name(&format!("ingest-{mode}-{}", now_ms()));
    stack.create_topics(&[(&topic, options.partitions)]).await?;
    let chain = ChainConfig {
        seed: 5,
        genesis_ms: now_ms() - (slots * SLOT_MS) as i64 - 1,
        slot_ms: SLOT_MS,
        tx_per_sec: TX_PER_SEC,
        ..ChainConfig::default()
    };
    let (listener, addr) = ChainNode::bind(([127, 0, 0, 1], 0).into()).await?;
    let node = ChainNode::start(Chain::new(chain)?, &ServerOptions::default());
    let (stop_node, node_stopped) = watch::channel(false);
    let serving = tokio::spawn(node.clone().serve(listener, async move {
        let mut rx = node_stopped;
        let _ = rx.wait_for(|s| *s).await;
    }));
    node.wait_for_slot(slots - 1).await;

    let config = ingest_config(stack, &topic, &format!("http://{addr}"), transactional, options.interval_ms);
    let conn = redis::aio::ConnectionManager::new(redis::Client::open(stack.redis_url.as_str())?).await?;
    let metrics = Metrics::new();
    let chain_client = chain_client(&config.chain_url)?;
    let store = Store::new(conn, &config.redis_prefix);
    store.open_generation().await?;
    let gateway = Gateway::new(config.clone(), store, metrics.clone(), chain_client);
    let (stop, stopped) = watch::channel(false);
    let before = Sample::start(stack, None, None)?;
    let started = Instant::now();
    let running = tokio::spawn(gateway.run(stopped));
    let last = (slots - 1) as i64;
    while metrics.cursor_slot.get() < last {
        anyhow::ensure!(started.elapsed() < Duration::from_secs(600), "{mode}: the cursor did not reach slot {last}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    let records = metrics.produced_records.get();
    let after = Sample::end(stack, None, None)?;
    let _ = stop.send(true);
    running.await.context("the gateway task")?;
    let _ = stop_node.send(true);
    let _ = serving.await;
    Ok(Round { mode, records, seconds, records_per_sec: records as f64 / seconds, cost: before.cost(&after, records) })
}

fn ingest_config(stack: &Stack, topic: &str, chain_url: &str, transactional: bool, interval_ms: u64) -> IngestConfig {
    IngestConfig {
        chain_url: chain_url.to_string(),
        kafka: stack.kafka.clone(),
        topic: topic.to_string(),
        redis: sluice_coord::endpoint::RedisEndpoint::url(stack.redis_url.as_str()),
        redis_prefix: format!("{topic}:"),
        instance_id: "bench".into(),
        lease_ttl: Duration::from_secs(5),
        max_in_flight: 10_000,
        cursor_interval: Duration::from_millis(200),
        transactional_id: transactional.then(|| format!("{topic}.ingest")),
        transaction_interval: Duration::from_millis(interval_ms),
        transaction_timeout: Duration::from_secs(10),
        start: Start::Genesis,
        lost_cursor: LostCursor::Stop,
        reconnect_min: Duration::from_millis(100),
        reconnect_max: Duration::from_secs(5),
        shutdown_deadline: Duration::from_secs(20),
        admin_listen: ([127, 0, 0, 1], 0).into(),
    }
}

/// The rounds as a table on stdout.
#[allow(clippy::print_stdout)]
pub fn print(options: &Options, f: &Figures) {
    println!(
        "mode ingest ({} transactions a round, {} partitions, transactions committed every {} ms)",
        options.transactions, options.partitions, options.interval_ms
    );
    for r in &f.rounds {
        let c = &r.cost.cpu_us_per_record;
        println!(
            "  {:<13} {:>8} records in {:>6.2} s = {:>8.0} records/s  CPU-µs/record: process {:.2}, broker {:.2}, redis {:.3}",
            r.mode, r.records, r.seconds, r.records_per_sec, c.process, c.broker, c.redis
        );
    }
    println!(
        "  median: idempotent {:.0}/s ({:.2} CPU-µs/record), transactional {:.0}/s ({:.2}): ratio {:.3}",
        f.idempotent_records_per_sec,
        f.idempotent_cpu_us_per_record,
        f.transactional_records_per_sec,
        f.transactional_cpu_us_per_record,
        f.throughput_ratio
    );
}
