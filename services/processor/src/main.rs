//! processor: consumes `chain.transactions`, recognises swaps, keeps pool
//! state in Redis and publishes swaps to `dex.swaps`. A pure Kafka consumer
//! with no scheduled work: Kubernetes scales it on consumer-group lag.
//!
//! Configuration: `SLUICE_PROCESSOR_…` variables (see ARCHITECTURE.md and
//! `sluice_runtime::config` / `sluice_dex::config`); every bad or unknown
//! one is reported by name and the process exits with status 2.

use anyhow::Context;
use sluice_dex::{DexConfig, DexHandler};
use sluice_runtime::sink::RedisConfig;
use sluice_runtime::{Runtime, RuntimeConfig};
use sluice_service::env::EnvReader;
use sluice_service::{signal, telemetry};

fn main() -> anyhow::Result<()> {
    telemetry::init();
    let mut env = EnvReader::from_env("SLUICE_PROCESSOR_");
    let runtime_config = RuntimeConfig::read(&mut env);
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
