//! The stress harness against the real stack, in two phases:
//!
//! 1. **Backlog** (the ceiling with a broker): all distinct records are
//!    produced first, then drained by a bare rdkafka consume-and-commit loop
//!    and by the processor, one after the other on the same broker and
//!    topic, so "processor ÷ bare consumer" is a same-machine ratio.
//! 2. **Rate search**: open-loop trials (`--trial-seconds`) at rising rates until one is not
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

mod backlog;
mod loads;
mod open_loop;
mod sinks;
mod timeline;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use serde::Serialize;
use sluice_coord::generation::Expect;
use sluice_dex::DexHandler;
use sluice_dex::outputs::InMemory;

use crate::cost::Cost;
use crate::jmx::Jmx;
use crate::live::{Instance, Measured, Partitioner, Probe, Stack, by_map};
use crate::traffic::Traffic;
use backlog::{backlog, exactly_once_settings};
use open_loop::{open_loop, ramp};

pub use backlog::{Backlog, Drain, ExactlyOnceDrains};
pub use loads::{Load, LoadPoint};
pub use open_loop::{OpenLoop, Trial};

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
    /// Extra librdkafka properties for the open loops' feeder.
    pub feeder_properties: Option<String>,
    /// Topic configs for every topic the run creates.
    pub topic_config: Vec<(String, String)>,
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
    /// The processor's drains of the backlog; the median one is reported.
    pub drains: usize,
    /// Loops of the best ceiling, on one shared producer (0: not run).
    pub ceiling_threads: usize,
    /// Open loops at the headline rate, one after the other.
    pub repeats: usize,
    /// Further open loops at these shares of the max sustained rate, and
    /// at these fixed rates, `load_seconds` each.
    pub loads: Vec<f64>,
    pub fixed_rates: Vec<f64>,
    pub load_seconds: f64,
    /// An unmeasured open loop at [`WARMUP_RATE`] first, and another at the
    /// headline rate before the headline loops, s each (0: a cold run).
    pub warmup_seconds: f64,
    /// The length of each of the rate search's trials, s.
    pub trial_seconds: f64,
}

/// The warm-up's rate, records/s: what a just-started broker serves without
/// falling behind, so the warm-up warms rather than stalls.
const WARMUP_RATE: f64 = 20_000.0;

#[derive(Debug, Clone, Serialize)]
pub struct Figures {
    pub mode: Mode,
    pub distinct_records: usize,
    pub backlog: Backlog,
    /// The rate search (empty when `--rate` was given).
    pub ramp: Vec<Trial>,
    pub max_sustained_rate: Option<f64>,
    pub open_loop: OpenLoop,
    /// The open loop again at the same rate, `--repeats` − 1 times.
    pub open_loop_repeats: Vec<OpenLoop>,
    /// Further open loops across the load range.
    pub loads: Vec<Load>,
    /// The best loop at the headline rate, `--load-seconds` long.
    pub headline_best: Option<Cost>,
    /// Every drain and open loop of the run, as cost against load.
    pub cost_by_load: Vec<LoadPoint>,
    /// The broker's uptime when the run began, s, and whether the warm-up ran.
    pub broker_uptime_seconds: Option<f64>,
    /// The broker's `-Xmx` (`SLUICE_KAFKA_HEAP` of the stack).
    pub broker_heap: Option<String>,
    pub warmed_up: bool,
    /// The open loop again, at the same rate, with exactly-once outputs
    /// (latency to the handler's completion: the transaction commits later).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_loop_exactly_once: Option<OpenLoop>,
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
    stack.topic_config = options.topic_config.clone();
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
        ceiling_threads: options.ceiling_threads,
        feeder_properties: options.feeder_properties.clone(),
        exactly_once: options.exactly_once,
        exactly_once_drains: options.exactly_once_drains.max(1),
        drains: options.drains.max(1),
    };
    let broker_uptime_seconds = stack.uptime("kafka");
    let broker_heap = stack.broker_heap();
    let warmed_up = options.warmup_seconds > 0.0;
    if warmed_up {
        eprintln!("  warm-up (not measured): {WARMUP_RATE:.0} records/s for {} s", options.warmup_seconds);
        let run = Run { label: "warmup", profile: None, extra: &[] };
        open_loop(&stack, None, &shape, WARMUP_RATE, options.warmup_seconds, run).await?;
    }
    let backlog = backlog(&stack, &jmx, &shape).await?;

    // Phase 2: the highest rate the processor sustains with the feeder
    // running beside it (the backlog rate had the machine to itself), then
    // the open loops at 70% of that, then the rest of the load range.
    let ramp = match options.rate {
        Some(_) => Vec::new(),
        None => ramp(&stack, &shape, backlog.processor_records_per_sec, options.trial_seconds).await?,
    };
    let max_sustained = ramp
        .iter()
        .filter(|t| t.sustained)
        .map(|t| t.rate)
        .fold(None, |m: Option<f64>, r| Some(m.map_or(r, |m| m.max(r))));
    let max = max_sustained.unwrap_or(backlog.processor_records_per_sec);
    let rate = options.rate.unwrap_or(HEADLINE_SHARE * max);
    let (open_loop_exactly_once, mut headline) = headline(&stack, &jmx, &shape, options, rate).await?;
    let headline_best = loads::best_at(&stack, &jmx, &shape, rate, options.load_seconds, "best-headline").await?;
    let range = (options.loads.as_slice(), options.fixed_rates.as_slice());
    let loads = loads::run(&stack, &jmx, &shape, max, range, options.load_seconds).await?;
    let share = if options.rate.is_some() { rate / max } else { HEADLINE_SHARE };
    let headlines = (&headline.iter().collect::<Vec<_>>()[..], headline_best.as_ref());
    let cost_by_load = loads::table(&backlog, headlines, share, &loads);
    for failure in stack.delete_run_topics().await {
        eprintln!("  could not delete a topic of this run: {failure}");
    }
    let open_loop = headline.remove(0);
    Ok(Figures {
        mode,
        distinct_records: traffic.records.len(),
        backlog,
        ramp,
        max_sustained_rate: max_sustained,
        open_loop,
        open_loop_repeats: headline,
        loads,
        headline_best,
        cost_by_load,
        broker_uptime_seconds,
        broker_heap,
        warmed_up,
        open_loop_exactly_once,
    })
}

/// The open loops at the headline `rate`: exactly-once first when asked
/// for, then `--repeats` at-least-once ones (the first one profiled).
async fn headline(
    stack: &Stack,
    jmx: &Jmx,
    shape: &Shape<'_>,
    options: &Options,
    rate: f64,
) -> Result<(Option<OpenLoop>, Vec<OpenLoop>)> {
    let exactly_once = match options.exactly_once {
        Some(every) => {
            let extra = exactly_once_settings(every);
            let run = Run { label: "open-eos", profile: None, extra: &extra };
            Some(open_loop(stack, Some(jmx), shape, rate, options.seconds, run).await?)
        }
        None => None,
    };
    // The broker's JIT compiles again when the rate changes: on a broker
    // warmed at WARMUP_RATE its compilers ran 1.7 s of CPU in the first 4 s
    // of an open loop at 50,000 records/s (0.8 cores at their peak).
    if options.warmup_seconds > 0.0 {
        eprintln!(
            "  warm-up at the headline rate (not measured): {rate:.0} records/s for {} s",
            options.warmup_seconds
        );
        let run = Run { label: "warmup-headline", profile: None, extra: &[] };
        open_loop(stack, None, shape, rate, options.warmup_seconds, run).await?;
    }
    let mut runs = Vec::new();
    for i in 0..options.repeats.max(1) {
        let label = format!("open{i}");
        let profile = if i == 0 { options.profile.as_deref() } else { None };
        let run = Run { label: &label, profile, extra: &[] };
        runs.push(open_loop(stack, Some(jmx), shape, rate, options.seconds, run).await?);
    }
    Ok((exactly_once, runs))
}

/// The headline open loop's share of the max sustained rate.
const HEADLINE_SHARE: f64 = 0.7;

/// What every phase of a run shares.
struct Shape<'a> {
    mode: Mode,
    traffic: &'a Arc<Traffic>,
    partitioner: &'a Partitioner,
    /// Key → partition, what `partitioner` deals (the feeder process gets it).
    keys: &'a HashMap<String, usize>,
    partitions: usize,
    ceiling_transactions: Option<Duration>,
    /// Loops of the best ceiling (0: not run).
    ceiling_threads: usize,
    /// Extra librdkafka properties for the open loops' feeder.
    feeder_properties: Option<String>,
    exactly_once: Option<Duration>,
    exactly_once_drains: usize,
    drains: usize,
}

/// What names one open loop and sets it apart: its topics' and group's
/// label, a perf profile to record, further processor settings.
struct Run<'a> {
    label: &'a str,
    profile: Option<&'a std::path::Path>,
    extra: &'a [(&'a str, String)],
}
