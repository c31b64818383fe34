//! The batch apply (one script call per pool per batch) against the one-swap script,
//! on the real Redis: the same swaps, replays and older sequences mixed in, applied one
//! by one under one prefix and a batch at a time under another, give the same result per
//! swap, the same pool hashes, the same audit lists and the same price stream, each
//! pool's messages in the same order.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use sluice_coord::generation::Expect;
use sluice_core::pool::PoolUpdate;
use sluice_core::seq::Seq;
use sluice_dex::DexConfig;
use sluice_dex::outputs::{Live, Outputs};
use sluice_dex::state::{self, Apply};
use sluice_runtime::RuntimeMetrics;
use sluice_runtime::sink::{RedisConfig, RedisSink, StateStore};
use sluice_service::env::EnvReader;

/// `Live` outputs under `prefix`, auditing every applied swap.
fn live(prefix: &str) -> Live {
    let vars = [
        ("T_REDIS_URL".to_string(), sluice_testkit::redis_url()),
        ("T_REDIS_PREFIX".to_string(), prefix.to_string()),
        ("T_AUDIT_APPLIED".to_string(), "true".to_string()),
    ];
    let mut env = EnvReader::from_vars("T_", vars);
    let (redis, dex) = (RedisConfig::read(&mut env), DexConfig::read(&mut env));
    env.finish().expect("test settings");
    let redis = redis.expect("a Redis URL");
    let metrics = RuntimeMetrics::new(&sluice_dex::handler::IDENTITY, "apply-many-test");
    let state = StateStore { prefix: prefix.to_string(), expect: Expect::Nothing };
    let sink = RedisSink::start(&redis, sluice_dex::handler::scripts(), &metrics, state).expect("redis sink");
    Live::new(&dex, sink)
}

/// 120 swaps over three pools, interleaved: mostly rising sequences, with replays (the
/// same sequence again), older sequences, repeated prices (no message) and swaps without
/// a square-root price or ticks.
fn swaps() -> Vec<(String, PoolUpdate, f64)> {
    let mut out = Vec::new();
    let mut slot: HashMap<usize, u64> = HashMap::new();
    for n in 0..120u64 {
        let p = (n * 7 % 3) as usize;
        let s = slot.entry(p).or_insert(100);
        let seq = match n % 11 {
            3 => *s,                  // a replay of the last one
            7 => s.saturating_sub(5), // an older one
            _ => {
                *s += 1 + n % 2;
                *s
            }
        };
        let update = PoolUpdate {
            seq: Seq { slot: seq, tx_index: (n % 4) as u32, ix_index: 0 },
            reserve_a: 1_000 + n,
            reserve_b: 2_000 + 3 * n,
            sqrt_price_x64: (n % 4 != 2).then_some(u128::from(n) << 60),
            last_price_ticks: (n % 5 == 0).then_some(n * 10),
        };
        let price = if n % 4 == 1 { 1.5 } else { 1.0 + n as f64 / 100.0 };
        out.push((format!("pool-{p}"), update, price));
    }
    out
}

async fn subscribe(channels: &[String]) -> tokio::sync::mpsc::UnboundedReceiver<(String, String)> {
    let client = redis::Client::open(sluice_testkit::redis_url()).expect("url");
    let mut pubsub = client.get_async_pubsub().await.expect("pubsub");
    for channel in channels {
        pubsub.subscribe(channel).await.expect("SUBSCRIBE");
    }
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = pubsub.on_message();
        while let Some(m) = messages.next().await {
            let payload: String = m.get_payload().unwrap_or_default();
            if tx.send((m.get_channel_name().to_string(), payload)).is_err() {
                break;
            }
        }
    });
    rx
}

/// Every message on `channel` up to the `end` marker the test publishes last.
async fn stream(rx: &mut tokio::sync::mpsc::UnboundedReceiver<(String, String)>, ends: usize) -> Vec<(String, String)> {
    let (mut got, mut seen) = (Vec::new(), 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    while seen < ends {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, rx.recv()).await {
            Ok(Some((_, payload))) if payload == "end" => seen += 1,
            Ok(Some(m)) => got.push(m),
            _ => panic!("the price stream ended early; got {} messages", got.len()),
        }
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_applies_exactly_as_its_swaps_one_by_one() {
    let (one_prefix, many_prefix) =
        (format!("{}:", sluice_testkit::unique("apply-one")), format!("{}:", sluice_testkit::unique("apply-many")));
    let (one, many) = (live(&one_prefix), live(&many_prefix));
    let channels = [state::prices_channel(&one_prefix), state::prices_channel(&many_prefix)];
    let mut rx = subscribe(&channels).await;
    let swaps = swaps();
    let applies: Vec<Apply<'_>> =
        swaps.iter().map(|(pool, update, price)| Apply { pool, update: *update, price: *price, venue: 1 }).collect();

    let mut by_one = Vec::new();
    for apply in &applies {
        by_one.push(one.apply(apply).await.expect("apply"));
    }
    let mut by_many = Vec::new();
    for batch in applies.chunks(17) {
        let replies = many.apply_all(batch).await.expect("apply_all");
        by_many.extend(replies.into_iter().map(|r| r.expect("a swap's reply")));
    }
    assert_eq!(by_many, by_one, "per-swap results");
    assert!(by_one.iter().any(|a| !a) && by_one.iter().filter(|a| **a).count() > 60, "both kinds: {by_one:?}");

    let client = redis::Client::open(sluice_testkit::redis_url()).expect("url");
    let mut conn = client.get_multiplexed_async_connection().await.expect("redis");
    for p in 0..3 {
        let pool = format!("pool-{p}");
        let hash = |prefix: &str| redis::cmd("HGETALL").arg(state::pool_key(prefix, &pool)).clone();
        let (a, b): (HashMap<String, String>, HashMap<String, String>) = (
            hash(&one_prefix).query_async(&mut conn).await.expect("HGETALL"),
            hash(&many_prefix).query_async(&mut conn).await.expect("HGETALL"),
        );
        assert!(a.contains_key("sqrt_price_x64") && a.contains_key("last_price_ticks"), "{a:?}");
        assert_eq!(b, a, "{pool}'s hash");
        let (a, b) = (
            state::read_audit(&mut conn, &one_prefix, &pool).await.expect("audit"),
            state::read_audit(&mut conn, &many_prefix, &pool).await.expect("audit"),
        );
        assert_eq!(b, a, "{pool}'s audit list");
    }
    for channel in &channels {
        let _: i64 = redis::cmd("PUBLISH").arg(channel).arg("end").query_async(&mut conn).await.expect("PUBLISH");
    }
    let messages = stream(&mut rx, 2).await;
    // Per pool, in order: a batch's pools publish one after the other, so how two
    // pools' messages interleave within a batch is not kept (nor promised).
    let on = |c: &str| {
        let mut by_pool: HashMap<String, Vec<String>> = HashMap::new();
        for (_, m) in messages.iter().filter(|(ch, _)| ch == c) {
            let (pool, price) = m.split_once(' ').expect("<pool> <price>");
            by_pool.entry(pool.to_string()).or_default().push(price.to_string());
        }
        by_pool
    };
    let (a, b) = (on(&channels[0]), on(&channels[1]));
    let published: usize = a.values().map(Vec::len).sum();
    let applied = by_one.iter().filter(|x| **x).count();
    assert!(a.len() == 3 && published > 40 && published < applied, "repeated prices publish nothing: {a:?}");
    assert_eq!(b, a, "the price stream, pool by pool");
}
