//! Kafka client configuration.

use rdkafka::ClientConfig;

/// How to reach the cluster, shared by producers, consumers and admin.
/// Its `Debug` names the properties but never prints their values (they may
/// be credentials: `sasl.password`, `ssl.key.password`).
#[derive(Clone, PartialEq, Eq)]
pub struct KafkaConfig {
    /// `bootstrap.servers`.
    pub brokers: String,
    /// Extra librdkafka properties (`security.protocol`, `sasl.*`, `ssl.*`,
    /// tuning), applied last so they override the defaults set here.
    pub properties: Vec<(String, String)>,
}

impl std::fmt::Debug for KafkaConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys: Vec<&str> = self.properties.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("KafkaConfig").field("brokers", &self.brokers).field("properties", &keys).finish()
    }
}

impl KafkaConfig {
    /// A config for `brokers` with no extra properties.
    pub fn new(brokers: impl Into<String>) -> Self {
        Self { brokers: brokers.into(), properties: Vec::new() }
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

    /// An assigned reader's config (no group membership, nothing committed): `read_committed`,
    /// each partition's end reported, and an offset that retention deleted under it an
    /// error rather than a silent jump to the log's end. `group` only names the client to
    /// the broker.
    pub fn reader(&self, group: &str) -> ClientConfig {
        let mut config = self.client();
        config
            .set("group.id", group)
            .set("isolation.level", "read_committed")
            .set("enable.partition.eof", "true")
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "error");
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
            // 20 ms (issue 31). librdkafka sends one produce request per partition, so
            // below the rate that fills a batch the broker serves one request per
            // partition per linger window from every producer, and that fixed request
            // rate is what a record costs at partial load: at 20,000 records/s over 12
            // partitions, 5 ms meant 0.12 produce requests per record and the broker spent
            // more CPU than the processor. Measured with the ingest (the feeder) and the
            // processor both at 20 ms against both at 5 ms (stress --mode kafka, one stack;
            // results/README.md): whole-system CPU per record at 20k, 40k and 77.6k
            // records/s fell by 28%, 26% and 15%; the feeder's wait raised p50 by about
            // 7 ms and left p99 where it was (the broker's GC and two busy cores set it).
            // Draining, batches fill before the linger ends, so it changes nothing there.
            // The processor's outputs are acknowledged up to 20 ms later, within the
            // in-flight budget and far inside the freshness objective (5 s).
            .set("linger.ms", "20")
            // lz4 even on loopback: measured against none on the processor
            // (stress, Kafka mode, one run each), lz4 drained faster (216k vs
            // 178k records/s) and the broker spent less per record (1.5 vs 3.5
            // CPU-µs while draining): a Swap batch compresses well, and the
            // broker handles a third of the bytes. Off loopback it saves the
            // network and the broker's disk too.
            .set("compression.type", "lz4")
            .set("message.timeout.ms", "120000");
        for (k, v) in &self.properties {
            config.set(k, v);
        }
        config
    }
}

#[cfg(test)]
mod tests {
    use rdkafka::consumer::BaseConsumer;

    use super::*;

    /// librdkafka is built with OpenSSL: a client for a TLS listener with
    /// SASL/SCRAM (what the chart's `kafka.tls` and `kafka.sasl` render) and
    /// one with mutual TLS are accepted. Without TLS support, librdkafka
    /// refuses `security.protocol=SASL_SSL` when the client is created.
    #[test]
    fn clients_for_tls_and_sasl_scram_listeners_can_be_created() {
        for (protocol, mechanism) in [("SASL_SSL", "SCRAM-SHA-512"), ("SASL_SSL", "SCRAM-SHA-256"), ("SSL", "")] {
            let mut config = KafkaConfig::new("127.0.0.1:1");
            config.properties = vec![("security.protocol".into(), protocol.into())];
            if !mechanism.is_empty() {
                config.properties.extend([
                    ("sasl.mechanism".into(), mechanism.into()),
                    ("sasl.username".into(), "sluice".into()),
                    ("sasl.password".into(), "secret".into()),
                ]);
            }
            let consumer: Result<BaseConsumer, _> = config.client().set("group.id", "tls-check").create();
            assert!(consumer.is_ok(), "{protocol} {mechanism}: {:?}", consumer.err());
        }
    }

    #[test]
    fn debug_names_properties_but_never_prints_their_values() {
        let mut config = KafkaConfig::new("broker:9093");
        config.properties = vec![("sasl.password".into(), "hunter2".into())];
        let text = format!("{config:?}");
        assert!(text.contains("broker:9093") && text.contains("sasl.password") && !text.contains("hunter2"), "{text}");
    }
}
