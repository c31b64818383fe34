//! ingest: the chain's `Subscribe` stream into Kafka `chain.transactions`.
//! Run two: one is active (it holds a lease in Redis), the other stands by
//! and takes over within the lease time when the active one dies.
//!
//! Configuration: `SLUICE_INGEST_…` variables, listed by `ingest --help` and in
//! docs/workload.md, both rendered from `sluice_ingest::config::settings`; every bad or
//! unknown one is reported by name and the process exits with status 2.

use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use sluice_ingest::config::IngestConfig;
use sluice_ingest::gateway::{Gateway, chain_client};
use sluice_ingest::metrics::Metrics;
use sluice_ingest::store::Store;
use sluice_service::env::{EnvReader, KAFKA_SETTINGS};
use sluice_service::settings::{self, Setting};
use sluice_service::{signal, telemetry};
use tokio::sync::watch;

const PREFIX: &str = "SLUICE_INGEST_";

/// Every setting the ingest reads: its own and the Kafka client's.
const TABLES: &[&[Setting]] =
    &[sluice_ingest::config::settings::SETTINGS, KAFKA_SETTINGS, sluice_coord::endpoint::SETTINGS];

fn main() -> anyhow::Result<()> {
    if std::env::args().skip(1).any(|a| a == "--help" || a == "-h") {
        use std::io::Write;
        let usage = "ingest: the chain's transactions into Kafka, one active instance at a time. It takes no\n\
                     arguments; its settings are environment variables (a bad or unknown one stops it with status 2):\n";
        write!(std::io::stdout(), "{usage}\n{}", settings::help(PREFIX, TABLES))?;
        return Ok(());
    }
    telemetry::init();
    let mut env = EnvReader::from_env(PREFIX);
    let config = IngestConfig::read(&mut env);
    // A missing required setting is one of the problems `finish` reports.
    let config = match (env.finish(), config) {
        (Ok(()), Some(config)) => config,
        (result, _) => {
            tracing::error!("{}", result.err().map_or_else(|| "invalid configuration".to_string(), |e| e.to_string()));
            std::process::exit(2);
        }
    };
    let tokio = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting tokio")?;
    let deadline = config.shutdown_deadline;
    let result = tokio.block_on(run(config));
    tokio.shutdown_timeout(deadline / 10);
    result
}

async fn run(config: IngestConfig) -> anyhow::Result<()> {
    let metrics = Metrics::new();
    sluice_service::connections::declare("kafka", &config.kafka.brokers);
    let (stop_tx, stop_rx) = watch::channel(false);
    let (ready, check) = sluice_service::admin::switch("not connected to Redis");
    let mut admin_stop = stop_rx.clone();
    let (admin_addr, admin_task) =
        sluice_service::admin::serve(config.admin_listen, "ingest", metrics.registry.clone(), check, async move {
            let _ = admin_stop.wait_for(|s| *s).await;
        })
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
    let store = Store::new(conn, &config.redis_prefix);
    store.open_generation().await.context("opening the Redis state generation")?;
    let chain = chain_client(&config.chain_url)?;
    let gateway = Gateway::new(config, store, metrics, chain);
    ready.store(true, Ordering::SeqCst);
    let running = tokio::spawn(gateway.run(stop_rx));
    shutdown.await;
    tracing::info!("Shutting down: flushing and recording the cursor");
    ready.store(false, Ordering::SeqCst);
    let _ = stop_tx.send(true);
    let _ = running.await;
    let _ = tokio::time::timeout(Duration::from_secs(2), admin_task).await;
    tracing::info!("Ingest stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_exactly_its_tables() {
        let vars = [("KAFKA_BROKERS", "k:9092"), ("REDIS_URL", "redis://r:6379")];
        let mut env = EnvReader::from_vars(PREFIX, vars.map(|(k, v)| (format!("{PREFIX}{k}"), v.to_string())));
        IngestConfig::read(&mut env).expect("complete");
        assert_eq!(env.names_read(), settings::names(TABLES));
        env.finish().expect("valid");
    }

    #[test]
    fn the_docs_table_is_the_code_s() {
        let page = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/workload.md");
        if let Err(e) = settings::check_docs(&page, "ingest", &settings::markdown(PREFIX, TABLES)) {
            panic!("{e}");
        }
    }
}
