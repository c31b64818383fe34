//! Replica counts that relieve a pod. A consumer group spreads P partitions over n
//! members, so some member holds `ceil(P / n)`; a count that leaves that maximum where
//! it was adds a pod and a rebalance and relieves no one. The useful counts are the
//! fewest that reach each maximum: `ceil(P / m)` for `m = ceil(P / n)` — for 12
//! partitions 1, 2, 3, 4, 6, 12; for 10, 1, 2, 3, 4, 5, 10 (KEDA's
//! `ensureEvenDistributionOfPartitions` keeps only the divisors, 1, 2, 5, 10, and so
//! skips 3 and 4, which also relieve every pod).

/// The most partitions one of `replicas` members holds.
pub fn most_per_member(partitions: u32, replicas: u32) -> u32 {
    if replicas == 0 { partitions } else { partitions.div_ceil(replicas) }
}

/// The fewest replicas that hold at most as many partitions per member as `replicas`
/// do; `partitions` for any count at or above it. 0 stays 0, and without partitions
/// nothing is snapped.
pub fn snap(partitions: u32, replicas: u32) -> u32 {
    if replicas == 0 || partitions == 0 {
        return replicas;
    }
    partitions.div_ceil(most_per_member(partitions, replicas))
}

/// The smallest useful count above `replicas` (`None` at or past `partitions`).
pub fn next_above(partitions: u32, replicas: u32) -> Option<u32> {
    (replicas + 1..=partitions).map(|n| snap(partitions, n)).find(|&n| n > replicas)
}

/// Every useful count for `partitions`, ascending.
pub fn useful_counts(partitions: u32) -> Vec<u32> {
    let mut out: Vec<u32> = (1..=partitions).map(|n| snap(partitions, n)).collect();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn twelve_partitions_have_six_useful_counts() {
        assert_eq!(useful_counts(12), vec![1, 2, 3, 4, 6, 12]);
        assert_eq!(useful_counts(10), vec![1, 2, 3, 4, 5, 10]);
        assert_eq!(snap(12, 11), 6, "11 members: someone still holds 2, as with 6");
        assert_eq!(snap(12, 5), 4);
        assert_eq!(snap(12, 40), 12);
        assert_eq!(next_above(12, 6), Some(12));
        assert_eq!(next_above(12, 7), Some(12));
        assert_eq!(next_above(12, 12), None);
    }

    proptest! {
        #[test]
        fn a_snapped_count_keeps_the_maximum_and_nothing_fewer_does(p in 1u32..200, n in 1u32..300) {
            let s = snap(p, n);
            prop_assert!(s <= n.min(p));
            prop_assert_eq!(most_per_member(p, s), most_per_member(p, n.min(p)));
            if s > 1 {
                prop_assert!(most_per_member(p, s - 1) > most_per_member(p, s));
            }
        }
    }
}
