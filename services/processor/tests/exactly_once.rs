//! Exactly-once outputs (`SLUICE_PROCESSOR_EXACTLY_ONCE=true`) against the
//! real stack, checked Jepsen-style (see `jepsen.rs`): under SIGKILLs,
//! members joining and leaving, and a clean stop, a `read_committed`
//! reader of `dex.swaps` and of the dead-letter topic sees every swap and
//! every malformed transaction exactly once, and the Redis effects stay
//! exactly-once. The same faults in at-least-once mode leave duplicates
//! (`processor.rs`, `sigkill_mid_stream_and_restart`).

mod jepsen;

use std::time::Duration;

use jepsen::{Scenario, finish};

const TRANSACTIONS: u64 = 100_000;

fn exactly_once(s: &mut Scenario) {
    s.env.push(("EXACTLY_ONCE".into(), "true".into()));
    // A killed member's open transaction is aborted by the broker after
    // this; its partitions' next owners wait for it.
    s.env.push(("TRANSACTION_TIMEOUT_MS".into(), "5000".into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kills_and_rebalances_leave_no_duplicate_output() {
    let redis = sluice_testkit::redis_url();
    let mut s = Scenario::new("eos-kills", &redis, 5_000).await;
    exactly_once(&mut s);
    let feeding = s.feed_in_background(TRANSACTIONS);
    let owning = Duration::from_secs(60);
    let a = s.spawn("a");
    let b = s.spawn("b");
    s.wait_committed(TRANSACTIONS, 0.15, Duration::from_secs(300)).await;
    a.kill();
    let a2 = s.spawn("a2");
    a2.wait_assigned(owning).await;
    s.wait_committed(TRANSACTIONS, 0.35, Duration::from_secs(300)).await;
    b.kill();
    tokio::time::sleep(Duration::from_secs(1)).await;
    a2.kill();
    let a3 = s.spawn("a3");
    let b2 = s.spawn("b2");
    s.wait_committed(TRANSACTIONS, 0.55, Duration::from_secs(300)).await;
    // A member joins and leaves cleanly: revokes that commit in a transaction.
    let c = s.spawn("c");
    c.wait_assigned(owning).await;
    s.wait_committed(TRANSACTIONS, 0.7, Duration::from_secs(300)).await;
    c.terminate();
    let fed = feeding.await.expect("feed task");
    jepsen::wait_drained(&s, fed.records, Duration::from_secs(300)).await;
    committed_offsets_follow_the_transactions(&s, &[&a3, &b2]).await;
    let report = finish(&s, &fed, vec![a3, b2]).await;
    assert_eq!(report.duplicate_swap_records, 0, "dex.swaps holds duplicates under exactly-once");
    assert_eq!(report.duplicate_dead_letters, 0, "the dead-letter topic holds duplicates under exactly-once");
    assert!(report.dead_letters > 0, "the chain's malformed transactions reached the dead-letter topic");
}

/// `sluice_processor_committed_offset` in this mode: the offsets go through the transactions,
/// not the consumer's own commits, and the series must follow them. Once the group has
/// committed everything, the owners' series, summed, are the group's committed offsets.
async fn committed_offsets_follow_the_transactions(s: &Scenario, owners: &[&jepsen::Processor]) {
    let (committed, _) = tokio::task::block_in_place(|| s.progress());
    let reported = || -> f64 {
        owners
            .iter()
            .map(|p| {
                sluice_testkit::metric(
                    &jepsen::admin_body(p.admin_port, "/metrics"),
                    "sluice_processor_committed_offset",
                    "",
                )
            })
            .sum()
    };
    // A transaction commits every 100 ms; allow a few.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while reported() != committed as f64 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        reported(),
        committed as f64,
        "the owners' sluice_processor_committed_offset, summed, against the group's committed offsets"
    );
}

/// A member paused past its session timeout is a zombie: the group gives
/// its partitions away, and when it wakes, its open transaction still
/// holds their outputs. The group coordinator refuses that transaction's
/// offsets (a stale generation), so it aborts, and what it held of the
/// partitions it lost is never sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_member_that_wakes_as_a_zombie_adds_nothing() {
    let redis = sluice_testkit::redis_url();
    let mut s = Scenario::new("eos-zombie", &redis, 5_000).await;
    exactly_once(&mut s);
    let feeding = s.feed_in_background(TRANSACTIONS);
    let a = s.spawn("a");
    let b = s.spawn("b");
    a.wait_assigned(Duration::from_secs(60)).await;
    b.wait_assigned(Duration::from_secs(60)).await;
    s.wait_committed(TRANSACTIONS, 0.2, Duration::from_secs(300)).await;
    a.signal("STOP");
    // Past the scenario's 15 s session timeout: `b` takes every partition.
    s.wait_committed(TRANSACTIONS, 0.5, Duration::from_secs(300)).await;
    tokio::time::sleep(Duration::from_secs(18)).await;
    a.signal("CONT");
    // Woken, it tries to commit what it held: refused, aborted.
    let aborted = || {
        let text = jepsen::admin_body(a.admin_port, "/metrics");
        sluice_testkit::metric(&text, "sluice_processor_transactions_total", "outcome=\"aborted\"")
    };
    let woke = std::time::Instant::now();
    while aborted() < 1.0 {
        assert!(woke.elapsed() < Duration::from_secs(30), "the zombie's transaction was never aborted");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let fed = feeding.await.expect("feed task");
    let report = finish(&s, &fed, vec![a, b]).await;
    assert_eq!(report.duplicate_swap_records, 0, "dex.swaps holds duplicates under exactly-once");
    assert_eq!(report.duplicate_dead_letters, 0, "the dead-letter topic holds duplicates under exactly-once");
}
