//! Pool reconciliation against a real Redis and chainsim, triggered through
//! the admin gRPC API: drift injected into Redis is found and repaired, a
//! clean run finds none, and with one pool 100× slower the sweep's other
//! pools finish at the pipeline's pace.

mod common;

use std::time::Duration;

use common::{ADMIN_TOKEN, Replica, RunRecord, redis, start_chain_with_slow_pool, store, wait_for_run};
use sluice_proto::scheduler::v1::scheduler_admin_client::SchedulerAdminClient;
use sluice_proto::scheduler::v1::{GetRunsRequest, ListJobsRequest, PauseRequest, ResumeRequest, TriggerNowRequest};
use sluice_scheduler::model::Outcome;
use sluice_scheduler::store::redis::RedisStore;

const POOLS: usize = 24;
const LATENCY_MS: u64 = 20;
const SLOW_FACTOR: u32 = 100;
const CONCURRENCY: usize = 4;

async fn corrupt(redis: &mut redis::aio::MultiplexedConnection, prefix: &str, pools: &[String]) {
    // Three kinds of drift: a reserve, the swap count, and a price state.
    let fields = [("reserve_a", "1"), ("swaps_applied", "999999"), ("reserve_b", "7")];
    for (pool, (field, value)) in pools.iter().zip(fields.iter().cycle()) {
        let () = redis::cmd("HSET")
            .arg(sluice_dex::state::pool_key(prefix, pool))
            .arg(*field)
            .arg(*value)
            .query_async(redis)
            .await
            .expect("HSET");
    }
}

/// A request carrying the admin token.
fn with_token<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert("authorization", format!("Bearer {ADMIN_TOKEN}").parse().expect("ascii"));
    request
}

type Api = SchedulerAdminClient<tonic::transport::Channel>;

async fn admin(replica: &Replica) -> Api {
    SchedulerAdminClient::connect(replica.grpc_url()).await.expect("admin gRPC")
}

/// Lists the jobs: the token is required; schedule, next ticks, effects.
async fn check_listing(api: &mut Api) {
    let refused = api.list_jobs(ListJobsRequest {}).await.expect_err("no token");
    assert_eq!(refused.code(), tonic::Code::Unauthenticated);
    let jobs = api.list_jobs(with_token(ListJobsRequest {})).await.expect("ListJobs").into_inner().jobs;
    let names: Vec<&str> = jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(names, ["token-refresh", "pool-reconcile", "heartbeat"]);
    let recon = &jobs[1];
    assert_eq!(recon.schedule, "0 0 0 1 1 *");
    assert_eq!(recon.next_ticks_ms.len(), 5, "the next five ticks are listed");
    assert!(recon.next_ticks_ms.windows(2).all(|w| w[0] < w[1]));
    assert!(recon.effects.contains("ledger"), "the job's declaration: {}", recon.effects);
}

/// Triggers the reconciliation and waits for the run's end.
async fn trigger(api: &mut Api, store: &RedisStore) -> RunRecord {
    let request = with_token(TriggerNowRequest { job: "pool-reconcile".into() });
    let triggered = api.trigger_now(request).await.expect("TriggerNow").into_inner();
    assert!(triggered.started, "{triggered:?}");
    wait_for_run(store, "pool-reconcile", Duration::from_secs(30), "ended", |r| {
        r.tick_ms == triggered.tick_ms && r.manual && r.outcome != Outcome::Running
    })
    .await
}

/// The slow pool takes 100× the others; everything else finishes at the
/// pipeline's pace, and the run lasts about as long as the slow pool alone
/// (a cohort sweep would hold its cohort behind it).
fn check_pipeline(run: &RunRecord) {
    let slow_ms = LATENCY_MS * u64::from(SLOW_FACTOR);
    let others_ms = (POOLS as u64 - 1) * LATENCY_MS / (CONCURRENCY as u64 - 1);
    eprintln!(
        "sweep: {} pools in {} ms; item done p50 {} ms, p95 {} ms, max {} ms",
        run.items,
        run.ended_ms - run.started_ms,
        run.item_done_p50_ms,
        run.item_done_p95_ms,
        run.item_done_max_ms
    );
    let duration = (run.ended_ms - run.started_ms) as u64;
    assert!(run.item_done_max_ms >= slow_ms, "the slow pool took its time: {run:?}");
    assert!(
        run.item_done_p95_ms < slow_ms / 4,
        "95% of pools done at the pipeline's pace (~{others_ms} ms), not behind the slow pool: {run:?}"
    );
    assert!(duration < slow_ms + 1_000, "the run lasts about the slow pool's time ({slow_ms} ms): {duration} ms");
}

/// Pause, then a trigger is refused with the reason; resume; the history
/// through the API, newest first.
async fn check_pause_and_history(api: &mut Api, replica: &Replica) {
    api.pause(with_token(PauseRequest { job: "pool-reconcile".into(), reason: "maintenance".into() }))
        .await
        .expect("Pause");
    let request = with_token(TriggerNowRequest { job: "pool-reconcile".into() });
    let paused = api.trigger_now(request).await.expect("TriggerNow").into_inner();
    assert!(!paused.started && paused.reason.contains("paused"), "{paused:?}");
    let jobs = api.list_jobs(with_token(ListJobsRequest {})).await.expect("ListJobs").into_inner().jobs;
    assert!(jobs[1].paused && jobs[1].paused_reason == "maintenance", "{:?}", jobs[1]);
    api.resume(with_token(ResumeRequest { job: "pool-reconcile".into() })).await.expect("Resume");
    let request = with_token(GetRunsRequest { job: "pool-reconcile".into(), limit: 10 });
    let runs = api.get_runs(request).await.expect("GetRuns").into_inner().runs;
    let outcomes: Vec<(&str, u64)> = runs.iter().map(|r| (r.outcome.as_str(), r.applied)).collect();
    assert_eq!(outcomes, [("skipped", 0), ("succeeded", 0), ("succeeded", 3)], "newest first: {runs:#?}");
    assert_eq!(replica.metric_reaching("sluice_scheduler_drift_repaired_total", "pool-reconcile", 3.0).await, 3.0);
    assert_eq!(replica.metric_reaching("sluice_scheduler_runs_total", "outcome=\"succeeded\"", 2.0).await, 2.0);
}

/// The same API from a shell.
fn check_cli(replica: &Replica) {
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice-scheduler"))
            .arg("admin")
            .arg("--url")
            .arg(replica.grpc_url())
            .args(args)
            .env("SLUICE_SCHEDULER_ADMIN_TOKEN", ADMIN_TOKEN)
            .output()
            .expect("running the admin command");
        (out.status.success(), String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr))
    };
    let (ok, listed) = cli(&["list"]);
    assert!(ok && listed.contains("pool-reconcile  [0 0 0 1 1 *]") && listed.contains("next: "), "{listed}");
    let (ok, runs) = cli(&["runs", "pool-reconcile", "--limit", "5"]);
    assert!(ok && runs.lines().count() == 3 && runs.contains("succeeded") && runs.contains("drift 3/3"), "{runs}");
    assert!(runs.contains("applied 3"), "{runs}");
    let (ok, denied) = cli(&["--token", "wrong", "list"]);
    assert!(!ok && denied.contains("bearer token"), "{denied}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repairs_injected_drift_finds_none_when_clean_and_pipelines_past_a_slow_pool() {
    let prefix = format!("{}:", sluice_testkit::unique("sched-recon"));
    let (chain, pools, slow) = start_chain_with_slow_pool(POOLS, Duration::from_millis(LATENCY_MS), SLOW_FACTOR).await;
    chain.node.wait_for_slot(30).await;
    let mut conn = redis().await;
    let seeded = chain.seed_redis(&mut conn, &prefix, 30).await;
    assert!(seeded >= POOLS - 2, "pools with swaps by slot 30: {seeded}");
    assert_eq!(chain.mismatches(&mut conn, &prefix).await, Vec::<String>::new(), "seeded clean");
    let mut drifted = vec![slow.clone(), pools[5].clone(), pools[11].clone()];
    corrupt(&mut conn, &prefix, &drifted).await;
    let mut found = chain.mismatches(&mut conn, &prefix).await;
    found.sort();
    drifted.sort();
    assert_eq!(found, drifted, "the injected drift is visible");

    let mut replica = Replica::new(
        "recon-a",
        &prefix,
        &[
            ("CHAIN_URL", &chain.url),
            ("RECONCILE_CONCURRENCY", &CONCURRENCY.to_string()),
            // Never due during the test: every run here is triggered.
            ("JOB_POOL_RECONCILE_SCHEDULE", "0 0 0 1 1 *"),
            ("JOB_TOKEN_REFRESH_ENABLED", "false"),
            ("JOB_HEARTBEAT_ENABLED", "false"),
        ],
    );
    replica.start();
    replica.wait_ready(Duration::from_secs(30)).await;
    let mut api = admin(&replica).await;
    check_listing(&mut api).await;

    // Run 1: the drift is found and repaired, one write per pool.
    let store = store(&prefix).await;
    let run1 = trigger(&mut api, &store).await;
    assert_eq!(run1.outcome, Outcome::Succeeded, "{run1:?}\n{}", replica.log_tail());
    assert_eq!((run1.drift_found, run1.drift_repaired, run1.applied), (3, 3, 3), "{run1:?}");
    assert_eq!(run1.items as usize, POOLS, "{run1:?}");
    assert_eq!(chain.mismatches(&mut conn, &prefix).await, Vec::<String>::new(), "repaired to the chain's state");
    // Run 2: clean, nothing found, nothing written.
    let run2 = trigger(&mut api, &store).await;
    assert_eq!((run2.outcome, run2.drift_found, run2.drift_repaired, run2.applied), (Outcome::Succeeded, 0, 0, 0));
    check_pipeline(&run1);
    check_pipeline(&run2);
    check_pause_and_history(&mut api, &replica).await;
    check_cli(&replica);

    let (code, took) = replica.terminate(Duration::from_secs(30));
    assert_eq!(code, Some(0), "clean exit after SIGTERM in {took:?}\n{}", replica.log_tail());
}
