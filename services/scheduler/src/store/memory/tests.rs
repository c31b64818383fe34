//! The store's decisions one by one, on the memory model with a clock the
//! test moves: what a claim does with a dead holder's tick, with and
//! without writes in its ledger; retried writes and ends; a zombie's write.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use super::MemoryStore;
use crate::clock::Clock;
use crate::model::{Intent, LostReason, Outcome, Tick};
use crate::store::JobScript;
use crate::store::history::texts;
use crate::store::{Applied, ClaimOutcome, ClaimRequest, FinishRequest, RunLease, RunRecord, Store, Write};

#[derive(Debug, Default)]
struct Manual(AtomicI64);

impl Clock for Manual {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

const LEASE: Duration = Duration::from_millis(1000);
const TICK: Tick = Tick { ms: 10_000, manual: false };

struct Fixture {
    clock: Arc<Manual>,
    store: MemoryStore,
    script: Arc<JobScript>,
}

impl Fixture {
    fn new() -> Self {
        let clock = Arc::new(Manual(AtomicI64::new(TICK.ms)));
        let store = MemoryStore::new("t:", clock.clone(), 1000);
        store.model("w", Arc::new(|lease, _| lease.token as i64));
        Self { clock, store, script: JobScript::new("w", "return 0") }
    }

    fn advance(&self, ms: i64) {
        self.clock.0.fetch_add(ms, Ordering::SeqCst);
    }

    async fn claim(&self, owner: &str, tick: Tick, observed: Option<i64>) -> crate::store::Claimed {
        let req = ClaimRequest {
            job: "j".into(),
            tick,
            owner: owner.into(),
            observed_last: observed,
            gap: None,
            claim_ttl: Duration::from_secs(60),
            lease_ttl: LEASE,
            intent: Intent::Run,
            buffer_one: false,
            skip_detail: String::new(),
            now_ms: self.clock.now_ms(),
        };
        self.store.claim(&req).await.expect("memory")
    }

    async fn run(&self, owner: &str, tick: Tick, observed: Option<i64>) -> RunLease {
        match self.claim(owner, tick, observed).await.outcome {
            ClaimOutcome::Run { token, .. } => RunLease { job: "j".into(), tick, owner: owner.into(), token },
            other => panic!("{owner} did not get {tick:?}: {other:?}"),
        }
    }

    async fn write(&self, lease: &RunLease, id: &str) -> Applied {
        let write = Write {
            script: Arc::clone(&self.script),
            id: id.into(),
            keys: Vec::new(),
            args: Vec::new(),
            ledger_ttl: Duration::from_secs(3600),
        };
        self.store.apply(lease, &write).await.expect("memory")
    }

    async fn history(&self) -> Vec<RunRecord> {
        self.store.all_runs("j").await.expect("memory")
    }
}

#[tokio::test]
async fn a_dead_holder_without_writes_is_taken_over_and_recorded() {
    let f = Fixture::new();
    let a = f.run("a", TICK, None).await;
    assert_eq!(f.claim("b", TICK, Some(TICK.ms)).await.outcome, ClaimOutcome::Lost(LostReason::Held));
    f.advance(LEASE.as_millis() as i64 + 1);
    let claimed = f.claim("b", TICK, Some(TICK.ms)).await;
    // Tokens never fall below the run's start (what a store that forgot its
    // counter would otherwise hand out again): the takeover's is its start.
    assert_eq!(a.token, TICK.ms as u64, "the first token is the first run's start");
    let now = f.clock.now_ms() as u64;
    assert_eq!(claimed.outcome, ClaimOutcome::Run { token: now, takeover: true });
    let dead = claimed.resolved.expect("the dead run was recorded");
    assert_eq!((dead.owner.as_str(), dead.token, dead.applied), ("a", a.token, 0));
    let history = f.history().await;
    assert_eq!(history[0].outcome, Outcome::Abandoned);
    assert_eq!(history[0].reason, texts::ABANDONED_NONE);
    assert_eq!((history[1].owner.as_str(), history[1].outcome), ("b", Outcome::Running));
    assert_eq!(history[1].reason, texts::TAKEOVER);
}

#[tokio::test]
async fn a_dead_holder_with_a_write_is_recorded_as_applied_and_not_run_again() {
    let f = Fixture::new();
    let a = f.run("a", TICK, None).await;
    assert_eq!(f.write(&a, "x").await, Applied::Written(a.token as i64));
    f.advance(LEASE.as_millis() as i64 + 1);
    let claimed = f.claim("b", TICK, Some(TICK.ms)).await;
    assert_eq!(claimed.outcome, ClaimOutcome::Lost(LostReason::Applied));
    assert_eq!(claimed.resolved.map(|d| d.applied), Some(1));
    assert_eq!(f.claim("c", TICK, Some(TICK.ms)).await.outcome, ClaimOutcome::Lost(LostReason::Done), "resolved");
    let history = f.history().await;
    assert_eq!(history.len(), 1);
    assert_eq!((history[0].outcome, history[0].applied), (Outcome::Abandoned, 1));
    assert_eq!(history[0].reason, texts::ABANDONED_APPLIED);
}

#[tokio::test]
async fn writes_apply_once_per_id_and_only_under_the_lease() {
    let f = Fixture::new();
    let a = f.run("a", TICK, None).await;
    let mine = a.token as i64;
    assert_eq!(f.write(&a, "x").await, Applied::Written(mine));
    assert_eq!(f.write(&a, "x").await, Applied::Already(mine), "a retry gets the first reply");
    assert_eq!(f.write(&a, "y").await, Applied::Written(mine), "another id of the same run");
    f.advance(LEASE.as_millis() as i64 + 1);
    assert_eq!(f.write(&a, "z").await, Applied::LeaseLost, "its lease lapsed");
    let next = Tick::scheduled(TICK.ms + 10_000);
    let b = f.run("b", next, Some(TICK.ms)).await;
    assert_eq!(f.write(&a, "z").await, Applied::Superseded, "a newer run started");
    assert_eq!(f.write(&b, "x").await, Applied::Written(b.token as i64), "ids are per tick");
}

#[tokio::test]
async fn an_end_retried_after_a_lost_reply_changes_nothing() {
    let f = Fixture::new();
    let a = f.run("a", TICK, None).await;
    f.write(&a, "x").await;
    let record = RunRecord {
        token: a.token,
        ended_ms: TICK.ms + 5,
        ..RunRecord::new("j", TICK, "a", Outcome::Succeeded, TICK.ms)
    };
    let end = FinishRequest { lease: a.clone(), record, claim_keep: Duration::from_secs(60) };
    let first = f.store.finish(&end).await.expect("memory");
    assert_eq!((first.outcome, first.applied), (Outcome::Succeeded, 1));
    // A newer run starts before the retry arrives: the retry must not
    // rewrite the recorded success as a stale end.
    let b = f.run("b", Tick::scheduled(TICK.ms + 10_000), Some(TICK.ms)).await;
    assert!(b.token > a.token);
    assert_eq!(f.store.finish(&end).await.expect("memory"), first);
    let history = f.history().await;
    assert_eq!((history[0].outcome, history[0].applied), (Outcome::Succeeded, 1));
}

#[tokio::test]
async fn a_cancelled_run_that_applied_nothing_leaves_its_tick_open() {
    let f = Fixture::new();
    let a = f.run("a", TICK, None).await;
    let record = RunRecord { token: a.token, ..RunRecord::new("j", TICK, "a", Outcome::Cancelled, TICK.ms) };
    f.store.finish(&FinishRequest { lease: a, record, claim_keep: Duration::from_secs(60) }).await.expect("memory");
    let claimed = f.claim("b", TICK, Some(TICK.ms)).await;
    assert!(matches!(claimed.outcome, ClaimOutcome::Run { takeover: true, .. }), "{claimed:?}");
}
