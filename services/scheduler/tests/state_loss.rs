//! A scheduler replica whose Redis stops being the store its state is in
//! (the generation marker it opened at start vanishes, as in a Redis that
//! came back empty): no claim and no job write lands, it says so (metric,
//! readiness), it does not mark the store anew, and once the marker is back
//! (the store restored) jobs run again by themselves.

mod common;

use std::time::{Duration, Instant};

use common::{Replica, http_get, redis};

async fn wait_for(what: &str, limit: Duration, mut done: impl AsyncFnMut() -> bool) {
    let started = Instant::now();
    while !done().await {
        assert!(started.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_store_gets_no_claim_or_write_until_its_generation_is_back() {
    let prefix = format!("{}:", sluice_testkit::unique("sched-generation"));
    let env = [
        ("JOB_HEARTBEAT_SCHEDULE", "* * * * * *"),
        ("JOB_TOKEN_REFRESH_ENABLED", "false"),
        ("JOB_POOL_RECONCILE_ENABLED", "false"),
    ];
    let mut replica = Replica::new("gen-a", &prefix, &env);
    replica.start();
    replica.wait_ready(Duration::from_secs(30)).await;
    let mut conn = redis().await;
    let (marker_key, last_key) = (format!("{prefix}generation"), format!("{prefix}sched:heartbeat:last"));
    let last = async |conn: &mut redis::aio::MultiplexedConnection| -> Option<String> {
        redis::cmd("GET").arg(&last_key).query_async(conn).await.expect("GET")
    };
    wait_for("a heartbeat ran", Duration::from_secs(15), async || last(&mut conn.clone()).await.is_some()).await;
    let marker: String =
        redis::cmd("GET").arg(&marker_key).query_async(&mut conn).await.expect("the scheduler's marker");

    // The store loses the marker (what an empty Redis looks like).
    let () = redis::cmd("DEL").arg(&marker_key).query_async(&mut conn).await.expect("DEL");
    wait_for("the replaced store reported", Duration::from_secs(15), async || {
        replica.metric("sluice_scheduler_state_store_replaced", "") == 1.0
    })
    .await;
    let status = http_get(replica.admin_port, "/ready").map(|(code, _)| code);
    assert_eq!(status, Some(503), "not ready while the store is another");
    let frozen = last(&mut conn).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(last(&mut conn).await, frozen, "no heartbeat landed in three seconds of ticks");
    let marked: i64 = redis::cmd("EXISTS").arg(&marker_key).query_async(&mut conn).await.expect("EXISTS");
    assert_eq!(marked, 0, "a running scheduler never marks a store anew");

    // The store is restored: jobs run again.
    let () = redis::cmd("SET").arg(&marker_key).arg(&marker).query_async(&mut conn).await.expect("SET");
    wait_for("the store back", Duration::from_secs(15), async || {
        replica.metric("sluice_scheduler_state_store_replaced", "") == 0.0
    })
    .await;
    wait_for("heartbeats again", Duration::from_secs(15), async || last(&mut conn.clone()).await != frozen).await;
    let (code, _) = replica.terminate(Duration::from_secs(30));
    assert_eq!(code, Some(0), "{}", replica.log_tail());
}
