//! What the runtime's tests on the real broker share: a runtime's
//! configuration for one test's group and topics, read from variables the
//! way a deployment's are (so a setting a test uses is checked as one).

#![allow(clippy::unwrap_used)]

use sluice_kafka::KafkaConfig;
use sluice_runtime::{RuntimeConfig, WorkloadDefaults};
use sluice_service::env::EnvReader;

/// The runtime's configuration for `group` reading `input` (dead letters
/// to `dlq`), its admin server on a free port, committing every 200 ms,
/// with `extra` settings (names without a prefix, e.g. `EXACTLY_ONCE`).
pub fn runtime_config(
    kafka: &KafkaConfig,
    group: &str,
    input: &str,
    dlq: &str,
    extra: &[(&str, &str)],
) -> RuntimeConfig {
    let base = [
        ("KAFKA_BROKERS", kafka.brokers.as_str()),
        ("GROUP_ID", group),
        ("INPUT_TOPIC", input),
        ("DLQ_TOPIC", dlq),
        ("ADMIN_LISTEN", "127.0.0.1:0"),
        ("COMMIT_INTERVAL_MS", "200"),
    ];
    let vars = base.iter().chain(extra).map(|(k, v)| (format!("T_{k}"), (*v).to_string()));
    let mut env = EnvReader::from_vars("T_", vars);
    let defaults = WorkloadDefaults { group_id: "test", input_topic: "test", dlq_topic: "test.dlq" };
    let config = RuntimeConfig::read(&mut env, &defaults).unwrap();
    env.finish().unwrap();
    config
}
