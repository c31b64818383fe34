//! The runtime's configuration, from `SLUICE_PROCESSOR_…` variables.
//!
//! Each field's variable and default sit together in [`RuntimeConfig::read`];
//! cross-field rules (drain deadline below the session timeout, shutdown
//! deadline above the drain deadline) are checked there too, so a bad
//! combination stops the service at start with the variables named.

use std::net::SocketAddr;
use std::time::Duration;

use rdkafka::ClientConfig;
use sluice_kafka::KafkaConfig;
use sluice_kafka::topics::{CHAIN_TRANSACTIONS, CHAIN_TRANSACTIONS_DLQ};
use sluice_service::env::{EnvReader, Unexpected};

use crate::retry::RetryPolicy;

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

impl RuntimeConfig {
    /// Reads the runtime's variables; problems are collected in `env`.
    pub fn read(env: &mut EnvReader) -> Option<Self> {
        let brokers: Option<String> = env.required("KAFKA_BROKERS");
        let properties = env.kafka_properties();
        let group_id: String = env.or("GROUP_ID", "sluice-processor".to_string());
        let instance_id: Option<String> = env.optional("INSTANCE_ID");
        // Read (and checked) either way, so switching the mode off keeps a
        // deployment's other settings valid.
        let transactions = ExactlyOnce {
            interval: env.millis("TRANSACTION_INTERVAL_MS", Duration::from_millis(100)),
            timeout: env.millis("TRANSACTION_TIMEOUT_MS", Duration::from_secs(10)),
            transactional_id: env.or("TRANSACTIONAL_ID", default_transactional_id(&group_id, instance_id.as_deref())),
        };
        let exactly_once = env.or("EXACTLY_ONCE", false).then_some(transactions);
        let config = Self {
            kafka: KafkaConfig { brokers: brokers.clone().unwrap_or_default(), properties },
            group_id,
            instance_id,
            group_protocol: env.or("GROUP_PROTOCOL", GroupProtocol::Classic),
            input_topic: env.or("INPUT_TOPIC", CHAIN_TRANSACTIONS.to_string()),
            dlq_topic: env.or("DLQ_TOPIC", CHAIN_TRANSACTIONS_DLQ.to_string()),
            max_in_flight_per_partition: env.or("MAX_IN_FLIGHT_PER_PARTITION", 10_000),
            max_bytes_per_partition: env.or("MAX_BYTES_PER_PARTITION", 16 << 20),
            resume_fraction: env.or("RESUME_FRACTION", 0.5),
            concurrency: env.or("CONCURRENCY", 256),
            retry: RetryPolicy {
                initial: env.millis("RETRY_INITIAL_MS", Duration::from_millis(50)),
                max: env.millis("RETRY_MAX_MS", Duration::from_secs(5)),
                attempts_before_stall: env.or("RETRY_ATTEMPTS_BEFORE_STALL", 10),
            },
            drain_deadline: env.millis("DRAIN_DEADLINE_MS", Duration::from_secs(10)),
            shutdown_deadline: env.millis("SHUTDOWN_DEADLINE_MS", Duration::from_secs(25)),
            // Not Kafka's 45 s: a crashed processor's partitions wait for its session to expire
            // (42–45 s on real pods at 45 s, 13 s at 15 s: results/README.md, "A killed
            // processor's partitions"); heartbeats come every 3 s from librdkafka's own thread.
            session_timeout: env.millis("SESSION_TIMEOUT_MS", Duration::from_secs(15)),
            max_poll_interval: env.millis("MAX_POLL_INTERVAL_MS", Duration::from_secs(300)),
            commit_interval: env.millis("COMMIT_INTERVAL_MS", Duration::from_secs(1)),
            admin_listen: env.or("ADMIN_LISTEN", SocketAddr::from(([0, 0, 0, 0], 9090))),
            exactly_once,
        };
        config.check(env);
        brokers.is_some().then_some(config)
    }

    fn check(&self, env: &mut EnvReader) {
        let n = |name: &str| env.name(name);
        let mut problems = Vec::new();
        if self.max_in_flight_per_partition == 0 {
            problems.push(format!("{} must be above 0", n("MAX_IN_FLIGHT_PER_PARTITION")));
        }
        if self.concurrency == 0 {
            problems.push(format!("{} must be above 0", n("CONCURRENCY")));
        }
        if !(0.0..1.0).contains(&self.resume_fraction) {
            problems.push(format!("{} must be in [0, 1), got {}", n("RESUME_FRACTION"), self.resume_fraction));
        }
        if self.retry.initial.is_zero() || self.retry.initial > self.retry.max {
            problems.push(format!("{} must be above 0 and at most {}", n("RETRY_INITIAL_MS"), n("RETRY_MAX_MS")));
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
                n("DRAIN_DEADLINE_MS"),
                self.drain_deadline.as_millis(),
                rebalance_timeout.as_millis(),
                n("SESSION_TIMEOUT_MS"),
                n("MAX_POLL_INTERVAL_MS")
            ));
        }
        // The drain (plus its 0.5 s slack), a producer flush of up to 5 s and
        // the final commit all fit in the shutdown deadline.
        if self.shutdown_deadline < self.drain_deadline + Duration::from_secs(6) {
            problems.push(format!(
                "{} ({} ms) must be at least {} ({} ms) + 6000 ms: shutdown drains, then flushes and commits",
                n("SHUTDOWN_DEADLINE_MS"),
                self.shutdown_deadline.as_millis(),
                n("DRAIN_DEADLINE_MS"),
                self.drain_deadline.as_millis()
            ));
        }
        if let Some(eos) = &self.exactly_once {
            if eos.interval.is_zero() || eos.timeout < eos.interval * 10 {
                problems.push(format!(
                    "{} must be above 0 and {} at least 10 times it: a transaction must outlive its interval",
                    n("TRANSACTION_INTERVAL_MS"),
                    n("TRANSACTION_TIMEOUT_MS")
                ));
            }
            if eos.transactional_id.is_empty() {
                problems.push(format!("{} must not be empty", n("TRANSACTIONAL_ID")));
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
    use super::*;

    fn reader(pairs: &[(&str, &str)]) -> EnvReader {
        EnvReader::from_vars(
            "SLUICE_PROCESSOR_",
            pairs.iter().map(|(k, v)| (format!("SLUICE_PROCESSOR_{k}"), v.to_string())),
        )
    }

    #[test]
    fn defaults_with_the_one_required_setting() {
        // No REDIS_URL: the runtime needs no Redis (a workload that does reads `RedisConfig`).
        let mut env = reader(&[("KAFKA_BROKERS", "k:9092")]);
        let config = RuntimeConfig::read(&mut env).expect("complete");
        env.finish().expect("no problems");
        assert_eq!(config.kafka.brokers, "k:9092");
        assert_eq!(config.group_protocol, GroupProtocol::Classic);
        assert_eq!(config.input_topic, "chain.transactions");
        assert!(config.drain_deadline < config.session_timeout);
    }

    #[test]
    fn names_every_bad_setting() {
        let mut env = reader(&[
            ("DRAIN_DEADLINE_MS", "60000"),
            ("GROUP_PROTOCOL", "eager"),
            ("KAFKA_PROPERTIES", "security.protocol=SSL,broken"),
        ]);
        assert!(RuntimeConfig::read(&mut env).is_none(), "KAFKA_BROKERS is missing");
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
