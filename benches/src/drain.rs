//! Experiment 5: lag drain. The same backlog drained by 1, 2 and 4
//! processor instances (each its own consumer in the group, its own sinks),
//! every record paying a simulated IO wait before the production handler
//! (Redis and Kafka) runs, so instances are bound by IO concurrency, not by
//! the 2 cores, and horizontal scaling shows.
//!
//! Each round uses a fresh topic and group. The instances join first; once
//! the group has spread the partitions over all of them, the backlog is
//! produced (in well under a second) and the drain time runs from the first
//! record produced to the last one finished. Keys are dealt evenly over the
//! partitions and the partition count divides by every instance count, so
//! the figure measures the processor, not how a hash happened to spread 64
//! pools (that skew is real, and reported by the stress harness).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Serialize;

use crate::broker::{Mode, prepare_input, start_processor};
use crate::feeder::feed;
use crate::live::{Probe, Progress, Stack, await_assigned, await_done, balanced};
use crate::traffic::Traffic;

#[derive(Debug, Clone, Serialize)]
pub struct Options {
    pub transactions: u64,
    pub instances: Vec<usize>,
    pub io_ms: u64,
    /// Handler concurrency per instance (`SLUICE_PROCESSOR_CONCURRENCY`).
    pub concurrency: usize,
    pub partitions: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Round {
    pub instances: usize,
    pub records: u64,
    pub drain_seconds: f64,
    pub records_per_sec: f64,
    /// This round's rate ÷ the one-instance round's.
    pub speedup: f64,
    /// Little's-law bound: instances × concurrency ÷ measured record time.
    pub bound_records_per_sec: f64,
    pub mean_record_ms: f64,
}

pub async fn run(options: &Options) -> Result<Vec<Round>> {
    let stack = Stack::from_env()?;
    let traffic = Arc::new(Traffic::generate(options.transactions));
    let n = traffic.records.len();
    let partitioner = balanced(&traffic, options.partitions);
    let io = Duration::from_millis(options.io_ms);
    let extra = [("CONCURRENCY", options.concurrency.to_string())];
    let mut rounds: Vec<Round> = Vec::new();
    for &k in &options.instances {
        let input = stack.name(&format!("drain{k}"));
        prepare_input(&stack, Mode::Full, &traffic, &input, options.partitions).await?;
        let progress = Progress::new(options.partitions, None);
        let group = stack.name(&format!("drain{k}"));
        let mut instances = Vec::new();
        for _ in 0..k {
            instances.push(start_processor(
                &stack,
                Mode::Full,
                &traffic,
                &input,
                &group,
                &extra,
                Probe { progress: progress.clone(), io },
            )?);
        }
        await_assigned(&instances, options.partitions, Duration::from_secs(120)).await?;
        let started = Instant::now();
        let feeder = feed(&stack.kafka, &input, partitioner.clone(), traffic.clone(), n, None);
        await_done(&progress, n as u64, &format!("{k} instance(s) draining"), Duration::from_secs(900)).await?;
        let drain_seconds = started.elapsed().as_secs_f64();
        feeder.join().map_err(|_| anyhow::anyhow!("feeder panicked"))??;
        for instance in instances {
            instance.stop().await?;
        }
        let rate = n as f64 / drain_seconds;
        let mean_record_ms = progress.latency().mean() / 1e6;
        rounds.push(Round {
            instances: k,
            records: n as u64,
            drain_seconds,
            records_per_sec: rate,
            speedup: rounds.first().map_or(1.0, |one| rate / one.records_per_sec),
            bound_records_per_sec: (k * options.concurrency) as f64 / (mean_record_ms / 1e3),
            mean_record_ms,
        });
    }
    Ok(rounds)
}

/// The rounds as a table on stdout.
#[allow(clippy::print_stdout)]
pub fn print(options: &Options, rounds: &[Round]) {
    println!(
        "mode drain ({} partitions, {} ms IO per record, concurrency {} per instance)",
        options.partitions, options.io_ms, options.concurrency
    );
    for r in rounds {
        println!(
            "  {} instance(s): {} records in {:>6.2} s = {:>8.0} records/s  speedup {:.2}×  (bound {:.0}/s, record {:.2} ms)",
            r.instances,
            r.records,
            r.drain_seconds,
            r.records_per_sec,
            r.speedup,
            r.bound_records_per_sec,
            r.mean_record_ms
        );
    }
}
