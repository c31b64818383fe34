//! Experiment 3: the cohort barrier against the bounded pipeline.
//!
//! Items do simulated IO: a base latency, and 1% of items 100× slower. The
//! cohort pattern takes N items, runs them concurrently and awaits all
//! before taking the next N, so every cohort waits for its slowest item.
//! The pipeline keeps N permits busy: a new item starts the moment any item
//! finishes. Little's law bounds the pipeline at N ÷ (mean item latency).
//!
//! Making the measurement honest:
//! - both modes run the same latency sequence, stratified (exactly one slow
//!   item in every block of 1/share items, at a random place), so the
//!   comparison is not at the mercy of how many slow items a short run drew;
//! - the bound uses the latency items actually took (tokio's timer rounds a
//!   sleep up to the next millisecond), averaged over every item started in
//!   the window, each awaited to the end (no censoring of slow items);
//! - throughput counts completions inside a window that starts after a
//!   warm-up and is long against the slowest item, so the start and the
//!   final drain do not dominate;
//! - the theoretical ratio is computed from the very sequence run.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use sluice_core::rng::Rng;
use tokio::sync::Semaphore;

/// The simulated IO.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Io {
    pub base_ms: u64,
    pub slow_factor: u64,
    /// Slow items per million.
    pub slow_ppm: u32,
}

impl Io {
    /// `len` latencies (ms): one slow item per block of 1e6/slow_ppm.
    fn sequence(&self, len: usize) -> Vec<u64> {
        let block = (1_000_000 / self.slow_ppm.max(1)).max(1) as usize;
        let mut rng = Rng::seeded(42);
        let mut out = Vec::with_capacity(len);
        while out.len() < len {
            let slow_at = rng.below(block as u64) as usize;
            out.extend((0..block).map(|i| if i == slow_at { self.base_ms * self.slow_factor } else { self.base_ms }));
        }
        out.truncate(len);
        out
    }

    /// Pipeline ÷ cohort throughput for `n` on `sequence`, if every item
    /// took exactly its nominal latency.
    fn theoretical_ratio(sequence: &[u64], n: usize) -> f64 {
        let cohort_ms: u64 = sequence.chunks(n).map(|c| c.iter().copied().max().unwrap_or(0)).sum();
        let mean_ms = sequence.iter().sum::<u64>() as f64 / sequence.len() as f64;
        let cohort_rate = sequence.len() as f64 / cohort_ms as f64;
        let pipeline_rate = n as f64 / mean_ms;
        pipeline_rate / cohort_rate
    }
}

/// One mode at one concurrency.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub mode: &'static str,
    pub concurrency: u32,
    pub items_in_window: u64,
    pub items_per_sec: f64,
    /// Mean latency items started in the window actually took.
    pub measured_item_ms: f64,
    /// concurrency ÷ measured mean latency.
    pub littles_bound_per_sec: f64,
    /// items_per_sec ÷ the bound.
    pub utilization: f64,
}

/// Cohort and pipeline at one concurrency, and their ratio.
#[derive(Debug, Clone, Serialize)]
pub struct Pair {
    pub concurrency: u32,
    pub cohort: Run,
    pub pipeline: Run,
    pub measured_ratio: f64,
    pub theoretical_ratio: f64,
}

type Spans = Arc<Mutex<Vec<(Instant, Instant)>>>;

async fn item(latency_ms: u64, spans: Spans) {
    let started = Instant::now();
    tokio::time::sleep(Duration::from_millis(latency_ms)).await;
    let finished = Instant::now();
    spans.lock().unwrap_or_else(|e| e.into_inner()).push((started, finished));
}

fn summarise(mode: &'static str, n: u32, spans: &Spans, window: (Instant, Instant)) -> Run {
    let spans = spans.lock().unwrap_or_else(|e| e.into_inner());
    let in_window = spans.iter().filter(|(_, end)| *end >= window.0 && *end < window.1).count() as u64;
    let started: Vec<f64> = spans
        .iter()
        .filter(|(start, _)| *start >= window.0 && *start < window.1)
        .map(|(s, e)| e.duration_since(*s).as_secs_f64() * 1000.0)
        .collect();
    let item_ms = started.iter().sum::<f64>() / started.len().max(1) as f64;
    let seconds = window.1.duration_since(window.0).as_secs_f64();
    let rate = in_window as f64 / seconds;
    let bound = f64::from(n) / (item_ms / 1000.0);
    Run {
        mode,
        concurrency: n,
        items_in_window: in_window,
        items_per_sec: rate,
        measured_item_ms: item_ms,
        littles_bound_per_sec: bound,
        utilization: rate / bound,
    }
}

/// "Take N, run concurrently, await all, repeat."
async fn cohort(sequence: Arc<Vec<u64>>, n: u32, warmup: Duration, window: Duration) -> Run {
    let spans: Spans = Arc::default();
    let start = Instant::now();
    let bounds = (start + warmup, start + warmup + window);
    let mut next = 0;
    while Instant::now() < bounds.1 && next + n as usize <= sequence.len() {
        let batch: Vec<_> = (0..n as usize).map(|i| tokio::spawn(item(sequence[next + i], spans.clone()))).collect();
        next += n as usize;
        for task in batch {
            let _ = task.await;
        }
    }
    summarise("cohort", n, &spans, bounds)
}

/// A permit per item: a new item starts whenever one finishes.
async fn pipeline(sequence: Arc<Vec<u64>>, n: u32, warmup: Duration, window: Duration) -> Run {
    let spans: Spans = Arc::default();
    let permits = Arc::new(Semaphore::new(n as usize));
    let start = Instant::now();
    let bounds = (start + warmup, start + warmup + window);
    let mut tasks = Vec::new();
    for &latency in sequence.iter() {
        let Ok(permit) = permits.clone().acquire_owned().await else { break };
        if Instant::now() >= bounds.1 {
            break;
        }
        let spans = spans.clone();
        tasks.push(tokio::spawn(async move {
            item(latency, spans).await;
            drop(permit);
        }));
    }
    // Every item started in the window finishes, so its latency counts.
    for task in tasks {
        let _ = task.await;
    }
    summarise("pipeline", n, &spans, bounds)
}

/// Both modes at each concurrency.
pub fn run(io: Io, concurrencies: &[u32], warmup: Duration, window: Duration) -> Vec<Pair> {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_time().build().expect("tokio");
    concurrencies
        .iter()
        .map(|&n| {
            // Enough items for the pipeline to run the whole window at full speed.
            let needed =
                ((warmup + window).as_secs_f64() * 1000.0 / io.base_ms.max(1) as f64 * f64::from(n)) as usize + 1_000;
            let sequence = Arc::new(io.sequence(needed));
            let cohort = runtime.block_on(cohort(sequence.clone(), n, warmup, window));
            let pipeline = runtime.block_on(pipeline(sequence.clone(), n, warmup, window));
            // Theory over the part of the sequence the cohort run used.
            let used = ((cohort.items_in_window as usize).max(n as usize * 10)).min(sequence.len());
            Pair {
                concurrency: n,
                measured_ratio: pipeline.items_per_sec / cohort.items_per_sec.max(f64::MIN_POSITIVE),
                theoretical_ratio: Io::theoretical_ratio(&sequence[..used - used % n as usize], n as usize),
                cohort,
                pipeline,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stratified_sequence_and_theory() {
        let io = Io { base_ms: 10, slow_factor: 100, slow_ppm: 10_000 };
        let seq = io.sequence(1_000);
        assert_eq!(seq.len(), 1_000);
        assert_eq!(seq.iter().filter(|&&ms| ms == 1_000).count(), 10, "exactly 1% slow");
        for block in seq.chunks(100) {
            assert_eq!(block.iter().filter(|&&ms| ms == 1_000).count(), 1);
        }
        // Cohorts of 1: no barrier.
        assert!((Io::theoretical_ratio(&seq, 1) - 1.0).abs() < 1e-9);
        // Cohorts of 10 over exact 1%: 9 fast cohorts (10 ms) and 1 slow one
        // (1000 ms) per 100 items → 100 items / 1090 ms vs 10 / 19.9 ms ≈ 5.48.
        let r = Io::theoretical_ratio(&seq, 10);
        assert!((r - 5.48).abs() < 0.3, "{r}");
    }
}
