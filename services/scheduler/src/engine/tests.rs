//! The engine under tokio's paused time against the in-memory store: each
//! way a run can be interrupted, on its own. (`sim.rs` mixes them at random
//! over thousands of ticks.)

use std::sync::Arc;
use std::time::Duration;

use super::harness::{Beat, World, healthy, once, records_of, timing};
use crate::model::Outcome;
use crate::store::faulty::{Call, Fault};
use crate::store::history::texts;

/// The heartbeat's defaults: every 15 s, lease 5 s, start window = period.
const ENV: [(&str, &str); 1] = [("JOB_BEAT_SCHEDULE", "*/15 * * * * *")];
const TICK: i64 = 15_000;

fn beat() -> Arc<Beat> {
    Arc::new(Beat::new("*/15 * * * * *", timing(100, 100)))
}

#[tokio::test(start_paused = true)]
async fn two_healthy_replicas_apply_each_tick_once() {
    let w = World::new(1_000, &ENV);
    let _a = w.replica("a", beat(), healthy());
    let _b = w.replica("b", beat(), healthy());
    w.until(10 * TICK + 1_000).await;
    let history = w.history().await;
    for tick in (1..=10).map(|k| k * TICK) {
        let records = records_of(&history, tick);
        assert_eq!(records.len(), 1, "tick {tick}: {records:#?}");
        assert_eq!((records[0].outcome, records[0].applied), (Outcome::Succeeded, 1));
        assert_eq!(w.effects.of(tick), vec![records[0].token], "the history names the run that applied it");
    }
}

/// The failure: the holder dies right after its write landed; the
/// peer that finds its lease lapsed must not run the tick again.
#[tokio::test(start_paused = true)]
async fn a_holder_killed_right_after_its_write_is_not_run_again() {
    let w = World::new(14_000, &ENV);
    let (_a, a) = w.replica("a", beat(), once(Call::Apply, Fault::DieAfter));
    w.until(TICK + 50).await;
    let _b = w.replica("b", beat(), healthy());
    w.until(3 * TICK + 1_000).await;
    assert!(a.is_dead());
    let history = w.history().await;
    let first = records_of(&history, TICK);
    assert_eq!(first.len(), 1, "no takeover: {first:#?}");
    assert_eq!((first[0].owner.as_str(), first[0].outcome, first[0].applied), ("a", Outcome::Abandoned, 1));
    assert_eq!(first[0].reason, texts::ABANDONED_APPLIED);
    assert_eq!(w.effects.of(TICK), vec![first[0].token], "applied once, by a");
    for tick in [2 * TICK, 3 * TICK] {
        let records = records_of(&history, tick);
        assert_eq!((records.len(), records[0].owner.as_str(), records[0].applied), (1, "b", 1), "{records:#?}");
        assert_eq!(w.effects.of(tick).len(), 1);
    }
}

#[tokio::test(start_paused = true)]
async fn a_holder_killed_before_its_write_is_taken_over() {
    let w = World::new(14_000, &ENV);
    let (_a, _) = w.replica("a", beat(), once(Call::Apply, Fault::DieBefore));
    w.until(TICK + 50).await;
    let _b = w.replica("b", beat(), healthy());
    w.until(TICK + 14_000).await;
    let history = w.history().await;
    let records = records_of(&history, TICK);
    assert_eq!(records.len(), 2, "{records:#?}");
    let (dead, taken) = (records[0], records[1]);
    assert_eq!((dead.owner.as_str(), dead.outcome, dead.applied), ("a", Outcome::Abandoned, 0), "{dead:?}");
    assert_eq!(dead.reason, texts::ABANDONED_NONE);
    assert_eq!((taken.owner.as_str(), taken.outcome, taken.applied), ("b", Outcome::Succeeded, 1), "{taken:?}");
    assert_eq!(taken.reason, texts::TAKEOVER);
    assert!(taken.token > dead.token);
    assert_eq!(w.effects.of(TICK), vec![taken.token]);
}

/// A zombie: the holder's write is delayed in flight, and the holder is
/// paused (SIGSTOP) past its lease; the peer takes the tick over, and the
/// late write is refused by the fence.
#[tokio::test(start_paused = true)]
async fn a_write_landing_after_a_takeover_is_refused() {
    let w = World::new(14_000, &ENV);
    let (_a, a) = w.replica("a", beat(), once(Call::Apply, Fault::Delay(Duration::from_secs(9))));
    w.until(TICK + 50).await;
    let _b = w.replica("b", beat(), healthy());
    w.until(TICK + 150).await;
    a.pause(Duration::from_secs(9));
    w.until(TICK + 14_000).await;
    let history = w.history().await;
    let records = records_of(&history, TICK);
    let by = |owner: &str| *records.iter().find(|r| r.owner == owner).unwrap_or_else(|| panic!("{records:#?}"));
    let (a, b) = (by("a"), by("b"));
    assert_eq!((b.outcome, b.applied), (Outcome::Succeeded, 1), "{b:?}");
    assert_eq!((a.outcome, a.applied), (Outcome::LostClaim, 0), "{a:?}");
    assert_eq!(w.effects.of(TICK), vec![b.token], "the late write changed nothing");
}

#[tokio::test(start_paused = true)]
async fn a_write_whose_reply_was_lost_is_asked_again_and_applied_once() {
    let w = World::new(14_000, &ENV);
    let _a = w.replica("a", beat(), once(Call::Apply, Fault::LoseReply));
    w.until(TICK + 2_000).await;
    let history = w.history().await;
    let records = records_of(&history, TICK);
    assert_eq!(records.len(), 1);
    assert_eq!((records[0].outcome, records[0].applied), (Outcome::Succeeded, 1), "{records:#?}");
    assert_eq!(w.effects.of(TICK).len(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_end_whose_reply_was_lost_is_recorded_once() {
    let w = World::new(14_000, &ENV);
    let (a, _) = w.replica("a", beat(), once(Call::Finish, Fault::LoseReply));
    w.until(TICK + 2_000).await;
    let records = w.history().await;
    assert_eq!(records.len(), 1, "{records:#?}");
    assert_eq!((records[0].outcome, records[0].applied), (Outcome::Succeeded, 1));
    let text = prometheus::TextEncoder::new().encode_to_string(&a.inner.metrics.registry.gather()).expect("text");
    assert!(text.contains("sluice_scheduler_runs_total{job_name=\"beat\",outcome=\"succeeded\"} 1"), "{text}");
}

/// Its run died before writing and nobody took it over within the window:
/// the tick is recorded (abandoned, nothing applied) and counted as missed.
#[tokio::test(start_paused = true)]
async fn a_run_that_died_unapplied_and_was_not_taken_over_is_recorded() {
    let w = World::new(14_000, &ENV);
    let _a = w.replica("a", beat(), once(Call::Apply, Fault::DieBefore));
    w.until(TICK + 40_000).await;
    let (b, _) = w.replica("a", beat(), healthy());
    w.until(4 * TICK + 1_000).await;
    let history = w.history().await;
    let first = records_of(&history, TICK);
    assert_eq!(first.len(), 1, "{first:#?}");
    assert_eq!((first[0].outcome, first[0].applied), (Outcome::Abandoned, 0));
    assert!(w.effects.of(TICK).is_empty());
    assert_eq!(records_of(&history, 2 * TICK)[0].outcome, Outcome::Missed, "nobody ran while a was down");
    let text = prometheus::TextEncoder::new().encode_to_string(&b.inner.metrics.registry.gather()).expect("text");
    assert!(text.contains("sluice_scheduler_ticks_missed_total{job_name=\"beat\",reason=\"abandoned\"} 1"), "{text}");
}
