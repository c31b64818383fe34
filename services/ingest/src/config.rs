//! The ingest's configuration, from `SLUICE_INGEST_…` variables: names, defaults and their
//! reasons in [`settings`]; the rules between them in [`IngestConfig::read`].

use std::net::SocketAddr;
use std::time::Duration;

use sluice_coord::endpoint::RedisEndpoint;
use sluice_kafka::KafkaConfig;
use sluice_service::env::{EnvReader, Unexpected};

pub mod settings;

use self::settings as s;

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
    /// The URL, ACL user and TLS files.
    pub redis: RedisEndpoint,
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
    /// Reads the ingest's variables ([`settings::SETTINGS`]); problems are collected in `env`.
    /// `None` when a required one is missing.
    pub fn read(env: &mut EnvReader) -> Option<Self> {
        let brokers: Option<String> = env.required_setting(&s::KAFKA_BROKERS);
        let redis_url: Option<String> = env.required_setting(&s::REDIS_URL);
        let mut kafka = KafkaConfig::new(brokers.clone().unwrap_or_default());
        kafka.properties = env.kafka_properties();
        let topic: String = env.setting(&s::TOPIC);
        let transactions: bool = env.setting(&s::TRANSACTIONS);
        let transactional_id: String = env.setting_or(&s::TRANSACTIONAL_ID, format!("sluice-ingest.{topic}"));
        let config = Self {
            chain_url: env.setting(&s::CHAIN_URL),
            kafka,
            topic,
            redis: RedisEndpoint::read(env, redis_url.as_deref()),
            redis_prefix: env.setting(&s::REDIS_PREFIX),
            instance_id: env.setting_or(&s::INSTANCE_ID, sluice_service::env::default_instance_id("ingest")),
            lease_ttl: env.setting_ms(&s::LEASE_TTL_MS),
            max_in_flight: env.setting(&s::MAX_IN_FLIGHT),
            cursor_interval: env.setting_ms(&s::CURSOR_INTERVAL_MS),
            transactional_id: transactions.then_some(transactional_id),
            transaction_interval: env.setting_ms(&s::TRANSACTION_INTERVAL_MS),
            transaction_timeout: env.setting_ms(&s::TRANSACTION_TIMEOUT_MS),
            start: env.setting(&s::START),
            lost_cursor: env.setting(&s::LOST_CURSOR),
            reconnect_min: env.setting_ms(&s::RECONNECT_MIN_MS),
            reconnect_max: env.setting_ms(&s::RECONNECT_MAX_MS),
            shutdown_deadline: env.setting_ms(&s::SHUTDOWN_DEADLINE_MS),
            admin_listen: env.setting(&s::ADMIN_LISTEN),
        };
        config.check(env);
        (brokers.is_some() && redis_url.is_some()).then_some(config)
    }

    /// The rules between settings.
    fn check(&self, env: &mut EnvReader) {
        let config = self;
        if config.lease_ttl < Duration::from_millis(1_000) {
            let name = env.name(s::LEASE_TTL_MS.name);
            env.problem(format!(
                "{name} must be at least 1000 (it is renewed every third of it, each call within that)"
            ));
        }
        if config.max_in_flight == 0 {
            let name = env.name(s::MAX_IN_FLIGHT.name);
            env.problem(format!("{name} must be above 0"));
        }
        if config.transaction_timeout < Duration::from_secs(1)
            || config.transaction_timeout <= config.transaction_interval
        {
            let (a, b) = (env.name(s::TRANSACTION_TIMEOUT_MS.name), env.name(s::TRANSACTION_INTERVAL_MS.name));
            env.problem(format!("{a} must be at least 1000 and above {b}"));
        }
        if config.transactional_id.as_deref() == Some("") {
            let name = env.name(s::TRANSACTIONAL_ID.name);
            env.problem(format!("{name} must not be empty (set TRANSACTIONS=false to send without transactions)"));
        }
        if config.reconnect_min > config.reconnect_max {
            let (a, b) = (env.name(s::RECONNECT_MIN_MS.name), env.name(s::RECONNECT_MAX_MS.name));
            env.problem(format!("{a} must not be above {b}"));
        }
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
        assert!(IngestConfig::read(&mut env).is_none(), "KAFKA_BROKERS and REDIS_URL are missing");
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
