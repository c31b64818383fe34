//! What the processor's sinks did over a phase: Redis round trips and
//! commands, Kafka produce requests and records, connections, transactions.

use serde::Serialize;
use sluice_runtime::metrics::RuntimeMetrics;

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sinks {
    pub redis: RedisFigures,
    pub kafka: KafkaFigures,
}

/// The processor's transactions over an exactly-once run.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct TransactionFigures {
    pub committed: u64,
    pub aborted: u64,
    /// Close to reopen: what releases into the next transaction wait.
    pub end_mean_ms: f64,
    /// The share of ends that took over 50 ms (a histogram bucket bound).
    pub ends_over_50ms: f64,
}

pub(super) fn transaction_figures(metrics: &RuntimeMetrics) -> Option<TransactionFigures> {
    let h = &metrics.transaction_seconds;
    let count = h.get_sample_count();
    if count == 0 {
        return None;
    }
    use prometheus::core::Collector;
    let within_50ms = h
        .collect()
        .first()
        .and_then(|f| f.get_metric().first().cloned())
        .and_then(|m| {
            m.get_histogram().get_bucket().iter().find(|b| b.upper_bound() >= 0.05).map(|b| b.cumulative_count())
        })
        .unwrap_or(count);
    Some(TransactionFigures {
        committed: metrics.transactions.with_label_values(&["committed"]).get(),
        aborted: metrics.transactions.with_label_values(&["aborted"]).get(),
        end_mean_ms: h.get_sample_sum() * 1000.0 / count as f64,
        ends_over_50ms: 1.0 - within_50ms as f64 / count as f64,
    })
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct RedisFigures {
    pub round_trips: u64,
    pub commands: u64,
    pub round_trips_per_1000_records: f64,
    pub commands_per_round_trip: f64,
    /// Connections the processor holds (Redis `connected_clients` with it
    /// running, minus before it started); not measured while saturated.
    pub connections: Option<i64>,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct KafkaFigures {
    pub produce_requests: u64,
    pub produced_records: u64,
    pub records_per_produce_request: f64,
    /// The processor's connections to the broker (this process's, counted from the kernel's
    /// tables, less those open before it started); `None` in a report from before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connections: Option<i64>,
}

pub(super) fn redis_figures(metrics: &RuntimeMetrics, records: u64, connections: Option<i64>) -> RedisFigures {
    let round_trips = metrics.sink_round_trips.with_label_values(&["redis"]).get();
    let commands = metrics.sink_batch_size.with_label_values(&["redis"]).get_sample_sum() as u64;
    RedisFigures {
        round_trips,
        commands,
        round_trips_per_1000_records: round_trips as f64 * 1000.0 / records.max(1) as f64,
        commands_per_round_trip: commands as f64 / round_trips.max(1) as f64,
        connections,
    }
}

pub(super) fn kafka_figures(metrics: &RuntimeMetrics) -> KafkaFigures {
    let (requests, records) = (metrics.produce_requests.get(), metrics.produced_records.get());
    KafkaFigures {
        produce_requests: requests,
        produced_records: records,
        records_per_produce_request: records as f64 / requests.max(1) as f64,
        connections: None,
    }
}

/// This process's established connections to the broker's port.
pub(super) fn kafka_connections() -> i64 {
    sluice_service::connections::count().get("kafka").copied().unwrap_or(0)
}
