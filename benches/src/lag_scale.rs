//! Issue 14's scale figure: one sluice-lag poller (the real binary, a child
//! process) watching G groups × P partitions on the local broker, with the
//! poll interval production uses. The fleet (see [`setup`]) is many groups
//! per topic, each lagging at a record of its own, so the first poll must
//! read every timestamp and later polls none (the cache).
//!
//! Each run starts a fresh sluice-lag, waits for its first complete poll
//! (cold), then measures `polls` more (steady). The harness acts only in the
//! idle gap before each poll: it samples CPU times, then reads `/metrics` and
//! `/groups` (whose cost is measured and kept out of the poll's), so a poll's
//! CPU window holds the poll, its publish, and nothing else. Polls start on
//! the interval's grid (sluice-lag keeps it), which is where the gap is.
//! Every read is checked: groups, lag series, the exact total lag, a time lag
//! per group-partition matching the record's own timestamp, no poll errors.

mod setup;
mod watch;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::live::Stack;
use crate::stats;
use setup::Fleet;
pub use setup::Shape;
use watch::{Scrape, ScrapeCost, Watched};

/// How sluice-lag is told which groups to watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Selection {
    /// `SLUICE_LAG_GROUPS`: every name.
    List,
    /// `SLUICE_LAG_GROUPS_REGEX`: the run's prefix (adds `ListGroups`).
    Regex,
}

#[derive(Debug, Clone, Serialize)]
pub struct Options {
    pub shape: Shape,
    pub poll_interval_ms: u64,
    /// Steady polls measured per run.
    pub polls: usize,
    pub selections: Vec<Selection>,
    /// Runs of each selection (each a fresh sluice-lag on the same fleet).
    pub repeats: usize,
    #[serde(skip)]
    pub binary: PathBuf,
}

/// One poll as seen from outside.
#[derive(Debug, Clone, Serialize)]
pub struct Poll {
    /// `sluice_lag_poll_duration_seconds` for this poll.
    pub duration_ms: f64,
    /// sluice-lag's CPU for the poll and its publish (cold: since the process started).
    pub cpu_ms: f64,
    /// The broker's CPU over the same window.
    pub broker_cpu_ms: f64,
    /// Requests sent, by API.
    pub requests: BTreeMap<String, u64>,
    /// Group-partitions with a time lag after this poll (every timestamp known: all of them).
    pub timed: usize,
    /// Start of this poll minus the previous one's, ms (the interval when on time).
    pub period_ms: Option<i64>,
}

/// One sluice-lag process.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub selection: Selection,
    pub cold: Poll,
    pub steady: Vec<Poll>,
    /// Resident memory after the cold poll, before anything read `/metrics`.
    pub cold_rss_mib: f64,
    pub rss_mib: f64,
    pub peak_rss_mib: f64,
    /// The last read of `/metrics` (and `/groups`).
    pub scrape: ScrapeCost,
    /// Windows the harness could not keep clear (a poll running into its reads).
    pub overlaps: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Figures {
    pub groups: usize,
    pub group_partitions: usize,
    pub broker_partitions: usize,
    /// The broker's CPU over a window as long as a poll's, with no poller running.
    pub broker_idle_cpu_ms: f64,
    /// Over every run's steady polls.
    pub steady_duration: stats::Summary,
    pub steady_cpu: stats::Summary,
    pub cold_duration_max_ms: f64,
    pub cpu_us_per_group_partition: f64,
    pub broker_cpu_ms_per_poll: f64,
    pub requests_per_poll: f64,
    /// The largest poll (cold or steady) against the interval.
    pub target_met: bool,
    pub runs: Vec<Run>,
    pub note: String,
}

/// Builds sluice-lag with this benchmark's profile; its path.
pub fn build_lag() -> Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = std::process::Command::new(cargo);
    cmd.args(["build", "-q", "--locked", "-p", "sluice-lag", "--bin", "sluice-lag"]);
    if !cfg!(debug_assertions) {
        cmd.arg("--release");
    }
    let status = cmd.status().context("running cargo build -p sluice-lag")?;
    anyhow::ensure!(status.success(), "cargo build -p sluice-lag: {status}");
    let here = std::env::current_exe()?;
    Ok(here.parent().context("the benchmark has no folder")?.join("sluice-lag"))
}

pub async fn run(options: &Options) -> Result<Figures> {
    let stack = Stack::from_env()?;
    let fleet = Fleet::plan(options.shape, &stack.name("lag"));
    eprintln!(
        "creating {} topics × {} partitions, {} groups ({})",
        fleet.topics.len(),
        options.shape.partitions,
        fleet.groups.len(),
        fleet.prefix
    );
    let measured = match fleet.create(&stack).await {
        Ok(()) => measure_all(&stack, &fleet, options).await,
        Err(e) => Err(e),
    };
    let failed = fleet.delete(&stack).await;
    if !failed.is_empty() {
        eprintln!("could not delete everything of {}: {failed:?}", fleet.prefix);
    }
    measured
}

async fn measure_all(stack: &Stack, fleet: &Fleet, options: &Options) -> Result<Figures> {
    let interval = Duration::from_millis(options.poll_interval_ms);
    let idle = window(interval);
    let broker_before = stack.stack_cpu().0;
    tokio::time::sleep(idle).await;
    let broker_idle_cpu_ms = ms(stack.stack_cpu().0.saturating_sub(broker_before));
    let mut runs = Vec::new();
    for repeat in 0..options.repeats {
        for &selection in &options.selections {
            eprintln!("run {}: {selection:?}", repeat + 1);
            runs.push(measure(stack, fleet, options, selection).await?);
        }
    }
    Ok(summarise(fleet, options, broker_idle_cpu_ms, runs))
}

/// How long a steady poll's window is: from just before its start to the
/// harness's reads, which take the last 30% of the interval.
fn window(interval: Duration) -> Duration {
    interval.mul_f64(0.75)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Sleeps until Unix ms `at`.
async fn until(at: i64) {
    let wait = at - sluice_core::clock::now_ms();
    if wait > 0 {
        tokio::time::sleep(Duration::from_millis(wait as u64)).await;
    }
}

/// One fresh sluice-lag: the cold poll, then `options.polls` steady ones.
async fn measure(stack: &Stack, fleet: &Fleet, options: &Options, selection: Selection) -> Result<Run> {
    let interval = options.poll_interval_ms as i64;
    let mut env = vec![("POLL_INTERVAL_MS", interval.to_string())];
    match selection {
        Selection::List => {
            env.push(("GROUPS", fleet.groups.iter().map(|g| g.name.as_str()).collect::<Vec<_>>().join(",")))
        }
        // The prefix is letters, digits and dashes: nothing to escape.
        Selection::Regex => env.push(("GROUPS_REGEX", format!("{}-.*", fleet.prefix))),
    }
    let log = std::env::temp_dir().join(format!("{}-{selection:?}.log", fleet.prefix));
    let broker = || stack.stack_cpu().0;
    let watched = Watched::start(&options.binary, &stack.kafka.brokers, &env, &log)?;
    let (cpu0, broker0) = (watched.cpu(), broker());
    watched.ready(Duration::from_secs(120)).await?;
    let (cpu1, broker1) = (watched.cpu(), broker());
    let cold_rss_mib = watched.rss_mib().0;
    let (mut last, mut cost) = watched.scrape().await?;
    let mut problems = check(fleet, &last);
    let cold = Poll {
        duration_ms: last.poll_seconds * 1e3,
        cpu_ms: ms(cpu1 - cpu0),
        broker_cpu_ms: ms(broker1.saturating_sub(broker0)),
        requests: last.requests.clone(),
        timed: last.time_lags.len(),
        period_ms: None,
    };
    let (mut steady, mut overlaps) = (Vec::new(), usize::from(last.polls != 1));
    // The harness's reads take the last 30% of each interval, the poll the rest.
    let (lead, read) = (interval / 20, interval * 3 / 10);
    for _ in 0..options.polls {
        let start = last.at_ms + interval;
        until(start - lead).await;
        let (cpu_a, broker_a) = (watched.cpu(), broker());
        until(start + interval - read).await;
        let (cpu_b, broker_b) = (watched.cpu(), broker());
        let (now, now_cost) = watched.scrape().await?;
        overlaps += usize::from(now.polls != last.polls + 1 || sluice_core::clock::now_ms() > start + interval - lead);
        problems.extend(check(fleet, &now));
        steady.push(Poll {
            duration_ms: (now.poll_seconds - last.poll_seconds) * 1e3,
            cpu_ms: ms(cpu_b - cpu_a),
            broker_cpu_ms: ms(broker_b.saturating_sub(broker_a)),
            requests: now.requests_since(&last),
            timed: now.time_lags.len(),
            period_ms: Some(now.at_ms - last.at_ms),
        });
        (last, cost) = (now, now_cost);
    }
    let (rss_mib, peak_rss_mib) = watched.rss_mib();
    let tail = watched.log_tail();
    let code = watched.stop();
    anyhow::ensure!(problems.is_empty(), "{selection:?}: {problems:?}\n{tail}");
    anyhow::ensure!(code == Some(0), "sluice-lag exited with {code:?} on SIGTERM\n{tail}");
    Ok(Run { selection, cold, steady, cold_rss_mib, rss_mib, peak_rss_mib, scrape: cost, overlaps })
}

/// What is wrong with a read. Every time lag is known from the cold poll on:
/// a partition's groups are close together, so one fetch reaches them all.
fn check(fleet: &Fleet, s: &Scrape) -> Vec<String> {
    let (groups, gp) = (fleet.shape.groups(), fleet.shape.group_partitions());
    let mut problems = Vec::new();
    if s.groups != groups as i64 || s.lag_series != gp {
        problems.push(format!("{} groups and {} lag series, expected {groups} and {gp}", s.groups, s.lag_series));
    }
    if s.lag_sum != fleet.total_lag() as f64 {
        problems.push(format!("total lag {}, expected {}", s.lag_sum, fleet.total_lag()));
    }
    if s.errors != 0.0 {
        problems.push(format!("{} poll errors", s.errors));
    }
    if s.time_lags.len() != gp {
        problems.push(format!("{} time lags, expected {gp}", s.time_lags.len()));
    }
    let offsets: std::collections::HashMap<&str, i64> =
        fleet.groups.iter().map(|g| (g.name.as_str(), g.offset)).collect();
    let wrong = s.time_lags.iter().find(|((group, _, _), seconds)| {
        let expected = offsets.get(group.as_str()).map(|o| (s.at_ms - fleet.timestamp(*o)) as f64 / 1e3);
        expected.is_none_or(|e| (e - **seconds).abs() > 0.0015)
    });
    if let Some((at, seconds)) = wrong {
        problems.push(format!("time lag of {at:?} is {seconds} s: not the age of the record at its offset"));
    }
    problems
}

fn summarise(fleet: &Fleet, options: &Options, broker_idle_cpu_ms: f64, runs: Vec<Run>) -> Figures {
    let steady: Vec<&Poll> = runs.iter().flat_map(|r| &r.steady).collect();
    let of = |f: fn(&Poll) -> f64| stats::Summary::of(&steady.iter().map(|p| f(p)).collect::<Vec<_>>());
    let (steady_duration, steady_cpu) = (of(|p| p.duration_ms), of(|p| p.cpu_ms));
    let cold_duration_max_ms = runs.iter().map(|r| r.cold.duration_ms).fold(0.0, f64::max);
    let requests = of(|p| p.requests.values().sum::<u64>() as f64);
    let gp = fleet.shape.group_partitions();
    Figures {
        groups: fleet.shape.groups(),
        group_partitions: gp,
        broker_partitions: fleet.shape.topics * fleet.shape.partitions,
        broker_idle_cpu_ms,
        cpu_us_per_group_partition: steady_cpu.mean * 1e3 / gp as f64,
        broker_cpu_ms_per_poll: of(|p| p.broker_cpu_ms).mean,
        requests_per_poll: requests.mean,
        target_met: steady_duration.max.max(cold_duration_max_ms) < options.poll_interval_ms as f64,
        cold_duration_max_ms,
        steady_duration,
        steady_cpu,
        runs,
        note: "sluice-lag, the broker (a single KRaft node) and the harness share the machine's cores; \
               CPU windows run from just before a poll to the harness's reads, broker CPU includes its own background work"
            .into(),
    }
}

/// The runs as a table on stdout.
#[allow(clippy::print_stdout)]
pub fn print(options: &Options, f: &Figures) {
    let s = options.shape;
    println!(
        "mode lag-scale ({} groups × {} partitions = {} group-partitions on {} topics, poll interval {} ms)",
        f.groups, s.partitions, f.group_partitions, s.topics, options.poll_interval_ms
    );
    for r in &f.runs {
        let d: Vec<f64> = r.steady.iter().map(|p| p.duration_ms).collect();
        let c: Vec<f64> = r.steady.iter().map(|p| p.cpu_ms).collect();
        let (d, c) = (stats::Summary::of(&d), stats::Summary::of(&c));
        let requests = r.steady.last().map_or(0, |p| p.requests.values().sum::<u64>());
        println!(
            "  {:<5} cold {:>7.0} ms ({:>5.0} CPU-ms, {} timed)  steady p50 {:>6.0} ms max {:>6.0} ms  CPU {:>5.0} ms/poll  \
             broker {:>5.0} ms/poll  {requests} requests/poll  RSS {:.0} MiB  /metrics {:.1} MB",
            format!("{:?}", r.selection),
            r.cold.duration_ms,
            r.cold.cpu_ms,
            r.cold.timed,
            d.p50,
            d.max,
            c.mean,
            r.steady.iter().map(|p| p.broker_cpu_ms).sum::<f64>() / r.steady.len().max(1) as f64,
            r.rss_mib,
            r.scrape.metrics_bytes as f64 / 1e6,
        );
    }
    println!(
        "  target (every poll within {} ms): {}; {:.1} CPU-µs per group-partition per poll",
        options.poll_interval_ms,
        if f.target_met { "met" } else { "MISSED" },
        f.cpu_us_per_group_partition
    );
}

/// The sluice-lag binary: `given`, or built now.
pub fn binary(given: Option<&Path>) -> Result<PathBuf> {
    match given {
        Some(path) => Ok(path.to_path_buf()),
        None => build_lag(),
    }
}
