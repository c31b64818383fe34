//! Every metric the runtime exports, registered in one place.
//!
//! Names follow `sluice_processor_<thing>_<unit>`; labels are low
//! cardinality (topic, partition, outcome, kind, sink): never a key. Every
//! series carries `workload` and `consumergroup`, constant per process.

use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

/// The runtime's metrics. Cloning shares the underlying series.
#[derive(Debug, Clone)]
pub struct RuntimeMetrics {
    pub registry: Registry,
    pub messages: IntCounterVec,
    pub handle_seconds: Histogram,
    pub end_to_end_seconds: Histogram,
    pub in_flight: IntGaugeVec,
    pub committed_offset: IntGaugeVec,
    pub high_watermark: IntGaugeVec,
    pub paused: IntGaugeVec,
    pub commits: IntCounterVec,
    pub commit_seconds: Histogram,
    pub sink_seconds: HistogramVec,
    pub sink_batch_size: HistogramVec,
    pub sink_round_trips: IntCounterVec,
    pub produce_requests: IntCounter,
    pub produced_records: IntCounter,
    pub dead_letters: IntCounterVec,
    pub retries: IntCounterVec,
    pub stalled: IntGauge,
    pub rebalances: IntCounterVec,
    pub assigned: IntGauge,
    pub dropped_completions: IntCounter,
    pub state_store_replaced: IntGauge,
    pub transactions: IntCounterVec,
    pub transaction_seconds: Histogram,
}

const PREFIX: &str = "sluice_processor";

fn name(thing: &str) -> String {
    format!("{PREFIX}_{thing}")
}

impl RuntimeMetrics {
    /// Creates and registers every metric in a fresh registry whose series
    /// all carry `workload` and `consumergroup` (the workload's metrics too,
    /// registered in [`RuntimeMetrics::registry`]).
    pub fn new(workload: &str, group: &str) -> Self {
        let labels = [("workload", workload), ("consumergroup", group)];
        let labels = labels.into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let registry = Registry::new_custom(None, Some(labels)).expect("constant label names are valid");
        macro_rules! reg {
            ($metric:expr) => {{
                let m = $metric.expect("metric definition is valid");
                registry.register(Box::new(m.clone())).expect("metric names are unique");
                m
            }};
        }
        let latency = vec![0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];
        let e2e = vec![0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0];
        let batch = vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0];
        let metrics = Self {
            messages: reg!(IntCounterVec::new(
                Opts::new(name("messages_total"), "Records finished, by outcome"),
                &["outcome"]
            )),
            handle_seconds: reg!(Histogram::with_opts(
                HistogramOpts::new(name("handle_duration_seconds"), "Time from a record's permit to its completion")
                    .buckets(latency.clone())
            )),
            end_to_end_seconds: reg!(Histogram::with_opts(
                HistogramOpts::new(
                    name("end_to_end_latency_seconds"),
                    "Time from a record's event time to its completion"
                )
                .buckets(e2e)
            )),
            in_flight: reg!(IntGaugeVec::new(
                Opts::new(name("in_flight_records"), "Records received and not complete, per partition"),
                &["partition"]
            )),
            committed_offset: reg!(IntGaugeVec::new(
                Opts::new(
                    name("committed_offset"),
                    "The owner's view: last offset it committed, per partition it owns (librdkafka statistics, \
                     every 5 s; gone on revoke). The group's lag is sluice-lag's kafka_consumergroup_lag"
                ),
                &["topic", "partition"]
            )),
            high_watermark: reg!(IntGaugeVec::new(
                Opts::new(
                    name("high_watermark_offset"),
                    "The owner's view: high watermark per partition it owns (librdkafka statistics, every 5 s)"
                ),
                &["topic", "partition"]
            )),
            paused: reg!(IntGaugeVec::new(
                Opts::new(name("partition_paused"), "1 while a partition is paused (budget full or stalled)"),
                &["partition"]
            )),
            commits: reg!(IntCounterVec::new(
                Opts::new(
                    name("commits_total"),
                    "Offset commits: periodic ones sent (sent), synchronous ones (ok or the error code)"
                ),
                &["result"]
            )),
            commit_seconds: reg!(Histogram::with_opts(
                HistogramOpts::new(name("commit_duration_seconds"), "Synchronous commits (revoke, shutdown)")
                    .buckets(latency.clone())
            )),
            sink_seconds: reg!(HistogramVec::new(
                HistogramOpts::new(name("sink_duration_seconds"), "Sink round trip, by sink").buckets(latency),
                &["sink"]
            )),
            sink_batch_size: reg!(HistogramVec::new(
                HistogramOpts::new(name("sink_batch_size"), "Commands per sink round trip").buckets(batch),
                &["sink"]
            )),
            sink_round_trips: reg!(IntCounterVec::new(
                Opts::new(name("sink_round_trips_total"), "Sink round trips, by sink"),
                &["sink"]
            )),
            produce_requests: reg!(IntCounter::new(
                name("produce_requests_total"),
                "Produce requests the shared producer sent (librdkafka statistics, every 5 s)"
            )),
            produced_records: reg!(IntCounter::new(
                name("produced_records_total"),
                "Records those produce requests carried; ÷ produce_requests_total is the batching"
            )),
            dead_letters: reg!(IntCounterVec::new(
                Opts::new(name("dead_letters_total"), "Records written to the dead-letter topic, by error kind"),
                &["kind"]
            )),
            retries: reg!(IntCounterVec::new(
                Opts::new(name("retries_total"), "Retries after transient failures, by dependency"),
                &["dependency"]
            )),
            stalled: reg!(IntGauge::new(name("stalled_records"), "Records past the retry cap, still retrying")),
            rebalances: reg!(IntCounterVec::new(
                Opts::new(name("rebalances_total"), "Rebalance events, by kind (assign, revoke, lost, error)"),
                &["kind"]
            )),
            assigned: reg!(IntGauge::new(name("assigned_partitions"), "Partitions currently assigned")),
            dropped_completions: reg!(IntCounter::new(
                name("dropped_completions_total"),
                "Completions from a revoked assignment, dropped uncommitted"
            )),
            state_store_replaced: reg!(IntGauge::new(
                name("state_store_replaced"),
                "1 while Redis is not the store the state was written to (reset or replaced): writes stop"
            )),
            transactions: reg!(IntCounterVec::new(
                Opts::new(
                    name("transactions_total"),
                    "Exactly-once mode: Kafka transactions ended, by outcome (committed, aborted)"
                ),
                &["outcome"]
            )),
            transaction_seconds: reg!(Histogram::with_opts(
                HistogramOpts::new(
                    name("transaction_end_duration_seconds"),
                    "Exactly-once mode: how long ending a transaction took (outputs wait meanwhile)"
                )
                .buckets(vec![0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0])
            )),
            registry,
        };
        // Series an alert or a dashboard reads exist from the start, at zero:
        // the runtime's own dead-letter kind and the outcomes it records
        // (a workload's own kinds appear with their first record).
        metrics.dead_letters.with_label_values(&["handler_panic"]);
        for outcome in ["ok", "dead_lettered"] {
            metrics.messages.with_label_values(&[outcome]);
        }
        for outcome in ["committed", "aborted"] {
            metrics.transactions.with_label_values(&[outcome]);
        }
        for dependency in ["kafka", "handler"] {
            metrics.retries.with_label_values(&[dependency]);
        }
        metrics
    }
}
