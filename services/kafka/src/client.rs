//! Kafka client configuration.

use rdkafka::ClientConfig;

/// How to reach the cluster, shared by producers, consumers and admin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaConfig {
    /// `bootstrap.servers`.
    pub brokers: String,
    /// Extra librdkafka properties (`security.protocol`, `sasl.*`, `ssl.*`,
    /// tuning), applied last so they override the defaults set here.
    pub properties: Vec<(String, String)>,
}

impl KafkaConfig {
    /// A config for `brokers` with no extra properties.
    pub fn new(brokers: impl Into<String>) -> Self {
        Self { brokers: brokers.into(), properties: Vec::new() }
    }

    /// Parses pass-through properties written as `key=value,key=value`
    /// (how services take them from one environment variable).
    pub fn parse_properties(raw: &str) -> Result<Vec<(String, String)>, String> {
        raw.split(',')
            .filter(|p| !p.trim().is_empty())
            .map(|pair| match pair.split_once('=') {
                Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.trim().to_string())),
                _ => Err(format!("expected key=value, got {:?}", pair.split('=').next().unwrap_or(""))),
            })
            .collect()
    }

    /// A base client config: brokers plus the pass-through properties.
    pub fn client(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &self.brokers);
        for (k, v) in &self.properties {
            config.set(k, v);
        }
        config
    }

    /// A producer config that never loses or reorders an acknowledged record:
    /// idempotent, `acks=all`, with small batching for pipelined sends.
    /// Pass-through properties still win.
    pub fn producer(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &self.brokers)
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("linger.ms", "5")
            .set("compression.type", "lz4")
            .set("message.timeout.ms", "120000");
        for (k, v) in &self.properties {
            config.set(k, v);
        }
        config
    }
}
