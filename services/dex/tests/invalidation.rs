//! A running processor's token cache follows the registry's invalidation
//! channel on the real Redis: a changed token is dropped (and re-read on
//! its next use), `*` drops everything, so registry changes apply without
//! a restart.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_core::cache::BatchEvictingCache;
use sluice_dex::registry::{self, TokenInfo};

async fn until(what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalidations_drop_cached_tokens() {
    let prefix = format!("{}:", sluice_testkit::unique("dex-invalidate"));
    let client = redis::Client::open(sluice_testkit::redis_url()).expect("url");
    let mut conn = client.get_multiplexed_async_connection().await.expect("redis");
    let cache: Arc<BatchEvictingCache<String, TokenInfo>> = Arc::new(BatchEvictingCache::new(100));
    let info = registry::decode("6:USDC").expect("valid");
    let follower = tokio::spawn(registry::follow_invalidations(client, prefix.clone(), Arc::clone(&cache)));
    let channel = registry::invalidate_channel(&prefix);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let subscribers: Vec<(String, i64)> =
            redis::cmd("PUBSUB").arg("NUMSUB").arg(&channel).query_async(&mut conn).await.expect("NUMSUB");
        if subscribers.first().is_some_and(|(_, n)| *n > 0) {
            break;
        }
        assert!(Instant::now() < deadline, "the follower never subscribed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The follower clears the cache right after subscribing; fill it after.
    tokio::time::sleep(Duration::from_millis(200)).await;
    for mint in ["mint-a", "mint-b", "mint-c"] {
        cache.insert(mint.to_string(), info);
    }

    let () = redis::cmd("PUBLISH").arg(&channel).arg("mint-b").query_async(&mut conn).await.expect("PUBLISH");
    until("mint-b is dropped", || cache.get("mint-b").is_none()).await;
    assert!(cache.get("mint-a").is_some() && cache.get("mint-c").is_some(), "only the named token goes");

    let () = redis::cmd("PUBLISH").arg(&channel).arg("*").query_async(&mut conn).await.expect("PUBLISH");
    until("everything is dropped", || cache.is_empty()).await;
    follower.abort();
}
