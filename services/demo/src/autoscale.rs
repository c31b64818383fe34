//! The demo's autoscaler: the chart's own policy (`helm/sluice/values.yaml`, with the demo's
//! flags merged over it the way `helm -f` would) run by `sluice-scaling`'s engine — KEDA's
//! `kafka` trigger on the group's offsets, or Sluice's scaler on sluice-lag's picture, and the
//! HPA controller's arithmetic (`conformance/hpa` holds it to Kubernetes' controller) — on the
//! demo's shorter sync. The demo, `sluice-lag simulate` and the chart speak one policy.

use std::path::Path;
use std::time::Instant;

use sluice_lag::picture::GroupPicture;
use sluice_scaling::engine::Engine;
use sluice_scaling::hpa::Limit;
use sluice_scaling::keda::PartitionOffsets;
use sluice_scaling::values::{self, Policy, PolicyTrigger};

/// The demo's overrides of the chart's values.
#[derive(Debug, Clone)]
pub struct Overrides {
    pub partitions: u32,
    pub max_replicas: u32,
    pub lag_threshold: u64,
    pub scale_down_window_s: u64,
    /// `kafka`, `offsetLag`, `timeLag` or `drainTime`; `None`: the chart's.
    pub trigger: Option<String>,
}

/// The policy the demo runs: the values file with the overrides merged over it.
pub fn policy(values_file: &Path, o: &Overrides) -> Result<Policy, String> {
    let name = values_file.display().to_string();
    let text = std::fs::read_to_string(values_file).map_err(|e| format!("reading {name}: {e}"))?;
    let mut v = values::parse_yaml(&name, &text)?;
    let mut autoscaling = serde_json::json!({
        "maxReplicas": o.max_replicas,
        "lagThreshold": o.lag_threshold,
        "behavior": {"scaleDown": {"stabilizationWindowSeconds": o.scale_down_window_s}},
    });
    if let Some(t) = &o.trigger {
        autoscaling["trigger"] = serde_json::json!(t);
    }
    values::merge(
        &mut v,
        serde_json::json!({"kafka": {"partitions": o.partitions}, "processor": {"autoscaling": autoscaling}}),
    );
    values::policy(&name, &v)
}

/// One decision and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub replicas: u32,
    /// The metric KEDA serves (milli-units; `None`: unknown).
    pub metric: Option<i64>,
    /// What the HPA's formula alone asked for.
    pub recommended: i32,
    pub why: String,
}

/// The engine on the demo's clock.
#[derive(Debug)]
pub struct Autoscaler {
    pub policy: Policy,
    engine: Engine,
    begin: Instant,
}

impl Autoscaler {
    pub fn new(policy: Policy, sync_ms: i64) -> Self {
        let engine = Engine::new(&policy, sync_ms);
        Self { policy, engine, begin: Instant::now() }
    }

    /// What the trigger reads: the group's offsets (KEDA's `kafka`) or sluice-lag's picture.
    pub fn describe(&self) -> String {
        match &self.policy.trigger {
            PolicyTrigger::Kafka(t) => format!("KEDA's kafka trigger, lagThreshold {}", t.lag_threshold),
            PolicyTrigger::Sluice(t) => format!("Sluice's scaler (sluice-lag), {t:?}"),
        }
    }

    /// One sync at `now` with `current` processors.
    pub fn decide(
        &mut self,
        now: Instant,
        current: u32,
        offsets: &[PartitionOffsets],
        picture: Option<&GroupPicture>,
    ) -> Decision {
        let at_ms = now.duration_since(self.begin).as_millis() as i64;
        let input = picture.and_then(|g| sluice_lag::scaler::group_input(g, at_ms, true).ok());
        let metric = self.engine.metric(offsets, input.as_ref());
        let r = self.engine.sync(at_ms, current as i32, metric);
        let limit = match r.limit {
            Limit::Desired => "as asked",
            Limit::Tolerance => "within the tolerance",
            Limit::Stabilized => "held by the stabilization window",
            Limit::Rate => "rate-limited by the behavior's policies",
            Limit::Bounds => "at min/max",
            Limit::NoMetric => "no metric: held",
        };
        let why = match &self.engine.last_decision {
            Some(d) => format!("{limit}; scaler: {:?}, {}", d.rule, d.reason),
            None => limit.to_string(),
        };
        Decision { replicas: r.desired.max(0) as u32, metric, recommended: r.recommended, why }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../helm/sluice/values.yaml")
    }

    fn overrides(trigger: Option<&str>) -> Overrides {
        Overrides {
            partitions: 12,
            max_replicas: 6,
            lag_threshold: 1000,
            scale_down_window_s: 30,
            trigger: trigger.map(String::from),
        }
    }

    fn offsets(lag_each: i64) -> Vec<PartitionOffsets> {
        (0..12).map(|_| PartitionOffsets { committed: Some(0), earliest: Some(0), latest: lag_each }).collect()
    }

    #[test]
    fn the_demo_runs_the_chart_s_policy_with_its_overrides() {
        let p = policy(&chart(), &overrides(None)).expect("the chart's values");
        assert_eq!((p.max_replicas, p.partitions), (6, 12));
        let b = p.behavior.clone().expect("the chart's behavior");
        assert_eq!(b.scale_down.and_then(|d| d.stabilization_window_seconds), Some(30));
        let mut a = Autoscaler::new(p, 5_000);
        let t = Instant::now();
        // 12,000 records behind: 12 wanted; the chart's scale-up policies allow max(1 + 4, 2 × 1).
        let d = a.decide(t, 1, &offsets(1_000), None);
        assert_eq!((d.recommended, d.replicas, d.metric), (12, 5, Some(12_000_000)));
        assert!(d.why.contains("rate-limited"), "{}", d.why);
    }

    #[test]
    fn a_trigger_of_sluice_s_scaler_reads_sluice_lag_s_picture_and_holds_without_it() {
        let p = policy(&chart(), &overrides(Some("offsetLag"))).expect("values");
        let mut a = Autoscaler::new(p, 5_000);
        let d = a.decide(Instant::now(), 2, &offsets(1_000), None);
        assert_eq!((d.replicas, d.metric), (2, None), "no picture: unknown, the HPA holds");
        assert!(policy(&chart(), &overrides(Some("cpu"))).is_err());
    }
}
