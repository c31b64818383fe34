//! Three real scheduler processes run the heartbeat every 2 s with a 0.8 s
//! lease (so a dead run's tick can be taken over within its 2 s window) for
//! over 30 ticks, while replicas are SIGKILLed and restarted at random (once
//! all three together), and the holder of a tick is SIGSTOPped the moment
//! its write lands (the way a GC pause or a frozen node hits) and continued
//! after its lease lapsed. For every tick, the heartbeat's own effect
//! counter, which counts how often its write really ran, is at most 1; the
//! history names the one run that applied it (`applied`), or says why
//! nothing did; and no tick succeeded twice.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{Replica, RunRecord, redis, store};
use sluice_scheduler::jobs::heartbeat::effect_key;
use sluice_scheduler::model::Outcome;
use sluice_scheduler::store::Store as _;

/// A small deterministic generator (the seed is printed, to replay a run).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

const RUN_FOR: Duration = Duration::from_secs(70);
const PERIOD_MS: i64 = 2_000;
const ENV: [(&str, &str); 5] = [
    ("JOB_HEARTBEAT_SCHEDULE", "*/2 * * * * *"),
    ("JOB_TOKEN_REFRESH_ENABLED", "false"),
    ("JOB_POOL_RECONCILE_ENABLED", "false"),
    ("LEASE_TTL_MS", "800"),
    ("CANCEL_GRACE_MS", "200"),
];

/// The chaos' own count of what it did.
#[derive(Debug, Default)]
struct Chaos {
    kills: u32,
    stops_after_write: u32,
}

/// Three replicas, killed, restarted and stopped at random for `RUN_FOR`.
struct Cluster {
    replicas: Vec<Replica>,
    down_until: [Option<Instant>; 3],
    stopped_until: [Option<Instant>; 3],
    rng: Lcg,
    chaos: Chaos,
}

impl Cluster {
    fn restart_due(&mut self, now: Instant) {
        for (i, r) in self.replicas.iter_mut().enumerate() {
            if self.down_until[i].is_some_and(|t| now >= t) {
                r.start();
                self.down_until[i] = None;
            }
            if self.stopped_until[i].is_some_and(|t| now >= t) {
                r.resume();
                self.stopped_until[i] = None;
            }
        }
    }

    fn kill(&mut self, i: usize, now: Instant, down: Duration) {
        if self.replicas[i].is_running() && self.stopped_until[i].is_none() {
            self.replicas[i].kill();
            self.chaos.kills += 1;
            self.down_until[i] = Some(now + down);
        }
    }

    /// Everyone down for `down`: the stopped killed too, the down kept down.
    fn kill_all(&mut self, now: Instant, down: Duration) {
        for i in 0..self.replicas.len() {
            if self.stopped_until[i].take().is_some() {
                self.replicas[i].resume();
            }
            if self.replicas[i].is_running() {
                self.replicas[i].kill();
                self.chaos.kills += 1;
            }
            self.down_until[i] = Some(self.down_until[i].map_or(now + down, |t| t.max(now + down)));
        }
    }

    /// SIGSTOP the replica that just wrote `tick`'s effect (named in the
    /// heartbeat's `last` key, written in the same step as the effect).
    async fn stop_the_writer(&mut self, conn: &mut redis::aio::MultiplexedConnection, last_key: &str, tick: i64) {
        let deadline = Instant::now() + Duration::from_millis(1_500);
        while Instant::now() < deadline {
            let last: Option<String> = redis::cmd("GET").arg(last_key).query_async(conn).await.expect("GET");
            let writer =
                last.as_deref().and_then(|l| l.strip_prefix(&format!("{tick} "))).and_then(|v| v.split(':').next());
            if let Some(name) = writer {
                let found = self.replicas.iter().position(|r| r.name == name && r.is_running());
                if let Some(i) = found.filter(|i| self.stopped_until[*i].is_none()) {
                    self.replicas[i].pause();
                    self.chaos.stops_after_write += 1;
                    let pause = Duration::from_millis(1_200 + self.rng.below(1_500));
                    self.stopped_until[i] = Some(Instant::now() + pause);
                }
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tick_s_effect_applies_once_across_replicas_killed_and_stopped_at_random() {
    let prefix = format!("{}:", sluice_testkit::unique("sched-once"));
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_nanos() as u64;
    eprintln!("seed {seed}");
    let replicas: Vec<Replica> = (0..3).map(|i| Replica::new(&format!("once-{i}"), &prefix, &ENV)).collect();
    let mut c =
        Cluster { replicas, down_until: [None; 3], stopped_until: [None; 3], rng: Lcg(seed), chaos: Chaos::default() };
    for r in &mut c.replicas {
        r.start();
    }
    for r in &c.replicas {
        r.wait_ready(Duration::from_secs(30)).await;
    }
    let mut conn = redis().await;
    let last_key = format!("{prefix}sched:heartbeat:last");
    let started = Instant::now();
    let mut next_kill = started + Duration::from_millis(2_000 + c.rng.below(2_000));
    let (mut all_down_done, mut watched) = (false, 0);
    while started.elapsed() < RUN_FOR {
        let now = Instant::now();
        c.restart_due(now);
        if !all_down_done && started.elapsed() > RUN_FOR / 2 {
            // Everyone down for 7 s (3 or 4 ticks): the latest may run late
            // when they come back, the others must be recorded as missed.
            c.kill_all(now, Duration::from_secs(7));
            all_down_done = true;
        } else if now >= next_kill {
            let i = c.rng.below(3) as usize;
            let down = Duration::from_millis(300 + c.rng.below(2_500));
            c.kill(i, now, down);
            next_kill = now + Duration::from_millis(2_000 + c.rng.below(4_000));
        }
        // Every other tick, stop its writer right after the write.
        let tick = sluice_core::clock::now_ms() / PERIOD_MS * PERIOD_MS;
        if tick > watched && c.rng.below(2) == 0 {
            watched = tick;
            c.stop_the_writer(&mut conn, &last_key, tick).await;
        }
        watched = watched.max(tick);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let chaos_end = sluice_core::clock::now_ms();
    // A quiet end: everyone back, so every dead run is found and recorded.
    let quiet = Instant::now() + Duration::from_secs(30);
    while c.down_until.iter().chain(&c.stopped_until).any(Option::is_some) && Instant::now() < quiet {
        c.restart_due(Instant::now());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(3 * PERIOD_MS as u64)).await;
    for r in &mut c.replicas {
        let (code, _) = r.terminate(Duration::from_secs(20));
        assert_eq!(code, Some(0), "{}", r.log_tail());
    }
    check(&prefix, &mut conn, chaos_end, &c.chaos).await;
}

/// The property, tick by tick, up to the end of the chaos.
async fn check(prefix: &str, conn: &mut redis::aio::MultiplexedConnection, until_ms: i64, chaos: &Chaos) {
    let runs = store(prefix).await.all_runs("heartbeat").await.expect("runs");
    let mut by_tick: BTreeMap<i64, Vec<&RunRecord>> = BTreeMap::new();
    for run in runs.iter().filter(|r| !r.manual) {
        if run.outcome == Outcome::Missed {
            let span = (run.last_tick_ms - run.tick_ms) / PERIOD_MS + 1;
            assert_eq!(span as u64, run.ticks, "a missed record counts its ticks: {run:?}");
            for k in 0..span {
                by_tick.entry(run.tick_ms + k * PERIOD_MS).or_default().push(run);
            }
        } else {
            by_tick.entry(run.tick_ms).or_default().push(run);
        }
    }
    let first = *by_tick.keys().next().expect("ticks");
    let (mut applied, mut not_applied, mut taken_over, mut abandoned_applied) = (0, 0, 0, 0);
    let mut table = Vec::new();
    for tick in (first..until_ms - PERIOD_MS).step_by(PERIOD_MS as usize) {
        let records = by_tick.get(&tick).cloned().unwrap_or_default();
        let effects: Option<i64> =
            redis::cmd("GET").arg(effect_key(prefix, tick)).query_async(conn).await.expect("GET");
        let effects = effects.unwrap_or(0);
        let context = format!("tick {tick}: effect counter {effects}, records {records:#?}");
        let outcomes: Vec<String> =
            records.iter().map(|r| format!("{}:{}:{}", r.owner, r.outcome.as_str(), r.applied)).collect();
        table.push(format!("{tick} effect {effects} {outcomes:?}"));
        assert!(effects <= 1, "applied more than once: {context}");
        assert!(!records.is_empty(), "neither applied nor recorded: {context}");
        let appliers: Vec<_> = records.iter().filter(|r| r.applied > 0).collect();
        assert_eq!(appliers.len() as i64, effects, "the history must name the run that applied it: {context}");
        assert!(records.iter().filter(|r| r.outcome == Outcome::Succeeded).count() <= 1, "{context}");
        assert!(records.iter().all(|r| !matches!(r.outcome, Outcome::Running | Outcome::Queued)), "{context}");
        if effects == 0 {
            assert!(records.iter().all(|r| r.outcome != Outcome::Succeeded), "succeeded with no effect: {context}");
            not_applied += 1;
        } else {
            applied += 1;
            abandoned_applied += u32::from(appliers[0].outcome == Outcome::Abandoned);
        }
        taken_over += records.iter().filter(|r| r.reason.contains("took over")).count();
    }
    eprintln!(
        "{} ticks: {applied} applied once, {not_applied} recorded as not applied; {taken_over} taken over, \
         {abandoned_applied} applied by a run that stopped before its end; {chaos:?}",
        applied + not_applied
    );
    assert!(applied + not_applied >= 30, "at least 30 ticks");
    assert!(chaos.kills >= 8 && chaos.stops_after_write >= 5, "the chaos happened: {chaos:?}");
    assert!(not_applied >= 2, "the all-down window was recorded:\n{}", table.join("\n"));
}
