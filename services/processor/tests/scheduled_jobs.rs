//! Processors hold no scheduled work, so scaling them changes nothing in
//! how often a job runs: two scheduler replicas run the heartbeat (every
//! second) and the token refresh (every 2 s) while 1, then 3 processor
//! processes consume a fed chain; in both phases every tick's effect was
//! applied exactly once (by the ledger's count in the history, and for the
//! heartbeat by its own effect counter) and none was missed or skipped.

mod jepsen;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jepsen::Scenario;
use sluice_chainsim::feed::{FeedOptions, feed};
use sluice_chainsim::server::{ChainNode, ServerOptions};
use sluice_chainsim::{Chain, ChainConfig};
use sluice_core::clock::now_ms;
use sluice_scheduler::clock::SystemClock;
use sluice_scheduler::config::SchedulerConfig;
use sluice_scheduler::engine::{Engine, JobEntry};
use sluice_scheduler::jobs::heartbeat::effect_key;
use sluice_scheduler::metrics::Metrics;
use sluice_scheduler::model::Outcome;
use sluice_scheduler::store::Store;
use sluice_scheduler::store::redis::RedisStore;
use sluice_service::env::EnvReader;

const PHASE: Duration = Duration::from_secs(15);

async fn scheduler(instance: &str, prefix: &str, chain_url: &str) -> Engine {
    let vars = [
        ("REDIS_URL", sluice_testkit::redis_url()),
        ("REDIS_PREFIX", prefix.to_string()),
        ("INSTANCE_ID", instance.to_string()),
        ("CHAIN_URL", chain_url.to_string()),
        ("JOB_HEARTBEAT_SCHEDULE", "* * * * * *".to_string()),
        ("JOB_TOKEN_REFRESH_SCHEDULE", "*/2 * * * * *".to_string()),
        ("JOB_POOL_RECONCILE_ENABLED", "false".to_string()),
        // The engine only: no admin API is served here.
        ("ADMIN_INSECURE", "true".to_string()),
    ];
    let mut env = EnvReader::from_vars("S_", vars.into_iter().map(|(k, v)| (format!("S_{k}"), v)));
    let config = SchedulerConfig::read(&mut env).expect("REDIS_URL");
    let jobs = sluice_scheduler::jobs::builtin(&config).expect("jobs");
    let entries = JobEntry::read_all(&mut env, jobs);
    env.finish().expect("valid scheduler configuration");
    let client = config.redis.client().expect("url");
    let conn = redis::aio::ConnectionManager::new(client).await.expect("redis");
    let store = RedisStore::new(conn, prefix, config.history_keep, config.history_ttl);
    let engine = Engine::new(config, Arc::new(store), Arc::new(SystemClock), Metrics::new(), entries);
    engine.start();
    engine
}

/// Per tick of `job` in `[from, to)`: how many runs applied its effect.
async fn runs_per_tick(store: &dyn Store, job: &str, from: i64, to: i64) -> BTreeMap<i64, usize> {
    let mut out = BTreeMap::new();
    for run in store.all_runs(job).await.expect("runs") {
        if run.tick_ms >= from && run.tick_ms < to {
            let n = out.entry(run.tick_ms).or_insert(0);
            if run.applied > 0 {
                *n += 1;
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_or_three_processors_change_nothing_in_how_often_jobs_run() {
    let redis = sluice_testkit::redis_url();
    let s = Scenario::new("sched-jobs", &redis, 2_000).await;
    // The chain node for the token refresh: the scenario's chain, from now.
    let chain = Chain::new(ChainConfig { genesis_ms: now_ms(), ..s.chain.clone() }).expect("chain");
    let (listener, addr) = ChainNode::bind(([127, 0, 0, 1], 0).into()).await.expect("bind");
    tokio::spawn(ChainNode::start(chain, &ServerOptions::default()).serve(listener, std::future::pending()));
    let chain_url = format!("http://{addr}");

    let replicas = [scheduler("jobs-a", &s.prefix, &chain_url).await, scheduler("jobs-b", &s.prefix, &chain_url).await];
    // Live-paced traffic (2,000 transactions/s) for both phases.
    let live = Chain::new(ChainConfig { genesis_ms: now_ms(), ..s.chain.clone() }).expect("chain");
    let options = FeedOptions {
        paced: true,
        max_duration: Some(PHASE * 2 + Duration::from_secs(2)),
        ..FeedOptions::new(&s.input)
    };
    let kafka = s.kafka.clone();
    let feeding = tokio::spawn(async move { feed(live, &kafka, &options).await });

    let t0 = now_ms();
    let one = s.spawn("p1");
    tokio::time::sleep(PHASE).await;
    let t1 = now_ms();
    let (committed_one, _) = tokio::task::block_in_place(|| s.progress());
    let more = [s.spawn("p2"), s.spawn("p3")];
    tokio::time::sleep(PHASE).await;
    let t2 = now_ms();
    let (committed_three, _) = tokio::task::block_in_place(|| s.progress());
    for r in &replicas {
        r.shutdown().await;
    }
    one.terminate();
    for p in more {
        p.terminate();
    }
    feeding.await.expect("feed task").expect("feed");
    assert!(
        committed_one > 10_000 && committed_three > committed_one + 10_000,
        "processors worked in both phases: {committed_one} → {committed_three}"
    );

    let store = {
        let client = redis::Client::open(redis.as_str()).expect("url");
        RedisStore::new(
            redis::aio::ConnectionManager::new(client).await.expect("redis"),
            &s.prefix,
            100_000,
            PHASE * 10,
        )
    };
    for (job, period) in [("heartbeat", 1_000), ("token-refresh", 2_000)] {
        let all = store.all_runs(job).await.expect("runs");
        let not_run: Vec<_> = all.iter().filter(|r| r.outcome != Outcome::Succeeded).collect();
        assert!(not_run.is_empty(), "{job}: every tick ran: {not_run:#?}");
        for (phase, from, to) in [("1 processor", t0, t1), ("3 processors", t1, t2)] {
            // Whole ticks inside the phase.
            let (from, to) = ((from / period + 1) * period, (to / period) * period);
            let per_tick = runs_per_tick(&store, job, from, to).await;
            let expected = ((to - from) / period) as usize;
            let ticks: Vec<i64> = per_tick.keys().copied().collect();
            assert_eq!(per_tick.len(), expected, "{job} with {phase}: every tick has a run: {ticks:?}");
            assert!(per_tick.values().all(|n| *n == 1), "{job} with {phase}: each tick applied once: {per_tick:?}");
            if job == "heartbeat" {
                let mut conn = redis::Client::open(redis.as_str())
                    .expect("url")
                    .get_multiplexed_async_connection()
                    .await
                    .expect("redis");
                for tick in per_tick.keys() {
                    let effects: Option<i64> =
                        redis::cmd("GET").arg(effect_key(&s.prefix, *tick)).query_async(&mut conn).await.expect("GET");
                    assert_eq!(effects, Some(1), "heartbeat tick {tick}: its write's own counter");
                }
            }
            eprintln!("{job} with {phase}: {} ticks, each applied once", per_tick.len());
        }
    }
}
