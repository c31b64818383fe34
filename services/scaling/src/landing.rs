//! Where the HPA's rate limits can land a consumer group, and the policies the chart derives
//! so that they land only on counts that relieve a processor.
//!
//! The HPA applies the count it was asked for unless a `behavior` policy limits the step:
//! then it applies the limit, `start + value` (`Pods`) or `start × (1 ± value %)` (`Percent`)
//! from the count the group had at the start of the policy's period. Asked for 12 from 1
//! under `Pods 4 / Percent 100 per 15 s` it applies 5, then 10: counts at which some
//! processor still holds as many partitions as before ([`crate::partitions`]).
//!
//! Every count a group has had is one the HPA applied, so if every count asked for is useful
//! (Sluice's scaler asks only for those, and KEDA's `kafka` trigger does with
//! `ensureEvenDistributionOfPartitions`) and every policy lands a useful count from every
//! useful start, no useless count is ever applied. [`useless_landings`] checks the second
//! condition policy by policy, which holds whatever `selectPolicy` and periods combine
//! (the largest or smallest of useful counts is a useful count); the chart's template
//! applies the same check at render time (`helm/sluice/templates/_replicas.tpl`).
//!
//! No pacing policy keeps every landing useful for every partition count (12 partitions:
//! `+1` lands on 5 from 4, doubling on 8 from 4, halving on 4 → 2 but 9 partitions' 9 → 4),
//! so the derived policies never limit a step within `[minReplicas, maxReplicas]`: the pace
//! comes from the stabilization windows and the scaler's cooldown, not from the rate limits.

use std::collections::BTreeSet;

use crate::behavior::{Behavior, BehaviorSpec, Policy, PolicyType, RulesSpec, SelectPolicy};
use crate::partitions;

/// The period of the derived policies, seconds (the HPA's default).
pub const DERIVED_PERIOD_SECONDS: i32 = 15;

/// The chart's scale-up policies when its values give none: as many pods per period as the
/// group can have, so the HPA applies the count asked for.
pub fn derived_up(partitions: u32, max_replicas: i32) -> Vec<Policy> {
    let most = i32::try_from(partitions).unwrap_or(i32::MAX).max(max_replicas).max(1);
    vec![Policy { kind: PolicyType::Pods, value: most, period_seconds: DERIVED_PERIOD_SECONDS }]
}

/// The chart's scale-down policies when its values give none: the API server's own default,
/// 100 % per period, which lets the HPA go straight to the count the stabilization window
/// holds.
pub fn derived_down() -> Vec<Policy> {
    vec![Policy { kind: PolicyType::Percent, value: 100, period_seconds: DERIVED_PERIOD_SECONDS }]
}

/// `spec` with the derived policies wherever a direction gives none, as the chart renders it.
pub fn with_derived_policies(spec: &BehaviorSpec, partitions: u32, max_replicas: i32) -> BehaviorSpec {
    let fill = |rules: Option<&RulesSpec>, derived: Vec<Policy>| {
        let mut r = rules.cloned().unwrap_or_default();
        if r.policies.is_none() {
            r.policies = Some(derived);
        }
        Some(r)
    };
    BehaviorSpec {
        scale_up: fill(spec.scale_up.as_ref(), derived_up(partitions, max_replicas)),
        scale_down: fill(spec.scale_down.as_ref(), derived_down()),
    }
}

/// Which way a policy limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Up,
    Down,
}

/// A count a policy can land the group on that relieves no processor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Useless {
    pub direction: Direction,
    pub policy: Policy,
    /// The count at the start of the policy's period.
    pub from: i32,
    pub to: i32,
}

impl std::fmt::Display for Useless {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dir = match self.direction {
            Direction::Up => "scaleUp",
            Direction::Down => "scaleDown",
        };
        let (kind, unit) = (self.policy.kind, if self.policy.kind == PolicyType::Percent { " %" } else { "" });
        write!(
            f,
            "{dir} policy {kind:?} {}{unit} per {} s can land on {} (from {})",
            self.policy.value, self.policy.period_seconds, self.to, self.from
        )
    }
}

/// The counts one policy can land on from `start`: the limit, and for a `Percent` limit that
/// is a whole number the neighbour the controller's floating-point arithmetic may give
/// (`start × (1 ± value ÷ 100)` in float64 is exact when `value` is a multiple of 25).
fn limits(policy: &Policy, start: i32, direction: Direction) -> Vec<i32> {
    let (s, v) = (i64::from(start), i64::from(policy.value));
    let exact = |n: i64| i32::try_from(n).unwrap_or(i32::MAX);
    let inexact = |product: i64| product % 100 == 0 && v % 25 != 0;
    match (policy.kind, direction) {
        (PolicyType::Pods, Direction::Up) => vec![exact(s + v)],
        (PolicyType::Pods, Direction::Down) => vec![exact(s - v)],
        (PolicyType::Percent, Direction::Up) => {
            let product = s * (100 + v);
            let q = product.div_euclid(100) + i64::from(product.rem_euclid(100) != 0);
            if inexact(product) { vec![exact(q), exact(q + 1)] } else { vec![exact(q)] }
        }
        (PolicyType::Percent, Direction::Down) => {
            let product = s * (100 - v);
            let q = product.div_euclid(100);
            if inexact(product) { vec![exact(q), exact(q - 1)] } else { vec![exact(q)] }
        }
    }
}

/// Whether `n` relieves a processor, or is a bound the chart allowed (`minReplicas` 0, or
/// above the partitions with `allowMoreReplicasThanPartitions`).
fn fine(partitions: u32, n: i32) -> bool {
    n <= 0 || u32::try_from(n).is_ok_and(|n| n > partitions || partitions::snap(partitions, n) == n)
}

/// Every landing of `behavior`'s policies, from each useful count in `[min, max]`, on a count
/// that relieves no processor. A limit past a bound stops at it, as the HPA clamps; a bound
/// that relieves no processor is a setting of its own (the chart refuses it by name).
pub fn useless_landings(behavior: &Behavior, partitions: u32, min: i32, max: i32) -> Vec<Useless> {
    let lo = min.max(1);
    let starts: Vec<i32> = (lo..=max).filter(|&n| fine(partitions, n)).collect();
    let mut out = Vec::new();
    for (direction, rules) in [(Direction::Up, &behavior.scale_up), (Direction::Down, &behavior.scale_down)] {
        if rules.select == SelectPolicy::Disabled {
            continue;
        }
        for policy in &rules.policies {
            for &from in &starts {
                for to in limits(policy, from, direction) {
                    let to = to.clamp(lo, max);
                    let moved = if direction == Direction::Up { to > from } else { to < from };
                    if moved && !fine(partitions, to) && to != lo && to != max {
                        out.push(Useless { direction, policy: *policy, from, to });
                    }
                }
            }
        }
    }
    out.dedup();
    out
}

/// Every count in `[min, max]` the group can be at: the useful ones, and what the policies can
/// land on from any count reached, until nothing new is reached.
pub fn reachable(behavior: &Behavior, partitions: u32, min: i32, max: i32) -> BTreeSet<i32> {
    let lo = min.max(1);
    let mut reached: BTreeSet<i32> = (lo..=max).filter(|&n| fine(partitions, n)).chain([lo, max]).collect();
    let mut frontier: Vec<i32> = reached.iter().copied().collect();
    while let Some(from) = frontier.pop() {
        for (direction, rules) in [(Direction::Up, &behavior.scale_up), (Direction::Down, &behavior.scale_down)] {
            if rules.select == SelectPolicy::Disabled {
                continue;
            }
            for policy in &rules.policies {
                for to in limits(policy, from, direction) {
                    let to = to.clamp(lo, max);
                    if reached.insert(to) {
                        frontier.push(to);
                    }
                }
            }
        }
    }
    reached
}

#[cfg(test)]
mod tests;
