//! The ingest's configuration, from `SLUICE_INGEST_…` variables.

use std::net::SocketAddr;
use std::time::Duration;

use sluice_kafka::KafkaConfig;
use sluice_kafka::topics::CHAIN_TRANSACTIONS;
use sluice_service::env::{EnvReader, Unexpected};

/// Where the stream starts when no cursor is stored yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// The chain's first slot.
    Genesis,
    /// The chain's head when the instance first becomes active.
    Head,
    Slot(u64),
}

impl std::str::FromStr for Start {
    type Err = Unexpected;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "genesis" => Ok(Self::Genesis),
            "head" => Ok(Self::Head),
            n => n.parse().map(Self::Slot).map_err(|_| Unexpected::new("genesis, head or a slot number", n)),
        }
    }
}

/// What to do when Redis holds no cursor but the topic already holds
/// records: Redis was reset or replaced (or is a new one for an old topic).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LostCursor {
    /// Do not stream (an error, `sluice_ingest_cursor_lost` 1) until the
    /// cursor is restored or this is set to `resend`.
    Stop,
    /// Read the chain again from `START`, sending only what the topic does
    /// not hold yet.
    Resend,
}

impl std::str::FromStr for LostCursor {
    type Err = Unexpected;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "stop" => Ok(Self::Stop),
            "resend" => Ok(Self::Resend),
            other => Err(Unexpected::new("stop or resend", other)),
        }
    }
}

/// Everything the ingest needs.
#[derive(Debug, Clone)]
pub struct IngestConfig {
    pub chain_url: String,
    pub kafka: KafkaConfig,
    pub topic: String,
    pub redis_url: String,
    pub redis_prefix: String,
    pub instance_id: String,
    /// The active instance's lease; a standby takes over within about this
    /// long after the active one dies.
    pub lease_ttl: Duration,
    /// Records sent and not yet acknowledged before the oldest is awaited.
    pub max_in_flight: usize,
    /// How often the cursor is written (when it moved).
    pub cursor_interval: Duration,
    /// Kafka transactions: the `transactional.id` the active/standby pair
    /// shares (`None`: idempotent sends only, no fencing at the broker).
    pub transactional_id: Option<String>,
    /// Transactional: how often the open transaction is committed (and the
    /// cursor written): what a record waits before readers see it.
    pub transaction_interval: Duration,
    /// Transactional: the bound of each transaction call and of a record's
    /// delivery, and how long the broker keeps a dead producer's transaction
    /// open (a standby taking over aborts it at once).
    pub transaction_timeout: Duration,
    pub start: Start,
    pub lost_cursor: LostCursor,
    /// Reconnect backoff bounds after a dropped chain stream.
    pub reconnect_min: Duration,
    pub reconnect_max: Duration,
    /// On SIGTERM: flush and record the cursor within this.
    pub shutdown_deadline: Duration,
    pub admin_listen: SocketAddr,
}

impl IngestConfig {
    pub fn read(env: &mut EnvReader) -> Self {
        let default_instance = sluice_service::env::default_instance_id("ingest");
        let mut kafka = KafkaConfig::new(env.required::<String>("KAFKA_BROKERS").unwrap_or_default());
        kafka.properties = env.kafka_properties();
        let topic: String = env.or("TOPIC", CHAIN_TRANSACTIONS.to_string());
        let transactions: bool = env.or("TRANSACTIONS", true);
        let transactional_id: String = env.or("TRANSACTIONAL_ID", format!("sluice-ingest.{topic}"));
        let config = Self {
            chain_url: env.or("CHAIN_URL", "http://127.0.0.1:50051".to_string()),
            kafka,
            topic,
            redis_url: env.required("REDIS_URL").unwrap_or_default(),
            redis_prefix: env.or("REDIS_PREFIX", "sluice:".to_string()),
            instance_id: env.or("INSTANCE_ID", default_instance),
            lease_ttl: env.millis("LEASE_TTL_MS", Duration::from_secs(5)),
            max_in_flight: env.or("MAX_IN_FLIGHT", 10_000),
            cursor_interval: env.millis("CURSOR_INTERVAL_MS", Duration::from_millis(200)),
            transactional_id: transactions.then_some(transactional_id),
            transaction_interval: env.millis("TRANSACTION_INTERVAL_MS", Duration::from_millis(100)),
            transaction_timeout: env.millis("TRANSACTION_TIMEOUT_MS", Duration::from_secs(60)),
            start: env.or("START", Start::Genesis),
            lost_cursor: env.or("LOST_CURSOR", LostCursor::Stop),
            reconnect_min: env.millis("RECONNECT_MIN_MS", Duration::from_millis(100)),
            reconnect_max: env.millis("RECONNECT_MAX_MS", Duration::from_secs(5)),
            shutdown_deadline: env.millis("SHUTDOWN_DEADLINE_MS", Duration::from_secs(20)),
            admin_listen: env.or("ADMIN_LISTEN", SocketAddr::from(([0, 0, 0, 0], 9094))),
        };
        if config.lease_ttl < Duration::from_millis(1_000) {
            let name = env.name("LEASE_TTL_MS");
            env.problem(format!(
                "{name} must be at least 1000 (it is renewed every third of it, each call within that)"
            ));
        }
        if config.max_in_flight == 0 {
            let name = env.name("MAX_IN_FLIGHT");
            env.problem(format!("{name} must be above 0"));
        }
        if config.transaction_timeout < Duration::from_secs(1)
            || config.transaction_timeout <= config.transaction_interval
        {
            let (a, b) = (env.name("TRANSACTION_TIMEOUT_MS"), env.name("TRANSACTION_INTERVAL_MS"));
            env.problem(format!("{a} must be at least 1000 and above {b}"));
        }
        if config.transactional_id.as_deref() == Some("") {
            let name = env.name("TRANSACTIONAL_ID");
            env.problem(format!("{name} must not be empty (set TRANSACTIONS=false to send without transactions)"));
        }
        if config.reconnect_min > config.reconnect_max {
            let (a, b) = (env.name("RECONNECT_MIN_MS"), env.name("RECONNECT_MAX_MS"));
            env.problem(format!("{a} must not be above {b}"));
        }
        config
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_settings_are_named() {
        let vars = [
            ("I_KAFKA_PROPERTIES", "acks"),
            ("I_START", "tomorrow"),
            ("I_LEASE_TTL_MS", "10"),
            ("I_TYPO", "1"),
            ("I_LOST_CURSOR", "ignore"),
            ("I_TRANSACTION_TIMEOUT_MS", "50"),
        ];
        let mut env = EnvReader::from_vars("I_", vars.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let _ = IngestConfig::read(&mut env);
        let text = env.finish().expect_err("problems").to_string();
        for name in [
            "I_KAFKA_BROKERS",
            "I_REDIS_URL",
            "I_KAFKA_PROPERTIES",
            "I_START",
            "I_LEASE_TTL_MS",
            "I_TYPO",
            "I_LOST_CURSOR",
            "I_TRANSACTION_TIMEOUT_MS",
        ] {
            assert!(text.contains(name), "{name} missing from: {text}");
        }
    }

    #[test]
    fn start_positions_parse() {
        assert_eq!("genesis".parse(), Ok(Start::Genesis));
        assert_eq!("head".parse(), Ok(Start::Head));
        assert_eq!("42".parse(), Ok(Start::Slot(42)));
        assert_eq!(("stop".parse(), "resend".parse()), (Ok(LostCursor::Stop), Ok(LostCursor::Resend)));
    }
}
