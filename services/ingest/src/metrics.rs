//! The ingest's Prometheus metrics (`sluice_ingest_…`).

use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry, exponential_buckets};

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

impl Metrics {
    pub fn new() -> Self {
        let r = Registry::new();
        let gauge = |name: &str, help: &str| {
            let g = IntGauge::new(name, help).expect("valid metric");
            r.register(Box::new(g.clone())).expect("registered once");
            g
        };
        let counter = |name: &str, help: &str| {
            let c = IntCounter::new(name, help).expect("valid metric");
            r.register(Box::new(c.clone())).expect("registered once");
            c
        };
        let labelled = |name: &str, help: &str, label: &str| {
            let c = IntCounterVec::new(Opts::new(name, help), &[label]).expect("valid metric");
            r.register(Box::new(c.clone())).expect("registered once");
            c
        };
        let delivery_latency = Histogram::with_opts(
            HistogramOpts::new("sluice_ingest_delivery_latency_seconds", "Send to Kafka acknowledgement.")
                .buckets(exponential_buckets(0.0005, 2.0, 16).expect("valid buckets")),
        )
        .expect("valid metric");
        r.register(Box::new(delivery_latency.clone())).expect("registered once");
        Self {
            active: gauge("sluice_ingest_active", "1 while this instance holds the lease and streams."),
            produced_records: counter("sluice_ingest_produced_records_total", "Records acknowledged by Kafka."),
            produced_transactions: counter("sluice_ingest_produced_transactions_total", "Chain transactions sent."),
            resent_records: counter(
                "sluice_ingest_resent_records_total",
                "Records acknowledged at or before the newest record their partition held when this active period \
                 began: duplicates in the topic (sent again without transactions; with them 0 unless another producer \
                 wrote the topic meanwhile).",
            ),
            skipped_records: counter(
                "sluice_ingest_skipped_records_total",
                "Records not sent because the topic already held them when this active period began (committed by \
                 the previous active instance, or by this one before a restart, past the stored cursor).",
            ),
            cursor_lost: gauge(
                "sluice_ingest_cursor_lost",
                "1 while this instance does not stream: Redis holds no cursor but the topic holds records (Redis was \
                 reset or replaced).",
            ),
            state_store_replaced: gauge(
                "sluice_ingest_state_store_replaced",
                "1 while Redis is not the store this instance's state is in (its generation marker changed or \
                 vanished): it does not stream.",
            ),
            in_flight: gauge("sluice_ingest_in_flight_records", "Records sent and not yet acknowledged."),
            delivery_latency,
            cursor_slot: gauge("sluice_ingest_cursor_slot", "Newest slot whose records are all acknowledged."),
            head_slot: gauge("sluice_ingest_head_slot", "The chain's head slot."),
            slots_behind: gauge("sluice_ingest_slots_behind", "Chain head minus the cursor."),
            reconnects: {
                let c = labelled("sluice_ingest_reconnects_total", "Chain streams re-opened, by reason.", "reason");
                // Every reason exists from the start, at zero, for rate().
                for reason in ["gap", "ended", "error", "connect"] {
                    c.with_label_values(&[reason]);
                }
                c
            },
            leases_acquired: counter("sluice_ingest_leases_acquired_total", "Times this instance became active."),
            leases_lost: counter("sluice_ingest_leases_lost_total", "Times this instance lost the lease while active."),
            fenced: counter(
                "sluice_ingest_fenced_total",
                "Times Kafka fenced this instance's transactional producer (a newer active instance took over).",
            ),
            errors: labelled("sluice_ingest_errors_total", "Failed operations, by operation.", "operation"),
            registry: r,
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
