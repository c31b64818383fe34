//! The rebuild's switch script on the real Redis: it refuses while any live pool has applied
//! a swap the staged one has not, and refuses a store of another generation, writing
//! nothing either time; otherwise it renames every staged pool over its live one in one
//! step, publishes the prices it changed, and puts a lost marker back.

#![allow(clippy::unwrap_used)]

use redis::aio::MultiplexedConnection;
use sluice_dex::state::pool_key;
use sluice_ops::rebuild::RebuildError;
use sluice_ops::rebuild::switch::{Switch, switch};

async fn pool(conn: &mut MultiplexedConnection, prefix: &str, name: &str, seq: (u64, u32, u32), price: &str) {
    redis::cmd("HSET")
        .arg(pool_key(prefix, name))
        .arg("slot")
        .arg(seq.0)
        .arg("tx")
        .arg(seq.1)
        .arg("ix")
        .arg(seq.2)
        .arg("price")
        .arg(price)
        .query_async::<()>(conn)
        .await
        .unwrap();
}

async fn get(conn: &mut MultiplexedConnection, key: &str, field: &str) -> Option<String> {
    redis::cmd("HGET").arg(key).arg(field).query_async(conn).await.unwrap()
}

#[tokio::test]
async fn the_switch_waits_for_the_replay_and_then_swaps_every_pool_at_once() {
    let client = redis::Client::open(sluice_testkit::redis_url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let prefix = format!("{}:", sluice_testkit::unique("switch"));
    let staging = format!("{prefix}rebuild:");
    let pools = ["a".to_string(), "b".to_string(), "c".to_string()];
    let marker = sluice_coord::generation::key(&prefix);
    redis::cmd("SET").arg(&marker).arg("g1").query_async::<()>(&mut conn).await.unwrap();
    // Live: a at 10:5:0, b at 12:0:0 (ahead of its staged 11:9:9), c never swapped.
    pool(&mut conn, &prefix, "a", (10, 5, 0), "1.0").await;
    pool(&mut conn, &prefix, "b", (12, 0, 0), "2.0").await;
    pool(&mut conn, &staging, "a", (10, 5, 0), "1.5").await;
    pool(&mut conn, &staging, "b", (11, 9, 9), "2.5").await;
    pool(&mut conn, &staging, "c", (11, 0, 0), "3.0").await;

    let ahead = switch(&mut conn, &prefix, &staging, "g1", &pools).await.unwrap();
    assert_eq!(ahead, Switch::Ahead { pool: "b".into(), live: "12:0:0".into(), staged: "11:9:9".into() });
    assert_eq!(get(&mut conn, &pool_key(&prefix, "a"), "price").await.as_deref(), Some("1.0"), "nothing written");

    let other = switch(&mut conn, &prefix, &staging, "g0", &pools).await;
    assert!(matches!(other, Err(RebuildError::OtherStore { ref found, .. }) if found == "g1"), "{other:?}");

    // The replay catches up with b; the store lost its marker meanwhile.
    pool(&mut conn, &staging, "b", (12, 0, 0), "2.0").await;
    redis::cmd("DEL").arg(&marker).query_async::<()>(&mut conn).await.unwrap();
    let mut pubsub = client.get_async_pubsub().await.unwrap();
    pubsub.subscribe(format!("{prefix}prices")).await.unwrap();
    let done = switch(&mut conn, &prefix, &staging, "g1", &pools).await.unwrap();
    assert_eq!(done, Switch::Switched { pools: 3, prices_published: 2, marker_restored: true });
    for (name, price) in [("a", "1.5"), ("b", "2.0"), ("c", "3.0")] {
        assert_eq!(get(&mut conn, &pool_key(&prefix, name), "price").await.as_deref(), Some(price), "{name}");
        let staged: bool = redis::cmd("EXISTS").arg(pool_key(&staging, name)).query_async(&mut conn).await.unwrap();
        assert!(!staged, "{name}: renamed, not copied");
    }
    let restored: Option<String> = redis::cmd("GET").arg(&marker).query_async(&mut conn).await.unwrap();
    assert_eq!(restored.as_deref(), Some("g1"));
    use futures_util::StreamExt;
    let mut stream = pubsub.on_message();
    let mut published = Vec::new();
    for _ in 0..2 {
        let message = tokio::time::timeout(std::time::Duration::from_secs(5), stream.next()).await.unwrap().unwrap();
        published.push(message.get_payload::<String>().unwrap());
    }
    published.sort();
    assert_eq!(published, ["a 1.5", "c 3.0"], "the prices the switch changed");
}
