//! Cost across the load range: open loops at shares of the max sustained
//! rate and at fixed rates, beside the drain and the headline open loops,
//! each as whole-system CPU-µs per record and the broker's requests per
//! record. A share's rate moves with the max sustained rate; a fixed rate
//! does not, so a cost ratio that improves only because the max (its
//! denominator) got worse shows at the fixed rates.
//!
//! With `--ceiling-threads`, the best loop runs at each of these rates too
//! (and at the headline rate), fed the same way: what the client and the
//! broker cost at that rate with the simplest processing, against which
//! the processor's cost at the same rate is read.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use serde::Serialize;

use super::backlog::{Backlog, spawn_best};
use super::open_loop::{OpenLoop, feed_spec, open_loop};
use super::{Run, Shape, prepare_input};
use crate::ceiling;
use crate::cost::{Cost, Sample};
use crate::feeder::Feeder;
use crate::jmx::Jmx;
use crate::live::Stack;

/// A further open loop of the load range.
#[derive(Debug, Clone, Serialize)]
pub struct Load {
    /// `30%` or `20000/s`.
    pub label: String,
    /// The share of the max sustained rate; `None` for a fixed rate.
    pub share_of_max: Option<f64>,
    pub run: OpenLoop,
    /// The best loop at the same rate (with `--ceiling-threads`).
    pub best: Option<Cost>,
}

/// One row of the cost-against-load table.
#[derive(Debug, Clone, Serialize)]
pub struct LoadPoint {
    /// `drain`, `70%` (with `#2`, `#3` for the repeats), `30%`, `20000/s`.
    pub label: String,
    /// Records/s offered (`None` for the drain: as fast as it goes).
    pub offered: Option<f64>,
    pub records_per_sec: f64,
    /// Processor + broker + Redis (the feeder, which stands in for the
    /// ingest, is left out; the broker's work for its produce is not).
    pub system_cpu_us_per_record: f64,
    pub process_cpu_us_per_record: f64,
    pub broker_cpu_us_per_record: f64,
    pub redis_cpu_us_per_record: f64,
    /// Whole-system CPU per record ÷ the drain's, same run.
    pub over_drain: f64,
    pub produce_requests_per_record: f64,
    pub fetch_requests_per_record: f64,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    /// The best loop's whole-system CPU-µs per record at the same rate, and
    /// the processor's ÷ it (the drain row: the best loop's drain).
    pub best_system_cpu_us_per_record: Option<f64>,
    pub over_best: Option<f64>,
}

/// Runs the open loops at `shares` of `max` and at `fixed` rates, `seconds`
/// each, and after each the best loop at its rate (when it runs).
pub(super) async fn run(
    stack: &Stack,
    jmx: &Jmx,
    shape: &Shape<'_>,
    max: f64,
    (shares, fixed): (&[f64], &[f64]),
    seconds: f64,
) -> Result<Vec<Load>> {
    let mut loads = Vec::new();
    let points = shares
        .iter()
        .map(|&s| (format!("{:.0}%", s * 100.0), Some(s), s * max))
        .chain(fixed.iter().map(|&r| (format!("{r:.0}/s"), None, r)));
    for (i, (label, share_of_max, rate)) in points.enumerate() {
        eprintln!("  load {label}: {rate:.0} records/s for {seconds} s");
        let name = format!("load{i}");
        let run =
            open_loop(stack, Some(jmx), shape, rate, seconds, Run { label: &name, profile: None, extra: &[] }).await?;
        let best = best_at(stack, jmx, shape, rate, seconds, &format!("best{i}")).await?;
        loads.push(Load { label, share_of_max, run, best });
    }
    Ok(loads)
}

/// The best loop ([`ceiling::run_parallel`]) fed at `rate` for `seconds`
/// from a feeder process, on fresh topics named by `label`, with a group of
/// its own; its cost per record (it times no record). `None` when the run
/// has no best loop (`--ceiling-threads 0`).
///
/// As for the processor's open loops, the window opens a second after the
/// loops start (their clients made, partitions assigned by hand, the first
/// fetches out), so it leaves their start-up out; it closes when they
/// return, which includes their last acknowledgements and a synchronous
/// commit (a few ms, against 30 s of feed by default).
pub(super) async fn best_at(
    stack: &Stack,
    jmx: &Jmx,
    shape: &Shape<'_>,
    rate: f64,
    seconds: f64,
    label: &str,
) -> Result<Option<Cost>> {
    let threads = shape.ceiling_threads;
    if threads == 0 {
        return Ok(None);
    }
    eprintln!("  best loop ({threads} threads) at {rate:.0} records/s for {seconds} s");
    let total = (rate * seconds) as usize;
    let input = stack.name(label);
    let output = format!("{input}.ceiling");
    prepare_input(stack, shape.mode, shape.traffic, &input, shape.partitions).await?;
    stack.create_topics(&[(&output, shape.partitions as i32)]).await?;
    let swaps = ceiling::swap_payloads(shape.traffic, 4096).await?;
    let spec = feed_spec(stack, shape, &input, total, rate);
    let mut feeder = tokio::task::spawn_blocking(move || Feeder::spawn(&spec)).await??;
    let group = stack.name(&format!("{label}-group"));
    let run = (total as u64, Duration::from_secs_f64(seconds + 300.0));
    let ceiling = spawn_best(stack, shape, (&input, &output), &group, Arc::new(swaps), threads, run)?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = Sample::start(stack, Some(jmx), Some(feeder.pid()))?;
    feeder.start(Duration::from_millis(50))?;
    ceiling.await??;
    let cost = before.cost(&Sample::end(stack, Some(jmx), Some(feeder.pid()))?, total as u64);
    tokio::task::spawn_blocking(move || feeder.finish()).await??;
    stack.drop_input(&input, &[&output]).await;
    Ok(Some(cost))
}

/// The drain, the headline open loops and the further loads as rows,
/// ordered by the rate they ran at (the drain last).
pub fn table(
    backlog: &Backlog,
    (headline, headline_best): (&[&OpenLoop], Option<&Cost>),
    share: f64,
    loads: &[Load],
) -> Vec<LoadPoint> {
    let best_drain = backlog.best.as_ref().map(|b| &b.cost);
    let drain = point(
        "drain".into(),
        None,
        backlog.processor_records_per_sec,
        &backlog.processor_cost,
        None,
        (0.0, best_drain),
    );
    let drain_cost = drain.system_cpu_us_per_record;
    let label = |i: usize| {
        let base = format!("{:.0}%", share * 100.0);
        if i == 0 { base } else { format!("{base} #{}", i + 1) }
    };
    let mut rows: Vec<LoadPoint> = headline
        .iter()
        .enumerate()
        // The best loop ran right after the last headline loop (never the
        // profiled one when there are several).
        .map(|(i, o)| (label(i), *o, if i + 1 == headline.len() { headline_best } else { None }))
        .chain(loads.iter().map(|l| (l.label.clone(), &l.run, l.best.as_ref())))
        .map(|(label, o, best)| {
            point(label, Some(o.target_rate), o.records_per_sec, &o.cost, Some(o), (drain_cost, best))
        })
        .collect();
    rows.sort_by(|a, b| a.offered.unwrap_or(0.0).total_cmp(&b.offered.unwrap_or(0.0)));
    rows.push(LoadPoint { over_drain: 1.0, ..drain });
    rows
}

fn point(
    label: String,
    offered: Option<f64>,
    records_per_sec: f64,
    c: &Cost,
    open: Option<&OpenLoop>,
    (drain_cost, best): (f64, Option<&Cost>),
) -> LoadPoint {
    let cpu = &c.cpu_us_per_record;
    let system = cpu.system();
    let best = best.map(|b| b.cpu_us_per_record.system());
    let n = c.records.max(1) as f64;
    LoadPoint {
        label,
        offered,
        records_per_sec,
        system_cpu_us_per_record: system,
        process_cpu_us_per_record: cpu.process,
        broker_cpu_us_per_record: cpu.broker,
        redis_cpu_us_per_record: cpu.redis,
        over_drain: if drain_cost > 0.0 { system / drain_cost } else { 1.0 },
        produce_requests_per_record: c.broker.produce_requests as f64 / n,
        fetch_requests_per_record: c.broker.fetch_requests as f64 / n,
        p50_ms: open.map(|o| o.latency.p50_ns as f64 / 1e6),
        p99_ms: open.map(|o| o.latency.p99_ns as f64 / 1e6),
        best_system_cpu_us_per_record: best,
        over_best: best.filter(|b| *b > 0.0).map(|b| system / b),
    }
}
