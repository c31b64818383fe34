//! Phases 2 and 3: the rate search and the open loop, fed from a feeder
//! process of its own at a fixed rate, latency from each record's due time.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use serde::Serialize;

use super::sinks::{
    KafkaFigures, RedisFigures, TransactionFigures, kafka_connections, kafka_figures, redis_figures,
    transaction_figures,
};
use super::timeline::{self, Sampler, Second, Stall};
use super::{Run, Shape, prepare_input, start_processor};
use crate::cost::{Cost, Sample};
use crate::feeder::{Fed, FeedSpec, Feeder};
use crate::jmx::Jmx;
use crate::live::{CompletedSecond, Probe, Progress, Schedule, Stack, await_assigned, await_done};
use crate::machine;
use crate::stats::Latency;

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
    /// Second by second (measured open loops; the rate search's trials
    /// skip it), and the worst stall named from it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub timeline: Vec<Second>,
    pub worst_stall: Option<Stall>,
    /// Completions and worst latency by second, kept for the rate search's
    /// verdict (the measured loops' `timeline` carries them).
    #[serde(skip)]
    pub completed: Vec<CompletedSecond>,
    /// Exactly-once mode: transactions ended and how long ending one took.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transactions: Option<TransactionFigures>,
}

/// One trial of the rate search.
#[derive(Debug, Clone, Serialize)]
pub struct Trial {
    pub rate: f64,
    pub sustained: bool,
    /// Of the records due after the first second (reported; not the verdict).
    pub p99_ms: f64,
    /// From the feed's start to the last completion, over the feed's length.
    pub seconds: f64,
    /// The worst latency of the records completed from the feed's last
    /// second on: what the verdict reads.
    pub end_ms: f64,
    /// The worst latency of each second's completions (by completion
    /// time), so a failed trial shows where it stalled.
    pub max_ms_by_second: Vec<f64>,
}

/// Trials of `trial_seconds` (5 s by default), from 40% of the backlog rate: up by 15% a
/// step after a sustained trial, down by 25% after a failed one until one
/// is sustained; the search ends at a rate above a success that fails twice.
///
/// A trial is sustained when the processor keeps up: every record done
/// within half a second of the feed's end, the feeder on its schedule, and
/// the records completed from the feed's last second on within
/// [`CAUGHT_UP`] of their due time. A rate above what the processor
/// sustains queues, and its queue is longest at the end; a stall it
/// recovers from within the trial (the broker's JIT at a new rate, a GC, a
/// segment roll) shows spare capacity, not a limit. Until 2026-12-07 the
/// verdict was p99 ≤ 250 ms over the trial, which one 0.3 s stall fails:
/// three runs of the same code found maxima of 70k, 85k and 178k records/s.
pub(super) async fn ramp(
    stack: &Stack,
    shape: &Shape<'_>,
    backlog_rate: f64,
    trial_seconds: f64,
) -> Result<Vec<Trial>> {
    let mut trials: Vec<Trial> = Vec::new();
    let mut rate = (0.4 * backlog_rate).max(500.0);
    for step in 0..16 {
        let label = format!("trial{step}");
        let o = open_loop(stack, None, shape, rate, trial_seconds, Run { label: &label, profile: None, extra: &[] })
            .await?;
        let p99_ms = o.latency.p99_ns as f64 / 1e6;
        let max_ms_by_second: Vec<f64> = o.completed.iter().map(|s| (s.max_ms * 10.0).round() / 10.0).collect();
        let end_ms = end_ms(&max_ms_by_second, trial_seconds);
        let sustained = sustained(o.seconds, o.fed.seconds, end_ms, trial_seconds);
        eprintln!(
            "  trial at {rate:.0} records/s: {} (worst {end_ms:.1} ms at the end, p99 {p99_ms:.1} ms, done {:.2} s after a {:.2} s feed; worst by second {max_ms_by_second:?})",
            if sustained { "sustained" } else { "not sustained" },
            o.seconds,
            o.fed.seconds
        );
        trials.push(Trial { rate, sustained, p99_ms, seconds: o.seconds, end_ms, max_ms_by_second });
        let any_sustained = trials.iter().any(|t| t.sustained);
        // One failed trial above a success is tried again before it ends the
        // search: a single stall (a GC, a neighbour) must not set the maximum.
        let failures_here = trials.iter().filter(|t| !t.sustained && t.rate == rate).count();
        if !sustained && any_sustained && failures_here == 1 {
            continue;
        }
        match (sustained, any_sustained) {
            (true, _) => rate *= 1.15,
            (false, true) => break,
            (false, false) if rate > 500.0 => rate = (rate * 0.75).max(500.0),
            (false, false) => break,
        }
    }
    Ok(trials)
}

const CAUGHT_UP: Duration = Duration::from_millis(250);

/// Whether a trial of `trial` seconds kept up (see [`ramp`]): `done` seconds
/// from the feed's start to the last completion, `fed` seconds the feeder took.
fn sustained(done: f64, fed: f64, end_ms: f64, trial: f64) -> bool {
    done <= trial + 0.5 && fed <= trial * 1.02 && end_ms <= CAUGHT_UP.as_secs_f64() * 1e3
}

/// The worst latency of the seconds from the feed's last one on, in a trial
/// of `trial` seconds.
fn end_ms(max_ms_by_second: &[f64], trial: f64) -> f64 {
    let last = (trial.ceil() as usize).saturating_sub(1);
    max_ms_by_second.iter().skip(last).fold(0.0, |m, &v| m.max(v))
}

/// Feeds `rate` records/s for `seconds` to a fresh topic from a feeder
/// process while a processor handles them; latency from each record's due
/// time. The broker's request counts are read when `jmx` is given (the
/// rate search's trials skip them); `profile` records this process with
/// perf from the feed's second second to 2 s before its end.
pub(super) async fn open_loop(
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
    let spec = feed_spec(stack, shape, &input, total, rate);
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
    let sampler = jmx.map(|_| Sampler::start(stack, &metrics, feeder.pid(), started));
    let perf = profile.map(|path| record_profile(path, seconds - 3.0)).transpose()?;
    await_done(&progress, total as u64, "open loop", Duration::from_secs_f64(seconds + 300.0)).await?;
    let elapsed = started.elapsed().as_secs_f64();
    let cost = before.cost(&Sample::end(stack, jmx, Some(feeder.pid()))?, total as u64);
    let fed = tokio::task::spawn_blocking(move || feeder.finish()).await??;
    let completed = progress.timeline();
    let timeline = match sampler {
        Some(sampler) => sampler.finish(&completed, &fed.late_ms_by_second).await,
        None => Vec::new(),
    };
    finish_profile(perf).await?;
    // One more statistics interval, so the producer's counters are current.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let redis = redis_figures(&metrics, total as u64, Some(connections));
    let kafka = KafkaFigures { connections: Some(kafka_connections), ..kafka_figures(&metrics) };
    processor.stop().await?;
    stack.drop_input(&input, &[]).await;

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
        worst_stall: timeline::worst_stall(&timeline, machine::cores()),
        timeline,
        completed,
    })
}

/// What the feeder process sends: `total` records of the run's traffic to
/// `input` at `rate`, each key to its partition.
pub(super) fn feed_spec(stack: &Stack, shape: &Shape<'_>, input: &str, total: usize, rate: f64) -> FeedSpec {
    FeedSpec {
        brokers: stack.kafka.brokers.clone(),
        topic: input.to_string(),
        transactions: shape.traffic.payloads.len() as u64,
        total,
        rate,
        partitions: shape.keys.clone(),
        partition_count: shape.partitions,
        properties: shape.feeder_properties.clone(),
    }
}

/// Waits for `perf record` to end, if one runs; an error if it failed.
async fn finish_profile(perf: Option<std::process::Child>) -> Result<()> {
    let Some(perf) = perf else { return Ok(()) };
    let status = tokio::task::spawn_blocking(move || perf.wait_with_output()).await??;
    anyhow::ensure!(status.status.success(), "perf record failed: {}", String::from_utf8_lossy(&status.stderr));
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trial_is_judged_by_how_it_ends_not_by_a_stall_it_recovered_from() {
        let recovered = [40.0, 620.0, 90.0, 35.0, 30.0, 28.0];
        assert_eq!(end_ms(&recovered, 5.0), 30.0, "from the feed's last second on");
        assert!(sustained(5.04, 5.0, end_ms(&recovered, 5.0), 5.0), "a 0.6 s stall at second 1, caught up by the end");
        let queueing = [40.0, 120.0, 210.0, 290.0, 380.0, 460.0];
        assert!(!sustained(5.3, 5.0, end_ms(&queueing, 5.0), 5.0), "the queue grows to the end");
        assert!(!sustained(5.7, 5.0, 30.0, 5.0), "done too late after the feed");
        assert!(!sustained(5.1, 5.2, 30.0, 5.0), "the feeder fell behind its schedule");
        assert_eq!(end_ms(&[], 5.0), 0.0);
        // A 2 s trial (the CI smoke's) reads its seconds from the second one on.
        assert_eq!(end_ms(&[300.0, 90.0, 40.0], 2.0), 90.0);
        assert!(sustained(2.3, 2.0, 90.0, 2.0));
        assert!(!sustained(2.6, 2.0, 90.0, 2.0), "done more than 0.5 s after a 2 s feed");
    }
}
