//! A replica paused (SIGSTOP) past its lease while it reconciles.
//! - Before it wrote anything: a peer takes the tick over and repairs; when
//!   the paused replica continues, its pending repair is refused by the
//!   fence and counted, and it records the run as having lost its claim.
//!   Then SIGTERM: a run in progress finishes before the process exits.
//! - After one of its repairs landed: the tick's effect is applied, so the
//!   peer that finds its lease lapsed records that and never runs the tick
//!   again; when the paused replica continues, its next repair is refused,
//!   and its record says it applied the tick's effect and then lost its claim.

mod common;

use std::time::Duration;

use common::{Replica, TestChain, redis, start_chain_with_slow_pool, store, wait_for_run};
use sluice_scheduler::model::Outcome;
use sluice_scheduler::store::Store as _;

const LATENCY_MS: u64 = 20;
const SLOW_FACTOR: u32 = 150; // 3 s

/// Puts drift into `pool`'s Redis state.
async fn drift(conn: &mut redis::aio::MultiplexedConnection, prefix: &str, pool: &str) {
    let () = redis::cmd("HSET")
        .arg(sluice_dex::state::pool_key(prefix, pool))
        .arg("reserve_a")
        .arg(1)
        .query_async(conn)
        .await
        .expect("HSET");
}

fn env(chain: &TestChain) -> Vec<(&'static str, String)> {
    vec![
        ("CHAIN_URL", chain.url.clone()),
        ("RECONCILE_CONCURRENCY", "4".into()),
        // Every 10 s; a tick may start (or be taken over) within 8 s.
        ("JOB_POOL_RECONCILE_SCHEDULE", "*/10 * * * * *".into()),
        ("JOB_POOL_RECONCILE_CATCH_UP_WINDOW_MS", "8000".into()),
        ("JOB_TOKEN_REFRESH_ENABLED", "false".into()),
        ("JOB_HEARTBEAT_ENABLED", "false".into()),
        ("LEASE_TTL_MS", "1500".into()),
        ("CANCEL_GRACE_MS", "3000".into()),
        // A chain request in flight outlives the pauses here (up to ~12 s).
        ("CHAIN_TIMEOUT_MS", "30000".into()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_paused_after_a_repair_landed_is_not_run_again() {
    let prefix = format!("{}:", sluice_testkit::unique("sched-fence-applied"));
    let (chain, pools, slow) = start_chain_with_slow_pool(12, Duration::from_millis(LATENCY_MS), SLOW_FACTOR).await;
    chain.node.wait_for_slot(30).await;
    let mut conn = redis().await;
    chain.seed_redis(&mut conn, &prefix, 30).await;
    // A fast pool (repaired at once) and the slow one (3 s away) drifted.
    let fast = pools[5].clone();
    drift(&mut conn, &prefix, &fast).await;
    drift(&mut conn, &prefix, &slow).await;
    let env = env(&chain);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let store = store(&prefix).await;
    let mut a = Replica::new("applied-a", &prefix, &env);
    let mut b = Replica::new("applied-b", &prefix, &env);
    a.start();
    a.wait_ready(Duration::from_secs(30)).await;
    let first = wait_for_run(&store, "pool-reconcile", Duration::from_secs(25), "started by A", |r| {
        r.owner == "applied-a" && r.outcome == Outcome::Running
    })
    .await;
    // A's repair of the fast pool lands; pause A while it waits on the slow one.
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    let fast_key = sluice_dex::state::pool_key(&prefix, &fast);
    loop {
        let reserve: String =
            redis::cmd("HGET").arg(&fast_key).arg("reserve_a").query_async(&mut conn).await.expect("HGET");
        if reserve != "1" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "A never repaired {fast}:\n{}", a.log_tail());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    a.pause();
    b.start();
    b.wait_ready(Duration::from_secs(30)).await;

    // B finds A's lease lapsed and its effect applied: recorded, not run again.
    let abandoned = wait_for_run(&store, "pool-reconcile", Duration::from_secs(15), "resolved by B", |r| {
        r.token == first.token && r.outcome == Outcome::Abandoned && r.applied == 1
    })
    .await;
    assert_eq!(abandoned.owner, "applied-a");
    // Past the tick's start window (8 s): B had every chance to take it over.
    let closes = first.tick_ms + 8_000 - sluice_core::clock::now_ms();
    tokio::time::sleep(Duration::from_millis(closes.max(0) as u64 + 500)).await;
    assert_eq!(b.metric("sluice_scheduler_takeovers_total", "pool-reconcile"), 0.0, "{}", b.log_tail());
    assert_eq!(b.metric("sluice_scheduler_abandoned_runs_total", "effect=\"applied\""), 1.0, "{}", b.log_tail());
    let of_tick = |runs: &[common::RunRecord]| -> Vec<(String, Outcome, u64)> {
        runs.iter().filter(|r| r.tick_ms == first.tick_ms).map(|r| (r.owner.clone(), r.outcome, r.applied)).collect()
    };
    let runs = store.all_runs("pool-reconcile").await.expect("runs");
    assert_eq!(of_tick(&runs), vec![("applied-a".to_string(), Outcome::Abandoned, 1)], "{runs:#?}");
    assert_eq!(chain.mismatches(&mut conn, &prefix).await, vec![slow.clone()], "nobody repaired the slow pool");

    // A continues: its slow repair is refused (no lease); its record says
    // it applied the tick's effect (1 write) and then lost its claim.
    a.resume();
    let ended = wait_for_run(&store, "pool-reconcile", Duration::from_secs(15), "ended by A", |r| {
        r.token == first.token && r.outcome == Outcome::LostClaim
    })
    .await;
    assert_eq!((ended.applied, ended.stale_writes), (1, 1), "{ended:?}\n{}", a.log_tail());
    assert_eq!(a.metric_reaching("sluice_scheduler_stale_writes_rejected_total", "pool-reconcile", 1.0).await, 1.0);
    let runs = store.all_runs("pool-reconcile").await.expect("runs");
    assert_eq!(of_tick(&runs), vec![("applied-a".to_string(), Outcome::LostClaim, 1)], "{runs:#?}");
    // The next tick repairs the slow pool.
    wait_for_run(&store, "pool-reconcile", Duration::from_secs(25), "the next tick", |r| {
        r.tick_ms > first.tick_ms && r.outcome == Outcome::Succeeded && r.drift_repaired == 1
    })
    .await;
    assert!(chain.mismatches(&mut conn, &prefix).await.is_empty());
    for r in [&mut a, &mut b] {
        assert_eq!(r.terminate(Duration::from_secs(30)).0, Some(0), "{}", r.log_tail());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_cannot_write_after_its_tick_was_taken_over() {
    let prefix = format!("{}:", sluice_testkit::unique("sched-fence"));
    let (chain, _, slow) = start_chain_with_slow_pool(12, Duration::from_millis(LATENCY_MS), SLOW_FACTOR).await;
    chain.node.wait_for_slot(30).await;
    let mut conn = redis().await;
    chain.seed_redis(&mut conn, &prefix, 30).await;
    // The slow pool drifted: A will be paused while it waits on it.
    drift(&mut conn, &prefix, &slow).await;
    assert_eq!(chain.mismatches(&mut conn, &prefix).await, vec![slow.clone()]);
    let env = env(&chain);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let store = store(&prefix).await;
    let mut a = Replica::new("fence-a", &prefix, &env);
    let mut b = Replica::new("fence-b", &prefix, &env);
    a.start();
    a.wait_ready(Duration::from_secs(30)).await;

    // A claims the next tick and starts the sweep; B starts once A runs.
    let first = wait_for_run(&store, "pool-reconcile", Duration::from_secs(25), "started by A", |r| {
        r.owner == "fence-a" && r.outcome == Outcome::Running
    })
    .await;
    // The fast pools take ~100 ms; the slow one 3 s. Pause A while it waits
    // on the slow pool, whose state it has already read as drifted.
    tokio::time::sleep(Duration::from_millis(600)).await;
    a.pause();
    b.start();
    b.wait_ready(Duration::from_secs(30)).await;

    // B takes the tick over once A's lease lapses, and repairs the pool.
    let taken = wait_for_run(&store, "pool-reconcile", Duration::from_secs(15), "taken over by B", |r| {
        r.owner == "fence-b" && r.tick_ms == first.tick_ms && r.outcome != Outcome::Running
    })
    .await;
    assert_eq!(taken.outcome, Outcome::Succeeded, "{taken:?}\n{}", b.log_tail());
    assert!(taken.token > first.token, "the takeover has a newer token: {} vs {}", taken.token, first.token);
    assert_eq!((taken.drift_found, taken.drift_repaired), (1, 1), "{taken:?}");
    assert_eq!(b.metric("sluice_scheduler_takeovers_total", "pool-reconcile"), 1.0);
    assert!(chain.mismatches(&mut conn, &prefix).await.is_empty(), "B repaired the pool");
    let repaired = sluice_dex::state::read_pool(&mut conn, &prefix, &slow).await.expect("read");

    // A continues: its repair of the slow pool is refused by the fence.
    a.resume();
    let stale = wait_for_run(&store, "pool-reconcile", Duration::from_secs(15), "ended by A", |r| {
        r.owner == "fence-a"
            && r.token == first.token
            && r.outcome != Outcome::Running
            && r.outcome != Outcome::Abandoned
    })
    .await;
    assert_eq!(stale.outcome, Outcome::LostClaim, "{stale:?}\n{}", a.log_tail());
    assert_eq!(stale.stale_writes, 1, "the paused holder's repair was refused: {stale:?}\n{}", a.log_tail());
    assert_eq!(a.metric_reaching("sluice_scheduler_stale_writes_rejected_total", "pool-reconcile", 1.0).await, 1.0);
    assert_eq!(a.metric_reaching("sluice_scheduler_claims_lost_total", "pool-reconcile", 1.0).await, 1.0);
    assert_eq!(
        sluice_dex::state::read_pool(&mut conn, &prefix, &slow).await.expect("read"),
        repaired,
        "the refused write changed nothing"
    );
    assert!(chain.mismatches(&mut conn, &prefix).await.is_empty());

    // The tick ran to success once (B); A's run is recorded as lost.
    let runs = store.runs("pool-reconcile", 100).await.expect("runs");
    let of_tick: Vec<(&str, &str)> =
        runs.iter().filter(|r| r.tick_ms == first.tick_ms).map(|r| (r.owner.as_str(), r.outcome.as_str())).collect();
    assert_eq!(of_tick.iter().filter(|(_, o)| *o == "succeeded").count(), 1, "{of_tick:?}");

    // SIGTERM while B runs the next tick: the run finishes, then B exits.
    a.terminate(Duration::from_secs(30));
    let next = wait_for_run(&store, "pool-reconcile", Duration::from_secs(25), "started by B", |r| {
        r.owner == "fence-b" && r.tick_ms > first.tick_ms && r.outcome == Outcome::Running
    })
    .await;
    let sent_ms = sluice_core::clock::now_ms();
    let (code, took) = b.terminate(Duration::from_secs(30));
    assert_eq!(code, Some(0), "{}", b.log_tail());
    let drained = store.runs("pool-reconcile", 100).await.expect("runs");
    let ended = drained.iter().find(|r| r.tick_ms == next.tick_ms && r.token == next.token).expect("the run's record");
    assert_eq!(ended.outcome, Outcome::Succeeded, "the run in progress finished before exit ({took:?}): {ended:?}");
    // It waited for the run: the run ended after the SIGTERM (how long after depends on how
    // far into its 3 s slow pool the run was when the signal came).
    assert!(ended.ended_ms >= sent_ms, "the run ended {} ms before the SIGTERM: {ended:?}", sent_ms - ended.ended_ms);
}
