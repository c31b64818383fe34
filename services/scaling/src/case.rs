//! A conformance case: one HPA (as KEDA creates it for one trigger) and the metric it reads
//! over time, replayed sync by sync. `services/scaling/conformance/hpa/testdata/*.json` holds the committed
//! cases; `services/scaling/conformance/hpa` runs Kubernetes' controller on them and `sluice-lag simulate
//! hpa-case` runs [`replay`], and the two timelines must be identical.

use serde::{Deserialize, Serialize};

use crate::behavior::{Behavior, BehaviorSpec};
use crate::hpa::{ControllerFlags, Hpa, HpaSpec, Target};

/// A case file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HpaCase {
    pub name: String,
    /// What the case exercises, for the reader.
    #[serde(default)]
    pub about: String,
    pub sync_period_s: i64,
    pub downscale_window_s: i64,
    pub tolerance: f64,
    pub initial_replicas: i32,
    pub min_replicas: i32,
    pub max_replicas: i32,
    pub target_average_milli: i64,
    pub behavior: Option<BehaviorSpec>,
    pub duration_s: i64,
    /// A step function of `[seconds since start, milli-units]`.
    pub metric: Vec<[i64; 2]>,
}

/// One sync: when, the metric read, the replicas before and after.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncRecord {
    pub at_ms: i64,
    pub metric_milli: i64,
    pub before: i32,
    pub after: i32,
}

impl HpaCase {
    /// The metric's value at `at_ms` (the last step at or before it; 0 before the first).
    pub fn metric_at(&self, at_ms: i64) -> i64 {
        self.metric.iter().take_while(|p| p[0] * 1000 <= at_ms).last().map_or(0, |p| p[1])
    }

    fn hpa(&self) -> Hpa {
        let spec = HpaSpec {
            min_replicas: self.min_replicas,
            max_replicas: self.max_replicas,
            target: Target::AverageValue(self.target_average_milli),
            behavior: self.behavior.as_ref().map(Behavior::from_spec),
        };
        let flags = ControllerFlags {
            sync_period_ms: self.sync_period_s * 1000,
            downscale_window_ms: self.downscale_window_s * 1000,
            tolerance: self.tolerance,
        };
        Hpa::new(spec, flags)
    }
}

/// Replays the case: a sync every period from one period after the start (the controller
/// queues a new HPA with the resync delay) to the end, every pod ready at once.
pub fn replay(case: &HpaCase) -> Vec<SyncRecord> {
    let mut hpa = case.hpa();
    let period = case.sync_period_s * 1000;
    let mut replicas = case.initial_replicas;
    let mut out = Vec::new();
    let mut at = period;
    while at <= case.duration_s * 1000 {
        let metric = case.metric_at(at);
        let result = hpa.sync(at, replicas, Some(metric));
        out.push(SyncRecord { at_ms: at, metric_milli: metric, before: replicas, after: result.desired });
        replicas = result.desired;
        at += period;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metric_is_a_step_function() {
        let case: HpaCase = serde_json::from_value(serde_json::json!({
            "name": "t", "sync_period_s": 15, "downscale_window_s": 300, "tolerance": 0.1,
            "initial_replicas": 1, "min_replicas": 1, "max_replicas": 4, "target_average_milli": 1000,
            "behavior": null, "duration_s": 60, "metric": [[0, 500], [30, 4000]]
        }))
        .expect("a case");
        assert_eq!((case.metric_at(29_999), case.metric_at(30_000)), (500, 4000));
        let timeline = replay(&case);
        let at: Vec<i64> = timeline.iter().map(|r| r.at_ms).collect();
        assert_eq!(at, vec![15_000, 30_000, 45_000, 60_000]);
        assert_eq!(timeline[1], SyncRecord { at_ms: 30_000, metric_milli: 4000, before: 1, after: 4 });
    }
}
