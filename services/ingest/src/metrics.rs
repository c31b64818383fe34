//! The ingest's Prometheus metrics (`sluice_ingest_…`).

use prometheus::{Histogram, IntCounter, IntCounterVec, IntGauge, Registry, exponential_buckets};
use sluice_service::label;
use sluice_service::metrics::Registrar;

/// Every metric the ingest exports.
#[derive(Debug, Clone)]
pub struct Metrics {
    pub registry: Registry,
    /// 1 while this instance holds the lease and streams.
    pub active: IntGauge,
    pub produced_records: IntCounter,
    pub produced_transactions: IntCounter,
    /// Records the topic already held, sent again (after a takeover, a
    /// restart or a lost cursor; the processors' effects ignore them).
    pub resent_records: IntCounter,
    pub skipped_records: IntCounter,
    /// 1 while this instance refuses to stream because Redis lost the cursor
    /// of a topic that holds records (`LOST_CURSOR=stop`).
    pub cursor_lost: IntGauge,
    /// 1 while Redis is not the store this instance's state is in (its
    /// generation marker changed or vanished): it does not stream.
    pub state_store_replaced: IntGauge,
    pub in_flight: IntGauge,
    /// Send to Kafka acknowledgement.
    pub delivery_latency: Histogram,
    /// The newest slot whose records Kafka has all acknowledged.
    pub cursor_slot: IntGauge,
    pub head_slot: IntGauge,
    /// Chain head minus cursor.
    pub slots_behind: IntGauge,
    /// Chain streams re-opened, by reason (`connect`, `ended`, `error`).
    pub reconnects: IntCounterVec,
    pub leases_acquired: IntCounter,
    pub leases_lost: IntCounter,
    /// Times Kafka fenced this instance's producer (a newer active one
    /// initialised the shared transactional id).
    pub fenced: IntCounter,
    /// Failed operations, by operation.
    pub errors: IntCounterVec,
}

label! {
    /// `reconnects_total{reason}`: why a chain stream was opened again.
    Reconnect { Gap => "gap", Ended => "ended", Error => "error", Connect => "connect" }
}

label! {
    /// `errors_total{operation}`: what failed.
    Operation { Active => "active", Lease => "lease", Renew => "renew", Tail => "tail", Cursor => "cursor" }
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let r = Registrar::new(&registry, "sluice_ingest");
        let buckets = exponential_buckets(0.0005, 2.0, 16).expect("valid buckets");
        let metrics = Self {
            active: r.gauge("active", "1 while this instance holds the lease and streams."),
            produced_records: r.counter("produced_records_total", "Records acknowledged by Kafka."),
            produced_transactions: r.counter("produced_transactions_total", "Chain transactions sent."),
            resent_records: r.counter(
                "resent_records_total",
                "Records acknowledged at or before the newest record their partition held when this active period \
                 began: duplicates in the topic (sent again without transactions; with them 0 unless another producer \
                 wrote the topic meanwhile).",
            ),
            skipped_records: r.counter(
                "skipped_records_total",
                "Records not sent because the topic already held them when this active period began (committed by \
                 the previous active instance, or by this one before a restart, past the stored cursor).",
            ),
            cursor_lost: r.gauge(
                "cursor_lost",
                "1 while this instance does not stream: Redis holds no cursor but the topic holds records (Redis was \
                 reset or replaced).",
            ),
            state_store_replaced: r.gauge(
                "state_store_replaced",
                "1 while Redis is not the store this instance's state is in (its generation marker changed or \
                 vanished): it does not stream.",
            ),
            in_flight: r.gauge("in_flight_records", "Records sent and not yet acknowledged."),
            delivery_latency: r.histogram("delivery_latency_seconds", "Send to Kafka acknowledgement.", &buckets),
            cursor_slot: r.gauge("cursor_slot", "Newest slot whose records are all acknowledged."),
            head_slot: r.gauge("head_slot", "The chain's head slot."),
            slots_behind: r.gauge("slots_behind", "Chain head minus the cursor."),
            reconnects: r.counters("reconnects_total", "Chain streams re-opened, by reason.", &["reason"]),
            leases_acquired: r.counter("leases_acquired_total", "Times this instance became active."),
            leases_lost: r.counter("leases_lost_total", "Times this instance lost the lease while active."),
            fenced: r.counter(
                "fenced_total",
                "Times Kafka fenced this instance's transactional producer (a newer active instance took over).",
            ),
            errors: r.counters("errors_total", "Failed operations, by operation.", &["operation"]),
            registry: registry.clone(),
        };
        // Every reason exists from the start, at zero, for rate().
        for reason in Reconnect::ALL {
            metrics.reconnects.with_label_values(&[reason.as_str()]);
        }
        metrics
    }

    pub fn reconnect(&self, reason: Reconnect) {
        self.reconnects.with_label_values(&[reason.as_str()]).inc();
    }

    pub fn error(&self, operation: Operation) {
        self.errors.with_label_values(&[operation.as_str()]).inc();
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
