//! The stress harness against the real stack, in two phases:
//!
//! 1. **Backlog** (the ceiling with a broker): all distinct records are
//!    produced first, then drained by a bare rdkafka consume-and-commit loop
//!    and by the processor, one after the other on the same broker and
//!    topic, so "processor ÷ bare consumer" is a same-machine ratio.
//! 2. **Rate search**: 5 s open-loop trials at rising rates until one is not
//!    sustained; the highest sustained rate is the maximum with the feeder
//!    sharing the machine (the backlog drain had it to itself).
//! 3. **Open loop** (latency): a fresh topic fed at a fixed rate (by default
//!    70% of that maximum) for the run's duration; each record's latency
//!    runs from when the schedule said it was due to when the processor
//!    finished it (coordinated omission corrected).
//!
//! Keys are dealt evenly over the partitions (`Traffic::balanced`): hashing
//! 64 pools over 12 partitions leaves some with three times the records of
//! others, and a backlog then drains at the pace of its heaviest partitions,
//! which measures the key spread, not the processor.
//!
//! Modes: `kafka` keeps pool state and the registry in memory and publishes
//! swaps to Kafka; `full` is the production handler on Redis and Kafka.
//! Either way the handler is `DexHandler`, the production code.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use serde::Serialize;
use sluice_coord::generation::Expect;
use sluice_dex::DexHandler;
use sluice_dex::outputs::InMemory;
use sluice_runtime::metrics::RuntimeMetrics;

use crate::ceiling::{self, Ceiling};
use crate::cost::{Cost, Sample};
use crate::feeder::{FeedSpec, Feeder};
use crate::jmx::Jmx;
use crate::live::{
    Bare, Fed, Instance, Measured, Partitioner, Probe, Progress, Schedule, Stack, await_assigned, await_done, by_map,
    feed,
};
use crate::machine;
use crate::stats::Latency;
use crate::traffic::Traffic;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Real broker; pool state and registry in memory.
    Kafka,
    /// Real broker and Redis: the production outputs.
    Full,
}

#[derive(Debug, Clone, Serialize)]
pub struct Options {
    pub mode: Mode,
    pub seconds: f64,
    pub transactions: u64,
    /// Open-loop rate, records/s; default 70% of the backlog drain rate.
    pub rate: Option<f64>,
    pub partitions: usize,
    /// Extra librdkafka properties for the processor (`k=v,k=v`).
    pub kafka_properties: Option<String>,
    /// A perf profile of this process during the open loop, into this file.
    pub profile: Option<std::path::PathBuf>,
    /// Also drain the backlog with the fair ceiling in Kafka transactions
    /// committed at this interval (what exactly-once outputs cost the client).
    pub ceiling_transactions: Option<Duration>,
    /// Also run the processor with exactly-once outputs, transactions at
    /// this interval (backlog drains and an open loop, same run).
    pub exactly_once: Option<Duration>,
    /// Drains of each kind in the exactly-once comparison.
    pub exactly_once_drains: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Figures {
    pub mode: Mode,
    pub distinct_records: usize,
    pub backlog: Backlog,
    /// The rate search (empty when `--rate` was given).
    pub ramp: Vec<Trial>,
    pub max_sustained_rate: Option<f64>,
    pub open_loop: OpenLoop,
    /// The open loop again, at the same rate, with exactly-once outputs
    /// (latency to the handler's completion: the transaction commits later).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_loop_exactly_once: Option<OpenLoop>,
}

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
    pub processor_records_per_sec: f64,
    pub processor_seconds: f64,
    pub processor_cost: Cost,
    pub processor_over_bare: f64,
    pub processor_over_ceiling: f64,
    /// Sink batching while the processor drained the backlog (saturated).
    pub saturated: Sinks,
    /// With `--exactly-once-ms`: the backlog drained again exactly-once,
    /// then at-least-once again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exactly_once: Option<ExactlyOnceDrains>,
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
            system_cpu_us_per_record: median(&|d| {
                let c = &d.cost.cpu_us_per_record;
                c.process + c.broker + c.redis
            }),
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

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sinks {
    pub redis: RedisFigures,
    pub kafka: KafkaFigures,
}

#[derive(Debug, Clone, Serialize)]
pub struct OpenLoop {
    pub target_rate: f64,
    pub fed: Fed,
    pub records: u64,
    /// From the feed's start to the last completion.
    pub seconds: f64,
    pub records_per_sec: f64,
    /// Due time → completion, coordinated omission corrected.
    pub latency: Latency,
    pub p99_over_p50: f64,
    /// Per record: this process is the processor alone (the feeder runs in
    /// its own process, reported as `feeder`).
    pub cost: Cost,
    pub peak_rss_mib: f64,
    pub redis: RedisFigures,
    pub kafka: KafkaFigures,
    /// Completions the schedule could not place (should be 0).
    pub unscheduled: u64,
    /// Exactly-once mode: transactions ended and how long ending one took.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transactions: Option<TransactionFigures>,
}

/// The processor's transactions over an exactly-once run.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct TransactionFigures {
    pub committed: u64,
    pub aborted: u64,
    /// Close to reopen: what releases into the next transaction wait.
    pub end_mean_ms: f64,
    /// The share of ends that took over 50 ms (a histogram bucket bound).
    pub ends_over_50ms: f64,
}

fn transaction_figures(metrics: &RuntimeMetrics) -> Option<TransactionFigures> {
    let h = &metrics.transaction_seconds;
    let count = h.get_sample_count();
    if count == 0 {
        return None;
    }
    use prometheus::core::Collector;
    let within_50ms = h
        .collect()
        .first()
        .and_then(|f| f.get_metric().first().cloned())
        .and_then(|m| {
            m.get_histogram().get_bucket().iter().find(|b| b.upper_bound() >= 0.05).map(|b| b.cumulative_count())
        })
        .unwrap_or(count);
    Some(TransactionFigures {
        committed: metrics.transactions.with_label_values(&["committed"]).get(),
        aborted: metrics.transactions.with_label_values(&["aborted"]).get(),
        end_mean_ms: h.get_sample_sum() * 1000.0 / count as f64,
        ends_over_50ms: 1.0 - within_50ms as f64 / count as f64,
    })
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct RedisFigures {
    pub round_trips: u64,
    pub commands: u64,
    pub round_trips_per_1000_records: f64,
    pub commands_per_round_trip: f64,
    /// Connections the processor holds (Redis `connected_clients` with it
    /// running, minus before it started); not measured while saturated.
    pub connections: Option<i64>,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct KafkaFigures {
    pub produce_requests: u64,
    pub produced_records: u64,
    pub records_per_produce_request: f64,
    /// The processor's connections to the broker (this process's, counted from the kernel's
    /// tables, less those open before it started); `None` in a report from before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connections: Option<i64>,
}

/// Starts a processor on `input` for `mode`, reporting to `progress`.
pub fn start_processor(
    stack: &Stack,
    mode: Mode,
    traffic: &Traffic,
    input: &str,
    group: &str,
    extra: &[(&str, String)],
    probe: Probe,
) -> Result<Instance> {
    let (runtime_config, redis, dex) = stack.processor_config(input, group, extra)?;
    match mode {
        Mode::Full => Instance::start(runtime_config, |rt| {
            // A fresh group on a fresh topic: no commits record a generation.
            let inner = DexHandler::new(dex, &redis, rt.metrics(), Expect::Nothing)?;
            Ok(Measured { inner, probe })
        }),
        Mode::Kafka => Instance::start(runtime_config, |rt| {
            let outputs = InMemory::new(traffic.tokens());
            let inner = DexHandler::with_outputs(dex, outputs, &rt.metrics().registry);
            Ok(Measured { inner, probe })
        }),
    }
}

/// Creates a processor input topic (and its swaps and dead-letter topics)
/// and, in full mode, publishes the token registry under its prefix.
pub async fn prepare_input(stack: &Stack, mode: Mode, traffic: &Traffic, input: &str, partitions: usize) -> Result<()> {
    stack.processor_topics(input, partitions as i32).await?;
    if mode == Mode::Full {
        let mut conn = stack.redis().await?;
        sluice_dex::registry::publish(&mut conn, &format!("{input}:"), &traffic.genesis.tokens())
            .await
            .context("publishing the token registry")?;
    }
    Ok(())
}

pub async fn run(options: &Options) -> Result<Figures> {
    let mut stack = Stack::from_env()?;
    stack.processor_properties = options.kafka_properties.clone();
    let jmx = Jmx::from_env()?;
    let (mode, partitions) = (options.mode, options.partitions);
    eprintln!("  generating {} transactions of chainsim traffic", options.transactions);
    let traffic = Arc::new(Traffic::generate(options.transactions));
    let keys = traffic.balanced(partitions);
    let partitioner = by_map(keys.clone(), partitions);
    let shape = Shape {
        mode,
        traffic: &traffic,
        partitioner: &partitioner,
        keys: &keys,
        partitions,
        ceiling_transactions: options.ceiling_transactions,
        exactly_once: options.exactly_once,
        exactly_once_drains: options.exactly_once_drains.max(1),
    };
    let backlog = backlog(&stack, &jmx, &shape).await?;

    // Phase 2: the highest rate the processor sustains with the feeder
    // running beside it (the backlog rate had the machine to itself), then
    // the open loop at 70% of that.
    let ramp = match options.rate {
        Some(_) => Vec::new(),
        None => ramp(&stack, &shape, backlog.processor_records_per_sec).await?,
    };
    let max_sustained = ramp
        .iter()
        .filter(|t| t.sustained)
        .map(|t| t.rate)
        .fold(None, |m: Option<f64>, r| Some(m.map_or(r, |m| m.max(r))));
    let rate = options.rate.unwrap_or(0.7 * max_sustained.unwrap_or(backlog.processor_records_per_sec));
    let profile = options.profile.as_deref();
    let open_loop_exactly_once = match options.exactly_once {
        Some(every) => {
            let extra = exactly_once_settings(every);
            let run = Run { label: "open-eos", profile: None, extra: &extra };
            Some(open_loop(&stack, Some(&jmx), &shape, rate, options.seconds, run).await?)
        }
        None => None,
    };
    let run = Run { label: "open", profile, extra: &[] };
    let open_loop = open_loop(&stack, Some(&jmx), &shape, rate, options.seconds, run).await?;
    for failure in stack.delete_run_topics().await {
        eprintln!("  could not delete a topic of this run: {failure}");
    }
    Ok(Figures {
        mode,
        distinct_records: traffic.records.len(),
        backlog,
        ramp,
        max_sustained_rate: max_sustained,
        open_loop,
        open_loop_exactly_once,
    })
}

/// Phase 1: one backlog, drained by the bare consumer, by the fair ceiling,
/// then by the processor, each with a group of its own, one after the other.
async fn backlog(stack: &Stack, jmx: &Jmx, shape: &Shape<'_>) -> Result<Backlog> {
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

    let (drain, saturated, _) = drain_processor(stack, jmx, shape, &input, "drain", &[]).await?;
    let (processor_rate, processor_seconds, processor_cost) =
        (drain.records_per_sec, drain.seconds, drain.cost.clone());
    let exactly_once = match shape.exactly_once {
        Some(every) => Some(drain_exactly_once(stack, jmx, shape, &input, every, &drain).await?),
        None => None,
    };
    Ok(Backlog {
        produce,
        bare_consumer: bare,
        bare_consumer_cost,
        ceiling,
        ceiling_cost,
        ceiling_transactional,
        processor_records_per_sec: processor_rate,
        processor_seconds,
        processor_cost,
        processor_over_bare: processor_rate / bare.records_per_sec,
        processor_over_ceiling: processor_rate / ceiling.records_per_sec,
        saturated,
        exactly_once,
    })
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

fn exactly_once_settings(every: Duration) -> [(&'static str, String); 2] {
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

/// What every phase of a run shares.
struct Shape<'a> {
    mode: Mode,
    traffic: &'a Arc<Traffic>,
    partitioner: &'a Partitioner,
    /// Key → partition, what `partitioner` deals (the feeder process gets it).
    keys: &'a HashMap<String, usize>,
    partitions: usize,
    ceiling_transactions: Option<Duration>,
    exactly_once: Option<Duration>,
    exactly_once_drains: usize,
}

/// What names one open loop and sets it apart: its topics' and group's
/// label, a perf profile to record, further processor settings.
struct Run<'a> {
    label: &'a str,
    profile: Option<&'a std::path::Path>,
    extra: &'a [(&'a str, String)],
}

/// One trial of the rate search.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Trial {
    pub rate: f64,
    pub sustained: bool,
    pub p99_ms: f64,
    /// From the feed's start to the last completion, over the feed's length.
    pub seconds: f64,
}

/// Trials of [`TRIAL_SECONDS`], from 40% of the backlog rate: up by 15% a
/// step after a sustained trial, down by 25% after a failed one until one
/// is sustained; the search ends at the first failure above a success. A
/// trial is sustained when every record is done within half a second of
/// the feed's end, the feeder kept its schedule, and p99 is within
/// [`SUSTAINED_P99`] (a rate that keeps up only by queueing is not).
const TRIAL_SECONDS: f64 = 5.0;
const SUSTAINED_P99: Duration = Duration::from_millis(250);

async fn ramp(stack: &Stack, shape: &Shape<'_>, backlog_rate: f64) -> Result<Vec<Trial>> {
    let mut trials: Vec<Trial> = Vec::new();
    let mut rate = (0.4 * backlog_rate).max(500.0);
    for step in 0..16 {
        let label = format!("trial{step}");
        let o = open_loop(stack, None, shape, rate, TRIAL_SECONDS, Run { label: &label, profile: None, extra: &[] })
            .await?;
        let p99_ms = o.latency.p99_ns as f64 / 1e6;
        let sustained = o.seconds <= TRIAL_SECONDS + 0.5
            && o.fed.seconds <= TRIAL_SECONDS * 1.02
            && o.latency.p99_ns <= SUSTAINED_P99.as_nanos() as u64;
        trials.push(Trial { rate, sustained, p99_ms, seconds: o.seconds });
        eprintln!(
            "  trial at {rate:.0} records/s: {} (p99 {p99_ms:.1} ms, done {:.2} s after a {:.2} s feed)",
            if sustained { "sustained" } else { "not sustained" },
            o.seconds,
            o.fed.seconds
        );
        let any_sustained = trials.iter().any(|t| t.sustained);
        match (sustained, any_sustained) {
            (true, _) => rate *= 1.15,
            (false, true) => break,
            (false, false) if rate > 500.0 => rate = (rate * 0.75).max(500.0),
            (false, false) => break,
        }
    }
    Ok(trials)
}

/// Feeds `rate` records/s for `seconds` to a fresh topic from a feeder
/// process while a processor handles them; latency from each record's due
/// time. The broker's request counts are read when `jmx` is given (the
/// rate search's trials skip them); `profile` records this process with
/// perf from the feed's second second to 2 s before its end.
async fn open_loop(
    stack: &Stack,
    jmx: Option<&Jmx>,
    shape: &Shape<'_>,
    rate: f64,
    seconds: f64,
    run: Run<'_>,
) -> Result<OpenLoop> {
    let Run { label, profile, extra } = run;
    let (mode, traffic, partitions) = (shape.mode, shape.traffic, shape.partitions);
    let total = (rate * seconds) as usize;
    let input = stack.name(label);
    prepare_input(stack, mode, traffic, &input, partitions).await?;
    let schedule = Arc::new(Schedule::new(traffic, total, shape.partitioner, partitions, rate));
    let progress = Progress::new(partitions, Some(schedule.clone()));
    let mut conn = stack.redis().await?;
    let clients_before = Stack::redis_clients(&mut conn).await?;
    sluice_service::connections::declare("kafka", &stack.kafka.brokers);
    let kafka_before = kafka_connections();
    let spec = FeedSpec {
        brokers: stack.kafka.brokers.clone(),
        topic: input.clone(),
        transactions: traffic.payloads.len() as u64,
        total,
        rate,
        partitions: shape.keys.clone(),
        partition_count: partitions,
    };
    let mut feeder = tokio::task::spawn_blocking(move || Feeder::spawn(&spec)).await??;
    let processor = start_processor(stack, mode, traffic, &input, &stack.name(label), extra, Probe::of(&progress))?;
    await_assigned(std::slice::from_ref(&processor), partitions, Duration::from_secs(60)).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let connections = Stack::redis_clients(&mut conn).await? - clients_before;
    let kafka_connections = kafka_connections() - kafka_before;
    let metrics = processor.metrics.clone();
    let before = Sample::start(stack, jmx, Some(feeder.pid()))?;
    eprintln!("  open loop: {total} records at {rate:.0} records/s for {seconds} s");
    let started = feeder.start(Duration::from_millis(50))?;
    schedule.start_at(started);
    let perf = profile.map(|path| record_profile(path, seconds - 3.0)).transpose()?;
    await_done(&progress, total as u64, "open loop", Duration::from_secs_f64(seconds + 300.0)).await?;
    let elapsed = started.elapsed().as_secs_f64();
    let cost = before.cost(&Sample::end(stack, jmx, Some(feeder.pid()))?, total as u64);
    let fed = tokio::task::spawn_blocking(move || feeder.finish()).await??;
    if let Some(perf) = perf {
        let status = tokio::task::spawn_blocking(move || perf.wait_with_output()).await??;
        anyhow::ensure!(status.status.success(), "perf record failed: {}", String::from_utf8_lossy(&status.stderr));
    }
    // One more statistics interval, so the producer's counters are current.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let redis = redis_figures(&metrics, total as u64, Some(connections));
    let kafka = KafkaFigures { connections: Some(kafka_connections), ..kafka_figures(&metrics) };
    processor.stop().await?;

    let latency = Latency::of(&progress.latency());
    Ok(OpenLoop {
        target_rate: rate,
        fed,
        records: total as u64,
        seconds: elapsed,
        records_per_sec: total as f64 / elapsed,
        p99_over_p50: latency.p99_ns as f64 / latency.p50_ns.max(1) as f64,
        latency,
        cost,
        peak_rss_mib: machine::peak_rss_mib(),
        redis,
        kafka,
        unscheduled: progress.unscheduled.load(std::sync::atomic::Ordering::Relaxed),
        transactions: transaction_figures(&metrics),
    })
}

fn redis_figures(metrics: &RuntimeMetrics, records: u64, connections: Option<i64>) -> RedisFigures {
    let round_trips = metrics.sink_round_trips.with_label_values(&["redis"]).get();
    let commands = metrics.sink_batch_size.with_label_values(&["redis"]).get_sample_sum() as u64;
    RedisFigures {
        round_trips,
        commands,
        round_trips_per_1000_records: round_trips as f64 * 1000.0 / records.max(1) as f64,
        commands_per_round_trip: commands as f64 / round_trips.max(1) as f64,
        connections,
    }
}

fn kafka_figures(metrics: &RuntimeMetrics) -> KafkaFigures {
    let (requests, records) = (metrics.produce_requests.get(), metrics.produced_records.get());
    KafkaFigures {
        produce_requests: requests,
        produced_records: records,
        records_per_produce_request: records as f64 / requests.max(1) as f64,
        connections: None,
    }
}

/// This process's established connections to the broker's port.
fn kafka_connections() -> i64 {
    sluice_service::connections::count().get("kafka").copied().unwrap_or(0)
}

/// Starts `perf record` on this process: after a second, for `seconds`,
/// DWARF call graphs at 299 Hz (enough samples, little disturbance).
fn record_profile(path: &std::path::Path, seconds: f64) -> Result<std::process::Child> {
    let pid = std::process::id().to_string();
    let script = format!(
        "sleep 1; exec perf record -q -F 299 --call-graph dwarf,32768 -p {pid} -o '{}' -- sleep {:.0}",
        path.display(),
        seconds.max(1.0)
    );
    std::process::Command::new("sh")
        .args(["-c", &script])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("starting perf record (is perf installed?)")
}
