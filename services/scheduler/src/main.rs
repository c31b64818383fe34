//! scheduler: owns every periodic job, so processors can scale freely.
//! Runs as 2+ replicas; each scheduled tick runs once across them.
//!
//! Configuration: `SLUICE_SCHEDULER_…` variables, listed by `sluice-scheduler --help` and
//! in docs/scheduler.md, both rendered from `sluice_scheduler::config::settings`; every bad
//! or unknown one is reported by name and the process exits with status 2.
//!
//! `sluice-scheduler admin list|runs JOB|trigger JOB|pause JOB|resume JOB`
//! calls a running scheduler's admin API.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use sluice_scheduler::clock::SystemClock;
use sluice_scheduler::config::SchedulerConfig;
use sluice_scheduler::config::settings as s;
use sluice_scheduler::engine::{Engine, JobEntry};
use sluice_scheduler::metrics::Metrics;
use sluice_scheduler::store::redis::RedisStore;
use sluice_scheduler::{admin, jobs};
use sluice_service::env::EnvReader;
use sluice_service::settings;
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

const PREFIX: &str = "SLUICE_SCHEDULER_";

/// The service's own settings and its Redis endpoint's (ACL user, TLS files).
const TABLES: &[&[settings::Setting]] = &[s::SETTINGS, sluice_coord::endpoint::SETTINGS];

/// Where each job's settings are, in the docs and `--help`.
const JOB_PREFIX: &str = "SLUICE_SCHEDULER_JOB_<NAME>_";

fn main() -> anyhow::Result<()> {
    if std::env::args().nth(1).is_some_and(|a| a == "--help" || a == "-h") {
        use std::io::Write;
        let usage = "sluice-scheduler: runs every periodic job once per tick across its replicas; \
                     `sluice-scheduler admin --help` for the admin client.\n\
                     Its settings are environment variables (a bad or unknown one stops it with status 2):\n";
        let (service, jobs) = (settings::help(PREFIX, TABLES), settings::help(JOB_PREFIX, &[s::JOB_SETTINGS]));
        write!(
            std::io::stdout(),
            "{usage}\n{service}\nEach job's, <NAME> being TOKEN_REFRESH, POOL_RECONCILE or HEARTBEAT:\n{jobs}"
        )?;
        return Ok(());
    }
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

/// The service's settings and its jobs'; a bad or unknown one stops the process with status 2,
/// every problem named.
fn configuration() -> (SchedulerConfig, Vec<JobEntry>) {
    let mut env = EnvReader::from_env(PREFIX);
    let config = SchedulerConfig::read(&mut env);
    let entries = match config.as_ref().map(jobs::builtin) {
        Some(Ok(jobs)) => JobEntry::read_all(&mut env, jobs),
        Some(Err(e)) => {
            env.problem(e.to_string());
            Vec::new()
        }
        None => Vec::new(),
    };
    // A missing required setting is one of the problems `finish` reports.
    match (env.finish(), config) {
        (Ok(()), Some(config)) => (config, entries),
        (result, _) => {
            tracing::error!("{}", result.err().map_or_else(|| "invalid configuration".to_string(), |e| e.to_string()));
            std::process::exit(2);
        }
    }
}

async fn run() -> anyhow::Result<()> {
    let (config, entries) = configuration();

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

    let client = config.redis.client()?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_exactly_its_tables() {
        let vars = [("REDIS_URL", "redis://r:6379"), ("ADMIN_INSECURE", "true")];
        let mut env = EnvReader::from_vars(PREFIX, vars.map(|(k, v)| (format!("{PREFIX}{k}"), v.to_string())));
        let config = SchedulerConfig::read(&mut env).expect("complete");
        // The chain client's channel is made (not connected) inside a runtime.
        let tokio = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio");
        let _inside = tokio.enter();
        let jobs = jobs::builtin(&config).expect("jobs");
        let names: Vec<String> = jobs.iter().map(|j| j.name().to_uppercase().replace('-', "_")).collect();
        JobEntry::read_all(&mut env, jobs);
        let mut declared = settings::names(TABLES);
        for job in &names {
            declared.extend(s::JOB_SETTINGS.iter().map(|s| format!("JOB_{job}_{}", s.name)));
        }
        assert_eq!(env.names_read(), declared);
        env.finish().expect("valid");
    }

    #[test]
    fn the_docs_tables_are_the_code_s() {
        let page = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/scheduler.md");
        for (key, table) in [
            ("scheduler", settings::markdown(PREFIX, TABLES)),
            ("scheduler-jobs", settings::markdown(JOB_PREFIX, &[s::JOB_SETTINGS])),
        ] {
            if let Err(e) = settings::check_docs(&page, key, &table) {
                panic!("{e}");
            }
        }
    }
}
