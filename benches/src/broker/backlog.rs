//! Phase 1: one backlog drained by the bare consumer, the fair ceiling and
//! the processor (`--drains` times, the median reported; and, with `--exactly-once-ms`, exactly-once against
//! at-least-once), each with a group of its own.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use serde::Serialize;
use sluice_runtime::metrics::RuntimeMetrics;

use super::sinks::{Sinks, kafka_figures, redis_figures};
use super::{Mode, Shape, prepare_input, start_processor};
use crate::ceiling::{self, Ceiling};
use crate::cost::{Cost, Sample};
use crate::feeder::{Fed, feed};
use crate::jmx::Jmx;
use crate::live::{Bare, Probe, Progress, Stack, await_done};

#[derive(Debug, Clone, Serialize)]
pub struct Backlog {
    pub produce: Fed,
    /// The client's own ceiling: consume and commit, nothing else.
    pub bare_consumer: Bare,
    pub bare_consumer_cost: Cost,
    /// The fair ceiling: the processor's work without the processor.
    pub ceiling: Ceiling,
    pub ceiling_cost: Cost,
    /// The fair ceiling in transactions (`--ceiling-transactions-ms`), its
    /// cost, and its rate ÷ the plain ceiling's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ceiling_transactional: Option<TransactionalCeiling>,
    /// The best loop on the same client (`--ceiling-threads` loops on one
    /// shared producer), its cost, and the processor's rate ÷ its rate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub best: Option<BestCeiling>,
    /// The processor's drain of the median whole-system cost among
    /// `processor_drains` (all of them, in the order run): a 2–3 s drain
    /// catches or misses a broker GC, and one drain's cost moved between
    /// 4.41 and 6.50 CPU-µs per record in two runs of the same code.
    pub processor_records_per_sec: f64,
    pub processor_seconds: f64,
    pub processor_cost: Cost,
    pub processor_drains: Vec<Drain>,
    pub processor_over_bare: f64,
    pub processor_over_ceiling: f64,
    /// Sink batching while the processor drained the backlog (saturated).
    pub saturated: Sinks,
    /// With `--exactly-once-ms`: the backlog drained again exactly-once,
    /// then at-least-once again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exactly_once: Option<ExactlyOnceDrains>,
}

#[derive(Debug, Clone, Serialize)]
pub struct BestCeiling {
    pub threads: usize,
    pub ceiling: Ceiling,
    pub cost: Cost,
    pub processor_over_best: f64,
}

/// Exactly-once against at-least-once on the same backlog, drained
/// alternately (`--exactly-once-drains` of each, the backlog's first drain
/// the first at-least-once one), so the machine's and the broker's drift
/// over the run (a broker still compiling, a noisy neighbour) falls on both.
#[derive(Debug, Clone, Serialize)]
pub struct ExactlyOnceDrains {
    pub interval_ms: u64,
    pub at_least_once: Vec<Drain>,
    pub exactly_once: Vec<Drain>,
    /// Medians of each: records/s and CPU-µs per record.
    pub at_least_once_median: Medians,
    pub exactly_once_median: Medians,
    /// Exactly-once ÷ at-least-once, of the median rates.
    pub over_at_least_once: f64,
    /// Each exactly-once drain ÷ the at-least-once drain just before it,
    /// and their median: drift between pairs cancels.
    pub pair_ratios: Vec<f64>,
    pub over_at_least_once_paired: f64,
    /// Of the exactly-once drains, together.
    pub transactions_committed: u64,
    pub transactions_aborted: u64,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Medians {
    pub records_per_sec: f64,
    /// Processor + broker + Redis.
    pub system_cpu_us_per_record: f64,
    pub process_cpu_us_per_record: f64,
}

/// The middle value (the upper one of an even count; 0 of none).
fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

impl Medians {
    fn of(drains: &[Drain]) -> Self {
        let median = |f: &dyn Fn(&Drain) -> f64| median(&drains.iter().map(f).collect::<Vec<_>>());
        Self {
            records_per_sec: median(&|d| d.records_per_sec),
            system_cpu_us_per_record: median(&|d| d.cost.cpu_us_per_record.system()),
            process_cpu_us_per_record: median(&|d| d.cost.cpu_us_per_record.process),
        }
    }
}

/// One drain of the backlog by the processor.
#[derive(Debug, Clone, Serialize)]
pub struct Drain {
    pub records_per_sec: f64,
    pub seconds: f64,
    pub cost: Cost,
}

#[derive(Debug, Clone, Serialize)]
pub struct TransactionalCeiling {
    pub interval_ms: u64,
    pub ceiling: Ceiling,
    pub cost: Cost,
    pub over_plain: f64,
}

/// Phase 1: one backlog, drained by the bare consumer, by the fair ceiling,
/// then by the processor, each with a group of its own, one after the other.
pub(super) async fn backlog(stack: &Stack, jmx: &Jmx, shape: &Shape<'_>) -> Result<Backlog> {
    let (mode, traffic, partitioner, partitions) = (shape.mode, shape.traffic, shape.partitioner, shape.partitions);
    let n = traffic.records.len();
    let input = stack.name("backlog");
    prepare_input(stack, mode, traffic, &input, partitions).await?;
    let ceiling_topic = format!("{input}.ceiling");
    stack.create_topics(&[(&ceiling_topic, partitions as i32)]).await?;
    let swaps = Arc::new(ceiling::swap_payloads(traffic, 4096).await?);
    eprintln!("  producing the backlog: {n} records to {input}");
    let produce = feed(&stack.kafka, &input, partitioner.clone(), traffic.clone(), n, None)
        .join()
        .map_err(|_| anyhow::anyhow!("feeder panicked"))??;

    eprintln!("  bare consumer draining the backlog");
    let (bare_config, _, _) = stack.processor_config(&input, &stack.name("bare"), &[])?;
    let before = Sample::start(stack, Some(jmx), None)?;
    let bare = tokio::task::spawn_blocking(move || {
        crate::live::bare_consume(&bare_config, n as u64, Duration::from_secs(600))
    })
    .await??;
    let bare_consumer_cost = before.cost(&Sample::end(stack, Some(jmx), None)?, n as u64);

    eprintln!("  fair ceiling ({mode:?} mode) draining the backlog");
    let (ceiling, ceiling_cost) = drain_ceiling(stack, jmx, shape, &input, &ceiling_topic, &swaps, None).await?;
    let ceiling_transactional = match shape.ceiling_transactions {
        Some(every) => {
            eprintln!("  fair ceiling in transactions ({} ms) draining the backlog", every.as_millis());
            let (txn, cost) = drain_ceiling(stack, jmx, shape, &input, &ceiling_topic, &swaps, Some(every)).await?;
            let over_plain = txn.records_per_sec / ceiling.records_per_sec.max(1e-9);
            Some(TransactionalCeiling { interval_ms: every.as_millis() as u64, ceiling: txn, cost, over_plain })
        }
        None => None,
    };

    let best = match shape.ceiling_threads {
        0 => None,
        threads => {
            eprintln!("  best loop ({threads} threads, one producer) draining the backlog");
            Some(drain_best(stack, jmx, shape, (&input, &ceiling_topic), &swaps, threads).await?)
        }
    };
    let (drain, saturated, processor_drains) = median_drain(stack, jmx, shape, &input).await?;
    let (processor_rate, processor_seconds, processor_cost) =
        (drain.records_per_sec, drain.seconds, drain.cost.clone());
    let exactly_once = match shape.exactly_once {
        Some(every) => Some(drain_exactly_once(stack, jmx, shape, &input, every, &drain).await?),
        None => None,
    };
    stack.drop_input(&input, &[&ceiling_topic]).await;
    Ok(Backlog {
        produce,
        bare_consumer: bare,
        bare_consumer_cost,
        ceiling,
        ceiling_cost,
        ceiling_transactional,
        best: best.map(|(ceiling, cost)| BestCeiling {
            threads: shape.ceiling_threads,
            processor_over_best: processor_rate / ceiling.records_per_sec.max(1e-9),
            ceiling,
            cost,
        }),
        processor_records_per_sec: processor_rate,
        processor_seconds,
        processor_cost,
        processor_drains,
        processor_over_bare: processor_rate / bare.records_per_sec,
        processor_over_ceiling: processor_rate / ceiling.records_per_sec,
        saturated,
        exactly_once,
    })
}

/// The processor drains the backlog in `input` `shape.drains` times, each
/// with a group of its own: the drain of the median whole-system cost, its
/// sinks, and every drain in the order run.
async fn median_drain(stack: &Stack, jmx: &Jmx, shape: &Shape<'_>, input: &str) -> Result<(Drain, Sinks, Vec<Drain>)> {
    let mut runs = Vec::new();
    for i in 0..shape.drains.max(1) {
        let label = if i == 0 { "drain".to_string() } else { format!("drain{i}") };
        let (drain, sinks, _) = drain_processor(stack, jmx, shape, input, &label, &[]).await?;
        runs.push((drain, sinks));
    }
    let all: Vec<Drain> = runs.iter().map(|(d, _)| d.clone()).collect();
    let mut order: Vec<usize> = (0..runs.len()).collect();
    order.sort_by(|&a, &b| {
        runs[a].0.cost.cpu_us_per_record.system().total_cmp(&runs[b].0.cost.cpu_us_per_record.system())
    });
    let (drain, sinks) = runs.swap_remove(order[order.len() / 2]);
    Ok((drain, sinks, all))
}

/// The processor drains the backlog in `input` with a group of its own.
async fn drain_processor(
    stack: &Stack,
    jmx: &Jmx,
    shape: &Shape<'_>,
    input: &str,
    label: &str,
    extra: &[(&str, String)],
) -> Result<(Drain, Sinks, RuntimeMetrics)> {
    let n = shape.traffic.records.len();
    let progress = Progress::new(shape.partitions, None);
    let before = Sample::start(stack, Some(jmx), None)?;
    let group = stack.name(label);
    let processor = start_processor(stack, shape.mode, shape.traffic, input, &group, extra, Probe::of(&progress))?;
    await_done(&progress, n as u64, &format!("processor draining the backlog ({label})"), Duration::from_secs(900))
        .await?;
    let cost = before.cost(&Sample::end(stack, Some(jmx), None)?, n as u64);
    // One more statistics interval, so the producer's counters are current.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let metrics = processor.metrics.clone();
    let saturated = Sinks { redis: redis_figures(&metrics, n as u64, None), kafka: kafka_figures(&metrics) };
    processor.stop().await?;
    let seconds = progress.span_seconds();
    Ok((Drain { records_per_sec: n as f64 / seconds.max(1e-9), seconds, cost }, saturated, metrics))
}

pub(super) fn exactly_once_settings(every: Duration) -> [(&'static str, String); 2] {
    [("EXACTLY_ONCE", "true".to_string()), ("TRANSACTION_INTERVAL_MS", every.as_millis().to_string())]
}

/// The backlog drained exactly-once and at-least-once in turn, after the
/// `first` at-least-once drain.
async fn drain_exactly_once(
    stack: &Stack,
    jmx: &Jmx,
    shape: &Shape<'_>,
    input: &str,
    every: Duration,
    first: &Drain,
) -> Result<ExactlyOnceDrains> {
    let settings = exactly_once_settings(every);
    let (mut at_least_once, mut exactly_once) = (vec![first.clone()], Vec::new());
    let (mut committed, mut aborted) = (0, 0);
    let drains = shape.exactly_once_drains;
    for i in 0..drains {
        eprintln!("  processor draining the backlog with exactly-once outputs ({} ms transactions)", every.as_millis());
        let (drain, _, metrics) =
            drain_processor(stack, jmx, shape, input, &format!("drain-eos{i}"), &settings).await?;
        committed += metrics.transactions.with_label_values(&["committed"]).get();
        aborted += metrics.transactions.with_label_values(&["aborted"]).get();
        exactly_once.push(drain);
        if at_least_once.len() < drains {
            eprintln!("  processor draining the backlog at-least-once again");
            at_least_once.push(drain_processor(stack, jmx, shape, input, &format!("drain-alo{i}"), &[]).await?.0);
        }
    }
    let (a, e) = (Medians::of(&at_least_once), Medians::of(&exactly_once));
    let pair_ratios: Vec<f64> =
        exactly_once.iter().zip(&at_least_once).map(|(e, a)| e.records_per_sec / a.records_per_sec.max(1e-9)).collect();
    Ok(ExactlyOnceDrains {
        interval_ms: every.as_millis() as u64,
        over_at_least_once: e.records_per_sec / a.records_per_sec.max(1e-9),
        over_at_least_once_paired: median(&pair_ratios),
        pair_ratios,
        at_least_once_median: a,
        exactly_once_median: e,
        at_least_once,
        exactly_once,
        transactions_committed: committed,
        transactions_aborted: aborted,
    })
}

/// The fair ceiling drains the backlog with a group of its own (and, with
/// `transactions`, in transactions committed at that interval).
async fn drain_ceiling(
    stack: &Stack,
    jmx: &Jmx,
    shape: &Shape<'_>,
    input: &str,
    output: &str,
    swaps: &Arc<Vec<Vec<u8>>>,
    transactions: Option<Duration>,
) -> Result<(Ceiling, Cost)> {
    let n = shape.traffic.records.len();
    let group = stack.name(if transactions.is_some() { "ceiling-txn" } else { "ceiling" });
    let (config, _, _) = stack.processor_config(input, &group, &[])?;
    let redis = match shape.mode {
        Mode::Full => Some((stack.redis_url.clone(), format!("{input}:{group}:"))),
        Mode::Kafka => None,
    };
    let (output, swaps) = (output.to_string(), swaps.clone());
    let before = Sample::start(stack, Some(jmx), None)?;
    let ceiling = tokio::task::spawn_blocking(move || {
        let redis = redis.map(|(url, prefix)| ceiling::RedisApply::connect(&url, prefix)).transpose()?;
        ceiling::run(&config, &output, &swaps, redis, transactions, n as u64, Duration::from_secs(600))
    })
    .await??;
    Ok((ceiling, before.cost(&Sample::end(stack, Some(jmx), None)?, n as u64)))
}

/// The best loop ([`ceiling::run_parallel`]) drains the backlog in `input`
/// with a group of its own, writing to `output`.
async fn drain_best(
    stack: &Stack,
    jmx: &Jmx,
    shape: &Shape<'_>,
    (input, output): (&str, &str),
    swaps: &Arc<Vec<Vec<u8>>>,
    threads: usize,
) -> Result<(Ceiling, Cost)> {
    let n = shape.traffic.records.len();
    let before = Sample::start(stack, Some(jmx), None)?;
    let run = (n as u64, Duration::from_secs(600));
    let ceiling =
        spawn_best(stack, shape, (input, output), &stack.name("best"), swaps.clone(), threads, run)?.await??;
    Ok((ceiling, before.cost(&Sample::end(stack, Some(jmx), None)?, n as u64)))
}

/// Starts the best loop ([`ceiling::run_parallel`]) on a blocking thread:
/// `threads` loops reading `input` with `group`, writing to `output`, until
/// `expected` records or `timeout`.
pub(super) fn spawn_best(
    stack: &Stack,
    shape: &Shape<'_>,
    (input, output): (&str, &str),
    group: &str,
    swaps: Arc<Vec<Vec<u8>>>,
    threads: usize,
    (expected, timeout): (u64, Duration),
) -> Result<tokio::task::JoinHandle<Result<Ceiling>>> {
    let (config, _, _) = stack.processor_config(input, group, &[])?;
    let redis = (shape.mode == Mode::Full).then(|| (stack.redis_url.clone(), format!("{input}:{group}:")));
    let (output, partitions) = (output.to_string(), shape.partitions as i32);
    Ok(tokio::task::spawn_blocking(move || {
        let spec = ceiling::ParallelSpec {
            config: &config,
            output: &output,
            swaps: &swaps,
            redis,
            threads,
            partitions,
            expected,
            timeout,
        };
        ceiling::run_parallel(&spec)
    }))
}
