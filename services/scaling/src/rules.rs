//! Sluice's scaler: the replicas a consumer group needs, from what sluice-lag reads of it,
//! served to KEDA as an external metric (`AverageValue` 1 per replica, so the HPA's
//! `ceil(metric ÷ target)` is the count decided here and its policies still rate-limit it).
//!
//! Three triggers:
//! - `offsetLag`: KEDA's Kafka arithmetic, `ceil(lag ÷ lagThreshold)`;
//! - `timeLag`: keep the oldest unconsumed record younger than a target: enough pods to
//!   consume what arrives and to drain the backlog within half the target;
//! - `drainTime`: `ceil((produce rate + backlog ÷ target drain time) ÷ per-pod rate)`.
//!
//! and for each the same rules, in order:
//! 1. input that cannot be read is unknown, never zero: no decision (KEDA's fallback);
//! 2. while the group rebalances, and for a cooldown after each step as long as the
//!    rebalance pause last measured (at least `min_cooldown`), the last decision holds;
//! 3. lag that more pods cannot fix — partitions in STALL (a consumer that owns them and
//!    does not move) — is left out of the metric and reported;
//! 4. only counts that lower the most partitions any pod holds ([`crate::partitions`]),
//!    within `[min, max]` and at most the partition count;
//! 5. a step up small enough to sit inside the HPA's tolerance (10 % by default; 11 → 12)
//!    is served as the next useful count, or past `max`, so the HPA takes it on every
//!    Kubernetes version.

use serde::{Deserialize, Serialize};

use crate::partitions;

/// The trigger and its objective.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "trigger", rename_all = "camelCase")]
pub enum Trigger {
    /// Records of lag per pod.
    #[serde(rename_all = "camelCase")]
    OffsetLag { lag_threshold: i64 },
    /// The oldest unconsumed record's age, seconds.
    #[serde(rename_all = "camelCase")]
    TimeLag { target_seconds: f64 },
    /// How long the backlog may take to drain, seconds.
    #[serde(rename_all = "camelCase")]
    DrainTime { target_seconds: f64 },
}

/// The scaler's settings for one group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Settings {
    pub trigger: Trigger,
    pub min_replicas: u32,
    pub max_replicas: u32,
    /// Records per second one pod consumes, until the group's own rate is learned.
    pub per_pod_rate: f64,
    /// The learned rate stays within `[per_pod_rate ÷ 4, per_pod_rate × 4]`.
    pub rate_bounds_factor: f64,
    /// The shortest hold after a step, ms (the measured rebalance pause when longer).
    pub min_cooldown_ms: i64,
    /// The tolerance the HPA applies (`behavior.scaleUp.tolerance`, 0.1 when unset).
    pub hpa_tolerance: f64,
    /// The consume rate is an average over this window: a sample is taken only when the
    /// membership has been stable at least this long.
    pub rate_window_ms: i64,
}

/// One partition, as sluice-lag reads it.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct PartitionInput {
    /// Records unconsumed; `None`: unknown.
    pub lag: Option<i64>,
    pub time_lag_ms: Option<i64>,
    pub produce_rate: Option<f64>,
    /// A consumer owns it and its committed offset does not move while there is lag.
    pub stalled: bool,
}

/// One group at one poll.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct GroupInput {
    pub at_ms: i64,
    /// The group's consume rate, records/s (all partitions).
    pub consume_rate: Option<f64>,
    pub members: Option<u32>,
    pub rebalancing: bool,
    /// The newest measured rebalance pause, ms.
    pub last_rebalance_pause_ms: Option<i64>,
    /// How long the membership has been unchanged, ms (`None`: unknown).
    #[serde(default)]
    pub stable_for_ms: Option<i64>,
    pub partitions: Vec<PartitionInput>,
}

/// Which rule decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    OffsetLag,
    TimeLagKeepUp,
    TimeLagDrain,
    DrainTime,
    /// Held: the group is rebalancing.
    Rebalancing,
    /// Held: the cooldown after a step.
    Cooldown,
    /// No decision: an input could not be read.
    Unknown,
}

/// One decision, with its inputs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    pub at_ms: i64,
    /// Replicas wanted; `None` when unknown (KEDA then counts a failure).
    pub replicas: Option<u32>,
    /// The metric served for them (replicas, or more to clear the HPA's tolerance).
    pub metric: Option<f64>,
    pub rule: Rule,
    /// What the trigger's formula asked for, before the partition rule and the bounds.
    pub raw: Option<f64>,
    pub lag: Option<i64>,
    pub time_lag_ms: Option<i64>,
    pub produce_rate: Option<f64>,
    pub per_pod_rate: f64,
    /// Partitions in STALL and the lag they hold: left out, reported.
    pub stalled_partitions: u32,
    pub stalled_lag: i64,
    pub members: Option<u32>,
    pub reason: String,
}

impl Decision {
    /// No decision: `reason` says which input could not be read.
    pub fn unknown(at_ms: i64, reason: String) -> Self {
        Self {
            at_ms,
            replicas: None,
            metric: None,
            rule: Rule::Unknown,
            raw: None,
            lag: None,
            time_lag_ms: None,
            produce_rate: None,
            per_pod_rate: 0.0,
            stalled_partitions: 0,
            stalled_lag: 0,
            members: None,
            reason,
        }
    }
}

/// A capacity sample needs a backlog of at least this many seconds of consumption.
pub const BEHIND_S: f64 = 5.0;

/// The scaler's memory for one group.
#[derive(Debug, Clone)]
pub struct Scaler {
    pub settings: Settings,
    learned_rate: Option<f64>,
    last: Option<u32>,
    /// The last step: when it was decided and to how many.
    step: Option<(i64, u32)>,
    /// The step's cooldown ends here (set when the group is stable at the new size).
    cooldown_until: Option<i64>,
}

struct Sums {
    lag: i64,
    /// `None` when a partition's is unknown.
    time_lag_ms: Option<i64>,
    produce_rate: Option<f64>,
    stalled: u32,
    stalled_lag: i64,
}

impl Scaler {
    pub fn new(settings: Settings) -> Self {
        Self { settings, learned_rate: None, last: None, step: None, cooldown_until: None }
    }

    /// The per-pod rate in use: learned, within its bounds, or the setting.
    pub fn per_pod_rate(&self) -> f64 {
        self.learned_rate.unwrap_or(self.settings.per_pod_rate)
    }

    /// Decides from one poll of the group.
    pub fn decide(&mut self, input: &GroupInput) -> Decision {
        let mut d = Decision::unknown(input.at_ms, String::new());
        d.per_pod_rate = self.per_pod_rate();
        d.members = input.members;
        let sums = match sums(input) {
            Ok(s) => s,
            Err(why) => {
                d.reason = why.to_string();
                return d;
            }
        };
        (d.lag, d.time_lag_ms, d.produce_rate) = (Some(sums.lag), sums.time_lag_ms, sums.produce_rate);
        (d.stalled_partitions, d.stalled_lag) = (sums.stalled, sums.stalled_lag);
        if let Some(missing) = self.missing(&sums) {
            d.reason = format!("{missing} is unknown");
            return d;
        }
        self.learn(input, &sums);
        d.per_pod_rate = self.per_pod_rate();
        if let Some(held) = self.hold(input, &mut d) {
            d.replicas = Some(held);
            d.metric = Some(self.served(held, input));
            return d;
        }
        let (raw, rule) = self.formula(&sums);
        let replicas = self.bounded(raw, input.partitions.len() as u32);
        d.raw = Some(raw);
        d.rule = rule;
        d.replicas = Some(replicas);
        d.metric = Some(self.served(replicas, input));
        d.reason = format!(
            "{rule:?} asks {raw:.2}, served as {replicas} (useful counts for {} partitions)",
            input.partitions.len()
        );
        if self.last != Some(replicas) {
            self.step = Some((input.at_ms, replicas));
            self.cooldown_until = None;
        }
        self.last = Some(replicas);
        d
    }

    /// The input the trigger needs that could not be read.
    fn missing(&self, s: &Sums) -> Option<&'static str> {
        match self.settings.trigger {
            Trigger::OffsetLag { .. } => None,
            Trigger::DrainTime { .. } => s.produce_rate.is_none().then_some("the produce rate"),
            Trigger::TimeLag { .. } if s.time_lag_ms.is_none() => Some("the time lag"),
            Trigger::TimeLag { .. } => s.produce_rate.is_none().then_some("the produce rate"),
        }
    }

    /// The trigger's formula: fractional replicas, before rounding.
    fn formula(&self, s: &Sums) -> (f64, Rule) {
        let rate = self.per_pod_rate().max(f64::MIN_POSITIVE);
        let produce = s.produce_rate.unwrap_or(0.0);
        match self.settings.trigger {
            Trigger::OffsetLag { lag_threshold } => (s.lag as f64 / lag_threshold.max(1) as f64, Rule::OffsetLag),
            Trigger::DrainTime { target_seconds } => {
                ((produce + s.lag as f64 / target_seconds.max(1e-3)) / rate, Rule::DrainTime)
            }
            Trigger::TimeLag { target_seconds } => {
                let keep_up = produce / rate;
                let drain = (produce + s.lag as f64 / (target_seconds / 2.0).max(1e-3)) / rate;
                let behind = s.time_lag_ms.unwrap_or(0) as f64 > target_seconds * 500.0;
                if behind || drain > keep_up.ceil() {
                    (drain, Rule::TimeLagDrain)
                } else {
                    (keep_up, Rule::TimeLagKeepUp)
                }
            }
        }
    }

    /// Rounded up, snapped to a useful count, within the bounds and the partitions.
    fn bounded(&self, raw: f64, partitions: u32) -> u32 {
        let s = &self.settings;
        let wanted = if raw.is_finite() { raw.ceil().clamp(0.0, f64::from(u32::MAX)) as u32 } else { s.max_replicas };
        let ceiling = s.max_replicas.min(partitions.max(1));
        let lo = s.min_replicas.max(1);
        let snapped = partitions::snap(partitions, wanted.clamp(lo, ceiling.max(lo)));
        snapped.clamp(lo, ceiling.max(lo))
    }

    /// The metric for `replicas`. A step up from the members small enough to sit inside the
    /// HPA's tolerance would be ignored, so it is served as more: past `max` when `replicas` is
    /// `max` (the HPA clamps it back to exactly `max`), else the next useful count within
    /// `max`. When neither lands exactly (`max` above the partitions), `replicas` as is: the
    /// HPA holds until its tolerance lets the step through.
    fn served(&self, replicas: u32, input: &GroupInput) -> f64 {
        let Some(current) = input.members.filter(|&m| m > 0) else { return f64::from(replicas) };
        let tolerance = self.settings.hpa_tolerance;
        if replicas <= current || f64::from(replicas) / f64::from(current) > 1.0 + tolerance {
            return f64::from(replicas);
        }
        let max = self.settings.max_replicas;
        if replicas == max {
            return f64::from(replicas).max((f64::from(current) * (1.0 + tolerance)).floor() + 1.0);
        }
        let partitions = input.partitions.len() as u32;
        partitions::next_above(partitions, replicas).filter(|&n| n <= max).map_or(f64::from(replicas), f64::from)
    }

    /// Holds the last decision while the group rebalances and for the cooldown after a step.
    fn hold(&mut self, input: &GroupInput, d: &mut Decision) -> Option<u32> {
        let last = self.last?;
        if input.rebalancing {
            d.rule = Rule::Rebalancing;
            d.reason = "the group is rebalancing: the last decision holds".into();
            return Some(last);
        }
        let (stepped_at, to) = self.step?;
        if self.cooldown_until.is_none() && input.members == Some(to) {
            let pause = input.last_rebalance_pause_ms.unwrap_or(0).max(self.settings.min_cooldown_ms);
            self.cooldown_until = Some(input.at_ms.max(stepped_at) + pause);
        }
        let until = self.cooldown_until.unwrap_or(stepped_at + self.settings.min_cooldown_ms);
        if input.at_ms < until {
            d.rule = Rule::Cooldown;
            d.reason = format!("cooling down after the step to {to} until {until} ms");
            return Some(last);
        }
        None
    }

    /// Learns the per-pod rate. A sample of capacity needs the group to be behind, not just
    /// committing (a committed offset trails what was consumed, so a little lag is always
    /// there): the membership unchanged for a whole rate window (the consume rate averages
    /// over it), every consuming member with lagging partitions, and a backlog of at least
    /// [`BEHIND_S`] seconds of what the group consumes. Such samples are smoothed. Other polls
    /// only raise the rate to what each member consumed (a floor: capacity is at least that).
    /// Always within `[per_pod_rate ÷ f, per_pod_rate × f]`.
    fn learn(&mut self, input: &GroupInput, s: &Sums) {
        let (Some(rate), Some(members)) = (input.consume_rate, input.members) else { return };
        let settled = input.stable_for_ms.is_some_and(|ms| ms >= self.settings.rate_window_ms);
        if members == 0 || input.rebalancing || !settled || rate <= 0.0 || s.stalled > 0 {
            return;
        }
        // Members past the partition count hold nothing and consume nothing.
        let consuming = members.min(input.partitions.len() as u32).max(1);
        let observed = rate / f64::from(consuming);
        let base = self.settings.per_pod_rate;
        let f = self.settings.rate_bounds_factor.max(1.0);
        let lagging = input.partitions.iter().filter(|p| p.lag.unwrap_or(0) > 0).count() as u32;
        let behind = lagging >= consuming && s.lag as f64 >= rate * BEHIND_S;
        if behind {
            let sample = observed.clamp(base / f, base * f);
            self.learned_rate = Some(match self.learned_rate {
                None => sample,
                Some(old) => old * 0.7 + sample * 0.3,
            });
        } else if observed > self.per_pod_rate() {
            self.learned_rate = Some(observed.min(base * f));
        }
    }

    /// The last decision (for the scaler's `IsActive` and its JSON).
    pub fn last(&self) -> Option<u32> {
        self.last
    }
}

/// Why a group's reading cannot be summed: the decision is unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
enum Unsummable {
    #[error("the group reads no partition yet")]
    NoPartition,
    #[error("partition {0}'s lag is unknown")]
    LagUnknown(usize),
}

/// Sums over the partitions that scaling can help; an unknown partition makes it all unknown.
fn sums(input: &GroupInput) -> Result<Sums, Unsummable> {
    if input.partitions.is_empty() {
        return Err(Unsummable::NoPartition);
    }
    let mut s = Sums { lag: 0, time_lag_ms: Some(0), produce_rate: Some(0.0), stalled: 0, stalled_lag: 0 };
    for (i, p) in input.partitions.iter().enumerate() {
        let lag = p.lag.ok_or(Unsummable::LagUnknown(i))?;
        if p.stalled {
            s.stalled += 1;
            s.stalled_lag += lag;
            continue;
        }
        s.lag += lag;
        s.time_lag_ms = s.time_lag_ms.zip(p.time_lag_ms).map(|(a, b)| a.max(b));
        s.produce_rate = s.produce_rate.zip(p.produce_rate).map(|(a, b)| a + b);
    }
    Ok(s)
}

#[cfg(test)]
mod tests;
