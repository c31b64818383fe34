//! The demo's autoscaler: the chart's own policy (`helm/sluice/values.yaml`, with the demo's
//! flags merged over it the way `helm -f` would) run by `sluice-scaling`'s engine — KEDA's
//! `kafka` trigger on the group's offsets, or, for Sluice's triggers, the metric asked of the
//! demo's sluice-lag over KEDA's external-scaler protocol with the metadata the chart would
//! render, as KEDA's operator asks it — and the HPA controller's arithmetic
//! (`services/scaling/conformance/hpa` holds it to Kubernetes' controller), on the demo's shorter sync. The
//! demo, `sluice-lag simulate` and the chart speak one policy.

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use sluice_lag::scaler::grpc::pb::external_scaler_client::ExternalScalerClient;
use sluice_lag::scaler::grpc::pb::{GetMetricsRequest, ScaledObjectRef};
use sluice_scaling::engine::Engine;
use sluice_scaling::hpa::Limit;
use sluice_scaling::keda::PartitionOffsets;
use sluice_scaling::rules::Trigger;
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
    /// More values, `a.b.c` → value (`--set`), over the rest.
    pub extra: Vec<(String, String)>,
}

/// Why the demo has no autoscaling policy.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("--set {0:?}: expected KEY=VALUE, e.g. processor.autoscaling.maxReplicas=6")]
    BadSet(String),
    #[error("no values file")]
    NoValuesFile,
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Values(#[from] values::ValuesError),
}

/// `KEY=VALUE` pairs of `--set`.
pub fn parse_sets(sets: &[String]) -> Result<Vec<(String, String)>, PolicyError> {
    sets.iter()
        .map(|s| match s.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => Err(PolicyError::BadSet(s.clone())),
        })
        .collect()
}

/// The demo's overrides as values, merged over the values file (here and by helm).
fn override_values(o: &Overrides) -> serde_json::Value {
    let mut autoscaling = serde_json::json!({
        "maxReplicas": o.max_replicas,
        "lagThreshold": o.lag_threshold,
        "behavior": {"scaleDown": {"stabilizationWindowSeconds": o.scale_down_window_s}},
    });
    if let Some(t) = &o.trigger {
        autoscaling["trigger"] = serde_json::json!(t);
    }
    let mut v = serde_json::json!({"kafka": {"partitions": o.partitions}, "processor": {"autoscaling": autoscaling}});
    for (key, value) in &o.extra {
        // Typed as helm --set types them: numbers and booleans, else a string.
        let typed = serde_json::from_str::<serde_json::Value>(value)
            .ok()
            .filter(|t| t.is_number() || t.is_boolean())
            .unwrap_or_else(|| serde_json::json!(value));
        let nested = key.rsplit('.').fold(typed, |inner, k| serde_json::json!({ k: inner }));
        values::merge(&mut v, nested);
    }
    v
}

/// The policy the demo runs: the values files in helm's order (the chart's first, each
/// later one merged over it) and the flags over them (helm's order: `-f` files, then `--set`).
pub fn policy(files: &[&Path], o: &Overrides) -> Result<Policy, PolicyError> {
    let (base, overrides) = files.split_first().ok_or(PolicyError::NoValuesFile)?;
    let read = |file: &Path| -> Result<serde_json::Value, PolicyError> {
        let name = file.display().to_string();
        let text = std::fs::read_to_string(file).map_err(|source| PolicyError::Read { path: name.clone(), source })?;
        Ok(values::parse_yaml(&name, &text)?)
    };
    let mut v = read(base)?;
    for file in overrides {
        values::merge(&mut v, read(file)?);
    }
    values::merge(&mut v, override_values(o));
    Ok(values::policy(&base.display().to_string(), &v)?)
}

/// The same overrides as `helm --set` pairs (`processor.autoscaling.maxReplicas`, …).
pub fn helm_sets(o: &Overrides) -> Vec<(String, String)> {
    fn flatten(prefix: &str, v: &serde_json::Value, out: &mut Vec<(String, String)>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, child) in m {
                    let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                    flatten(&key, child, out);
                }
            }
            serde_json::Value::String(s) => out.push((prefix.to_string(), s.clone())),
            other => out.push((prefix.to_string(), other.to_string())),
        }
    }
    let mut out = Vec::new();
    flatten("", &override_values(o), &mut out);
    out
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

/// The trigger metadata the chart renders for a policy of Sluice's scaler.
pub fn trigger_metadata(policy: &Policy, group: &str) -> HashMap<String, String> {
    let mut m: HashMap<String, String> = HashMap::new();
    let mut set = |k: &str, v: String| {
        m.insert(k.to_string(), v);
    };
    set("group", group.to_string());
    match &policy.trigger {
        PolicyTrigger::Sluice(Trigger::OffsetLag { lag_threshold }) => {
            set("trigger", "offsetLag".into());
            set("lagThreshold", lag_threshold.to_string());
        }
        PolicyTrigger::Sluice(Trigger::TimeLag { target_seconds }) => {
            set("trigger", "timeLag".into());
            set("targetSeconds", target_seconds.to_string());
        }
        PolicyTrigger::Sluice(Trigger::DrainTime { target_seconds }) => {
            set("trigger", "drainTime".into());
            set("targetSeconds", target_seconds.to_string());
        }
        PolicyTrigger::Kafka(_) => {}
    }
    set("perPodRate", policy.per_pod_rate.to_string());
    set("minReplicas", policy.min_replicas.to_string());
    set("maxReplicas", policy.max_replicas.to_string());
    set("hpaTolerance", policy.hpa_tolerance().to_string());
    set("minCooldownSeconds", policy.min_cooldown_s.to_string());
    if policy.lead_s > 0.0 {
        set("leadSeconds", policy.lead_s.to_string());
    }
    set("activationLagThreshold", policy.activation_lag_threshold.to_string());
    set("offsetResetPolicy", if policy.offset_reset_earliest { "earliest" } else { "latest" }.into());
    m
}

/// KEDA's side of the external trigger: a client of sluice-lag's scaler.
#[derive(Debug)]
struct External {
    client: ExternalScalerClient<tonic::transport::Channel>,
    reference: ScaledObjectRef,
    metric: String,
}

/// The engine on the demo's clock.
#[derive(Debug)]
pub struct Autoscaler {
    pub policy: Policy,
    engine: Engine,
    begin: Instant,
    external: Option<External>,
}

impl Autoscaler {
    pub fn new(policy: Policy, sync_ms: i64) -> Self {
        let engine = Engine::new(&policy, sync_ms);
        Self { policy, engine, begin: Instant::now(), external: None }
    }

    /// For Sluice's triggers: connects to sluice-lag's scaler as KEDA would and asks it the
    /// metric's name; for `kafka`, nothing.
    pub async fn connect(&mut self, scaler: std::net::SocketAddr, group: &str) -> anyhow::Result<()> {
        if matches!(self.policy.trigger, PolicyTrigger::Kafka(_)) {
            return Ok(());
        }
        let mut client = ExternalScalerClient::connect(format!("http://{scaler}")).await?;
        let reference = ScaledObjectRef {
            name: "processor".into(),
            namespace: "sluice-demo".into(),
            scaler_metadata: trigger_metadata(&self.policy, group),
        };
        let spec = client.get_metric_spec(reference.clone()).await?.into_inner();
        let metric = spec.metric_specs.first().map(|s| s.metric_name.clone()).unwrap_or_default();
        self.external = Some(External { client, reference, metric });
        Ok(())
    }

    /// What the trigger reads: the group's offsets (KEDA's `kafka`) or sluice-lag's picture.
    pub fn describe(&self) -> String {
        match &self.policy.trigger {
            PolicyTrigger::Kafka(t) => format!("KEDA's kafka trigger, lagThreshold {}", t.lag_threshold),
            PolicyTrigger::Sluice(t) => format!("Sluice's scaler (sluice-lag), {t:?}"),
        }
    }

    /// One sync at `now` with `current` processors.
    pub async fn decide(&mut self, now: Instant, current: u32, offsets: &[PartitionOffsets]) -> Decision {
        let at_ms = now.duration_since(self.begin).as_millis() as i64;
        let (metric, served) = match &mut self.external {
            None => (self.engine.metric(offsets, None), String::new()),
            Some(e) => {
                let request =
                    GetMetricsRequest { scaled_object_ref: Some(e.reference.clone()), metric_name: e.metric.clone() };
                match e.client.get_metrics(request).await {
                    Ok(r) => {
                        let v = r.into_inner().metric_values.first().map_or(0.0, |m| m.metric_value_float);
                        (Some((v * 1000.0).round() as i64), format!("; sluice-lag's scaler serves {v}"))
                    }
                    Err(status) => (None, format!("; sluice-lag's scaler: {}", status.message())),
                }
            }
        };
        let r = self.engine.sync(at_ms, current as i32, metric);
        let limit = match r.limit {
            Limit::Desired => "as asked",
            Limit::Tolerance => "within the tolerance",
            Limit::Stabilized => "held by the stabilization window",
            Limit::Rate => "rate-limited by the behavior's policies",
            Limit::Bounds => "at min/max",
            Limit::NoMetric => "no metric: held",
        };
        Decision {
            replicas: r.desired.max(0) as u32,
            metric,
            recommended: r.recommended,
            why: format!("{limit}{served}"),
        }
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
            extra: Vec::new(),
        }
    }

    fn offsets(lag_each: i64) -> Vec<PartitionOffsets> {
        (0..12).map(|_| PartitionOffsets { committed: Some(0), earliest: Some(0), latest: lag_each }).collect()
    }

    #[tokio::test]
    async fn the_demo_runs_the_chart_s_policy_with_its_overrides() {
        let p = policy(&[&chart()], &overrides(Some("kafka"))).expect("the chart's values");
        assert_eq!((p.max_replicas, p.partitions), (6, 12));
        let b = p.behavior.clone().expect("the chart's behavior");
        assert_eq!(b.scale_down.and_then(|d| d.stabilization_window_seconds), Some(30));
        let mut a = Autoscaler::new(p, 5_000);
        let t = Instant::now();
        // 12,000 records behind: 12 wanted; the policies the chart derives never cut a step
        // short (a former +4 would have applied 5), so the HPA applies the bound, 6.
        let d = a.decide(t, 1, &offsets(1_000)).await;
        assert_eq!((d.recommended, d.replicas, d.metric), (12, 6, Some(12_000_000)));
        assert!(!d.why.contains("rate-limited"), "{}", d.why);
    }

    #[test]
    fn helm_gets_the_same_overrides_as_the_stand_in() {
        let sets = helm_sets(&overrides(Some("offsetLag")));
        for (k, v) in [
            ("kafka.partitions", "12"),
            ("processor.autoscaling.maxReplicas", "6"),
            ("processor.autoscaling.lagThreshold", "1000"),
            ("processor.autoscaling.behavior.scaleDown.stabilizationWindowSeconds", "30"),
            ("processor.autoscaling.trigger", "offsetLag"),
        ] {
            assert!(sets.contains(&(k.to_string(), v.to_string())), "{k}={v} missing from {sets:?}");
        }
        assert_eq!(sets.len(), 5, "{sets:?}");
        let mut o = overrides(Some("timeLag"));
        o.extra = parse_sets(&["processor.autoscaling.timeLag.targetSeconds=7".into()]).expect("KEY=VALUE");
        assert!(helm_sets(&o).contains(&("processor.autoscaling.timeLag.targetSeconds".into(), "7".into())));
        let p = policy(&[&chart()], &o).expect("values");
        assert!(
            matches!(p.trigger, PolicyTrigger::Sluice(Trigger::TimeLag { target_seconds }) if target_seconds == 7.0)
        );
        assert!(parse_sets(&["=3".into()]).is_err() && parse_sets(&["x".into()]).is_err());
    }

    #[test]
    fn the_chart_s_default_is_sluice_s_time_lag_trigger() {
        let p = policy(&[&chart()], &overrides(None)).expect("the chart's values");
        assert!(matches!(p.trigger, PolicyTrigger::Sluice(Trigger::TimeLag { .. })), "{:?}", p.trigger);
    }

    #[test]
    fn a_trigger_of_sluice_s_scaler_gets_the_metadata_the_chart_renders_and_sluice_lag_reads() {
        let p = policy(&[&chart()], &overrides(Some("timeLag"))).expect("values");
        let meta = trigger_metadata(&p, "g");
        let spec = sluice_lag::scaler::TriggerSpec::from_metadata(&meta).expect("sluice-lag reads it");
        assert_eq!(spec.settings.trigger, Trigger::TimeLag { target_seconds: 30.0 });
        assert_eq!((spec.settings.hpa_tolerance, spec.max_replicas, spec.count_uncommitted), (0.1, Some(6), true));
        assert!(policy(&[&chart()], &overrides(Some("cpu"))).is_err());
    }
}
