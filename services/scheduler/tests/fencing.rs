//! A replica paused (SIGSTOP) past its lease while it reconciles: a peer
//! takes the tick over and repairs; when the paused replica continues, its
//! pending repair is refused by the fence and counted, and it records the
//! run as having lost its claim. Then SIGTERM: a run in progress finishes
//! before the process exits.

mod common;

use std::time::Duration;

use common::{Replica, redis, start_chain_with_slow_pool, store, wait_for_run};

const LATENCY_MS: u64 = 20;
const SLOW_FACTOR: u32 = 150; // 3 s

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_cannot_write_after_its_tick_was_taken_over() {
    let prefix = format!("{}:", sluice_testkit::unique("sched-fence"));
    let (chain, _, slow) = start_chain_with_slow_pool(12, Duration::from_millis(LATENCY_MS), SLOW_FACTOR).await;
    chain.node.wait_for_slot(30).await;
    let mut conn = redis().await;
    chain.seed_redis(&mut conn, &prefix, 30).await;
    // The slow pool drifted: A will be paused while it waits on it.
    let () = redis::cmd("HSET")
        .arg(sluice_dex::state::pool_key(&prefix, &slow))
        .arg("reserve_a")
        .arg(1)
        .query_async(&mut conn)
        .await
        .expect("HSET");
    assert_eq!(chain.mismatches(&mut conn, &prefix).await, vec![slow.clone()]);

    let env = [
        ("CHAIN_URL", chain.url.as_str()),
        ("RECONCILE_CONCURRENCY", "4"),
        // Every 10 s; a tick may start (or be taken over) within 8 s.
        ("JOB_POOL_RECONCILE_SCHEDULE", "*/10 * * * * *"),
        ("JOB_POOL_RECONCILE_CATCH_UP_WINDOW_MS", "8000"),
        ("JOB_TOKEN_REFRESH_ENABLED", "false"),
        ("JOB_HEARTBEAT_ENABLED", "false"),
        ("LEASE_TTL_MS", "1500"),
        ("CANCEL_GRACE_MS", "3000"),
    ];
    let store = store(&prefix).await;
    let mut a = Replica::new("fence-a", &prefix, &env);
    let mut b = Replica::new("fence-b", &prefix, &env);
    a.start();
    a.wait_ready(Duration::from_secs(30)).await;

    // A claims the next tick and starts the sweep; B starts once A runs.
    let first = wait_for_run(&store, "pool-reconcile", Duration::from_secs(25), "started by A", |r| {
        r.owner == "fence-a" && r.outcome == "running"
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
        r.owner == "fence-b" && r.tick_ms == first.tick_ms && r.outcome != "running"
    })
    .await;
    assert_eq!(taken.outcome, "succeeded", "{taken:?}\n{}", b.log_tail());
    assert!(taken.token > first.token, "the takeover has a newer token: {} vs {}", taken.token, first.token);
    assert_eq!((taken.drift_found, taken.drift_repaired), (1, 1), "{taken:?}");
    assert_eq!(b.metric("sluice_scheduler_takeovers_total", "pool-reconcile"), 1.0);
    assert!(chain.mismatches(&mut conn, &prefix).await.is_empty(), "B repaired the pool");
    let repaired = sluice_dex::state::read_pool(&mut conn, &prefix, &slow).await.expect("read");

    // A continues: its repair of the slow pool is refused by the fence.
    a.resume();
    let stale = wait_for_run(&store, "pool-reconcile", Duration::from_secs(15), "ended by A", |r| {
        r.owner == "fence-a" && r.token == first.token && r.outcome != "running" && r.outcome != "abandoned"
    })
    .await;
    assert_eq!(stale.outcome, "lost_claim", "{stale:?}\n{}", a.log_tail());
    assert_eq!(stale.stale_writes, 1, "the paused holder's repair was refused: {stale:?}\n{}", a.log_tail());
    assert_eq!(a.metric("sluice_scheduler_stale_writes_rejected_total", "pool-reconcile"), 1.0);
    assert_eq!(a.metric("sluice_scheduler_claims_lost_total", "pool-reconcile"), 1.0);
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
        r.owner == "fence-b" && r.tick_ms > first.tick_ms && r.outcome == "running"
    })
    .await;
    let (code, took) = b.terminate(Duration::from_secs(30));
    assert_eq!(code, Some(0), "{}", b.log_tail());
    let drained = store.runs("pool-reconcile", 100).await.expect("runs");
    let ended = drained.iter().find(|r| r.tick_ms == next.tick_ms && r.token == next.token).expect("the run's record");
    assert_eq!(ended.outcome, "succeeded", "the run in progress finished before exit ({took:?}): {ended:?}");
    assert!(took >= Duration::from_millis(1_000), "it waited for the run: {took:?}");
}
