//! The runtime's configuration, from `SLUICE_PROCESSOR_…` variables.
//!
//! Each variable's name, type, default and the reason for it are in [`settings`]'s table,
//! which [`RuntimeConfig::read`] reads by; cross-field rules (drain deadline below the
//! session timeout, shutdown deadline above the drain deadline) are checked there too, so a
//! bad combination stops the service at start with the variables named.

use std::net::SocketAddr;
use std::time::Duration;

use rdkafka::ClientConfig;
use sluice_kafka::KafkaConfig;
use sluice_service::env::{EnvReader, Unexpected};

use crate::retry::RetryPolicy;

pub mod settings;

use self::settings as s;

/// Consumer group protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupProtocol {
    /// The classic protocol with the cooperative-sticky assignor: a
    /// rebalance revokes only the partitions that move.
    Classic,
    /// KIP-848 (`group.protocol=consumer`): broker-side, fully incremental.
    Consumer,
}

impl std::str::FromStr for GroupProtocol {
    type Err = Unexpected;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "classic" => Ok(Self::Classic),
            "consumer" => Ok(Self::Consumer),
            other => Err(Unexpected::new("classic or consumer", other)),
        }
    }
}

/// Exactly-once outputs: Kafka transactions (see [`crate::txn`]).
#[derive(Debug, Clone)]
pub struct ExactlyOnce {
    /// How often the open transaction is committed: what a `read_committed`
    /// reader of the outputs waits at most, beyond the processing.
    pub interval: Duration,
    /// `transaction.timeout.ms`: how long the broker keeps the transaction
    /// of a processor that died before aborting it. Until then the outputs'
    /// `read_committed` readers and the partitions' next owners wait.
    pub timeout: Duration,
    pub transactional_id: String,
}

/// Everything the runtime needs to run.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    pub kafka: KafkaConfig,
    pub group_id: String,
    /// Static membership (`group.instance.id`): a restart within the session
    /// timeout keeps the partitions without a rebalance.
    pub instance_id: Option<String>,
    pub group_protocol: GroupProtocol,
    pub input_topic: String,
    pub dlq_topic: String,
    /// Per partition: records received and not complete before it pauses.
    pub max_in_flight_per_partition: usize,
    /// Per partition: payload bytes received and not complete before it pauses.
    pub max_bytes_per_partition: usize,
    /// A paused partition resumes once both are below this fraction of the budget.
    pub resume_fraction: f64,
    /// Records being handled at once across all partitions (permits).
    pub concurrency: usize,
    pub retry: RetryPolicy,
    /// On revoke, how long in-flight work of the revoked partitions may finish.
    pub drain_deadline: Duration,
    /// On SIGTERM, the whole drain-flush-commit-close sequence; set below the
    /// pod's terminationGracePeriodSeconds.
    pub shutdown_deadline: Duration,
    pub session_timeout: Duration,
    pub max_poll_interval: Duration,
    pub commit_interval: Duration,
    pub admin_listen: SocketAddr,
    /// `None`: outputs are at-least-once (duplicates after a crash).
    pub exactly_once: Option<ExactlyOnce>,
}

/// What only the workload knows: its consumer group and topics, the defaults of `GROUP_ID`,
/// `INPUT_TOPIC` and `DLQ_TOPIC` (the DEX's: `sluice_dex::handler::DEFAULTS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkloadDefaults {
    pub group_id: &'static str,
    pub input_topic: &'static str,
    pub dlq_topic: &'static str,
}

impl RuntimeConfig {
    /// Reads the runtime's variables; problems are collected in `env`. `None` when a required
    /// one is missing.
    pub fn read(env: &mut EnvReader, workload: &WorkloadDefaults) -> Option<Self> {
        let brokers: Option<String> = env.required_setting(&s::KAFKA_BROKERS);
        let properties = env.kafka_properties();
        let group_id: String = env.setting_or(&s::GROUP_ID, workload.group_id.to_string());
        let instance_id: Option<String> = env.optional_setting(&s::INSTANCE_ID);
        // Read (and checked) either way, so switching the mode off keeps a
        // deployment's other settings valid.
        let transactions = ExactlyOnce {
            interval: env.setting_ms(&s::TRANSACTION_INTERVAL_MS),
            timeout: env.setting_ms(&s::TRANSACTION_TIMEOUT_MS),
            transactional_id: env
                .setting_or(&s::TRANSACTIONAL_ID, default_transactional_id(&group_id, instance_id.as_deref())),
        };
        let exactly_once = env.setting::<bool>(&s::EXACTLY_ONCE).then_some(transactions);
        let config = Self {
            kafka: KafkaConfig { brokers: brokers.clone().unwrap_or_default(), properties },
            group_id,
            instance_id,
            group_protocol: env.setting(&s::GROUP_PROTOCOL),
            input_topic: env.setting_or(&s::INPUT_TOPIC, workload.input_topic.to_string()),
            dlq_topic: env.setting_or(&s::DLQ_TOPIC, workload.dlq_topic.to_string()),
            max_in_flight_per_partition: env.setting(&s::MAX_IN_FLIGHT_PER_PARTITION),
            max_bytes_per_partition: env.setting(&s::MAX_BYTES_PER_PARTITION),
            resume_fraction: env.setting(&s::RESUME_FRACTION),
            concurrency: env.setting(&s::CONCURRENCY),
            retry: RetryPolicy {
                initial: env.setting_ms(&s::RETRY_INITIAL_MS),
                max: env.setting_ms(&s::RETRY_MAX_MS),
                attempts_before_stall: env.setting(&s::RETRY_ATTEMPTS_BEFORE_STALL),
            },
            drain_deadline: env.setting_ms(&s::DRAIN_DEADLINE_MS),
            shutdown_deadline: env.setting_ms(&s::SHUTDOWN_DEADLINE_MS),
            session_timeout: env.setting_ms(&s::SESSION_TIMEOUT_MS),
            max_poll_interval: env.setting_ms(&s::MAX_POLL_INTERVAL_MS),
            commit_interval: env.setting_ms(&s::COMMIT_INTERVAL_MS),
            admin_listen: env.setting(&s::ADMIN_LISTEN),
            exactly_once,
        };
        config.check(env);
        brokers.is_some().then_some(config)
    }

    fn check(&self, env: &mut EnvReader) {
        let n = |name: &str| env.name(name);
        let mut problems = Vec::new();
        if self.max_in_flight_per_partition == 0 {
            problems.push(format!("{} must be above 0", n(s::MAX_IN_FLIGHT_PER_PARTITION.name)));
        }
        if self.concurrency == 0 {
            problems.push(format!("{} must be above 0", n(s::CONCURRENCY.name)));
        }
        if !(0.0..1.0).contains(&self.resume_fraction) {
            problems.push(format!("{} must be in [0, 1), got {}", n(s::RESUME_FRACTION.name), self.resume_fraction));
        }
        if self.retry.initial.is_zero() || self.retry.initial > self.retry.max {
            problems.push(format!(
                "{} must be above 0 and at most {}",
                n(s::RETRY_INITIAL_MS.name),
                n(s::RETRY_MAX_MS.name)
            ));
        }
        // A revoke that drains longer than the group waits gets the member
        // kicked out mid-drain, and its commit then fails.
        let rebalance_timeout = match self.group_protocol {
            GroupProtocol::Classic => self.session_timeout.min(self.max_poll_interval),
            GroupProtocol::Consumer => self.max_poll_interval,
        };
        if self.drain_deadline >= rebalance_timeout {
            problems.push(format!(
                "{} ({} ms) must be below the rebalance timeout ({} ms, from {} / {})",
                n(s::DRAIN_DEADLINE_MS.name),
                self.drain_deadline.as_millis(),
                rebalance_timeout.as_millis(),
                n(s::SESSION_TIMEOUT_MS.name),
                n(s::MAX_POLL_INTERVAL_MS.name)
            ));
        }
        // The drain (plus its 0.5 s slack), a producer flush of up to 5 s and
        // the final commit all fit in the shutdown deadline.
        if self.shutdown_deadline < self.drain_deadline + Duration::from_secs(6) {
            problems.push(format!(
                "{} ({} ms) must be at least {} ({} ms) + 6000 ms: shutdown drains, then flushes and commits",
                n(s::SHUTDOWN_DEADLINE_MS.name),
                self.shutdown_deadline.as_millis(),
                n(s::DRAIN_DEADLINE_MS.name),
                self.drain_deadline.as_millis()
            ));
        }
        if let Some(eos) = &self.exactly_once {
            if eos.interval.is_zero() || eos.timeout < eos.interval * 10 {
                problems.push(format!(
                    "{} must be above 0 and {} at least 10 times it: a transaction must outlive its interval",
                    n(s::TRANSACTION_INTERVAL_MS.name),
                    n(s::TRANSACTION_TIMEOUT_MS.name)
                ));
            }
            if eos.transactional_id.is_empty() {
                problems.push(format!("{} must not be empty", n(s::TRANSACTIONAL_ID.name)));
            }
        }
        for p in problems {
            env.problem(p);
        }
    }

    /// The consumer's librdkafka configuration (public so a benchmark's bare
    /// consumer runs with exactly the same settings).
    pub fn consumer_client(&self) -> ClientConfig {
        let mut c = self.kafka.client();
        c.set("group.id", &self.group_id)
            // The consumer thread commits the tracked positions itself, every
            // commit interval and synchronously on revoke and shutdown: one
            // place decides what is committed, and every commit is observed.
            .set("enable.auto.commit", "false")
            // The runtime stores an offset only when every record below it is done.
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .set("enable.partition.eof", "false")
            .set("max.poll.interval.ms", self.max_poll_interval.as_millis().to_string())
            // Prefetch is bounded: the per-partition budget does the rest.
            .set("queued.max.messages.kbytes", "16384")
            .set("fetch.queue.backoff.ms", "100")
            // A fetch waits for 256 KiB or 20 ms instead of answering every small
            // append (librdkafka's 1 byte): measured at 43k records/s (stress,
            // Kafka mode, results/README.md) it cut fetch requests from 910/s
            // to 96/s, the processor's and the broker's CPU per record by 22% and
            // 14%, and p99 from 118 ms to 32 ms (the broker's CPU no longer
            // spent on fetches), for p50 +5 ms. At low rates a record waits at
            // most the 20 ms.
            .set("fetch.min.bytes", "262144")
            .set("fetch.wait.max.ms", "20")
            // Feeds the high-watermark and lag gauges (see `ClientContext::stats`).
            .set("statistics.interval.ms", "5000");
        match self.group_protocol {
            GroupProtocol::Classic => {
                c.set("partition.assignment.strategy", "cooperative-sticky")
                    .set("session.timeout.ms", self.session_timeout.as_millis().to_string());
            }
            GroupProtocol::Consumer => {
                c.set("group.protocol", "consumer");
            }
        }
        if let Some(id) = &self.instance_id {
            c.set("group.instance.id", id);
        }
        for (k, v) in &self.kafka.properties {
            c.set(k, v);
        }
        c
    }
}

/// `<group>.<instance id>` with static membership: a restarted instance
/// fences its predecessor and aborts its transaction at once. Otherwise
/// unique per process (`<group>.<host>.<nonce>`): two processes on one
/// host never fence each other, and a dead one's transaction ends after
/// `transaction.timeout.ms`.
fn default_transactional_id(group: &str, instance_id: Option<&str>) -> String {
    if let Some(id) = instance_id {
        return format!("{group}.{id}");
    }
    let host = std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()).unwrap_or_else(|| "host".into());
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    format!("{group}.{host}.{:x}", nanos ^ (u64::from(std::process::id()) << 40))
}

#[cfg(test)]
mod tests {
    use sluice_service::env::KAFKA_SETTINGS;

    use super::*;

    fn reader(pairs: &[(&str, &str)]) -> EnvReader {
        EnvReader::from_vars(
            "SLUICE_PROCESSOR_",
            pairs.iter().map(|(k, v)| (format!("SLUICE_PROCESSOR_{k}"), v.to_string())),
        )
    }

    const WORKLOAD: WorkloadDefaults =
        WorkloadDefaults { group_id: "w-group", input_topic: "w.input", dlq_topic: "w.input.dlq" };

    #[test]
    fn defaults_with_the_one_required_setting() {
        // No REDIS_URL: the runtime needs no Redis (a workload that does reads `RedisConfig`).
        let mut env = reader(&[("KAFKA_BROKERS", "k:9092")]);
        let config = RuntimeConfig::read(&mut env, &WORKLOAD).expect("complete");
        env.finish().expect("no problems");
        assert_eq!(config.kafka.brokers, "k:9092");
        assert_eq!(config.group_protocol, GroupProtocol::Classic);
        // What only the workload knows comes from it.
        assert_eq!((config.group_id.as_str(), config.input_topic.as_str()), ("w-group", "w.input"));
        assert_eq!(config.dlq_topic, "w.input.dlq");
        assert!(config.drain_deadline < config.session_timeout);
        assert_eq!(config.session_timeout, Duration::from_secs(15));
    }

    #[test]
    fn reads_exactly_the_settings_its_table_declares() {
        let mut env = reader(&[("KAFKA_BROKERS", "k:9092"), ("EXACTLY_ONCE", "true")]);
        RuntimeConfig::read(&mut env, &WORKLOAD).expect("complete");
        assert_eq!(env.names_read(), sluice_service::settings::names(&[settings::SETTINGS, KAFKA_SETTINGS]));
    }

    #[test]
    fn names_every_bad_setting() {
        let mut env = reader(&[
            ("DRAIN_DEADLINE_MS", "60000"),
            ("GROUP_PROTOCOL", "eager"),
            ("KAFKA_PROPERTIES", "security.protocol=SSL,broken"),
        ]);
        assert!(RuntimeConfig::read(&mut env, &WORKLOAD).is_none(), "KAFKA_BROKERS is missing");
        let text = env.finish().expect_err("problems").to_string();
        for name in [
            "SLUICE_PROCESSOR_KAFKA_BROKERS",
            "SLUICE_PROCESSOR_DRAIN_DEADLINE_MS",
            "SLUICE_PROCESSOR_GROUP_PROTOCOL",
            "SLUICE_PROCESSOR_KAFKA_PROPERTIES",
            "SLUICE_PROCESSOR_SHUTDOWN_DEADLINE_MS",
        ] {
            assert!(text.contains(name), "{name} not named in:\n{text}");
        }
    }
}
