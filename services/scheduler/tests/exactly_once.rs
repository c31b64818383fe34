//! Three scheduler replicas, a job every second, replicas killed with
//! SIGKILL and restarted at random (once all three at the same time) for
//! over 60 ticks: every tick ran exactly once or is recorded as not run
//! (missed; abandoned by a killed holder; or skipped, under the overlap
//! policy, while the killed holder's lease had not lapsed yet); no tick ran
//! twice, by the run history and by the job's own fenced effect counter.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{Replica, redis, store};
use sluice_scheduler::jobs::heartbeat::effect_key;

/// A small deterministic generator (the seed is printed, to replay a run).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

const RUN_FOR: Duration = Duration::from_secs(75);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tick_runs_once_across_replicas_killed_at_random() {
    let prefix = format!("{}:", sluice_testkit::unique("sched-once"));
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_nanos() as u64;
    eprintln!("seed {seed}");
    let mut rng = Lcg(seed);
    let env = [
        ("JOB_HEARTBEAT_SCHEDULE", "* * * * * *"),
        ("JOB_TOKEN_REFRESH_ENABLED", "false"),
        ("JOB_POOL_RECONCILE_ENABLED", "false"),
        ("LEASE_TTL_MS", "1500"),
    ];
    let mut replicas: Vec<Replica> = (0..3).map(|i| Replica::new(&format!("once-{i}"), &prefix, &env)).collect();
    for r in &mut replicas {
        r.start();
    }
    for r in &replicas {
        r.wait_ready(Duration::from_secs(30)).await;
    }

    let started = Instant::now();
    let mut down_until: [Option<Instant>; 3] = [None; 3];
    let mut next_kill = started + Duration::from_millis(2_000 + rng.below(2_000));
    let mut all_down_done = false;
    let mut kills = 0;
    while started.elapsed() < RUN_FOR {
        let now = Instant::now();
        for (i, r) in replicas.iter_mut().enumerate() {
            if down_until[i].is_some_and(|t| now >= t) {
                r.start();
                down_until[i] = None;
            }
        }
        if !all_down_done && started.elapsed() > RUN_FOR / 2 {
            // Everyone down for 4 s: those ticks must be recorded as missed.
            for (i, r) in replicas.iter_mut().enumerate() {
                r.kill();
                kills += 1;
                down_until[i] = Some(now + Duration::from_millis(4_000));
            }
            all_down_done = true;
        } else if now >= next_kill {
            let i = rng.below(3) as usize;
            if replicas[i].is_running() {
                replicas[i].kill();
                kills += 1;
                down_until[i] = Some(now + Duration::from_millis(300 + rng.below(3_000)));
            }
            next_kill = now + Duration::from_millis(1_000 + rng.below(3_000));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for r in &mut replicas {
        if r.is_running() {
            let (code, _) = r.terminate(Duration::from_secs(20));
            assert_eq!(code, Some(0), "{}", r.log_tail());
        }
    }

    let store = store(&prefix).await;
    let runs = store.all_runs("heartbeat").await.expect("runs");
    // Every tick's records; a `missed` record covers `ticks` ticks.
    let mut by_tick: BTreeMap<i64, Vec<&str>> = BTreeMap::new();
    for run in &runs {
        if run.outcome == "missed" {
            let span = (run.last_tick_ms - run.tick_ms) / 1000 + 1;
            assert_eq!(span as u64, run.ticks, "a missed record counts its ticks: {run:?}");
            for k in 0..span {
                by_tick.entry(run.tick_ms + k * 1000).or_default().push("missed");
            }
        } else {
            by_tick.entry(run.tick_ms).or_default().push(run.outcome.as_str());
        }
    }
    let (&first, &last) = (by_tick.keys().next().expect("ticks"), by_tick.keys().last().expect("ticks"));
    let mut conn = redis().await;
    let (mut succeeded, mut missed, mut other) = (0, 0, Vec::new());
    for tick in (first..=last).step_by(1000) {
        let outcomes = by_tick.get(&tick).cloned().unwrap_or_default();
        let effects: Option<i64> =
            redis::cmd("GET").arg(effect_key(&prefix, tick)).query_async(&mut conn).await.expect("GET");
        let effects = effects.unwrap_or(0);
        let wins = outcomes.iter().filter(|o| **o == "succeeded").count();
        assert!(wins <= 1, "tick {tick} ran {wins} times: {outcomes:?}");
        assert!(effects <= 1, "tick {tick}'s effect happened {effects} times: {outcomes:?}");
        assert!(
            !outcomes.is_empty(),
            "tick {tick} neither ran nor was recorded; around it: {:?}",
            by_tick.range(tick - 3000..tick + 3000).collect::<Vec<_>>()
        );
        if wins == 1 {
            assert_eq!(effects, 1, "tick {tick} succeeded, so its effect happened once: {outcomes:?}");
            assert_eq!(outcomes.len(), 1, "a tick that ran has no other record: {outcomes:?}");
            succeeded += 1;
        } else if outcomes.iter().all(|o| *o == "missed") {
            assert_eq!(effects, 0, "a missed tick has no effect");
            assert_eq!(outcomes.len(), 1, "{tick}: {outcomes:?}");
            missed += 1;
        } else {
            // A holder killed mid-run leaves an abandoned run (its effect may
            // or may not have happened, never twice), and its lease holds the
            // job until it lapses (1.5 s): a tick due meanwhile is skipped
            // under the overlap policy.
            assert!(outcomes.iter().all(|o| *o == "abandoned" || *o == "skipped"), "tick {tick}: {outcomes:?}");
            assert!(effects <= 1, "tick {tick}: {outcomes:?}");
            other.push(tick);
        }
    }
    let ticks = (last - first) / 1000 + 1;
    eprintln!(
        "{ticks} ticks: {succeeded} ran once, {missed} recorded missed, {} abandoned or skipped behind a dead holder's lease; {kills} SIGKILLs",
        other.len()
    );
    assert!(ticks >= 60, "at least 60 ticks: {ticks}");
    assert!(kills >= 10, "replicas were killed: {kills}");
    assert!(missed >= 2, "the all-down window was recorded as missed: {missed}");
    // Each kill can leave one abandoned tick and skip the ticks its lease still covers (2 at most).
    assert!(other.len() <= 3 * kills, "abandoned and skipped ticks come only from kills: {other:?}");
    assert_eq!(succeeded + missed + other.len() as i64, ticks);
}
