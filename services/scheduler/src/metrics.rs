//! The scheduler's Prometheus metrics (`sluice_scheduler_…`), labelled by
//! job and outcome or reason only. Label values come from the model's enums
//! ([`Outcome`], [`SkipReason`], [`MissReason`], [`Op`]), never from strings
//! at call sites.
//!
//! The job's label is `job_name`, not `job`: Prometheus gives every scraped
//! series its own `job` label (the scrape job) and would rename ours to
//! `exported_job`. A job's counters and its running and paused gauges exist
//! from the moment its replica starts ticking it (zero until something
//! happens), so `rate()` starts from zero and an alert never waits on a series
//! that is not there yet; its histograms, next tick and last success appear
//! with their first value.

use prometheus::{GaugeVec, HistogramVec, IntCounterVec, IntGaugeVec, Registry, exponential_buckets};
use sluice_service::label;
use sluice_service::metrics::Registrar;

use crate::model::{MissReason, Outcome, SkipReason};

label! {
    /// The scheduler's own calls that can fail (the `operation` label of
    /// `sluice_scheduler_errors_total`).
    Op { Claim => "claim", Queue => "queue", Renew => "renew", Finish => "finish", History => "history" }
}

label! {
    /// Whether a run found without an end had applied the tick's effect (the `effect` label of
    /// `sluice_scheduler_abandoned_runs_total`).
    Effect { Applied => "applied", None => "none" }
}

impl Effect {
    /// The effect of a run that applied `applied` items.
    pub fn of(applied: u64) -> Self {
        if applied > 0 { Self::Applied } else { Self::None }
    }
}

/// Every metric the scheduler exports.
#[derive(Debug, Clone)]
pub struct Metrics {
    pub registry: Registry,
    /// Runs ended, by job and outcome ([`Outcome::RUN_ENDS`]).
    pub runs: IntCounterVec,
    pub run_duration: HistogramVec,
    /// Run start after the tick's scheduled time.
    pub start_delay: HistogramVec,
    /// End of the job's newest successful run (any replica), Unix seconds.
    pub last_success: GaugeVec,
    /// Ticks nobody ran: `unclaimed` (no replica claimed them in time),
    /// `late` (claimed past the misfire policy's window) or `abandoned` (its
    /// run died before applying anything, and nobody took it over in time).
    pub ticks_missed: IntCounterVec,
    /// Runs whose replica stopped without recording an end, found by this
    /// replica, by whether they had applied the tick's effect.
    pub abandoned: IntCounterVec,
    /// Ticks not run on purpose: `overlap`, `paused`.
    pub ticks_skipped: IntCounterVec,
    /// Writes the fence refused: a run that lost its lease tried to write.
    pub stale_writes: IntCounterVec,
    /// Runs whose lease was lost while they ran (renewal refused or lapsed).
    pub claims_lost: IntCounterVec,
    /// Ticks another replica claimed first (normal contention).
    pub claims_contended: IntCounterVec,
    /// Abandoned ticks this replica took over.
    pub takeovers: IntCounterVec,
    pub running: IntGaugeVec,
    pub paused: IntGaugeVec,
    pub next_tick: GaugeVec,
    pub items: IntCounterVec,
    pub drift_found: IntCounterVec,
    pub drift_repaired: IntCounterVec,
    /// Redis or chain calls of the scheduler itself that failed, by operation.
    pub errors: IntCounterVec,
    /// 1 while Redis is not the store the scheduler's state is in (its
    /// generation marker changed or vanished): no claim or write lands.
    pub state_store_replaced: prometheus::IntGauge,
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let r = Registrar::new(&registry, "sluice_scheduler");
        let job = ["job_name"];
        let per_job = |thing: &str, help: &str| r.counters(thing, help, &job);
        let durations = |start: f64| exponential_buckets(start, 2.0, 20).expect("valid buckets");
        Self {
            runs: r.counters("runs_total",
                "Runs ended, by job and outcome.",
                &["job_name", "outcome"],
            ),
            run_duration: r.histograms("run_duration_seconds", "Run duration.", &job, &durations(0.005)),
            start_delay: r.histograms("start_delay_seconds", "Run start after the tick's scheduled time.", &job, &durations(0.001)),
            last_success: r.float_gauges("last_success_timestamp_seconds", "End of the job's newest successful run on any replica, Unix seconds.", &job),
            ticks_missed: r.counters("ticks_missed_total",
                "Ticks nobody ran, by reason (unclaimed, late, abandoned).",
                &["job_name", "reason"],
            ),
            abandoned: r.counters("abandoned_runs_total",
                "Runs whose replica stopped without recording an end, by whether they had applied the tick's effect.",
                &["job_name", "effect"],
            ),
            ticks_skipped: r.counters("ticks_skipped_total",
                "Ticks not run on purpose, by reason (overlap, paused).",
                &["job_name", "reason"],
            ),
            stale_writes: per_job("stale_writes_rejected_total",
                "Writes the fence refused: the run no longer held its lease, or a newer run had started.",
            ),
            claims_lost: per_job("claims_lost_total", "Runs whose lease was lost while they ran."),
            claims_contended: per_job("claims_contended_total",
                "Ticks another replica claimed first.",
            ),
            takeovers: per_job("takeovers_total", "Ticks whose run died, taken over by this replica."),
            running: r.gauges("running", "Runs in progress on this replica.", &job),
            paused: r.gauges("paused", "1 while the job is paused.", &job),
            next_tick: r.float_gauges("next_tick_timestamp_seconds", "The job's next tick, Unix seconds.", &job),
            items: per_job("items_total", "Items the job's runs processed."),
            drift_found: per_job("drift_found_total",
                "Items found to differ from the source of truth.",
            ),
            drift_repaired: per_job("drift_repaired_total", "Items repaired."),
            errors: r.counters("errors_total",
                "Failed calls of the scheduler itself, by operation.",
                &["job_name", "operation"],
            ),
            state_store_replaced: r.gauge(
                "state_store_replaced",
                "1 while Redis is not the store the scheduler's state is in (reset or replaced): nothing is claimed or written",
            ),
            registry: registry.clone(),
        }
    }

    /// Creates every series of `job` at zero, with the outcomes and reasons
    /// the scheduler records (a Prometheus counter that appears only on its
    /// first increment hides that first increment from `rate()`).
    pub fn init_job(&self, job: &str) {
        for outcome in Outcome::RUN_ENDS {
            self.runs.with_label_values(&[job, outcome.as_str()]);
        }
        for reason in MissReason::ALL {
            self.ticks_missed.with_label_values(&[job, reason.as_str()]);
        }
        for reason in [SkipReason::Overlap, SkipReason::Paused] {
            self.ticks_skipped.with_label_values(&[job, reason.as_str()]);
        }
        for effect in Effect::ALL {
            self.abandoned.with_label_values(&[job, effect.as_str()]);
        }
        for c in [
            &self.stale_writes,
            &self.claims_lost,
            &self.claims_contended,
            &self.takeovers,
            &self.items,
            &self.drift_found,
            &self.drift_repaired,
        ] {
            c.with_label_values(&[job]);
        }
        self.running.with_label_values(&[job]);
        self.paused.with_label_values(&[job]);
    }

    pub fn error(&self, job: &str, op: Op) {
        self.errors.with_label_values(&[job, op.as_str()]).inc();
    }

    pub fn missed(&self, job: &str, reason: MissReason, ticks: u64) {
        self.ticks_missed.with_label_values(&[job, reason.as_str()]).inc_by(ticks);
    }

    pub fn skipped(&self, job: &str, reason: SkipReason) {
        self.ticks_skipped.with_label_values(&[job, reason.as_str()]).inc();
    }

    pub fn set_paused(&self, job: &str, paused: bool) {
        self.paused.with_label_values(&[job]).set(i64::from(paused));
    }

    pub fn set_last_success(&self, job: &str, ms: i64) {
        self.last_success.with_label_values(&[job]).set(ms as f64 / 1000.0);
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
