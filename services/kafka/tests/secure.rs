//! Kafka over TLS with SASL/SCRAM, the way the chart configures the services: a
//! `KAFKA_PROPERTIES` list (`security.protocol`, `sasl.mechanism`, `ssl.ca.location`)
//! and the credentials in `KAFKA_SASL_USERNAME`/`PASSWORD`, read by the services'
//! `EnvReader`. Against the test stack's real SASL_SSL listener (its own CA, SCRAM
//! users in the cluster metadata); the listener must also refuse what it should.

use std::time::Duration;

use sluice_kafka::{KafkaConfig, PipelinedProducer, TopicSpec, ensure_topics};
use sluice_service::env::EnvReader;
use sluice_testkit::{consume, secure_kafka, unique};

/// A client config built from the variables a pod of the chart's `sasl-tls` scenario gets.
fn from_env(properties: &str, username: &str, password: &str) -> KafkaConfig {
    let vars = [
        ("T_KAFKA_PROPERTIES", properties.to_string()),
        ("T_KAFKA_SASL_USERNAME", username.to_string()),
        ("T_KAFKA_SASL_PASSWORD", password.to_string()),
    ];
    let mut env = EnvReader::from_vars("T_", vars.map(|(k, v)| (k.to_string(), v)));
    let properties = env.kafka_properties();
    env.finish().expect("valid settings");
    KafkaConfig { brokers: secure_kafka().brokers, properties }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_go_through_the_sasl_ssl_listener_with_either_scram_mechanism() {
    let stack = secure_kafka();
    for mechanism in ["SCRAM-SHA-512", "SCRAM-SHA-256"] {
        let props = format!("security.protocol=SASL_SSL,sasl.mechanism={mechanism},ssl.ca.location={}", stack.ca);
        let kafka = from_env(&props, &stack.username, &stack.password);
        let topic = unique("secure");
        ensure_topics(&kafka, &[TopicSpec::new(&topic, 2)], Duration::from_secs(60))
            .await
            .unwrap_or_else(|e| panic!("{mechanism}: creating a topic over SASL_SSL: {e}"));
        let mut producer = PipelinedProducer::new(&kafka, 16).expect("producer");
        producer.send(&topic, b"pool-1", mechanism.as_bytes(), 1u8).await.expect("send");
        assert_eq!(producer.flush().await.expect("flush").len(), 1, "{mechanism}: acknowledged");
        let records = consume(&kafka, &topic, 1, Duration::from_secs(60)).await;
        assert_eq!(records.len(), 1, "{mechanism}: the record came back over SASL_SSL");
        assert_eq!(records[0].payload, mechanism.as_bytes());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_an_untrusted_certificate_or_plaintext_is_refused() {
    let stack = secure_kafka();
    let topic = [TopicSpec::new(unique("refused"), 1)];
    let with_ca = format!("security.protocol=SASL_SSL,sasl.mechanism=SCRAM-SHA-512,ssl.ca.location={}", stack.ca);
    let cases = [
        ("a wrong password", from_env(&with_ca, &stack.username, "not-the-password")),
        // Without the stack's CA the system's trust store cannot verify the broker.
        (
            "an untrusted certificate",
            from_env("security.protocol=SASL_SSL,sasl.mechanism=SCRAM-SHA-512", &stack.username, &stack.password),
        ),
        ("plaintext to the TLS port", KafkaConfig::new(stack.brokers.clone())),
    ];
    let attempts = cases.iter().map(|(_, kafka)| ensure_topics(kafka, &topic, Duration::from_secs(10)));
    for ((what, _), result) in cases.iter().zip(futures_util::future::join_all(attempts).await) {
        assert!(result.is_err(), "{what}: the SASL_SSL listener let the client create a topic");
    }
}
