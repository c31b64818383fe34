//! KEDA's half (v2.21): the metric its `kafka` trigger reports, and what its operator and
//! metrics server do around the HPA — activation and scale to zero, the fallback.
//!
//! The `kafka` trigger (`pkg/scalers/kafka_scaler.go`), per partition of the topic:
//! committed offset missing → with `offsetResetPolicy: latest` 1 (0 with
//! `scaleToZeroOnInvalidOffset`), with `earliest` the retained log `end − start` (0 with
//! `scaleToZeroOnInvalidOffset`); otherwise `end − committed` (the high watermark: KEDA reads
//! no last stable offset), or 0 with `excludePersistentLag` when the committed offset has not
//! moved since the previous poll. The total is capped at `partitions × lagThreshold` (or
//! the partitions with lag, `limitToPartitionsWithLag`) unless `allowIdleConsumers`;
//! `ensureEvenDistributionOfPartitions` first rounds it up to a divisor of the partition
//! count times the threshold. Active when the total (persistent lag included) is above
//! `activationLagThreshold`. The HPA target is `AverageValue: lagThreshold`.
//! `services/scaling/conformance/keda` runs KEDA's scaler on a real broker and requires this arithmetic.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// `offsetResetPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResetPolicy {
    #[default]
    Latest,
    Earliest,
}

/// The `kafka` trigger's metadata that changes the arithmetic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct KafkaTrigger {
    pub lag_threshold: i64,
    pub activation_lag_threshold: i64,
    pub offset_reset_policy: ResetPolicy,
    pub allow_idle_consumers: bool,
    pub limit_to_partitions_with_lag: bool,
    pub ensure_even_distribution_of_partitions: bool,
    pub exclude_persistent_lag: bool,
    pub scale_to_zero_on_invalid_offset: bool,
}

impl Default for KafkaTrigger {
    fn default() -> Self {
        Self {
            lag_threshold: 10,
            activation_lag_threshold: 0,
            offset_reset_policy: ResetPolicy::Latest,
            allow_idle_consumers: false,
            limit_to_partitions_with_lag: false,
            ensure_even_distribution_of_partitions: false,
            exclude_persistent_lag: false,
            scale_to_zero_on_invalid_offset: false,
        }
    }
}

/// One partition's offsets as KEDA reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionOffsets {
    /// The group's committed offset (`None`: none committed).
    pub committed: Option<i64>,
    /// The log start (KEDA reads it only for a partition without a committed offset).
    pub earliest: Option<i64>,
    /// The high watermark.
    pub latest: i64,
}

/// One poll of the trigger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KafkaMetric {
    /// The metric the HPA reads.
    pub lag: i64,
    /// With the persistent lag (`excludePersistentLag`) counted.
    pub lag_with_persistent: i64,
    pub active: bool,
}

/// The `kafka` trigger, with the committed offsets it remembers between polls.
#[derive(Debug, Clone, Default)]
pub struct KafkaScaler {
    pub trigger: KafkaTrigger,
    previous: HashMap<usize, i64>,
}

impl KafkaScaler {
    pub fn new(trigger: KafkaTrigger) -> Self {
        Self { trigger, previous: HashMap::new() }
    }

    /// (lag, lag with persistent) of partition `i`.
    fn partition(&mut self, i: usize, p: &PartitionOffsets) -> (i64, i64) {
        let t = &self.trigger;
        let Some(committed) = p.committed else {
            if t.scale_to_zero_on_invalid_offset {
                return (0, 0);
            }
            return match (t.offset_reset_policy, p.earliest) {
                (ResetPolicy::Latest, _) => (1, 1),
                (ResetPolicy::Earliest, Some(start)) => {
                    let lag = (p.latest - start).max(0);
                    (lag, lag)
                }
                (ResetPolicy::Earliest, None) => (p.latest, p.latest),
            };
        };
        let lag = p.latest - committed;
        if t.exclude_persistent_lag {
            match self.previous.insert(i, committed) {
                Some(before) if before == committed => return (0, lag),
                _ => {}
            }
        }
        (lag, lag)
    }

    /// One poll: the metric and activity.
    pub fn poll(&mut self, partitions: &[PartitionOffsets]) -> KafkaMetric {
        let (mut total, mut with_persistent, mut with_lag) = (0i64, 0i64, 0i64);
        for (i, p) in partitions.iter().enumerate() {
            let (lag, persistent) = self.partition(i, p);
            total += lag;
            with_persistent += persistent;
            if lag > 0 {
                with_lag += 1;
            }
        }
        let t = &self.trigger;
        let count = partitions.len() as i64;
        let threshold = t.lag_threshold.max(1);
        if !t.allow_idle_consumers || t.limit_to_partitions_with_lag || t.ensure_even_distribution_of_partitions {
            let mut upper = count;
            if t.ensure_even_distribution_of_partitions {
                total = next_factor(total, count, threshold) * threshold;
            }
            if t.limit_to_partitions_with_lag {
                upper = with_lag;
            }
            if total / threshold > upper {
                total = upper * threshold;
            }
        }
        KafkaMetric {
            lag: total,
            lag_with_persistent: with_persistent,
            active: with_persistent > t.activation_lag_threshold,
        }
    }
}

/// The smallest divisor of `partitions` whose multiple of `threshold` covers `lag`.
fn next_factor(lag: i64, partitions: i64, threshold: i64) -> i64 {
    (1..=partitions).filter(|f| partitions % f == 0).find(|f| f * threshold >= lag).unwrap_or(partitions)
}

/// KEDA's operator around the HPA for one ScaledObject: activation (scale from and to
/// zero when `minReplicaCount` is 0, after `cooldownPeriod`) and the fallback.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Operator {
    pub min_replica_count: i32,
    pub max_replica_count: i32,
    pub polling_interval_s: i64,
    pub cooldown_period_s: i64,
    /// `fallback`: past `failureThreshold` failed reads in a row the metric becomes the fallback's.
    pub fallback: Option<Fallback>,
}

/// `fallback`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Fallback {
    pub failure_threshold: u32,
    pub replicas: i32,
    /// `static` (the replicas) or `currentReplicasIfHigher` / `currentReplicasIfLower` /
    /// `currentReplicas`.
    #[serde(default)]
    pub behavior: FallbackBehavior,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FallbackBehavior {
    #[default]
    Static,
    CurrentReplicas,
    CurrentReplicasIfHigher,
    CurrentReplicasIfLower,
}

impl Fallback {
    /// The replicas the fallback metric asks for, at `current`.
    pub fn replicas(&self, current: i32) -> i32 {
        match self.behavior {
            FallbackBehavior::Static => self.replicas,
            FallbackBehavior::CurrentReplicas => current,
            FallbackBehavior::CurrentReplicasIfHigher => current.max(self.replicas),
            FallbackBehavior::CurrentReplicasIfLower => current.min(self.replicas),
        }
    }
}

/// What the operator remembers between polls.
#[derive(Debug, Clone, Default)]
pub struct OperatorState {
    /// The last poll at which the trigger was active, ms.
    pub last_active_ms: Option<i64>,
    pub failures: u32,
}

impl OperatorState {
    /// Counts a read of the metric (`ok: false` is a failure); whether the fallback applies:
    /// past `failureThreshold` failures in a row (KEDA's `>`).
    pub fn read(&mut self, ok: bool, fallback: Option<&Fallback>) -> bool {
        if ok {
            self.failures = 0;
        } else {
            self.failures += 1;
        }
        fallback.is_some_and(|f| self.failures > f.failure_threshold)
    }

    /// The operator's poll at `now_ms`: the replicas it sets itself, if any (from or to
    /// zero); the HPA decides everything in between.
    pub fn poll(&mut self, op: &Operator, now_ms: i64, current: i32, active: bool) -> Option<i32> {
        if active {
            self.last_active_ms = Some(now_ms);
            if current == 0 {
                return Some(op.min_replica_count.max(1));
            }
            return None;
        }
        if op.min_replica_count > 0 || current == 0 {
            return None;
        }
        let since = self.last_active_ms.unwrap_or(i64::MIN / 2);
        // KEDA: `lastActive + cooldown` strictly before now.
        (now_ms - since > op.cooldown_period_s * 1000).then_some(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(committed: Option<i64>, earliest: Option<i64>, latest: i64) -> PartitionOffsets {
        PartitionOffsets { committed, earliest, latest }
    }

    #[test]
    fn the_total_is_capped_at_partitions_times_the_threshold() {
        let mut s = KafkaScaler::new(KafkaTrigger { lag_threshold: 100, ..KafkaTrigger::default() });
        let m = s.poll(&[p(Some(0), None, 1_000), p(Some(0), None, 50)]);
        assert_eq!((m.lag, m.lag_with_persistent, m.active), (200, 1_050, true));
        let mut idle = KafkaScaler::new(KafkaTrigger {
            lag_threshold: 100,
            allow_idle_consumers: true,
            ..KafkaTrigger::default()
        });
        assert_eq!(idle.poll(&[p(Some(0), None, 1_000), p(Some(0), None, 50)]).lag, 1_050);
    }

    #[test]
    fn missing_offsets_follow_the_reset_policy() {
        let latest = KafkaTrigger { lag_threshold: 1_000, ..KafkaTrigger::default() };
        assert_eq!(KafkaScaler::new(latest.clone()).poll(&[p(None, None, 500)]).lag, 1);
        let earliest = KafkaTrigger { offset_reset_policy: ResetPolicy::Earliest, ..latest.clone() };
        assert_eq!(KafkaScaler::new(earliest.clone()).poll(&[p(None, Some(200), 500)]).lag, 300);
        let zero = KafkaTrigger { scale_to_zero_on_invalid_offset: true, ..earliest };
        assert_eq!(KafkaScaler::new(zero).poll(&[p(None, Some(200), 500)]).lag, 0);
    }

    #[test]
    fn persistent_lag_is_left_out_from_the_second_poll_that_sees_it() {
        let mut s = KafkaScaler::new(KafkaTrigger {
            lag_threshold: 10,
            exclude_persistent_lag: true,
            allow_idle_consumers: true,
            ..KafkaTrigger::default()
        });
        assert_eq!(s.poll(&[p(Some(5), None, 50)]).lag, 45);
        let m = s.poll(&[p(Some(5), None, 60)]);
        assert_eq!((m.lag, m.lag_with_persistent, m.active), (0, 55, true));
        assert_eq!(s.poll(&[p(Some(6), None, 60)]).lag, 54);
    }

    #[test]
    fn even_distribution_rounds_up_to_a_divisor() {
        let t =
            KafkaTrigger { lag_threshold: 10, ensure_even_distribution_of_partitions: true, ..KafkaTrigger::default() };
        let parts = vec![p(Some(0), None, 5); 12];
        assert_eq!(KafkaScaler::new(t.clone()).poll(&parts).lag, 60, "lag 60 → 6 × 10");
        let parts = vec![p(Some(0), None, 6); 12];
        assert_eq!(KafkaScaler::new(t).poll(&parts).lag, 120, "lag 72 → 12 × 10 (no divisor between 6 and 12)");
    }

    #[test]
    fn the_operator_scales_to_zero_after_the_cooldown_and_back_when_active() {
        let op = Operator {
            min_replica_count: 0,
            max_replica_count: 5,
            polling_interval_s: 30,
            cooldown_period_s: 300,
            fallback: None,
        };
        let mut s = OperatorState::default();
        assert_eq!(s.poll(&op, 0, 2, true), None);
        assert_eq!(s.poll(&op, 299_000, 2, false), None);
        assert_eq!(s.poll(&op, 300_000, 2, false), None, "not strictly past the cooldown");
        assert_eq!(s.poll(&op, 300_001, 2, false), Some(0));
        assert_eq!(s.poll(&op, 330_000, 0, true), Some(1));
        let f = Fallback { failure_threshold: 3, replicas: 4, behavior: FallbackBehavior::CurrentReplicasIfHigher };
        assert!((0..3).all(|_| !s.read(false, Some(&f))), "three failures: not yet");
        assert!(s.read(false, Some(&f)), "the fourth: the fallback");
        assert_eq!((f.replicas(2), f.replicas(6)), (4, 6));
        assert!(!s.read(true, Some(&f)));
    }
}
