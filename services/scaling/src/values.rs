//! A scaling policy read from the chart's values: `helm/sluice/values.yaml`, with a user's
//! override files merged over it the way `helm -f` merges them (maps deep, everything else
//! replaced). What it reads, under `processor.autoscaling`: `trigger` (`kafka`, `offsetLag`,
//! `timeLag`, `drainTime`) and its settings (`lagThreshold`, `timeLag.targetSeconds`,
//! `drainTime.targetSeconds`, `perPodRate`, `minCooldownSeconds`), `minReplicas`,
//! `maxReplicas`, `activationLagThreshold`, `offsetResetPolicy`, `limitToPartitionsWithLag`,
//! `scaleAhead` (with `podStartupSeconds`: how far ahead),
//! `pollingInterval`, `cooldownPeriod`, `fallback`, `behavior` (a direction without
//! `policies` gets the ones the chart derives, [`crate::landing`]),
//! `ensureEvenDistributionOfPartitions`; and `kafka.partitions`.

use serde::Deserialize;
use serde_json::Value;

use crate::behavior::BehaviorSpec;
use crate::keda::{Fallback, KafkaTrigger, ResetPolicy};
use crate::landing;
use crate::rules::Trigger;

/// Which scaler decides.
#[derive(Debug, Clone, PartialEq)]
pub enum PolicyTrigger {
    /// KEDA's own `kafka` trigger.
    Kafka(KafkaTrigger),
    /// Sluice's scaler (sluice-lag), with its trigger.
    Sluice(Trigger),
}

/// Everything a simulation needs of a policy.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub name: String,
    pub trigger: PolicyTrigger,
    pub min_replicas: i32,
    pub max_replicas: i32,
    pub partitions: u32,
    pub polling_interval_s: i64,
    pub cooldown_period_s: i64,
    pub activation_lag_threshold: i64,
    /// `offsetResetPolicy: earliest`: a partition without a committed offset counts its log.
    pub offset_reset_earliest: bool,
    pub fallback: Option<Fallback>,
    pub behavior: Option<BehaviorSpec>,
    /// Sluice's scaler: records/s per pod until learned.
    pub per_pod_rate: f64,
    pub min_cooldown_s: f64,
    /// Sluice's scaler: how far ahead it sizes along the produce rate's rise, seconds
    /// (`scaleAhead`: `podStartupSeconds`; 0: off).
    pub lead_s: f64,
}

impl Policy {
    /// The largest scale-up tolerance the HPA may apply, as the chart renders it for Sluice's
    /// scaler: the behavior's where the cluster honours a per-HPA tolerance, else the
    /// controller's default 0.1, so the larger of the two.
    pub fn hpa_tolerance(&self) -> f64 {
        let given = self.behavior.as_ref().and_then(|b| b.scale_up.as_ref()).and_then(|u| u.tolerance);
        given.map_or(0.1, |t| t.as_f64().max(0.1))
    }
}

/// Merges `over` into `base` like helm: maps deep, anything else replaced.
pub fn merge(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(&k) {
                    Some(existing) => merge(existing, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (b, o) => *b = o,
    }
}

/// Values that cannot be read as a policy, naming the file (or the policy's name).
#[derive(Debug, thiserror::Error)]
pub enum ValuesError {
    #[error("{name}: {source}")]
    Yaml {
        name: String,
        #[source]
        source: yaml_serde::Error,
    },
    #[error("{name}: {source}")]
    Json {
        name: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{name}: processor.autoscaling: {source}")]
    Autoscaling {
        name: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{name}: {problem}")]
    Invalid { name: String, problem: String },
}

fn invalid(name: &str, problem: impl Into<String>) -> ValuesError {
    ValuesError::Invalid { name: name.to_string(), problem: problem.into() }
}

/// Parses one values file.
pub fn parse_yaml(name: &str, text: &str) -> Result<Value, ValuesError> {
    let yaml: yaml_serde::Value =
        yaml_serde::from_str(text).map_err(|source| ValuesError::Yaml { name: name.to_string(), source })?;
    serde_json::to_value(yaml).map_err(|source| ValuesError::Json { name: name.to_string(), source })
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Autoscaling {
    #[serde(default = "kafka")]
    trigger: String,
    min_replicas: i32,
    max_replicas: i32,
    #[serde(default = "thousand")]
    lag_threshold: i64,
    #[serde(default)]
    activation_lag_threshold: i64,
    #[serde(default)]
    offset_reset_policy: ResetPolicy,
    #[serde(default)]
    limit_to_partitions_with_lag: bool,
    #[serde(default)]
    ensure_even_distribution_of_partitions: bool,
    #[serde(default = "fifteen")]
    polling_interval: i64,
    #[serde(default = "three_hundred")]
    cooldown_period: i64,
    fallback: Option<Fallback>,
    behavior: Option<BehaviorSpec>,
    #[serde(default)]
    time_lag: Option<Target>,
    #[serde(default)]
    drain_time: Option<Target>,
    #[serde(default = "thousand_f")]
    per_pod_rate: f64,
    #[serde(default = "fifteen_f")]
    min_cooldown_seconds: f64,
    #[serde(default)]
    scale_ahead: bool,
    #[serde(default)]
    pod_startup_seconds: f64,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Target {
    target_seconds: f64,
}

fn kafka() -> String {
    "kafka".into()
}
fn thousand() -> i64 {
    1000
}
fn thousand_f() -> f64 {
    1000.0
}
fn fifteen() -> i64 {
    15
}
fn fifteen_f() -> f64 {
    15.0
}
fn three_hundred() -> i64 {
    300
}

/// The policy in merged values.
pub fn policy(name: &str, values: &Value) -> Result<Policy, ValuesError> {
    let at = |path: &str| -> Result<&Value, ValuesError> {
        path.split('.').try_fold(values, |v, k| v.get(k).ok_or_else(|| invalid(name, format!("{path} is missing"))))
    };
    let a: Autoscaling = serde_json::from_value(at("processor.autoscaling")?.clone())
        .map_err(|source| ValuesError::Autoscaling { name: name.to_string(), source })?;
    let partitions =
        at("kafka.partitions")?.as_u64().ok_or_else(|| invalid(name, "kafka.partitions is not a number"))?;
    let target = |t: &Option<Target>, key: &str| {
        t.as_ref()
            .map(|t| t.target_seconds)
            .filter(|s| *s > 0.0)
            .ok_or_else(|| invalid(name, format!("processor.autoscaling.{key}.targetSeconds must be set above 0")))
    };
    let trigger = match a.trigger.as_str() {
        "kafka" => PolicyTrigger::Kafka(KafkaTrigger {
            lag_threshold: a.lag_threshold,
            activation_lag_threshold: a.activation_lag_threshold,
            offset_reset_policy: a.offset_reset_policy,
            limit_to_partitions_with_lag: a.limit_to_partitions_with_lag,
            ensure_even_distribution_of_partitions: a.ensure_even_distribution_of_partitions,
            ..KafkaTrigger::default()
        }),
        "offsetLag" => PolicyTrigger::Sluice(Trigger::OffsetLag { lag_threshold: a.lag_threshold }),
        "timeLag" => PolicyTrigger::Sluice(Trigger::TimeLag { target_seconds: target(&a.time_lag, "timeLag")? }),
        "drainTime" => {
            PolicyTrigger::Sluice(Trigger::DrainTime { target_seconds: target(&a.drain_time, "drainTime")? })
        }
        other => {
            return Err(invalid(
                name,
                format!("processor.autoscaling.trigger {other:?} is not kafka, offsetLag, timeLag or drainTime"),
            ));
        }
    };
    if a.min_replicas < 0 || a.max_replicas < a.min_replicas.max(1) {
        return Err(invalid(name, "processor.autoscaling: maxReplicas must be at least minReplicas and 1"));
    }
    Ok(Policy {
        name: name.to_string(),
        trigger,
        min_replicas: a.min_replicas,
        max_replicas: a.max_replicas,
        partitions: partitions as u32,
        polling_interval_s: a.polling_interval.max(1),
        cooldown_period_s: a.cooldown_period,
        activation_lag_threshold: a.activation_lag_threshold,
        offset_reset_earliest: a.offset_reset_policy == ResetPolicy::Earliest,
        fallback: a.fallback,
        behavior: a.behavior.map(|b| landing::with_derived_policies(&b, partitions as u32, a.max_replicas)),
        per_pod_rate: a.per_pod_rate,
        min_cooldown_s: a.min_cooldown_seconds,
        lead_s: if a.scale_ahead { a.pod_startup_seconds.max(0.0) } else { 0.0 },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHART: &str = "
kafka:
  partitions: 12
processor:
  autoscaling:
    minReplicas: 1
    maxReplicas: 12
    lagThreshold: 1000
    pollingInterval: 15
    cooldownPeriod: 300
    fallback: {failureThreshold: 3, replicas: 4, behavior: currentReplicasIfHigher}
    behavior:
      scaleUp: {stabilizationWindowSeconds: 0, tolerance: \"0.05\", policies: [{type: Pods, value: 4, periodSeconds: 15}]}
      scaleDown: {stabilizationWindowSeconds: 300}
";

    #[test]
    fn an_override_merges_over_the_chart_like_helm() {
        let mut v = parse_yaml("values.yaml", CHART).expect("yaml");
        let p = policy("chart", &v).expect("a policy");
        assert!(matches!(p.trigger, PolicyTrigger::Kafka(KafkaTrigger { lag_threshold: 1000, .. })));
        assert_eq!((p.partitions, p.max_replicas), (12, 12));
        let over = parse_yaml(
            "mine.yaml",
            "processor: {autoscaling: {trigger: timeLag, timeLag: {targetSeconds: 30}, behavior: {scaleDown: {stabilizationWindowSeconds: 60}}}}",
        )
        .expect("yaml");
        merge(&mut v, over);
        let p = policy("mine", &v).expect("a policy");
        assert_eq!(p.trigger, PolicyTrigger::Sluice(Trigger::TimeLag { target_seconds: 30.0 }));
        let b = p.behavior.expect("behavior");
        assert_eq!(b.scale_down.and_then(|d| d.stabilization_window_seconds), Some(60));
        assert!(b.scale_up.and_then(|u| u.tolerance).is_some(), "the chart's scale-up stays");
    }

    #[test]
    fn mistakes_are_named() {
        let mut v = parse_yaml("values.yaml", CHART).expect("yaml");
        merge(&mut v, parse_yaml("o", "processor: {autoscaling: {trigger: drainTime}}").expect("yaml"));
        assert!(policy("o", &v).expect_err("no target").to_string().contains("drainTime.targetSeconds"));
        merge(&mut v, parse_yaml("o", "processor: {autoscaling: {trigger: cpu}}").expect("yaml"));
        assert!(policy("o", &v).expect_err("bad trigger").to_string().contains("\"cpu\""));
        assert!(parse_yaml("broken.yaml", "a: [").expect_err("bad yaml").to_string().contains("broken.yaml"));
    }
}
