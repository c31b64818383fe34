//! One function per mode: runs it, prints its table, applies its CI smoke bound, and returns
//! what the result file records.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::{Value, json};
use sluice_chainsim::{Chain, ChainConfig};
use sluice_core::recognize::recognize;
use sluice_core::route::record_keys;

use crate::cli::{BarrierArgs, ChainArgs, ContentionArgs, DrainArgs, IngestArgs, LagScaleArgs, StressArgs, StressMode};
use crate::{barrier, broker, contention, drain, ingest, lag_scale, report, stress};

/// What a mode's result file records besides the machine and the commit.
#[derive(Debug)]
pub struct Outcome {
    /// The file's suffix and its `mode` field, e.g. `stress-full`.
    pub mode: &'static str,
    pub config: Value,
    pub figures: Value,
}

impl Outcome {
    fn new(mode: &'static str, config: impl Serialize, figures: impl Serialize) -> Result<Self> {
        Ok(Self { mode, config: serde_json::to_value(config)?, figures: serde_json::to_value(figures)? })
    }
}

/// A multi-threaded tokio runtime for one mode's run, shut down after it.
fn block_on<T>(run: impl Future<Output = Result<T>>) -> Result<T> {
    let tokio = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let result = tokio.block_on(run);
    tokio.shutdown_timeout(Duration::from_secs(5));
    result
}

#[allow(clippy::print_stdout)]
pub fn chain(a: ChainArgs) -> Result<Outcome> {
    let (config, figures) = chain_mode(a.transactions, a.seed)?;
    println!("mode chain ({} transactions, one thread)", figures.transactions);
    println!("  generate   {:>12.0} tx/s   {:>8.2} µs/tx", figures.generate_tx_per_sec, figures.generate_us_per_tx);
    println!(
        "  recognise  {:>12.0} rec/s  {:>8.0} ns/record",
        figures.recognise_records_per_sec, figures.recognise_ns_per_record
    );
    println!("  encoded    {:>12.0} bytes/tx", figures.encoded_bytes_per_tx);
    Outcome::new("chain", config, figures)
}

pub fn stress(a: StressArgs) -> Result<Outcome> {
    if a.mode == StressMode::InProcess {
        let transactions = a.transactions.unwrap_or(100_000);
        let f = stress::in_process(Duration::from_secs_f64(a.seconds), a.workers.max(1), transactions);
        stress::print(&f);
        check_p99(f.latency.p99_ns, a.max_p99_us)?;
        let config = json!({ "seconds": a.seconds, "workers": a.workers, "transactions": transactions });
        return Outcome::new("stress-in-process", config, f);
    }
    anyhow::ensure!(
        a.loads.iter().all(|s| *s > 0.0 && *s <= 2.0),
        "--loads: shares of the max sustained rate, in (0, 2]"
    );
    anyhow::ensure!(a.fixed_rates.iter().all(|r| *r >= 1.0), "--fixed-rates: records/s, at least 1");
    anyhow::ensure!(a.trial_seconds >= 1.0, "--trial-seconds: at least 1");
    anyhow::ensure!(
        a.min_max_over_drain.is_none() || a.rate.is_none(),
        "--min-max-over-drain bounds the rate search, which --rate skips"
    );
    let mode = if a.mode == StressMode::Full { broker::Mode::Full } else { broker::Mode::Kafka };
    let options = broker::Options {
        mode,
        seconds: a.seconds,
        transactions: a.transactions.unwrap_or(400_000),
        rate: a.rate,
        partitions: a.partitions.max(1),
        kafka_properties: a.kafka_properties,
        feeder_properties: a.feeder_properties,
        topic_config: parse_pairs(&a.topic_config).context("--topic-config")?,
        profile: a.profile,
        ceiling_transactions: a.ceiling_transactions_ms.map(Duration::from_millis),
        exactly_once: a.exactly_once_ms.map(Duration::from_millis),
        exactly_once_drains: a.exactly_once_drains,
        drains: a.drains.max(1),
        ceiling_threads: a.ceiling_threads,
        repeats: a.repeats.max(1),
        loads: a.loads,
        fixed_rates: a.fixed_rates,
        load_seconds: a.load_seconds,
        warmup_seconds: a.warmup_seconds,
        trial_seconds: a.trial_seconds,
    };
    let f = block_on(broker::run(&options))?;
    report::print(&f);
    check_p99(f.open_loop.latency.p99_ns, a.max_p99_us)?;
    check_broker(&f, a.min_over_ceiling, a.max_cost_over_drain, a.min_max_over_drain)?;
    Outcome::new(if mode == broker::Mode::Full { "stress-full" } else { "stress-kafka" }, &options, f)
}

/// The Kafka and full modes' CI smoke bounds, each a ratio of two figures
/// of the same run.
fn check_broker(
    f: &broker::Figures,
    min_over_ceiling: Option<f64>,
    max_cost_over_drain: Option<f64>,
    min_max_over_drain: Option<f64>,
) -> Result<()> {
    if let Some(min) = min_over_ceiling
        && f.backlog.processor_over_ceiling < min
    {
        anyhow::bail!(
            "the processor drained at {:.3} x the fair ceiling, below the smoke bound {min}",
            f.backlog.processor_over_ceiling
        );
    }
    if let Some(max) = max_cost_over_drain
        && let Some(worst) = f.cost_by_load.iter().max_by(|a, b| a.over_drain.total_cmp(&b.over_drain))
        && worst.over_drain > max
    {
        anyhow::bail!(
            "at {} the whole system spent {:.2} x the drain's CPU per record, above the smoke bound {max}",
            worst.label,
            worst.over_drain
        );
    }
    if let Some(min) = min_max_over_drain {
        check_search(&f.ramp, f.max_sustained_rate, f.backlog.processor_records_per_sec, min)?;
    }
    Ok(())
}

/// The rate search found a limit: its last trial was not sustained, above
/// one that was, and the max sustained is at least `min` of `drain`'s rate.
fn check_search(trials: &[broker::Trial], max: Option<f64>, drain: f64, min: f64) -> Result<()> {
    let n = trials.len();
    let Some(max) = max else {
        anyhow::bail!("the rate search sustained none of its {n} trials");
    };
    anyhow::ensure!(
        trials.last().is_some_and(|t| !t.sustained),
        "the rate search sustained every rate up to {max:.0} records/s in {n} trials: it found no limit"
    );
    let share = max / drain;
    anyhow::ensure!(
        share >= min,
        "the rate search's max sustained, {max:.0} records/s, is {share:.2} x the drain's rate, below the smoke bound {min}"
    );
    Ok(())
}

#[allow(clippy::print_stdout)]
pub fn contention(a: ContentionArgs) -> Result<Outcome> {
    let comparisons = contention::run(Duration::from_secs_f64(a.seconds));
    println!("mode contention ({} s per variant and thread count)", a.seconds);
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
    if let Some(max) = a.max_p99_us
        && let Some(c) = comparisons.iter().find(|c| c.after.runs[1].latency.p99_ns > max * 1_000)
    {
        anyhow::bail!("{} p99 {} ns above the smoke bound {max} µs", c.what, c.after.runs[1].latency.p99_ns);
    }
    Outcome::new("contention", json!({ "seconds_per_run": a.seconds }), &comparisons)
}

pub fn drain(a: DrainArgs) -> Result<Outcome> {
    if let Some(k) = a.instances.iter().find(|&&k| k == 0 || !a.partitions.is_multiple_of(k)) {
        anyhow::bail!("--partitions {} must divide by every instance count (got {k})", a.partitions);
    }
    let options = drain::Options {
        transactions: a.transactions,
        instances: a.instances,
        io_ms: a.io_ms,
        concurrency: a.concurrency.max(1),
        partitions: a.partitions,
    };
    let rounds = block_on(drain::run(&options))?;
    drain::print(&options, &rounds);
    if let (Some(min), Some(last)) = (a.min_speedup, rounds.last())
        && last.speedup < min
    {
        anyhow::bail!("{} instances drained {:.2}× one, below the smoke bound {min}", last.instances, last.speedup);
    }
    Outcome::new("drain", &options, &rounds)
}

pub fn ingest(a: IngestArgs) -> Result<Outcome> {
    let options = ingest::Options {
        transactions: a.transactions,
        rounds: a.rounds.max(1),
        interval_ms: a.interval_ms,
        partitions: a.partitions,
    };
    let figures = block_on(ingest::run(&options))?;
    ingest::print(&options, &figures);
    if let Some(min) = a.min_ratio
        && figures.throughput_ratio < min
    {
        anyhow::bail!(
            "transactional ÷ idempotent throughput {:.3}, below the smoke bound {min}",
            figures.throughput_ratio
        );
    }
    Outcome::new("ingest", &options, &figures)
}

pub fn lag_scale(a: LagScaleArgs) -> Result<Outcome> {
    anyhow::ensure!(
        a.records_per_partition > a.groups_per_topic as i64,
        "--records-per-partition must exceed --groups-per-topic (every group lags)"
    );
    let shape = lag_scale::Shape {
        topics: a.topics,
        partitions: a.partitions,
        groups_per_topic: a.groups_per_topic,
        records_per_partition: a.records_per_partition,
    };
    let options = lag_scale::Options {
        shape,
        poll_interval_ms: a.poll_interval_ms,
        polls: a.polls.max(1),
        selections: a.selection,
        repeats: a.repeats.max(1),
        binary: lag_scale::binary(a.lag_bin.as_deref())?,
    };
    let figures = block_on(lag_scale::run(&options))?;
    lag_scale::print(&options, &figures);
    let worst = figures.steady_duration.max.max(figures.cold_duration_max_ms);
    if let Some(max) = a.max_poll_ms
        && worst > max
    {
        anyhow::bail!("a poll took {worst:.0} ms, above the smoke bound {max} ms");
    }
    Outcome::new("lag-scale", &options, &figures)
}

#[allow(clippy::print_stdout)]
pub fn barrier(a: BarrierArgs) -> Result<Outcome> {
    let io = barrier::Io { base_ms: a.base_ms, slow_factor: a.slow_factor, slow_ppm: a.slow_ppm };
    let (warmup, window) = (Duration::from_secs_f64(a.warmup_seconds), Duration::from_secs_f64(a.window_seconds));
    let pairs = barrier::run(io, &[10, 64], warmup, window);
    println!(
        "mode barrier (base {} ms, {} ppm items ×{}, window {} s)",
        a.base_ms, a.slow_ppm, a.slow_factor, a.window_seconds
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
    if let Some(min) = a.min_utilization
        && let Some(worst) = pairs.iter().map(|p| p.pipeline.utilization).reduce(f64::min)
        && worst < min
    {
        anyhow::bail!("pipeline utilization {worst:.2} below the smoke bound {min}");
    }
    let config = json!({ "io": io, "window_seconds": a.window_seconds, "warmup_seconds": a.warmup_seconds });
    Outcome::new("barrier", config, &pairs)
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

fn chain_mode(transactions: u64, seed: u64) -> Result<(Value, ChainFigures)> {
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

/// `k=v,k=v` as pairs (`sluice_service::env::key_values`, what
/// `KAFKA_PROPERTIES` is read with); an item that is not `k=v` is an error
/// naming it.
fn parse_pairs(text: &str) -> Result<Vec<(String, String)>> {
    sluice_service::env::key_values(text)
        .map(|pair| pair.map_err(|e| anyhow::anyhow!("`{}` is not k=v", e.0)))
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_read_and_a_bad_one_is_named() {
        let pairs = parse_pairs("segment.bytes=1073741824, file.delete.delay.ms=0").unwrap();
        assert_eq!(
            pairs,
            vec![("segment.bytes".into(), "1073741824".into()), ("file.delete.delay.ms".into(), "0".into())]
        );
        assert!(parse_pairs("").unwrap().is_empty());
        let e = parse_pairs("segment.bytes").unwrap_err().to_string();
        assert!(e.contains("`segment.bytes` is not k=v"), "{e}");
    }

    fn trial(rate: f64, sustained: bool) -> broker::Trial {
        broker::Trial { rate, sustained, p99_ms: 0.0, seconds: 0.0, end_ms: 0.0, max_ms_by_second: Vec::new() }
    }

    #[test]
    fn the_search_smoke_wants_a_limit_found_at_a_share_of_the_drain() {
        let found = [trial(40.0, true), trial(46.0, true), trial(53.0, false), trial(53.0, false)];
        assert!(check_search(&found, Some(46.0), 100.0, 0.2).is_ok());
        let e = check_search(&found, Some(46.0), 100.0, 0.5).unwrap_err().to_string();
        assert!(e.contains("0.46 x the drain's rate"), "{e}");
        let always = [trial(40.0, true), trial(46.0, true)];
        let e = check_search(&always, Some(46.0), 100.0, 0.2).unwrap_err().to_string();
        assert!(e.contains("found no limit"), "{e}");
        let never = [trial(40.0, false), trial(30.0, false)];
        let e = check_search(&never, None, 100.0, 0.2).unwrap_err().to_string();
        assert!(e.contains("none of its 2 trials"), "{e}");
    }
}
