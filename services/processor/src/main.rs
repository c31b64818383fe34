//! processor: consumes `chain.transactions`, recognises swaps, keeps pool
//! state in Redis and publishes swaps to `dex.swaps`. A pure Kafka consumer
//! with no scheduled work: Kubernetes scales it on consumer-group lag.
//!
//! Configuration: `SLUICE_PROCESSOR_…` variables, listed by `processor --help` and in
//! docs/runtime.md, both rendered from the settings tables of the runtime, the Kafka client,
//! the Redis sink and the DEX workload; every bad or unknown one is reported by name and the
//! process exits with status 2.

use anyhow::Context;
use sluice_dex::{DexConfig, DexHandler};
use sluice_runtime::sink::{ENDPOINT_SETTINGS, REDIS_SETTINGS, RedisConfig};
use sluice_runtime::{Runtime, RuntimeConfig};
use sluice_service::env::{EnvReader, KAFKA_SETTINGS};
use sluice_service::settings::{self, Setting};
use sluice_service::{signal, telemetry};

const PREFIX: &str = "SLUICE_PROCESSOR_";

/// Every setting the processor reads: the runtime's, the Kafka client's, the Redis sink's and
/// the DEX workload's.
const TABLES: &[&[Setting]] = &[
    sluice_runtime::config::settings::SETTINGS,
    KAFKA_SETTINGS,
    REDIS_SETTINGS,
    ENDPOINT_SETTINGS,
    sluice_dex::config::SETTINGS,
];

fn main() -> anyhow::Result<()> {
    if std::env::args().skip(1).any(|a| a == "--help" || a == "-h") {
        use std::io::Write;
        let usage = "processor: the DEX workload on the Sluice runtime. It takes no arguments; its settings are\n\
                     environment variables (a bad or unknown one stops it with status 2):\n";
        write!(std::io::stdout(), "{usage}\n{}", settings::help(PREFIX, TABLES))?;
        return Ok(());
    }
    telemetry::init();
    let mut env = EnvReader::from_env(PREFIX);
    let runtime_config = RuntimeConfig::read(&mut env, &sluice_dex::handler::DEFAULTS);
    let redis_config = RedisConfig::read(&mut env);
    let dex_config = DexConfig::read(&mut env);
    // A missing required setting is one of the problems `finish` reports.
    let (runtime_config, redis_config) = match (env.finish(), runtime_config, redis_config) {
        (Ok(()), Some(runtime), Some(redis)) => (runtime, redis),
        (result, _, _) => {
            tracing::error!("{}", result.err().map_or_else(|| "invalid configuration".to_string(), |e| e.to_string()));
            std::process::exit(2);
        }
    };
    let deadline = runtime_config.shutdown_deadline;
    let tokio = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting tokio")?;
    let result = tokio.block_on(async move {
        let runtime = Runtime::new(runtime_config, sluice_dex::handler::IDENTITY).context("starting the runtime")?;
        let expect = runtime.recorded_generation().await.context("reading the group's committed offsets")?;
        let handler = DexHandler::new(dex_config, &redis_config, runtime.metrics(), expect)?;
        runtime.run(handler, signal::shutdown(), |_| {}).await.context("processor")
    });
    // Tasks still retrying past the deadline must not hold the process.
    tokio.shutdown_timeout(deadline / 10);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_exactly_its_tables() {
        let vars = [("KAFKA_BROKERS", "k:9092"), ("REDIS_URL", "redis://r:6379"), ("EXACTLY_ONCE", "true")];
        let mut env = EnvReader::from_vars(PREFIX, vars.map(|(k, v)| (format!("{PREFIX}{k}"), v.to_string())));
        RuntimeConfig::read(&mut env, &sluice_dex::handler::DEFAULTS).expect("runtime");
        RedisConfig::read(&mut env).expect("redis");
        DexConfig::read(&mut env);
        assert_eq!(env.names_read(), settings::names(TABLES));
        env.finish().expect("valid");
    }

    #[test]
    fn the_docs_table_is_the_code_s() {
        let page = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/runtime.md");
        let table = settings::markdown(PREFIX, TABLES);
        if let Err(e) = settings::check_docs(&page, "processor", &table) {
            panic!("{e}");
        }
    }
}
