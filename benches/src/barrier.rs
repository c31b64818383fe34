//! Experiment 3: the cohort barrier against the bounded pipeline.
//!
//! Items do simulated IO: a base latency, and 1% of items 100× slower. The
//! cohort pattern takes N items, runs them concurrently and awaits all
//! before taking the next N, so every cohort waits for its slowest item.
//! The pipeline keeps N permits busy: a new item starts the moment any item
//! finishes. Little's law bounds the pipeline at N ÷ (mean item latency);
//! the bound here uses the latency each item actually took (tokio's timer
//! rounds sleeps up to the millisecond), and the counting window excludes
//! the start-up and the final drain.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
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
    fn latency(&self, rng: &mut Rng) -> Duration {
        let ms = if rng.chance_ppm(self.slow_ppm) { self.base_ms * self.slow_factor } else { self.base_ms };
        Duration::from_millis(ms)
    }

    /// Expected cohort time ÷ expected item time: the ratio a perfect
    /// pipeline beats a cohort of `n` by, with latencies as configured.
    pub fn theoretical_ratio(&self, n: u32) -> f64 {
        let p = f64::from(self.slow_ppm) / 1e6;
        let (base, slow) = (self.base_ms as f64, (self.base_ms * self.slow_factor) as f64);
        let none_slow = (1.0 - p).powi(n as i32);
        let cohort = none_slow * base + (1.0 - none_slow) * slow;
        let mean = (1.0 - p) * base + p * slow;
        cohort / mean
    }
}

/// One mode at one concurrency.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub mode: &'static str,
    pub concurrency: u32,
    pub items_in_window: u64,
    pub items_per_sec: f64,
    /// Mean latency items actually took (sleep overshoot included).
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

struct Tally {
    done_in_window: AtomicU64,
    latency_us: AtomicU64,
    measured: AtomicU64,
}

async fn item(latency: Duration, tally: Arc<Tally>, window: (Instant, Instant)) {
    let started = Instant::now();
    tokio::time::sleep(latency).await;
    let finished = Instant::now();
    tally.latency_us.fetch_add(finished.duration_since(started).as_micros() as u64, Ordering::Relaxed);
    tally.measured.fetch_add(1, Ordering::Relaxed);
    if finished >= window.0 && finished < window.1 {
        tally.done_in_window.fetch_add(1, Ordering::Relaxed);
    }
}

fn finish(mode: &'static str, concurrency: u32, tally: &Tally, window: Duration) -> Run {
    let items = tally.done_in_window.load(Ordering::Relaxed);
    let measured = tally.measured.load(Ordering::Relaxed).max(1);
    let item_ms = tally.latency_us.load(Ordering::Relaxed) as f64 / measured as f64 / 1000.0;
    let rate = items as f64 / window.as_secs_f64();
    let bound = f64::from(concurrency) / (item_ms / 1000.0);
    Run {
        mode,
        concurrency,
        items_in_window: items,
        items_per_sec: rate,
        measured_item_ms: item_ms,
        littles_bound_per_sec: bound,
        utilization: rate / bound,
    }
}

/// "Take N, run concurrently, await all, repeat."
async fn cohort(io: Io, n: u32, warmup: Duration, window: Duration) -> Run {
    let tally = Arc::new(Tally {
        done_in_window: AtomicU64::new(0),
        latency_us: AtomicU64::new(0),
        measured: AtomicU64::new(0),
    });
    let start = Instant::now();
    let bounds = (start + warmup, start + warmup + window);
    let mut rng = Rng::seeded(42);
    while Instant::now() < bounds.1 {
        let batch: Vec<_> = (0..n).map(|_| tokio::spawn(item(io.latency(&mut rng), tally.clone(), bounds))).collect();
        for task in batch {
            let _ = task.await;
        }
    }
    finish("cohort", n, &tally, window)
}

/// A permit per item: a new item starts whenever one finishes.
async fn pipeline(io: Io, n: u32, warmup: Duration, window: Duration) -> Run {
    let tally = Arc::new(Tally {
        done_in_window: AtomicU64::new(0),
        latency_us: AtomicU64::new(0),
        measured: AtomicU64::new(0),
    });
    let permits = Arc::new(Semaphore::new(n as usize));
    let start = Instant::now();
    let bounds = (start + warmup, start + warmup + window);
    let mut rng = Rng::seeded(42);
    while Instant::now() < bounds.1 {
        let Ok(permit) = permits.clone().acquire_owned().await else { break };
        let (tally, latency) = (tally.clone(), io.latency(&mut rng));
        tokio::spawn(async move {
            item(latency, tally, bounds).await;
            drop(permit);
        });
    }
    finish("pipeline", n, &tally, window)
}

/// Both modes at each concurrency. The window should be long against the
/// slowest item (base × slow factor) so that neither mode's edges dominate.
pub fn run(io: Io, concurrencies: &[u32], warmup: Duration, window: Duration) -> Vec<Pair> {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_time().build().expect("tokio");
    concurrencies
        .iter()
        .map(|&n| {
            let cohort = runtime.block_on(cohort(io, n, warmup, window));
            let pipeline = runtime.block_on(pipeline(io, n, warmup, window));
            Pair {
                concurrency: n,
                measured_ratio: pipeline.items_per_sec / cohort.items_per_sec.max(f64::MIN_POSITIVE),
                theoretical_ratio: io.theoretical_ratio(n),
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
    fn theory_matches_hand_arithmetic() {
        let io = Io { base_ms: 10, slow_factor: 100, slow_ppm: 10_000 };
        // Cohort of 1: no barrier at all.
        assert!((io.theoretical_ratio(1) - 1.0).abs() < 1e-9);
        // n = 10: P(no slow) = 0.99^10 ≈ 0.9044; cohort ≈ 0.9044·10 + 0.0956·1000 ≈ 104.6 ms;
        // mean = 0.99·10 + 0.01·1000 = 19.9 ms → ratio ≈ 5.26.
        assert!((io.theoretical_ratio(10) - 5.26).abs() < 0.02, "{}", io.theoretical_ratio(10));
    }
}
