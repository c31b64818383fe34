//! scheduler: owns every periodic job, so processors can scale freely.
//! Runs as 2+ replicas; each scheduled tick runs once across them.
//!
//! Configuration: `SLUICE_SCHEDULER_…` variables (see ARCHITECTURE.md and
//! `sluice_scheduler::config`); every bad or unknown one is reported by
//! name and the process exits with status 2.
//!
//! `sluice-scheduler admin list|runs JOB|trigger JOB|pause JOB|resume JOB`
//! calls a running scheduler's admin API.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use sluice_scheduler::clock::SystemClock;
use sluice_scheduler::config::SchedulerConfig;
use sluice_scheduler::engine::{Engine, JobEntry};
use sluice_scheduler::metrics::Metrics;
use sluice_scheduler::store::redis::RedisStore;
use sluice_scheduler::{admin, jobs};
use sluice_service::env::EnvReader;
use sluice_service::{signal, telemetry};
use tokio::sync::watch;

/// Checks every 5 s that Redis still carries the generation opened at
/// start (the scripts refuse writes atomically meanwhile), and says so:
/// the gauge, readiness, an error in the log when it changes.
async fn watch_generation(
    store: RedisStore,
    generation: sluice_coord::generation::Generation,
    gauge: prometheus::IntGauge,
    replaced: Arc<std::sync::Mutex<Option<String>>>,
) {
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let Ok(verdict) = store.check_generation(&generation).await else { continue };
        let mut now = replaced.lock().unwrap_or_else(|e| e.into_inner());
        match (verdict, now.is_some()) {
            (Err(lost), false) => {
                tracing::error!(error = %lost, "No job runs: claims and writes are refused until the store's generation is back (restore Redis), or this replica restarts on the new one (docs/deploying.md, \"When Redis loses its data\")");
                *now = Some(lost.to_string());
            }
            (Ok(()), true) => {
                tracing::info!("The Redis state store's generation is back: jobs run again");
                *now = None;
            }
            _ => {}
        }
        gauge.set(i64::from(now.is_some()));
    }
}

fn main() -> anyhow::Result<()> {
    let tokio = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting tokio")?;
    // `sluice-scheduler admin …` talks to a running scheduler instead.
    if std::env::args().nth(1).as_deref() == Some("admin") {
        use clap::Parser;
        let args = sluice_scheduler::cli::AdminArgs::parse_from(std::env::args().skip(1));
        let out = tokio.block_on(sluice_scheduler::cli::run(args))?;
        use std::io::Write;
        std::io::stdout().write_all(out.as_bytes())?;
        return Ok(());
    }
    telemetry::init();
    let result = tokio.block_on(run());
    tokio.shutdown_timeout(Duration::from_secs(1));
    result
}

async fn run() -> anyhow::Result<()> {
    let mut env = EnvReader::from_env("SLUICE_SCHEDULER_");
    let config = SchedulerConfig::read(&mut env);
    let entries = match jobs::builtin(&config) {
        Ok(jobs) => JobEntry::read_all(&mut env, jobs),
        Err(e) => {
            env.problem(e.to_string());
            Vec::new()
        }
    };
    if let Err(e) = env.finish() {
        tracing::error!("{e}");
        std::process::exit(2);
    }

    let metrics = Metrics::new();
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    let (ready, connected) = sluice_service::admin::switch("not connected to Redis");
    // Not ready either while Redis is not the store the state is in.
    let replaced: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
    let check: sluice_service::admin::ReadyCheck = {
        let replaced = replaced.clone();
        Arc::new(move || match replaced.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            Some(why) => Err(sluice_service::admin::NotReady(why)),
            None => connected(),
        })
    };
    let (admin_addr, admin_task) =
        sluice_service::admin::serve(config.admin_listen, "scheduler", metrics.registry.clone(), check, stopped())
            .await
            .with_context(|| format!("binding the admin port {}", config.admin_listen))?;
    tracing::info!(%admin_addr, instance = config.instance_id, "Admin HTTP serving");

    let client = redis::Client::open(config.redis_url.as_str()).context("SLUICE_SCHEDULER_REDIS_URL")?;
    let shutdown = signal::shutdown();
    tokio::pin!(shutdown);
    let connect = || redis::aio::ConnectionManager::new(client.clone());
    let Some(conn) = signal::until_connected("Redis", connect, shutdown.as_mut()).await else {
        let _ = stop_tx.send(true);
        return Ok(());
    };
    let store = RedisStore::new(conn, &config.redis_prefix, config.history_keep, config.history_ttl);
    let generation = store.open_generation().await.context("opening the Redis state generation")?;
    tokio::spawn(watch_generation(store.clone(), generation, metrics.state_store_replaced.clone(), replaced));
    let engine = Engine::new(config.clone(), Arc::new(store), Arc::new(SystemClock), metrics, entries);
    let (grpc_addr, grpc_task) =
        admin::serve(config.grpc_listen, engine.clone(), config.admin_token.clone(), stopped())
            .await
            .with_context(|| format!("binding the gRPC port {}", config.grpc_listen))?;
    if config.admin_token.is_some() {
        tracing::info!(%grpc_addr, "Admin gRPC serving (bearer token required)");
    } else {
        tracing::warn!(%grpc_addr, "Admin gRPC serving WITHOUT a token (ADMIN_INSECURE=true): anyone who reaches it can trigger and pause jobs");
    }
    engine.start();
    ready.store(true, Ordering::SeqCst);

    shutdown.await;
    tracing::info!("Shutting down: no new claims; running jobs may finish");
    ready.store(false, Ordering::SeqCst);
    engine.shutdown().await;
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        let _ = grpc_task.await;
        let _ = admin_task.await;
    })
    .await;
    tracing::info!("Scheduler stopped");
    Ok(())
}
