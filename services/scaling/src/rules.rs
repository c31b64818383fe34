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
//!    does not move) — is left out of the metric and reported; when every member stands
//!    still (`blocked`: a dependency they share is down), the count holds;
//! 4. `timeLag` and `drainTime`: no partition can use more than one pod (one member
//!    consumes it), so when one holds more than a pod can drain in time (a hot key), what
//!    the other partitions need plus one pod for it;
//! 5. only counts that lower the most partitions any pod holds ([`crate::partitions`]),
//!    within `[min, max]` and at most the partition count;
//! 6. a step up small enough to sit inside the HPA's tolerance (10 % by default; 11 → 12)
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
    /// Scaling ahead (`timeLag`, `drainTime`): size for the produce rate this far ahead along
    /// its rise, ms (the pods' start-up; the measured rebalance pause is added), at most one
    /// step above what the rates ask now. 0: off.
    #[serde(default)]
    pub lead_ms: i64,
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
    /// Why no count can help now (every member stands still with lag: a dependency they
    /// share is down), from sluice-lag's verdicts; `None`: more pods may help.
    #[serde(default)]
    pub blocked: Option<String>,
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
    /// Held: no count can help (every member stands still with lag).
    Blocked,
    /// `timeLag`/`drainTime` capped: one partition holds more than one pod can drain in time,
    /// and no count drains a partition faster than one pod.
    HotPartition,
    /// `timeLag`/`drainTime` one step ahead: the produce rate's rise, carried over the pods'
    /// start-up and a rebalance, needs more than the rates ask now.
    ScaleAhead,
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
    /// The share of the lag on the partition with the most (STALL left out).
    #[serde(default)]
    pub hot_share: Option<f64>,
    /// Seconds one pod would take to drain that partition on its own: the shortest drain any
    /// count can reach (`None`: it never drains, or there is no lag).
    #[serde(default)]
    pub best_drain_s: Option<f64>,
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
            hot_share: None,
            best_drain_s: None,
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
    /// The produce rate at recent polls, for its trend: (at ms, records/s).
    produced: std::collections::VecDeque<(i64, f64)>,
    last: Option<u32>,
    /// The last step: when it was decided and to how many.
    step: Option<(i64, u32)>,
    /// The step's cooldown ends here (set when the group is stable at the new size).
    cooldown_until: Option<i64>,
    /// The hold for a blocked group lasts until here: the newest blocked poll and a cooldown
    /// (consumers finishing in-flight work commit for a few seconds after an outage begins).
    blocked_until: Option<i64>,
}

struct Sums {
    lag: i64,
    /// `None` when a partition's is unknown.
    time_lag_ms: Option<i64>,
    produce_rate: Option<f64>,
    stalled: u32,
    stalled_lag: i64,
    /// The partition with the most lag (STALL left out): its lag and produce rate.
    hot: Option<(i64, f64)>,
    /// Every partition's lag and produce rate (STALL left out).
    each: Vec<(i64, f64)>,
}

impl Scaler {
    pub fn new(settings: Settings) -> Self {
        Self {
            settings,
            learned_rate: None,
            produced: std::collections::VecDeque::new(),
            last: None,
            step: None,
            cooldown_until: None,
            blocked_until: None,
        }
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
        if let Some((lag, produce)) = sums.hot {
            d.hot_share = Some(lag as f64 / sums.lag.max(1) as f64);
            let net = self.per_pod_rate() - produce;
            d.best_drain_s = (net > 0.0).then(|| lag as f64 / net);
        }
        if let Some(missing) = self.missing(&sums) {
            d.reason = format!("{missing} is unknown");
            return d;
        }
        self.learn(input, &sums);
        self.observe_produce(input.at_ms, sums.produce_rate);
        d.per_pod_rate = self.per_pod_rate();
        if let Some(why) = &input.blocked {
            self.blocked_until = Some(input.at_ms + self.settings.min_cooldown_ms);
            return self.blocked(input, why, d);
        }
        if let Some(until) = self.blocked_until.filter(|&until| input.at_ms < until) {
            return self.blocked(input, &format!("blocked until moments ago (held until {until} ms)"), d);
        }
        if let Some(held) = self.hold(input, &mut d) {
            d.replicas = Some(held);
            d.metric = Some(self.served(held, input));
            return d;
        }
        let partitions = input.partitions.len() as u32;
        let (mut raw, mut rule) = self.sized(&sums, partitions);
        let mut replicas = self.bounded(raw, partitions);
        let ahead = self.ahead(&sums, input, replicas);
        if let Some((step, ahead_raw, _)) = &ahead {
            (replicas, raw, rule) = (*step, *ahead_raw, Rule::ScaleAhead);
        }
        d.raw = Some(raw);
        d.rule = rule;
        d.replicas = Some(replicas);
        d.metric = Some(self.served(replicas, input));
        d.reason = format!("{rule:?} asks {raw:.2}, served as {replicas} (useful counts for {partitions} partitions)");
        if rule == Rule::HotPartition {
            let best =
                d.best_drain_s.map_or("never drains it".to_string(), |b| format!("drains it in {b:.0} s at best"));
            d.reason += &format!(
                "; one partition holds {:.0}% of the lag and one processor {best}, whatever the count: at most one each for the partitions that need more",
                d.hot_share.unwrap_or(0.0) * 100.0
            );
        }
        if let Some((_, _, why)) = ahead {
            d.reason += &format!("; {why}");
        }
        if self.last != Some(replicas) {
            self.step = Some((input.at_ms, replicas));
            self.cooldown_until = None;
        }
        self.last = Some(replicas);
        d
    }

    /// Holds while no count can help: never a step up into an outage (the new pods would stop
    /// too) nor down (the backlog waits for the same pods), and for a cooldown after the last
    /// blocked poll. At the last decision, or, with none yet (sluice-lag started during the
    /// outage), at the members the group has.
    fn blocked(&self, input: &GroupInput, why: &str, mut d: Decision) -> Decision {
        d.rule = Rule::Blocked;
        let held = self.last.or(input.members.filter(|&m| m > 0));
        d.replicas = held;
        d.metric = held.map(f64::from);
        d.reason = match held {
            Some(n) => format!("no count can help: {why}; holding at {n}"),
            None => format!("no count can help: {why}; no decision to hold"),
        };
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

    /// The trigger's formula and the per-partition bound: fractional replicas, before rounding.
    fn sized(&self, s: &Sums, partitions: u32) -> (f64, Rule) {
        let (raw, rule) = self.formula(s, s.produce_rate.unwrap_or(0.0));
        match self.per_partition_bound(s) {
            Some(cap) if self.bounded(cap, partitions) < self.bounded(raw, partitions) => (cap, Rule::HotPartition),
            _ => (raw, rule),
        }
    }

    /// The trigger's formula at a produce rate: fractional replicas, before rounding.
    fn formula(&self, s: &Sums, produce: f64) -> (f64, Rule) {
        let rate = self.per_pod_rate().max(f64::MIN_POSITIVE);
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

    /// `timeLag` and `drainTime`: what the partitions need when none can use more than one
    /// pod (a partition is consumed by one member): each partition's need, at most one pod,
    /// summed. Below the formula's ask when a hot partition holds more than a pod can drain
    /// in time: then the other partitions' need plus one. `None` for `offsetLag` (KEDA's
    /// arithmetic, kept as is).
    fn per_partition_bound(&self, s: &Sums) -> Option<f64> {
        let horizon = match self.settings.trigger {
            Trigger::TimeLag { target_seconds } => target_seconds / 2.0,
            Trigger::DrainTime { target_seconds } => target_seconds,
            Trigger::OffsetLag { .. } => return None,
        };
        let rate = self.per_pod_rate().max(f64::MIN_POSITIVE);
        let need = |&(lag, produce): &(i64, f64)| ((produce + lag as f64 / horizon.max(1e-3)) / rate).min(1.0);
        Some(s.each.iter().map(need).sum())
    }

    /// Keeps the produce rate of the polls within the rate window.
    fn observe_produce(&mut self, at_ms: i64, produce: Option<f64>) {
        let Some(rate) = produce else { return };
        self.produced.push_back((at_ms, rate));
        while self.produced.front().is_some_and(|(at, _)| *at < at_ms - self.settings.rate_window_ms) {
            self.produced.pop_front();
        }
    }

    /// How fast the produce rate rises, records/s per second: the newer half of the window's
    /// polls against the older half, over the time between their middles; 0 when it falls.
    pub fn produce_trend(&self) -> f64 {
        let polls: Vec<(i64, f64)> = self.produced.iter().copied().collect();
        if polls.len() < 4 {
            return 0.0;
        }
        let mean = |half: &[(i64, f64)]| {
            let n = half.len() as f64;
            (half.iter().map(|(t, _)| *t as f64).sum::<f64>() / n, half.iter().map(|(_, r)| r).sum::<f64>() / n)
        };
        let ((t0, r0), (t1, r1)) = (mean(&polls[..polls.len() / 2]), mean(&polls[polls.len() / 2..]));
        if t1 <= t0 { 0.0 } else { ((r1 - r0) / ((t1 - t0) / 1000.0)).max(0.0) }
    }

    /// Scaling ahead: the count the produce rate's rise will need once a new pod consumes (the
    /// lead and the last rebalance pause from now), at most one useful step above `replicas`;
    /// `None` when off, for `offsetLag`, or when it needs no more. With the served count, the
    /// formula's ask at the foreseen rate, and why.
    fn ahead(&self, s: &Sums, input: &GroupInput, replicas: u32) -> Option<(u32, f64, String)> {
        if self.settings.lead_ms <= 0 || matches!(self.settings.trigger, Trigger::OffsetLag { .. }) {
            return None;
        }
        let lead_s = (self.settings.lead_ms + input.last_rebalance_pause_ms.unwrap_or(0)) as f64 / 1000.0;
        let (trend, now) = (self.produce_trend(), s.produce_rate.unwrap_or(0.0));
        let foreseen = now + trend * lead_s;
        let partitions = input.partitions.len() as u32;
        let (raw, _) = self.formula(s, foreseen);
        let wanted = self.bounded(raw, partitions);
        let step =
            partitions::next_above(partitions, replicas).map_or(replicas, |n| self.bounded(f64::from(n), partitions));
        let served = wanted.min(step);
        (served > replicas).then(|| {
            let why = format!(
                "the produce rate rises {trend:.0}/s per s: {now:.0} → {foreseen:.0} records/s in {lead_s:.0} s (start-up and rebalance) needs {wanted}, so one step ahead"
            );
            (served, raw, why)
        })
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
    let mut s = Sums {
        lag: 0,
        time_lag_ms: Some(0),
        produce_rate: Some(0.0),
        stalled: 0,
        stalled_lag: 0,
        hot: None,
        each: Vec::new(),
    };
    for (i, p) in input.partitions.iter().enumerate() {
        let lag = p.lag.ok_or(Unsummable::LagUnknown(i))?;
        if p.stalled {
            s.stalled += 1;
            s.stalled_lag += lag;
            continue;
        }
        s.lag += lag;
        s.each.push((lag, p.produce_rate.unwrap_or(0.0)));
        if lag > 0 && s.hot.is_none_or(|(most, _)| lag > most) {
            s.hot = Some((lag, p.produce_rate.unwrap_or(0.0)));
        }
        s.time_lag_ms = s.time_lag_ms.zip(p.time_lag_ms).map(|(a, b)| a.max(b));
        s.produce_rate = s.produce_rate.zip(p.produce_rate).map(|(a, b)| a + b);
    }
    Ok(s)
}

#[cfg(test)]
mod tests;
