//! Cost across the load range: open loops at shares of the max sustained
//! rate and at fixed rates, beside the drain and the headline open loops,
//! each as whole-system CPU-µs per record and the broker's requests per
//! record. A share's rate moves with the max sustained rate; a fixed rate
//! does not, so a cost ratio that improves only because the max (its
//! denominator) got worse shows at the fixed rates.

use anyhow::Result;
use serde::Serialize;

use super::backlog::Backlog;
use super::open_loop::{OpenLoop, open_loop};
use super::{Run, Shape};
use crate::cost::Cost;
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
}

/// Runs the open loops at `shares` of `max` and at `fixed` rates, `seconds` each.
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
        loads.push(Load { label, share_of_max, run });
    }
    Ok(loads)
}

/// The drain, the headline open loops and the further loads as rows,
/// ordered by the rate they ran at (the drain last).
pub fn table(backlog: &Backlog, headline: &[&OpenLoop], share: f64, loads: &[Load]) -> Vec<LoadPoint> {
    let drain = point("drain".into(), None, backlog.processor_records_per_sec, &backlog.processor_cost, None, 0.0);
    let drain_cost = drain.system_cpu_us_per_record;
    let label = |i: usize| {
        let base = format!("{:.0}%", share * 100.0);
        if i == 0 { base } else { format!("{base} #{}", i + 1) }
    };
    let mut rows: Vec<LoadPoint> = headline
        .iter()
        .enumerate()
        .map(|(i, o)| (label(i), *o))
        .chain(loads.iter().map(|l| (l.label.clone(), &l.run)))
        .map(|(label, o)| point(label, Some(o.target_rate), o.records_per_sec, &o.cost, Some(o), drain_cost))
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
    drain_cost: f64,
) -> LoadPoint {
    let cpu = &c.cpu_us_per_record;
    let system = cpu.system();
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
    }
}
