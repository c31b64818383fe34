//! The scaler KEDA calls (its external scaler protocol, [`grpc`]): one
//! [`sluice_scaling::rules::Scaler`] per ScaledObject, fed by the poller's picture.
//!
//! A ScaledObject's trigger metadata names the group and the trigger:
//!
//! | key | meaning | default |
//! |---|---|---|
//! | `group` | the consumer group (sluice-lag must watch it) | required |
//! | `trigger` | `offsetLag`, `timeLag` or `drainTime` | `offsetLag` |
//! | `lagThreshold` | `offsetLag`: records of lag per pod | 1000 |
//! | `targetSeconds` | `timeLag`: the oldest unconsumed record's age; `drainTime`: the backlog's drain time | required for those |
//! | `perPodRate` | records/s one pod consumes until the group's rate is learned | 1000 |
//! | `minReplicas`, `maxReplicas` | the ScaledObject's bounds | 1, the partition count |
//! | `hpaTolerance` | the largest scale-up tolerance the HPA may apply (the chart: the larger of the behavior's and 0.1) | 0.1 |
//! | `minCooldownSeconds` | the shortest hold after a step | 15 |
//! | `activationLagThreshold` | active (for scale from zero) above this lag | 0 |
//! | `offsetResetPolicy` | `earliest`: a partition without a committed offset counts its whole log; `latest`: none of it | `earliest` |
//! | `leadSeconds` | `timeLag`, `drainTime`: size this far ahead along the produce rate's rise (the pods' start-up), at most one step ahead; 0 is off | 0 |
//!
//! KEDA's own keys (`scalerAddress`, `enableTLS`, `unsafeSsl`) are ignored; any other key
//! is refused with an error that names it.
//!
//! A decision is made once per poll (a second call within a poll is served the same one),
//! kept (the newest [`KEPT_DECISIONS`] per ScaledObject, at `/scaler/decisions`) and exported
//! (`sluice_lag_scaler_*`).

pub mod grpc;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use sluice_scaling::rules::{Decision, GroupInput, PartitionInput, Scaler, Settings, Trigger};

use crate::model::cause::Cause;
use crate::model::lag::Lag;
use crate::model::status::Status;
use crate::picture::{GroupPicture, Picture};

/// Decisions kept per ScaledObject.
pub const KEPT_DECISIONS: usize = 20;

/// One ScaledObject's trigger, from its metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct TriggerSpec {
    pub group: String,
    pub settings: Settings,
    /// `None`: the group's partition count.
    pub max_replicas: Option<u32>,
    pub activation_lag: i64,
    pub count_uncommitted: bool,
}

/// A ScaledObject's trigger metadata that sluice-lag's scaler refuses, naming the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("trigger metadata {key}: {problem}")]
pub struct BadMetadata {
    pub key: String,
    pub problem: String,
}

fn bad(key: &str, problem: impl Into<String>) -> BadMetadata {
    BadMetadata { key: key.to_string(), problem: problem.into() }
}

fn number<T: std::str::FromStr>(meta: &HashMap<String, String>, key: &str) -> Result<Option<T>, BadMetadata> {
    meta.get(key).map(|v| v.trim().parse::<T>().map_err(|_| bad(key, format!("{v:?} is not a number")))).transpose()
}

impl TriggerSpec {
    /// Reads a trigger's metadata; an unknown key or a bad value is an error naming it.
    pub fn from_metadata(meta: &HashMap<String, String>) -> Result<Self, BadMetadata> {
        const KNOWN: [&str; 15] = [
            "group",
            "trigger",
            "lagThreshold",
            "targetSeconds",
            "perPodRate",
            "minReplicas",
            "maxReplicas",
            "hpaTolerance",
            "minCooldownSeconds",
            "activationLagThreshold",
            "offsetResetPolicy",
            "leadSeconds",
            "scalerAddress",
            "enableTLS",
            "unsafeSsl",
        ];
        if let Some(unknown) = meta.keys().filter(|k| !KNOWN.contains(&k.as_str())).min() {
            return Err(bad(unknown, "not a setting of sluice-lag's scaler"));
        }
        let group = meta.get("group").filter(|g| !g.is_empty()).ok_or_else(|| bad("group", "required"))?.clone();
        let target = || -> Result<f64, BadMetadata> {
            let t: f64 =
                number(meta, "targetSeconds")?.ok_or_else(|| bad("targetSeconds", "required for this trigger"))?;
            if t > 0.0 { Ok(t) } else { Err(bad("targetSeconds", format!("{t} must be above 0"))) }
        };
        let trigger = match meta.get("trigger").map_or("offsetLag", String::as_str) {
            "offsetLag" => Trigger::OffsetLag { lag_threshold: number(meta, "lagThreshold")?.unwrap_or(1000).max(1) },
            "timeLag" => Trigger::TimeLag { target_seconds: target()? },
            "drainTime" => Trigger::DrainTime { target_seconds: target()? },
            other => return Err(bad("trigger", format!("{other:?} is not offsetLag, timeLag or drainTime"))),
        };
        let min_replicas = number(meta, "minReplicas")?.unwrap_or(1);
        let max_replicas: Option<u32> = number(meta, "maxReplicas")?;
        if max_replicas.is_some_and(|m| m < min_replicas.max(1)) {
            return Err(bad("maxReplicas", "below minReplicas"));
        }
        let per_pod_rate = number(meta, "perPodRate")?.unwrap_or(1000.0);
        if per_pod_rate <= 0.0 {
            return Err(bad("perPodRate", "must be above 0"));
        }
        let count_uncommitted = match meta.get("offsetResetPolicy").map_or("earliest", String::as_str) {
            "earliest" => true,
            "latest" => false,
            other => return Err(bad("offsetResetPolicy", format!("{other:?} is not earliest or latest"))),
        };
        Ok(Self {
            group,
            settings: Settings {
                trigger,
                min_replicas,
                max_replicas: max_replicas.unwrap_or(u32::MAX),
                per_pod_rate,
                rate_bounds_factor: 4.0,
                min_cooldown_ms: (number::<f64>(meta, "minCooldownSeconds")?.unwrap_or(15.0) * 1000.0) as i64,
                hpa_tolerance: number(meta, "hpaTolerance")?.unwrap_or(0.1),
                rate_window_ms: 60_000,
                lead_ms: (number::<f64>(meta, "leadSeconds")?.unwrap_or(0.0).max(0.0) * 1000.0) as i64,
            },
            max_replicas,
            activation_lag: number(meta, "activationLagThreshold")?.unwrap_or(0),
            count_uncommitted,
        })
    }

    /// The metric's name (KEDA prefixes the trigger's index).
    pub fn metric_name(&self) -> String {
        let trigger = match self.settings.trigger {
            Trigger::OffsetLag { .. } => "offset-lag",
            Trigger::TimeLag { .. } => "time-lag",
            Trigger::DrainTime { .. } => "drain-time",
        };
        let group: String =
            self.group.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect();
        format!("sluice-{group}-{trigger}")
    }
}

/// Why the scaler has no reading of a group: its decision is unknown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoReading {
    #[error("the newest complete poll is {age_ms} ms old")]
    Stale { age_ms: i64 },
    #[error("group {group:?} is not watched by this sluice-lag")]
    NotWatched { group: String },
    #[error("group {group}: {error}")]
    Unreadable { group: String, error: String },
}

/// The group's reading as the scaler's input; `Err` when it cannot be read.
pub fn group_input(g: &GroupPicture, at_ms: i64, count_uncommitted: bool) -> Result<GroupInput, NoReading> {
    if let Some(e) = &g.error {
        return Err(NoReading::Unreadable { group: g.group.clone(), error: e.clone() });
    }
    let rebalancing = g.state.as_deref().is_some_and(crate::model::group::rebalancing);
    let partitions = g
        .partitions
        .iter()
        .map(|p| {
            // Where the group never committed: nothing to consume if the log is empty or the
            // group would start at its end (`latest`); else the whole log, whose age sluice-lag
            // does not read (unknown for a time-lag trigger, never zero).
            let (lag, time_lag_ms) = match (p.lag, p.log) {
                (Some(Lag::Behind { records, .. }), _) => (Some(records), p.time_lag_ms),
                (Some(Lag::Uncommitted), Some(log)) if log.end <= log.start || !count_uncommitted => (Some(0), Some(0)),
                (Some(Lag::Uncommitted), Some(log)) => (Some(log.end - log.start), p.time_lag_ms),
                _ => (None, None),
            };
            PartitionInput { lag, time_lag_ms, produce_rate: p.produce_rate, stalled: p.status.status == Status::Stall }
        })
        .collect();
    let rates: Vec<f64> = g.partitions.iter().filter_map(|p| p.consume_rate).collect();
    Ok(GroupInput {
        at_ms,
        consume_rate: (!rates.is_empty()).then(|| rates.iter().sum()),
        members: g.members.map(|m| m as u32),
        rebalancing,
        last_rebalance_pause_ms: g.last_rebalance_pause_ms,
        stable_for_ms: g.stable_since_ms.map(|since| at_ms - since),
        blocked: (g.cause.cause == Cause::Blocked).then(|| g.cause.reason.clone()),
        partitions,
    })
}

/// One ScaledObject's scaler and its recent decisions.
#[derive(Debug)]
struct Entry {
    spec: TriggerSpec,
    scaler: Scaler,
    decided_at: Option<i64>,
    decisions: VecDeque<Decision>,
}

/// What `/scaler/decisions` serves per ScaledObject.
#[derive(Debug, Clone, Serialize)]
pub struct Decisions {
    pub scaled_object: String,
    pub group: String,
    pub metric: String,
    pub decisions: Vec<Decision>,
}

/// Every ScaledObject's scaler.
#[derive(Debug, Default, Clone)]
pub struct Scalers {
    entries: Arc<Mutex<BTreeMap<String, Entry>>>,
    /// sluice-lag's rate window: a per-pod rate is learned only over a settled one.
    rate_window_ms: i64,
}

impl Scalers {
    pub fn new(rate_window_ms: i64) -> Self {
        Self { entries: Arc::default(), rate_window_ms }
    }

    /// The decision for `object` (`namespace/name`) with `spec`, from `picture`: made once per
    /// poll; a picture older than `stale_ms` is unknown input.
    pub fn decide(&self, object: &str, spec: &TriggerSpec, picture: &Picture, now_ms: i64, stale_ms: i64) -> Decision {
        self.decide_fresh(object, spec, picture, now_ms, stale_ms).0
    }

    /// [`Scalers::decide`], and whether the decision is new (not this poll's, served again).
    pub fn decide_fresh(
        &self,
        object: &str,
        spec: &TriggerSpec,
        picture: &Picture,
        now_ms: i64,
        stale_ms: i64,
    ) -> (Decision, bool) {
        let mut entries = self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = entries.entry(object.to_string()).or_insert_with(|| Entry {
            spec: spec.clone(),
            scaler: Scaler::new(spec.settings.clone()),
            decided_at: None,
            decisions: VecDeque::new(),
        });
        if entry.spec != *spec {
            // The ScaledObject changed: start over with its new settings.
            *entry = Entry {
                spec: spec.clone(),
                scaler: Scaler::new(spec.settings.clone()),
                decided_at: None,
                decisions: VecDeque::new(),
            };
        }
        if entry.decided_at == Some(picture.at_ms)
            && let Some(last) = entry.decisions.back()
        {
            return (last.clone(), false);
        }
        let input = if now_ms - picture.at_ms > stale_ms {
            Err(NoReading::Stale { age_ms: now_ms - picture.at_ms })
        } else {
            match picture.group(&spec.group) {
                Some(g) => group_input(g, picture.at_ms, spec.count_uncommitted),
                None => Err(NoReading::NotWatched { group: spec.group.clone() }),
            }
        };
        let decision = match input {
            Ok(mut input) => {
                let partitions = input.partitions.len() as u32;
                entry.scaler.settings.max_replicas = spec.max_replicas.unwrap_or(partitions).max(1);
                entry.scaler.settings.rate_window_ms = self.rate_window_ms;
                input.at_ms = picture.at_ms;
                entry.scaler.decide(&input)
            }
            Err(reason) => Decision::unknown(picture.at_ms, reason.to_string()),
        };
        entry.decided_at = Some(picture.at_ms);
        if entry.decisions.len() == KEPT_DECISIONS {
            entry.decisions.pop_front();
        }
        entry.decisions.push_back(decision.clone());
        (decision, true)
    }

    /// Every ScaledObject's recent decisions, newest last.
    pub fn snapshot(&self) -> Vec<Decisions> {
        let entries = self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        entries
            .iter()
            .map(|(object, e)| Decisions {
                scaled_object: object.clone(),
                group: e.spec.group.clone(),
                metric: e.spec.metric_name(),
                decisions: e.decisions.iter().cloned().collect(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
