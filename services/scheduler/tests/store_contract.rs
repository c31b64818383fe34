//! The two stores keep one contract: the Lua scripts in the real Redis and
//! the in-memory model the engine's tests run on get the same random
//! sequences of claims, queued starts, renewals, fenced writes, ends,
//! pauses and lapsed leases from three replicas, and must answer each call
//! alike and hold the same history after it. (The engine's properties are
//! proven on the model; this is what makes them hold for Redis.)

mod common;

use std::sync::Arc;
use std::time::Duration;

use sluice_scheduler::clock::SystemClock;
use sluice_scheduler::model::{self, Intent, LostReason, Outcome, SkipReason, Tick};
use sluice_scheduler::schedule::Schedule;
use sluice_scheduler::store::JobScript;
use sluice_scheduler::store::memory::MemoryStore;
use sluice_scheduler::store::redis::RedisStore;
use sluice_scheduler::store::{
    Applied, ClaimOutcome, ClaimRequest, FinishRequest, Queue, QueueRequest, RunLease, RunRecord, Store, Write,
};

const JOB: &str = "contract";
const LEASE: Duration = Duration::from_millis(400);
/// Longer than any test: claims never lapse by themselves here.
const CLAIM: Duration = Duration::from_secs(600);
const PERIOD_MS: i64 = 10_000;
const OWNERS: [&str; 3] = ["a", "b", "c"];

/// A small deterministic generator (the seed is printed, to replay a run).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// The two stores, side by side.
struct Pair {
    redis: RedisStore,
    memory: MemoryStore,
    script: Arc<JobScript>,
    counter: String,
}

impl Pair {
    async fn new(prefix: &str, keep: usize) -> Self {
        let client = redis::Client::open(sluice_testkit::redis_url()).expect("redis url");
        let conn = redis::aio::ConnectionManager::new(client).await.expect("connecting to Redis");
        let memory = MemoryStore::new(prefix, Arc::new(SystemClock), keep);
        memory.model("contract", Arc::new(|_, write| write.args[0].parse().unwrap_or(0)));
        Self {
            redis: RedisStore::new(conn, prefix, keep, Duration::from_secs(3600)),
            memory,
            script: JobScript::new("contract", "redis.call('INCR', KEYS[1])\nreturn tonumber(ARGV[1])"),
            counter: format!("{prefix}contract:writes"),
        }
    }

    /// Both stores' histories, which must be equal.
    async fn same_history(&self, step: &str) {
        let (r, m) = (self.redis.all_runs(JOB).await.expect("redis"), self.memory.all_runs(JOB).await.expect("mem"));
        assert_eq!(r, m, "histories differ after {step}");
        let (r, m) = (self.redis.job_state(JOB).await.expect("redis"), self.memory.job_state(JOB).await.expect("mem"));
        assert_eq!(r, m, "job states differ after {step}");
        let (r, m) = (self.redis.last_tick(JOB).await.expect("redis"), self.memory.last_tick(JOB).await.expect("mem"));
        assert_eq!(r, m, "last ticks differ after {step}");
    }
}

/// Runs `op` on both stores and checks they answered alike.
macro_rules! both {
    ($pair:expr, $step:expr, |$s:ident| $op:expr) => {{
        let r = {
            let $s: &dyn Store = &$pair.redis;
            $op.await.expect("redis")
        };
        let m = {
            let $s: &dyn Store = &$pair.memory;
            $op.await.expect("memory")
        };
        assert_eq!(r, m, "the stores answered {} differently", $step);
        r
    }};
}

/// What the random walk keeps: runs holding a token, ticks queued, the
/// clock, and how often each kind of answer came (so a walk that never
/// reached a path fails).
#[derive(Default)]
struct Walk {
    runs: Vec<RunLease>,
    queued: Vec<(String, Tick)>,
    now_ms: i64,
    seen: std::collections::BTreeMap<String, u32>,
}

impl Walk {
    fn saw(&mut self, kind: impl Into<String>) {
        *self.seen.entry(kind.into()).or_default() += 1;
    }

    /// Counts an answer by its variant's name.
    fn saw_variant(&mut self, answer: impl std::fmt::Debug) {
        let name = format!("{answer:?}");
        self.saw(name.split(['(', ' ', '{']).next().unwrap_or_default());
    }
}

fn claim_request(
    walk: &Walk,
    owner: &str,
    tick: Tick,
    intent: Intent,
    buffer: bool,
    observed: Option<i64>,
) -> ClaimRequest {
    let schedule = Schedule::parse("*/10 * * * * *").expect("valid");
    let gap = if tick.manual { None } else { model::gap(&schedule, observed, tick.ms, 1_000) };
    ClaimRequest {
        job: JOB.into(),
        tick,
        owner: owner.into(),
        observed_last: observed,
        gap: gap.map(|g| RunRecord::missed(JOB, g, owner, walk.now_ms)),
        claim_ttl: CLAIM,
        lease_ttl: LEASE,
        intent,
        buffer_one: buffer,
        skip_detail: "skipped by the walk".into(),
        now_ms: walk.now_ms,
    }
}

/// A claim of an older, the newest, the next or a later tick (or a manual
/// one), with a random intent and overlap policy, sometimes on a stale view.
async fn claim(pair: &Pair, walk: &mut Walk, rng: &mut Lcg, owner: &str, label: &str) {
    let tick = if rng.below(8) == 0 {
        Tick::manual(walk.now_ms)
    } else {
        let last = pair.redis.last_tick(JOB).await.expect("redis").unwrap_or(PERIOD_MS);
        Tick::scheduled((last + PERIOD_MS * (rng.below(4) as i64 - 1)).max(PERIOD_MS))
    };
    let intent = match rng.below(10) {
        0 => Intent::Skip(SkipReason::Late),
        1 => Intent::Skip(SkipReason::Paused),
        _ => Intent::Run,
    };
    let observed =
        if rng.below(6) == 0 { Some(tick.ms - PERIOD_MS) } else { pair.redis.last_tick(JOB).await.expect("redis") };
    let req = claim_request(walk, owner, tick, intent, rng.below(2) == 0, observed);
    let claimed = both!(pair, format!("{label}: claim {tick:?} by {owner}"), |s| s.claim(&req));
    match claimed.outcome {
        ClaimOutcome::Lost(reason) => walk.saw(format!("Lost({reason:?})")),
        outcome => walk.saw_variant(outcome),
    }
    if let Some(dead) = &claimed.resolved {
        walk.saw(format!("Resolved applied={}", dead.applied > 0));
    }
    match claimed.outcome {
        ClaimOutcome::Run { token, .. } => {
            walk.runs.push(RunLease { job: JOB.into(), tick, owner: owner.into(), token })
        }
        ClaimOutcome::Queued => walk.queued.push((owner.into(), tick)),
        _ => {}
    }
}

async fn start_queued(pair: &Pair, walk: &mut Walk, rng: &mut Lcg, label: &str) {
    let (owner, tick) = walk.queued[rng.below(walk.queued.len() as u64) as usize].clone();
    let req = QueueRequest {
        job: JOB.into(),
        tick,
        owner: owner.clone(),
        claim_ttl: CLAIM,
        lease_ttl: LEASE,
        now_ms: walk.now_ms,
    };
    let queue = both!(pair, format!("{label}: start queued {tick:?}"), |s| s.start_queued(&req));
    walk.saw_variant(&queue);
    if let Queue::Started { token, .. } = queue {
        walk.runs.push(RunLease { job: JOB.into(), tick, owner, token });
    }
}

async fn write(pair: &Pair, walk: &mut Walk, rng: &mut Lcg, label: &str) {
    let lease = walk.runs[rng.below(walk.runs.len() as u64) as usize].clone();
    let write = Write {
        script: Arc::clone(&pair.script),
        id: format!("w{}", rng.below(3)),
        keys: vec![pair.counter.clone()],
        args: vec![rng.below(100).to_string()],
        ledger_ttl: Duration::from_secs(3600),
    };
    let applied: Applied =
        both!(pair, format!("{label}: write {} of {lease:?}", write.id), |s| s.apply(&lease, &write));
    walk.saw_variant(applied);
}

/// The end of a run, with a random outcome; sometimes retried (a lost reply).
async fn finish(pair: &Pair, walk: &mut Walk, rng: &mut Lcg, label: &str) {
    let lease = walk.runs.remove(rng.below(walk.runs.len() as u64) as usize);
    let outcome = [Outcome::Succeeded, Outcome::Failed, Outcome::Cancelled, Outcome::TimedOut][rng.below(4) as usize];
    let record = RunRecord {
        token: lease.token,
        ended_ms: walk.now_ms,
        items: rng.below(5),
        ..RunRecord::new(JOB, lease.tick, &lease.owner, outcome, walk.now_ms - 10)
    };
    let end = FinishRequest { lease: lease.clone(), record, claim_keep: CLAIM };
    let finished = both!(pair, format!("{label}: finish {lease:?} as {outcome:?}"), |s| s.finish(&end));
    walk.saw(format!("Finished {:?}", finished.outcome));
    if rng.below(4) == 0 {
        both!(pair, format!("{label}: finish again"), |s| s.finish(&end));
    }
}

async fn step(pair: &Pair, walk: &mut Walk, rng: &mut Lcg, n: usize) {
    walk.now_ms += 1 + rng.below(50) as i64;
    let owner = OWNERS[rng.below(3) as usize];
    let label = format!("step {n}");
    let mut pick = rng.below(100);
    // An operation on runs or queued ticks that do not exist is a claim.
    if (35..45).contains(&pick) && walk.queued.is_empty()
        || (45..88).contains(&pick) && walk.runs.is_empty()
        || (92..96).contains(&pick) && walk.queued.is_empty()
    {
        pick = 0;
    }
    match pick {
        0..35 => claim(pair, walk, rng, owner, &label).await,
        35..45 => start_queued(pair, walk, rng, &label).await,
        45..55 => {
            let lease = walk.runs[rng.below(walk.runs.len() as u64) as usize].clone();
            both!(pair, format!("{label}: renew {lease:?}"), |s| s.renew(&lease, CLAIM, LEASE));
        }
        55..75 => write(pair, walk, rng, &label).await,
        75..88 => finish(pair, walk, rng, &label).await,
        88..92 => {
            let paused = rng.below(4) == 0;
            both!(pair, format!("{label}: paused {paused}"), |s| s.set_paused(JOB, paused, "by the walk"));
        }
        92..96 => {
            let (owner, tick) = walk.queued.remove(0);
            both!(pair, format!("{label}: leave queue"), |s| s.leave_queue(JOB, &owner, tick));
        }
        _ => {
            // Every lease and queued place lapses.
            walk.saw("Lapse");
            tokio::time::sleep(LEASE + Duration::from_millis(150)).await;
        }
    }
    pair.same_history(&label).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_scripts_and_the_memory_model_answer_every_call_alike() {
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_nanos() as u64;
    eprintln!("seed {seed}");
    let mut seen = std::collections::BTreeMap::new();
    for (round, keep) in [(0, 100_000), (1, 100_000), (2, 6)] {
        let prefix = format!("{}:", sluice_testkit::unique("sched-contract"));
        let pair = Pair::new(&prefix, keep).await;
        let mut rng = Lcg(seed.wrapping_add(round));
        let mut walk = Walk { now_ms: 1_000_000, ..Walk::default() };
        for n in 0..300 {
            step(&pair, &mut walk, &mut rng, n).await;
        }
        let history = pair.memory.all_runs(JOB).await.expect("memory");
        assert!(history.len() >= keep.min(30), "round {round}: {} records", history.len());
        for (kind, n) in walk.seen {
            *seen.entry(kind).or_insert(0) += n;
        }
    }
    eprintln!("answers seen: {seen:?}");
    // The common paths were walked (the rare ones have their own test below).
    for kind in
        ["Run", "Queued", "Skipped", "Lost(Held)", "Lost(Done)", "Lost(Superseded)", "Started", "Written", "Already"]
    {
        assert!(seen.get(kind).is_some_and(|n| *n > 0), "no {kind} answer in the walk: {seen:?}");
    }
}

/// The paths a random walk reaches only now and then, walked on purpose:
/// a dead holder with a write (recorded, never run again), one without
/// (taken over), a zombie's late write and its stale end, a retried write
/// and end, a queued tick paused while it waited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rare_paths_answer_alike_too() {
    let prefix = format!("{}:", sluice_testkit::unique("sched-contract-paths"));
    let pair = Pair::new(&prefix, 1000).await;
    let mut walk = Walk { now_ms: 1_000_000, ..Walk::default() };
    let run = |owner: &str, tick: Tick, claimed: &sluice_scheduler::store::Claimed| match claimed.outcome {
        ClaimOutcome::Run { token, .. } => RunLease { job: JOB.into(), tick, owner: owner.into(), token },
        other => panic!("{owner} did not get {tick:?}: {other:?}"),
    };
    let write = |id: &str| Write {
        script: Arc::clone(&pair.script),
        id: id.into(),
        keys: vec![pair.counter.clone()],
        args: vec!["5".into()],
        ledger_ttl: Duration::from_secs(3600),
    };
    let lapse = || tokio::time::sleep(LEASE + Duration::from_millis(150));
    let (t1, t2, t3) = (Tick::scheduled(PERIOD_MS), Tick::scheduled(2 * PERIOD_MS), Tick::scheduled(3 * PERIOD_MS));

    // A holder dies after its write: the peer records it and does not run.
    let req = claim_request(&walk, "a", t1, Intent::Run, false, None);
    let a = run("a", t1, &both!(pair, "a claims t1", |s| s.claim(&req)));
    assert_eq!(both!(pair, "a writes", |s| s.apply(&a, &write("x"))), Applied::Written(5));
    lapse().await;
    assert_eq!(
        both!(pair, "a retries its write", |s| s.apply(&a, &write("x"))),
        Applied::Already(5),
        "after the lapse too"
    );
    let req = claim_request(&walk, "b", t1, Intent::Run, false, Some(t1.ms));
    let claimed = both!(pair, "b finds a dead", |s| s.claim(&req));
    assert_eq!(claimed.outcome, ClaimOutcome::Lost(LostReason::Applied));
    pair.same_history("t1").await;

    // A holder dies before writing: taken over; its late write is refused.
    walk.now_ms += 10;
    let req = claim_request(&walk, "a", t2, Intent::Run, false, Some(t1.ms));
    let a2 = run("a", t2, &both!(pair, "a claims t2", |s| s.claim(&req)));
    lapse().await;
    let req = claim_request(&walk, "b", t2, Intent::Run, false, Some(t2.ms));
    let b2 = run("b", t2, &both!(pair, "b takes t2 over", |s| s.claim(&req)));
    assert_eq!(both!(pair, "a's zombie write", |s| s.apply(&a2, &write("x"))), Applied::Superseded);
    let zombie = RunRecord {
        token: a2.token,
        ended_ms: walk.now_ms,
        ..RunRecord::new(JOB, t2, "a", Outcome::Succeeded, walk.now_ms)
    };
    let zombie_end = FinishRequest { lease: a2.clone(), record: zombie, claim_keep: CLAIM };
    let stale = both!(pair, "a's zombie end", |s| s.finish(&zombie_end));
    assert_eq!((stale.outcome, stale.applied), (Outcome::LostClaim, 0), "it thought it succeeded");
    assert_eq!(both!(pair, "b writes", |s| s.apply(&b2, &write("x"))), Applied::Written(5));
    let record = RunRecord {
        token: b2.token,
        ended_ms: walk.now_ms,
        ..RunRecord::new(JOB, t2, "b", Outcome::Succeeded, walk.now_ms)
    };
    let end = FinishRequest { lease: b2.clone(), record, claim_keep: CLAIM };
    let first = both!(pair, "b ends", |s| s.finish(&end));
    assert_eq!((first.outcome, first.applied), (Outcome::Succeeded, 1));
    assert_eq!(both!(pair, "b's end retried", |s| s.finish(&end)), first);
    pair.same_history("t2").await;

    // A tick queued behind a run, then the job paused: recorded as skipped.
    walk.now_ms += 10;
    let req = claim_request(&walk, "a", t3, Intent::Run, false, Some(t2.ms));
    let _a3 = run("a", t3, &both!(pair, "a claims t3", |s| s.claim(&req)));
    let t4 = Tick::scheduled(4 * PERIOD_MS);
    let req = claim_request(&walk, "c", t4, Intent::Run, true, Some(t3.ms));
    assert_eq!(both!(pair, "c queues t4", |s| s.claim(&req)).outcome, ClaimOutcome::Queued);
    both!(pair, "pause", |s| s.set_paused(JOB, true, "paths"));
    let queued = QueueRequest {
        job: JOB.into(),
        tick: t4,
        owner: "c".into(),
        claim_ttl: CLAIM,
        lease_ttl: LEASE,
        now_ms: walk.now_ms,
    };
    assert_eq!(both!(pair, "c's queued start", |s| s.start_queued(&queued)), Queue::Paused);
    pair.same_history("t4").await;
    let history = pair.memory.all_runs(JOB).await.expect("memory");
    let outcomes: Vec<(i64, Outcome, u64)> = history.iter().map(|r| (r.tick_ms, r.outcome, r.applied)).collect();
    assert_eq!(
        outcomes,
        vec![
            (t1.ms, Outcome::Abandoned, 1),
            (t2.ms, Outcome::LostClaim, 0),
            (t2.ms, Outcome::Succeeded, 1),
            (t3.ms, Outcome::Running, 0),
            (t4.ms, Outcome::Skipped, 0),
        ]
    );
}
