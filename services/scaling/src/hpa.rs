//! The HPA controller's decision for one `HorizontalPodAutoscaler` with one external metric,
//! as `k8s.io/kubernetes/pkg/controller/podautoscaler` (v1.36) makes it, sync by sync:
//!
//! 1. current replicas (the scale's `spec.replicas`) above max → max, below min → min, and no
//!    metric is read;
//! 2. otherwise the metric: `AverageValue` → ratio = usage ÷ (target × status replicas), and
//!    outside the tolerances `ceil(usage ÷ target)`; `Value` → ratio = usage ÷ target, and
//!    outside the tolerances `ceil(ratio × ready pods)`;
//! 3. without `behavior`: the highest recommendation of the downscale window, then at most
//!    `max(2 × current, 4)` and within `[min, max]`;
//!    with `behavior`: stabilized between the lowest recommendation of the scale-up window and
//!    the highest of the scale-down window, then limited by the policies (`selectPolicy`) from
//!    the replica count at the start of each policy's period, and within `[min, max]`;
//! 4. a rescale is recorded as a scale event (with `behavior`).
//!
//! Instants are milliseconds on the caller's clock; windows compare strictly, like the
//! controller's `After`/`Before`. `services/scaling/conformance/hpa` runs the controller itself on committed
//! traces and requires this module's timeline to be identical.

use crate::behavior::{Behavior, Rules, SelectPolicy, down_proposal, up_proposal};

/// The kube-controller-manager's HPA flags.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ControllerFlags {
    /// `--horizontal-pod-autoscaler-sync-period` (15 s).
    pub sync_period_ms: i64,
    /// `--horizontal-pod-autoscaler-downscale-stabilization` (300 s).
    pub downscale_window_ms: i64,
    /// `--horizontal-pod-autoscaler-tolerance` (0.1).
    pub tolerance: f64,
}

impl Default for ControllerFlags {
    fn default() -> Self {
        Self { sync_period_ms: 15_000, downscale_window_ms: 300_000, tolerance: 0.1 }
    }
}

/// The external metric's target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// `AverageValue` (KEDA's default for every trigger), in milli-units.
    AverageValue(i64),
    /// `Value`, in milli-units.
    Value(i64),
}

/// The HPA's spec (KEDA writes it from the ScaledObject).
#[derive(Debug, Clone, PartialEq)]
pub struct HpaSpec {
    pub min_replicas: i32,
    pub max_replicas: i32,
    pub target: Target,
    pub behavior: Option<Behavior>,
}

/// Why a sync ended where it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// The metric's recommendation, unchanged.
    Desired,
    /// Within the tolerance: the current count.
    Tolerance,
    /// The stabilization window held it.
    Stabilized,
    /// A scale-up or scale-down rate limit.
    Rate,
    /// `minReplicas` / `maxReplicas`.
    Bounds,
    /// The metric could not be read: nothing changes.
    NoMetric,
}

/// One sync's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct SyncResult {
    /// What the metric alone asked for (before stabilization and limits).
    pub recommended: i32,
    /// The replica count written (equal to current when not rescaled).
    pub desired: i32,
    pub limit: Limit,
}

#[derive(Debug, Clone, Copy)]
struct Stamped {
    value: i32,
    at: i64,
    outdated: bool,
}

/// One HPA's controller state: its recommendations and scale events.
#[derive(Debug, Clone)]
pub struct Hpa {
    pub spec: HpaSpec,
    pub flags: ControllerFlags,
    recommendations: Option<Vec<Stamped>>,
    up_events: Vec<Stamped>,
    down_events: Vec<Stamped>,
}

impl Hpa {
    pub fn new(spec: HpaSpec, flags: ControllerFlags) -> Self {
        Self { spec, flags, recommendations: None, up_events: Vec::new(), down_events: Vec::new() }
    }

    /// The tolerances (scale-down, scale-up) in force: `behavior`'s where set.
    pub fn tolerances(&self) -> (f64, f64) {
        let t = self.flags.tolerance;
        match &self.spec.behavior {
            None => (t, t),
            Some(b) => {
                (b.scale_down.tolerance.map_or(t, |x| x.as_f64()), b.scale_up.tolerance.map_or(t, |x| x.as_f64()))
            }
        }
    }

    /// One sync at `now`: `current` is the scale's `spec.replicas` (= ready pods and
    /// `status.replicas` here), `metric_milli` the external metric's value, `None` when it
    /// cannot be read.
    pub fn sync(&mut self, now: i64, current: i32, metric_milli: Option<i64>) -> SyncResult {
        if self.recommendations.is_none() {
            self.recommendations = Some(vec![Stamped { value: current, at: now, outdated: false }]);
        }
        let min = self.spec.min_replicas;
        if current == 0 {
            // Scaled to zero by hand (or by KEDA): the HPA is inactive.
            return SyncResult { recommended: 0, desired: 0, limit: Limit::Bounds };
        }
        if current > self.spec.max_replicas || current < min {
            let desired = current.clamp(min, self.spec.max_replicas.max(min));
            self.store_event(now, current, desired);
            return SyncResult { recommended: desired, desired, limit: Limit::Bounds };
        }
        let Some(usage) = metric_milli else {
            return SyncResult { recommended: current, desired: current, limit: Limit::NoMetric };
        };
        let (recommended, within) = self.recommend(current, usage);
        let (desired, limit) = match self.spec.behavior.clone() {
            None => self.normalize(now, current, recommended),
            Some(b) => self.normalize_with_behavior(now, &b, current, recommended),
        };
        let limit = if limit == Limit::Desired && within { Limit::Tolerance } else { limit };
        if desired != current {
            self.store_event(now, current, desired);
        }
        SyncResult { recommended, desired, limit }
    }

    /// The metric's replica count, and whether the tolerance held it.
    fn recommend(&self, current: i32, usage: i64) -> (i32, bool) {
        let (down, up) = self.tolerances();
        let within = |ratio: f64| (1.0 - down) <= ratio && ratio <= (1.0 + up);
        match self.spec.target {
            Target::AverageValue(target) => {
                let ratio = usage as f64 / (target as f64 * f64::from(current));
                if within(ratio) { (current, true) } else { (ceil_i32(usage as f64 / target as f64), false) }
            }
            Target::Value(target) => {
                let ratio = usage as f64 / target as f64;
                if within(ratio) { (current, true) } else { (ceil_i32(ratio * f64::from(current)), false) }
            }
        }
    }

    /// Without `behavior`: the downscale window's highest recommendation, then the default
    /// scale-up limit and the bounds.
    fn normalize(&mut self, now: i64, current: i32, recommended: i32) -> (i32, Limit) {
        let cutoff = now - self.flags.downscale_window_ms;
        let recs = self.recommendations.get_or_insert_with(Vec::new);
        let mut highest = recommended;
        let mut old = None;
        for (i, r) in recs.iter().enumerate() {
            if r.at < cutoff {
                old = Some(i);
            } else if r.value > highest {
                highest = r.value;
            }
        }
        let fresh = Stamped { value: recommended, at: now, outdated: false };
        match old {
            Some(i) => recs[i] = fresh,
            None => recs.push(fresh),
        }
        let up_limit = (2.0 * f64::from(current)).max(4.0) as i32;
        let max_allowed = self.spec.max_replicas.min(up_limit);
        let (desired, bound) = if highest < self.spec.min_replicas {
            (self.spec.min_replicas, Limit::Bounds)
        } else if highest > max_allowed {
            let why = if up_limit < self.spec.max_replicas { Limit::Rate } else { Limit::Bounds };
            (max_allowed, why)
        } else {
            (highest, Limit::Desired)
        };
        let limit = if highest != recommended && bound == Limit::Desired { Limit::Stabilized } else { bound };
        (desired, limit)
    }

    fn normalize_with_behavior(&mut self, now: i64, b: &Behavior, current: i32, recommended: i32) -> (i32, Limit) {
        let up_window = i64::from(b.scale_up.window_seconds.unwrap_or(0)) * 1000;
        let down_window = b.scale_down.window_seconds.map_or(self.flags.downscale_window_ms, |s| i64::from(s) * 1000);
        let stabilized = self.stabilize(now, current, recommended, up_window, down_window);
        let (min, max) = (self.spec.min_replicas, self.spec.max_replicas);
        let (desired, limit) = if stabilized > current {
            let limit = policy_limit(now, current, &self.up_events, &self.down_events, &b.scale_up, true).max(current);
            let (allowed, why) = if max > limit { (limit, Limit::Rate) } else { (max, Limit::Bounds) };
            if stabilized > allowed { (allowed, why) } else { (stabilized, Limit::Desired) }
        } else if stabilized < current {
            let limit =
                policy_limit(now, current, &self.up_events, &self.down_events, &b.scale_down, false).min(current);
            let (allowed, why) = if min < limit { (limit, Limit::Rate) } else { (min, Limit::Bounds) };
            if stabilized < allowed { (allowed, why) } else { (stabilized, Limit::Desired) }
        } else {
            (stabilized, Limit::Desired)
        };
        let limit = if stabilized != recommended && limit == Limit::Desired { Limit::Stabilized } else { limit };
        (desired, limit)
    }

    /// Between the scale-up window's lowest and the scale-down window's highest
    /// recommendation; records `recommended`, reusing a slot older than both windows.
    fn stabilize(&mut self, now: i64, current: i32, recommended: i32, up_window: i64, down_window: i64) -> i32 {
        let (up_cutoff, down_cutoff) = (now - up_window, now - down_window);
        let recs = self.recommendations.get_or_insert_with(Vec::new);
        let (mut up, mut down) = (recommended, recommended);
        let mut old = None;
        for (i, r) in recs.iter().enumerate() {
            if r.at > up_cutoff {
                up = up.min(r.value);
            }
            if r.at > down_cutoff {
                down = down.max(r.value);
            }
            if r.at < up_cutoff && r.at < down_cutoff {
                old = Some(i);
            }
        }
        let fresh = Stamped { value: recommended, at: now, outdated: false };
        match old {
            Some(i) => recs[i] = fresh,
            None => recs.push(fresh),
        }
        current.max(up).min(down)
    }

    /// Records a rescale as a scale event (only with `behavior`, like the controller),
    /// reusing a slot older than the direction's longest policy period.
    fn store_event(&mut self, now: i64, from: i32, to: i32) {
        let Some(b) = &self.spec.behavior else { return };
        let (events, rules, change) = if to > from {
            (&mut self.up_events, &b.scale_up, to - from)
        } else {
            (&mut self.down_events, &b.scale_down, from - to)
        };
        let cutoff = now - i64::from(rules.longest_period()) * 1000;
        for e in events.iter_mut() {
            if e.at < cutoff {
                e.outdated = true;
            }
        }
        let fresh = Stamped { value: change, at: now, outdated: false };
        match events.iter().rposition(|e| e.outdated) {
            Some(i) => events[i] = fresh,
            None => events.push(fresh),
        }
    }
}

fn ceil_i32(x: f64) -> i32 {
    let c = x.ceil();
    if c > f64::from(i32::MAX) { i32::MAX } else { c as i32 }
}

/// Replicas changed in the period ending `now` (events strictly after its start).
fn changed_in_period(now: i64, period_seconds: i32, events: &[Stamped]) -> i32 {
    let cutoff = now - i64::from(period_seconds) * 1000;
    events.iter().filter(|e| e.at > cutoff).map(|e| e.value).sum()
}

/// The replica count the direction's policies allow from `current`: each policy from the
/// count at the start of its period, and `selectPolicy` Max takes the largest change (the
/// highest count going up, the lowest going down), Min the smallest; Disabled none.
fn policy_limit(now: i64, current: i32, up: &[Stamped], down: &[Stamped], rules: &Rules, going_up: bool) -> i32 {
    if rules.select == SelectPolicy::Disabled {
        return current;
    }
    let highest = (rules.select == SelectPolicy::Max) == going_up;
    let mut result = if highest { i32::MIN } else { i32::MAX };
    for p in &rules.policies {
        let start =
            current - changed_in_period(now, p.period_seconds, up) + changed_in_period(now, p.period_seconds, down);
        let proposed = if going_up { up_proposal(p, start) } else { down_proposal(p, start) };
        result = if highest { result.max(proposed) } else { result.min(proposed) };
    }
    result
}

#[cfg(test)]
mod tests;
