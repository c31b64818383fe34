//! Every metric the runtime exports, registered in one place.
//!
//! Names follow `<prefix>_<thing>_<unit>`, the prefix the workload's
//! [`Identity`] gives (`sluice_processor` for the DEX processor); labels are
//! low cardinality (topic, partition, outcome, kind, sink): never a key.
//! Every series carries `workload` and `consumergroup`, constant per process.

use std::sync::Arc;

use prometheus::{Histogram, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Registry};
use sluice_service::label;
use sluice_service::metrics::Registrar;

/// The runtime's metrics. Cloning shares the underlying series.
#[derive(Debug, Clone)]
pub struct RuntimeMetrics {
    pub registry: Registry,
    pub messages: IntCounterVec,
    pub handle_seconds: Histogram,
    pub end_to_end_seconds: Histogram,
    /// `visible_age_seconds{topic}`: see [`RuntimeMetrics::observe_visible`].
    pub visible_age_seconds: HistogramVec,
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

label! {
    /// `rebalances_total{kind}`.
    RebalanceKind { Assign => "assign", Revoke => "revoke", Lost => "lost", Error => "error" }
}

label! {
    /// `transactions_total{outcome}`: how an exactly-once transaction ended.
    TxnOutcome { Committed => "committed", Aborted => "aborted" }
}

label! {
    /// `messages_total{outcome}`: the runtime's own outcomes (a workload adds its own, e.g. the
    /// DEX's `no_swap`, through [`crate::Handled::outcome`]).
    MessageOutcome { Ok => "ok", DeadLettered => "dead_lettered" }
}

label! {
    /// `dead_letters_total{kind}`: the runtime's own kind (a workload's come with
    /// [`crate::HandleError::Invalid`]).
    DeadLetterKind { HandlerPanic => "handler_panic", RetryExhausted => "retry_exhausted" }
}

label! {
    /// `retries_total{dependency}`: the runtime's own dependencies (a workload names its own in
    /// [`crate::HandleError::Transient`]).
    Dependency { Kafka => "kafka", Redis => "redis", Handler => "handler" }
}

label! {
    /// `sink_*{sink}`: where outputs go.
    Sink { Kafka => "kafka", Redis => "redis" }
}

label! {
    /// `commits_total{result}` besides librdkafka's error codes: a periodic commit sent, a
    /// synchronous one done, or one refused because the transactions failed.
    CommitResult { Sent => "sent", Ok => "ok", TransactionFailed => "transaction_failed" }
}

/// Who runs the runtime: the names its series, admin server and logs use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    /// The service's name in its logs and its readiness gauge (`sluice_<service>_ready`:
    /// letters, digits and underscores), e.g. `processor`.
    pub service: &'static str,
    /// Every runtime series is `<metric_prefix>_<thing>`, e.g. `sluice_processor`.
    pub metric_prefix: &'static str,
    /// The `workload` label of every series, e.g. `dex`.
    pub workload: &'static str,
}

/// The per-partition gauges (the owner's view of each partition it owns).
struct PartitionSeries {
    in_flight: IntGaugeVec,
    committed_offset: IntGaugeVec,
    high_watermark: IntGaugeVec,
    paused: IntGaugeVec,
}

impl PartitionSeries {
    fn new(r: &Registrar<'_>) -> Self {
        Self {
            in_flight: r.gauges(
                "in_flight_records",
                "Records received and not complete, per partition",
                &["partition"],
            ),
            committed_offset: r.gauges(
                "committed_offset",
                "The owner's view: last offset it committed, per partition it owns (librdkafka statistics, \
                         every 5 s; with exactly-once outputs, each transaction's offsets; gone on revoke). The \
                         group's lag is sluice-lag's kafka_consumergroup_lag",
                &["topic", "partition"],
            ),
            high_watermark: r.gauges(
                "high_watermark_offset",
                "The owner's view: high watermark per partition it owns (librdkafka statistics, every 5 s)",
                &["topic", "partition"],
            ),
            paused: r.gauges(
                "partition_paused",
                "1 while a partition is paused (budget full or stalled)",
                &["partition"],
            ),
        }
    }
}

/// `visible_age_seconds`'s buckets: a freshness objective must be one of them (the chart's
/// schema lists them).
pub const VISIBLE_AGE_BUCKETS: [f64; 14] =
    [0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0];

/// `visible_age_seconds{topic}`.
fn visible_age(r: &Registrar) -> HistogramVec {
    r.histograms(
        "visible_age_seconds",
        "Age of an output record (from its input's event time: the block time for the DEX) when a read_committed reader can first read it: its transaction committed, or without transactions, its group of outputs acknowledged; by topic",
        &["topic"],
        &VISIBLE_AGE_BUCKETS,
    )
}

impl RuntimeMetrics {
    /// Observes each `(topic, event time)`'s age now, as its output became visible.
    pub(crate) fn observe_visible<'a>(&self, outputs: impl Iterator<Item = (&'a Arc<str>, i64)>) {
        let now = sluice_core::clock::now_ms();
        // One series lookup per topic, not per output (a batch holds a topic or two).
        let mut series: Vec<(&Arc<str>, Histogram)> = Vec::with_capacity(2);
        for (topic, event_ms) in outputs {
            let at = match series.iter().position(|(t, _)| *t == topic) {
                Some(i) => i,
                None => {
                    series.push((topic, self.visible_age_seconds.with_label_values(&[&**topic])));
                    series.len() - 1
                }
            };
            series[at].1.observe(now.saturating_sub(event_ms).max(0) as f64 / 1000.0);
        }
    }

    /// Creates and registers every metric in a fresh registry whose series
    /// all carry `workload` and `consumergroup` (the workload's metrics too,
    /// registered in [`RuntimeMetrics::registry`]).
    pub fn new(identity: &Identity, group: &str) -> Self {
        let labels = [("workload", identity.workload), ("consumergroup", group)];
        let labels = labels.into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let registry = Registry::new_custom(None, Some(labels)).expect("constant label names are valid");
        let latency = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];
        let e2e = [0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0];
        let batch = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0];
        let r = Registrar::new(&registry, identity.metric_prefix);
        let PartitionSeries { in_flight, committed_offset, high_watermark, paused } = PartitionSeries::new(&r);
        let metrics = Self {
            in_flight,
            committed_offset,
            high_watermark,
            paused,
            messages: r.counters("messages_total", "Records finished, by outcome", &["outcome"]),
            handle_seconds: r.histogram(
                "handle_duration_seconds",
                "Time from a record's permit to its completion",
                &latency,
            ),
            end_to_end_seconds: r.histogram(
                "end_to_end_latency_seconds",
                "Time from a record's event time to its completion",
                &e2e,
            ),
            visible_age_seconds: visible_age(&r),
            commits: r.counters(
                "commits_total",
                "Offset commits: periodic ones sent (sent), synchronous ones (ok or the error code)",
                &["result"],
            ),
            commit_seconds: r.histogram("commit_duration_seconds", "Synchronous commits (revoke, shutdown)", &latency),
            sink_seconds: r.histograms("sink_duration_seconds", "Sink round trip, by sink", &["sink"], &latency),
            sink_batch_size: r.histograms("sink_batch_size", "Commands per sink round trip", &["sink"], &batch),
            sink_round_trips: r.counters("sink_round_trips_total", "Sink round trips, by sink", &["sink"]),
            produce_requests: r.counter(
                "produce_requests_total",
                "Produce requests the shared producer sent (librdkafka statistics, every 5 s)",
            ),
            produced_records: r.counter(
                "produced_records_total",
                "Records those produce requests carried; ÷ produce_requests_total is the batching",
            ),
            dead_letters: r.counters(
                "dead_letters_total",
                "Records written to the dead-letter topic, by error kind",
                &["kind"],
            ),
            retries: r.counters("retries_total", "Retries after transient failures, by dependency", &["dependency"]),
            stalled: r.gauge("stalled_records", "Records past the retry cap, still retrying"),
            rebalances: r.counters(
                "rebalances_total",
                "Rebalance events, by kind (assign, revoke, lost, error)",
                &["kind"],
            ),
            assigned: r.gauge("assigned_partitions", "Partitions currently assigned"),
            dropped_completions: r
                .counter("dropped_completions_total", "Completions from a revoked assignment, dropped uncommitted"),
            state_store_replaced: r.gauge(
                "state_store_replaced",
                "1 while Redis is not the store the state was written to (reset or replaced): writes stop",
            ),
            transactions: r.counters(
                "transactions_total",
                "Exactly-once mode: Kafka transactions ended, by outcome (committed, aborted)",
                &["outcome"],
            ),
            transaction_seconds: r.histogram(
                "transaction_end_duration_seconds",
                "Exactly-once mode: how long ending a transaction took (outputs wait meanwhile)",
                &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0],
            ),
            registry,
        };
        metrics.start_at_zero();
        metrics
    }

    /// Series an alert or a dashboard reads exist from the start, at zero: the runtime's own
    /// dead-letter kind and the outcomes it records (a workload's own kinds appear with their
    /// first record).
    fn start_at_zero(&self) {
        for kind in DeadLetterKind::ALL {
            self.dead_letters.with_label_values(&[kind.as_str()]);
        }
        for outcome in MessageOutcome::ALL {
            self.messages.with_label_values(&[outcome.as_str()]);
        }
        for outcome in TxnOutcome::ALL {
            self.transactions.with_label_values(&[outcome.as_str()]);
        }
        // Redis's series starts with the Redis sink, used or not.
        for dependency in [Dependency::Kafka, Dependency::Handler] {
            self.retries.with_label_values(&[dependency.as_str()]);
        }
    }
}
