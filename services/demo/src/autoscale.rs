//! The decision rule KEDA + the HPA apply to a Kafka consumer, run locally:
//! the same arithmetic, on a shorter clock.
//!
//! - KEDA's Kafka scaler reports the group's total lag, capped at
//!   `partitions × lagThreshold` (`allowIdleConsumers=false`: no more
//!   replicas than partitions).
//! - The HPA (metric type `AverageValue`, target `lagThreshold`) wants
//!   `ceil(metric / lagThreshold)` replicas, unless
//!   `metric / (lagThreshold × current)` is within the 10 % tolerance of 1.
//! - Scale-up: no stabilization; at most `max(start + 4, 2 × start)` where
//!   `start` is the replica count one policy period (15 s) ago (the default
//!   policies, `selectPolicy: Max`).
//! - Scale-down: the highest recommendation within the stabilization
//!   window (default 300 s), at most 100 % per sync.
//! - Clamped to `[min, max]`.
//!
//! See `../shared/research/autoscaling.md` §1 and §2.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The rule's settings.
#[derive(Debug, Clone)]
pub struct Rule {
    /// Lag each replica is expected to carry (KEDA `lagThreshold`).
    pub lag_threshold: u64,
    pub min: u32,
    pub max: u32,
    pub partitions: u32,
    /// HPA tolerance (0.1).
    pub tolerance: f64,
    /// HPA scale-down stabilization window.
    pub down_window: Duration,
    /// The scale-up policies' period (15 s).
    pub up_period: Duration,
}

/// The autoscaler's memory: recent recommendations.
#[derive(Debug, Clone)]
pub struct Autoscaler {
    rule: Rule,
    recommendations: VecDeque<(Instant, u32)>,
    /// Replica counts decided, for the scale-up rate limit.
    history: VecDeque<(Instant, u32)>,
}

/// One decision and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub replicas: u32,
    /// The metric KEDA reports (total lag, capped).
    pub metric: u64,
    /// What the HPA's formula alone asked for.
    pub recommended: u32,
    pub why: &'static str,
}

impl Autoscaler {
    pub fn new(rule: Rule) -> Self {
        Self { rule, recommendations: VecDeque::new(), history: VecDeque::new() }
    }

    /// The replicas to run, given `current` and the group's `total_lag`, at `now`.
    pub fn decide(&mut self, now: Instant, current: u32, total_lag: u64) -> Decision {
        let r = &self.rule;
        let threshold = r.lag_threshold.max(1);
        let cap = u64::from(r.partitions) * threshold;
        let metric = if total_lag / threshold > u64::from(r.partitions) { cap } else { total_lag };
        let current = current.max(1);
        let ratio = metric as f64 / (threshold as f64 * f64::from(current));
        let within = (1.0 - r.tolerance..=1.0 + r.tolerance).contains(&ratio);
        let wanted = if within { current } else { metric.div_ceil(threshold) as u32 };
        let recommended = wanted.clamp(r.min.max(1), r.max);
        self.recommendations.push_back((now, recommended));
        while self.recommendations.front().is_some_and(|(t, _)| now.duration_since(*t) > r.down_window) {
            self.recommendations.pop_front();
        }
        self.history.push_back((now, current));
        while self.history.front().is_some_and(|(t, _)| now.duration_since(*t) > r.up_period) {
            self.history.pop_front();
        }
        // Replicas at the start of the policy period: the fewest seen in it.
        let start = self.history.iter().map(|(_, n)| *n).min().unwrap_or(current);
        let (replicas, why) = if recommended > current {
            let limit = (start + 4).max(start * 2).max(current);
            if recommended > limit { (limit, "scale up (rate-limited)") } else { (recommended, "scale up") }
        } else if recommended < current {
            let stabilized = self.recommendations.iter().map(|(_, n)| *n).max().unwrap_or(recommended);
            if stabilized >= current {
                (current, "hold (scale-down stabilization)")
            } else {
                (stabilized, "scale down")
            }
        } else if within {
            (current, "hold (within tolerance)")
        } else {
            (current, "hold")
        };
        let replicas = replicas.clamp(r.min.max(1), r.max);
        self.history.push_back((now, replicas));
        Decision { replicas, metric, recommended, why }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(window_s: u64) -> Rule {
        Rule {
            lag_threshold: 100,
            min: 1,
            max: 10,
            partitions: 12,
            tolerance: 0.1,
            down_window: Duration::from_secs(window_s),
            up_period: Duration::from_secs(15),
        }
    }

    fn scaler(window_s: u64) -> Autoscaler {
        Autoscaler::new(rule(window_s))
    }

    #[test]
    fn replicas_follow_ceil_of_lag_over_threshold_outside_the_tolerance() {
        let mut a = scaler(0);
        let t = Instant::now();
        assert_eq!(a.decide(t, 1, 350).replicas, 4);
        // 4 replicas carrying 420 = ratio 1.05: within 10 %, held.
        let d = a.decide(t, 4, 420);
        assert_eq!((d.replicas, d.why), (4, "hold (within tolerance)"));
        assert_eq!(a.decide(t, 4, 460).replicas, 5, "ratio 1.15 scales");
        let later = t + Duration::from_secs(1);
        assert_eq!(a.decide(later, 5, 0).replicas, 1, "no window: straight down to min");
    }

    #[test]
    fn scale_up_is_rate_limited_and_capped_at_max() {
        let mut a = scaler(0);
        let t = Instant::now();
        assert_eq!(a.decide(t, 1, 100_000).replicas, 5, "max(1 + 4, 2 × 1)");
        let soon = t + Duration::from_secs(5);
        assert_eq!(a.decide(soon, 5, 100_000).replicas, 5, "still within the 15 s period that started at 1");
        let later = t + Duration::from_secs(20);
        assert_eq!(a.decide(later, 5, 100_000).replicas, 10, "a new period: max(9, 10), then the max of 10");
        let d = a.decide(later, 10, 100_000);
        assert_eq!((d.metric, d.replicas), (1_200, 10), "KEDA caps the metric at partitions × threshold");
    }

    #[test]
    fn scale_down_waits_for_the_stabilization_window() {
        let mut a = scaler(30);
        let t = Instant::now();
        assert_eq!(a.decide(t, 1, 600).replicas, 5);
        let later = t + Duration::from_secs(10);
        let d = a.decide(later, 5, 50);
        assert_eq!((d.replicas, d.why), (5, "hold (scale-down stabilization)"));
        // Past the window the high recommendation has expired.
        assert_eq!(a.decide(t + Duration::from_secs(45), 5, 50).replicas, 1);
    }

    #[test]
    fn the_tolerance_keeps_twelve_partitions_from_reaching_twelve_replicas() {
        // The research's pitfall: with 11 replicas and the metric capped at
        // 12 × threshold, the ratio 12/11 = 1.09 is within the tolerance.
        let mut a = Autoscaler::new(Rule { max: 12, ..rule(0) });
        assert_eq!(a.decide(Instant::now(), 11, 1_000_000).replicas, 11);
    }
}
