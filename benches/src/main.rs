//! sluice-bench: Sluice's benchmarks. Every run writes
//! `results/<UTC timestamp>-<mode>.json` (git commit, machine, config,
//! figures) and prints a table.
//!
//! Modes so far:
//! - `chain`: how fast the chain simulator generates transactions and how
//!   fast the core recognises them, on one thread; the ceiling for any
//!   benchmark fed by chainsim.
//! - `contention`: experiment 2, locks before and after (see `contention`).
//! - `barrier`: experiment 3, cohort barrier against the bounded pipeline.
//! - `drain`: experiment 5, a backlog drained by 1, 2 and 4 instances.
//! - `ingest`: the ingest gateway streaming a backlog into Kafka, with and
//!   without Kafka transactions (see `ingest`).
//! - `lag-scale`: one sluice-lag poller watching many groups × partitions on
//!   the local broker (issue 14's scale target; see `lag_scale`).
//! - `stress`: the stress harness: `--mode in-process` (the handling path's
//!   ceiling with in-memory outputs), `kafka` and `full` (against the local
//!   broker and Redis, beside the fair ceiling of `ceiling`; see `broker`).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use serde::Serialize;
use sluice_chainsim::{Chain, ChainConfig};
use sluice_core::recognize::recognize;
use sluice_core::route::record_keys;

mod barrier;
mod broker;
mod ceiling;
mod contention;
mod cost;
mod drain;
mod feeder;
mod ingest;
mod jmx;
mod lag_scale;
mod live;
mod machine;
mod report;
mod stats;
mod stress;
mod traffic;

#[derive(Parser, Debug)]
#[command(name = "sluice-bench", about = "Sluice benchmarks; results land in results/")]
struct Cli {
    #[command(subcommand)]
    mode: Mode,
    /// Folder the JSON result is written to.
    #[arg(long, global = true, default_value = "results")]
    out: PathBuf,
}

#[derive(Subcommand, Debug)]
enum Mode {
    /// Chain generation and swap recognition throughput, one thread.
    Chain {
        /// Transactions to generate.
        #[arg(long, default_value_t = 200_000)]
        transactions: u64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Experiment 2: Mutex LRU vs batch-evicting DashMap cache, RwLock vs
    /// DashMap pool state, SeqCst vs Release/Acquire prices; 1 and 2 threads.
    Contention {
        /// Seconds per variant and thread count.
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
        /// Fail if an "after" variant's 2-thread p99 exceeds this (CI smoke; catches gross regressions).
        #[arg(long)]
        max_p99_us: Option<u64>,
    },
    /// The stress harness: the real DEX handling path, in-process (in-memory
    /// outputs), or consuming from the local broker (`kafka`: swaps to Kafka,
    /// state in memory; `full`: Redis and Kafka, the production outputs).
    Stress {
        #[arg(long, value_enum, default_value_t = StressMode::InProcess)]
        mode: StressMode,
        /// Run time, seconds (for kafka and full: the open-loop phase).
        #[arg(long, default_value_t = 65.0)]
        seconds: f64,
        /// In-process: workers (disjoint key sets, like partitions).
        #[arg(long, default_value_t = 12)]
        workers: usize,
        /// Kafka and full: partitions of the input topic.
        #[arg(long, default_value_t = 12)]
        partitions: usize,
        /// Kafka and full: open-loop rate, records/s (default: 70% of the backlog drain rate).
        #[arg(long)]
        rate: Option<f64>,
        /// Kafka and full: extra librdkafka properties for the processor, `k=v,k=v`.
        #[arg(long)]
        kafka_properties: Option<String>,
        /// Kafka and full: record a perf profile (DWARF call graphs) of this
        /// process during the open loop into this file (needs `perf`).
        #[arg(long)]
        profile: Option<PathBuf>,
        /// Distinct transactions generated, then replayed for the duration
        /// (default 100,000 in-process; 400,000 for kafka and full, whose
        /// backlog they are, about 1.2 records each, so that even the ceilings
        /// drain for seconds).
        #[arg(long)]
        transactions: Option<u64>,
        /// Fail if p99 exceeds this, µs (CI smoke; catches gross regressions).
        #[arg(long)]
        max_p99_us: Option<u64>,
        /// Kafka and full: fail if the processor drains the backlog below
        /// this share of the fair ceiling (CI smoke: catches a return to
        /// per-record hand-offs).
        #[arg(long)]
        min_over_ceiling: Option<f64>,
        /// Kafka and full: also drain the backlog with the fair ceiling in
        /// Kafka transactions committed every this many ms (what
        /// exactly-once outputs cost at the client).
        #[arg(long)]
        ceiling_transactions_ms: Option<u64>,
        /// Kafka and full: also run the processor with exactly-once outputs
        /// (Kafka transactions every this many ms), same run: the backlog
        /// drained at-least-once, exactly-once, at-least-once again, and an
        /// exactly-once open loop at the same rate as the first.
        #[arg(long)]
        exactly_once_ms: Option<u64>,
        /// With --exactly-once-ms: drains of each kind, alternating.
        #[arg(long, default_value_t = 3)]
        exactly_once_drains: usize,
    },
    /// Experiment 5: a backlog drained by 1, 2 and 4 processor instances
    /// (production handler on the local broker and Redis, plus simulated IO).
    Drain {
        /// Transactions in the backlog (about 1.2 records each).
        #[arg(long, default_value_t = 20_000)]
        transactions: u64,
        /// Instance counts, one round each.
        #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
        instances: Vec<usize>,
        /// Simulated IO wait per record, ms (large enough that the 2 cores are not the limit).
        #[arg(long, default_value_t = 10)]
        io_ms: u64,
        /// Handler concurrency per instance.
        #[arg(long, default_value_t = 8)]
        concurrency: usize,
        /// Partitions (divisible by every instance count).
        #[arg(long, default_value_t = 16)]
        partitions: usize,
        /// Fail unless the largest round reaches this speedup over one instance (CI smoke).
        #[arg(long)]
        min_speedup: Option<f64>,
    },
    /// The ingest gateway streaming a chain backlog into Kafka: idempotent
    /// and transactional rounds, alternating, on the local broker.
    Ingest {
        /// Chain transactions in each round's backlog (about 1.6 records each).
        #[arg(long, default_value_t = 200_000)]
        transactions: u64,
        /// Rounds per mode.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// The transactional rounds' commit interval, ms (the ingest's default).
        #[arg(long, default_value_t = 100)]
        interval_ms: u64,
        #[arg(long, default_value_t = 12)]
        partitions: i32,
        /// Fail if transactional ÷ idempotent throughput is below this (CI smoke).
        #[arg(long)]
        min_ratio: Option<f64>,
    },
    /// One sluice-lag poller (the binary, built by this mode unless given)
    /// watching topics × groups on the local broker: poll time, CPU, requests.
    LagScale {
        #[arg(long, default_value_t = 20)]
        topics: usize,
        /// Partitions per topic.
        #[arg(long, default_value_t = 50)]
        partitions: usize,
        /// Groups per topic, each committed on every partition at an offset of its own.
        #[arg(long, default_value_t = 10)]
        groups_per_topic: usize,
        /// Records per partition (more than the groups per topic: every group lags).
        #[arg(long, default_value_t = 20)]
        records_per_partition: i64,
        #[arg(long, default_value_t = 5000)]
        poll_interval_ms: u64,
        /// Steady polls measured per run, after the cold first poll.
        #[arg(long, default_value_t = 10)]
        polls: usize,
        #[arg(long, value_enum, value_delimiter = ',', default_value = "list,regex")]
        selection: Vec<lag_scale::Selection>,
        /// Runs of each selection, each a fresh sluice-lag.
        #[arg(long, default_value_t = 1)]
        repeats: usize,
        /// The sluice-lag binary (default: built now with this benchmark's profile).
        #[arg(long)]
        lag_bin: Option<PathBuf>,
        /// Fail if any poll, cold or steady, took longer, ms (CI smoke).
        #[arg(long)]
        max_poll_ms: Option<f64>,
    },
    /// The open-loop feeder's own process (started by `stress`; speaks
    /// JSON lines on stdin and stdout, see `feeder`).
    #[command(hide = true)]
    Feed,
    /// Experiment 3: cohort barrier vs bounded pipeline under heavy-tailed IO.
    Barrier {
        /// Base item latency, ms (large against tokio's 1 ms timer).
        #[arg(long, default_value_t = 20)]
        base_ms: u64,
        /// Slow items take this many times the base.
        #[arg(long, default_value_t = 100)]
        slow_factor: u64,
        /// Share of slow items, parts per million (10,000 = 1%).
        #[arg(long, default_value_t = 10_000)]
        slow_ppm: u32,
        /// Counting window per run, seconds (long against the slowest item).
        #[arg(long, default_value_t = 20.0)]
        window_seconds: f64,
        /// Warm-up before the window, seconds.
        #[arg(long, default_value_t = 3.0)]
        warmup_seconds: f64,
        /// Fail unless the pipeline reaches this share of its Little's-law bound (CI smoke).
        #[arg(long)]
        min_utilization: Option<f64>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum StressMode {
    InProcess,
    Kafka,
    Full,
}

#[derive(Serialize, Debug)]
struct ChainFigures {
    transactions: u64,
    records: u64,
    swaps_recognised: u64,
    generate_tx_per_sec: f64,
    generate_us_per_tx: f64,
    recognise_records_per_sec: f64,
    recognise_ns_per_record: f64,
    encoded_bytes_per_tx: f64,
}

fn chain_mode(transactions: u64, seed: u64) -> Result<(serde_json::Value, ChainFigures)> {
    let config = ChainConfig { seed, tx_per_sec: 10_000, ..ChainConfig::default() };
    let mut chain = Chain::new(config.clone())?;
    let started = Instant::now();
    let mut txs = Vec::with_capacity(transactions as usize);
    while (txs.len() as u64) < transactions {
        txs.extend(chain.next_block().transactions.into_iter().map(|g| g.tx));
    }
    let generate = started.elapsed();

    let started = Instant::now();
    let (mut records, mut swaps) = (0u64, 0u64);
    for tx in &txs {
        for key in record_keys(tx) {
            records += 1;
            if let Ok(r) = recognize(tx, key) {
                swaps += r.swaps.len() as u64;
            }
        }
    }
    let recognise = started.elapsed();
    let bytes: usize = txs.iter().map(prost::Message::encoded_len).sum();
    let n = txs.len() as f64;
    let figures = ChainFigures {
        transactions: txs.len() as u64,
        records,
        swaps_recognised: swaps,
        generate_tx_per_sec: n / generate.as_secs_f64(),
        generate_us_per_tx: generate.as_secs_f64() * 1e6 / n,
        recognise_records_per_sec: records as f64 / recognise.as_secs_f64(),
        recognise_ns_per_record: recognise.as_secs_f64() * 1e9 / records as f64,
        encoded_bytes_per_tx: bytes as f64 / n,
    };
    Ok((serde_json::to_value(&config)?, figures))
}

/// Fails a CI smoke run whose p99 is above its loose bound.
fn check_p99(p99_ns: u64, max_us: Option<u64>) -> Result<()> {
    match max_us {
        Some(max) if p99_ns > max * 1_000 => anyhow::bail!("p99 {p99_ns} ns above the smoke bound {max} µs"),
        _ => Ok(()),
    }
}

#[allow(clippy::print_stdout)]
fn main() -> Result<()> {
    let cli = Cli::parse();
    let (mode, config, figures) = match cli.mode {
        Mode::Feed => return feeder::serve(),
        Mode::Chain { transactions, seed } => {
            let (config, figures) = chain_mode(transactions, seed)?;
            println!("mode chain ({} transactions, one thread)", figures.transactions);
            println!(
                "  generate   {:>12.0} tx/s   {:>8.2} µs/tx",
                figures.generate_tx_per_sec, figures.generate_us_per_tx
            );
            println!(
                "  recognise  {:>12.0} rec/s  {:>8.0} ns/record",
                figures.recognise_records_per_sec, figures.recognise_ns_per_record
            );
            println!("  encoded    {:>12.0} bytes/tx", figures.encoded_bytes_per_tx);
            ("chain", config, serde_json::to_value(&figures)?)
        }
        Mode::Stress { mode: StressMode::InProcess, seconds, workers, transactions, max_p99_us, .. } => {
            let transactions = transactions.unwrap_or(100_000);
            let f = stress::in_process(std::time::Duration::from_secs_f64(seconds), workers.max(1), transactions);
            stress::print(&f);
            check_p99(f.latency.p99_ns, max_p99_us)?;
            let config = serde_json::json!({ "seconds": seconds, "workers": workers, "transactions": transactions });
            ("stress-in-process", config, serde_json::to_value(&f)?)
        }
        Mode::Stress {
            mode,
            seconds,
            transactions,
            rate,
            partitions,
            kafka_properties,
            profile,
            max_p99_us,
            min_over_ceiling,
            ceiling_transactions_ms,
            exactly_once_ms,
            exactly_once_drains,
            ..
        } => {
            let mode = if mode == StressMode::Full { broker::Mode::Full } else { broker::Mode::Kafka };
            let transactions = transactions.unwrap_or(400_000);
            let options = broker::Options {
                mode,
                seconds,
                transactions,
                rate,
                partitions: partitions.max(1),
                kafka_properties,
                profile,
                ceiling_transactions: ceiling_transactions_ms.map(std::time::Duration::from_millis),
                exactly_once: exactly_once_ms.map(std::time::Duration::from_millis),
                exactly_once_drains,
            };
            let tokio = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
            let f = tokio.block_on(broker::run(&options))?;
            tokio.shutdown_timeout(std::time::Duration::from_secs(5));
            report::print(&f);
            check_p99(f.open_loop.latency.p99_ns, max_p99_us)?;
            if let Some(min) = min_over_ceiling
                && f.backlog.processor_over_ceiling < min
            {
                anyhow::bail!(
                    "the processor drained at {:.3} x the fair ceiling, below the smoke bound {min}",
                    f.backlog.processor_over_ceiling
                );
            }
            let name = if mode == broker::Mode::Full { "stress-full" } else { "stress-kafka" };
            (name, serde_json::to_value(&options)?, serde_json::to_value(&f)?)
        }
        Mode::Contention { seconds, max_p99_us } => {
            let comparisons = contention::run(std::time::Duration::from_secs_f64(seconds));
            println!("mode contention ({seconds} s per variant and thread count)");
            println!(
                "  {:<28} {:<24} {:>14} {:>14} {:>10} {:>10} {:>8}",
                "comparison", "variant", "ops/s 1 thr", "ops/s 2 thr", "p99 2 thr", "2/1 scale", "speedup"
            );
            for c in &comparisons {
                for (v, speedup) in [(&c.before, None), (&c.after, Some(c.speedup_2_threads))] {
                    println!(
                        "  {:<28} {:<24} {:>14.0} {:>14.0} {:>8} ns {:>10.2} {:>8}",
                        c.what,
                        v.name,
                        v.runs[0].ops_per_sec,
                        v.runs[1].ops_per_sec,
                        v.runs[1].latency.p99_ns,
                        v.scaling,
                        speedup.map_or(String::new(), |s| format!("{s:.1}x")),
                    );
                }
            }
            if let Some(max) = max_p99_us
                && let Some(c) = comparisons.iter().find(|c| c.after.runs[1].latency.p99_ns > max * 1_000)
            {
                anyhow::bail!("{} p99 {} ns above the smoke bound {max} µs", c.what, c.after.runs[1].latency.p99_ns);
            }
            ("contention", serde_json::json!({ "seconds_per_run": seconds }), serde_json::to_value(&comparisons)?)
        }
        Mode::Drain { transactions, instances, io_ms, concurrency, partitions, min_speedup } => {
            if let Some(k) = instances.iter().find(|&&k| k == 0 || partitions % k != 0) {
                anyhow::bail!("--partitions {partitions} must divide by every instance count (got {k})");
            }
            let options =
                drain::Options { transactions, instances, io_ms, concurrency: concurrency.max(1), partitions };
            let tokio = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
            let rounds = tokio.block_on(drain::run(&options))?;
            tokio.shutdown_timeout(std::time::Duration::from_secs(5));
            drain::print(&options, &rounds);
            if let (Some(min), Some(last)) = (min_speedup, rounds.last())
                && last.speedup < min
            {
                anyhow::bail!(
                    "{} instances drained {:.2}× one, below the smoke bound {min}",
                    last.instances,
                    last.speedup
                );
            }
            ("drain", serde_json::to_value(&options)?, serde_json::to_value(&rounds)?)
        }
        Mode::Ingest { transactions, rounds, interval_ms, partitions, min_ratio } => {
            let options = ingest::Options { transactions, rounds: rounds.max(1), interval_ms, partitions };
            let tokio = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
            let figures = tokio.block_on(ingest::run(&options))?;
            tokio.shutdown_timeout(std::time::Duration::from_secs(5));
            ingest::print(&options, &figures);
            if let Some(min) = min_ratio
                && figures.throughput_ratio < min
            {
                anyhow::bail!(
                    "transactional ÷ idempotent throughput {:.3}, below the smoke bound {min}",
                    figures.throughput_ratio
                );
            }
            ("ingest", serde_json::to_value(&options)?, serde_json::to_value(&figures)?)
        }
        Mode::LagScale {
            topics,
            partitions,
            groups_per_topic,
            records_per_partition,
            poll_interval_ms,
            polls,
            selection,
            repeats,
            lag_bin,
            max_poll_ms,
        } => {
            anyhow::ensure!(
                records_per_partition > groups_per_topic as i64,
                "--records-per-partition must exceed --groups-per-topic (every group lags)"
            );
            let shape = lag_scale::Shape { topics, partitions, groups_per_topic, records_per_partition };
            let binary = lag_scale::binary(lag_bin.as_deref())?;
            let options = lag_scale::Options {
                shape,
                poll_interval_ms,
                polls: polls.max(1),
                selections: selection,
                repeats: repeats.max(1),
                binary,
            };
            let tokio = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
            let figures = tokio.block_on(lag_scale::run(&options))?;
            tokio.shutdown_timeout(std::time::Duration::from_secs(5));
            lag_scale::print(&options, &figures);
            let worst = figures.steady_duration.max.max(figures.cold_duration_max_ms);
            if let Some(max) = max_poll_ms
                && worst > max
            {
                anyhow::bail!("a poll took {worst:.0} ms, above the smoke bound {max} ms");
            }
            ("lag-scale", serde_json::to_value(&options)?, serde_json::to_value(&figures)?)
        }
        Mode::Barrier { base_ms, slow_factor, slow_ppm, window_seconds, warmup_seconds, min_utilization } => {
            let io = barrier::Io { base_ms, slow_factor, slow_ppm };
            let pairs = barrier::run(
                io,
                &[10, 64],
                std::time::Duration::from_secs_f64(warmup_seconds),
                std::time::Duration::from_secs_f64(window_seconds),
            );
            println!(
                "mode barrier (base {base_ms} ms, {slow_ppm} ppm items ×{slow_factor}, window {window_seconds} s)"
            );
            for p in &pairs {
                for r in [&p.cohort, &p.pipeline] {
                    println!(
                        "  n={:<3} {:<9} {:>9.0} items/s  item {:>6.2} ms  bound {:>9.0}/s  utilization {:>5.1}%",
                        r.concurrency,
                        r.mode,
                        r.items_per_sec,
                        r.measured_item_ms,
                        r.littles_bound_per_sec,
                        r.utilization * 100.0
                    );
                }
                println!(
                    "  n={:<3} pipeline ÷ cohort = {:.2} (theory {:.2})",
                    p.concurrency, p.measured_ratio, p.theoretical_ratio
                );
            }
            if let Some(min) = min_utilization
                && let Some(worst) = pairs.iter().map(|p| p.pipeline.utilization).reduce(f64::min)
                && worst < min
            {
                anyhow::bail!("pipeline utilization {worst:.2} below the smoke bound {min}");
            }
            let config =
                serde_json::json!({ "io": io, "window_seconds": window_seconds, "warmup_seconds": warmup_seconds });
            ("barrier", config, serde_json::to_value(&pairs)?)
        }
    };
    let report = serde_json::json!({
        "mode": mode,
        "git_commit": machine::git_commit(),
        "machine": machine::describe(),
        "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
        "config": config,
        "figures": figures,
    });
    std::fs::create_dir_all(&cli.out).with_context(|| format!("creating {}", cli.out.display()))?;
    let path = cli.out.join(format!("{}-{mode}.json", machine::utc_stamp()));
    std::fs::write(&path, serde_json::to_string_pretty(&report)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}
