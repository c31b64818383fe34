//! Claims, renewals, releases and fenced writes against the real Redis of
//! the test stack.

use std::time::Duration;

use sluice_coord::{Fenced, acquire, fenced_hset, release, renew};
use sluice_testkit::{redis_url, unique};

async fn conn() -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(redis_url()).expect("redis url");
    client.get_multiplexed_async_connection().await.expect("connecting to the test stack's Redis")
}

#[tokio::test]
async fn one_holder_at_a_time_and_a_takeover_gets_a_larger_token() {
    let mut c = conn().await;
    let (key, fence) = (unique("claim"), unique("fence"));
    let ttl = Duration::from_millis(300);
    let a = acquire(&mut c, &key, &fence, "a", ttl).await.expect("redis").expect("free key is claimed");
    assert!(acquire(&mut c, &key, &fence, "b", ttl).await.expect("redis").is_none(), "held key is refused");
    assert!(renew(&mut c, &a, ttl).await.expect("redis"), "the holder renews");

    tokio::time::sleep(Duration::from_millis(450)).await;
    let b = acquire(&mut c, &key, &fence, "b", ttl).await.expect("redis").expect("a lapsed claim can be taken");
    assert!(b.token > a.token, "takeover token {} must exceed {}", b.token, a.token);
    assert!(!renew(&mut c, &a, ttl).await.expect("redis"), "the old holder cannot renew a claim it lost");
    assert!(!release(&mut c, &a).await.expect("redis"), "nor release it");
    assert!(release(&mut c, &b).await.expect("redis"), "the holder releases");
    assert!(acquire(&mut c, &key, &fence, "c", ttl).await.expect("redis").is_some(), "released key is free");
}

#[tokio::test]
async fn a_stale_holder_cannot_write_after_a_takeover() {
    let mut c = conn().await;
    let (key, fence, data) = (unique("claim"), unique("fence"), unique("data"));
    let ttl = Duration::from_millis(200);
    let old = acquire(&mut c, &key, &fence, "old", ttl).await.expect("redis").expect("claimed");
    assert_eq!(fenced_hset(&mut c, &old, &data, "v", "old-1").await.expect("redis"), Fenced::Written);

    // The old holder "pauses" past its claim; another takes the resource.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let new = acquire(&mut c, &key, &fence, "new", ttl).await.expect("redis").expect("taken over");
    assert_eq!(fenced_hset(&mut c, &new, &data, "v", "new-1").await.expect("redis"), Fenced::Written);
    assert_eq!(fenced_hset(&mut c, &old, &data, "v", "old-2").await.expect("redis"), Fenced::Stale);
    let value: String = redis::cmd("HGET").arg(&data).arg("v").query_async(&mut c).await.expect("redis");
    assert_eq!(value, "new-1", "the stale write changed nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_claimants_get_exactly_one_winner_each_round() {
    let fence = unique("fence");
    for round in 0..50 {
        let key = unique(&format!("race{round}"));
        let tasks: Vec<_> = (0..8)
            .map(|i| {
                let (key, fence) = (key.clone(), fence.clone());
                tokio::spawn(async move {
                    let mut c = conn().await;
                    acquire(&mut c, &key, &fence, &format!("r{i}"), Duration::from_secs(5)).await.expect("redis")
                })
            })
            .collect();
        let mut winners = 0;
        for t in tasks {
            winners += usize::from(t.await.expect("task").is_some());
        }
        assert_eq!(winners, 1, "round {round}");
    }
}

#[tokio::test]
async fn a_lease_fenced_write_needs_the_lease_as_well_as_the_newest_token() {
    let mut c = conn().await;
    let (key, fence, data) = (unique("claim"), unique("fence"), unique("data"));
    let ttl = Duration::from_millis(200);
    let claim = acquire(&mut c, &key, &fence, "a", ttl).await.expect("redis").expect("claimed");
    let script = redis::Script::new(&format!(
        "{}\nredis.call('SET', KEYS[3], ARGV[3])\nreturn 1",
        sluice_coord::LEASED_FENCE_CHECK
    ));
    let write = |value: &'static str| {
        let mut invocation = script.prepare_invoke();
        invocation.key(&fence).key(&key).key(&data).arg(claim.token).arg(format!("a:{}", claim.token)).arg(value);
        invocation
    };
    let written: i64 = write("while held").invoke_async(&mut c).await.expect("redis");
    assert_eq!(written, 1);
    // The lease lapses; nobody has claimed since, so the token is still the
    // newest, but the holder no longer holds the lease: refused.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let refused: i64 = write("after the lapse").invoke_async(&mut c).await.expect("redis");
    assert_eq!(refused, -1);
    let value: String = redis::cmd("GET").arg(&data).query_async(&mut c).await.expect("redis");
    assert_eq!(value, "while held");
}

#[tokio::test]
async fn tokens_never_repeat_when_the_store_forgets_the_counter() {
    let mut c = conn().await;
    let (key, fence) = (unique("claim"), unique("fence"));
    let ttl = Duration::from_secs(5);
    let first = acquire(&mut c, &key, &fence, "a", ttl).await.expect("redis").expect("claimed");
    assert!(release(&mut c, &first).await.expect("redis"));
    // The store forgets the counter (what a restart without data does to
    // it, which takes far longer than the clock's millisecond).
    tokio::time::sleep(Duration::from_millis(2)).await;
    let _: () = redis::cmd("DEL").arg(&fence).query_async(&mut c).await.expect("redis");
    let second = acquire(&mut c, &key, &fence, "b", ttl).await.expect("redis").expect("claimed again");
    assert!(
        second.token > first.token,
        "token {} after the counter was lost repeats or undercuts {}",
        second.token,
        first.token
    );
    let third = acquire(&mut c, &unique("claim"), &fence, "c", ttl).await.expect("redis").expect("claimed");
    assert!(third.token > second.token, "tokens keep growing: {} then {}", second.token, third.token);
}

#[tokio::test]
async fn a_generation_is_created_once_and_a_reset_store_reads_as_lost() {
    use sluice_coord::generation::{self, Expect, Lost};
    let mut c = conn().await;
    let prefix = format!("{}:", unique("gen"));
    let (made, created) = generation::open_or_create(&mut c, &prefix).await.expect("redis");
    assert!(created, "an unmarked store gets a marker");
    let (again, created) = generation::open(&mut c, &prefix, &Expect::Nothing).await.expect("redis");
    let created = created.expect("opens");
    assert_eq!((again.clone(), created), (made.clone(), false), "a marked store keeps its marker");
    let recorded = Expect::Recorded(made.id.clone());
    let (opened, verdict) = generation::open(&mut c, &prefix, &recorded).await.expect("redis");
    assert!(verdict.is_ok() && opened == made, "the recorded one matches");
    assert_eq!(generation::check(&mut c, &made).await.expect("redis"), Ok(()));

    // A fenced write checks the generation in the same step as it writes.
    let script = redis::Script::new(&format!(
        "{}\nlocal refused = sluice_refused(KEYS[1], ARGV[1]) if refused then return refused end\nredis.call('SET', KEYS[2], 'x')\nreturn 1",
        generation::GENERATION_GUARD
    ));
    let data = unique("data");
    let written: i64 =
        script.key(&made.key).key(&data).arg(&made.id).invoke_async(&mut c).await.expect("same generation");
    assert_eq!(written, 1);

    // The store is wiped.
    let _: () = redis::cmd("DEL").arg(&made.key).arg(&data).query_async(&mut c).await.expect("redis");
    assert!(matches!(generation::check(&mut c, &made).await.expect("redis"), Err(Lost::Missing { .. })));
    let refused =
        script.key(&made.key).key(&data).arg(&made.id).invoke_async::<i64>(&mut c).await.expect_err("refused");
    assert!(generation::is_refusal(&refused), "refusal carries its code: {refused}");
    let exists: i64 = redis::cmd("EXISTS").arg(&data).query_async(&mut c).await.expect("redis");
    assert_eq!(exists, 0, "the refused script wrote nothing");
    // A service that recorded the old generation elsewhere does not mark the store anew.
    let (expected, verdict) = generation::open(&mut c, &prefix, &recorded).await.expect("redis");
    assert_eq!(expected, made, "the generation the state lives in, though the store lacks it");
    let lost = verdict.expect_err("lost");
    assert!(matches!(lost, Lost::Missing { .. }), "{lost}");
    let marked: i64 = redis::cmd("EXISTS").arg(&made.key).query_async(&mut c).await.expect("redis");
    assert_eq!(marked, 0, "opening with a recorded generation never creates a marker");
    // Another store: a new marker, which the old generation does not match.
    let (other, _) = generation::open_or_create(&mut c, &prefix).await.expect("redis");
    assert_ne!(other.id, made.id);
    assert!(matches!(generation::check(&mut c, &made).await.expect("redis"), Err(Lost::Changed { .. })));
}
