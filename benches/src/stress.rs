//! The stress harness, in-process mode: the processor's real handling path
//! (`DexHandler`: decode → recognise → token cache → apply → publish) with
//! in-memory outputs, so the figure is the ceiling of the path itself.
//!
//! Records are chainsim traffic, generated once and encoded as they travel
//! in Kafka, then replayed for the whole duration (the pool states are reset
//! at each replay so applies stay real writes). Workers own disjoint key
//! sets, as partitions do, and hand the handler their records in order the
//! way the runtime does: each batch received (its records copied out of the
//! stored bytes, as the consumer copies them out of librdkafka's buffers, so
//! the handler reads them warm, as it does in the processor), then `handle_batch` with up to the handler's batch size
//! (`Batching::Batch`), or one record at a time. Every record's latency (its
//! batch's) goes into a histogram (closed loop: no arrival schedule, so no
//! coordinated omission to correct).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use serde::Serialize;
use sluice_dex::outputs::InMemory;
use sluice_dex::{DexConfig, DexHandler};
use sluice_runtime::{Batching, Handler, Record};
use sluice_service::env::EnvReader;

use crate::machine;
use crate::stats::{Latency, histogram};
use crate::traffic::{Traffic, partition_of};

#[derive(Debug, Clone, Serialize)]
pub struct Figures {
    pub mode: &'static str,
    pub workers: usize,
    /// Records per handler call (the handler's batch size; 1: per record).
    pub records_per_call: usize,
    pub distinct_records: usize,
    pub records: u64,
    pub seconds: f64,
    pub records_per_sec: f64,
    pub latency: Latency,
    pub cpu_us_per_record: f64,
    pub peak_rss_mib: f64,
    pub swaps_published: u64,
}

/// `transactions` of chainsim traffic as Kafka records, split by key over `workers`.
fn records(transactions: u64, workers: usize) -> (Traffic, Vec<Vec<Record>>) {
    let traffic = Traffic::generate(transactions);
    let topic: Arc<str> = Arc::from("chain.transactions");
    let mut lanes: Vec<Vec<Record>> = vec![Vec::new(); workers];
    for offset in 0..traffic.records.len() {
        let (key, payload) = traffic.record(offset);
        let lane = partition_of(key, workers);
        lanes[lane].push(Record {
            topic: topic.clone(),
            partition: lane as i32,
            offset: offset as i64,
            key: Some(key.as_bytes().to_vec()),
            payload: Some(payload.to_vec()),
            timestamp_ms: None,
            redriven: false,
        });
    }
    (traffic, lanes)
}

/// Runs the in-process mode for `duration` with `workers` lanes.
pub fn in_process(duration: Duration, workers: usize, transactions: u64) -> Figures {
    let (traffic, lanes) = records(transactions, workers);
    let distinct = lanes.iter().map(Vec::len).sum();
    let tokens = traffic.tokens();
    drop(traffic);
    let config = DexConfig::read(&mut EnvReader::from_vars("X_", Vec::new()));
    let handler = Arc::new(DexHandler::with_outputs(config, InMemory::new(tokens), &prometheus::Registry::new()));
    // Called as the runtime calls it: a batch of what a partition has
    // ready, up to the handler's size, or one record at a time.
    let per_call = match handler.batching() {
        Batching::Batch { max_records } => max_records.max(1),
        Batching::PerRecord => 1,
    };
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime");
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let cpu_before = machine::cpu_time("self");
    let started = Instant::now();
    let progress = progress(done.clone(), stop.clone(), started, duration);
    let end = started + duration;
    let (histograms, records, published) = runtime.block_on(async {
        let tasks: Vec<_> = lanes
            .into_iter()
            .map(|lane| tokio::spawn(run_lane(handler.clone(), lane, per_call, end, done.clone())))
            .collect();
        let (mut merged, mut records, mut published) = (histogram(), 0, 0);
        for t in tasks {
            if let Ok((h, n, p)) = t.await {
                let _ = merged.add(&h);
                records += n;
                published += p;
            }
        }
        (merged, records, published)
    });
    let seconds = started.elapsed().as_secs_f64();
    let cpu = machine::cpu_time("self").saturating_sub(cpu_before);
    stop.store(true, Ordering::Relaxed);
    let _ = progress.join();
    Figures {
        mode: "in-process",
        workers,
        records_per_call: per_call,
        distinct_records: distinct,
        records,
        seconds,
        records_per_sec: records as f64 / seconds,
        latency: Latency::of(&histograms),
        cpu_us_per_record: cpu.as_secs_f64() * 1e6 / records.max(1) as f64,
        peak_rss_mib: machine::peak_rss_mib(),
        swaps_published: published,
    }
}

/// A thread printing the records done so far every second, until `stop`.
fn progress(done: Arc<AtomicU64>, stop: Arc<AtomicBool>, started: Instant, duration: Duration) -> JoinHandle<()> {
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
}

/// One worker: hands the handler its lane's records in order, `per_call` at a time, replaying
/// the lane until `end`. Returns its latency histogram, records handled and swaps published.
async fn run_lane(
    handler: Arc<DexHandler<InMemory>>,
    lane: Vec<Record>,
    per_call: usize,
    end: Instant,
    done: Arc<AtomicU64>,
) -> (Histogram<u64>, u64, u64) {
    let mut h = histogram();
    // Counted locally, shared once a chunk: a shared counter
    // bumped per record would measure line bouncing.
    let (mut records, mut published) = (0u64, 0u64);
    'outer: loop {
        for chunk in lane.chunks(per_call) {
            if Instant::now() >= end {
                break 'outer;
            }
            let t0 = Instant::now();
            // Received: the consumer copies each message's key and
            // payload out of librdkafka's buffer into a Record.
            let batch = chunk.to_vec();
            // The swaps the runtime would enqueue on the producer.
            for handled in handler.handle_batch(&batch).await.into_iter().flatten() {
                published += handled.publish.len() as u64;
            }
            // Each record of a batch waits for the whole batch.
            let _ = h.record_n((t0.elapsed().as_nanos() as u64).max(1), chunk.len() as u64);
            records += chunk.len() as u64;
            done.fetch_add(chunk.len() as u64, Ordering::Relaxed);
        }
        // Replay: fresh pool states keep the applies real.
        handler.outputs().reset_pools();
    }
    (h, records, published)
}

/// The run as a table on stdout.
#[allow(clippy::print_stdout)]
pub fn print(f: &Figures) {
    println!(
        "mode stress/in-process ({} workers, {} records per handler call, {:.1} s, {} distinct records replayed)",
        f.workers, f.records_per_call, f.seconds, f.distinct_records
    );
    println!(
        "  throughput  {:>12.0} records/s ({} records, {} swaps published)",
        f.records_per_sec, f.records, f.swaps_published
    );
    let l = &f.latency;
    println!(
        "  latency     p50 {} ns  p95 {} ns  p99 {} ns  p999 {} ns  max {} ns",
        l.p50_ns, l.p95_ns, l.p99_ns, l.p999_ns, l.max_ns
    );
    println!("  cost        {:.2} CPU-µs/record, peak RSS {:.0} MiB", f.cpu_us_per_record, f.peak_rss_mib);
}
