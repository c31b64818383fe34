//! Overlap and misfire policies across replicas, with scheduler engines in
//! this process against the real Redis, and a job defined here: adding a
//! job is one `Job` impl plus its settings.

mod common;

use sluice_scheduler::model::Outcome;
use sluice_scheduler::store::Store as _;
use std::sync::Arc;
use std::time::Duration;

use common::{engine, now_ms, store};
use sluice_scheduler::config::{JobDefaults, Overlap};
use sluice_scheduler::jobs::{Effects, Job, Report, RunContext, RunFuture};
use sluice_scheduler::store::RunRecord;

/// A job that works for a while.
struct Sleepy(Duration);

impl Job for Sleepy {
    fn name(&self) -> &'static str {
        "sleepy"
    }

    fn description(&self) -> &'static str {
        "Sleeps."
    }

    fn defaults(&self) -> JobDefaults {
        JobDefaults { schedule: "* * * * * *", enabled: true, timeout: Duration::from_secs(30), overlap: Overlap::Skip }
    }

    fn effects(&self) -> Effects {
        Effects::Ledger
    }

    fn run<'a>(&'a self, _: &'a RunContext) -> RunFuture<'a> {
        Box::pin(async move {
            tokio::time::sleep(self.0).await;
            Ok(Report { items: 1, ..Report::default() })
        })
    }
}

fn sleepy(ms: u64) -> Vec<Arc<dyn Job>> {
    vec![Arc::new(Sleepy(Duration::from_millis(ms)))]
}

async fn history(prefix: &str) -> Vec<RunRecord> {
    store(prefix).await.all_runs("sleepy").await.expect("runs")
}

fn runs_of(history: &[RunRecord]) -> Vec<&RunRecord> {
    history.iter().filter(|r| r.outcome == Outcome::Succeeded).collect()
}

/// No two runs of the job overlap in time, whichever replica ran them.
fn assert_no_overlap(runs: &[&RunRecord]) {
    let mut spans: Vec<(i64, i64)> = runs.iter().map(|r| (r.started_ms, r.ended_ms)).collect();
    spans.sort_unstable();
    for w in spans.windows(2) {
        assert!(w[0].1 <= w[1].0, "runs overlap: {w:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlap_skip_holds_across_replicas() {
    let prefix = format!("{}:", sluice_testkit::unique("sched-skip"));
    let env = [("JOB_SLEEPY_OVERLAP", "skip")];
    let a = engine("skip-a", &prefix, &env, sleepy(2_500)).await;
    let b = engine("skip-b", &prefix, &env, sleepy(2_500)).await;
    tokio::time::sleep(Duration::from_secs(9)).await;
    a.shutdown().await;
    b.shutdown().await;
    let history = history(&prefix).await;
    let runs = runs_of(&history);
    assert!(runs.len() >= 2, "{history:#?}");
    assert_no_overlap(&runs);
    let skipped = history.iter().filter(|r| r.outcome == Outcome::Skipped).count();
    assert!(skipped >= 3, "ticks during a run are skipped: {history:#?}");
    assert!(history.iter().filter(|r| r.outcome == Outcome::Skipped).all(|r| r.reason.contains("overlap")));
    let mut ticks: Vec<i64> = history.iter().map(|r| r.tick_ms).collect();
    let all = ticks.len();
    ticks.dedup();
    assert_eq!(ticks.len(), all, "one record per tick: {history:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlap_buffer_one_runs_the_next_tick_right_after() {
    let prefix = format!("{}:", sluice_testkit::unique("sched-buffer"));
    let env = [("JOB_SLEEPY_OVERLAP", "buffer-one")];
    let a = engine("buffer-a", &prefix, &env, sleepy(2_500)).await;
    let b = engine("buffer-b", &prefix, &env, sleepy(2_500)).await;
    tokio::time::sleep(Duration::from_secs(9)).await;
    a.shutdown().await;
    b.shutdown().await;
    let history = history(&prefix).await;
    let mut runs = runs_of(&history);
    runs.sort_by_key(|r| r.started_ms);
    assert!(runs.len() >= 3, "{history:#?}");
    assert_no_overlap(&runs);
    for w in runs.windows(2) {
        let gap = w[1].started_ms - w[0].ended_ms;
        assert!(gap < 700, "the buffered tick starts as soon as the previous run ends: {gap} ms\n{history:#?}");
        assert!(w[1].started_ms - w[1].tick_ms > 1_000, "it ran late, after waiting: {:?}", w[1]);
    }
    let skipped = history.iter().filter(|r| r.outcome == Outcome::Skipped).count();
    assert!(skipped >= 2, "with one tick buffered, the others are skipped: {history:#?}");
}

/// Runs the every-2-s job on one replica, stops it, waits `down`, starts a
/// fresh replica and returns the history.
async fn downtime(prefix: &str, env: &[(&str, &str)], down: Duration) -> Vec<RunRecord> {
    let a = engine("misfire-a", prefix, env, sleepy(10)).await;
    common::wait_for_run(&store(prefix).await, "sleepy", Duration::from_secs(10), "succeeded", |r| {
        r.outcome == Outcome::Succeeded
    })
    .await;
    a.shutdown().await;
    // Wake up 1.5 s after a tick: late for the skip policy's 1 s.
    tokio::time::sleep(down).await;
    let to_phase = (2_000 + 1_500 - now_ms().rem_euclid(2_000)) % 2_000;
    tokio::time::sleep(Duration::from_millis(to_phase as u64)).await;
    let b = engine("misfire-b", prefix, env, sleepy(10)).await;
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    b.shutdown().await;
    history(prefix).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misfire_run_latest_catches_up_once_and_records_the_rest() {
    let prefix = format!("{}:", sluice_testkit::unique("sched-latest"));
    let env = [
        ("JOB_SLEEPY_SCHEDULE", "*/2 * * * * *"),
        ("JOB_SLEEPY_MISFIRE", "run-latest"),
        ("JOB_SLEEPY_CATCH_UP_WINDOW_MS", "10000"),
    ];
    let history = downtime(&prefix, &env, Duration::from_secs(6)).await;
    let caught_up: Vec<&RunRecord> = history
        .iter()
        .filter(|r| r.owner == "misfire-b" && r.outcome == Outcome::Succeeded && r.started_ms - r.tick_ms >= 1_000)
        .collect();
    assert_eq!(caught_up.len(), 1, "the latest missed tick ran once, late: {history:#?}");
    let latest_missed = history.iter().filter(|r| r.outcome == Outcome::Missed).map(|r| r.last_tick_ms).max();
    assert_eq!(latest_missed, Some(caught_up[0].tick_ms - 2_000), "the one just before it was the last missed");
    let missed: u64 = history.iter().filter(|r| r.outcome == Outcome::Missed).map(|r| r.ticks).sum();
    assert!(missed >= 2, "the ticks before it are recorded as missed: {history:#?}");
    let ran: Vec<i64> = history.iter().filter(|r| r.outcome == Outcome::Succeeded).map(|r| r.tick_ms).collect();
    assert!(history.iter().filter(|r| r.outcome == Outcome::Missed).all(|m| !ran.contains(&m.tick_ms)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misfire_skip_runs_nothing_late() {
    let prefix = format!("{}:", sluice_testkit::unique("sched-misfire-skip"));
    let env = [("JOB_SLEEPY_SCHEDULE", "*/2 * * * * *"), ("JOB_SLEEPY_MISFIRE", "skip")];
    let history = downtime(&prefix, &env, Duration::from_secs(6)).await;
    let late: Vec<&RunRecord> =
        history.iter().filter(|r| r.outcome == Outcome::Succeeded && r.started_ms - r.tick_ms > 1_000).collect();
    assert!(late.is_empty(), "no tick runs more than 1 s late: {late:#?}");
    let missed: u64 = history.iter().filter(|r| r.outcome == Outcome::Missed).map(|r| r.ticks).sum();
    assert!(missed >= 3, "the downtime's ticks are recorded as missed: {history:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_past_its_timeout_is_stopped_and_the_job_goes_on() {
    let prefix = format!("{}:", sluice_testkit::unique("sched-timeout"));
    let env = [("JOB_SLEEPY_SCHEDULE", "*/2 * * * * *"), ("JOB_SLEEPY_TIMEOUT_MS", "500"), ("CANCEL_GRACE_MS", "200")];
    let a = engine("timeout-a", &prefix, &env, sleepy(5_000)).await;
    tokio::time::sleep(Duration::from_millis(5_500)).await;
    a.shutdown().await;
    let history = history(&prefix).await;
    let timed_out: Vec<&RunRecord> = history.iter().filter(|r| r.outcome == Outcome::TimedOut).collect();
    assert!(timed_out.len() >= 2, "every run is stopped, and the next tick runs: {history:#?}");
    for run in &timed_out {
        let took = run.ended_ms - run.started_ms;
        assert!((500..1_500).contains(&took), "stopped after the timeout and the grace: {took} ms");
    }
    assert!(history.iter().all(|r| r.outcome != Outcome::Skipped), "a stopped run frees the job: {history:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jitter_spreads_the_start_within_its_bound() {
    let prefix = format!("{}:", sluice_testkit::unique("sched-jitter"));
    let env = [("JOB_SLEEPY_JITTER_MS", "600")];
    let a = engine("jitter-a", &prefix, &env, sleepy(10)).await;
    tokio::time::sleep(Duration::from_secs(7)).await;
    a.shutdown().await;
    let history = history(&prefix).await;
    let delays: Vec<i64> = runs_of(&history).iter().map(|r| r.started_ms - r.tick_ms).collect();
    assert!(delays.len() >= 5, "{history:#?}");
    assert!(delays.iter().all(|d| (0..600 + 300).contains(d)), "within the jitter (plus scheduling slack): {delays:?}");
    assert!(delays.iter().max().is_some_and(|d| *d >= 100), "spread over the window: {delays:?}");
}
