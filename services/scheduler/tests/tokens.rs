//! Token-metadata refresh against chainsim and the real Redis: the chain's
//! tokens land in the registry the processors read, each changed token is
//! announced on the invalidation channel (processors drop it from their
//! caches), and an unchanged registry is left alone.

mod common;

use sluice_scheduler::model::Outcome;
use std::sync::Arc;
use std::time::Duration;

use common::{chain_config, engine, redis, start_chain, store, wait_for_run};
use futures_util::StreamExt;
use sluice_chainsim::server::ServerOptions;
use sluice_dex::registry;
use sluice_proto::chain::v1::ListTokensRequest;
use sluice_scheduler::jobs::tokens::TokenRefresh;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refresh_writes_the_registry_and_announces_changed_tokens() {
    let prefix = format!("{}:", sluice_testkit::unique("sched-tokens"));
    let chain = start_chain(chain_config(8), ServerOptions::default()).await;
    let tokens = chain.client.clone().list_tokens(ListTokensRequest {}).await.expect("ListTokens").into_inner().tokens;
    assert!(tokens.len() >= 4);

    let client = redis::Client::open(sluice_testkit::redis_url()).expect("url");
    let mut pubsub = client.get_async_pubsub().await.expect("pubsub");
    pubsub.subscribe(registry::invalidate_channel(&prefix)).await.expect("subscribe");
    let mut conn = redis().await;
    // A stale entry a processor would have cached.
    let () = redis::cmd("HSET")
        .arg(registry::tokens_key(&prefix))
        .arg(&tokens[0].mint)
        .arg("3:OLD")
        .query_async(&mut conn)
        .await
        .expect("HSET");

    let chain_client = sluice_scheduler::jobs::chain_client(&{
        let mut env = sluice_service::env::EnvReader::from_vars(
            "S_",
            [
                ("S_REDIS_URL".to_string(), "redis://x".to_string()),
                ("S_CHAIN_URL".to_string(), chain.url.clone()),
                ("S_ADMIN_TOKEN".to_string(), common::ADMIN_TOKEN.to_string()),
            ],
        );
        sluice_scheduler::config::SchedulerConfig::read(&mut env).expect("REDIS_URL")
    })
    .expect("chain client");
    let engine = engine(
        "tokens-a",
        &prefix,
        &[("JOB_TOKEN_REFRESH_SCHEDULE", "0 0 0 1 1 *")],
        vec![Arc::new(TokenRefresh::new(chain_client))],
    )
    .await;
    let store = store(&prefix).await;

    let first = engine.trigger_now("token-refresh").await.expect("trigger");
    assert!(first.started);
    let run = wait_for_run(&store, "token-refresh", Duration::from_secs(20), "ended", |r| {
        r.tick_ms == first.tick_ms && r.outcome != Outcome::Running
    })
    .await;
    assert_eq!(run.outcome, Outcome::Succeeded, "{run:?}");
    assert_eq!(run.items as usize, tokens.len());
    assert_eq!(run.drift_repaired as usize, tokens.len(), "every entry was new or stale: {run:?}");
    let stored: std::collections::HashMap<String, String> =
        redis::cmd("HGETALL").arg(registry::tokens_key(&prefix)).query_async(&mut conn).await.expect("HGETALL");
    assert_eq!(stored, registry::entries(&tokens), "the registry is the chain's token list");

    // One invalidation per changed token, the stale one included.
    let mut messages = pubsub.on_message();
    let mut announced = Vec::new();
    while announced.len() < tokens.len() {
        let msg =
            tokio::time::timeout(Duration::from_secs(5), messages.next()).await.expect("announced").expect("open");
        announced.push(msg.get_payload::<String>().expect("a mint"));
    }
    announced.sort();
    let mut mints: Vec<String> = tokens.iter().map(|t| t.mint.clone()).collect();
    mints.sort();
    assert_eq!(announced, mints);

    // Nothing changed: nothing written, nothing announced.
    let second = engine.trigger_now("token-refresh").await.expect("trigger");
    let run = wait_for_run(&store, "token-refresh", Duration::from_secs(20), "ended", |r| {
        r.tick_ms == second.tick_ms && r.outcome != Outcome::Running
    })
    .await;
    assert_eq!((run.outcome.as_str(), run.drift_repaired), ("succeeded", 0), "{run:?}");
    assert!(tokio::time::timeout(Duration::from_millis(500), messages.next()).await.is_err(), "no announcement");
    engine.shutdown().await;
}
