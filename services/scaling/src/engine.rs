//! One policy's deciders wired together: the metric KEDA serves the HPA (its own `kafka`
//! trigger, or Sluice's scaler through KEDA's `external` trigger) and the HPA that syncs on it.
//! The simulator and the demo drive the same engine, so they speak the chart's policy.

use crate::behavior::Behavior;
use crate::hpa::{ControllerFlags, Hpa, HpaSpec, SyncResult, Target};
use crate::keda::{KafkaScaler, PartitionOffsets};
use crate::rules::{Decision, GroupInput, Scaler, Settings};
use crate::values::{Policy, PolicyTrigger};

/// What stands behind the HPA's metric.
#[derive(Debug)]
pub enum Decider {
    Kafka(KafkaScaler),
    Sluice(Box<Scaler>),
}

/// A policy's metric and HPA.
#[derive(Debug)]
pub struct Engine {
    pub hpa: Hpa,
    pub decider: Decider,
    /// Sluice's scaler's last decision (for reports).
    pub last_decision: Option<Decision>,
}

impl Engine {
    /// The HPA KEDA creates for `policy` (min at least 1: KEDA scales from zero itself), syncing
    /// every `sync_ms`.
    pub fn new(policy: &Policy, sync_ms: i64) -> Self {
        let (target, decider) = match &policy.trigger {
            PolicyTrigger::Kafka(t) => (t.lag_threshold.max(1) * 1000, Decider::Kafka(KafkaScaler::new(t.clone()))),
            PolicyTrigger::Sluice(trigger) => {
                let settings = Settings {
                    trigger: *trigger,
                    min_replicas: policy.min_replicas.max(0) as u32,
                    max_replicas: policy.max_replicas.max(1) as u32,
                    per_pod_rate: policy.per_pod_rate,
                    rate_bounds_factor: 4.0,
                    min_cooldown_ms: (policy.min_cooldown_s * 1000.0) as i64,
                    hpa_tolerance: policy.hpa_tolerance(),
                    rate_window_ms: 60_000,
                    lead_ms: (policy.lead_s * 1000.0) as i64,
                };
                // Sluice's scaler serves replicas: AverageValue 1 each.
                (1000, Decider::Sluice(Box::new(Scaler::new(settings))))
            }
        };
        let spec = HpaSpec {
            min_replicas: policy.min_replicas.max(1),
            max_replicas: policy.max_replicas,
            target: Target::AverageValue(target),
            behavior: policy.behavior.as_ref().map(Behavior::from_spec),
        };
        let flags = ControllerFlags { sync_period_ms: sync_ms, ..ControllerFlags::default() };
        Self { hpa: Hpa::new(spec, flags), decider, last_decision: None }
    }

    /// The metric KEDA would serve now, in milli-units (`None`: unknown, an error to the HPA).
    /// `offsets` feed KEDA's `kafka` trigger, `group` (sluice-lag's newest poll) Sluice's scaler.
    pub fn metric(&mut self, offsets: &[PartitionOffsets], group: Option<&GroupInput>) -> Option<i64> {
        match &mut self.decider {
            Decider::Kafka(k) => Some(k.poll(offsets).lag * 1000),
            Decider::Sluice(s) => {
                let d = s.decide(group?);
                let metric = d.metric.map(|m| (m * 1000.0).round() as i64);
                self.last_decision = Some(d);
                metric
            }
        }
    }

    /// One HPA sync at `now_ms` with `current` replicas.
    pub fn sync(&mut self, now_ms: i64, current: i32, metric_milli: Option<i64>) -> SyncResult {
        self.hpa.sync(now_ms, current, metric_milli)
    }
}
