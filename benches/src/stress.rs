//! The stress harness, in-process mode: the processor's real handling path
//! (`DexHandler`: decode → recognise → token cache → apply → publish) with
//! in-memory outputs, so the figure is the ceiling of the path itself.
//!
//! Records are chainsim traffic, generated once and encoded as they travel
//! in Kafka, then replayed for the whole duration (the pool states are reset
//! at each replay so applies stay real writes). Workers own disjoint key
//! sets, as partitions do, and handle their records one at a time in order;
//! every record's latency goes into a histogram (closed loop: no arrival
//! schedule, so no coordinated omission to correct).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use prost::Message;
use serde::Serialize;
use sluice_chainsim::{Chain, ChainConfig};
use sluice_core::route::record_keys;
use sluice_dex::outputs::InMemory;
use sluice_dex::{DexConfig, DexHandler};
use sluice_runtime::{Handler, Record};
use sluice_service::env::EnvReader;

use crate::stats::{Latency, histogram};

#[derive(Debug, Clone, Serialize)]
pub struct Figures {
    pub mode: &'static str,
    pub workers: usize,
    pub distinct_records: usize,
    pub records: u64,
    pub seconds: f64,
    pub records_per_sec: f64,
    pub latency: Latency,
    pub cpu_us_per_record: f64,
    pub peak_rss_mib: f64,
    pub swaps_published: u64,
}

/// CPU time of this process (user + system), from /proc.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    // After the command name: state is field 3, utime 14, stime 15 (1-based).
    let ticks: u64 = [11, 12].iter().filter_map(|&i| fields.get(i)?.parse::<u64>().ok()).sum();
    Duration::from_millis(ticks * 10) // USER_HZ is 100 on Linux
}

/// Peak resident memory of this process, MiB.
fn peak_rss_mib() -> f64 {
    crate::machine::proc_kib("/proc/self/status", "VmHWM:").unwrap_or(0) as f64 / 1024.0
}

/// `transactions` of chainsim traffic as Kafka records, split by key over `workers`.
fn records(transactions: u64, workers: usize) -> (Chain, Vec<Vec<Record>>) {
    let mut chain = Chain::new(ChainConfig { seed: 7, tx_per_sec: 10_000, ..ChainConfig::default() }).expect("valid");
    let genesis = chain.clone();
    let topic: Arc<str> = Arc::from("chain.transactions");
    let mut lanes: Vec<Vec<Record>> = vec![Vec::new(); workers];
    let (mut produced, mut offset) = (0u64, 0i64);
    while produced < transactions {
        for g in chain.next_block().transactions {
            produced += 1;
            let payload = g.tx.encode_to_vec();
            for key in record_keys(&g.tx) {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                key.hash(&mut h);
                let lane = (h.finish() % workers as u64) as usize;
                lanes[lane].push(Record {
                    topic: topic.clone(),
                    partition: lane as i32,
                    offset,
                    key: Some(key.as_bytes().to_vec()),
                    payload: Some(payload.clone()),
                    timestamp_ms: Some(g.tx.block_time_ms),
                });
                offset += 1;
            }
        }
    }
    (genesis, lanes)
}

/// Runs the in-process mode for `duration` with `workers` lanes.
pub fn in_process(duration: Duration, workers: usize, transactions: u64) -> Figures {
    let (genesis, lanes) = records(transactions, workers);
    let distinct = lanes.iter().map(Vec::len).sum();
    let tokens: HashMap<String, String> =
        genesis.tokens().iter().map(|t| (t.mint.clone(), sluice_dex::registry::encode(t))).collect();
    let config = DexConfig::read(&mut EnvReader::from_vars("X_", Vec::new()));
    let handler = Arc::new(
        DexHandler::with_outputs(config, InMemory::new(tokens), &prometheus::Registry::new()).expect("handler"),
    );
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime");
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let cpu_before = cpu_time();
    let started = Instant::now();
    let progress = {
        let (done, stop) = (done.clone(), stop.clone());
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(Duration::from_secs(1));
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let elapsed = started.elapsed().as_secs_f64();
                let n = done.load(Ordering::Relaxed);
                eprint!(
                    "\r  [{:>5.1}/{:.0} s] {:>12} records  {:>10.0} rec/s   ",
                    elapsed,
                    duration.as_secs_f64(),
                    n,
                    n as f64 / elapsed
                );
            }
            eprintln!();
        })
    };
    let histograms = runtime.block_on(async {
        let tasks: Vec<_> = lanes
            .into_iter()
            .map(|lane| {
                let (handler, done) = (handler.clone(), done.clone());
                tokio::spawn(async move {
                    let mut h = histogram();
                    let end = started + duration;
                    'outer: loop {
                        for (i, record) in lane.iter().enumerate() {
                            if i % 256 == 0 && Instant::now() >= end {
                                break 'outer;
                            }
                            let t0 = Instant::now();
                            let _ = handler.handle(record).await;
                            let _ = h.record((t0.elapsed().as_nanos() as u64).max(1));
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                        // Replay: fresh pool states keep the applies real.
                        handler.outputs().reset_pools();
                    }
                    h
                })
            })
            .collect();
        let mut merged = histogram();
        for t in tasks {
            if let Ok(h) = t.await {
                let _ = merged.add(&h);
            }
        }
        merged
    });
    let seconds = started.elapsed().as_secs_f64();
    let cpu = cpu_time().saturating_sub(cpu_before);
    stop.store(true, Ordering::Relaxed);
    let _ = progress.join();
    let records = done.load(Ordering::Relaxed);
    Figures {
        mode: "in-process",
        workers,
        distinct_records: distinct,
        records,
        seconds,
        records_per_sec: records as f64 / seconds,
        latency: Latency::of(&histograms),
        cpu_us_per_record: cpu.as_secs_f64() * 1e6 / records.max(1) as f64,
        peak_rss_mib: peak_rss_mib(),
        swaps_published: handler.outputs().published().0,
    }
}
