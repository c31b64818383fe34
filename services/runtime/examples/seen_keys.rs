//! A second workload on the Sluice runtime, to show the shape of one: it
//! records, per record key, which records it has seen, in a Redis set.
//!
//! Everything hard (offsets, lanes, budgets, retries, dead letters,
//! rebalances, shutdown, metrics) is the runtime's; the workload is one
//! `Handler`. Its effect is idempotent (`SADD` of the record's coordinates),
//! so a record processed twice after a crash counts once, and it awaits its
//! effect before returning, so the runtime commits only what landed.
//!
//! Run it against the local stack:
//!
//! ```text
//! eval "$(deploy/local/stack.sh env)"
//! SLUICE_PROCESSOR_KAFKA_BROKERS=$SLUICE_KAFKA_BROKERS SLUICE_PROCESSOR_REDIS_URL=$SLUICE_REDIS_URL \
//! SLUICE_PROCESSOR_GROUP_ID=seen-keys SLUICE_PROCESSOR_ADMIN_LISTEN=127.0.0.1:9191 \
//!   cargo run -p sluice-runtime --example seen_keys
//! ```

use sluice_runtime::sink::{RedisConfig, RedisSink, StateStore};
use sluice_runtime::{
    HandleError, Handled, Handler, Identity, NotReady, Record, Runtime, RuntimeConfig, WorkloadDefaults,
};
use sluice_service::env::EnvReader;

struct SeenKeys {
    redis: RedisSink,
}

impl Handler for SeenKeys {
    async fn handle(&self, record: &Record) -> Result<Handled, HandleError> {
        let Some(key) = record.key.as_deref() else {
            // Bad input is not retried: it goes to the dead-letter topic with this reason.
            return Err(HandleError::invalid("no_key", "record has no key"));
        };
        let mut cmd = redis::cmd("SADD");
        cmd.arg([b"seen:".as_slice(), key].concat()).arg(format!("{}:{}", record.partition, record.offset));
        // A Redis failure is transient: the runtime retries with backoff, blocking only this key.
        self.redis.exec(cmd).await.map_err(|e| HandleError::transient("redis", e))?;
        Ok(Handled::ok(record.timestamp_ms))
    }

    /// Not ready while Redis does not answer: no traffic is routed here.
    fn ready(&self) -> Result<(), NotReady> {
        self.redis.ready()
    }

    /// Recorded with every commit, checked at the next start.
    fn state_generation(&self) -> Option<String> {
        self.redis.generation()
    }
}

/// Its series are `sluice_seen_keys_*`, its readiness gauge `sluice_seen_keys_ready`.
const IDENTITY: Identity = Identity { service: "seen_keys", metric_prefix: "sluice_seen_keys", workload: "seen_keys" };

/// What it consumes unless told otherwise (`SLUICE_PROCESSOR_GROUP_ID`, `_INPUT_TOPIC`, `_DLQ_TOPIC`).
const DEFAULTS: WorkloadDefaults =
    WorkloadDefaults { group_id: "seen-keys", input_topic: "chain.transactions", dlq_topic: "chain.transactions.dlq" };

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    sluice_service::telemetry::init();
    let mut env = EnvReader::from_env("SLUICE_PROCESSOR_");
    let config = RuntimeConfig::read(&mut env, &DEFAULTS);
    // This workload needs Redis, so it reads REDIS_URL; the runtime does not.
    let redis = RedisConfig::read(&mut env);
    env.finish()?;
    let (config, redis) = config.zip(redis).ok_or("incomplete configuration")?;
    let runtime = Runtime::new(config, IDENTITY)?;
    // Writes only into the Redis its earlier commits were made against.
    let state = StateStore { prefix: "seen-keys:".into(), expect: runtime.recorded_generation().await? };
    let handler = SeenKeys { redis: RedisSink::start(&redis, Vec::new(), runtime.metrics(), state)? };
    runtime.run(handler, sluice_service::signal::shutdown(), |_| {}).await?;
    Ok(())
}
